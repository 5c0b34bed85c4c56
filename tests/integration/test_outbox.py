"""The outbox, asserted through what is on disk: which records are queued, dead or gone."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import sqlite_file
from shipper import queuefile, queueschema
from shipper.lock import QueueDirectoryBusy
from shipper.outbox import Bounds, Outbox, StreamOutbox
from shipper.queuefile import QueueFileError
from shipper.records import DISCOVERY, SCALING, Record, ScalingEvent, utc_timestamp


def record(key: str, op: str = "upsert", size: int = 0) -> Record:
    return Record(
        id=f"id-{key}",
        kind="deployment" if op != "event" else "pod_error",
        op=op,  # type: ignore[arg-type]
        key=key,
        observed_at=utc_timestamp(),
        data={"pad": "x" * size},
    )


def event(key: str) -> ScalingEvent:
    return ScalingEvent(id=f"ev-{key}", type="apply", template_id="t-1", occurred_at="x")


def on_disk(directory: Path, stream: str = DISCOVERY) -> dict[str, list[str]]:
    """Record keys (or event ids) by state, read from the file as the inspection CLI reads it."""
    conn = queuefile.open_readonly(directory / f"{stream}.db")
    try:
        queued: list[str] = []
        for stored in queuefile.scan_chunks(conn):
            assert stored.chunk is not None
            for entry in stored.chunk.entries:
                body = msgspec.json.decode(entry.body)
                queued.append(body.get("key") or body["id"])
        dead = [letter.record_id for letter in queuefile.read_dead_letters(conn)]
        return {"queued": queued, "dead": dead}
    finally:
        conn.close()


@pytest.fixture
def small_bounds() -> Bounds:
    return Bounds(max_records=1000, max_bytes=10**7, chunk_records=2, chunk_bytes=10**6)


def test_put_then_take_then_ack_removes_exactly_the_taken_records(
    tmp_path: Path, small_bounds: Bounds
) -> None:
    with Outbox(tmp_path, bounds=small_bounds) as outbox:
        stream = outbox[DISCOVERY]
        stream.put([record("a/1"), record("a/2"), record("a/3")])
        assert on_disk(tmp_path)["queued"] == ["a/1", "a/2", "a/3"]

        batch = stream.take(max_records=2, max_bytes=10**6)
        assert batch is not None
        assert [msgspec.json.decode(b)["key"] for b in batch.bodies] == ["a/1", "a/2"]
        # Taken is not delivered: the records stay on disk until the ack.
        assert on_disk(tmp_path) == {"queued": ["a/1", "a/2", "a/3"], "dead": []}
        assert stream.stats().records == 3

        stream.ack(batch)
        assert on_disk(tmp_path) == {"queued": ["a/3"], "dead": []}
        assert stream.stats().records == 1


def test_a_batch_takes_whole_chunks_up_to_the_record_limit_but_never_less_than_one(
    tmp_path: Path, small_bounds: Bounds
) -> None:
    with Outbox(tmp_path, bounds=small_bounds) as outbox:
        stream = outbox[DISCOVERY]
        stream.put([record(f"a/{i}") for i in range(5)])  # chunks of 2, 2, 1
        first = stream.take(max_records=3, max_bytes=10**6)
        assert first is not None and len(first.entries) == 2
        second = stream.take(max_records=1, max_bytes=10)  # smaller than a chunk: one anyway
        assert second is not None and len(second.entries) == 2
        third = stream.take(max_records=10, max_bytes=10**6)
        assert third is not None and len(third.entries) == 1
        assert stream.take(max_records=10, max_bytes=10**6) is None


def test_taken_but_unacked_records_are_delivered_again_after_a_restart(
    tmp_path: Path, small_bounds: Bounds
) -> None:
    with Outbox(tmp_path, bounds=small_bounds) as outbox:
        outbox[DISCOVERY].put([record("a/1"), record("a/2"), record("a/3")])
        taken = outbox[DISCOVERY].take(max_records=2, max_bytes=10**6)
        assert taken is not None
        rest = outbox[DISCOVERY].take(max_records=2, max_bytes=10**6)
        assert rest is not None and len(rest.entries) == 1  # a/1 and a/2 are not taken twice

    with Outbox(tmp_path, bounds=small_bounds) as outbox:
        assert on_disk(tmp_path) == {"queued": ["a/1", "a/2", "a/3"], "dead": []}
        again = outbox[DISCOVERY].take(max_records=2, max_bytes=10**6)
        assert again is not None
        assert again.bodies == taken.bodies
        assert again.batch_id == taken.batch_id  # same Idempotency-Key for the retry


def test_dead_letters_keep_the_record_with_status_and_answer_and_survive_the_ack(
    tmp_path: Path, small_bounds: Bounds
) -> None:
    with Outbox(tmp_path, bounds=small_bounds) as outbox:
        stream = outbox[DISCOVERY]
        stream.put([record("a/1"), record("a/2")])
        batch = stream.take(max_records=2, max_bytes=10**6)
        assert batch is not None
        stream.dead_letter(batch.entries[1:], status=422, response="bad key")
        stream.ack(batch)
        assert on_disk(tmp_path) == {"queued": [], "dead": ["id-a/2"]}
        conn = queuefile.open_readonly(tmp_path / "discovery.db")
        (letter,) = queuefile.read_dead_letters(conn)
        conn.close()
        assert (letter.status, letter.response) == (422, "bad key")
        assert msgspec.json.decode(letter.record)["key"] == "a/2"
        assert stream.stats().dead_letters == 1


def test_dead_letters_past_their_byte_bound_lose_the_oldest_and_the_newest_always_stays(
    tmp_path: Path,
) -> None:
    bounds = Bounds(chunk_records=1, dead_letter_bytes=2500)
    with Outbox(tmp_path, bounds=bounds) as outbox:
        stream = outbox[DISCOVERY]
        stream.put([record(f"a/{n}", size=1000) for n in range(1, 5)] + [record("b/1", size=5000)])
        for _ in range(4):
            batch = stream.take(max_records=1, max_bytes=10**6)
            assert batch is not None
            stream.dead_letter(batch.entries, status=422, response="refused")
            stream.ack(batch)
        # Two records of ~1 KB fit the bound: each one more pushes the oldest out.
        assert on_disk(tmp_path)["dead"] == ["id-a/3", "id-a/4"]
        batch = stream.take(max_records=1, max_bytes=10**6)
        assert batch is not None
        stream.dead_letter(batch.entries, status=413, response="too large")
        stream.ack(batch)
        # Larger than the whole bound on its own: kept, and everything older goes.
        assert on_disk(tmp_path)["dead"] == ["id-b/1"]
        assert stream.stats().dead_letters == 1


class FullVolume:
    """The queue file's connection on a full volume: a DELETE fails as SQLite fails then,
    until `room()` says space was freed."""

    def __init__(self, real: sqlite3.Connection, room: Callable[[], bool]) -> None:
        self.real = real
        self.room = room
        self.refused = 0

    def __enter__(self) -> sqlite3.Connection:
        return self.real.__enter__()

    def __exit__(self, *exc: object) -> bool | None:
        return self.real.__exit__(*exc)  # type: ignore[arg-type]

    def execute(self, *args: Any) -> sqlite3.Cursor:
        return self.real.execute(*args)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        if sql.startswith("DELETE") and not self.room():
            self.refused += 1
            error = sqlite3.OperationalError("database or disk is full")
            error.sqlite_errorcode = sqlite3.SQLITE_FULL
            raise error
        return self.real.executemany(sql, rows)


@contextmanager
def full_volume(stream: StreamOutbox, room: Callable[[], bool]) -> Iterator[FullVolume]:
    full = FullVolume(stream._db, room)
    stream._db = full  # type: ignore[assignment]
    try:
        yield full
    finally:
        stream._db = full.real


def test_on_a_full_volume_the_reserve_makes_room_for_the_ack_and_comes_back_after(
    tmp_path: Path,
) -> None:
    with Outbox(tmp_path, bounds=Bounds(chunk_records=1)) as outbox:
        reserve = tmp_path / "disk-reserve"
        assert reserve.stat().st_size == 1024 * 1024  # held from the start
        stream = outbox[DISCOVERY]
        # Enough to make the drain worth a shrink (4 MiB freed).
        stream.put([record(f"a/{n}", size=600_000) for n in range(8)])
        with full_volume(stream, room=lambda: not reserve.exists()) as full:
            while (batch := stream.take(max_records=1, max_bytes=10**7)) is not None:
                stream.ack(batch)
        assert full.refused == 1  # the first delete met the full volume, then had room
        assert on_disk(tmp_path)["queued"] == []
        # The drain shrank the file, so the space is held back again for the next time.
        assert reserve.stat().st_size == 1024 * 1024


def test_a_shrink_that_fails_for_lack_of_space_does_not_fail_the_ack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Outbox(tmp_path, bounds=Bounds(chunk_records=1)) as outbox:
        stream = outbox[DISCOVERY]

        def no_room_for_a_copy() -> None:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(stream._queue, "shrink_disk_usage", no_room_for_a_copy)
        # Enough to make the drain worth a shrink (4 MiB freed).
        stream.put([record(f"a/{n}", size=600_000) for n in range(8)])
        while (batch := stream.take(max_records=1, max_bytes=10**7)) is not None:
            stream.ack(batch)
        assert on_disk(tmp_path)["queued"] == []
        assert stream.stats().records == 0


def test_with_the_reserve_used_up_a_full_volume_fails_the_ack_and_keeps_the_batch(
    tmp_path: Path,
) -> None:
    with Outbox(tmp_path) as outbox:
        (tmp_path / "disk-reserve").unlink()  # released at an earlier full volume
        stream = outbox[DISCOVERY]
        stream.put([record("a/1")])
        batch = stream.take(max_records=1, max_bytes=10**6)
        assert batch is not None
        with full_volume(stream, room=lambda: False), pytest.raises(sqlite3.OperationalError):
            stream.ack(batch)
        assert on_disk(tmp_path)["queued"] == ["a/1"]  # nothing lost; the shipper retries


def test_past_the_record_bound_the_oldest_upserts_go_first_and_resync_is_marked(
    tmp_path: Path,
) -> None:
    bounds = Bounds(max_records=4, max_bytes=10**7, chunk_records=2)
    with Outbox(tmp_path, bounds=bounds) as outbox:
        stream = outbox[DISCOVERY]
        stream.put(
            [record("u/1"), record("d/1", op="delete"), record("u/2"), record("e/1", "event")]
        )
        assert not stream.resync_needed
        stream.put([record("u/3"), record("d/2", op="delete")])
        # Two over the bound: u/1 and u/2 (the oldest upserts) are dropped, deletes and
        # events are kept even though they are older than u/3.
        assert on_disk(tmp_path)["queued"] == ["d/1", "e/1", "u/3", "d/2"]
        assert stream.resync_needed
        assert stream.stats().dropped == 2

    with Outbox(tmp_path, bounds=bounds) as outbox:  # the mark and the count are durable
        assert outbox[DISCOVERY].resync_needed
        assert outbox[DISCOVERY].stats().dropped == 2
        outbox[DISCOVERY].clear_resync_needed()
        assert not outbox[DISCOVERY].resync_needed


def test_deletes_are_never_dropped_even_far_past_the_bound(tmp_path: Path) -> None:
    bounds = Bounds(max_records=2, max_bytes=100, chunk_records=10)
    with Outbox(tmp_path, bounds=bounds) as outbox:
        stream = outbox[DISCOVERY]
        stream.put([record(f"d/{i}", op="delete") for i in range(5)])
        assert on_disk(tmp_path)["queued"] == [f"d/{i}" for i in range(5)]
        assert stream.stats().dropped == 0
        assert stream.at_bound
        assert not stream.resync_needed  # nothing was dropped that a resync would restore


def test_discovery_events_are_dropped_only_past_the_byte_bound(tmp_path: Path) -> None:
    # The record bound alone never drops events.
    with Outbox(tmp_path / "count", bounds=Bounds(max_records=1, chunk_records=10)) as outbox:
        outbox[DISCOVERY].put([record(f"e/{i}", op="event") for i in range(3)])
        assert on_disk(tmp_path / "count")["queued"] == ["e/0", "e/1", "e/2"]

    # Past the byte bound, after the upserts are gone, the oldest events go and are counted.
    sized = record("e/0", op="event", size=100)
    one = len(msgspec.json.encode(sized))
    bounds = Bounds(max_records=100, max_bytes=one * 3 + 10, chunk_records=10)
    with Outbox(tmp_path / "bytes", bounds=bounds) as outbox:
        stream = outbox[DISCOVERY]
        stream.put([record("u/0", op="upsert", size=100), sized])
        stream.put([record(f"e/{i}", op="event", size=100) for i in (1, 2)])
        stream.put([record("d/0", op="delete", size=100)])
        assert on_disk(tmp_path / "bytes")["queued"] == ["e/1", "e/2", "d/0"]
        assert stream.stats().dropped == 2  # u/0 then e/0


def test_scaling_events_are_never_dropped_and_the_stream_reports_its_bound(
    tmp_path: Path,
) -> None:
    with Outbox(tmp_path, bounds=Bounds(max_records=2, max_bytes=10, chunk_records=2)) as outbox:
        stream = outbox[SCALING]
        assert not stream.at_bound
        stream.put([event(str(i)) for i in range(5)])
        assert on_disk(tmp_path, SCALING)["queued"] == [f"ev-{i}" for i in range(5)]
        assert stream.at_bound
        assert stream.stats().dropped == 0
        assert stream.reporter.health.reason == "the scaling queue is at its bound"
        while (batch := stream.take(max_records=2, max_bytes=10**6)) is not None:
            stream.ack(batch)
        assert not stream.at_bound and stream.reporter.health.ok


def test_only_chunks_not_taken_are_trimmed(tmp_path: Path) -> None:
    bounds = Bounds(max_records=2, max_bytes=10**7, chunk_records=2)
    with Outbox(tmp_path, bounds=bounds) as outbox:
        stream = outbox[DISCOVERY]
        stream.put([record("u/1"), record("u/2")])
        batch = stream.take(max_records=2, max_bytes=10**6)
        assert batch is not None
        stream.put([record("u/3"), record("u/4")])
        assert on_disk(tmp_path) == {"queued": ["u/1", "u/2"], "dead": []}
        assert stream.stats().dropped == 2


def test_acked_rows_are_cleared_and_the_file_shrinks_after_a_drain(tmp_path: Path) -> None:
    bounds = Bounds(chunk_records=100, chunk_bytes=10**7)
    with Outbox(tmp_path, bounds=bounds) as outbox:
        stream = outbox[DISCOVERY]
        for block in range(20):
            stream.put([record(f"a/{block}-{i}", size=3000) for i in range(100)])
        full = _file_bytes(tmp_path / "discovery.db")
        while (batch := stream.take(max_records=100, max_bytes=10**7)) is not None:
            stream.ack(batch)
        conn = sqlite3.connect(tmp_path / "discovery.db")
        rows = conn.execute(f"SELECT COUNT(*) FROM {queueschema.QUEUE_TABLE}").fetchone()[0]
        conn.close()
        assert rows == 0
        assert _file_bytes(tmp_path / "discovery.db") < full / 10


def _file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def test_a_second_process_on_the_same_directory_is_refused_with_a_clear_message(
    tmp_path: Path,
) -> None:
    with Outbox(tmp_path), pytest.raises(QueueDirectoryBusy, match="in use by another"):
        Outbox(tmp_path)  # flock conflicts across open files, as with another process
    with Outbox(tmp_path):  # released on close
        pass


def test_a_file_that_is_not_a_database_is_quarantined_with_its_companions(
    tmp_path: Path,
) -> None:
    (tmp_path / "discovery.db").write_bytes(b"this is not sqlite" * 100)
    (tmp_path / "discovery.db-wal").write_bytes(b"junk")
    with Outbox(tmp_path) as outbox:
        stream = outbox[DISCOVERY]
        assert stream.resync_needed
        assert stream.reporter.snapshot().counters["quarantined"] == 1
        stream.put([record("a/1")])
        assert on_disk(tmp_path)["queued"] == ["a/1"]
    moved = sorted(p.name for p in tmp_path.glob("discovery.db.corrupt-*"))
    assert len(moved) == 2 and moved[1].endswith("-wal")


def test_a_file_that_fails_the_integrity_check_is_quarantined(tmp_path: Path) -> None:
    with Outbox(tmp_path, bounds=Bounds(chunk_records=1)) as outbox:
        outbox[DISCOVERY].put([record(f"a/{i}", size=2000) for i in range(50)])
    path = tmp_path / "discovery.db"
    data = bytearray(path.read_bytes())
    page = sqlite_file.PAGE_SIZE
    data[page * 3 : page * 3 + 64] = b"\xff" * 64  # a b-tree page header, past the file header
    path.write_bytes(bytes(data))
    with Outbox(tmp_path) as outbox:
        assert outbox[DISCOVERY].resync_needed
        assert outbox[DISCOVERY].stats().records == 0
    assert list(tmp_path.glob("discovery.db.corrupt-*"))


def test_a_locked_file_is_not_corruption_and_stops_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_file, "BUSY_TIMEOUT_SECONDS", 0.1)
    with Outbox(tmp_path) as outbox:
        outbox[DISCOVERY].put([record("a/1")])
    blocker = sqlite3.connect(tmp_path / "discovery.db", timeout=0)
    blocker.execute("PRAGMA locking_mode=EXCLUSIVE")
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(QueueFileError, match="locked"):
            Outbox(tmp_path)
    finally:
        blocker.rollback()
        blocker.close()
    assert not list(tmp_path.glob("*.corrupt-*"))
    with Outbox(tmp_path):
        assert on_disk(tmp_path)["queued"] == ["a/1"]


def test_a_file_that_cannot_be_opened_is_not_corruption(tmp_path: Path) -> None:
    (tmp_path / "discovery.db").mkdir()  # what a permission or mount problem looks like to SQLite
    with pytest.raises(QueueFileError, match="cannot open queue file"):
        Outbox(tmp_path)
    assert (tmp_path / "discovery.db").is_dir()
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_a_queue_directory_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(QueueFileError, match="cannot create queue directory"):
        Outbox(tmp_path / "file" / "queue")


def test_streams_are_separate_files(tmp_path: Path) -> None:
    with Outbox(tmp_path) as outbox:
        outbox[DISCOVERY].put([record("a/1")])
        outbox[SCALING].put([event("1")])
        assert on_disk(tmp_path, DISCOVERY)["queued"] == ["a/1"]
        assert on_disk(tmp_path, SCALING)["queued"] == ["ev-1"]
