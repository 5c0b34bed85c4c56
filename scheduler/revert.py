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

Each HPA write is followed by the hand-back of its bounds (`scheduler.handback`): no
managedFields entry of ours is left. A revert stopped between the two (a crash, a 409) is
finished by `finish_hand_backs`, which each scan and revert-all run over the HPAs no longer
managed that still carry the ORIGINAL_MANAGERS annotation or an entry of ours (HPAs that
agents before the hand-back reverted are handed back that way too, their bounds to no one).

The revert event is put into the outbox before the first write, so a crash after the write
cannot lose it; its id has no detail, so retrying a failed revert on the next cycle never
makes a second distinct event. Every write carries the resourceVersion that was read: a 409
is a `scheduler.executor.Retry`, and the next cycle tries again on fresh state.

How it fails: `revert` raises `kube.errors.KubeError` (other than a 409, after the event is in
the outbox) when a write fails; the caller logs it and moves on to the next HPA.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from kube.errors import Conflict, KubeError
from kube.workloads import Hpa
from scheduler import annotations as notes
from scheduler import events, handback
from scheduler.annotations import Window
from scheduler.cycle import Cycle
from scheduler.executor import Retry, perform
from scheduler.ownership import Owners
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


def finish_hand_backs(cycle: Cycle, hpas: Iterable[Hpa]) -> dict[str, KubeError]:
    """Make the hand-back that reverts of these HPAs left to do; what failed, by HPA (a 409
    is counted and left to the next scan)."""
    failed: dict[str, KubeError] = {}
    for hpa in hpas:
        if not notes.hand_back_pending(hpa) or hpa.metadata.terminating:
            continue
        owners = Owners.read(hpa.metadata.annotations.get(notes.ORIGINAL_MANAGERS))
        try:
            handback.hpa_bounds(cycle, hpa, owners)
        except Conflict:
            cycle.count("conflicts")
        except KubeError as exc:
            failed[hpa.metadata.key] = exc
        else:
            cycle.count("hand_backs")
            log.info("scaling_handed_back", namespace=hpa.metadata.namespace, hpa=hpa.metadata.name)
    return failed
