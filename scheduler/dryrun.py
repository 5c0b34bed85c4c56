"""`--dry-run` for the scaling role and `revert-all`: every decision is made as usual, on
the cluster as it is, but each change is logged instead of made.

`DryRunKube` reads through to the API server and answers each write with the object as
the write would have left it (so the rest of the apply or revert runs as it would), after
one `dry_run_change` log line. `DryRunEvents` stands where the scaling outbox would: the
events a real run would queue are logged (`dry_run_event`) and dropped. The caller gives
the reconciler an in-memory store (`IN_MEMORY`), so no file is written either.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import structlog

from scheduler.kubeapi import HPA_API_VERSION, HPA_KIND, Obj, ScalingKube
from shipper.records import ScalingEvent

log = structlog.get_logger("scheduler.dryrun")

IN_MEMORY = ":memory:"  # a Store path: SQLite's in-memory database
DRY_RUN_UID = "dry-run"


class DryRunKube(ScalingKube):
    def patch_deployment(self, namespace: str, name: str, patch: Obj) -> Obj:
        _intend("patch", "deployment", namespace, name, patch=_shown(patch))
        return _patched(self.get_deployment(namespace, name), patch)

    def create_hpa(self, namespace: str, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        _intend("create", "horizontalpodautoscaler", namespace, name, spec=body.get("spec"))
        created = copy.deepcopy(body)
        created.setdefault("apiVersion", HPA_API_VERSION)
        created.setdefault("kind", HPA_KIND)
        created["metadata"].update(uid=DRY_RUN_UID, resourceVersion="0")
        return created

    def patch_hpa(self, namespace: str, name: str, patch: Obj) -> Obj:
        _intend("patch", "horizontalpodautoscaler", namespace, name, patch=_shown(patch))
        return _patched(self.get_hpa(namespace, name), patch)

    def delete_hpa(self, namespace: str, name: str, *, uid: str, resource_version: str) -> None:
        _intend("delete", "horizontalpodautoscaler", namespace, name)

    def record_event(
        self, involved: Obj, *, reason: str, message: str, warning: bool = False
    ) -> None:
        metadata = involved["metadata"]
        log.debug(
            "dry_run_kube_event",
            kind=involved.get("kind"),
            namespace=metadata["namespace"],
            name=metadata["name"],
            reason=reason,
            message=message,
        )


class DryRunEvents:
    """In place of the scaling outbox stream: never at its bound, never asking for a
    resync, keeping nothing."""

    resync_needed = False
    at_bound = False
    epoch = "dry-run"

    def put(self, events: Iterable[ScalingEvent]) -> None:
        for event in events:
            log.info(
                "dry_run_event",
                type=event.type,
                id=event.id,
                template=event.template_id,
                action=event.action_id,
                reason=event.reason,
            )

    def clear_resync_needed(self) -> None:
        """Nothing to clear: nothing was ever lost."""


def _patched(obj: Obj, patch: Obj) -> Obj:
    merged: Obj = merge_patch(obj, patch)  # a dict patch always yields a dict
    return merged


def merge_patch(target: Any, patch: Any) -> Any:
    """`target` with a JSON merge patch (RFC 7386) applied: None removes a key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _shown(patch: Obj) -> Obj:
    """The patch as logged: the resourceVersion precondition says nothing to a reader."""
    shown = copy.deepcopy(patch)
    (shown.get("metadata") or {}).pop("resourceVersion", None)
    return shown


def _intend(verb: str, kind: str, namespace: str, name: str, **change: Any) -> None:
    log.info("dry_run_change", verb=verb, kind=kind, namespace=namespace, name=name, **change)
