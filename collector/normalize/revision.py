"""ReplicaSets owned by a Deployment -> `revision` records (key `namespace/replicaset`).

Each ReplicaSet of a Deployment is one rollout. Its record says which Deployment it
belongs to, its revision number, how it was made (`gitops` when Argo CD or Flux marks the
objects, `helm` when Helm manages them, else `rollout`), whether it is the current
revision, its replica counts, the change cause, the pod template's labels, annotations,
containers and images (so the platform can tell which container changed between two
revisions), and the Services and HPA related to the Deployment.

ReplicaSets without a Deployment controller give no records. The HPA part is a snapshot
taken when the record was made: the record's `observed_at` is its time. It is not
repeated inside `data`, where a clock reading would make every rebuild look like a change.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import msgspec

from collector import sanitize
from collector.model import Int64, ObjectMeta, delete, upsert
from collector.normalize.base import Context, Lookups
from collector.normalize.deployment import (
    helm_context,
    hpa_link,
    pod_template_data,
    revision_number,
)
from collector.sanitize import CHANGE_CAUSE, PodTemplate
from shipper.records import Record

ACTOR_ANNOTATION = "moonin.app/actor"
NOTES_ANNOTATION = "moonin.app/rollout-notes"
# Label or annotation key prefixes Argo CD and Flux put on the objects they apply.
_GITOPS_PREFIXES = ("argocd.argoproj.io/", "fluxcd.io/")
_GITOPS_INFIXES = (".toolkit.fluxcd.io/",)


class ReplicaSetSpec(msgspec.Struct, rename="camel", frozen=True, gc=False):
    replicas: Int64 | None = None
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class ReplicaSetStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    replicas: Int64 | None = None
    ready_replicas: Int64 | None = None
    available_replicas: Int64 | None = None


class ReplicaSet(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ReplicaSetSpec = msgspec.field(default_factory=ReplicaSetSpec)
    status: ReplicaSetStatus = msgspec.field(default_factory=ReplicaSetStatus)


def owning_deployment(meta: ObjectMeta) -> str | None:
    """The Deployment that controls a ReplicaSet, from its controller ownerReference."""
    owner = meta.controller()
    return owner.name if owner is not None and owner.kind == "Deployment" else None


def rollout_type(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    return _rollout_type(labels, annotations, helm_context(labels, annotations))


def _rollout_type(
    labels: Mapping[str, str], annotations: Mapping[str, str], helm: dict[str, Any] | None
) -> str:
    """`rollout_type`, given the object's `helm_context` (its record carries it too)."""
    if any(map(_gitops_key, labels)) or any(map(_gitops_key, annotations)):
        return "gitops"
    return "rollout" if helm is None else "helm"


@functools.lru_cache(maxsize=4096)
def _gitops_key(key: str) -> bool:
    """Whether a label or annotation key is one Argo CD or Flux put. Remembered per key: a
    cluster has a few dozen keys, each on thousands of objects."""
    return key.startswith(_GITOPS_PREFIXES) or any(infix in key for infix in _GITOPS_INFIXES)


def revision_data(obj: ReplicaSet, deployment: str, lookups: Lookups) -> dict[str, Any]:
    meta, spec, status = obj.metadata, obj.spec, obj.status
    namespace = meta.namespace or ""
    template = spec.template
    helm = helm_context(meta.labels, meta.annotations)
    return {
        "deployment": deployment,
        "number": revision_number(meta.annotations),
        "type": _rollout_type(meta.labels, meta.annotations, helm),
        "created_at": meta.creation_timestamp,
        "desired_replicas": 1 if spec.replicas is None else spec.replicas,
        "current_replicas": status.replicas or 0,
        "ready_replicas": status.ready_replicas or 0,
        "available_replicas": status.available_replicas or 0,
        "change_cause": _annotation(meta.annotations, CHANGE_CAUSE),
        "actor": _annotation(meta.annotations, ACTOR_ANNOTATION),
        "notes": _annotation(meta.annotations, NOTES_ANNOTATION),
        "annotations": sanitize.safe_annotations(meta.annotations),
        **pod_template_data(template),
        **revision_relations(namespace, meta.name, deployment, template.metadata.labels, lookups),
        "helm": helm,
    }


def revision_relations(
    namespace: str,
    replicaset: str,
    deployment: str,
    template_labels: Mapping[str, str],
    lookups: Lookups,
) -> dict[str, Any]:
    """The fields of a revision record that other kinds decide (rebuilt when they change)."""
    current = lookups.current_revision(namespace, deployment)
    if current is None:
        state = "unknown"
    else:
        state = "current" if current.replicaset == replicaset else "old"
    return {
        "status": state,
        "services": sorted(lookups.services_selecting(namespace, template_labels)),
        "hpa": hpa_link(lookups.hpa_for(namespace, deployment)),
    }


def _annotation(annotations: Mapping[str, str], key: str) -> str | None:
    value = annotations.get(key)
    return None if value is None else sanitize.annotation_value(key, value)


class RevisionNormalizer:
    kind = "revision"
    source = "ReplicaSet"
    struct = ReplicaSet

    def upserts(self, obj: ReplicaSet, ctx: Context) -> list[Record]:
        deployment = owning_deployment(obj.metadata)
        if deployment is None:
            return []
        return [upsert(self.kind, obj.metadata, revision_data(obj, deployment, ctx.lookups))]

    def deletes(self, obj: ReplicaSet, ctx: Context) -> list[Record]:
        if owning_deployment(obj.metadata) is None:
            return []
        return [delete(self.kind, obj.metadata)]

    def relink(self, data: dict[str, Any], meta: ObjectMeta, lookups: Lookups) -> dict[str, Any]:
        """A record's data with the relation fields decided again (no object needed)."""
        return {
            **data,
            **revision_relations(
                meta.namespace or "",
                meta.name,
                data["deployment"],
                data["template"]["labels"],
                lookups,
            ),
        }


NORMALIZER = RevisionNormalizer()
