"""Nodes -> `node` records (key `name`): an inventory snapshot, not live usage.

Capacity and allocatable (cpu, memory, ephemeral storage, pods), conditions (without the
kubelet's heartbeat times, which change every few seconds), the software the node runs,
where it runs (instance type, region and zone from the well-known labels, current or
beta, and the provider ID), taints, schedulability and labels minus those the user
ignores (`Context.ignore_node_labels`, exact keys or globs). Instance type, region and
zone are read from all labels, ignored ones included: they are record fields of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from collector import sanitize
from collector.filters import without_keys
from collector.model import ObjectMeta
from collector.normalize.base import Context, PerObject
from collector.sanitize import Condition, Quantity

RESOURCES = {
    "cpu": "cpu",
    "memory": "memory",
    "ephemeral-storage": "ephemeral_storage",
    "pods": "pods",
}
# Current label first; the beta one still appears on older nodes.
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")


class Taint(msgspec.Struct, frozen=True, gc=False):
    key: str = ""
    value: str | None = None
    effect: str = ""


class NodeSpec(msgspec.Struct, frozen=True, gc=False):
    provider_id: str | None = msgspec.field(default=None, name="providerID")
    unschedulable: bool | None = None
    taints: list[Taint] | None = None


class NodeInfo(msgspec.Struct, rename="camel", frozen=True, gc=False):
    kubelet_version: str | None = None
    container_runtime_version: str | None = None
    os_image: str | None = None
    architecture: str | None = None
    operating_system: str | None = None


class NodeStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    capacity: dict[str, Quantity] | None = None
    allocatable: dict[str, Quantity] | None = None
    conditions: list[Condition] | None = None
    node_info: NodeInfo = msgspec.field(default_factory=NodeInfo)


class Node(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


def node_data(obj: Node, ctx: Context) -> dict[str, Any]:
    meta, spec, status = obj.metadata, obj.spec, obj.status
    info = status.node_info
    return {
        "capacity": _resources(status.capacity),
        "allocatable": _resources(status.allocatable),
        # Kubelet messages are free text that some node agents stamp with times.
        "conditions": sanitize.conditions(status.conditions, message=False),
        "node_info": {
            "kubelet_version": info.kubelet_version,
            "container_runtime_version": info.container_runtime_version,
            "os_image": info.os_image,
            "architecture": info.architecture,
            "operating_system": info.operating_system,
        },
        "instance_type": _first(meta.labels, INSTANCE_TYPE_LABELS),
        "region": _first(meta.labels, REGION_LABELS),
        "zone": _first(meta.labels, ZONE_LABELS),
        "provider_id": spec.provider_id,
        "unschedulable": bool(spec.unschedulable),
        "taints": [
            {"key": t.key, "value": t.value, "effect": t.effect}
            for t in sorted(spec.taints or [], key=lambda t: (t.key, t.effect, t.value or ""))
        ],
        "labels": without_keys(meta.labels, ctx.ignore_node_labels),
        "created_at": meta.creation_timestamp,
    }


def _resources(values: Mapping[str, Quantity] | None) -> dict[str, str | None]:
    values = values or {}
    return {
        field: None if values.get(name) is None else str(values[name])
        for name, field in RESOURCES.items()
    }


def _first(labels: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    return next((labels[key] for key in keys if labels.get(key)), None)


NORMALIZER = PerObject(kind="node", source="Node", struct=Node, data=node_data)
