"""Delivery: one thread per outbox stream, batching, retrying and never giving up on time.

The loop takes whole chunks (up to the batch limits, after a short linger), posts them, and
acks them only when every record was accepted (2xx or 409) or dead-lettered. What it does
on failure follows the contract's status classes (`shipper.errors`):

- `RejectedBody` (400/413/422): split the batch in halves until the records at fault are
  alone; those go to the dead-letter table, the rest is delivered.
- `StreamPaused` (401/403/other 4xx): keep everything, report the stream unhealthy and
  retry with backoff; at once when the client found a rotated token file on that answer.
  Logged once per state change.
- `RetryLater` (408/429/5xx, network): back off with full jitter, honouring `Retry-After`.

There is no time-based giving up: the outbox is the retry buffer. A batch that is still
unacked when the process stops is resumed by the outbox on the next start.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from runtime.backoff import Backoff
from runtime.health import Health, HealthReporter
from shipper.errors import MooninAPIError, RejectedBody, RetryLater, StreamPaused
from shipper.outbox import Batch, StreamOutbox
from shipper.records import Entry

log = structlog.get_logger("shipper")

PostBatch = Callable[[str, Sequence[bytes]], None]
"""Sends one batch: (batch id used as Idempotency-Key, encoded records)."""

# How often an idle or backing-off loop looks at its stop flag.
_POLL_SECONDS = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class ShipperSettings:
    batch_max_records: int = 500
    """Records per POST; chunks are cut to this so a chunk always fits one batch."""
    batch_max_bytes: int = 1024 * 1024
    """Encoded bytes per POST, before gzip."""
    linger_seconds: float = 0.2
    """How long a partly filled batch waits for more records."""
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 300.0


class _Stopped(Exception):
    """The stop deadline passed while a batch was still being delivered."""


class StreamShipper:
    """Delivers one stream. `start()` runs it in a thread; `stop()` drains for a bounded time."""

    def __init__(
        self,
        outbox: StreamOutbox,
        post: PostBatch,
        *,
        settings: ShipperSettings,
        reporter: HealthReporter | None = None,
    ) -> None:
        self.outbox = outbox
        self.stream = outbox.stream
        self._post = post
        self._settings = settings
        self.reporter = reporter or HealthReporter(f"shipper.{self.stream}")
        self._backoff = Backoff(
            initial=settings.backoff_initial_seconds, maximum=settings.backoff_max_seconds
        )
        self._stop_at: float | None = None  # monotonic deadline once a stop was asked for
        self._stop_requested = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"shipper-{self.stream}", daemon=True
        )

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, *, drain_seconds: float) -> bool:
        """Ship what is queued for at most `drain_seconds`, then stop. True if it stopped."""
        if self._thread.ident is None:
            return True  # never started (start-up failed after the outbox opened)
        self._stop_at = time.monotonic() + drain_seconds
        self._stop_requested.set()
        self.outbox.wake()
        self._thread.join(drain_seconds + _POLL_SECONDS * 2)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    return
                self._deliver(batch)
                self._until_written(functools.partial(self.outbox.ack, batch))
        except _Stopped:
            log.info("shipper_stopped_with_batch_unacked", stream=self.stream)
        except Exception:
            # The thread ends here; the health it leaves behind is what /healthz will act on.
            log.exception("shipper_crashed", stream=self.stream)
            self.reporter.set(Health.failed("shipper thread crashed"))

    def _next_batch(self) -> Batch | None:
        """The next batch, or None once stopping and nothing more can be shipped in time."""
        settings = self._settings
        while True:
            if self._stopping and (self._deadline_passed or self._ready_records() == 0):
                return None
            if self.outbox.wait_for_records(1, _POLL_SECONDS):
                break
        if not self._stopping:
            self.outbox.wait_for_records(settings.batch_max_records, settings.linger_seconds)
        return self.outbox.take(
            max_records=settings.batch_max_records, max_bytes=settings.batch_max_bytes
        )

    def _deliver(self, batch: Batch) -> None:
        """Post until every record is accepted or dead-lettered; halves rejected bodies."""
        pending: list[tuple[int, int]] = [(0, len(batch.entries))]
        while pending:
            start, end = pending[0]
            entries = batch.entries[start:end]
            whole = (start, end) == (0, len(batch.entries))
            batch_id = batch.batch_id if whole else f"{batch.batch_id}/{start}-{end}"
            try:
                self._post(batch_id, [entry.body for entry in entries])
            except RejectedBody as exc:
                pending.pop(0)
                if end - start == 1:
                    self._dead_letter(entries, exc)
                else:
                    middle = (start + end) // 2
                    pending[:0] = [(start, middle), (middle, end)]
                continue
            except StreamPaused as exc:
                self._failed(exc, len(entries), paused=True)
                continue
            except RetryLater as exc:
                self._failed(exc, len(entries), paused=False)
                continue
            pending.pop(0)
            self._delivered(len(entries))

    # -- outcomes ----------------------------------------------------------------------

    def _delivered(self, records: int) -> None:
        self.reporter.count("records_shipped", records)
        self.reporter.count("batches_shipped")
        self._backoff.reset()
        if self.reporter.set(Health.healthy()):
            log.info("stream_delivering", stream=self.stream)

    def _dead_letter(self, entries: Sequence[Entry], exc: MooninAPIError) -> None:
        self._until_written(
            functools.partial(
                self.outbox.dead_letter, entries, status=exc.status, response=exc.body or str(exc)
            )
        )
        log.error(
            "record_dead_lettered", stream=self.stream, status=exc.status, response=exc.body[:200]
        )

    def _failed(self, exc: MooninAPIError, records: int, *, paused: bool) -> None:
        self.reporter.count("records_retried", records)
        self.reporter.count("requests_failed")
        reason = f"paused: {exc}" if paused else f"retrying: {exc}"
        if self.reporter.set(Health.degraded(reason)):
            event = "stream_paused" if paused else "stream_retrying"
            log.warning(event, stream=self.stream, status=exc.status, error=str(exc))
        if paused and exc.token_rotated:
            log.info("token_reloaded", stream=self.stream)
            return  # a rotated token deserves an immediate try
        retry_after = exc.retry_after if isinstance(exc, RetryLater) else None
        self._sleep(self._backoff.next_delay(at_least=retry_after))

    def _until_written(self, write: Callable[[], None]) -> None:
        """Retry a write to the queue file (an ack, a dead letter) until it succeeds. A full
        disk or an I/O error is a condition to report and wait out, not a reason to end the
        thread. The delivered batch stays in the file meanwhile; only a restart before the
        write succeeds sends it again (answered 409)."""
        while True:
            try:
                write()
                return
            except sqlite3.OperationalError as exc:
                if self.reporter.set(Health.degraded(f"cannot write the queue file: {exc}")):
                    log.error("outbox_write_failed", stream=self.stream, error=str(exc))
                self._sleep(self._backoff.next_delay())

    # -- helpers -----------------------------------------------------------------------

    @property
    def _stopping(self) -> bool:
        return self._stop_at is not None

    @property
    def _deadline_passed(self) -> bool:
        return self._stop_at is not None and time.monotonic() >= self._stop_at

    def _ready_records(self) -> int:
        return self.outbox.wait_for_records(1, 0)

    def _sleep(self, seconds: float) -> None:
        """Wait, but never past the stop deadline: then the batch stays for the next start."""
        until = time.monotonic() + seconds
        while (remaining := until - time.monotonic()) > 0:
            if self._stop_at is None:
                self._stop_requested.wait(remaining)  # a stop ends the wait early
                continue
            left = self._stop_at - time.monotonic()
            if left <= 0:
                raise _Stopped
            time.sleep(min(remaining, left))
        if self._deadline_passed:
            raise _Stopped
