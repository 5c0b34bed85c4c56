"""NetworkPolicies -> `network_policy` records (key `namespace/name`).

The pods a policy applies to, its policy types, and each ingress and egress rule's peers
(pod and namespace selectors, IP blocks) and ports. Absent and empty differ here: a rule
without `from`/`to` admits every peer, so `null` is kept distinct from `[]`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from collector import sanitize
from collector.model import Int64, ObjectMeta
from collector.normalize.base import Context, PerObject
from collector.sanitize import LabelSelector


class IpBlock(msgspec.Struct, frozen=True, gc=False):
    cidr: str = ""
    except_: list[str] | None = msgspec.field(default=None, name="except")


class Peer(msgspec.Struct, rename="camel", frozen=True, gc=False):
    pod_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    ip_block: IpBlock | None = None


class PolicyPort(msgspec.Struct, rename="camel", frozen=True, gc=False):
    protocol: str = "TCP"
    port: Int64 | str | None = None
    end_port: Int64 | None = None


class IngressRule(msgspec.Struct, frozen=True, gc=False):
    from_: list[Peer] | None = msgspec.field(default=None, name="from")
    ports: list[PolicyPort] | None = None


class EgressRule(msgspec.Struct, frozen=True, gc=False):
    to: list[Peer] | None = None
    ports: list[PolicyPort] | None = None


class NetworkPolicySpec(msgspec.Struct, rename="camel", frozen=True, gc=False):
    pod_selector: LabelSelector | None = None
    policy_types: list[str] | None = None
    ingress: list[IngressRule] | None = None
    egress: list[EgressRule] | None = None


class NetworkPolicy(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NetworkPolicySpec = msgspec.field(default_factory=NetworkPolicySpec)


def network_policy_data(obj: NetworkPolicy, ctx: Context) -> dict[str, Any]:
    meta, spec = obj.metadata, obj.spec
    return {
        "pod_selector": sanitize.selector(spec.pod_selector),
        "policy_types": sorted(spec.policy_types or []),
        "ingress": (
            None
            if spec.ingress is None
            else [
                {"from": _peers(rule.from_), "ports": _ports(rule.ports)} for rule in spec.ingress
            ]
        ),
        "egress": (
            None
            if spec.egress is None
            else [{"to": _peers(rule.to), "ports": _ports(rule.ports)} for rule in spec.egress]
        ),
        "labels": sanitize.labels(meta.labels),
        "annotations": sanitize.safe_annotations(meta.annotations),
        "created_at": meta.creation_timestamp,
    }


def _peers(peers: list[Peer] | None) -> list[dict[str, Any]] | None:
    if peers is None:
        return None
    return [
        {
            "pod_selector": sanitize.selector(peer.pod_selector),
            "namespace_selector": sanitize.selector(peer.namespace_selector),
            "ip_block": (
                {"cidr": peer.ip_block.cidr, "except": sorted(peer.ip_block.except_ or [])}
                if peer.ip_block
                else None
            ),
        }
        for peer in peers
    ]


def _ports(ports: list[PolicyPort] | None) -> list[dict[str, Any]] | None:
    if ports is None:
        return None
    return [{"protocol": p.protocol, "port": p.port, "end_port": p.end_port} for p in ports]


NORMALIZER = PerObject(
    kind="network_policy", source="NetworkPolicy", struct=NetworkPolicy, data=network_policy_data
)
