"""The heartbeat: tells the platform every minute that the cluster is connected, and how.

Each beat builds fresh metadata (the callable the collector passes: provider, region,
Kubernetes version, node count, leader, ...) and posts it straight through the API client.
Most of it comes from the Nodes, which list only after the first informers: the first beat
waits until `ready()` says the metadata is known (at most `ready_within`, by default one
interval), and a beat that went out before that is followed by the next one as soon as it
is, not an interval later.
Heartbeats are never queued: a failed one is not replayed, the next one carries the state
of its own moment. After a failure the next beat comes sooner (full-jitter backoff, never
later than the interval unless the platform asks with `Retry-After`), so the cluster shows
as connected again soon after an outage.

The answer `{"resync": true}` means the platform lost state: `on_resync` is called once
per such answer, and the collector re-sends everything with snapshots.

How it fails: a Moonin API error degrades the `heartbeat` health with the reason and is
logged once per change of state; any other exception (the metadata callable, `on_resync`)
is logged and the loop goes on. `stop()` returns promptly, even in the middle of a wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from runtime.backoff import RETRY_AFTER_CEILING_SECONDS, Backoff
from runtime.health import Health, HealthReporter
from shipper.errors import MooninAPIError, RetryLater

log = structlog.get_logger("collector.heartbeat")

INTERVAL_SECONDS = 60.0
READY_POLL_SECONDS = 0.1


class HeartbeatClient(Protocol):
    def heartbeat(self, metadata: Mapping[str, Any]) -> dict[str, Any]: ...


class Heartbeat:
    """A daemon thread that beats every `interval` seconds, the first time as soon as
    `ready()` (at most `ready_within` on)."""

    def __init__(
        self,
        client: HeartbeatClient,
        metadata: Callable[[], Mapping[str, Any]],
        on_resync: Callable[[], None],
        *,
        interval: float = INTERVAL_SECONDS,
        reporter: HealthReporter | None = None,
        ready: Callable[[], bool] = lambda: True,
        ready_within: float | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("the heartbeat interval must be positive")
        self._client = client
        self._metadata = metadata
        self._on_resync = on_resync
        self._ready = ready
        self._ready_within = interval if ready_within is None else ready_within
        self.interval = interval
        self.reporter = reporter or HealthReporter("heartbeat")
        self._backoff = Backoff(initial=min(1.0, interval), maximum=interval)
        self._beat_lock = threading.Lock()  # beat_now() and the thread never overlap
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """End the loop; True once the thread is gone (a beat in flight may finish first)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def beat_now(self) -> bool:
        """Send one heartbeat now; True when the platform accepted it."""
        return self._beat() is None

    # -- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        ready = self._wait_ready(self._ready_within)
        while not self._stopped.is_set():
            wait = self._beat()
            pause = self.interval if wait is None else wait
            if ready:
                self._stopped.wait(pause)
            else:
                ready = self._wait_ready(pause)

    def _wait_ready(self, seconds: float) -> bool:
        """Up to `seconds` until the metadata is known; False if it is not (or stopped)."""
        deadline = time.monotonic() + seconds
        while not self._ready():
            left = deadline - time.monotonic()
            if left <= 0 or self._stopped.wait(min(left, READY_POLL_SECONDS)):
                return False
        return True

    def _beat(self) -> float | None:
        """One beat. None when it was delivered, else how long to wait before the next."""
        with self._beat_lock:
            try:
                answer = self._client.heartbeat(self._metadata())
            except MooninAPIError as e:
                self._failed(f"heartbeat failing: {e}", status=e.status, error=str(e))
                retry_after = e.retry_after if isinstance(e, RetryLater) else None
                wait = self._backoff.next_delay()
                if retry_after is not None:
                    wait = max(wait, min(retry_after, RETRY_AFTER_CEILING_SECONDS))
                return wait
            except Exception as e:
                self._failed(f"heartbeat error: {type(e).__name__}", exc_info=True)
                return self._backoff.next_delay()
            self._backoff.reset()
            self.reporter.count("heartbeats_sent")
            if self.reporter.set(Health.healthy()):
                log.info("heartbeat_recovered")
            if answer.get("resync") is True:
                self._resync()
            return None

    def _failed(self, reason: str, **fields: Any) -> None:
        self.reporter.count("heartbeats_failed")
        if self.reporter.set(Health.degraded(reason)):
            log.warning("heartbeat_failing", reason=reason, **fields)

    def _resync(self) -> None:
        log.info("resync_requested")
        try:
            self._on_resync()
        except Exception:
            log.exception("resync_request_failed")
