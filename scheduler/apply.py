"""Applying one action of an active template to its Deployment's HPA: the reads and the
checks that stop before any write are made here; what to write is then decided by
`scheduler.apply_plan.plan_apply` (pure) and carried out in its order by
`scheduler.executor.perform`.

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
  as `overridden`), unless a GitOps tool synced them back and `gitops` re-asserts
  (`scheduler.gitops`);
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

from typing import Literal

import structlog

from kube.errors import BadRequest, Forbidden, Invalid, KubeError, NotFound
from kube.globs import DEPLOYMENT, HPA, ResourceGlobs
from kube.workloads import Hpa
from scheduler import annotations as notes
from scheduler import events, executor
from scheduler.actions import InvalidAction
from scheduler.annotations import Window
from scheduler.apply_plan import ApplyView, ReasonFor, plan_apply
from scheduler.cycle import Cycle
from scheduler.executor import Retry, action_error, perform
from scheduler.gitops import YIELD, GitopsPolicy
from scheduler.window import ActiveWindow

log = structlog.get_logger("scheduler.apply")

Outcome = executor.Outcome | Literal["released", "retry", "failed"]


def invalid_action_error(
    cycle: Cycle, template_id: str, window: ActiveWindow, action: InvalidAction
) -> bool:
    """Report an action that cannot be applied once per window; True when it was new."""
    event = events.invalid_action(
        cluster_id=cycle.cluster_id,
        template_id=template_id,
        window_start=window.start_text,
        run_until=window.until_text,
        action=action,
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
    cycle: Cycle,
    planned: Window,
    *,
    ignore: ResourceGlobs,
    reason_for: ReasonFor,
    gitops: GitopsPolicy = YIELD,
) -> Outcome:
    where = {"template": planned.template_id, "action": planned.action_id, "target": planned.target}
    try:
        return _apply(cycle, planned, ignore, reason_for, gitops, where)
    except Forbidden as exc:
        action_error(cycle, planned, "forbidden", str(exc))
        return "error"
    except (BadRequest, Invalid) as exc:
        # The server refused what we wrote: a bug here, which retrying will not fix.
        cycle.count("apply_failures")
        log.error("scaling_write_refused", status=exc.status, error=str(exc), **where)
        return "failed"
    except KubeError as exc:
        cycle.count("apply_failures")
        log.warning("scaling_apply_failed", status=exc.status, error=str(exc), **where)
        return "failed"


def _apply(
    cycle: Cycle,
    planned: Window,
    ignore: ResourceGlobs,
    reason_for: ReasonFor,
    gitops: GitopsPolicy,
    where: dict[str, str],
) -> Outcome:
    if ignore.matches(DEPLOYMENT, planned.namespace, planned.deployment):
        action_error(
            cycle, planned, "ignored", f"deployment {planned.target} matches IGNORE_RESOURCES"
        )
        return "error"
    try:
        deployment = cycle.kube.get_deployment(planned.namespace, planned.deployment)
    except NotFound:
        action_error(
            cycle, planned, "deployment_not_found", f"deployment {planned.target} not found"
        )
        return "error"
    if deployment.metadata.terminating:
        # On its way out (a foreground deletion keeps it while its Pods go): no HPA is
        # made or changed for it; once it is gone, the next cycle says it is not found.
        cycle.count("terminating")
        log.info("scaling_deployment_terminating", target=planned.target)
        return "retry"
    if deployment.metadata.annotations.get(notes.IGNORE) == notes.TRUE:
        message = f'deployment {planned.target} is annotated {notes.IGNORE}: "true"'
        action_error(cycle, planned, "ignored", message)
        return "error"
    hpas = cycle.kube.list_hpas(planned.namespace)
    hpa = find_hpa(hpas, planned.deployment)
    if hpa is not None and ignore.matches(HPA, planned.namespace, hpa.metadata.name):
        message = f"hpa {hpa.metadata.key} matches IGNORE_RESOURCES"
        action_error(cycle, planned, "ignored", message)
        return "error"
    if hpa is not None and hpa.metadata.terminating:
        # Being deleted, held by a finalizer: nothing is written to it, and no second HPA
        # is made beside it. Once it is gone, a later cycle creates a provisional one.
        cycle.count("terminating")
        log.info("scaling_hpa_terminating", hpa=hpa.metadata.name, target=planned.target)
        return "retry"
    marker = planned.release_marker
    released = notes.released(deployment.metadata.annotations)
    if marker in released or (hpa and marker in notes.released(hpa.metadata.annotations)):
        return "released"
    view = ApplyView(
        planned=planned,
        deployment=deployment,
        hpas=hpas,
        hpa=hpa,
        # A revert that died between deleting the last window's HPA and restoring the
        # replicas left them at that window's size; the journal holds the size before it.
        journalled_replicas=_journalled(cycle, planned) if hpa is None else None,
        cluster_id=cycle.cluster_id,
        reason_for=reason_for,
        gitops=gitops,
    )
    steps = plan_apply(view, cycle.now)
    done = perform(cycle, steps, window=planned, deployment=deployment, loop="apply", where=where)
    return "retry" if isinstance(done, Retry) else done


def _journalled(cycle: Cycle, planned: Window) -> int | None:
    pending = cycle.store.restore_of(planned.namespace, planned.deployment)
    return None if pending is None else pending.replicas


def find_hpa(hpas: list[Hpa], deployment: str) -> Hpa | None:
    """The HPA scaling `deployment`. Several (a misconfiguration the HPA controller itself
    refuses to act on) resolve to a managed one, else the first by name."""
    targets = [
        hpa
        for hpa in hpas
        if hpa.spec.scale_target_ref.kind == "Deployment"
        and hpa.spec.scale_target_ref.name == deployment
    ]
    targets.sort(key=lambda hpa: (notes.read_window(hpa) is None, hpa.metadata.name))
    return targets[0] if targets else None
