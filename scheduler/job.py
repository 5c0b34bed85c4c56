"""The scaling role's clock: an APScheduler 3 scheduler that runs the reconcile loops.

`ReconcileJob` runs named cycles, each every `interval` seconds on a worker of its own, so a
slow one never delays another. The first cycle starts at once; each later one starts once
the one before it has run for the first time (the revert scan, first, runs before any call
to the platform). A cycle is never overlapped by itself (`max_instances=1`: a slow run
delays its next one), runs missed while one was busy collapse into one (`coalesce=True`),
and a cycle that raises is logged and counted while its schedule goes on. Each cycle counts
as progress for liveness on its own: a cycle that stops turning fails `/healthz`, whatever
the others do.

`ScalingJob` is what a process role starts: it opens the local store, builds the
`Reconciler` and runs its revert scan and its apply cycle on a `ReconcileJob`. `stop()` waits
for running cycles to end, so an HPA write in progress completes before the process exits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from kube.globs import SCALED_KINDS, ResourceGlobs
from runtime.health import HealthReporter
from scheduler.cycle import EventSink
from scheduler.gitops import YIELD, GitopsPolicy
from scheduler.kubeapi import ScalingKube
from scheduler.reconcile import APPLY, COMPONENT, REVERTS, Reconciler, TemplateSource
from scheduler.store import Store

log = structlog.get_logger("scheduler.job")

STALLED_AFTER_SECONDS = 600.0

NamedCycle = tuple[str, Callable[[], object]]


class ReconcileJob:
    """Runs each of `cycles` every `interval` seconds on background threads."""

    def __init__(
        self,
        cycles: Sequence[NamedCycle],
        *,
        interval: float,
        reporter: HealthReporter | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        if not cycles or len({name for name, _ in cycles}) != len(cycles):
            raise ValueError("cycles need distinct names")
        self._cycles = list(cycles)
        self.interval = interval
        self.reporter = reporter or HealthReporter(COMPONENT)
        self._scheduler: BackgroundScheduler | None = None
        self._lock = threading.Lock()
        self._ran: set[str] = set()

    def start(self) -> None:
        with self._lock:
            if self._scheduler is not None:
                return
            self._ran.clear()  # a restart runs the cycles in order again
            # A worker per cycle: with max_instances=1 a further one would never be used.
            scheduler = BackgroundScheduler(
                executors={"default": ThreadPoolExecutor(max_workers=len(self._cycles))},
                timezone=UTC,
            )
            for index, (name, _) in enumerate(self._cycles):
                scheduler.add_job(
                    self._run,
                    "interval",
                    args=(index,),
                    seconds=self.interval,
                    id=name,
                    max_instances=1,
                    coalesce=True,
                    # Later cycles wait, paused, for the one before them (see `_run`).
                    next_run_time=datetime.now(UTC) if index == 0 else None,
                    # A run that could not start on time still starts, late, rather than never.
                    misfire_grace_time=None,
                )
            scheduler.start()
            self._scheduler = scheduler

    def stop(self, *, wait: bool = True) -> None:
        """Stop scheduling; with `wait`, return once the cycles in progress have ended."""
        with self._lock:
            scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=wait)

    @property
    def running(self) -> bool:
        with self._lock:
            return self._scheduler is not None

    def _run(self, index: int) -> None:
        name, cycle = self._cycles[index]
        try:
            cycle()
        except Exception:
            self.reporter.count("cycle_failures")
            log.exception("scaling_cycle_failed", cycle=name)
        finally:
            self.reporter.progress(name)  # liveness: this cycle's clock still turns
            self._start_next(index)

    def _start_next(self, index: int) -> None:
        """After a cycle's first run, start the first run of the cycle after it."""
        with self._lock:
            name = self._cycles[index][0]
            first = name not in self._ran
            self._ran.add(name)
            if not first or index + 1 == len(self._cycles) or self._scheduler is None:
                return
            self._scheduler.modify_job(self._cycles[index + 1][0], next_run_time=datetime.now(UTC))


class ScalingJob:
    """The scaling role's reconcile loop, ready to start: everything it needs, once."""

    def __init__(
        self,
        *,
        kube: ScalingKube,
        api: TemplateSource,
        outbox: EventSink,
        store_path: str | Path,
        cluster_id: str,
        ignore_resources: Iterable[str] = (),
        interval: float,
        reporter: HealthReporter | None = None,
        gitops_policy: GitopsPolicy = YIELD,
    ) -> None:
        # Ten missed cycles mean a stuck loop. A run waits on the network for at most half
        # that (its budget), so a slow platform or API server alone never looks stuck.
        stalled_after = max(STALLED_AFTER_SECONDS, interval * 10)
        self.reporter = reporter or HealthReporter(
            COMPONENT, stalled_after=stalled_after, parts=(REVERTS, APPLY)
        )
        # A bad entry fails before the store opens.
        ignore = ResourceGlobs(ignore_resources, kinds=SCALED_KINDS)
        self.store = Store(store_path, reporter=self.reporter)
        self.reconciler = Reconciler(
            kube=kube,
            api=api,
            outbox=outbox,
            store=self.store,
            cluster_id=cluster_id,
            ignore=ignore,
            reporter=self.reporter,
            budget_seconds=stalled_after / 2,
            gitops_policy=gitops_policy,
        )
        self._stopped = False
        # Reverts first: at start-up, windows that ended while no agent ran are reverted
        # before the platform is asked anything.
        self._job = ReconcileJob(
            [(REVERTS, self.reconciler.revert_scan), (APPLY, self.reconciler.apply_cycle)],
            interval=interval,
            reporter=self.reporter,
        )

    def start(self) -> None:
        self._job.start()

    def stop(self) -> None:
        """Let running cycles finish, then close the store (the outbox is the caller's).
        Stopping again does nothing."""
        if self._stopped:
            return
        self._stopped = True
        self.reconciler.stop()  # an apply cycle asks the platform nothing more
        self._job.stop(wait=True)
        self.store.close()

    @property
    def running(self) -> bool:
        return self._job.running
