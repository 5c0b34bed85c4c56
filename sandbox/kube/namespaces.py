"""Namespaces as kube-apiserver and kube-controller-manager keep them.

Admission (the NamespaceLifecycle plugin, HTTP writes only): creating an object in a
namespace that does not exist is 404 `namespaces "x" not found`; in one being terminated,
403 with a `NamespaceTerminating` cause; `default`, `kube-system` and `kube-public` may not
be deleted (403). Python-side creates skip admission, so tests may seed objects into
namespaces they never made.

The namespace controller, always running: once a namespace is marked for deletion (phase
`Terminating`) it deletes every object in it, records on the namespace the conditions the
real controller sets, and when nothing is left removes the `kubernetes` finalizer from
`spec.finalizers` and deletes the namespace. Objects with finalizers of their own keep it
`Terminating` (NamespaceFinalizersRemaining) until they go. Sources:
https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/,
plugin/pkg/admission/namespace/lifecycle/admission.go and
pkg/controller/namespace/deletion/namespaced_resources_deleter.go.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

from sandbox.kube import resources, status, strategy
from sandbox.kube.controllers import register
from sandbox.kube.resources import RESOURCES, Resource
from sandbox.kube.store import Change, Store, timestamp

CONTROLLER = "namespace"
PROTECTED = ("default", "kube-public", "kube-system")
NAMESPACES = resources.resolve("namespaces")


def check_create(store: Store, resource: Resource, obj: dict[str, Any]) -> None:
    """Refuse a create into a missing or terminating namespace, as NamespaceLifecycle does."""
    if not resource.namespaced:
        return
    namespace = obj["metadata"]["namespace"]
    try:
        found = store.get(NAMESPACES, None, namespace).decode()
    except status.ApiError:
        raise status.not_found(NAMESPACES, namespace) from None
    if strategy.deleting(found):
        name = str(obj["metadata"].get("name") or "")
        error = status.forbidden_object(
            resource,
            name,
            f"unable to create new content in namespace {namespace} because it is being terminated",
        )
        assert error.details is not None
        error.details["causes"] = [
            {
                "reason": "NamespaceTerminating",
                "message": f"namespace {namespace} is being terminated",
                "field": "metadata.namespace",
            }
        ]
        raise error


def check_delete(resource: Resource, name: str) -> None:
    if strategy.is_namespace(resource) and name in PROTECTED:
        raise status.forbidden_object(resource, name, "this namespace may not be deleted")


@register(CONTROLLER)
class NamespaceController:
    """Empties and then removes namespaces marked for deletion."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._terminating: set[str] = set()
        self._sweeping: set[str] = set()

    def react(self, resource: Resource, change: Change) -> None:
        entry = change.entry
        if resource is NAMESPACES:
            if change.type == "DELETED":
                self._terminating.discard(entry.name)
            elif b'"deletionTimestamp"' in entry.item:
                self._terminating.add(entry.name)
                self._sweep(entry.name)
        elif change.type == "DELETED" and entry.namespace in self._terminating:
            self._sweep(entry.namespace)

    def _sweep(self, namespace: str) -> None:
        if namespace in self._sweeping:  # our own deletes come back here
            return
        self._sweeping.add(namespace)
        try:
            for resource, name in self._contents(namespace):
                with contextlib.suppress(status.ApiError):  # a cascade took it first
                    self._store.delete(resource, namespace, name)
            left = self._contents(namespace)
            finalizers = Counter(
                finalizer
                for resource, name in left
                for finalizer in self._store.get(resource, namespace, name)
                .decode()["metadata"]
                .get("finalizers", ())
            )
            self._report(namespace, Counter(resource.qualified for resource, _ in left), finalizers)
            if not left:
                self._finish(namespace)
        finally:
            self._sweeping.discard(namespace)

    def _contents(self, namespace: str) -> list[tuple[Resource, str]]:
        found = []
        for resource in RESOURCES:
            if resource.namespaced:
                _, entries = self._store.snapshot(resource, namespace)
                found.extend((resource, entry.name) for entry in entries)
        return found

    def _report(self, namespace: str, remaining: Counter[str], finalizers: Counter[str]) -> None:
        wanted = _conditions(remaining, finalizers)

        def update(obj: dict[str, Any]) -> dict[str, Any]:
            conditions = obj.setdefault("status", {}).get("conditions") or []
            since = {c["type"]: c for c in conditions}
            now = timestamp()
            for condition in wanted:
                before = since.get(condition["type"])
                same = before is not None and before.get("status") == condition["status"]
                condition["lastTransitionTime"] = before["lastTransitionTime"] if same else now
            obj["status"]["conditions"] = wanted
            return obj

        self._store.modify(NAMESPACES, None, namespace, update)

    def _finish(self, namespace: str) -> None:
        def finalize(obj: dict[str, Any]) -> dict[str, Any]:
            spec = obj.setdefault("spec", {})
            spec["finalizers"] = [
                f for f in spec.get("finalizers", ()) if f != strategy.NAMESPACE_FINALIZER
            ]
            if not spec["finalizers"]:
                del spec["finalizers"]
            return obj

        self._store.modify(NAMESPACES, None, namespace, finalize)
        self._store.delete(NAMESPACES, None, namespace)


def _conditions(remaining: Counter[str], finalizers: Counter[str]) -> list[dict[str, Any]]:
    """The five conditions of namespace deletion, worded as the real controller words them."""
    content = ", ".join(
        f"{name} has {n} resource instances" for name, n in sorted(remaining.items())
    )
    held = ", ".join(f"{name} in {n} resource instances" for name, n in sorted(finalizers.items()))
    rows = [
        (
            "NamespaceDeletionDiscoveryFailure",
            False,
            "ResourcesDiscovered",
            "All resources successfully discovered",
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            False,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed",
        ),
        (
            "NamespaceDeletionContentFailure",
            False,
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization",
        ),
        (
            "NamespaceContentRemaining",
            True,
            "SomeResourcesRemain",
            f"Some resources are remaining: {content}",
        )
        if remaining
        else (
            "NamespaceContentRemaining",
            False,
            "ContentRemoved",
            "All content successfully removed",
        ),
        (
            "NamespaceFinalizersRemaining",
            True,
            "SomeFinalizersRemain",
            f"Some content in the namespace has finalizers remaining: {held}",
        )
        if finalizers
        else (
            "NamespaceFinalizersRemaining",
            False,
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished",
        ),
    ]
    return [
        {"type": kind, "status": str(true), "reason": reason, "message": message}
        for kind, true, reason, message in rows
    ]
