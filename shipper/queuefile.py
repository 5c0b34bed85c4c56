"""The on-disk layout of one outbox stream, shared by the running outbox and the inspection CLI.

Each stream lives in its own SQLite file, `<queue dir>/<stream>.db`, holding three tables:
persist-queue's `ack_queue_outbox` (one row per chunk of records, msgpack-encoded, never
pickle), `outbox_meta` (the file's epoch, the `resync_needed` mark, drop counters) and
`dead_letters`; their names and statements are in `shipper.queueschema`. Reading goes
through `scan_chunks`, so the agent rebuilding its index at start-up and `moonin-agent queue
stats` read the file the same way.

The file is opened, checked and quarantined by `runtime.sqlite_file` as `QUEUE_FILE`
(durability FULL: nothing else holds the records it keeps); `salvage_count` then reads what
it still can of a file moved aside, to count what was lost. Lock, permission and I/O errors
are raised as `QueueFileError`, because moving a healthy file aside would throw queued
records away. So is a file, or an installed persist-queue, that does not match
`shipper.queueschema` (`check_schema`): refused, never moved aside.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import msgspec

from runtime import sqlite_file
from runtime.sqlite_file import Durability, FileKind, Foreign, UnusableFile
from shipper import queueschema as schema
from shipper.records import SCALING, Entry, RecordClass

_HEADER_BYTES = 100  # the page size at offset 16 (2 bytes), the page count at 28 (4 bytes)

# Events a stream's producer puts again once its file is lost, so a loss counts only the
# others: the collector's resync makes new snapshots (every other discovery event is
# lost); the scheduler puts every event its store kept into the new file.
REBUILT_DISCOVERY_EVENTS = frozenset({"snapshot"})


def stream_path(directory: Path, stream: str) -> Path:
    return directory / f"{stream}.db"


class Chunk(msgspec.Struct, array_like=True, frozen=True, gc=False):
    enqueued_at: float
    entries: list[Entry]


class ChunkSerializer:
    """persist-queue serializer: msgpack via msgspec (`dumps`/`loads` is all it asks for)."""

    _encoder = msgspec.msgpack.Encoder()
    _decoder = msgspec.msgpack.Decoder(Chunk)

    @classmethod
    def dumps(cls, chunk: Chunk) -> bytes:
        return cls._encoder.encode(chunk)

    @classmethod
    def loads(cls, data: bytes) -> Chunk:
        return cls._decoder.decode(data)


@dataclass(slots=True)
class ChunkInfo:
    """What the bounds and the stats need to know of a chunk, without its bodies."""

    records: int
    bytes: int
    upserts: int
    deletes: int
    events: int
    enqueued_at: float

    @classmethod
    def of(cls, chunk: Chunk) -> ChunkInfo:
        counts: dict[int, int] = {kind: 0 for kind in RecordClass}
        size = 0
        for entry in chunk.entries:
            counts[entry.cls] += 1
            size += len(entry.body)
        return cls(
            records=len(chunk.entries),
            bytes=size,
            upserts=counts[RecordClass.UPSERT],
            deletes=counts[RecordClass.DELETE],
            events=counts[RecordClass.EVENT],
            enqueued_at=chunk.enqueued_at,
        )


class StreamStats(msgspec.Struct, frozen=True, gc=False):
    """The shape `moonin-agent queue stats` prints per stream (see the design)."""

    records: int
    bytes: int
    oldest_age_seconds: float | None
    dead_letters: int
    dropped: int
    resync_needed: bool


def summarise(
    infos: Iterable[ChunkInfo], *, dead_letters: int, dropped: int, resync_needed: bool
) -> StreamStats:
    records = size = 0
    oldest: float | None = None
    for info in infos:
        records += info.records
        size += info.bytes
        if oldest is None or info.enqueued_at < oldest:
            oldest = info.enqueued_at
    return StreamStats(
        records=records,
        bytes=size,
        oldest_age_seconds=None if oldest is None else round(max(0.0, time.time() - oldest), 3),
        dead_letters=dead_letters,
        dropped=dropped,
        resync_needed=resync_needed,
    )


# The queue file (or its directory) cannot be used and must not be thrown away: locked, no
# permission, I/O, or refused as another persist-queue's.
QueueFileError = UnusableFile


def _foreign(conn: sqlite3.Connection) -> str | None:
    problem = schema.mismatch(conn)
    if problem is None:
        return None
    return (
        f"does not match persist-queue {schema.persist_queue_version()}: {problem}"
        f" (the outbox is tested with persist-queue {schema.PERSIST_QUEUE_TESTED})"
    )


QUEUE_FILE = FileKind(
    name="queue file", durability=Durability.FULL, foreign=_foreign, on_foreign=Foreign.REFUSE
)


@dataclass(frozen=True, slots=True)
class StoredChunk:
    pqid: int
    status: int
    chunk: Chunk | None  # None when the row's bytes do not decode
    raw: bytes


def scan_chunks(conn: sqlite3.Connection) -> Iterator[StoredChunk]:
    """Every chunk not yet acked, oldest first."""
    if not _has_table(conn, schema.QUEUE_TABLE):
        return
    rows = conn.execute(schema.SELECT_QUEUED)
    for pqid, status, data in rows:
        try:
            chunk: Chunk | None = ChunkSerializer.loads(data)
        except (msgspec.DecodeError, TypeError):
            chunk = None
        yield StoredChunk(pqid=pqid, status=int(status), chunk=chunk, raw=bytes(data or b""))


def read_chunk(conn: sqlite3.Connection, pqid: int) -> Chunk:
    (data,) = conn.execute(schema.SELECT_CHUNK, (pqid,)).fetchone()
    return ChunkSerializer.loads(data)


def delete_chunks(conn: sqlite3.Connection, pqids: Sequence[int]) -> None:
    """Delete the chunks' rows in one transaction (the outbox's ack)."""
    with conn:
        conn.executemany(schema.DELETE_CHUNK, [(pqid,) for pqid in pqids])


def create_own_tables(conn: sqlite3.Connection) -> None:
    with conn:
        for statement in schema.OWN_TABLES:
            conn.execute(statement)


def read_meta(conn: sqlite3.Connection) -> dict[str, str]:
    if not _has_table(conn, schema.META_TABLE):
        return {}
    return dict(conn.execute(schema.SELECT_META))


def write_meta(conn: sqlite3.Connection, values: dict[str, str]) -> None:
    with conn:
        conn.executemany(schema.WRITE_META, values.items())


def count_dead_letters(conn: sqlite3.Connection) -> int:
    if not _has_table(conn, schema.DEAD_LETTER_TABLE):
        return 0
    count: int = conn.execute(schema.COUNT_DEAD_LETTERS).fetchone()[0]
    return count


def store_dead_letters(
    conn: sqlite3.Connection, letters: Sequence[DeadLetter], *, max_bytes: int
) -> int:
    """Store the letters (replacing any with the same record id), then delete the oldest
    beyond `max_bytes` of records (the newest one always stays); the number deleted."""
    rows = [(d.record_id, d.status, d.response, d.record, d.dead_lettered_at) for d in letters]
    with conn:
        conn.executemany(schema.WRITE_DEAD_LETTER, rows)
        return conn.execute(schema.PRUNE_DEAD_LETTERS, (max_bytes,)).rowcount


@dataclass(frozen=True, slots=True)
class DeadLetter:
    record_id: str
    status: int | None
    response: str
    record: bytes
    dead_lettered_at: float


def read_dead_letters(conn: sqlite3.Connection, limit: int | None = None) -> list[DeadLetter]:
    if not _has_table(conn, schema.DEAD_LETTER_TABLE):
        return []
    rows = conn.execute(schema.SELECT_DEAD_LETTERS, (-1 if limit is None else limit,))
    return [DeadLetter(r[0], r[1], r[2] or "", bytes(r[3]), r[4]) for r in rows]


def stream_stats(conn: sqlite3.Connection) -> StreamStats:
    """Stats read from a file (the inspection CLI); the running outbox uses its index."""
    meta = read_meta(conn)
    infos = (ChunkInfo.of(stored.chunk) for stored in scan_chunks(conn) if stored.chunk)
    return summarise(
        infos,
        dead_letters=count_dead_letters(conn),
        dropped=dropped_total(meta),
        resync_needed=meta.get("resync_needed") == "1",
    )


def dropped_total(meta: dict[str, str]) -> int:
    return int(meta.get("dropped_upserts", 0)) + int(meta.get("dropped_events", 0))


def open_readonly(path: Path) -> sqlite3.Connection:
    """A connection that can never write, so inspection is safe beside a running agent."""
    try:
        conn = open_readonly_file(path)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error as exc:
        raise QueueFileError(f"cannot read queue file {path}: {exc}") from exc
    try:
        check_schema(conn, path)
    except QueueFileError:
        conn.close()
        raise
    return conn


def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Raise QueueFileError, in one line, when the file or the installed persist-queue is not
    what `shipper.queueschema` expects (the outbox would otherwise read the wrong rows)."""
    problem = _foreign(conn)
    if problem is not None:
        raise QueueFileError(f"{QUEUE_FILE.name} {path} {problem}")


@dataclass(frozen=True, slots=True)
class Salvage:
    """What a quarantined file still shows of the records it held (none was delivered:
    acked chunks are deleted at once)."""

    records: int
    events: int
    """Event records that nothing puts again (`REBUILT_DISCOVERY_EVENTS`)."""
    complete: bool
    """False when the file could not be read to its end: the counts are a floor."""


class _Kind(msgspec.Struct, gc=False):
    kind: str = ""


_read_kind = msgspec.json.Decoder(_Kind).decode


def salvage_count(path: Path, *, stream: str) -> Salvage:
    """Count the records and events still readable, chunk by chunk, in a file moved aside
    (a file that is not SQLite's is not opened: nothing of it can be read).

    A file cut short is first given back its length as zeros (sparse: it takes no space,
    and the bytes it had stay as they were), else SQLite reads nothing of it at all."""
    whole = _restore_length(path)
    if whole is None:
        return Salvage(0, 0, complete=False)
    records = events = 0
    complete = whole
    try:
        with closing(open_readonly_file(path)) as conn:
            pqids: list[int] = []
            try:
                pqids.extend(pqid for (pqid,) in conn.execute(schema.SELECT_QUEUED_IDS))
            except sqlite3.Error:
                complete = False  # the ids read before the damage are still counted
            for pqid in pqids:
                try:
                    chunk = read_chunk(conn, pqid)
                except (sqlite3.Error, msgspec.DecodeError, TypeError):
                    complete = False
                    continue
                for entry in chunk.entries:
                    records += 1
                    if entry.cls == RecordClass.EVENT and not _rebuilt(stream, entry.body):
                        events += 1
    except sqlite3.Error:
        complete = False
    return Salvage(records, events, complete=complete)


def _restore_length(path: Path) -> bool | None:
    """Extend a file shorter than its header says to that length. None when it is not an
    SQLite file (or cannot be read), else whether it was whole."""
    try:
        with path.open("rb") as handle:
            header = handle.read(_HEADER_BYTES)
        if len(header) < _HEADER_BYTES or not header.startswith(sqlite_file.SQLITE_HEADER):
            return None
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size  # 1 stands for 65536
        length = page_size * int.from_bytes(header[28:32], "big")
        if path.stat().st_size >= length:
            return True
        os.truncate(path, length)
    except OSError:
        return None
    return False


def open_readonly_file(path: Path) -> sqlite3.Connection:
    """A read-only connection to `path`, which must exist (SQLite would not create it)."""
    return sqlite3.connect(
        f"file:{quote(str(path))}?mode=ro", uri=True, timeout=sqlite_file.BUSY_TIMEOUT_SECONDS
    )


def _rebuilt(stream: str, body: bytes) -> bool:
    if stream == SCALING:
        return True
    try:
        return _read_kind(body).kind in REBUILT_DISCOVERY_EVENTS
    except msgspec.DecodeError:
        return False


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return name in schema.tables(conn)
