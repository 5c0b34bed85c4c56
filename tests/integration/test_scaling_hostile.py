"""Reverts wait on nothing: the revert scan never asks the platform, judges on its last good
answer (or, before any, on the annotations alone), and runs on its own schedule, so a
platform that drips, floods or bombs its answers cannot keep a window open."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog

from sandbox.kube import FakeKube
from sandbox.platform import Drip, FakePlatform, GzipBomb, Status
from sandbox.scaling import manual_template
from scheduler.job import ScalingJob
from scheduler.kubeapi import ScalingKube
from shipper.client import ApiClient, ApiSettings
from shipper.outbox import Outbox
from shipper.records import SCALING
from shipper.token import TokenSource
from tests.conftest import TOKEN
from tests.scaling_harness import (
    NS,
    Harness,
    action,
    at,
    deployment,
    hpa,
    kube_client,
    make_harness,
    namespace,
    ours,
    template,
)
from tests.waiting import wait_until


class Tripwire:
    """A platform that must not be asked anything."""

    def get_templates(self) -> list[Any]:
        raise AssertionError("the revert scan asked the platform for templates")

    def get_actions(self, template_id: str) -> list[Any]:
        raise AssertionError("the revert scan asked the platform for actions")


@pytest.fixture
def h(kube: FakeKube, tmp_path: Path) -> Iterator[Harness]:
    harness = make_harness(kube, tmp_path)
    harness.kube.create(deployment())
    harness.kube.create(hpa(low=2, high=5))
    yield harness
    harness.close()


def bounds(h: Harness) -> tuple[int, int]:
    spec = h.hpa()["spec"]
    return spec["minReplicas"], spec["maxReplicas"]


# --- the revert scan on its own ---------------------------------------------------------


def test_the_revert_scan_asks_the_platform_nothing_and_ends_windows_its_last_answer_ended(
    h: Harness,
) -> None:
    h.api.templates = [template(duration_minutes=120)]  # 08:00-10:00
    h.api.actions = {"t-1": [action()]}
    h.run(at(9))
    assert bounds(h) == (4, 20)
    h.reconciler.api = Tripwire()
    assert h.reconciler.revert_scan(at(9, 59)).reverts == 0
    assert h.reconciler.revert_scan(at(10, 1)).reverts == 1
    assert bounds(h) == (2, 5)
    assert [(e["type"], e["reason"]) for e in h.events()] == [
        ("apply", None),
        ("revert", "expired"),
    ]


def test_a_window_the_last_answer_says_goes_on_stays_past_its_annotation(h: Harness) -> None:
    # 08:00 and 09:00, 90 minutes each: one period from 08:00 to 10:30. Applied at 08:30,
    # the annotation says 09:30; the platform then stops answering well.
    h.api.templates = [template(cron="0 8,9 * * *", duration_minutes=90)]
    h.api.actions = {"t-1": [action()]}
    h.run(at(8, 30))
    h.api.down = True
    h.reconciler.revert_scan(at(9, 31))
    assert bounds(h) == (4, 20)
    h.reconciler.revert_scan(at(10, 31))
    assert bounds(h) == (2, 5)


def test_before_any_answer_a_restarted_agent_reverts_on_the_annotations_alone(
    h: Harness,
) -> None:
    h.api.templates = [template(cron="0 8,9 * * *", duration_minutes=90)]
    h.api.actions = {"t-1": [action()]}
    h.run(at(8, 30))  # run-until 09:30 on the HPA
    restarted = h.make_reconciler(api=Tripwire())
    restarted.revert_scan(at(9, 29))
    assert bounds(h) == (4, 20)
    restarted.revert_scan(at(9, 31))
    assert bounds(h) == (2, 5)
    assert not ours(h.hpa())


def test_health_names_the_failing_part_and_reverts_go_on(h: Harness) -> None:
    h.api.templates = [template(duration_minutes=120)]
    h.api.actions = {"t-1": [action()]}
    h.run(at(9))
    h.api.down = True
    h.reconciler.apply_cycle(at(10, 1))
    assert h.reconciler.reporter.health.reason == "platform: unreachable: applying nothing new"
    h.reconciler.revert_scan(at(10, 1))
    assert bounds(h) == (2, 5)
    h.api.down = False
    h.reconciler.apply_cycle(at(10, 2))
    assert h.reconciler.reporter.health.ok


# --- the scaling job against the fake platform -------------------------------------------


def min_replicas(kube: FakeKube) -> int:
    return kube.get("horizontalpodautoscalers", NS, "web")["spec"]["minReplicas"]


@contextlib.contextmanager
def applied_window(
    kube: FakeKube, platform: FakePlatform, tmp_path: Path, *, deadline_seconds: float
) -> Iterator[tuple[ScalingJob, Outbox]]:
    """A scaling job (0.2 s interval) that has applied a manual window of 2 s."""
    kube.create(namespace())
    kube.create(deployment())
    kube.create(hpa(low=2, high=5))
    platform.token = TOKEN
    started = datetime.now(UTC)
    platform.set_templates([manual_template(started, started + timedelta(seconds=2))])
    platform.set_actions("t-1", [action()])
    api = ApiClient(
        base_url=platform.url,
        project_id="p-1",
        cluster_id="c-1",
        token=TokenSource(TOKEN),
        settings=ApiSettings(insecure_http=True, deadline_seconds=deadline_seconds),
    )
    with api, Outbox(tmp_path / "queue", streams=[SCALING]) as outbox:
        job = ScalingJob(
            kube=ScalingKube(kube_client(kube)),
            api=api,
            outbox=outbox[SCALING],
            store_path=tmp_path / "queue" / "scaling-state.db",
            cluster_id="c-1",
            interval=0.2,
        )
        job.start()
        try:
            wait_until(lambda: min_replicas(kube) == 4)
            yield job, outbox
        finally:
            job.stop()


def test_a_templates_answer_that_never_ends_does_not_delay_the_revert(
    kube: FakeKube, platform: FakePlatform, tmp_path: Path
) -> None:
    # A deadline far away: only reverts that wait on nothing can end the window.
    with applied_window(kube, platform, tmp_path, deadline_seconds=120) as (job, outbox):
        platform.fail_all("templates", Drip(every=0.5))
        platform.fail_all("actions", Drip(every=0.5))
        wait_until(lambda: platform.open_streams() >= 1)
        wait_until(lambda: min_replicas(kube) == 2)
        # Reverted while the templates GET was still dripping.
        assert platform.open_streams() >= 1
        job.stop()  # cancels the GET in flight rather than waiting out its deadline
        wait_until(lambda: platform.open_streams() == 0)
        batch = outbox[SCALING].take(max_records=10, max_bytes=1 << 20)
    assert batch is not None
    events = [msgspec.json.decode(body) for body in batch.bodies]
    assert [(e["type"], e["reason"]) for e in events] == [("apply", None), ("revert", "expired")]


@pytest.mark.parametrize(
    ("fault", "summary"),
    [
        (GzipBomb(256 << 20), "answer over 8 MiB"),
        (Drip(every=0.2), "deadline exceeded"),
        (Status(200, body=b'{"templates": 42}'), "malformed answer"),
    ],
    ids=["gzip bomb", "drip", "wrong type"],
)
def test_health_says_what_the_platform_does_wrong_while_the_window_ends_on_time(
    kube: FakeKube, platform: FakePlatform, tmp_path: Path, fault: Any, summary: str
) -> None:
    with applied_window(kube, platform, tmp_path, deadline_seconds=1) as (job, _):
        platform.fail_all("templates", fault)
        expected = f"platform: {summary}: applying nothing new"
        wait_until(lambda: job.reporter.health.reason == expected)
        wait_until(lambda: min_replicas(kube) == 2)


def test_a_failing_platform_is_logged_once_per_change_of_how_it_fails(h: Harness) -> None:
    h.api.templates = [template()]
    h.api.actions = {"t-1": [action()]}
    h.api.down = True
    with structlog.testing.capture_logs() as logs:
        for minute in range(3):
            h.reconciler.apply_cycle(at(9, minute))
        h.api.down = False
        h.reconciler.apply_cycle(at(9, 3))
        h.api.down = True
        h.reconciler.apply_cycle(at(9, 4))
    warned = [
        line
        for line in logs
        if line["event"] == "scaling_templates_unavailable" and line["log_level"] == "warning"
    ]
    assert len(warned) == 2  # the first failure, and the first one after it recovered
    assert sum(line["event"] == "scaling_templates_unavailable" for line in logs) == 4


def test_a_window_that_ended_while_the_platform_was_slow_is_not_applied_again(
    h: Harness,
) -> None:
    moment = [at(9)]
    reconciler = h.make_reconciler(clock=lambda: moment[0])
    h.api.templates = [template(duration_minutes=120)]  # 08:00-10:00
    h.api.actions = {"t-1": [action()]}
    reconciler.apply_cycle()
    assert bounds(h) == (4, 20)
    read_actions = h.api.get_actions

    def slow_answer(template_id: str) -> list[Any]:
        # While the actions answer takes its time the window ends, and the revert scan,
        # on its own thread, ends it.
        moment[0] = at(10, 1)
        reconciler.revert_scan()
        return read_actions(template_id)

    h.api.get_actions = slow_answer  # type: ignore[method-assign]
    moment[0] = at(9, 59)
    reconciler.apply_cycle()
    assert bounds(h) == (2, 5)
    assert not ours(h.hpa())
    assert [(e["type"], e["reason"]) for e in h.events()] == [
        ("apply", None),
        ("revert", "expired"),
    ]


def test_stopping_gives_up_a_platform_call_in_flight_without_calling_it_a_failure(
    kube: FakeKube, platform: FakePlatform, tmp_path: Path
) -> None:
    with (
        structlog.testing.capture_logs() as logs,
        applied_window(kube, platform, tmp_path, deadline_seconds=120) as (job, _),
    ):
        platform.fail_all("templates", Drip(every=0.5))
        wait_until(lambda: platform.open_streams() >= 1)
        stopper = threading.Thread(target=job.stop)
        stopper.start()
        # Far sooner than the call's own deadline: the stop cancelled it.
        wait_until(lambda: not stopper.is_alive())
    assert job.reporter.health.ok
    assert not [line for line in logs if line["event"] == "scaling_templates_unavailable"]
