"""Logs every change of a component's health; the health server and metrics read it too."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import structlog

from runtime.health import HealthReporter, HealthSnapshot

log = structlog.get_logger("agent")


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

    def not_ready(self) -> list[str]:
        """What readiness fails on beyond start-up: components refused a permission they
        need (`Health.forbidden`, the permission named) or holding their place until
        something outside recovers (`Health.not_ready`)."""
        return [
            f"{snap.component}: {snap.health.reason}"
            for snap in self.snapshot()
            if snap.health.unready
        ]

    def notes(self) -> list[str]:
        """What readiness shows without failing: every component's notes."""
        return [f"{snap.component}: {note}" for snap in self.snapshot() for note in snap.notes]

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
