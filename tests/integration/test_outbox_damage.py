"""A damaged outbox file says what it lost: quarantined, its records and the events no
resync sends again are counted (log line and metrics); found empty, or its journal found
without it, it is said in a log line; and each new file has a new epoch, from which the
collector tells that the records it put are gone (tests/e2e/test_outbox_damage_e2e.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import structlog.testing

from shipper import queuefile
from shipper.outbox import Bounds, Outbox
from shipper.records import DISCOVERY, SCALING, Record, ScalingEvent, utc_timestamp

QUEUED_UPSERTS = 900
QUEUED_POD_ERRORS = 17


def record(kind: str, key: str, op: str) -> Record:
    return Record(
        id=f"id-{kind}-{key}",
        kind=kind,
        op=op,  # type: ignore[arg-type]
        key=key,
        observed_at=utc_timestamp(),
        data={"pad": "x" * 200},
    )


def fill_outbox(directory: Path) -> None:
    """900 upserts, 17 pod errors and a snapshot (a resync sends a new one), queued."""
    with Outbox(directory, streams=(DISCOVERY,), bounds=Bounds(chunk_records=50)) as box:
        stream = box[DISCOVERY]
        stream.put(record("deployment", f"ns/d{i}", "upsert") for i in range(QUEUED_UPSERTS))
        stream.put(record("pod_error", f"ns/p{i}", "event") for i in range(QUEUED_POD_ERRORS))
        stream.put([record("snapshot", "deployment/s/1", "event")])


def test_an_intact_file_moved_aside_counts_every_record_and_every_event_not_rebuilt(
    tmp_path: Path,
) -> None:
    fill_outbox(tmp_path)
    found = queuefile.salvage_count(tmp_path / "discovery.db", stream=DISCOVERY)
    assert found == queuefile.Salvage(
        QUEUED_UPSERTS + QUEUED_POD_ERRORS + 1, QUEUED_POD_ERRORS, complete=True
    )


def test_a_truncated_file_is_quarantined_and_what_it_still_shows_is_counted_as_lost(
    tmp_path: Path,
) -> None:
    fill_outbox(tmp_path)
    path = tmp_path / "discovery.db"
    with path.open("r+b") as file:
        file.truncate(int(path.stat().st_size * 0.9))  # not even a whole number of pages
    with structlog.testing.capture_logs() as logs, Outbox(tmp_path) as box:
        stream = box[DISCOVERY]
        assert stream.resync_needed
        counters = stream.reporter.snapshot().counters
    (said,) = [line for line in logs if line["event"] == "queue_file_quarantined"]
    # Most of what it held is still read; the cut-off tail makes it a floor.
    assert QUEUED_UPSERTS // 2 < said["records_lost"] < QUEUED_UPSERTS + QUEUED_POD_ERRORS
    assert said["events_lost"] <= QUEUED_POD_ERRORS
    assert said["counted_to_the_end"] is False
    assert counters["records_lost"] == said["records_lost"]
    assert counters["events_lost"] == said["events_lost"]
    assert counters["quarantined"] == 1


def test_a_scaling_file_moved_aside_counts_its_events_but_none_as_lost(tmp_path: Path) -> None:
    """The scheduler puts every event its store kept into the new file."""
    with Outbox(tmp_path, streams=(SCALING,)) as box:
        box[SCALING].put(
            ScalingEvent(id=f"ev-{i}", type="apply", template_id="t", occurred_at="x")
            for i in range(5)
        )
    moved = tmp_path / "copy.db"
    shutil.copy(tmp_path / "scaling.db", moved)
    assert queuefile.salvage_count(moved, stream=SCALING) == queuefile.Salvage(5, 0, complete=True)


def test_a_zero_length_file_is_said_and_becomes_a_new_file_with_a_new_epoch(
    tmp_path: Path,
) -> None:
    fill_outbox(tmp_path)
    with Outbox(tmp_path, streams=(DISCOVERY,)) as box:
        before = box[DISCOVERY].epoch
        assert box[DISCOVERY].epoch == before  # stable while the file is the same
    (tmp_path / "discovery.db").write_bytes(b"")
    with structlog.testing.capture_logs() as logs, Outbox(tmp_path, streams=(DISCOVERY,)) as box:
        stream = box[DISCOVERY]
        assert stream.epoch != before
        assert stream.stats().records == 0
        assert stream.reporter.snapshot().counters["found_empty"] == 1
    assert [line["event"] for line in logs if line["event"].startswith("queue_file")] == [
        "queue_file_empty"
    ]


def test_the_epoch_outlives_a_reopen_and_a_deleted_file_comes_back_with_another(
    tmp_path: Path,
) -> None:
    with Outbox(tmp_path, streams=(DISCOVERY,)) as box:
        first = box[DISCOVERY].epoch
    with Outbox(tmp_path, streams=(DISCOVERY,)) as box:
        assert box[DISCOVERY].epoch == first
    (tmp_path / "discovery.db").unlink()
    with Outbox(tmp_path, streams=(DISCOVERY,)) as box:
        assert box[DISCOVERY].epoch != first


def test_a_journal_whose_database_is_gone_is_moved_aside_and_a_resync_asked_for(
    tmp_path: Path,
) -> None:
    live, left = tmp_path / "live", tmp_path / "left"
    left.mkdir()
    box = Outbox(live, streams=(DISCOVERY,))
    box[DISCOVERY].put(record("deployment", f"ns/d{i}", "upsert") for i in range(100))
    for name in ("discovery.db-wal", "discovery.db-shm"):  # as a crash leaves them
        shutil.copy(live / name, left / name)
    box.close()
    with structlog.testing.capture_logs() as logs, Outbox(left, streams=(DISCOVERY,)) as box:
        assert box[DISCOVERY].resync_needed
    assert "queue_file_quarantined" in [line["event"] for line in logs]
    moved = sorted(path.name[-4:] for path in left.glob("discovery.db.corrupt-*"))
    assert moved == ["-shm", "-wal"]
