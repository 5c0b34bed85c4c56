"""`moonin-agent run`: one process, its outbox, a shipper per stream, and a clean shutdown.

The role decides the streams: `discovery` ships the discovery stream, `scaling` the scaling
stream, `all` both (each to its own API). Producers (the collector, the scheduler) plug in
as components with `start()` and `stop()`; on SIGTERM they stop first, so what they hold in
memory reaches the outbox, then the shippers drain for `shutdown_ship_seconds` and the
process exits. Whatever is still queued waits on disk for the next start.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from agent import allocator
from agent.config import ConfigError, Settings, api_url_for, split_host_port
from agent.discovery import DiscoveryRole
from agent.health_server import HealthServer
from agent.logs import configure_logging
from agent.metrics import AgentMetrics
from kube.cluster import KubeConfigError, load_target
from runtime.health import HealthReporter, HealthSnapshot
from runtime.version import VERSION
from shipper.client import ApiClient, RequestObserver
from shipper.lock import QueueDirectoryBusy
from shipper.outbox import Bounds, Outbox
from shipper.queuefile import QueueFileError, StreamStats
from shipper.records import DISCOVERY, SCALING
from shipper.shipper import ShipperSettings, StreamShipper
from shipper.token import TokenSource

log = structlog.get_logger("agent")


class Role(Protocol):
    """A producer of records or events the process runs (discovery, scaling)."""

    def start(self) -> None: ...

    def stop(self) -> None:
        """Stop producing; what it holds reaches the outbox before this returns."""

    def reporters(self) -> list[HealthReporter]: ...

    def problems(self) -> list[str]:
        """What liveness should fail on beyond its components' health."""


EXIT_BAD_CONFIGURATION = 2
# Exit code for a start-up that cannot proceed for a reason outside the configuration
# (the queue directory is owned by another process, locked or unreadable).
EXIT_STARTUP_FAILED = 1


@dataclass
class Delivery:
    """The outbox of a process and the shippers that empty it, one per stream."""

    outbox: Outbox
    shippers: dict[str, StreamShipper]
    clients: dict[str, ApiClient] = field(default_factory=dict)

    def start(self) -> None:
        for shipper in self.shippers.values():
            shipper.start()

    def stop(self, *, drain_seconds: float) -> None:
        """Drain every stream in parallel for at most `drain_seconds`, then close."""
        deadline = time.monotonic() + drain_seconds
        stoppers = [
            threading.Thread(
                target=shipper.stop, kwargs={"drain_seconds": drain_seconds}, daemon=True
            )
            for shipper in self.shippers.values()
        ]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(max(0.0, deadline - time.monotonic()) + 2)
        busy = [name for name, shipper in self.shippers.items() if shipper.alive]
        if busy:
            # A request is still in flight: its batch stays unacked and goes out next start.
            log.warning("shutdown_with_request_in_flight", streams=busy)
            return
        for client in self.clients.values():
            client.close()
        self.outbox.close()

    def reporters(self) -> list[HealthReporter]:
        return [
            *(stream.reporter for stream in self.outbox.streams.values()),
            *(shipper.reporter for shipper in self.shippers.values()),
        ]

    def queues(self) -> dict[str, StreamStats]:
        return {name: stream.stats() for name, stream in self.outbox.streams.items()}


def shipper_settings(settings: Settings) -> ShipperSettings:
    return ShipperSettings(
        batch_max_records=settings.batch_max_records,
        batch_max_bytes=settings.batch_max_bytes,
        linger_seconds=settings.linger_seconds,
    )


def open_delivery(
    settings: Settings,
    token: TokenSource,
    *,
    shipping: ShipperSettings | None = None,
    observe: RequestObserver | None = None,
) -> Delivery:
    """Open the queue directory and build a shipper per stream of the role (not started)."""
    streams = settings.streams
    outbox = Outbox(
        settings.queue_dir,
        streams=streams,
        bounds=Bounds(
            max_records=settings.queue_max_records,
            max_bytes=settings.queue_max_bytes,
            chunk_records=settings.batch_max_records,
            chunk_bytes=settings.batch_max_bytes,
        ),
    )
    delivery = Delivery(outbox=outbox, shippers={})
    for stream in streams:
        client = ApiClient(
            base_url=api_url_for(settings, stream),
            project_id=settings.project_id,
            cluster_id=settings.cluster_id,
            token=token,
            insecure_http=settings.insecure_http,
            ca_bundle=settings.ca_bundle,
            deadline_seconds=settings.api_deadline_seconds,
            max_answer_bytes=settings.api_max_answer_bytes,
            observe=observe,
        )
        delivery.clients[stream] = client
        post = client.post_records if stream == DISCOVERY else client.post_events
        delivery.shippers[stream] = StreamShipper(
            outbox[stream],
            post,
            settings=shipping or shipper_settings(settings),
        )
    return delivery


class HealthWatch:
    """Polls every component's health and logs each change (the health server reads it too).

    `reporters` is asked on every poll: components come and go (a collector per term).
    """

    def __init__(
        self, reporters: Callable[[], Iterable[HealthReporter]], *, interval: float = 1.0
    ) -> None:
        self._reporters = reporters
        self._interval = interval
        self._last: dict[str, tuple[bool, str | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self._interval * 2)

    def reporters(self) -> Iterable[HealthReporter]:
        return self._reporters()

    def snapshot(self) -> list[HealthSnapshot]:
        return [reporter.snapshot() for reporter in self._reporters()]

    def problems(self) -> list[str]:
        """What a restart would cure: components that failed or stopped making progress."""
        found = []
        for snap in self.snapshot():
            if snap.health.fatal:
                found.append(f"{snap.component}: {snap.health.reason}")
            elif snap.stalled:
                parts = ", ".join(part for part in snap.stalled_parts if part)
                found.append(f"{snap.component}: no progress" + (f" ({parts})" if parts else ""))
        return found

    def denied(self) -> list[str]:
        """What readiness reports beyond start-up: components refused a permission they
        need (`Health.forbidden`), each with the permission named."""
        return [
            f"{snap.component}: {snap.health.reason}"
            for snap in self.snapshot()
            if snap.health.denied
        ]

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.log_changes()

    def log_changes(self) -> None:
        for snap in self.snapshot():
            state = (snap.health.ok, snap.health.reason)
            if self._last.get(snap.component, (True, None)) != state:
                log.info(
                    "component_health",
                    component=snap.component,
                    ok=snap.health.ok,
                    reason=snap.health.reason,
                    counters=snap.counters,
                )
            self._last[snap.component] = state


def run(
    settings: Settings,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    dry_run: bool = False,
) -> int:
    tuned = allocator.tune()  # before any thread allocates: see agent/allocator.py
    token = TokenSource(value=settings.token, file=settings.token_file)
    configure_logging(settings.log_level, secrets=token.secrets)
    log.debug("allocator_tuned", settings=tuned)
    kube = None
    try:
        # One cluster for every role (kube/__init__.py states the rule).
        target = load_target(os.environ, kubeconfig=kubeconfig, context=context)
        if SCALING in settings.streams:
            # Imported here: the kubernetes client costs ~45 MiB that a discovery-only
            # process does not spend (see docs/collector.md).
            from kube import official

            kube = official.api_client(target)
    except KubeConfigError as exc:
        print(f"moonin-agent: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIGURATION
    stop = threading.Event()
    received: list[str] = []

    def request_stop(signum: int, _frame: object) -> None:
        # No logging here: the handler can interrupt the main thread inside a log write,
        # and the logger's lock is not reentrant. The main loop logs the signal instead.
        received.append(signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    metrics = AgentMetrics()
    try:
        delivery = open_delivery(settings, token, observe=metrics.observe_request)
    except (QueueDirectoryBusy, QueueFileError) as exc:
        return _startup_failed(exc)
    roles: list[Role] = []
    try:
        if DISCOVERY in settings.streams:
            roles.append(
                DiscoveryRole(
                    settings,
                    target=target,
                    outbox=delivery.outbox[DISCOVERY],
                    client=delivery.clients[DISCOVERY],
                )
            )
        if kube is not None:
            from agent.scaling import ScalingRole

            roles.append(
                ScalingRole(
                    settings,
                    kube=kube,
                    outbox=delivery.outbox[SCALING],
                    api=delivery.clients[SCALING],
                    dry_run=dry_run,
                )
            )
    except (ConfigError, ValueError) as exc:
        delivery.stop(drain_seconds=0)
        # ConfigError names its setting; the scaling role's globs raise plain ValueError.
        where = "" if isinstance(exc, ConfigError) else "IGNORE_RESOURCES: "
        print(f"moonin-agent: {where}{exc}", file=sys.stderr)
        return EXIT_BAD_CONFIGURATION
    except sqlite3.Error as exc:  # the scaling store: locked, read-only, disk full
        delivery.stop(drain_seconds=0)
        return _startup_failed(f"scaling store in {settings.queue_dir}: {exc}")
    watch = HealthWatch(
        lambda: [*delivery.reporters(), *(r for role in roles for r in role.reporters())]
    )
    metrics.read_from(watch.reporters, queues=delivery.queues, leader=lambda: _leading(roles))
    running = threading.Event()  # readiness: set once started, cleared when stopping
    try:
        server = HealthServer(
            *split_host_port(settings.health_addr),
            live=lambda: [*watch.problems(), *(p for role in roles for p in role.problems())],
            ready=lambda: (
                watch.denied() if running.is_set() else ["not running (starting or stopping)"]
            ),
            metrics=metrics.exposition,
        )
    except OSError as exc:
        delivery.stop(drain_seconds=0)
        return _startup_failed(f"HEALTH_ADDR {settings.health_addr}: {exc.strerror or exc}")
    server.start()
    delivery.start()
    for role in roles:
        role.start()
    watch.start()
    running.set()
    log.info(
        "agent_started",
        role=settings.role,
        version=VERSION,
        streams=list(delivery.shippers),
        queue_dir=str(settings.queue_dir),
    )
    # Waiting in short slices keeps the main thread where Python runs signal handlers.
    while not stop.wait(0.5):
        pass
    log.info("signal_received", signal=received[0])
    running.clear()
    log.info("agent_stopping", drain_seconds=settings.shutdown_ship_seconds)
    for role in roles:
        role.stop()  # producers first: what they hold reaches the outbox before the drain
    delivery.stop(drain_seconds=settings.shutdown_ship_seconds)
    watch.stop()
    watch.log_changes()
    server.stop()
    log.info("agent_stopped")
    return 0


def _startup_failed(problem: object) -> int:
    log.error("startup_failed", error=str(problem))
    print(f"moonin-agent: {problem}", file=sys.stderr)
    return EXIT_STARTUP_FAILED


def _leading(roles: Iterable[Role]) -> bool | None:
    """Whether this replica collects (None: no discovery role in this process)."""
    for role in roles:
        if isinstance(role, DiscoveryRole):
            return role.leading
    return None
