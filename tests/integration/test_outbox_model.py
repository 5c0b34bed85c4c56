"""The outbox held against a model: a list of chunks, checked after every step.

Hypothesis drives a stream through puts, takes, acks, dead letters and reopening (which
releases what was taken but not acked), with bounds small enough to be crossed often. After
every step the records on disk, the stats, the bound and the dead letters must be what the
model says. The model is the documented behaviour written plainly: chunks cut at the chunk
limits, whole chunks taken oldest first, and past a bound the oldest upserts that are not
taken dropped first (with `resync_needed` set), then, past the byte bound only, the oldest
discovery events; deletes and scaling events never.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shipper import queuefile
from shipper.outbox import Batch, Bounds, Outbox
from shipper.records import DISCOVERY, SCALING, Outgoing, Record, RecordClass, ScalingEvent, encode

# Records are ~190-440 bytes: either bound can be the one crossed.
BOUNDS = Bounds(
    max_records=6, max_bytes=2000, chunk_records=3, chunk_bytes=700, dead_letter_bytes=10**6
)
OPS = ("upsert", "delete", "event")
PADS = st.integers(0, 250)
OBSERVED_AT = "2026-01-01T00:00:00.000Z"


@dataclass(frozen=True)
class Item:
    id: str
    cls: RecordClass
    size: int


@dataclass(eq=False)
class ModelChunk:
    items: list[Item]
    taken: bool = False

    @property
    def size(self) -> int:
        return sum(item.size for item in self.items)


@dataclass
class Model:
    """What one stream should hold: its chunks oldest first, and what it remembers."""

    stream: str
    chunks: list[ModelChunk] = field(default_factory=list)
    dead: set[str] = field(default_factory=set)
    dropped: int = 0
    resync_needed: bool = False

    @property
    def records(self) -> int:
        return sum(len(chunk.items) for chunk in self.chunks)

    @property
    def bytes(self) -> int:
        return sum(chunk.size for chunk in self.chunks)

    def ready(self) -> list[ModelChunk]:
        return [chunk for chunk in self.chunks if not chunk.taken]

    def put(self, items: list[Item]) -> None:
        current: list[Item] = []
        for item in items:
            full = len(current) >= BOUNDS.chunk_records
            if current and (full or sum(i.size for i in current) + item.size > BOUNDS.chunk_bytes):
                self.chunks.append(ModelChunk(current))
                current = []
            current.append(item)
        self.chunks.append(ModelChunk(current))
        if self.stream == DISCOVERY and self._over():
            if any(i.cls is RecordClass.UPSERT for c in self.ready() for i in c.items):
                self.resync_needed = True
                self._drop_oldest(RecordClass.UPSERT, self._over)
            self._drop_oldest(RecordClass.EVENT, lambda: self.bytes > BOUNDS.max_bytes)

    def _over(self) -> bool:
        return self.records > BOUNDS.max_records or self.bytes > BOUNDS.max_bytes

    def _drop_oldest(self, cls: RecordClass, still_over: Callable[[], bool]) -> None:
        for chunk in self.ready():
            for item in list(chunk.items):
                if item.cls is cls and still_over():
                    chunk.items.remove(item)
                    self.dropped += 1
            if not chunk.items:
                self.chunks.remove(chunk)

    def take(self, max_records: int, max_bytes: int) -> list[ModelChunk]:
        taken: list[ModelChunk] = []
        for chunk in self.ready():
            records = sum(len(c.items) for c in taken) + len(chunk.items)
            over = records > max_records or sum(c.size for c in taken) + chunk.size > max_bytes
            if taken and over:
                break
            chunk.taken = True
            taken.append(chunk)
        return taken

    def ack(self, chunks: list[ModelChunk]) -> None:
        for chunk in chunks:
            self.chunks.remove(chunk)

    def reopen(self) -> None:
        for chunk in self.chunks:
            chunk.taken = False

    @property
    def at_bound(self) -> bool:
        return self.records >= BOUNDS.max_records or self.bytes >= BOUNDS.max_bytes


def outgoing(stream: str, ident: str, op: str, pad: int) -> Outgoing:
    if stream == SCALING:
        return ScalingEvent(
            id=ident, type="apply", template_id="t-1", occurred_at=OBSERVED_AT, message="x" * pad
        )
    return Record(
        id=ident,
        kind="deployment" if op != "event" else "pod_error",
        op=op,  # type: ignore[arg-type]
        key=f"default/{ident}",
        observed_at=OBSERVED_AT,
        data={"pad": "x" * pad},
    )


class OutboxMachine(RuleBasedStateMachine):
    STREAM = DISCOVERY

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="outbox-model-"))
        self.outbox = Outbox(self.directory, streams=(self.STREAM,), bounds=BOUNDS)
        self.model = Model(self.STREAM)
        self.batches: list[tuple[Batch, list[ModelChunk]]] = []
        self.made = 0

    def teardown(self) -> None:
        self.outbox.close()
        shutil.rmtree(self.directory)

    @rule(records=st.lists(st.tuples(st.sampled_from(OPS), PADS), min_size=1, max_size=4))
    def put(self, records: list[tuple[str, int]]) -> None:
        self._put(records)

    @rule(op=st.sampled_from(OPS), pads=st.lists(PADS, min_size=1, max_size=4))
    def put_one_kind(self, op: str, pads: list[int]) -> None:
        """A stream of only events (or deletes) is where the bounds differ most."""
        self._put([(op, pad) for pad in pads])

    def _put(self, records: list[tuple[str, int]]) -> None:
        batch: list[Outgoing] = []
        for op, pad in records:
            self.made += 1
            batch.append(outgoing(self.STREAM, f"r{self.made}", op, pad))
        self.outbox[self.STREAM].put(batch)
        self.model.put([Item(r.id, r.record_class, len(encode(r))) for r in batch])

    @rule(max_records=st.integers(1, 7), max_bytes=st.sampled_from([1, 400, 10**6]))
    def take(self, max_records: int, max_bytes: int) -> None:
        batch = self.outbox[self.STREAM].take(max_records=max_records, max_bytes=max_bytes)
        expected = self.model.take(max_records, max_bytes)
        if batch is None:
            assert expected == []
            return
        assert [_id(entry) for entry in batch.entries] == [i.id for c in expected for i in c.items]
        self.batches.append((batch, expected))

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        batch, chunks = self.batches.pop(data.draw(st.integers(0, len(self.batches) - 1)))
        self.outbox[self.STREAM].ack(batch)
        self.model.ack(chunks)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def dead_letter(self, data: st.DataObject) -> None:
        batch, _ = data.draw(st.sampled_from(self.batches))
        start = data.draw(st.integers(0, len(batch.entries) - 1))
        refused = batch.entries[start : data.draw(st.integers(start + 1, len(batch.entries)))]
        self.outbox[self.STREAM].dead_letter(refused, status=422, response="refused")
        self.model.dead.update(_id(entry) for entry in refused)

    @rule()
    def clear_resync_needed(self) -> None:
        self.outbox[self.STREAM].clear_resync_needed()
        self.model.resync_needed = False

    @rule()
    def reopen(self) -> None:
        """A restart: what was taken and not acked is queued again, in its place."""
        self.outbox.close()
        self.outbox = Outbox(self.directory, streams=(self.STREAM,), bounds=BOUNDS)
        self.batches.clear()
        self.model.reopen()

    @invariant()
    def agrees_with_the_model(self) -> None:
        stream = self.outbox[self.STREAM]
        queued, dead = on_disk(self.directory / f"{self.STREAM}.db")
        assert queued == [item.id for chunk in self.model.chunks for item in chunk.items]
        assert dead == self.model.dead
        stats = stream.stats()
        assert (stats.records, stats.bytes) == (self.model.records, self.model.bytes)
        assert (stats.dropped, stats.dead_letters) == (self.model.dropped, len(self.model.dead))
        assert stream.resync_needed == stats.resync_needed == self.model.resync_needed
        assert stream.at_bound == self.model.at_bound


class ScalingOutboxMachine(OutboxMachine):
    STREAM = SCALING


def _id(entry: queuefile.Entry) -> str:
    return str(msgspec.json.decode(entry.body)["id"])


def on_disk(path: Path) -> tuple[list[str], set[str]]:
    """Queued ids in order and dead-lettered ids, read as the queue commands read them."""
    conn = queuefile.open_readonly(path)
    try:
        queued = [
            _id(entry)
            for stored in queuefile.scan_chunks(conn)
            for entry in (stored.chunk.entries if stored.chunk else ())
        ]
        dead = {letter.record_id for letter in queuefile.read_dead_letters(conn)}
        return queued, dead
    finally:
        conn.close()


MODEL_SETTINGS = settings(
    max_examples=20,
    stateful_step_count=25,
    deadline=None,  # every put and ack is an fsync
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TestDiscoveryOutboxAgainstTheModel = OutboxMachine.TestCase
TestDiscoveryOutboxAgainstTheModel.settings = MODEL_SETTINGS
TestScalingOutboxAgainstTheModel = ScalingOutboxMachine.TestCase
TestScalingOutboxAgainstTheModel.settings = MODEL_SETTINGS
