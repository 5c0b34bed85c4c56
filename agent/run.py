"""`moonin-agent run`: one process, its outbox, a shipper per stream, and a clean shutdown.

The role decides the streams: `discovery` ships the discovery stream, `scaling` the scaling
stream, `all` both (each to its own API). Producers (the collector, the scheduler) plug in
as roles (`agent.roles`); on SIGTERM they stop first, so what they hold in memory reaches
the outbox, then the shippers drain for `shutdown_ship_seconds` (`agent.delivery`) and the
process exits. Whatever is still queued waits on disk for the next start.

How it fails: a start-up that cannot go on prints one line and exits with the code
`agent.exits` gives it (2: the configuration or the cluster settings; 1: anything else).
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field

import structlog

from agent import allocator, exits, gil, heap
from agent.config import Settings, misspelt_variables, split_host_port
from agent.delivery import Delivery, open_delivery
from agent.health_server import HealthServer
from agent.health_watch import HealthWatch
from agent.logs import configure_logging
from agent.metrics import AgentMetrics
from agent.roles import Role, build_roles, leading
from kube.cluster import KubeConfigError, KubeTarget, load_target
from runtime.version import VERSION
from shipper.lock import QueueDirectoryBusy
from shipper.queuefile import QueueFileError
from shipper.token import TokenSource

log = structlog.get_logger("agent")


def run(
    settings: Settings,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    dry_run: bool = False,
) -> int:
    token = _set_up_process(settings)
    for variable, meant in misspelt_variables(os.environ):
        # Only the name: the value may be the very secret it was meant to carry.
        log.warning("setting_name_misspelt", variable=variable, did_you_mean=meant)
    try:
        target = _cluster(kubeconfig=kubeconfig, context=context)
        stop = StopSignal.install()
        heap.tune()  # the process is configured and no role's thread has started yet
        gil.tune()
        process = _start(settings, token, target=target, dry_run=dry_run)
    except exits.Failure as exc:
        if exc.code != exits.CANNOT_START:
            log.error("startup_failed", error=str(exc))
        return exc.report()
    log.info(
        "agent_started",
        role=settings.role,
        version=VERSION,
        streams=list(process.delivery.shippers),
        queue_dir=str(settings.outbox.queue_dir),
    )
    log.info("signal_received", signal=stop.wait())
    process.stop(drain_seconds=settings.outbox.shutdown_ship_seconds)
    return exits.OK


def _set_up_process(settings: Settings) -> TokenSource:
    """The allocator and the logs, before anything else runs; the token they must hide."""
    tuned = allocator.tune()  # before any thread allocates: see agent/allocator.py
    token = TokenSource(value=settings.identity.token, file=settings.identity.token_file)
    configure_logging(settings.process.log_level, secrets=token.secrets)
    log.debug("allocator_tuned", settings=tuned)
    return token


def _cluster(*, kubeconfig: str | None, context: str | None) -> KubeTarget:
    """The cluster every role of the process reaches (kube/__init__.py states the rule)."""
    try:
        return load_target(os.environ, kubeconfig=kubeconfig, context=context)
    except KubeConfigError as exc:
        raise exits.Failure(exc, exits.CANNOT_START) from None


@dataclass
class StopSignal:
    """SIGTERM and SIGINT, as an event the main thread waits on."""

    event: threading.Event = field(default_factory=threading.Event)
    received: list[str] = field(default_factory=list)

    @classmethod
    def install(cls) -> StopSignal:
        stop = cls()
        signal.signal(signal.SIGTERM, stop._handle)
        signal.signal(signal.SIGINT, stop._handle)
        return stop

    def _handle(self, signum: int, _frame: object) -> None:
        # No logging here: the handler can interrupt the main thread inside a log write,
        # and the logger's lock is not reentrant. The main loop logs the signal instead.
        self.received.append(signal.Signals(signum).name)
        self.event.set()

    def wait(self) -> str:
        """Block until a signal arrives; its name."""
        # Waiting in short slices keeps the main thread where Python runs signal handlers.
        while not self.event.wait(0.5):
            pass
        return self.received[0]


@dataclass
class _Process:
    """What `run` started, in the order it stops them."""

    delivery: Delivery
    roles: list[Role]
    watch: HealthWatch
    server: HealthServer
    running: threading.Event

    def stop(self, *, drain_seconds: float) -> None:
        self.running.clear()
        log.info("agent_stopping", drain_seconds=drain_seconds)
        for role in self.roles:
            role.stop()  # producers first: what they hold reaches the outbox before the drain
        self.delivery.stop(drain_seconds=drain_seconds)
        self.watch.stop()
        self.watch.log_changes()
        self.server.stop()
        log.info("agent_stopped")


def _start(
    settings: Settings,
    token: TokenSource,
    *,
    target: KubeTarget,
    dry_run: bool,
) -> _Process:
    """Open the outbox, build the roles and the health server, and start them all."""
    metrics = AgentMetrics()
    try:
        delivery = open_delivery(settings, token, observe=metrics.observe_request)
    except (QueueDirectoryBusy, QueueFileError, OSError) as exc:
        raise exits.unusable_queue(exc) from None
    try:
        roles = build_roles(settings, delivery, target=target, dry_run=dry_run)
        watch = HealthWatch(
            lambda: [*delivery.reporters(), *(r for role in roles for r in role.reporters())]
        )
        metrics.read_from(watch.reporters, queues=delivery.queues, leader=lambda: leading(roles))
        running = threading.Event()  # readiness: set once started, cleared when stopping
        server = _health_server(settings, watch, roles, metrics, running)
    except exits.Failure:
        delivery.stop(drain_seconds=0)
        raise
    server.start()
    delivery.start()
    started: list[Role] = []
    try:
        for role in roles:
            role.start()  # discovery opens the collector's state file beside the outbox
            started.append(role)
    except (QueueFileError, OSError) as exc:
        for role in started:
            role.stop()
        delivery.stop(drain_seconds=0)
        server.stop()
        raise exits.unusable_queue(exc) from None
    watch.start()
    running.set()
    return _Process(delivery, roles, watch, server, running)


def _health_server(
    settings: Settings,
    watch: HealthWatch,
    roles: list[Role],
    metrics: AgentMetrics,
    running: threading.Event,
) -> HealthServer:
    """/healthz, /readyz and /metrics on `HEALTH_ADDR` (not started)."""
    try:
        return HealthServer(
            *split_host_port(settings.process.health_addr),
            live=lambda: [*watch.problems(), *(p for role in roles for p in role.problems())],
            ready=lambda: (
                watch.not_ready() if running.is_set() else ["not running (starting or stopping)"]
            ),
            details=watch.notes,
            metrics=metrics.exposition,
        )
    except OSError as exc:
        raise exits.Failure(
            f"HEALTH_ADDR {settings.process.health_addr}: {exc.strerror or exc}", exits.CANNOT_START
        ) from None
