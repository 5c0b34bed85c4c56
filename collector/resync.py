"""Sending everything again: a resync at once, anti-entropy now and then.

A resync (the outbox marked `resync_needed`, or the platform asked through the heartbeat)
forgets what was sent and relists every resource; the outbox mark is cleared once every
informer has listed again and what that produced is committed. Anti-entropy, in case the
platform lost something nobody noticed, does the same one resource at a time, waiting for
room in the outbox between them.

A full or failing disk that rolled back the state store (`collector.state`) is a gap
nobody can measure: `AfterRollback` holds the collector unready until a write goes through
again, then resyncs, anew even if one was running (what it had forgotten may be back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from collector.coalesce import Coalescer
from collector.informer import Informer
from collector.state import StateStore
from collector.warmup import cannot_list
from runtime.backoff import Backoff
from runtime.health import Health, HealthReporter

log = structlog.get_logger("collector")


class Resync:
    """One resync at a time; runs on the collector's processor (`collector.processor`)."""

    def __init__(
        self,
        informers: Sequence[Informer[Any]],
        *,
        coalescer: Coalescer,
        reporter: HealthReporter,
        abort_streams: Callable[[], None],
    ) -> None:
        self._informers = informers
        self._coalescer = coalescer
        self._reporter = reporter
        self._abort_streams = abort_streams
        self._pending: set[str] = set()
        self._asked = False  # a resync asked for from another thread, not yet started
        self._relisted: set[str] = set()  # of `_pending`, what has listed again

    @property
    def in_progress(self) -> bool:
        """(Any thread: a glance at what the processor holds.)"""
        return self._asked or bool(self._pending)

    def ask(self) -> None:
        """(Any thread.) A resync is on its way to the processor (`start` follows)."""
        self._asked = True

    def start(self, *, again: bool = False) -> None:
        """Forget what was sent and relist everything (idempotent while one is running,
        unless `again`: what it forgot may have been rolled back)."""
        self._asked = False
        self.settle()
        if self._pending and not again:
            return
        log.info("resync_started")
        self._reporter.count("resyncs")
        self._coalescer.forget_all()
        # What cannot list now relists when it recovers, with its fingerprints gone;
        # waiting for it would keep every later resync from starting.
        self._pending = {
            i.resource.plural for i in self._informers if i.alive and not cannot_list(i)
        }
        self._relisted = set()
        for informer in self._informers:
            informer.request_relist()
        self._abort_streams()

    def listed(self, plural: str) -> None:
        """The resource has listed again; the resync finishes in `settle`, after the
        records its lists made stale are rebuilt (until then it is in progress)."""
        if self._pending:
            self._relisted.add(plural)

    def settle(self) -> None:
        """Check on a resync running, if any (see `_settle`)."""
        if self._pending:
            self._settle()

    def _settle(self) -> None:
        """Stop waiting for what cannot list now; once nothing is left, commit what the
        resync produced, and only then clear the outbox's mark: a crash before that finds
        the mark and resyncs again."""
        waiting = {
            i.resource.plural
            for i in self._informers
            if i.resource.plural in self._pending - self._relisted and not cannot_list(i)
        }
        if waiting:
            self._pending = waiting | (self._pending & self._relisted)
            return
        self._coalescer.flush()
        committed = self._coalescer.empty  # else the outbox refused them: the mark stays
        if committed:
            self._coalescer.outbox.clear_resync_needed()
        log.info("resync_done", committed=committed)
        self._pending, self._relisted = set(), set()


class AfterRollback:
    """Checked at the end of each of the processor's drains: from a rollback of the state
    store until the resync after it is done, the collector is unready ("disk full or
    failing"). While the store is rolled back it probes, with backoff, for a write going
    through; the first that does starts a resync. The backoff starts over only once the
    store has gone its longest wait without a rollback."""

    def __init__(
        self,
        state: StateStore,
        resync: Resync,
        *,
        reporter: HealthReporter,
        backoff: Backoff | None = None,
    ) -> None:
        self._state = state
        self._resync = resync
        self._reporter = reporter
        self._backoff = backoff or Backoff(initial=1.0, maximum=30.0)
        self._next_probe = 0.0
        self._probed_at: float | None = None  # the last probe that went through

    def check(self) -> None:
        now = time.monotonic()
        if not self._state.rolled_back:
            self._settle(now)
            return
        unwritable = Health.not_ready("disk full or failing: the state cannot be written")
        if self._reporter.set(unwritable):
            log.error("collector_state_unwritable")
            self._reporter.count("state_rollbacks")
        if now < self._next_probe:
            return
        # Waits grow also after a probe that went through: a small write may fit where the
        # resync's do not, and each round lists every resource again.
        self._next_probe = now + self._backoff.next_delay()
        if self._state.probe_writable():
            self._probed_at = now
            self._resync.start(again=True)

    def _settle(self, now: float) -> None:
        if self._probed_at is None:
            return
        if not self._reporter.health.ok and not self._resync.in_progress:
            self._reporter.set(Health.healthy())
            log.info("collector_state_writable")
        # Written without a rollback for as long as the longest wait: the disk is back.
        if now - self._probed_at > self._backoff.maximum:
            self._backoff.reset()
            self._probed_at = None


class AntiEntropy:
    """Every `every` seconds, each resource's kind is sent again with its snapshot: forget
    its fingerprints, relist it, wait for that list and for room in the outbox, then the
    next."""

    def __init__(
        self,
        informers: Sequence[Informer[Any]],
        *,
        kinds: dict[str, str],
        coalescer: Coalescer,
        forget: Callable[[str], None],
        abort_streams: Callable[[str], None],
        reporter: HealthReporter,
        stopped: threading.Event,
        every: float,
        list_timeout: float,
    ) -> None:
        """`kinds`: resource (plural) -> its record kind, for the resources with snapshots;
        `forget`: have the fingerprints of a record kind forgotten (before what is put
        after it: the processor's queue keeps the order)."""
        self._informers = informers
        self._kinds = kinds
        self._coalescer = coalescer
        self._forget = forget
        self._abort_streams = abort_streams
        self._reporter = reporter
        self._stopped = stopped
        self._every = every
        self._list_timeout = list_timeout

    def run(self) -> None:
        while not self._stopped.wait(self._every):
            log.info("anti_entropy_started")
            for informer in self._informers:
                kind = self._kinds.get(informer.resource.plural)
                if kind is None:
                    continue
                while self._coalescer.outbox.at_bound:
                    if self._stopped.wait(1.0):
                        return
                lists = informer.lists_completed
                self._forget(kind)
                informer.request_relist()
                self._abort_streams(informer.resource.path)  # only its own watch
                deadline = time.monotonic() + self._list_timeout
                while informer.lists_completed == lists:
                    if self._stopped.wait(0.2):
                        return
                    if time.monotonic() > deadline:
                        break  # failing (forbidden?): its informer says so; go on
            log.info("anti_entropy_done")
            self._reporter.count("anti_entropy_rounds")
