"""Reverting one managed HPA, from its annotations alone: what to write is decided first
(`scheduler.revert_plan.plan_revert`, pure), then carried out in its order by
`scheduler.executor.perform`.

- Someone else changed min or max during the window (`overridden`): their values stay,
  only our annotations go, and a RELEASED marker keeps this window from being applied again.
  A provisional HPA taken over this way stays too: it is theirs now.
- A provisional HPA: deleted, with the Deployment's original replicas journalled first and
  restored after it (`scheduler.restores`, which also ends restores a crash left half done).
- A pre-existing HPA: min and max back to the originals, our annotations removed. Originals
  a server would refuse (min > max, max < 1: a 422 on every cycle) give way to those of
  `original-spec`; when those will not do either, the HPA is released as it is, with an
  error log line.

The revert event is put into the outbox before the first write, so a crash after the write
cannot lose it; its id has no detail, so retrying a failed revert on the next cycle never
makes a second distinct event. Every write carries the resourceVersion that was read: a 409
is a `scheduler.executor.Retry`, and the next cycle tries again on fresh state.

How it fails: `revert` raises `kube.errors.KubeError` (other than a 409, after the event is in
the outbox) when a write fails; the caller logs it and moves on to the next HPA.
"""

from __future__ import annotations

import structlog

from kube.workloads import Hpa
from scheduler import events
from scheduler.annotations import Window
from scheduler.cycle import Cycle
from scheduler.executor import Retry, perform
from scheduler.revert_plan import RevertView, plan_revert

log = structlog.get_logger("scheduler.revert")


def revert(
    cycle: Cycle,
    hpa: Hpa,
    window: Window,
    reason: events.RevertReason,
    *,
    release: bool = False,
) -> Retry | None:
    """Revert `hpa` (as read this cycle): its plan (`scheduler.revert_plan`), carried out in
    order. `release` leaves the RELEASED marker (revert-all); an `overridden` revert always
    leaves it. A `Retry` when a write met a 409 (nothing after it was made)."""
    read = hpa.metadata
    where = {"namespace": read.namespace, "hpa": read.name}
    steps = plan_revert(RevertView(cycle.cluster_id, hpa, window, reason, release), cycle.now)
    done = perform(cycle, steps, window=window, loop="revert", where=where)
    if isinstance(done, Retry):
        return done
    cycle.count("reverts")
    log.info(
        "scaling_reverted",
        template=window.template_id,
        action=window.action_id,
        namespace=read.namespace,
        hpa=read.name,
        reason=reason,
    )
    return None
