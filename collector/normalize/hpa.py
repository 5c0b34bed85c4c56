"""HorizontalPodAutoscalers (autoscaling/v2) -> `hpa` records (key `namespace/name`).

A record holds the bounds, the scale target, the metrics and their targets, the scaling
behavior exactly as the API gives it (it is policy, not secret) and the status at sync
time: current and desired replicas, last scale time and conditions. Current metric values
are left out: they move with load, and would make every status write of a busy HPA a new
record.
"""

from __future__ import annotations

from typing import Any

import msgspec

from collector import sanitize
from collector.model import Int64, ObjectMeta, past_int64
from collector.normalize.base import Context, PerObject
from collector.sanitize import Condition, LabelSelector, Quantity
from collector.skips import NUMBER_OUT_OF_RANGE, SkippedObject


class ObjectRef(msgspec.Struct, rename="camel", frozen=True, gc=False):
    kind: str = ""
    name: str = ""
    api_version: str | None = None


class MetricIdentifier(msgspec.Struct, frozen=True, gc=False):
    name: str = ""
    selector: LabelSelector | None = None


class MetricValue(msgspec.Struct, rename="camel", frozen=True, gc=False):
    type: str | None = None
    value: Quantity | None = None
    average_value: Quantity | None = None
    average_utilization: Int64 | None = None


class MetricSource(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """Any of the five metric sources; each uses some of these fields."""

    name: str | None = None
    container: str | None = None
    metric: MetricIdentifier | None = None
    described_object: ObjectRef | None = None
    target: MetricValue | None = None


class Metric(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """A spec metric: which source, and its target."""

    type: str = ""
    resource: MetricSource | None = None
    container_resource: MetricSource | None = None
    pods: MetricSource | None = None
    object: MetricSource | None = None
    external: MetricSource | None = None


class HpaSpec(msgspec.Struct, rename="camel", frozen=True, gc=False):
    scale_target_ref: ObjectRef = msgspec.field(default_factory=ObjectRef)
    min_replicas: Int64 | None = None
    max_replicas: Int64 | None = None
    metrics: list[Metric] | None = None
    behavior: dict[str, Any] | None = None


class HpaStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    current_replicas: Int64 | None = None
    desired_replicas: Int64 | None = None
    last_scale_time: str | None = None
    conditions: list[Condition] | None = None


class HorizontalPodAutoscaler(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: HpaSpec = msgspec.field(default_factory=HpaSpec)
    status: HpaStatus = msgspec.field(default_factory=HpaStatus)


def min_replicas(spec: HpaSpec) -> int:
    """`minReplicas` defaults to 1 when the API leaves it out."""
    return 1 if spec.min_replicas is None else spec.min_replicas


def hpa_data(obj: HorizontalPodAutoscaler, ctx: Context) -> dict[str, Any]:
    meta, spec, status = obj.metadata, obj.spec, obj.status
    target = spec.scale_target_ref
    if past_int64(spec.behavior):
        raise SkippedObject(NUMBER_OUT_OF_RANGE, "$.spec.behavior")
    return {
        "min_replicas": min_replicas(spec),
        "max_replicas": spec.max_replicas,
        "target": {"kind": target.kind, "name": target.name, "api_version": target.api_version},
        "metrics": [_metric(m) for m in spec.metrics or []],
        "behavior": spec.behavior,
        "status": {
            "current_replicas": status.current_replicas,
            "desired_replicas": status.desired_replicas,
            "last_scale_time": status.last_scale_time,
            "conditions": sanitize.conditions(status.conditions),
        },
        "labels": sanitize.labels(meta.labels),
        "annotations": sanitize.safe_annotations(meta.annotations),
        "created_at": meta.creation_timestamp,
    }


def _metric(metric: Metric) -> dict[str, Any]:
    source = (
        metric.resource
        or metric.container_resource
        or metric.pods
        or metric.object
        or metric.external
        or MetricSource()
    )
    identifier = source.metric
    described = source.described_object
    return {
        "type": metric.type,
        "name": identifier.name if identifier else source.name,
        "container": source.container,
        "selector": sanitize.selector(identifier.selector) if identifier else None,
        "described_object": (
            {"kind": described.kind, "name": described.name, "api_version": described.api_version}
            if described
            else None
        ),
        "target": _value(source.target),
    }


def _value(value: MetricValue | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {
        "type": value.type,
        "value": _quantity(value.value),
        "average_value": _quantity(value.average_value),
        "average_utilization": value.average_utilization,
    }


def _quantity(value: Quantity | None) -> str | None:
    return None if value is None else str(value)


NORMALIZER = PerObject(
    kind="hpa", source="HorizontalPodAutoscaler", struct=HorizontalPodAutoscaler, data=hpa_data
)
