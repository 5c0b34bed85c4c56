"""Services -> `service` records (key `namespace/name`).

Type, selector, ports and addresses: what tells which pods a Service fronts and how it is
reached. Selector-less Services (`selector: null`) front no pods of a Deployment.
"""

from __future__ import annotations

from typing import Any

import msgspec

from collector import sanitize
from collector.model import Int64, ObjectMeta
from collector.normalize.base import Context, PerObject


class ServicePort(msgspec.Struct, rename="camel", frozen=True, gc=False):
    name: str | None = None
    port: Int64 | None = None
    target_port: Int64 | str | None = None
    protocol: str = "TCP"
    node_port: Int64 | None = None


class ServiceSpec(msgspec.Struct, rename="camel", frozen=True, gc=False):
    type: str = "ClusterIP"
    selector: dict[str, str] | None = None
    ports: list[ServicePort] | None = None
    # The API spells these acronyms in capitals, which camel renaming would not.
    cluster_ip: str | None = msgspec.field(default=None, name="clusterIP")
    cluster_ips: list[str] | None = msgspec.field(default=None, name="clusterIPs")
    external_ips: list[str] | None = msgspec.field(default=None, name="externalIPs")
    external_name: str | None = None


class LoadBalancerIngress(msgspec.Struct, frozen=True, gc=False):
    ip: str | None = None
    hostname: str | None = None


class LoadBalancerStatus(msgspec.Struct, frozen=True, gc=False):
    ingress: list[LoadBalancerIngress] | None = None


class ServiceStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    load_balancer: LoadBalancerStatus | None = None


class Service(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ServiceSpec = msgspec.field(default_factory=ServiceSpec)
    status: ServiceStatus = msgspec.field(default_factory=ServiceStatus)


def load_balancer(status: LoadBalancerStatus | None) -> list[dict[str, str | None]]:
    """Addresses a load balancer was given (Services and Ingresses report them alike)."""
    return [
        {"ip": entry.ip, "hostname": entry.hostname}
        for entry in (status.ingress if status else None) or []
    ]


def service_data(obj: Service, ctx: Context) -> dict[str, Any]:
    meta, spec = obj.metadata, obj.spec
    return {
        "type": spec.type,
        "selector": sanitize.labels(spec.selector) if spec.selector is not None else None,
        "ports": [
            {
                "name": p.name,
                "port": p.port,
                "target_port": p.target_port,
                "protocol": p.protocol,
                "node_port": p.node_port,
            }
            for p in spec.ports or []
        ],
        "cluster_ip": spec.cluster_ip,
        "cluster_ips": spec.cluster_ips or [],
        "external_ips": sorted(spec.external_ips or []),
        "external_name": spec.external_name,
        "load_balancer": load_balancer(obj.status.load_balancer),
        "labels": sanitize.labels(meta.labels),
        "annotations": sanitize.safe_annotations(meta.annotations),
        "created_at": meta.creation_timestamp,
    }


NORMALIZER = PerObject(kind="service", source="Service", struct=Service, data=service_data)
