"""`--dry-run` for the scaling role and `revert-all`: every decision is made as usual, on
the cluster as it is, and every write is sent, but as a dry run the real server validates
and never stores.

`DryRunKube` reads through to the API server; each write is first logged (`dry_run_change`:
the plan, one line a write), then sent with `dryRun=All`. The server runs it through
validation, admission and the RBAC check as it would the real write and answers with the
object as the write would have left it, so the rest of the apply or revert runs as it would;
a write it would refuse (an invalid bound, a missing permission, a stale resourceVersion)
is refused now, and shows as the real run would show it (an error event, a
`scaling_write_refused` line). Kubernetes Events are sent the same way. `DryRunEvents`
stands where the scaling outbox would: the events a real run would queue are logged
(`dry_run_event`, an apply's with the tool that deploys its target: `managed_by`) and
dropped. The caller gives the reconciler an in-memory store
(`IN_MEMORY`), so no file is written either.

How it fails: as `ScalingKube` does; nothing is ever stored on the server.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import msgspec
import structlog

from kube.api import KubeApi
from kube.workloads import Deployment, Hpa
from kube.writes import WriteOptions
from scheduler.kubeapi import FIELD_MANAGER, Obj, ScalingKube
from shipper.records import ScalingEvent

log = structlog.get_logger("scheduler.dryrun")

IN_MEMORY = ":memory:"  # a Store path: SQLite's in-memory database
DRY_RUN = WriteOptions(field_manager=FIELD_MANAGER, dry_run=True)


class DryRunKube(ScalingKube):
    def __init__(self, api: KubeApi) -> None:
        super().__init__(api, options=DRY_RUN)

    def patch_deployment(self, namespace: str, name: str, patch: Obj) -> Deployment:
        _intend("patch", "deployment", namespace, name, patch=_shown(patch))
        return super().patch_deployment(namespace, name, patch)

    def create_hpa(self, namespace: str, name: str, body: Obj) -> Hpa:
        _intend("create", "horizontalpodautoscaler", namespace, name, spec=body.get("spec"))
        return super().create_hpa(namespace, name, body)

    def apply_hpa(self, namespace: str, name: str, config: Obj) -> Hpa:
        _intend("apply", "horizontalpodautoscaler", namespace, name, config=_shown(config))
        return super().apply_hpa(namespace, name, config)

    def patch_hpa(self, namespace: str, name: str, patch: Obj) -> Hpa:
        _intend("patch", "horizontalpodautoscaler", namespace, name, patch=_shown(patch))
        return super().patch_hpa(namespace, name, patch)

    def delete_hpa(self, namespace: str, name: str, *, uid: str, resource_version: str) -> None:
        _intend("delete", "horizontalpodautoscaler", namespace, name)
        super().delete_hpa(namespace, name, uid=uid, resource_version=resource_version)

    def record_event(
        self, involved: Hpa | Deployment, *, reason: str, message: str, warning: bool = False
    ) -> None:
        log.debug(
            "dry_run_kube_event",
            kind=involved.resource.kind,
            namespace=involved.metadata.namespace,
            name=involved.metadata.name,
            reason=reason,
            message=message,
        )
        super().record_event(involved, reason=reason, message=message, warning=warning)


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
                **({} if event.details is msgspec.UNSET else event.details),
            )

    def clear_resync_needed(self) -> None:
        """Nothing to clear: nothing was ever lost."""


def _shown(patch: Obj) -> Obj:
    """The patch as logged: the resourceVersion precondition says nothing to a reader, and of
    a managedFields list (a hand-back) the managers and what each owns of the spec say it."""
    shown = copy.deepcopy(patch)
    meta = shown.get("metadata") or {}
    meta.pop("resourceVersion", None)
    if "managedFields" in meta:
        meta["managedFields"] = [
            {
                "manager": entry.get("manager"),
                "operation": entry.get("operation"),
                "spec": sorted((entry.get("fieldsV1") or {}).get("f:spec") or {}),
            }
            for entry in meta["managedFields"]
        ]
    return shown


def _intend(verb: str, kind: str, namespace: str, name: str, **change: Any) -> None:
    log.info("dry_run_change", verb=verb, kind=kind, namespace=namespace, name=name, **change)
