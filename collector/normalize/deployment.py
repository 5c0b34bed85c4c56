"""Deployments -> `deployment` records (key `namespace/name`).

A record carries the rollout state (replica counts, strategy, paused, conditions), the pod
template as the sanitizer allows it (labels, annotations, containers, images), the
relationships other kinds supply through `Lookups` (Services selecting its pods, the HPA
targeting it, the current ReplicaSet) and the Helm context its labels and annotations
declare. Heartbeat-like fields (`lastUpdateTime` of conditions, `observedGeneration`)
are not decoded, so a status refresh that changes nothing meaningful gives equal data.

The Helm and revision-number helpers here serve the revision normalizer as well.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from collector import sanitize
from collector.model import Int64, ObjectMeta, delete, parse_int64, upsert
from collector.normalize.base import Context, HpaRef, Lookups
from collector.sanitize import Condition, LabelSelector, PodTemplate
from shipper.records import Record

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
_HELM_RELEASE = "meta.helm.sh/release-name"
_HELM_RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
_HELM_CHART = "helm.sh/chart"
_MANAGED_BY = "app.kubernetes.io/managed-by"
# `helm.sh/chart` is `<name>-<semver>` (with `+` written `_`); names may hold dashes.
_CHART = re.compile(r"^(?P<name>.+?)-(?P<version>v?\d+\.\d+\.\d+(?:[-_][0-9A-Za-z.\-_]*)?)$")


class RollingUpdate(msgspec.Struct, rename="camel", frozen=True, gc=False):
    max_surge: Int64 | str | None = None
    max_unavailable: Int64 | str | None = None


class Strategy(msgspec.Struct, rename="camel", frozen=True, gc=False):
    type: str | None = None
    rolling_update: RollingUpdate | None = None


class DeploymentSpec(msgspec.Struct, rename="camel", frozen=True, gc=False):
    replicas: Int64 | None = None
    selector: LabelSelector | None = None
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)
    strategy: Strategy | None = None
    paused: bool | None = None


class DeploymentStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    replicas: Int64 | None = None
    ready_replicas: Int64 | None = None
    available_replicas: Int64 | None = None
    updated_replicas: Int64 | None = None
    unavailable_replicas: Int64 | None = None
    conditions: list[Condition] | None = None


class Deployment(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeploymentSpec = msgspec.field(default_factory=DeploymentSpec)
    status: DeploymentStatus = msgspec.field(default_factory=DeploymentStatus)


def revision_number(annotations: Mapping[str, str]) -> int | None:
    """The rollout number the Deployment controller writes on Deployments and ReplicaSets."""
    text = annotations.get(REVISION_ANNOTATION)
    return None if text is None else parse_int64(text)


def helm_context(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> dict[str, Any] | None:
    """Release and chart a Helm-managed object declares; None when nothing says Helm."""
    release = annotations.get(_HELM_RELEASE)
    chart = labels.get(_HELM_CHART)
    managed = labels.get(_MANAGED_BY, "").lower() == "helm"
    if not (release or chart or managed):
        return None
    match = _CHART.match(chart) if chart else None
    return {
        "release": release,
        "release_namespace": annotations.get(_HELM_RELEASE_NAMESPACE),
        "chart": chart,
        "chart_name": match["name"] if match else chart,
        "chart_version": match["version"] if match else None,
    }


def hpa_link(ref: HpaRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {"name": ref.name, "min_replicas": ref.min_replicas, "max_replicas": ref.max_replicas}


def pod_template_data(template: sanitize.PodTemplate) -> dict[str, Any]:
    """What Deployment and revision records say of a pod template."""
    return {
        "template": {
            "labels": sanitize.labels(template.metadata.labels),
            "annotations": sanitize.safe_annotations(template.metadata.annotations),
        },
        **sanitize.pod_containers(template.spec),
    }


def deployment_relations(
    namespace: str,
    name: str,
    template_labels: Mapping[str, str],
    annotations: Mapping[str, str],
    lookups: Lookups,
) -> dict[str, Any]:
    """The fields of a Deployment record that other kinds decide (rebuilt when they change)."""
    current = lookups.current_revision(namespace, name)
    hpa = lookups.hpa_for(namespace, name)
    number = revision_number(annotations)
    return {
        "services": sorted(lookups.services_selecting(namespace, template_labels)),
        "hpa": hpa_link(hpa),
        "has_hpa": hpa is not None,
        "revision": number if number is not None else (current.number if current else None),
        "current_replicaset": current.replicaset if current else None,
        "last_deployed_at": current.created_at if current else None,
    }


def deployment_data(obj: Deployment, lookups: Lookups) -> dict[str, Any]:
    meta, spec, status = obj.metadata, obj.spec, obj.status
    namespace = meta.namespace or ""
    template = spec.template
    strategy = spec.strategy or Strategy()
    rolling = strategy.rolling_update
    return {
        "desired_replicas": 1 if spec.replicas is None else spec.replicas,
        "current_replicas": status.replicas or 0,
        "ready_replicas": status.ready_replicas or 0,
        "available_replicas": status.available_replicas or 0,
        "updated_replicas": status.updated_replicas or 0,
        "unavailable_replicas": status.unavailable_replicas or 0,
        "strategy": {
            "type": strategy.type,
            "max_surge": rolling.max_surge if rolling else None,
            "max_unavailable": rolling.max_unavailable if rolling else None,
        },
        "paused": bool(spec.paused),
        "labels": sanitize.labels(meta.labels),
        "annotations": sanitize.safe_annotations(meta.annotations),
        "selector": sanitize.selector(spec.selector),
        **pod_template_data(template),
        **deployment_relations(
            namespace, meta.name, template.metadata.labels, meta.annotations, lookups
        ),
        "conditions": sanitize.conditions(status.conditions),
        "helm": helm_context(meta.labels, meta.annotations),
        "created_at": meta.creation_timestamp,
    }


class DeploymentNormalizer:
    kind = "deployment"
    source = "Deployment"
    struct = Deployment

    def upserts(self, obj: Deployment, ctx: Context) -> list[Record]:
        return [upsert(self.kind, obj.metadata, deployment_data(obj, ctx.lookups))]

    def deletes(self, obj: Deployment, ctx: Context) -> list[Record]:
        return [delete(self.kind, obj.metadata)]

    def relink(self, data: dict[str, Any], meta: ObjectMeta, lookups: Lookups) -> dict[str, Any]:
        """A record's data with the relation fields decided again (no object needed)."""
        return {
            **data,
            **deployment_relations(
                meta.namespace or "",
                meta.name,
                data["template"]["labels"],
                data["annotations"],
                lookups,
            ),
        }


NORMALIZER = DeploymentNormalizer()
