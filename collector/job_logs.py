"""Failed Jobs' logs, read on a worker of their own: no informer ever waits on a kubelet.

A container's log is read through the API server from the kubelet of the pod's node. When
that kubelet does not answer, the API server answers 500 only after its own dial or TLS
handshake timeout (10 s), so a read on the Jobs informer's thread would hold back every
other Job's record for that long. Instead the Job normalizer asks `JobLogs.lines`, which
answers at once from memory: the lines once they have been read, else None (and the read
is queued). The collector holds that record back while the read is pending, for at most
`hold_seconds` (`holds`): a kubelet that answers in time gives one record, with the logs
(and a restart derives the very record it sent before, which its fingerprint then drops);
one that does not lets the record go without them (`logs: null`) once the hold is over.
Whenever a read settles (read, refused, given up) `on_read(job key)` has the Job's record
built again, and so does the collector for the Jobs `released()` names, whose hold ended
(it asks before every flush: the worker may be waiting on a kubelet meanwhile); when the
lines came, the record carries them. The platform keeps
the latest upsert of a key, so it gets the logs in a later record.

One worker thread reads one log at a time, each read within its own deadline, from a
bounded set of pending Jobs (a Job asked for while the set is full is asked for again at
its next update). A read that fails for now (a 500, a timeout) is tried again after a
full-jitter backoff, a bounded number of times, then given up. A read refused (403, the pod
gone: the read answers None) is not tried again. Neither is kept as "no logs": the Job's
next update (a pod change, a relist, anti-entropy) asks again once `reask_seconds` have
passed (the record built again right then must not start the same reads over). A Job
deleted meanwhile is forgotten: its pending read is dropped, and whatever a read in flight
for it brings back is not kept.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from collector.normalize.base import LogRequest
from runtime.backoff import Backoff
from runtime.health import HealthReporter

log = structlog.get_logger("collector.job_logs")

ReadLog = Callable[[LogRequest], list[str] | None]
"""A request -> the log's last lines; None when it can never be read (refused, the pod
gone). Raises when it may work later."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobLogSettings:
    read_seconds: float = 10.0
    """One read's deadline: the API server's own answer to a silent kubelet takes that long."""
    attempts: int = 5
    """Reads of one log before it is given up (until the Job's next update)."""
    retry_seconds: float = 2.0
    """The backoff's first ceiling; it doubles with every failed read of the log."""
    max_retry_seconds: float = 60.0
    pending_jobs: int = 100
    """Jobs whose read waits at once; past it a Job is asked for at its next update."""
    kept_jobs: int = 1000
    """Jobs whose lines are kept (a CronJob keeps one failed Job by default)."""
    hold_seconds: float = 10.0
    """How long a failed run's record waits for its log before it goes without."""
    reask_seconds: float = 600.0
    """After a read was given up or refused, how long the Job's updates do not ask again."""


@dataclass(slots=True)
class _Pending:
    request: LogRequest
    backoff: Backoff
    due: float
    hold_until: float
    attempts: int = 0
    reading: bool = False
    released: bool = False  # its record no longer waits for the read


@dataclass(slots=True)
class _State:
    pending: dict[str, _Pending] = field(default_factory=dict)  # job uid -> its read
    kept: OrderedDict[str, list[str]] = field(default_factory=OrderedDict)  # job uid -> lines
    # job uid -> when its read was given up or refused
    unread: OrderedDict[str, float] = field(default_factory=OrderedDict)


class JobLogs:
    """`collector.normalize.base.JobLogs`, read by one worker thread. Thread-safe."""

    def __init__(
        self,
        read: ReadLog,
        on_read: Callable[[str], None],
        *,
        settings: JobLogSettings,
        reporter: HealthReporter,
    ) -> None:
        self._read = read
        self._on_read = on_read
        self._settings = settings
        self._reporter = reporter
        self._state = _State()
        self._changed = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="job-logs", daemon=True)

    # -- asked by the normalizer and the collector (its lock held) -----------------------

    def lines(self, request: LogRequest) -> list[str] | None:
        uid = request.job_uid
        with self._changed:
            kept = self._state.kept.get(uid)
            if kept is not None:
                self._state.kept.move_to_end(uid)
                return kept
            pending = self._state.pending.get(uid)
            if pending is not None:
                pending.request = request  # the Job's failing pod may have changed since
                return None
            unread_at = self._state.unread.get(uid)
            if (
                unread_at is not None
                and time.monotonic() < unread_at + self._settings.reask_seconds
            ):
                return None
            if len(self._state.pending) >= self._settings.pending_jobs:
                self._reporter.count("job_logs_not_queued")
                return None
            backoff = Backoff(
                initial=self._settings.retry_seconds, maximum=self._settings.max_retry_seconds
            )
            now = time.monotonic()
            hold_until = now + self._settings.hold_seconds
            self._state.pending[uid] = _Pending(request, backoff, due=now, hold_until=hold_until)
            self._changed.notify()
            return None

    def holds(self, job_uid: str) -> bool:
        """Whether the Job's record waits for its log now."""
        with self._changed:
            pending = self._state.pending.get(job_uid)
            return (
                pending is not None
                and not pending.released
                and time.monotonic() < pending.hold_until
            )

    def released(self) -> list[str]:
        """The Jobs whose hold has ended since the last call (their record goes without
        its log now)."""
        with self._changed:
            return self._expired(at=time.monotonic())

    def forget(self, job_uid: str) -> None:
        with self._changed:
            self._state.pending.pop(job_uid, None)
            self._state.kept.pop(job_uid, None)
            self._state.unread.pop(job_uid, None)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Returns at once: a read in flight ends within its deadline and keeps nothing."""
        with self._changed:
            self._stopped = True
            self._changed.notify()

    def read_pending(self) -> None:
        """Read every pending log once, on the caller's thread (a one-shot listing); no
        record waits any longer."""
        with self._changed:
            due = [p for p in self._state.pending.values() if not p.reading]
            for pending in due:
                pending.reading = True
        for pending in due:
            self._read_one(pending)
        with self._changed:
            expired = self._expired(at=float("inf"))
        for key in expired:
            self._on_read(key)

    # -- the worker ----------------------------------------------------------------------

    def _run(self) -> None:
        while (pending := self._next()) is not None:
            self._read_one(pending)

    def _next(self) -> _Pending | None:
        """The read due first, once it is due; None once stopped."""
        with self._changed:
            while not self._stopped:
                waiting = [p for p in self._state.pending.values() if not p.reading]
                if not waiting:
                    self._changed.wait()
                    continue
                first = min(waiting, key=lambda p: p.due)
                wait = first.due - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                first.reading = True
                return first
            return None

    def _expired(self, *, at: float) -> list[str]:
        """(Lock held.) The Jobs whose hold is over at `at`, now released."""
        keys = []
        for pending in self._state.pending.values():
            if not pending.released and pending.hold_until <= at:
                pending.released = True
                keys.append(pending.request.job_key)
        return keys

    def _read_one(self, pending: _Pending) -> None:
        request = pending.request
        try:
            lines = self._read(request)
        except Exception as exc:
            self._failed(pending, request, exc)
            return
        with self._changed:
            if not self._current(pending, request):
                return
            del self._state.pending[request.job_uid]
            if lines is None:  # refused: the record goes without logs
                self._unread(request.job_uid)
            else:
                self._state.unread.pop(request.job_uid, None)
                self._state.kept[request.job_uid] = lines
                while len(self._state.kept) > self._settings.kept_jobs:
                    self._state.kept.popitem(last=False)
        if lines is not None:
            self._reporter.count("job_logs_read")
        self._on_read(request.job_key)

    def _failed(self, pending: _Pending, request: LogRequest, exc: Exception) -> None:
        with self._changed:
            # Counted under the lock: a count seen means the read is due again or given up.
            self._reporter.count("job_log_reads_failed")
            if not self._current(pending, request):
                return
            pending.attempts += 1
            if pending.attempts >= self._settings.attempts:
                del self._state.pending[request.job_uid]
                self._unread(request.job_uid)
                given_up = True
            else:
                pending.reading = False
                pending.due = time.monotonic() + pending.backoff.next_delay()
                given_up = False
        if given_up:
            self._on_read(request.job_key)  # no longer held: it goes without
        log.warning(
            "job_log_unavailable",
            namespace=request.namespace,
            pod=request.pod,
            attempt=pending.attempts,
            given_up=given_up,
            error=str(exc),
        )

    def _unread(self, job_uid: str) -> None:
        """(Lock held.)"""
        self._state.unread[job_uid] = time.monotonic()
        self._state.unread.move_to_end(job_uid)
        while len(self._state.unread) > self._settings.kept_jobs:
            self._state.unread.popitem(last=False)

    def _current(self, pending: _Pending, request: LogRequest) -> bool:
        """(Lock held.) Whether what was read is still wanted; if the Job now wants another
        pod's log, that is read next. False once stopped or the Job was forgotten."""
        if self._stopped or self._state.pending.get(request.job_uid) is not pending:
            return False
        if pending.request != request:
            pending.reading = False
            pending.due = time.monotonic()
            self._changed.notify()
            return False
        return True
