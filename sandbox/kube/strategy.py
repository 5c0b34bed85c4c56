"""Per-kind rules the store applies to every write, as upstream's registry strategies and
`rest.BeforeCreate`/`BeforeUpdate`/`BeforeDelete` do.

- Create and update: empty `labels`, `annotations`, `finalizers` and `ownerReferences` are
  left out, as Go's encoder leaves ObjectMeta's empty `omitempty` fields.
- Create: a Namespace starts `Active` with the `kubernetes` finalizer in `spec.finalizers`
  (pkg/registry/core/namespace/strategy.go); kinds with a generation start at 1.
- Update: the generation counts spec changes, and for Deployments annotation changes too
  ("annotations are copied from deployments to their replica sets",
  pkg/registry/apps/deployment/strategy.go); a client cannot set it. `deletionTimestamp` and
  `deletionGracePeriodSeconds` cannot be changed or removed, and no finalizer may be added
  once they are set (staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go).
- Delete: an object with finalizers is marked instead (`deletionTimestamp` now,
  `deletionGracePeriodSeconds: 0`, the generation bumped if it has one: markAsDeleting in
  staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go); it goes when an
  update leaves it without finalizers. A Namespace always waits for the namespace
  controller (phase `Terminating`). Pods have no kubelet here to confirm a graceful
  deletion, so they go at once, as a pod that never reached a node does upstream.
Source: https://kubernetes.io/docs/concepts/overview/working-with-objects/finalizers/.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import status
from sandbox.kube.resources import Resource

NAMESPACE_FINALIZER = "kubernetes"


def is_namespace(resource: Resource) -> bool:
    return resource.plural == "namespaces" and not resource.group


# ObjectMeta's lists and maps are `omitempty`: an empty one is not stored.
OMITTED_WHEN_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences")


def _omit_empty(metadata: dict[str, Any]) -> None:
    for field in OMITTED_WHEN_EMPTY:
        if field in metadata and metadata[field] in ({}, []):
            del metadata[field]


def prepare_create(resource: Resource, obj: dict[str, Any]) -> None:
    _omit_empty(obj["metadata"])
    if resource.generation and not obj["metadata"].get("generation"):
        obj["metadata"]["generation"] = 1
    if is_namespace(resource):
        spec = obj.setdefault("spec", {})
        finalizers = spec.setdefault("finalizers", [])
        if NAMESPACE_FINALIZER not in finalizers:
            finalizers.append(NAMESPACE_FINALIZER)
        obj.setdefault("status", {}).setdefault("phase", "Active")


def prepare_update(resource: Resource, new: dict[str, Any], old: dict[str, Any]) -> None:
    """`new` as the server would store it over `old` (identity already carried over)."""
    metadata, kept = new["metadata"], old["metadata"]
    _omit_empty(metadata)
    for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        if field in kept:
            metadata[field] = kept[field]
        else:
            metadata.pop(field, None)
    if "deletionTimestamp" in kept:
        added = [f for f in metadata.get("finalizers") or () if f not in kept.get("finalizers", ())]
        if added:
            listed = ", ".join(status.go_value(name) for name in added)
            raise status.invalid_object(
                resource,
                kept["name"],
                [
                    status.forbidden_field(
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers []string{{{listed}}}",
                    )
                ],
            )
    if resource.generation:
        generation = kept.get("generation") or 1
        if _spec_changed(resource, new, old):
            generation += 1
        metadata["generation"] = generation
    elif "generation" in kept:
        metadata["generation"] = kept["generation"]
    else:
        metadata.pop("generation", None)


def _spec_changed(resource: Resource, new: dict[str, Any], old: dict[str, Any]) -> bool:
    if new.get("spec") != old.get("spec"):
        return True
    if resource.kind == "Deployment":
        return new["metadata"].get("annotations") != old["metadata"].get("annotations")
    return False


def waits_on_delete(resource: Resource, obj: dict[str, Any]) -> bool:
    """Whether a delete marks the object instead of removing it. A namespace is always
    marked first, and goes only once `spec.finalizers` is empty too."""
    if obj["metadata"].get("finalizers"):
        return True
    if is_namespace(resource):
        return not deleting(obj) or bool((obj.get("spec") or {}).get("finalizers"))
    return False


def mark_deleting(resource: Resource, obj: dict[str, Any], now: str) -> None:
    metadata = obj["metadata"]
    if "deletionTimestamp" not in metadata:
        if metadata.get("generation"):
            metadata["generation"] += 1
        metadata["deletionTimestamp"] = now
    if is_namespace(resource):
        obj.setdefault("status", {})["phase"] = "Terminating"
    else:
        metadata["deletionGracePeriodSeconds"] = 0


def finalized(obj: dict[str, Any]) -> bool:
    """An object whose deletion waited for finalizers and has none left: it goes now
    (upstream's shouldDeleteDuringUpdate: no finalizers and a grace period of 0)."""
    metadata = obj["metadata"]
    return metadata.get("deletionGracePeriodSeconds") == 0 and not metadata.get("finalizers")


def deleting(obj: dict[str, Any]) -> bool:
    return "deletionTimestamp" in obj["metadata"]
