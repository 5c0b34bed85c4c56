"""`moonin-agent scaling revert-all`: revert every managed HPA now, whatever its window.

Used before an uninstall (the chart's pre-delete hook, after the scaling workload is scaled
to zero) and by an operator who wants Moonin's hands off the cluster at once. Each revert
has reason `manual` and leaves the RELEASED marker, so a scaling role that starts again
does not re-apply those same windows (the next windows apply normally); an HPA whose min or
max someone else changed is released as `overridden` instead, left as they set it. Moonin
is not asked anything: the annotations are all a revert needs.

A 409 is retried at once on fresh state (up to `attempts` times): unlike the reconcile
loop there is no next cycle. The events go into the given outbox; shipping them is the
caller's job.

How it fails: never raises for a Kubernetes failure of one HPA; the report lists the HPAs
that could not be reverted. A failure to list HPAs raises `kube.errors.KubeError`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from kube.errors import KubeError, NotFound
from kube.workloads import Hpa
from runtime.health import HealthReporter
from scheduler import annotations as notes
from scheduler.cycle import Cycle, EventSink
from scheduler.events import RevertReason
from scheduler.kubeapi import ScalingKube
from scheduler.reconcile import COMPONENT, managed_hpas, reenqueue_apply
from scheduler.restores import finish_restores, read_restore_journal
from scheduler.revert import finish_hand_backs, revert
from scheduler.store import Store

log = structlog.get_logger("scheduler.revert_all")


@dataclass(frozen=True, slots=True)
class RevertAllReport:
    reverted: list[str]  # `namespace/name` of each HPA reverted
    failed: dict[str, str]  # `namespace/name` -> why

    @property
    def ok(self) -> bool:
        return not self.failed


def revert_all(
    *,
    kube: ScalingKube,
    outbox: EventSink,
    store: Store,
    cluster_id: str,
    now: datetime | None = None,
    attempts: int = 3,
    reporter: HealthReporter | None = None,
) -> RevertAllReport:
    api = kube
    cycle = Cycle(
        kube=api,
        outbox=outbox,
        store=store,
        cluster_id=cluster_id,
        now=(now or datetime.now(UTC)).astimezone(UTC),
        reporter=reporter or HealthReporter(COMPONENT),
        tally=Counter(),
    )
    reverted: list[str] = []
    failed: dict[str, str] = {}
    try:
        for hpa, managed in managed_hpas(api.list_hpas()):
            key = hpa.metadata.key
            error = _revert_one(cycle, api, hpa, managed, attempts)
            if error is None:
                reverted.append(key)
            else:
                failed[key] = error
                log.warning("revert_all_failed", hpa=key, error=error)
        try:
            # Hand-backs a revert (this one's, after a 409, or the running role's) left to do.
            for key, exc in finish_hand_backs(cycle, api.list_hpas()).items():
                failed[key] = str(exc)
                log.warning("revert_all_failed", hpa=key, error=str(exc))
        except KubeError as exc:
            log.warning("hand_backs_unread", status=exc.status, error=str(exc))
        try:
            read_restore_journal(cycle)  # restores the running role left half done
        except KubeError as exc:
            log.warning("restore_journal_unread", status=exc.status, error=str(exc))
        finish_restores(cycle)
    finally:
        store.commit()
    return RevertAllReport(reverted=reverted, failed=failed)


def _revert_one(
    cycle: Cycle, api: ScalingKube, hpa: Hpa, window: notes.Window, attempts: int
) -> str | None:
    read = hpa.metadata
    last = "no attempt made"
    for attempt in range(attempts):
        if attempt:
            try:
                hpa = api.get_hpa(read.namespace, read.name)
            except NotFound:
                return None  # gone meanwhile: nothing left to revert
            except KubeError as exc:
                return str(exc)
            current = notes.read_window(hpa)
            if current is None:
                return None  # released meanwhile
            window = current
        try:
            reenqueue_apply(cycle, hpa, window)
            reason: RevertReason = "overridden" if window.overridden else "manual"
            retry = revert(cycle, hpa, window, reason, release=True)
        except KubeError as exc:
            return str(exc)
        if retry is None:
            return None
        last = retry.error
    return last
