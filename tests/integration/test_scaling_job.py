"""The APScheduler wrapper: cycles at an interval, the first at once, never two at a time."""

from __future__ import annotations

import threading
from pathlib import Path

from sandbox.kube import FakeKube
from scheduler.job import ReconcileJob, ScalingJob
from scheduler.kubeapi import ScalingKube
from shipper.outbox import Outbox
from shipper.records import SCALING
from tests.scaling_harness import StubApi, action, deployment, kube_client, namespace, template
from tests.waiting import wait_until


def ticks(interval: float, count: int) -> None:
    """Return once a job of its own has run `count` cycles at `interval`: the sentinel that
    as many intervals have passed, for tests that prove another job did nothing meanwhile."""
    runs = 0

    def tick() -> None:
        nonlocal runs
        runs += 1

    sentinel = ReconcileJob([("sentinel", tick)], interval=interval)
    sentinel.start()
    try:
        wait_until(lambda: runs >= count, timeout=5)
    finally:
        sentinel.stop()


def test_the_first_cycle_runs_at_once_not_after_an_interval() -> None:
    ran = threading.Event()
    job = ReconcileJob([("tick", ran.set)], interval=3600)
    job.start()
    try:
        wait_until(ran.is_set, timeout=5)  # an hour's interval never passes in this test
    finally:
        job.stop()


def test_cycles_run_at_the_interval_and_stop_when_stopped() -> None:
    runs = 0

    def tick() -> None:
        nonlocal runs
        runs += 1

    job = ReconcileJob([("tick", tick)], interval=0.05)
    job.start()
    try:
        wait_until(lambda: runs >= 4, timeout=5)
    finally:
        job.stop()
    count = runs
    ticks(0.05, 3)  # intervals in which a job still scheduled would have run again
    assert runs == count and not job.running


def test_a_slow_cycle_is_never_overlapped_by_the_next() -> None:
    lock = threading.Lock()
    release = threading.Event()
    active = 0
    most = 0
    runs = 0

    def slow() -> None:
        nonlocal active, most, runs
        with lock:
            active += 1
            most = max(most, active)
        release.wait(5)  # the first run lasts until the test lets it end
        with lock:
            active -= 1
            runs += 1

    job = ReconcileJob([("slow", slow)], interval=0.02)
    job.start()
    try:
        wait_until(lambda: active == 1, timeout=5)
        ticks(0.02, 5)  # several intervals pass while the first run is still going
        assert most == 1 and runs == 0
        release.set()
        wait_until(lambda: runs >= 3, timeout=5)
    finally:
        release.set()
        job.stop()
    assert most == 1


def test_a_failing_cycle_is_counted_and_the_schedule_goes_on() -> None:
    calls = 0

    def failing() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    job = ReconcileJob([("failing", failing)], interval=0.03)
    job.start()
    try:
        wait_until(lambda: calls >= 3, timeout=5)
    finally:
        job.stop()
    assert job.reporter.snapshot().counters["cycle_failures"] >= 3


def test_the_scaling_job_reconciles_on_its_own_until_stopped(
    kube: FakeKube, tmp_path: Path
) -> None:
    kube.create(namespace())
    kube.create(deployment())
    api = StubApi()
    # A manual execution that is on whenever the test runs.
    api.templates = [
        template(
            cron=None,
            execution={"id": "x", "status": "running", "started_at": "2020-01-01T00:00:00Z"},
            duration_minutes=60 * 24 * 365 * 50,
        )
    ]
    api.actions = {"t-1": [action()]}
    with Outbox(tmp_path / "queue", streams=[SCALING]) as outbox:
        job = ScalingJob(
            kube=ScalingKube(kube_client(kube)),
            api=api,
            outbox=outbox[SCALING],
            store_path=tmp_path / "queue" / "scaling-state.db",
            cluster_id="c-1",
            ignore_resources=["pod/*"],
            interval=0.05,
        )
        job.start()
        try:
            wait_until(lambda: job.reporter.snapshot().counters.get("cycles", 0) >= 2, timeout=5)
        finally:
            job.stop()
        assert kube.get("hpa", "shop", "web")["spec"]["minReplicas"] == 4
        assert outbox[SCALING].stats().records == 1


def test_a_later_cycle_starts_only_once_the_first_has_run_even_if_it_failed() -> None:
    order: list[str] = []

    def first() -> None:
        order.append("first")
        raise RuntimeError("a bug in the first cycle")

    job = ReconcileJob(
        [("first", first), ("second", lambda: order.append("second"))], interval=0.05
    )
    for _ in range(2):  # and again after a restart
        order.clear()
        job.start()
        try:
            wait_until(lambda: "second" in order, timeout=5)
        finally:
            job.stop()
        assert order[0] == "first"
