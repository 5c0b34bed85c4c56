"""The heartbeat against the fake platform: direct, never replayed, resync on request."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import structlog.testing

from collector.heartbeat import Heartbeat
from sandbox.platform import FakePlatform, Status
from shipper.client import ApiClient, ApiSettings
from shipper.token import TokenSource
from tests.conftest import TOKEN
from tests.waiting import wait_until

METADATA = {
    "provider": "gke",
    "region": "europe-west1",
    "zone": "europe-west1-b",
    "cluster_name": "prod-eu",
    "cloud_account": "acme-prod-123",
    "kubernetes_version": "v1.30.2",
    "node_count": 12,
    "leader": "moonin-agent-discovery-0",
}


@pytest.fixture
def client(platform: FakePlatform) -> Iterator[ApiClient]:
    with ApiClient(
        base_url=platform.url,
        project_id=platform.project_id,
        cluster_id=platform.cluster_id,
        token=TokenSource(value=TOKEN),
        settings=ApiSettings(insecure_http=True, read_timeout_seconds=2.0),
    ) as api:
        yield api


class Resyncs:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def heartbeat(
    client: ApiClient,
    metadata: Callable[[], Mapping[str, Any]] = lambda: METADATA,
    on_resync: Callable[[], None] | None = None,
    interval: float = 60.0,
) -> Heartbeat:
    return Heartbeat(client, metadata, on_resync or Resyncs(), interval=interval)


def test_a_heartbeat_carries_the_metadata(platform: FakePlatform, client: ApiClient) -> None:
    beat = heartbeat(client)
    assert beat.beat_now() is True
    sent = platform.last_heartbeat
    assert sent is not None
    assert sent["metadata"] == METADATA
    assert (sent["project_id"], sent["cluster_id"]) == ("p-1", "c-1")
    snapshot = beat.reporter.snapshot()
    assert snapshot.component == "heartbeat"
    assert snapshot.health.ok
    assert snapshot.counters == {"heartbeats_sent": 1}


def test_a_resync_answer_calls_on_resync_once_per_answer(
    platform: FakePlatform, client: ApiClient
) -> None:
    resyncs = Resyncs()
    beat = heartbeat(client, on_resync=resyncs)
    platform.heartbeat_answer = {"resync": True}
    with structlog.testing.capture_logs() as logs:
        beat.beat_now()
        beat.beat_now()
    assert resyncs.calls == 2
    assert [e["event"] for e in logs] == ["resync_requested", "resync_requested"]
    platform.heartbeat_answer = {}
    beat.beat_now()
    assert resyncs.calls == 2


def test_a_failing_resync_callback_does_not_break_the_heartbeat(
    platform: FakePlatform, client: ApiClient
) -> None:
    def broken() -> None:
        raise RuntimeError("collector busy")

    platform.heartbeat_answer = {"resync": True}
    beat = heartbeat(client, on_resync=broken)
    with structlog.testing.capture_logs() as logs:
        assert beat.beat_now() is True
    assert [e["event"] for e in logs] == ["resync_requested", "resync_request_failed"]
    assert beat.reporter.health.ok


def test_failures_degrade_health_once_and_recover(
    platform: FakePlatform, client: ApiClient
) -> None:
    beat = heartbeat(client)
    platform.script("heartbeat", Status(503), Status(503))
    with structlog.testing.capture_logs() as logs:
        assert beat.beat_now() is False
        assert beat.beat_now() is False
        health = beat.reporter.health
        assert beat.beat_now() is True
    assert not health.ok
    assert health.reason is not None and "503" in health.reason
    assert [e["event"] for e in logs] == ["heartbeat_failing", "heartbeat_recovered"]
    assert beat.reporter.health.ok
    assert beat.reporter.snapshot().counters == {"heartbeats_failed": 2, "heartbeats_sent": 1}


def test_rejected_credentials_degrade_health(platform: FakePlatform, client: ApiClient) -> None:
    platform.token = "rotated-elsewhere"
    beat = heartbeat(client)
    assert beat.beat_now() is False
    reason = beat.reporter.health.reason or ""
    assert "401" in reason
    assert TOKEN not in reason


def test_a_failed_heartbeat_is_not_replayed(platform: FakePlatform, client: ApiClient) -> None:
    sequence = itertools.count(1)
    beat = heartbeat(client, metadata=lambda: {**METADATA, "node_count": next(sequence)})
    platform.down()
    assert beat.beat_now() is False
    platform.up()
    assert beat.beat_now() is True
    beats = [r for r in platform.requests if r.route == "heartbeat"]
    assert len(beats) == 1  # only the fresh one; the failed beat is gone for good
    sent = platform.last_heartbeat
    assert sent is not None and sent["metadata"]["node_count"] == 2


def test_the_thread_beats_at_once_keeps_going_after_errors_and_stops_promptly(
    platform: FakePlatform, client: ApiClient
) -> None:
    calls = itertools.count()

    def metadata() -> Mapping[str, Any]:
        if next(calls) == 0:
            raise KeyError("node informer not synced")
        return METADATA

    beat = heartbeat(client, metadata=metadata, interval=0.05)
    with structlog.testing.capture_logs() as logs:
        beat.start()
        wait_until(lambda: platform.last_heartbeat is not None)
        wait_until(lambda: beat.reporter.health.ok)
        assert beat.stop() is True
    assert logs[0]["event"] == "heartbeat_failing"
    assert "KeyError" in logs[0]["reason"]
    assert beat.reporter.snapshot().counters["heartbeats_failed"] == 1


def test_stop_does_not_wait_for_the_interval(platform: FakePlatform, client: ApiClient) -> None:
    beat = heartbeat(client, interval=60)
    beat.start()
    wait_until(lambda: platform.last_heartbeat is not None)
    # stop() gives up after 5 s, far short of the 60 s interval: True means it did not wait.
    assert beat.stop() is True
    assert not beat.alive


def test_the_first_beat_waits_until_the_metadata_is_known_and_stop_does_not(
    platform: FakePlatform, client: ApiClient
) -> None:
    known = False
    asked: list[bool] = []
    built: list[bool] = []

    def ready() -> bool:
        asked.append(known)
        return known

    def metadata() -> Mapping[str, Any]:
        built.append(known)
        return METADATA

    beat = Heartbeat(client, metadata, Resyncs(), interval=60, ready=ready)
    beat.start()
    wait_until(lambda: len(asked) > 3)  # the thread asked several times meanwhile
    assert platform.last_heartbeat is None and built == []
    known = True
    wait_until(lambda: platform.last_heartbeat is not None)
    assert built == [True]
    assert beat.stop() is True

    waiting = Heartbeat(client, metadata, Resyncs(), interval=60, ready=lambda: False)
    waiting.start()
    assert waiting.stop() is True
    assert built == [True]


def test_a_beat_that_went_before_the_metadata_was_known_is_followed_as_soon_as_it_is(
    platform: FakePlatform, client: ApiClient
) -> None:
    known = False
    built: list[bool] = []

    def metadata() -> Mapping[str, Any]:
        built.append(known)
        return METADATA

    beat = Heartbeat(
        client, metadata, Resyncs(), interval=3600, ready=lambda: known, ready_within=0.05
    )
    beat.start()
    wait_until(lambda: platform.last_heartbeat is not None)  # it waited, then went without
    known = True
    # The next beat comes now, not an hour later.
    wait_until(lambda: len([r for r in platform.requests if r.route == "heartbeat"]) == 2)
    assert built == [False, True]
    assert beat.stop() is True
