"""The shipper against the fake platform over real HTTP: outages, pauses, splits, rotation."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from sandbox.platform import Delay, Drop, FakePlatform, Status
from shipper.client import ApiClient, ApiSettings
from shipper.outbox import Bounds, Outbox
from shipper.records import DISCOVERY, SCALING, Record, ScalingEvent, utc_timestamp
from shipper.shipper import ShipperSettings, StreamShipper
from shipper.token import TokenSource
from tests.conftest import TOKEN
from tests.waiting import wait_until

FAST = ShipperSettings(
    batch_max_records=20,
    batch_max_bytes=64 * 1024,
    linger_seconds=0.01,
    backoff_initial_seconds=0.02,
    backoff_max_seconds=0.1,
)


def record(n: int, key: str | None = None) -> Record:
    return Record(
        id=f"rec-{n:05d}",
        kind="deployment",
        op="upsert",
        key=key or f"shop/web-{n}",
        observed_at=utc_timestamp(),
        data={"n": n},
    )


def scaling_event(n: int) -> ScalingEvent:
    return ScalingEvent(
        id=f"ev-{n:05d}", type="apply", template_id="t-1", occurred_at=utc_timestamp()
    )


class Pipeline:
    """An outbox with both streams and a started shipper for each, as `run` wires them."""

    def __init__(
        self,
        directory: Path,
        platform: FakePlatform,
        token: TokenSource,
        settings: ShipperSettings = FAST,
    ) -> None:
        self.outbox = Outbox(directory, bounds=Bounds(chunk_records=FAST.batch_max_records))
        self.token = token
        self.clients = {
            stream: ApiClient(
                base_url=platform.url,
                project_id="p-1",
                cluster_id="c-1",
                token=token,
                settings=ApiSettings(insecure_http=True),
            )
            for stream in (DISCOVERY, SCALING)
        }
        self.shippers = {
            DISCOVERY: StreamShipper(
                self.outbox[DISCOVERY],
                self.clients[DISCOVERY].post_records,
                settings=settings,
            ),
            SCALING: StreamShipper(
                self.outbox[SCALING], self.clients[SCALING].post_events, settings=settings
            ),
        }
        for shipper in self.shippers.values():
            shipper.start()

    def close(self) -> None:
        for shipper in self.shippers.values():
            shipper.stop(drain_seconds=0)
        for client in self.clients.values():
            client.close()
        self.outbox.close()


@pytest.fixture
def pipeline(tmp_path: Path, platform: FakePlatform) -> Iterator[Pipeline]:
    built = Pipeline(tmp_path / "queue", platform, TokenSource(value=TOKEN))
    yield built
    built.close()


def delivered_ids(platform: FakePlatform) -> list[str]:
    """Record ids in order of first arrival."""
    seen: dict[str, None] = {}
    for received in platform.received_records():
        seen.setdefault(received["id"], None)
    return list(seen)


def test_an_outage_of_every_kind_loses_nothing_and_keeps_enqueue_order(
    pipeline: Pipeline, platform: FakePlatform
) -> None:
    platform.fail_all("records", Status(503))
    produced: list[str] = []

    def produce() -> None:
        for n in range(300):
            pipeline.outbox[DISCOVERY].put([record(n)])
            produced.append(f"rec-{n:05d}")
            if n % 30 == 0:
                pipeline.outbox[SCALING].put([scaling_event(n)])
            time.sleep(0.001)

    producer = threading.Thread(target=produce)
    producer.start()
    # The scaling stream is not held back by the discovery outage.
    wait_until(lambda: len(platform.events()) == 10)
    assert platform.received_records() == []
    wait_until(lambda: not pipeline.shippers[DISCOVERY].reporter.health.ok)

    platform.script(
        "records", Status(429, retry_after="1"), Drop(), Drop(apply=True), Delay(0.2), Status(500)
    )
    platform.fail_all("records", None)
    producer.join()
    wait_until(lambda: len(delivered_ids(platform)) == 300)

    assert delivered_ids(platform) == produced
    # Delivered first, acked a moment later: the shipper's view catches up.
    wait_until(lambda: pipeline.outbox[DISCOVERY].stats().records == 0)
    assert pipeline.shippers[DISCOVERY].reporter.health.ok
    # Retry-After was honoured: nothing came back before it ran out.
    records_requests = [r for r in platform.requests if r.route == "records"]
    after_429 = next(i for i, r in enumerate(records_requests) if r.status == 429)
    gap = records_requests[after_429 + 1].time - records_requests[after_429].time
    assert gap >= 1.0
    # The dropped-after-applying batch was retried with the same key and answered 409.
    applied_then_dropped = next(r for r in records_requests if r.status is None and r.body)
    key = applied_then_dropped.headers["idempotency-key"]
    assert any(r.status == 409 and r.headers["idempotency-key"] == key for r in records_requests)


def test_a_storm_of_discovery_records_does_not_delay_scaling_events(
    pipeline: Pipeline, platform: FakePlatform
) -> None:
    # An event storm's worth of records, shipped slowly: their backlog lasts minutes.
    platform.fail_all("records", Delay(0.2))
    storm = [record(n) for n in range(5000)]
    for start in range(0, len(storm), FAST.batch_max_records):
        pipeline.outbox[DISCOVERY].put(storm[start : start + FAST.batch_max_records])
    for n in range(5):
        pipeline.outbox[SCALING].put([scaling_event(n)])
    # Each scaling event arrives while nearly all of the storm still waits its turn.
    wait_until(lambda: len(platform.events()) == 5)
    assert pipeline.outbox[DISCOVERY].stats().records > 4000
    platform.fail_all("records", None)


def test_a_wrong_url_pauses_the_stream_and_keeps_everything_queued(
    pipeline: Pipeline, platform: FakePlatform
) -> None:
    platform.fail_all("records", Status(404))
    pipeline.outbox[DISCOVERY].put([record(n) for n in range(5)])
    wait_until(lambda: sum(r.status == 404 for r in platform.requests) >= 3)
    health = pipeline.shippers[DISCOVERY].reporter.health
    assert not health.ok and health.reason is not None and "paused" in health.reason
    stats = pipeline.outbox[DISCOVERY].stats()
    assert (stats.records, stats.dead_letters) == (5, 0)

    platform.fail_all("records", None)
    wait_until(lambda: len(delivered_ids(platform)) == 5)
    wait_until(lambda: pipeline.shippers[DISCOVERY].reporter.health.ok)


def test_a_rejected_body_is_split_until_only_the_bad_records_are_dead_lettered(
    pipeline: Pipeline, platform: FakePlatform
) -> None:
    bad = {"shop/bad-1", "shop/bad-2"}
    platform.reject_record = lambda received: received.get("key") in bad
    batch = [record(n) for n in range(20)]
    batch[7] = record(7, key="shop/bad-1")
    batch[13] = record(13, key="shop/bad-2")
    pipeline.outbox[DISCOVERY].put(batch)
    wait_until(lambda: pipeline.outbox[DISCOVERY].stats().records == 0)

    stats = pipeline.outbox[DISCOVERY].stats()
    assert stats.dead_letters == 2
    good = [f"rec-{n:05d}" for n in range(20) if n not in (7, 13)]
    assert delivered_ids(platform) == good


def test_rejected_credentials_pause_until_the_rotated_token_file_is_read(
    tmp_path: Path, platform: FakePlatform
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("old-token-2b7e9c41\n")
    built = Pipeline(tmp_path / "queue", platform, TokenSource(file=str(token_file)))
    try:
        built.outbox[SCALING].put([scaling_event(1)])
        wait_until(lambda: any(r.status == 401 for r in platform.requests))
        wait_until(lambda: not built.shippers[SCALING].reporter.health.ok)
        assert built.outbox[SCALING].stats().records == 1

        token_file.write_text(TOKEN + "\n")  # the Secret was rotated
        wait_until(lambda: "ev-00001" in platform.events())
        wait_until(lambda: built.shippers[SCALING].reporter.health.ok)
    finally:
        built.close()


def test_a_token_rotated_before_the_401_is_used_at_once_not_after_a_backoff(
    tmp_path: Path, platform: FakePlatform
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("old-token-2b7e9c41\n")
    token = TokenSource(file=str(token_file))
    # Backoff long enough that only an immediate retry can deliver within the wait below.
    slow = dataclasses.replace(FAST, backoff_initial_seconds=60, backoff_max_seconds=60)
    built = Pipeline(tmp_path / "queue", platform, token, settings=slow)
    try:
        token_file.write_text(TOKEN + "\n")  # rotated; the source still holds the old one
        with structlog.testing.capture_logs() as logs:
            built.outbox[SCALING].put([scaling_event(1)])
            wait_until(lambda: "ev-00001" in platform.events(), timeout=10)
        assert [r.status for r in platform.requests if r.route == "events"][:2] == [401, 200]
        assert "token_reloaded" in [line["event"] for line in logs]
    finally:
        built.close()


def test_a_full_disk_at_the_ack_is_waited_out_and_nothing_is_lost(
    tmp_path: Path, platform: FakePlatform, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = Pipeline(tmp_path / "queue", platform, TokenSource(value=TOKEN))
    try:
        stream = built.outbox[DISCOVERY]
        ack = stream.ack
        refusals = [sqlite3.OperationalError("database or disk is full")] * 3

        def full_disk_then_room(batch: Any) -> None:
            if refusals:
                raise refusals.pop()
            ack(batch)

        monkeypatch.setattr(stream, "ack", full_disk_then_room)
        shipper = built.shippers[DISCOVERY]
        with structlog.testing.capture_logs() as logs:
            stream.put([record(n) for n in range(5)])
            wait_until(lambda: not shipper.reporter.health.ok)
            assert "cannot write the queue file" in (shipper.reporter.health.reason or "")
            wait_until(lambda: stream.stats().records == 0)
        assert shipper.alive  # waited it out instead of ending the thread
        assert delivered_ids(platform) == [f"rec-{n:05d}" for n in range(5)]
        assert [line["event"] for line in logs].count("outbox_write_failed") == 1
    finally:
        built.close()


def test_a_stop_drains_for_a_bounded_time_and_leaves_the_rest_on_disk(
    tmp_path: Path, platform: FakePlatform
) -> None:
    built = Pipeline(tmp_path / "queue", platform, TokenSource(value=TOKEN))
    platform.fail_all("records", Status(503))
    built.outbox[DISCOVERY].put([record(n) for n in range(10)])
    # True only if the shipper ended within its drain time (and two polls): the 503s
    # would keep it retrying for ever.
    assert built.shippers[DISCOVERY].stop(drain_seconds=0.3)
    assert built.outbox[DISCOVERY].stats().records == 10
    built.close()

    platform.fail_all("records", None)
    again = Pipeline(tmp_path / "queue", platform, TokenSource(value=TOKEN))
    try:
        wait_until(lambda: len(delivered_ids(platform)) == 10)
    finally:
        again.close()


def test_a_long_outage_is_logged_once_per_state_change(
    pipeline: Pipeline, platform: FakePlatform
) -> None:
    platform.script("records", *[Status(503)] * 6, Status(404), Status(404))
    with structlog.testing.capture_logs() as logs:
        pipeline.outbox[DISCOVERY].put([record(1)])
        wait_until(lambda: len(delivered_ids(platform)) == 1)
        wait_until(lambda: pipeline.shippers[DISCOVERY].reporter.health.ok)  # it has noticed
    transitions = [
        e["event"] for e in logs if e.get("stream") == DISCOVERY and e["log_level"] != "debug"
    ]
    # 503 six times is one state (retrying, with a reason naming 503), 404 is another (paused)
    assert transitions == ["stream_retrying", "stream_paused", "stream_delivering"]
    counters = pipeline.shippers[DISCOVERY].reporter.snapshot().counters
    assert counters["requests_failed"] == 8
    assert counters["records_shipped"] == 1
