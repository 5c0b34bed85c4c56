"""Coalescing: unchanged content is not enqueued again, bursts collapse, events always pass."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from collector import coalesce as coalescing
from collector import model
from collector.coalesce import Coalescer, entry_of, fingerprinted
from collector.model import ObjectMeta
from collector.state import StateStore
from shipper.outbox import Outbox, StreamOutbox
from shipper.records import DISCOVERY, Record


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[StreamOutbox]:
    with Outbox(tmp_path, streams=(DISCOVERY,)) as outbox:
        yield outbox[DISCOVERY]


def queued(stream: StreamOutbox) -> list[tuple[str, str, dict]]:
    batch = stream.take(max_records=10_000, max_bytes=10**8)
    if batch is None:
        return []
    stream.ack(batch)
    return [
        (body["op"], body["key"], body["data"])
        for body in (msgspec.json.decode(raw) for raw in batch.bodies)
    ]


def meta(name: str, rv: str = "1", uid: str = "u-1") -> ObjectMeta:
    return ObjectMeta(name=name, namespace="shop", uid=uid, resource_version=rv)


def test_unchanged_content_is_not_enqueued_again_even_with_a_new_resource_version(
    stream: StreamOutbox,
) -> None:
    coalescer = Coalescer(stream)
    coalescer.offer(model.upsert("deployment", meta("web", "1"), {"replicas": 2}))
    assert coalescer.flush() == 1
    coalescer.offer(model.upsert("deployment", meta("web", "2"), {"replicas": 2}))
    assert coalescer.flush() == 0
    coalescer.offer(model.upsert("deployment", meta("web", "3"), {"replicas": 3}))
    assert coalescer.flush() == 1
    assert [data for _, _, data in queued(stream)] == [{"replicas": 2}, {"replicas": 3}]


def test_a_burst_within_one_window_gives_one_record_with_the_last_state(
    stream: StreamOutbox,
) -> None:
    coalescer = Coalescer(stream)
    for replicas in range(1, 6):
        coalescer.offer(model.upsert("deployment", meta("web"), {"replicas": replicas}))
    coalescer.offer(model.upsert("deployment", meta("api"), {"replicas": 1}))
    assert coalescer.flush() == 2
    assert queued(stream) == [
        ("upsert", "shop/web", {"replicas": 5}),
        ("upsert", "shop/api", {"replicas": 1}),
    ]


def test_events_are_never_coalesced_away(stream: StreamOutbox) -> None:
    coalescer = Coalescer(stream)
    signal = {"reason": "CrashLoopBackOff"}
    for _ in range(3):
        coalescer.offer(model.event("pod_error", "shop/web-1/app/x/1", meta("web-1"), signal))
    assert coalescer.flush() == 3


def test_a_delete_is_sent_and_a_recreation_with_the_same_content_is_sent_again(
    stream: StreamOutbox,
) -> None:
    coalescer = Coalescer(stream)
    coalescer.offer(model.upsert("service", meta("web"), {"type": "ClusterIP"}))
    coalescer.flush()
    coalescer.offer(model.delete("service", meta("web")))
    coalescer.flush()
    coalescer.offer(model.upsert("service", meta("web"), {"type": "ClusterIP"}))
    coalescer.flush()
    assert [op for op, _, _ in queued(stream)] == ["upsert", "delete", "upsert"]


def test_a_new_uid_is_news_even_when_the_data_is_the_same(stream: StreamOutbox) -> None:
    coalescer = Coalescer(stream)
    coalescer.offer(model.upsert("namespace", meta("shop", uid="u-1"), {}))
    coalescer.flush()
    coalescer.offer(model.upsert("namespace", meta("shop", uid="u-2"), {}))
    assert coalescer.flush() == 1


def test_forgetting_everything_makes_the_next_state_go_out_again(stream: StreamOutbox) -> None:
    coalescer = Coalescer(stream)
    record = model.upsert("deployment", meta("web"), {"replicas": 2})
    coalescer.offer(record)
    coalescer.flush()
    coalescer.forget_all()
    coalescer.offer(model.upsert("deployment", meta("web", "9"), {"replicas": 2}))
    assert coalescer.flush() == 1


def test_a_failed_write_keeps_the_records_for_the_next_window(
    stream: StreamOutbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    coalescer = Coalescer(stream)
    coalescer.offer(model.upsert("deployment", meta("web"), {"replicas": 1}))
    coalescer.offer(model.event("pod_error", "k1", meta("web-1"), {"reason": "OOMKilled"}))

    def disk_full(records: object) -> None:
        raise OSError("database or disk is full")

    monkeypatch.setattr(stream, "put_entries", disk_full)
    assert coalescer.flush() == 0
    assert not coalescer.reporter.health.ok
    coalescer.offer(model.upsert("deployment", meta("web"), {"replicas": 2}))  # newer wins
    monkeypatch.undo()
    assert coalescer.flush() == 2
    assert coalescer.reporter.health.ok
    assert [(op, data) for op, _, data in queued(stream)] == [
        ("upsert", {"replicas": 2}),
        ("event", {"reason": "OOMKilled"}),
    ]


def test_a_failure_midway_through_a_window_keeps_every_record_in_order(
    stream: StreamOutbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    coalescer = Coalescer(stream)
    for name in ("a", "b", "c"):
        coalescer.offer(model.upsert("deployment", meta(name), {"replicas": 1}))
    built = coalescing.entry_of

    def fails_at_b(record: Record, data: Any) -> Any:
        if record.key == "shop/b":
            raise RuntimeError("a bug")
        return built(record, data)

    monkeypatch.setattr(coalescing, "entry_of", fails_at_b)
    with pytest.raises(RuntimeError):
        coalescer.flush()
    assert not coalescer.empty
    monkeypatch.undo()
    assert coalescer.flush() == 3
    assert [key for _, key, _ in queued(stream)] == ["shop/a", "shop/b", "shop/c"]


def test_a_window_of_many_records_and_kinds_drops_exactly_the_unchanged_ones(
    stream: StreamOutbox,
) -> None:
    """Fingerprints are read for a whole window at once: a list page of keys or more,
    of two kinds sharing key names, and a delete that makes its key new again."""
    coalescer = Coalescer(stream, max_pending=10_000)
    names = [f"app-{i:04}" for i in range(1200)]
    for kind in ("deployment", "revision"):
        for name in names:
            coalescer.offer(model.upsert(kind, meta(name), {"replicas": 1}))
    assert coalescer.flush() == 2400
    queued(stream)

    coalescer.offer(model.delete("revision", meta("app-0007")))
    assert coalescer.flush() == 1
    for kind in ("deployment", "revision"):
        for i, name in enumerate(names):
            coalescer.offer(model.upsert(kind, meta(name, "2"), {"replicas": 1 + (i == 700)}))
    assert coalescer.flush() == 3
    assert sorted(key for op, key, _ in queued(stream) if op == "upsert") == [
        "shop/app-0007",
        "shop/app-0700",
        "shop/app-0700",
    ]


RECORDS = [
    model.upsert("deployment", meta("web"), {"z": 1, "a": {"y": [1, "é"], "b": None}}),
    model.upsert("namespace", ObjectMeta(name="shop"), {"labels": {'q"uote': "\n"}}),
    model.delete("service", meta("web", uid="")),
    model.event("pod_error", "shop/web-1/app/x/1", meta("web-1"), {"reason": "OOMKilled"}),
]


def as_kept(record: Record) -> Record:
    """The record as a sink that keeps its data offers it: the data's JSON, encoded once."""
    return msgspec.structs.replace(record, data=msgspec.Raw(msgspec.json.encode(record.data)))


@pytest.mark.parametrize("record", [*RECORDS, as_kept(RECORDS[0])])
def test_the_entry_carries_the_record_as_it_is_and_the_fingerprint_ignores_id_and_times(
    record: Record,
) -> None:
    data, mark = fingerprinted(record)
    entry = entry_of(record, data)
    assert entry.cls == record.record_class
    assert msgspec.json.decode(entry.body) == msgspec.json.decode(msgspec.json.encode(record))
    again = msgspec.structs.replace(
        record, id="another", observed_at="2030-01-01T00:00:00.000Z", resource_version="9"
    )
    assert fingerprinted(again)[1] == mark


@pytest.mark.parametrize("record", RECORDS[:2])
def test_a_record_carrying_its_data_encoded_is_the_same_record_for_the_coalescer(
    record: Record, stream: StreamOutbox
) -> None:
    kept = as_kept(record)
    assert fingerprinted(kept)[1] == fingerprinted(record)[1]
    assert coalescing.legacy_fingerprint(kept) == coalescing.legacy_fingerprint(record)
    coalescer = Coalescer(stream)
    coalescer.offer(record)
    assert coalescer.flush() == 1
    coalescer.offer(kept)  # built from what was kept (after a restart, say): nothing new
    assert coalescer.flush() == 0
    assert [data for _, _, data in queued(stream)] == [record.data]


def test_records_carrying_their_data_encoded_are_committed_once_they_hold_enough_of_it(
    stream: StreamOutbox,
) -> None:
    # The data's JSON in the buffer is the records' own (a dict shares what was rendered
    # once), so the buffer is bounded by its bytes too, not only by its records.
    coalescer = Coalescer(stream, max_pending=10_000, max_pending_bytes=64 * 1024)
    padding = "x" * 4000
    per_record = len(msgspec.json.encode({"padding": padding}))
    enough = -(-coalescer.max_pending_bytes // per_record)
    for n in range(enough - 1):
        coalescer.offer(model.upsert("deployment", meta(f"as-dict-{n}"), {"padding": padding}))
        coalescer.offer(as_kept(model.upsert("deployment", meta(f"a-{n}"), {"padding": padding})))
    assert queued(stream) == []  # dicts do not count
    coalescer.offer(as_kept(model.upsert("deployment", meta("last"), {"padding": padding})))
    assert len(queued(stream)) == 2 * enough - 1  # committed within the offer
    assert coalescer.empty
    coalescer.offer(as_kept(model.upsert("deployment", meta("next"), {"padding": padding})))
    assert queued(stream) == []  # counted from nothing again
    assert coalescer.flush() == 1


def sorted_fingerprint(record: Record) -> bytes:
    """The fingerprint as state files written by earlier versions hold it."""
    encoded = msgspec.json.encode((record.op, record.uid, record.data), order="sorted")
    return hashlib.blake2b(encoded, digest_size=16).digest()


def test_fingerprints_an_earlier_version_stored_still_match_so_an_upgrade_resends_nothing(
    stream: StreamOutbox,
) -> None:
    state = StateStore()
    upserts = [
        model.upsert("deployment", meta("web"), {"z": 1, "a": {"y": [1, "é"], "b": None}}),
        model.upsert("namespace", ObjectMeta(name="shop"), {"labels": {"b": "2", "a": "1"}}),
        model.upsert("service", meta("api"), {"ports": [80]}),
    ]
    state.sent.set_many(((r.kind, r.key), sorted_fingerprint(r)) for r in upserts)
    state.commit()
    coalescer = Coalescer(stream, state=state)
    changed = model.upsert("service", meta("api"), {"ports": [443]})
    for record in [*upserts[:2], changed]:
        coalescer.offer(record)
    assert coalescer.flush() == 1
    assert queued(stream) == [("upsert", "shop/api", {"ports": [443]})]
    # Stored again by this version's definition: the next comparison needs no sorting.
    for record in [*upserts[:2], changed]:
        assert state.sent.get((record.kind, record.key)) == fingerprinted(record)[1]
    assert all(len(fingerprinted(record)[1]) != 16 for record in RECORDS)
    # A window of nothing but such records sends nothing and stores them anew all the same.
    ingress = model.upsert("ingress", meta("www"), {"hosts": ["shop.example"]})
    state.sent.set(("ingress", "shop/www"), sorted_fingerprint(ingress))
    coalescer.offer(ingress)
    assert coalescer.flush() == 0
    assert queued(stream) == []
    assert state.sent.get(("ingress", "shop/www")) == fingerprinted(ingress)[1]
