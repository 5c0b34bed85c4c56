"""Health and counters that every long-running component exposes.

Components own a `HealthReporter`; the process wiring polls `snapshot()` and serves or logs
it. Nothing here knows who reads it, so collector, scheduler and shipper can all use it
without importing the wiring.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Health:
    """One component's state: ok, or degraded with a short machine-friendly reason."""

    ok: bool
    reason: str | None = None

    @classmethod
    def healthy(cls) -> Health:
        return cls(ok=True)

    @classmethod
    def degraded(cls, reason: str) -> Health:
        return cls(ok=False, reason=reason)


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    component: str
    health: Health
    counters: dict[str, int] = field(default_factory=dict)


class HealthReporter:
    """Thread-safe holder of one component's health and monotonically increasing counters."""

    def __init__(self, component: str) -> None:
        self.component = component
        self._lock = threading.Lock()
        self._health = Health.healthy()
        self._counters: Counter[str] = Counter()

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

    def snapshot(self) -> HealthSnapshot:
        with self._lock:
            return HealthSnapshot(self.component, self._health, dict(self._counters))
