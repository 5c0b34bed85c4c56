"""Applying one action of an active template to its Deployment's HPA.

In order: the IGNORE_RESOURCES globs and the Deployment (missing: `deployment_not_found`;
annotated `scaling.moonin.app/ignore: "true"`: `ignored`), then the autoscaling/v2 HPA whose
`scaleTargetRef` is that Deployment. What happens next depends on the HPA:

- none: a provisional HPA is created (named after the Deployment; see
  `scheduler.names.provisional_hpa_name`);
- not managed: its min and max (and whole spec) are kept as originals, then replaced;
- managed by this template, action and window: nothing to do when the managed hash and the
  other annotations match (a re-apply is a no-op and emits nothing); a changed min:max is
  written with a new apply event; a changed `run_until`, name or priority only updates the
  annotations; min or max changed by someone else: left alone (the revert scan releases it
  as `overridden`);
- managed by another owner whose window is still on: `conflict`, nothing is written;
- being deleted (`metadata.deletionTimestamp`, held by a finalizer): nothing is written and
  no provisional HPA is made beside it; a later cycle applies once it is gone (a Deployment
  being deleted likewise gets nothing);
- managed by an owner whose window is over: taken over in one write. The old window's
  revert event goes out first; its originals are kept (they are the state before any
  window), unless someone else changed min or max, whose values are then the originals.

A window released by an `overridden` or `manual` revert (the RELEASED marker on the HPA or
the Deployment) is skipped silently. Every write carries the resourceVersion that was read.
After a write: the apply event, a Kubernetes Event on the HPA when min:max changed, and the
Deployment's replicas raised to the new min when below it (checked on every cycle, since a
409 on that write is retried the next cycle).

How it fails: `apply_action` returns an outcome and never raises for Kubernetes answers:
403 is a `forbidden` error event, 409 is counted and retried on the next cycle, a 400 or
422 (the server refused what was written: a bug) is logged as `scaling_write_refused` at
error level, other API errors are logged and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import structlog

from kube.errors import BadRequest, Conflict, Forbidden, Invalid, KubeError, NotFound
from kube.globs import DEPLOYMENT, HPA, ResourceGlobs
from scheduler import annotations as notes
from scheduler import events, names
from scheduler.actions import Action, InvalidAction
from scheduler.cycle import APPLIED, REVERTED, Cycle
from scheduler.kubeapi import HPA_API_VERSION, HPA_KIND, Obj
from scheduler.managed import is_overridden, revert_event
from scheduler.objects import (
    bounds,
    find_hpa,
    ref,
    replicas,
    spec_of,
    stated_bounds,
    terminating,
)

log = structlog.get_logger("scheduler.apply")

Outcome = Literal["applied", "unchanged", "error", "released", "overridden", "retry", "failed"]
# Decides whether the window an HPA is managed for is over, and why (None: still on).
ReasonFor = Callable[[Obj, notes.Managed], events.RevertReason | None]

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "moonin-agent"
# A provisional HPA scales on CPU like an HPA created with no metrics would by default,
# written out so it does not depend on the API server's defaulting.
PROVISIONAL_METRICS = (
    {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    },
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Planned:
    """An action of an active template, in its window."""

    template_id: str
    template_name: str
    window_start: str
    run_until: str
    action: Action

    @property
    def owner(self) -> tuple[str, str, str]:
        return (self.template_id, self.action.id, self.window_start)

    @property
    def managed_hash(self) -> str:
        action = self.action
        return notes.managed_hash(
            self.template_id,
            action.id,
            self.window_start,
            action.min_replicas,
            action.max_replicas,
        )


def action_window(
    template_id: str, action: Action | InvalidAction, window_start: str, run_until: str
) -> events.Window:
    return events.Window(
        template_id=template_id,
        action_id=action.id,
        namespace=action.namespace,
        deployment=action.deployment,
        min_replicas=action.min_replicas,
        max_replicas=action.max_replicas,
        window_start=window_start,
        run_until=run_until,
    )


def action_error(
    cycle: Cycle,
    *,
    template_id: str,
    window_start: str,
    run_until: str,
    action: Action | InvalidAction,
    reason: str,
    message: str,
) -> bool:
    """Report an action's error once per window; True when it was new."""
    event = events.action_error(
        cluster_id=cycle.cluster_id,
        window=action_window(template_id, action, window_start, run_until),
        reason=reason,
        message=message,
        now=cycle.now,
    )
    return cycle.emit_error(
        event,
        log,
        "scaling_action_error",
        action=action.id,
        namespace=action.namespace,
        deployment=action.deployment,
    )


def apply_action(
    cycle: Cycle, planned: Planned, *, ignore: ResourceGlobs, reason_for: ReasonFor
) -> Outcome:
    action = planned.action
    where = {"template": planned.template_id, "action": action.id, "target": action.target}
    try:
        return _apply(cycle, planned, ignore, reason_for)
    except Forbidden as exc:
        _error(cycle, planned, "forbidden", str(exc))
        return "error"
    except Conflict as exc:
        # Someone wrote between our read and our write: the next cycle reads again.
        cycle.count("conflicts")
        log.info("scaling_apply_conflict", error=str(exc), **where)
        return "retry"
    except (BadRequest, Invalid) as exc:
        # The server refused what we wrote: a bug here, which retrying will not fix.
        cycle.count("apply_failures")
        log.error("scaling_write_refused", status=exc.status, error=str(exc), **where)
        return "failed"
    except KubeError as exc:
        cycle.count("apply_failures")
        log.warning("scaling_apply_failed", status=exc.status, error=str(exc), **where)
        return "failed"


def _apply(cycle: Cycle, planned: Planned, ignore: ResourceGlobs, reason_for: ReasonFor) -> Outcome:
    action = planned.action
    if ignore.matches(DEPLOYMENT, action.namespace, action.deployment):
        _error(cycle, planned, "ignored", f"deployment {action.target} matches IGNORE_RESOURCES")
        return "error"
    try:
        deployment = cycle.kube.get_deployment(action.namespace, action.deployment)
    except NotFound:
        _error(cycle, planned, "deployment_not_found", f"deployment {action.target} not found")
        return "error"
    if terminating(deployment):
        # On its way out (a foreground deletion keeps it while its Pods go): no HPA is
        # made or changed for it; once it is gone, the next cycle says it is not found.
        cycle.count("terminating")
        log.info("scaling_deployment_terminating", target=action.target)
        return "retry"
    if notes.annotations_of(deployment).get(notes.IGNORE) == notes.TRUE:
        message = f'deployment {action.target} is annotated {notes.IGNORE}: "true"'
        _error(cycle, planned, "ignored", message)
        return "error"
    hpas = cycle.kube.list_hpas(action.namespace)
    hpa = find_hpa(hpas, action.deployment)
    if hpa is not None and ignore.matches(HPA, action.namespace, ref(hpa).name):
        message = f"hpa {ref(hpa).key} matches IGNORE_RESOURCES"
        _error(cycle, planned, "ignored", message)
        return "error"
    if hpa is not None and terminating(hpa):
        # Being deleted, held by a finalizer: nothing is written to it, and no second HPA
        # is made beside it. Once it is gone, a later cycle creates a provisional one.
        cycle.count("terminating")
        log.info("scaling_hpa_terminating", hpa=ref(hpa).name, target=action.target)
        return "retry"
    marker = notes.release_marker(*planned.owner)
    if marker in notes.released(deployment) or (hpa and marker in notes.released(hpa)):
        return "released"
    if hpa is None:
        return _create_provisional(cycle, planned, deployment, hpas)
    managed = notes.read_managed(hpa)
    if managed is None:
        return _write(cycle, planned, deployment, hpa, _originals_of(deployment, hpa))
    if managed.owner == planned.owner:
        return _reapply(cycle, planned, deployment, hpa, managed)
    reason = reason_for(hpa, managed)
    if reason is None:
        message = (
            f"hpa {ref(hpa).key} is managed by template "
            f"{managed.template_id} action {managed.action_id} until {managed.run_until}"
        )
        _error(cycle, planned, "conflict", message)
        return "error"
    # The old window is over: its revert event is durable before the takeover write.
    cycle.emit(revert_event(cycle.cluster_id, cycle.now, hpa, managed, reason))
    originals = _originals_of(deployment, hpa) if reason == "overridden" else managed.originals
    outcome = _write(cycle, planned, deployment, hpa, originals)
    cycle.count("reverts")
    cycle.record(
        hpa,
        reason=REVERTED,
        message=f"template {managed.template_name or managed.template_id} action "
        f"{managed.action_id}: window from {managed.window_start} ended ({reason}); taken over",
    )
    return outcome


def _originals_of(deployment: Obj, hpa: Obj) -> notes.Originals:
    low, high = stated_bounds(hpa)
    return notes.Originals(
        provisional=False,
        replicas=replicas(deployment),
        min_replicas=low,
        max_replicas=high,
        spec=notes.spec_json(spec_of(hpa)),
    )


def _reapply(
    cycle: Cycle, planned: Planned, deployment: Obj, hpa: Obj, managed: notes.Managed
) -> Outcome:
    if is_overridden(hpa, managed):
        return "overridden"  # the revert scan of this cycle releases it
    wanted = _annotations(planned, managed.originals)
    current = notes.annotations_of(hpa)
    if all(current.get(key) == value for key, value in wanted.items()):
        _raise_replicas(cycle, deployment, planned.action.min_replicas)
        return "unchanged"
    return _write(cycle, planned, deployment, hpa, managed.originals)


def _write(
    cycle: Cycle, planned: Planned, deployment: Obj, hpa: Obj, originals: notes.Originals
) -> Outcome:
    action = planned.action
    read = ref(hpa)
    resized = bounds(hpa) != (action.min_replicas, action.max_replicas)
    patch = {
        "metadata": {**read.precondition(), "annotations": _annotations(planned, originals)},
        "spec": {"minReplicas": action.min_replicas, "maxReplicas": action.max_replicas},
    }
    written = cycle.kube.patch_hpa(read.namespace, read.name, patch)
    return _after_write(cycle, planned, deployment, written, originals, resized=resized)


def _create_provisional(
    cycle: Cycle, planned: Planned, deployment: Obj, hpas: list[Obj]
) -> Outcome:
    action = planned.action
    # A revert that died between deleting the last window's HPA and restoring the replicas
    # left them at that window's size; the journal still holds the size from before it.
    pending = cycle.store.restore_of(action.namespace, action.deployment)
    originals = notes.Originals(
        provisional=True,
        replicas=pending.replicas if pending is not None else replicas(deployment),
        min_replicas=None,
        max_replicas=None,
        spec=None,
    )
    name = names.provisional_hpa_name(action.deployment, {ref(hpa).name for hpa in hpas})
    annotations = {k: v for k, v in _annotations(planned, originals).items() if v is not None}
    body = {
        "apiVersion": HPA_API_VERSION,
        "kind": HPA_KIND,
        "metadata": {
            "name": name,
            "namespace": action.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": annotations,
        },
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": action.deployment,
            },
            "minReplicas": action.min_replicas,
            "maxReplicas": action.max_replicas,
            "metrics": [dict(metric) for metric in PROVISIONAL_METRICS],
        },
    }
    created = cycle.kube.create_hpa(action.namespace, body)
    created.setdefault("apiVersion", HPA_API_VERSION)
    created.setdefault("kind", HPA_KIND)
    return _after_write(cycle, planned, deployment, created, originals, resized=True)


def _after_write(
    cycle: Cycle,
    planned: Planned,
    deployment: Obj,
    hpa: Obj,
    originals: notes.Originals,
    *,
    resized: bool,
) -> Outcome:
    action = planned.action
    new = _emit_apply(cycle, planned, hpa, originals.provisional)
    if resized or new:
        cycle.record(hpa, reason=APPLIED, message=_message(planned, originals.provisional))
    _raise_replicas(cycle, deployment, action.min_replicas)
    if new:
        cycle.count("applies")
        log.info(
            "scaling_applied",
            template=planned.template_id,
            action=action.id,
            namespace=action.namespace,
            hpa=ref(hpa).name,
            min_replicas=action.min_replicas,
            max_replicas=action.max_replicas,
            run_until=planned.run_until,
            provisional=originals.provisional,
        )
    return "applied" if new else "unchanged"


def _emit_apply(cycle: Cycle, planned: Planned, hpa: Obj, provisional: bool) -> bool:
    return cycle.emit(
        events.apply_event(
            cluster_id=cycle.cluster_id,
            window=action_window(
                planned.template_id, planned.action, planned.window_start, planned.run_until
            ),
            provisional=provisional,
            now=cycle.now,
        )
    )


def _raise_replicas(cycle: Cycle, deployment: Obj, minimum: int) -> None:
    """Raise the Deployment to the new minimum at once rather than at the HPA's next sync."""
    if replicas(deployment) >= minimum:
        return
    read = ref(deployment)
    patch = {"metadata": read.precondition(), "spec": {"replicas": minimum}}
    try:
        cycle.kube.patch_deployment(read.namespace, read.name, patch)
    except Conflict:
        # The HPA controller raises it anyway; the next cycle tries again on fresh state.
        cycle.count("conflicts")
        log.info("replicas_raise_conflict", namespace=read.namespace, name=read.name)


def _annotations(planned: Planned, originals: notes.Originals) -> dict[str, str | None]:
    action = planned.action
    return notes.window_annotations(
        template_id=planned.template_id,
        action_id=action.id,
        template_name=planned.template_name,
        window_start=planned.window_start,
        run_until=planned.run_until,
        priority_up=action.priority_up,
        priority_down=action.priority_down,
        managed_hash=planned.managed_hash,
        originals=originals,
    )


def _error(cycle: Cycle, planned: Planned, reason: str, message: str) -> None:
    action_error(
        cycle,
        template_id=planned.template_id,
        window_start=planned.window_start,
        run_until=planned.run_until,
        action=planned.action,
        reason=reason,
        message=message,
    )


def _message(planned: Planned, provisional: bool) -> str:
    action = planned.action
    kind = "provisional HPA" if provisional else "HPA"
    return (
        f"template {planned.template_name or planned.template_id} action {action.id}: "
        f"{kind} min {action.min_replicas}, max {action.max_replicas} until "
        f"{planned.run_until} (window from {planned.window_start})"
    )
