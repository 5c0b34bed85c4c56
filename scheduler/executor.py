"""Carrying out a plan, for both loops: each step of `scheduler.steps` in order, the events
that go with each write, and the one rule for a 409.

The plans decide; this performs. An `Enqueue` puts its event into the outbox before the
next step, so a revert event is durable before the write it announces. After an apply's
write comes its apply event (with the tool that deploys the target), a Kubernetes Event
when min:max changed or the event is new, and the Deployment's replicas raised to the new
min (a 409 on that raise is counted and left to the next cycle: the HPA controller raises
them anyway), then handed back (`scheduler.handback`). After a revert's write, a
Kubernetes Event; a `HandBack` is made against the HPA as that write left it; a
provisional HPA's delete goes through the restore journal (`scheduler.restores`).

A 409 on any other write (someone changed the object since it was read) ends the plan
where it is: it is counted, logged once (`scaling_apply_conflict`,
`scaling_revert_conflict`), and `perform` returns a `Retry`; the loop reads afresh on its
next cycle (revert-all at once).

How it fails: `perform` raises `kube.errors.KubeError` (other than a 409) as the write
raised it, after the steps before it were made; the caller decides what it means.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import structlog

from kube.errors import Conflict
from kube.workloads import Deployment, Hpa
from scheduler import events, gitops, handback, ownership
from scheduler.annotations import Window
from scheduler.cycle import APPLIED, REVERTED, Cycle
from scheduler.restores import delete_provisional
from scheduler.steps import (
    Applied,
    ApplyHpa,
    CreateHpa,
    DeleteProvisional,
    Enqueue,
    HandBack,
    PatchHpa,
    RaiseReplicas,
    Report,
    Reverted,
    Skip,
    Step,
    TakenOver,
)

# One line on a GitOps-deployed target's first window: what to configure, and where it is said.
GITOPS_ADVICE = {
    "argocd": "have Argo CD ignore fields managed by moonin-agent (ignoreDifferences with "
    "managedFieldsManagers, and RespectIgnoreDifferences=true), or self-heal will end the "
    "window: docs/scaling.md, GitOps",
    "flux": "have Flux leave the HPA's min and max to moonin-agent, or its next apply will "
    "end the window: docs/scaling.md, GitOps",
    "helm": "a helm upgrade during the window conflicts on min and max, and with "
    "--force-conflicts ends the window: docs/scaling.md, GitOps",
}

# Each line under the logger it has always had, so log searches keep finding it.
apply_log = structlog.get_logger("scheduler.apply")
revert_log = structlog.get_logger("scheduler.revert")
CONFLICT_LOGS = {"apply": apply_log, "revert": structlog.get_logger("scheduler")}

Outcome = Literal["applied", "unchanged", "reverted", "error", "overridden", "reassert_later"]


@dataclass(frozen=True, slots=True)
class Retry:
    """A write met a 409: the object changed since it was read."""

    error: str


def perform(
    cycle: Cycle,
    steps: Iterable[Step],
    *,
    window: Window,
    deployment: Deployment | None = None,
    loop: Literal["apply", "revert"],
    where: Mapping[str, object],
) -> Outcome | Retry:
    """The steps in order, for `window` (and the Deployment an apply read); the outcome of
    the last step that has one ("unchanged" when none has)."""
    outcome: Outcome = "unchanged"
    written: Hpa | None = None  # the HPA as the last write left it
    try:
        for step in steps:
            if isinstance(step, HandBack):
                _hand_back_after(cycle, step.hpa or written, step.owners, loop, where)
                continue
            done = _perform(cycle, step, window, deployment)
            if isinstance(done, tuple):
                written, done = done
            outcome = done or outcome
    except Conflict as exc:
        # Someone wrote between our read and our write: the next cycle reads again.
        cycle.count("conflicts")
        CONFLICT_LOGS[loop].info(f"scaling_{loop}_conflict", error=str(exc), **where)
        return Retry(str(exc))
    return outcome


def _hand_back_after(
    cycle: Cycle,
    hpa: Hpa | None,
    owners: ownership.Owners | None,
    loop: str,
    where: Mapping[str, object],
) -> None:
    """The hand-back after a revert's write, which stands however it ends: an HPA that
    kept changing is left to the next scan (ORIGINAL_MANAGERS says what is left to do)."""
    try:
        handback.hpa_bounds(cycle, hpa, owners)
    except Conflict as exc:
        cycle.count("conflicts")
        CONFLICT_LOGS[loop].info("scaling_hand_back_conflict", error=str(exc), **where)


def action_error(cycle: Cycle, window: Window, reason: str, message: str) -> bool:
    """Report an action's error once per window; True when it was new."""
    event = events.action_error(
        cluster_id=cycle.cluster_id, window=window, reason=reason, message=message, now=cycle.now
    )
    return cycle.emit_error(
        event,
        apply_log,
        "scaling_action_error",
        action=window.action_id,
        namespace=window.namespace,
        deployment=window.deployment,
    )


def _perform(
    cycle: Cycle, step: Step, window: Window, deployment: Deployment | None
) -> tuple[Hpa, Outcome] | Outcome | None:
    if isinstance(step, Enqueue):
        cycle.emit(step.event)
    elif isinstance(step, Report):
        action_error(cycle, window, step.reason, step.message)
        return "error"
    elif isinstance(step, Skip):
        return step.outcome
    elif isinstance(step, CreateHpa):
        created = cycle.kube.create_hpa(step.namespace, step.name, step.body)
        return created, _after_write(cycle, window, deployment, created, step.then)
    elif isinstance(step, ApplyHpa):
        applied = cycle.kube.apply_hpa(step.hpa.namespace, step.hpa.name, step.config)
        return applied, _after_write(cycle, window, deployment, applied, step.then)
    elif isinstance(step, PatchHpa):
        if step.unusable is not None:
            revert_log.error(
                "original_bounds_unusable",
                namespace=step.hpa.namespace,
                hpa=step.hpa.name,
                original_min=step.unusable[0],
                original_max=step.unusable[1],
                action="released with the spec left as it is",
            )
        written = cycle.kube.patch_hpa(step.hpa.namespace, step.hpa.name, step.patch)
        return written, _after_write(cycle, window, deployment, written, step.then)
    elif isinstance(step, DeleteProvisional):
        delete_provisional(cycle, step)
        return "reverted"
    elif isinstance(step, RaiseReplicas):
        _raise_replicas(cycle, deployment, step.minimum)
    elif isinstance(step, TakenOver):
        cycle.count("reverts")
        cycle.record(step.hpa, reason=REVERTED, message=step.said)
    return None


def _after_write(
    cycle: Cycle,
    window: Window,
    deployment: Deployment | None,
    hpa: Hpa,
    then: Applied | Reverted,
) -> Outcome:
    if isinstance(then, Reverted):
        cycle.record(hpa, reason=REVERTED, message=then.said)
        return "reverted"
    provisional = then.originals.provisional
    managed_by = ownership.target_managed_by(
        hpa.metadata,
        None if deployment is None else deployment.metadata,
        provisional=provisional,
        noted=then.originals.owners,
    )
    new = cycle.emit(
        events.apply_event(
            cluster_id=cycle.cluster_id,
            window=window,
            provisional=provisional,
            managed_by=managed_by,
            now=cycle.now,
        )
    )
    if then.resized or new:
        cycle.record(hpa, reason=APPLIED, message=_applied(window, provisional))
    if new and managed_by.tool in gitops.TOOLS and window.target not in cycle.advised:
        cycle.advised.add(window.target)
        apply_log.info(
            "scaling_gitops_target",
            target=window.target,
            tool=managed_by.tool,
            managers=list(managed_by.managers),
            advice=GITOPS_ADVICE[managed_by.tool],
        )
    _raise_replicas(cycle, deployment, window.min_replicas)
    if not new:
        return "unchanged"
    cycle.count("applies")
    apply_log.info(
        "scaling_applied",
        template=window.template_id,
        action=window.action_id,
        namespace=window.namespace,
        hpa=hpa.metadata.name,
        min_replicas=window.min_replicas,
        max_replicas=window.max_replicas,
        run_until=window.run_until,
        provisional=provisional,
        managed_by=managed_by.tool,
    )
    return "applied"


def _raise_replicas(cycle: Cycle, deployment: Deployment | None, minimum: int) -> None:
    """Raise the Deployment to the new minimum at once rather than at the HPA's next sync."""
    if deployment is None or deployment.spec.replicas >= minimum:
        return
    read = deployment.metadata
    patch = {"metadata": read.precondition(), "spec": {"replicas": minimum}}
    before = ownership.owners_of(read, fields=handback.REPLICAS)
    try:
        raised = cycle.kube.patch_deployment(read.namespace, read.name, patch)
    except Conflict:
        # The HPA controller raises it anyway; the next cycle tries again on fresh state.
        cycle.count("conflicts")
        apply_log.info("replicas_raise_conflict", namespace=read.namespace, name=read.name)
        return
    try:
        # The replicas are the HPA controller's from now on: none of them is ours to keep.
        handback.deployment_replicas(cycle, raised, before)
    except Conflict:
        cycle.count("conflicts")
        apply_log.info("replicas_hand_back_conflict", namespace=read.namespace, name=read.name)


def _applied(window: Window, provisional: bool) -> str:
    kind = "provisional HPA" if provisional else "HPA"
    return (
        f"template {window.template_name or window.template_id} action {window.action_id}: "
        f"{kind} min {window.min_replicas}, max {window.max_replicas} until "
        f"{window.run_until} (window from {window.window_start})"
    )
