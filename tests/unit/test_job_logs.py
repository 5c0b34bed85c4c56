"""Failed Jobs' logs read on their own worker: asking never waits, failures are retried and
never kept as "no logs", deleted Jobs keep nothing."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator

import pytest

from collector.job_logs import JobLogs, JobLogSettings
from collector.normalize.base import LogRequest
from kube.errors import KubeError
from runtime.health import HealthReporter
from tests.waiting import wait_until

FAST = JobLogSettings(read_seconds=1.0, attempts=3, retry_seconds=0.01, max_retry_seconds=0.02)
LINES = ["starting backup", "ERROR pg_dump: connection refused"]


def request(n: int = 1, pod: str = "backup-1-aaaaa") -> LogRequest:
    return LogRequest(
        job_uid=f"uid-{n}",
        job_key=f"shop/backup-{n}",
        namespace="shop",
        pod=pod,
        container="backup",
        lines=200,
    )


class Kubelet:
    """The read: answers from `answers` in turn (an exception is raised), the last one
    for good; `hold` keeps every read waiting until it is set."""

    def __init__(self, *answers: list[str] | Exception | None) -> None:
        self.answers = list(answers)
        self.reads: list[LogRequest] = []
        self.hold = threading.Event()
        self.hold.set()

    def __call__(self, request: LogRequest) -> list[str] | None:
        self.reads.append(request)
        assert self.hold.wait(10)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


Start = Callable[..., tuple[JobLogs, list[str], HealthReporter]]


@pytest.fixture
def start() -> Iterator[Start]:
    started: list[JobLogs] = []

    def make(
        kubelet: Kubelet, settings: JobLogSettings = FAST
    ) -> tuple[JobLogs, list[str], HealthReporter]:
        rebuilt: list[str] = []  # the Jobs whose record is to be built again
        reporter = HealthReporter("collector")
        logs = JobLogs(kubelet, rebuilt.append, settings=settings, reporter=reporter)
        logs.start()
        started.append(logs)
        return logs, rebuilt, reporter

    yield make
    for logs in started:
        logs.stop()


def test_a_failed_read_is_tried_again_and_its_lines_arrive_later(start: Start) -> None:
    kubelet = Kubelet(KubeError("500 TLS handshake timeout"), KubeError("timed out"), LINES)
    logs, rebuilt, reporter = start(kubelet)
    assert logs.lines(request()) is None
    wait_until(lambda: rebuilt == ["shop/backup-1"])
    assert logs.lines(request()) == LINES
    assert len(kubelet.reads) == 3
    assert reporter.snapshot().counters["job_log_reads_failed"] == 2


def test_a_log_given_up_is_not_kept_as_none_and_is_read_again_at_a_later_update(
    start: Start,
) -> None:
    kubelet = Kubelet(KubeError("500"))
    logs, rebuilt, reporter = start(kubelet, dataclasses.replace(FAST, reask_seconds=0.5))
    assert logs.lines(request()) is None
    wait_until(lambda: reporter.snapshot().counters.get("job_log_reads_failed") == FAST.attempts)
    assert len(kubelet.reads) == FAST.attempts
    assert rebuilt == ["shop/backup-1"]  # given up: the record goes without
    # Built again right then, the record does not start the same reads over ...
    assert logs.lines(request()) is None and not logs.holds("uid-1")
    kubelet.answers = [LINES]
    # ... but a later update asks again: a new read, not a kept "no logs".
    wait_until(lambda: logs.lines(request()) == LINES)
    assert rebuilt == ["shop/backup-1", "shop/backup-1"]


def test_asking_never_waits_for_a_read_and_a_deleted_job_keeps_nothing(start: Start) -> None:
    kubelet = Kubelet(LINES)
    kubelet.hold.clear()  # the kubelet does not answer
    logs, rebuilt, reporter = start(kubelet)
    assert logs.lines(request(1)) is None
    wait_until(lambda: len(kubelet.reads) == 1)
    assert logs.lines(request(2)) is None  # answered while the first read hangs
    assert logs.lines(request(1)) is None  # still pending: not read a second time
    logs.forget("uid-1")
    kubelet.hold.set()
    wait_until(lambda: rebuilt == ["shop/backup-2"])
    assert [r.job_uid for r in kubelet.reads] == ["uid-1", "uid-2"]
    assert logs.lines(request(2)) == LINES
    assert reporter.snapshot().counters["job_logs_read"] == 1


def test_a_job_whose_failing_pod_changed_during_a_read_gets_the_new_pods_log(
    start: Start,
) -> None:
    kubelet = Kubelet(["old pod"], LINES)
    kubelet.hold.clear()
    logs, rebuilt, _ = start(kubelet)
    logs.lines(request(pod="backup-1-aaaaa"))
    wait_until(lambda: len(kubelet.reads) == 1)
    logs.lines(request(pod="backup-1-bbbbb"))
    kubelet.hold.set()
    wait_until(lambda: rebuilt == ["shop/backup-1"])
    assert [r.pod for r in kubelet.reads] == ["backup-1-aaaaa", "backup-1-bbbbb"]
    assert logs.lines(request(pod="backup-1-bbbbb")) == LINES


def test_a_refused_read_is_not_retried_and_pending_jobs_are_bounded(start: Start) -> None:
    kubelet = Kubelet(None)  # refused for good (403, the pod gone)
    kubelet.hold.clear()
    # A retry would hold the one pending place for minutes.
    logs, rebuilt, reporter = start(
        kubelet, JobLogSettings(attempts=100, retry_seconds=30, pending_jobs=1)
    )

    def not_queued() -> int:
        return reporter.snapshot().counters["job_logs_not_queued"]

    assert logs.lines(request(1)) is None
    assert logs.lines(request(2)) is None  # the one pending place is taken
    assert not_queued() == 1
    kubelet.hold.set()

    def second_queued() -> bool:
        before = not_queued()
        logs.lines(request(2))
        return not_queued() == before

    wait_until(second_queued)
    wait_until(lambda: rebuilt == ["shop/backup-1", "shop/backup-2"])  # both go without
    assert [r.job_uid for r in kubelet.reads] == ["uid-1", "uid-2"]
    assert reporter.snapshot().counters.get("job_logs_read") is None


def test_a_failed_runs_record_waits_for_its_log_only_a_bounded_time(start: Start) -> None:
    kubelet = Kubelet(LINES)
    kubelet.hold.clear()
    logs, rebuilt, _ = start(kubelet, dataclasses.replace(FAST, hold_seconds=1.0))
    assert logs.lines(request()) is None
    assert logs.holds("uid-1") and logs.released() == []
    assert not logs.holds("uid-2")  # nothing asked for it
    # The wait ends while the kubelet still says nothing (the worker is stuck on it).
    wait_until(lambda: not logs.holds("uid-1"))
    assert logs.released() == ["shop/backup-1"]  # its record goes without, once
    assert logs.released() == []
    kubelet.hold.set()
    wait_until(lambda: rebuilt == ["shop/backup-1"])  # and again once read, with it
    assert logs.lines(request()) == LINES
