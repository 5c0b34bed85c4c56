"""Health and counters that every long-running component exposes.

Components own a `HealthReporter`; the process wiring polls `snapshot()` and serves or logs
it. Nothing here knows who reads it, so collector, scheduler and shipper can all use it
without importing the wiring.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Health:
    """One component's state: ok, degraded with a short machine-friendly reason (it keeps
    trying: an unreachable API, a forbidden resource), or failed (`fatal`: its thread is
    gone and only a restart of the process brings it back). `unready`: degraded in a way
    an operator must see in readiness too: the cluster refuses a permission it needs (the
    reason names it, and it lasts until someone changes RBAC or a policy), or the component
    is holding its place until something outside it recovers (a full disk)."""

    ok: bool
    reason: str | None = None
    fatal: bool = False
    unready: bool = False

    @classmethod
    def healthy(cls) -> Health:
        return cls(ok=True)

    @classmethod
    def degraded(cls, reason: str) -> Health:
        return cls(ok=False, reason=reason)

    @classmethod
    def forbidden(cls, reason: str) -> Health:
        return cls(ok=False, reason=reason, unready=True)

    @classmethod
    def not_ready(cls, reason: str) -> Health:
        return cls(ok=False, reason=reason, unready=True)

    @classmethod
    def failed(cls, reason: str) -> Health:
        return cls(ok=False, reason=reason, fatal=True)


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    component: str
    health: Health
    counters: dict[str, int] = field(default_factory=dict)
    stalled_parts: tuple[str, ...] = ()
    """The parts (loops) that made no progress for longer than the component said they may
    go without; `("",)` for a component with one loop."""
    notes: tuple[str, ...] = ()
    """What an operator should know that fails no check (objects skipped), shown as
    `/readyz` details."""

    @property
    def stalled(self) -> bool:
        return bool(self.stalled_parts)


class HealthReporter:
    """Thread-safe holder of one component's health and monotonically increasing counters.

    A component whose loop must keep turning sets `stalled_after` (seconds) and calls
    `progress()` each turn; a snapshot taken after that long without one says `stalled`. A
    component with several loops names them (`parts`) and each calls `progress(part)`: one
    loop that stops is stalled whatever the others do.
    """

    def __init__(
        self,
        component: str,
        *,
        stalled_after: float | None = None,
        parts: tuple[str, ...] = ("",),
    ) -> None:
        self.component = component
        self.stalled_after = stalled_after
        self._lock = threading.Lock()
        self._health = Health.healthy()
        self._counters: Counter[str] = Counter()
        self._notes: dict[str, str] = {}
        started = time.monotonic()
        self._progress_at = dict.fromkeys(parts, started)

    def progress(self, part: str = "") -> None:
        with self._lock:
            self._progress_at[part] = time.monotonic()

    def set(self, health: Health) -> bool:
        """Set the health; returns True when it changed (callers log only state changes)."""
        with self._lock:
            changed = health != self._health
            self._health = health
            return changed

    @property
    def health(self) -> Health:
        with self._lock:
            return self._health

    def count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counters[name] += amount

    def note(self, topic: str, text: str | None) -> None:
        """Set (or, with None, clear) the note on `topic`; one note per topic."""
        with self._lock:
            if text is None:
                self._notes.pop(topic, None)
            else:
                self._notes[topic] = text

    def snapshot(self) -> HealthSnapshot:
        with self._lock:
            stalled: tuple[str, ...] = ()
            if self.stalled_after is not None:
                oldest = time.monotonic() - self.stalled_after
                stalled = tuple(part for part, at in self._progress_at.items() if at < oldest)
            return HealthSnapshot(
                self.component,
                self._health,
                dict(self._counters),
                stalled,
                tuple(self._notes.values()),
            )
