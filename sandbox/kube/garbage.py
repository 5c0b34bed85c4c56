"""The garbage collector (controller `garbage-collector`, opt-in): dependents follow their
owners by `metadata.ownerReferences` (matched by uid), as kube-controller-manager's does.

- An object whose owners are all gone (deleted, or a uid that no longer matches) is
  deleted: Background deletion removes the owner at once and its dependents after it, so
  deleting a Deployment deletes its ReplicaSets, then their Pods. An object with an owner
  left keeps living, without the references to owners that are gone.
- Foreground: the owner waits with `foregroundDeletion`; every dependent is deleted (those
  with dependents of their own in the foreground too), and once no dependent with
  `blockOwnerDeletion: true` is left, the finalizer is removed and the owner goes.
- Orphan: the owner waits with `orphan`; its dependents lose their reference to it, then
  the finalizer is removed and the owner goes.
An object already being deleted is left to its own finalizers. Sources:
https://kubernetes.io/docs/concepts/architecture/garbage-collection/,
https://kubernetes.io/docs/concepts/overview/working-with-objects/owners-dependents/ and
pkg/controller/garbagecollector/garbagecollector.go (attemptToDeleteItem).
"""

from __future__ import annotations

import contextlib
from typing import Any

from sandbox.kube import resources, status, strategy
from sandbox.kube.controllers import register
from sandbox.kube.deletion import FOREGROUND, ORPHAN, DeleteOptions
from sandbox.kube.resources import RESOURCES, Resource
from sandbox.kube.store import Change, Entry, Store

CONTROLLER = "garbage-collector"
_POLICY = {ORPHAN: "Orphan", FOREGROUND: "Foreground"}


@register(CONTROLLER)
class GarbageCollector:
    def __init__(self, store: Store) -> None:
        self._store = store

    def react(self, resource: Resource, change: Change) -> None:
        entry = change.entry
        if change.type == "DELETED":
            for dependent in self._dependents(resource, entry):
                self._settle(*dependent)
            self._unblock_owners(resource, entry)
            return
        if b'"deletionTimestamp"' not in entry.item and b'"ownerReferences"' not in entry.item:
            return  # most writes: nothing for the collector, and no decode
        obj = entry.decode()
        metadata = obj["metadata"]
        finalizers = metadata.get("finalizers") or ()
        if strategy.deleting(obj):
            if FOREGROUND in finalizers:
                self._foreground(resource, entry)
            elif ORPHAN in finalizers:
                self._orphan(resource, entry)
        elif metadata.get("ownerReferences") and (
            change.prev is None
            or change.prev.decode()["metadata"].get("ownerReferences")
            != metadata["ownerReferences"]
        ):
            self._settle(resource, entry.namespace, entry.name)

    # owners -------------------------------------------------------------------------------

    def _foreground(self, resource: Resource, owner: Entry) -> None:
        for dependent in self._dependents(resource, owner):
            self._settle(*dependent)
        self._unblock(resource, owner.namespace, owner.name)

    def _orphan(self, resource: Resource, owner: Entry) -> None:
        for kind, namespace, name in self._dependents(resource, owner):
            self._drop_references(kind, namespace, name, {owner.uid})
        self._remove_finalizer(resource, owner.namespace, owner.name, ORPHAN)

    def _unblock_owners(self, resource: Resource, gone: Entry) -> None:
        """A dependent went: owners waiting in the foreground for it may go now."""
        for reference in gone.decode()["metadata"].get("ownerReferences") or ():
            found = self._owner(resource, gone.namespace, reference)
            if found is not None:
                kind, entry = found
                self._unblock(kind, entry.namespace, entry.name)

    def _unblock(self, resource: Resource, namespace: str, name: str) -> None:
        try:
            owner = self._store.get(resource, namespace, name)
        except status.ApiError:
            return
        obj = owner.decode()
        if not strategy.deleting(obj) or FOREGROUND not in obj["metadata"].get("finalizers", ()):
            return
        for kind, dependent_namespace, dependent in self._dependents(resource, owner):
            references = self._store.get(kind, dependent_namespace, dependent).decode()
            for reference in references["metadata"].get("ownerReferences") or ():
                if reference.get("uid") == owner.uid and reference.get("blockOwnerDeletion"):
                    return
        self._remove_finalizer(resource, namespace, name, FOREGROUND)

    # dependents ---------------------------------------------------------------------------

    def _settle(self, resource: Resource, namespace: str, name: str) -> None:
        """attemptToDeleteItem: delete a dependent without a living owner, or forget the
        owners it lost."""
        try:
            entry = self._store.get(resource, namespace, name)
        except status.ApiError:
            return
        obj = entry.decode()
        metadata = obj["metadata"]
        if strategy.deleting(obj):
            return
        references = metadata.get("ownerReferences") or ()
        solid, lost, waiting = [], set(), False
        for reference in references:
            if _kind_of(reference) is None:  # the real collector never deletes what it
                solid.append(reference)  # cannot check
                continue
            found = self._owner(resource, namespace, reference)
            if found is None:
                lost.add(reference.get("uid"))
                continue
            owner = found[1].decode()["metadata"]
            if "deletionTimestamp" in owner and FOREGROUND in owner.get("finalizers", ()):
                lost.add(reference.get("uid"))
                waiting = True
            else:
                solid.append(reference)
        if not lost:
            return
        if solid:
            self._drop_references(resource, namespace, name, lost)
            return
        finalizers = metadata.get("finalizers") or ()
        policy = next((_POLICY[f] for f in (ORPHAN, FOREGROUND) if f in finalizers), None)
        if waiting and policy is None and self._dependents(resource, entry):
            policy = "Foreground"
        self._store.delete(resource, namespace, name, DeleteOptions(propagation=policy))

    def _owner(
        self, dependent: Resource, namespace: str, reference: dict[str, Any]
    ) -> tuple[Resource, Entry] | None:
        """The owner a reference names, if it exists with that uid."""
        kind = _kind_of(reference)
        if kind is None:
            return None
        try:
            owner = self._store.get(kind, namespace if kind.namespaced else None, reference["name"])
        except (status.ApiError, KeyError):
            return None
        return (kind, owner) if owner.uid == reference.get("uid") else None

    def _dependents(self, resource: Resource, owner: Entry) -> list[tuple[Resource, str, str]]:
        """What names `owner` (by uid) among its namespace's objects, or everyone's when it
        is cluster-scoped."""
        uid = owner.uid.encode()
        namespace = owner.namespace if resource.namespaced else None
        found = []
        for kind in RESOURCES:
            if namespace is not None and not kind.namespaced:
                continue
            for entry in self._store.snapshot(kind, namespace)[1]:
                if uid in entry.item and any(
                    reference.get("uid") == owner.uid
                    for reference in entry.decode()["metadata"].get("ownerReferences") or ()
                ):
                    found.append((kind, entry.namespace, entry.name))
        return found

    # writes -------------------------------------------------------------------------------

    def _drop_references(
        self, resource: Resource, namespace: str, name: str, uids: set[Any]
    ) -> None:
        def drop(obj: dict[str, Any]) -> dict[str, Any]:
            metadata = obj["metadata"]
            kept = [r for r in metadata.get("ownerReferences") or () if r.get("uid") not in uids]
            if kept:
                metadata["ownerReferences"] = kept
            else:
                metadata.pop("ownerReferences", None)
            return obj

        self._modify(resource, namespace, name, drop)

    def _remove_finalizer(self, resource: Resource, namespace: str, name: str, gone: str) -> None:
        def remove(obj: dict[str, Any]) -> dict[str, Any]:
            metadata = obj["metadata"]
            kept = [f for f in metadata.get("finalizers") or () if f != gone]
            if kept:
                metadata["finalizers"] = kept
            else:
                metadata.pop("finalizers", None)
            return obj

        self._modify(resource, namespace, name, remove)

    def _modify(self, resource: Resource, namespace: str, name: str, change: Any) -> None:
        with contextlib.suppress(status.ApiError):  # gone meanwhile: nothing to change
            self._store.modify(resource, namespace or None, name, change)


def _kind_of(reference: dict[str, Any]) -> Resource | None:
    try:
        return resources.for_object(
            {"apiVersion": reference.get("apiVersion"), "kind": reference.get("kind")}
        )
    except KeyError:
        return None
