"""The scaling role's clock: an APScheduler 3 job that runs a reconcile cycle every interval.

`ReconcileJob` wraps any cycle function: the first run is immediate, one run at a time
(`max_instances=1`: a slow cycle delays the next rather than overlapping it), and runs
missed while one was busy collapse into one (`coalesce=True`). A cycle that raises is
logged and counted; the job keeps its schedule.

`ScalingJob` is what a process role starts: it opens the local store, builds the
`Reconciler` and runs it on a `ReconcileJob`. `stop()` waits for a running cycle to end, so
an HPA write in progress completes before the process exits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes import client

from scheduler.cycle import EventSink
from scheduler.ignore import IgnoreRules
from scheduler.kubeapi import KubeApi
from scheduler.reconcile import COMPONENT, Reconciler, TemplateSource
from scheduler.store import Store
from shipper.health import HealthReporter

log = structlog.get_logger("scheduler.job")

JOB_ID = "scaling-reconcile"
STALLED_AFTER_SECONDS = 600.0


class ReconcileJob:
    """Runs `cycle()` every `interval` seconds on a background thread."""

    def __init__(
        self,
        cycle: Callable[[], object],
        *,
        interval: float,
        reporter: HealthReporter | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._cycle = cycle
        self.interval = interval
        self.reporter = reporter or HealthReporter(COMPONENT)
        self._scheduler: BackgroundScheduler | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._scheduler is not None:
                return
            # One worker: with max_instances=1 a second one would never be used.
            scheduler = BackgroundScheduler(
                executors={"default": ThreadPoolExecutor(max_workers=1)}, timezone=UTC
            )
            scheduler.add_job(
                self._run,
                "interval",
                seconds=self.interval,
                id=JOB_ID,
                max_instances=1,
                coalesce=True,
                next_run_time=datetime.now(UTC),
                # A run that could not start on time still starts, late, rather than never.
                misfire_grace_time=None,
            )
            scheduler.start()
            self._scheduler = scheduler

    def stop(self, *, wait: bool = True) -> None:
        """Stop scheduling; with `wait`, return once a cycle in progress has ended."""
        with self._lock:
            scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=wait)

    @property
    def running(self) -> bool:
        with self._lock:
            return self._scheduler is not None

    def _run(self) -> None:
        try:
            self._cycle()
        except Exception:
            self.reporter.count("cycle_failures")
            log.exception("scaling_cycle_failed")
        finally:
            self.reporter.progress()  # liveness: the clock still turns


class ScalingJob:
    """The scaling role's reconcile loop, ready to start: everything it needs, once."""

    def __init__(
        self,
        *,
        kube: client.ApiClient | KubeApi,
        api: TemplateSource,
        outbox: EventSink,
        store_path: str | Path,
        cluster_id: str,
        ignore_resources: Iterable[str] = (),
        interval: float = 30.0,
        reporter: HealthReporter | None = None,
    ) -> None:
        # A cycle is a few requests with timeouts; ten missed cycles mean a stuck clock.
        self.reporter = reporter or HealthReporter(
            COMPONENT, stalled_after=max(STALLED_AFTER_SECONDS, interval * 10)
        )
        ignore = IgnoreRules(ignore_resources)  # a bad entry fails before the store opens
        self.store = Store(store_path)
        self.reconciler = Reconciler(
            kube=kube,
            api=api,
            outbox=outbox,
            store=self.store,
            cluster_id=cluster_id,
            ignore=ignore,
            reporter=self.reporter,
        )
        self._job = ReconcileJob(
            self.reconciler.run_once, interval=interval, reporter=self.reporter
        )

    def start(self) -> None:
        self._job.start()

    def stop(self) -> None:
        """Let a running cycle finish, then close the store (the outbox is the caller's)."""
        self._job.stop(wait=True)
        self.store.close()

    @property
    def running(self) -> bool:
        return self._job.running
