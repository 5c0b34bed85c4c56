"""The processor: the one thread that turns the informers' deltas into records.

It takes the deltas (`collector.deltas`) in order and owns everything they change: the
sinks (filters, relation indexes, normalizers and their memos, `collector.sink`), which
dependent records are stale, the snapshots, the resync's bookkeeping, the warm-up's order
and the coalescer's flush window. Nothing it owns is shared, so nothing is locked between
the informers and it, nothing calls back up into it and nothing re-enters it.

Each turn it drains what is queued (until the queue is empty or the flush window is due),
then settles: the dependent records marked stale during the drain are rebuilt, once each
however many changes marked them (a Deployment's records when a Service, HPA or ReplicaSet
changed; a Job execution's when its pods changed); snapshots and a resync that can finish
do; informers whose turn in the warm-up came are started. Once per flush window the
coalescer commits the records to the outbox, and a resync the outbox asks for starts.

How it fails:
- an object its sink cannot normalize or store is skipped, reported by its informer's
  `Skips`, and the rest go on;
- a read a normalizer needed failed (`KubeError`, e.g. a Helm release Secret's body): the
  informer's health says so, and the object is tried again after the informer's backoff
  unless a newer state of it came first;
- a full or failing disk under the state store (storing an object, forgetting those a
  list's key set no longer has, or rebuilding a dependent record as a drain settles): the
  store rolled back, the informer (or, for a rebuild, `collector.resync.AfterRollback`)
  says it is not ready, and `AfterRollback` resyncs once writes go through;
- anything else is a bug: the thread ends and its health fails liveness, so the pod
  restarts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from collector.coalesce import Coalescer
from collector.deltas import Applied, Call, Delta, DeltaQueue, Listed, Removed
from collector.informer import Informer
from collector.model import ObjectMeta
from collector.resources import Resource
from collector.sink import SourceSink
from collector.skips import Identity, SkippedObject
from kube.errors import KubeError
from runtime.health import Health, HealthReporter
from runtime.storage_errors import is_passing_storage_error

log = structlog.get_logger("collector.processor")

_Retry = tuple[Applied | Removed, float]  # the delta, and when to try it again

SETTLE_SECONDS = 0.1
"""A drain lasts at least this long unless the window ends: settling looks at every
source, and an informer slower than the processor would otherwise end a drain (and
settle) after each of its objects."""


class Processor:
    """Started once, stopped once; `process` and `settle` also serve one-shot listing."""

    def __init__(
        self,
        deltas: DeltaQueue,
        sinks: Mapping[Resource, SourceSink[Any]],
        informers: Mapping[Resource, Informer[Any]],
        *,
        coalescer: Coalescer,
        listed: Callable[[Listed], None],
        settle: Callable[[], None],
        resync: Callable[[], None],
        flush_seconds: float,
    ) -> None:
        """`listed`: what else a completed list concerns (snapshots, a resync, the
        warm-up), after its sink had it; `settle`: what runs at the end of each drain
        (rebuilds and the rest, see the module docstring); `resync`: start one."""
        self._deltas = deltas
        self._sinks = sinks
        self._informers = informers
        self._coalescer = coalescer
        self._listed = listed
        self._settle = settle
        self._resync = resync
        self._flush_seconds = flush_seconds
        self._retries: dict[tuple[Resource, str], _Retry] = {}
        self.reporter = HealthReporter("collector.processor")
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="collector-processor", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """End the thread, then process what is still queued and commit it (the
        informers have stopped putting: the queue is closed)."""
        self._stopped.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            return  # stuck in a put to the outbox: nothing more can be done from here
        while (delta := self._deltas.take_now()) is not None:
            self.process(delta)
        self.settle()
        self._coalescer.flush()

    # -- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            window_ends = time.monotonic() + self._flush_seconds
            while not self._stopped.is_set():
                self.settle()  # after each drain, and first of all: the warm-up starts here
                if time.monotonic() >= window_ends:
                    self._coalescer.flush()
                    self._resync_if_asked()
                    window_ends = time.monotonic() + self._flush_seconds
                self._drain(until=window_ends)
        except Exception:
            # A bug, not a condition to wait out: liveness fails and the pod restarts.
            log.exception("collector_processor_crashed")
            self.reporter.set(Health.failed("the collector's processor crashed"))

    def _drain(self, *, until: float) -> None:
        """Process deltas until the window ends, a full list was taken in, or none is
        queued once `SETTLE_SECONDS` have passed since the first (an idle processor waits
        for the window's end), or an object is due for another try."""
        settle_at = until
        while True:
            now = time.monotonic()
            deadline = min(settle_at, self._next_retry())
            delta = self._deltas.take(deadline - now) if now < deadline else self._deltas.take_now()
            if delta is None:
                if time.monotonic() >= deadline:
                    return
                continue
            if settle_at == until:
                settle_at = min(until, time.monotonic() + SETTLE_SECONDS)
            self.process(delta)
            if isinstance(delta, Listed) or time.monotonic() >= until:
                return  # a list taken in may be some informer's turn to start: settle now

    def settle(self) -> None:
        """The end of a drain: objects due for another try, then the collector's
        settling (rebuilds, snapshots, resync, warm-up)."""
        self._retry_due()
        try:
            self._settle()
        except Exception as exc:
            if not is_passing_storage_error(exc):
                raise
            # A rebuild's write met a full or failing disk: the store rolled back, and the
            # next settle begins with `AfterRollback`, which says so and resyncs once writes
            # go through (the resync rebuilds what this settle did not).
            log.warning("collector_settle_unwritable", error=str(exc))

    def _resync_if_asked(self) -> None:
        if not self._coalescer.resync_due():
            return
        try:
            self._resync()
        except Exception as exc:
            if not is_passing_storage_error(exc):
                raise
            self._coalescer.cannot_write(exc)  # the mark stays: tried again next window

    # -- one delta ---------------------------------------------------------------------

    def process(self, delta: Delta) -> None:
        if isinstance(delta, Call):
            delta.work()
        elif isinstance(delta, Listed):
            self._taken_in(delta)
        else:
            self._object(delta)

    def _taken_in(self, delta: Listed) -> None:
        """Hand a list's key set to its sink, then to what else a completed list concerns
        (snapshots, a resync, the warm-up). A full or failing disk under the state store
        (forgetting what vanished, or reading what a snapshot holds: a read may have to
        write out the page cache) stops it there: the store rolled back, and
        `AfterRollback` resyncs once writes go through, whose relist hands the key set
        over again."""
        try:
            self._sinks[delta.resource].listed(delta.keys)
            self._listed(delta)
        except Exception as exc:
            if not is_passing_storage_error(exc):
                raise
            self._informers[delta.resource].storage_failing(exc)

    def _object(self, delta: Applied | Removed) -> None:
        meta: ObjectMeta = delta.obj.metadata
        informer = self._informers[delta.resource]
        retried = bool(self._retries) and (
            self._retries.pop((delta.resource, meta.key), None) is not None
        )
        sink = self._sinks[delta.resource]
        try:
            if isinstance(delta, Removed):
                sink.remove(delta.obj)
            else:
                sink.apply(delta.obj)
        except SkippedObject as skip:
            informer.skips.skipped(Identity(meta.key, meta.resource_version), skip)
            return
        except KubeError as exc:
            delay = informer.object_failed(exc)
            self._retries[(delta.resource, meta.key)] = (delta, time.monotonic() + delay)
            return
        except Exception as exc:
            if not is_passing_storage_error(exc):
                raise
            # The store rolled back: `AfterRollback` resyncs once writes go through.
            informer.storage_failing(exc)
            return
        informer.skips.passed(meta.key)
        if retried:
            informer.object_recovered()

    def _next_retry(self) -> float:
        if not self._retries:
            return float("inf")
        return min((due for _, due in self._retries.values()), default=float("inf"))

    def _retry_due(self) -> None:
        now = time.monotonic()
        due = [delta for delta, at in self._retries.values() if at <= now]
        for delta in due:
            self._object(delta)
