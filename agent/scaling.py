"""The scaling role: the reconcile job on the scaling outbox stream, and `revert-all`.

One replica runs it (the chart's scaling workload); it needs no leader election. Events go
through the `scaling` stream, so an outage of the scaling API delays them and loses none.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import msgspec
import structlog

from agent import exits
from agent.config import KubeSettings, ScalingSettings, Settings
from agent.delivery import open_delivery
from agent.logs import configure_logging
from collector.settings import FilterSettings
from kube.api import KubeApi
from kube.cluster import KubeConfigError, KubeTarget, load_target
from kube.errors import KubeError
from runtime.health import HealthReporter
from scheduler.cycle import EventSink
from scheduler.dryrun import IN_MEMORY, DryRunEvents, DryRunKube
from scheduler.gitops import GitopsPolicy
from scheduler.job import ScalingJob
from scheduler.kubeapi import ScalingKube
from scheduler.revertall import revert_all
from scheduler.store import FILE_NAME, Store
from shipper.client import ApiClient
from shipper.lock import QueueDirectoryBusy
from shipper.outbox import StreamOutbox
from shipper.queuefile import QueueFileError
from shipper.records import SCALING
from shipper.token import TokenSource

log = structlog.get_logger("agent.scaling")


def revert_all_now(
    settings: Settings,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    dry_run: bool = False,
) -> int:
    """`moonin-agent scaling revert-all`: revert every managed HPA now (reason `manual`),
    queue the revert events in this process's queue directory and ship them for at most
    `shutdown_ship_seconds`; what is not delivered by then waits there. Prints one JSON
    object (`reverted`, `failed`); exit 0 when every HPA was reverted. `dry_run` logs
    each change instead, and writes nothing: no queue, no store, no event."""

    token = TokenSource(value=settings.identity.token, file=settings.identity.token_file)
    configure_logging(settings.process.log_level, secrets=token.secrets)
    try:
        # The cluster `run` would pick, by the same rule (kube/__init__.py).
        target = load_target(os.environ, kubeconfig=kubeconfig, context=context)
    except KubeConfigError as exc:
        return exits.Failure(exc, exits.CANNOT_START).report()
    kube = scaling_client(target, settings.kube)
    delivery = None
    outbox: EventSink
    if dry_run:
        log.info("dry_run", changes="logged as dry_run_change, not made")
        workloads: ScalingKube = DryRunKube(kube)
        outbox, store = DryRunEvents(), Store(IN_MEMORY)
    else:
        try:
            delivery = open_delivery(settings, token)
            store = Store(Path(settings.outbox.queue_dir) / FILE_NAME)
        except (QueueDirectoryBusy, QueueFileError, sqlite3.Error, OSError) as exc:
            if delivery is not None:
                delivery.stop(drain_seconds=0)
            kube.close()
            return exits.unusable_queue(exc).report()
        delivery.start()
        workloads = ScalingKube(kube)
        outbox = delivery.outbox[SCALING]
    try:
        report = revert_all(
            kube=workloads, outbox=outbox, store=store, cluster_id=settings.identity.cluster_id
        )
    except KubeError as exc:  # the cluster cannot be reached: one line, exit 1
        return exits.Failure(exc, exits.FAILED).report()
    finally:
        store.close()
        if delivery is not None:
            delivery.stop(drain_seconds=settings.outbox.shutdown_ship_seconds)
        kube.close()
    log.info("revert_all_done", reverted=len(report.reverted), failed=len(report.failed))
    sys.stdout.buffer.write(
        msgspec.json.encode({"reverted": report.reverted, "failed": report.failed}) + b"\n"
    )
    return exits.OK if report.ok else exits.FAILED


def scaling_client(target: KubeTarget, settings: KubeSettings) -> KubeApi:
    """The one Kubernetes client, tuned for a reconcile loop: each call must end well before
    the next cycle, so a silent connect or read gives up sooner than discovery's (the kube
    branch's `scaling_connect_timeout_seconds` and `scaling_read_timeout_seconds`)."""
    return KubeApi(
        target,
        timeout=settings.scaling_read_timeout_seconds,
        connect_timeout=settings.scaling_connect_timeout_seconds,
        deadline_seconds=settings.deadline_seconds,
    )


class ScalingRole:
    def __init__(
        self,
        settings: ScalingSettings,
        *,
        kube: KubeSettings,
        filters: FilterSettings,
        cluster_id: str,
        queue_dir: str,
        target: KubeTarget,
        outbox: StreamOutbox,
        api: ApiClient,
        dry_run: bool = False,
    ) -> None:
        self._kube = scaling_client(target, kube)
        self._interval = settings.reconcile_interval_seconds
        self._dry_run = dry_run
        kube_type = DryRunKube if dry_run else ScalingKube
        self.job = ScalingJob(
            # A dry run logs each change instead of making it, and keeps nothing.
            kube=kube_type(self._kube),
            api=api,
            outbox=DryRunEvents() if dry_run else outbox,
            store_path=IN_MEMORY if dry_run else Path(queue_dir) / FILE_NAME,
            cluster_id=cluster_id,
            ignore_resources=filters.ignore_resources,
            interval=settings.reconcile_interval_seconds,
            gitops_policy=GitopsPolicy(settings.gitops_conflicts, settings.reassert_seconds),
        )

    def start(self) -> None:
        self.job.start()
        log.info("scaling_started", interval_seconds=self._interval, dry_run=self._dry_run)

    def stop(self) -> None:
        """Let a cycle in progress finish (an HPA write completes), then stop."""
        self.job.stop()
        self._kube.close()

    def reporters(self) -> list[HealthReporter]:
        return [self.job.reporter]

    def problems(self) -> list[str]:
        return []
