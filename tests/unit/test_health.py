"""Component health: reporters say what changed, the watch logs each change once."""

from __future__ import annotations

import structlog.testing

from agent.health_watch import HealthWatch
from runtime.health import Health, HealthReporter


def test_a_reporter_tells_whether_the_health_changed() -> None:
    reporter = HealthReporter("shipper.discovery")
    assert reporter.set(Health.healthy()) is False
    assert reporter.set(Health.degraded("paused: 401")) is True
    assert reporter.set(Health.degraded("paused: 401")) is False
    assert reporter.set(Health.degraded("paused: 403")) is True


def test_the_watch_logs_each_health_change_once_with_the_counters() -> None:
    reporter = HealthReporter("shipper.discovery")
    watch = HealthWatch(lambda: [reporter])
    with structlog.testing.capture_logs() as logs:
        watch.log_changes()  # healthy from the start: nothing to say
        reporter.set(Health.degraded("paused: 401"))
        reporter.count("requests_failed")
        watch.log_changes()
        watch.log_changes()
        reporter.count("requests_failed")  # counters alone are not a change of health
        watch.log_changes()
        reporter.set(Health.healthy())
        watch.log_changes()
    assert [(e["component"], e["ok"], e["reason"]) for e in logs] == [
        ("shipper.discovery", False, "paused: 401"),
        ("shipper.discovery", True, None),
    ]
    assert logs[1]["counters"] == {"requests_failed": 2}


def test_each_loop_of_a_component_must_make_progress_on_its_own() -> None:
    reporter = HealthReporter("scheduler", stalled_after=60.0, parts=("reverts", "apply"))
    watch = HealthWatch(lambda: [reporter])
    assert watch.problems() == []
    reporter._progress_at["apply"] -= 120  # the apply loop last turned two minutes ago
    reporter.progress("reverts")  # the other one keeps turning
    assert reporter.snapshot().stalled_parts == ("apply",)
    assert watch.problems() == ["scheduler: no progress (apply)"]
