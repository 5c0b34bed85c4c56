"""The durable outbox: every record and scaling event is committed here before it is sent.

One `StreamOutbox` per destination (`discovery`, `scaling`), each its own SQLite file
through persist-queue's `SQLiteAckQueue`, so an outage of one API never delays the other.
A queue item is a chunk of records (persist-queue commits each put, get and ack at
`synchronous=FULL`; per-record items are ~15x slower end to end). Producers only `put`;
the stream's shipper `take`s whole chunks, then `ack`s them once every record is delivered
or dead-lettered. A take only reads: claiming a row through persist-queue's `get` rewrites
the whole row (hundreds of KB) just to flip its status, and with one consumer per stream
(the directory lock sees to that) the claim buys nothing. So a chunk taken but never acked
(a crash) is simply still queued on the next open, and goes out again.

Bounds (records and bytes, the byte bound below the volume's size limit): past them the
oldest queued upserts are dropped and a durable `resync_needed` mark asks the collector to
re-send full state. Deletes are never dropped; discovery events only past the byte bound
(and counted); scaling events never (the scheduler reads `at_bound` and applies nothing
new). Only chunks not taken by the shipper are trimmed.

Failure modes: `QueueDirectoryBusy` (another process owns the directory) and
`QueueFileError` (locked, unreadable, disk errors, or a persist-queue whose table is not the
one `shipper.queueschema` describes) stop start-up; a corrupt file is quarantined (by
`runtime.sqlite_file`) and the stream starts empty with `resync_needed` set, what the file
still shows of its records counted as lost (`records_lost`, `events_lost`: the events no
resync sends again) in its log line and metrics (`shipper.queuefile.salvage_count`). A file
found empty (zero length) is moved aside too, and said so in a log line. Each file has an
`epoch`, made when it is created: a producer that keeps state about what it put (the
collector) tells from it that the file it put into is gone, deleted, emptied or
quarantined, and asks for full state again (`request_resync`).
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import persistqueue
import structlog

from runtime import sqlite_file
from runtime.health import Health, HealthReporter
from runtime.sqlite_file import Found
from shipper import queuefile, queueschema
from shipper.lock import DirectoryLock
from shipper.queuefile import Chunk, ChunkInfo, DeadLetter, QueueFileError, StreamStats
from shipper.records import DISCOVERY, STREAMS, Entry, Outgoing, RecordClass, as_entry
from shipper.reserve import DiskReserve

log = structlog.get_logger("shipper.outbox")

# Shrinking rewrites the file; only worth it once a drain freed a real amount of space.
SHRINK_AFTER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Bounds:
    """Limits of one stream. Chunks are cut to the batch limits so a chunk always fits a batch."""

    max_records: int = 1_000_000
    max_bytes: int = 400 * 1024 * 1024
    chunk_records: int = 500
    chunk_bytes: int = 1024 * 1024
    # Refused records kept for an operator; the oldest go first so a platform refusing
    # everything cannot fill the volume.
    dead_letter_bytes: int = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Batch:
    """Whole chunks taken together; `batch_id` is stable for the same chunks of the same file."""

    batch_id: str
    pqids: tuple[int, ...]
    entries: tuple[Entry, ...]

    @property
    def bodies(self) -> list[bytes]:
        return [entry.body for entry in self.entries]


class _RecordId(msgspec.Struct, gc=False):
    id: str = ""


_read_record_id = msgspec.json.Decoder(_RecordId).decode


class StreamOutbox:
    """One stream's queue file. Thread-safe: producers and the shipper share it."""

    def __init__(
        self,
        directory: Path,
        stream: str,
        *,
        bounds: Bounds,
        reporter: HealthReporter | None = None,
        reserve: DiskReserve | None = None,
    ) -> None:
        self.stream = stream
        self.bounds = bounds
        self._reserve = reserve
        self.reporter = reporter or HealthReporter(f"outbox.{stream}")
        self.path = queuefile.stream_path(directory, stream)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._ready: OrderedDict[int, ChunkInfo] = OrderedDict()
        self._taken: dict[int, ChunkInfo] = {}
        self._records = 0
        self._bytes = 0
        self._freed_since_shrink = 0
        self._wakeups = 0

        checked = sqlite_file.check(self.path, queuefile.QUEUE_FILE)
        if checked.found is Found.EMPTY:
            log.warning("queue_file_empty", stream=stream, moved_to=str(checked.moved_to))
            self.reporter.count("found_empty")
        # The outbox's own connection first: it makes a new file with the agent's page size
        # (`sqlite_file.PAGE_SIZE`), which persist-queue, opening it after, keeps.
        self._db = sqlite_file.connect(self.path, queuefile.QUEUE_FILE)
        try:
            self._queue = persistqueue.SQLiteAckQueue(
                str(directory),
                auto_resume=True,
                name=queueschema.QUEUE_NAME,
                multithreading=True,
                timeout=sqlite_file.BUSY_TIMEOUT_SECONDS,
                serializer=queuefile.ChunkSerializer,
                db_file_name=self.path.name,
            )
            queuefile.check_schema(self._db, self.path)  # what persist-queue made of the file
            queuefile.create_own_tables(self._db)
            self._meta = queuefile.read_meta(self._db)
            if "epoch" not in self._meta:
                self._write_meta(epoch=uuid.uuid4().hex[:12])
            if checked.found is Found.DAMAGED and checked.moved_to is not None:
                self._quarantined(checked.moved_to)
            self._load_index()
        except BaseException as exc:
            self._db.close()
            if isinstance(exc, sqlite3.Error):
                raise sqlite_file.unusable(queuefile.QUEUE_FILE, self.path, exc) from exc
            raise

    def _quarantined(self, moved_to: Path) -> None:
        lost = queuefile.salvage_count(moved_to, stream=self.stream)
        log.error(
            "queue_file_quarantined",
            stream=self.stream,
            moved_to=str(moved_to),
            records_lost=lost.records,
            events_lost=lost.events,
            counted_to_the_end=lost.complete,
        )
        self.reporter.count("quarantined")
        self.reporter.count("records_lost", lost.records)
        self.reporter.count("events_lost", lost.events)
        self._write_meta(resync_needed="1")

    # -- producers ---------------------------------------------------------------------

    def put(self, records: Iterable[Outgoing]) -> None:
        """Commit records durably (in order); when this returns they survive a SIGKILL."""
        self.put_entries([as_entry(record) for record in records])

    def put_entries(self, entries: Sequence[Entry]) -> None:
        """`put`, of records already encoded."""
        if not entries:
            return
        with self._lock:
            for chunk in self._cut_chunks(entries):
                pqid = self._queue.put(chunk)
                if pqid is None:  # the row id keys the index; persist-queue types it optional
                    raise QueueFileError(f"persist-queue gave no row id for a put to {self.path}")
                info = ChunkInfo.of(chunk)
                self._ready[pqid] = info
                self._records += info.records
                self._bytes += info.bytes
            self.reporter.count("records_enqueued", len(entries))
            self._enforce_bounds()
            self._report_fill()
            self._changed.notify_all()

    @property
    def at_bound(self) -> bool:
        """True while the stream holds as much as its bounds allow (the scheduler then waits)."""
        with self._lock:
            return self._records >= self.bounds.max_records or self._bytes >= self.bounds.max_bytes

    @property
    def fill(self) -> float:
        """How full the stream is against its bounds (0 empty, 1 at the bound)."""
        with self._lock:
            return max(self._records / self.bounds.max_records, self._bytes / self.bounds.max_bytes)

    def _report_fill(self) -> None:
        if self.at_bound:
            self.reporter.set(Health.degraded(f"the {self.stream} queue is at its bound"))
        else:
            self.reporter.set(Health.healthy())

    @property
    def epoch(self) -> str:
        """The file's identity: a file created anew (first start, emptied, deleted or
        quarantined) has a new one, so a producer can tell its puts went into another file."""
        with self._lock:
            return self._meta["epoch"]

    @property
    def resync_needed(self) -> bool:
        with self._lock:
            return self._meta.get("resync_needed") == "1"

    def request_resync(self) -> None:
        """Ask the producer for full state again; durable until `clear_resync_needed`."""
        with self._lock:
            self._write_meta(resync_needed="1")

    def clear_resync_needed(self) -> None:
        """Called by the collector once it has re-sent full state with snapshots."""
        with self._lock:
            self._write_meta(resync_needed="0")

    # -- the shipper -------------------------------------------------------------------

    def wait_for_records(self, min_records: int, timeout: float) -> int:
        """Block until `min_records` are ready or `timeout` passes; return how many are ready."""
        deadline = time.monotonic() + timeout
        with self._lock:
            woken = self._wakeups
            while True:
                ready = sum(info.records for info in self._ready.values())
                remaining = deadline - time.monotonic()
                if ready >= min_records or remaining <= 0 or self._wakeups != woken:
                    return ready
                self._changed.wait(remaining)

    def wake(self) -> None:
        """End every `wait_for_records` now (a stopping shipper should not sit out a linger)."""
        with self._lock:
            self._wakeups += 1
            self._changed.notify_all()

    def take(self, *, max_records: int, max_bytes: int) -> Batch | None:
        """Take whole chunks, oldest first, within the limits (always at least one chunk)."""
        with self._lock:
            pqids: list[int] = []
            entries: list[Entry] = []
            size = 0
            for pqid, info in list(self._ready.items()):
                over = len(entries) + info.records > max_records or size + info.bytes > max_bytes
                if pqids and over:
                    break
                chunk = queuefile.read_chunk(self._db, pqid)
                self._taken[pqid] = self._ready.pop(pqid)
                pqids.append(pqid)
                entries.extend(chunk.entries)
                size += info.bytes
            if not pqids:
                return None
            batch_id = f"{self._meta['epoch']}-{pqids[0]}-{pqids[-1]}"
            return Batch(batch_id=batch_id, pqids=tuple(pqids), entries=tuple(entries))

    def ack(self, batch: Batch) -> None:
        """Every record of the batch was delivered or dead-lettered: remove its chunks."""
        with self._lock:
            self._delete_rows(batch.pqids)
            for pqid in batch.pqids:
                info = self._taken.pop(pqid, None)
                if info is not None:
                    self._records -= info.records
                    self._bytes -= info.bytes
                    self._freed_since_shrink += info.bytes
            self._shrink_if_drained()
            self._report_fill()
            self._changed.notify_all()

    def dead_letter(self, entries: Sequence[Entry], *, status: int | None, response: str) -> None:
        """Keep records the platform will never accept, with its answer, for an operator."""
        now = time.time()
        letters = [
            DeadLetter(_record_id(entry.body), status, response, entry.body, now)
            for entry in entries
        ]
        with self._lock:
            self._store_dead_letters(letters)
        self.reporter.count("records_dead_lettered", len(letters))

    # -- inspection --------------------------------------------------------------------

    def stats(self) -> StreamStats:
        with self._lock:
            return queuefile.summarise(
                [*self._taken.values(), *self._ready.values()],
                dead_letters=queuefile.count_dead_letters(self._db),
                dropped=queuefile.dropped_total(self._meta),
                resync_needed=self._meta.get("resync_needed") == "1",
            )

    def close(self) -> None:
        with self._lock:
            self._queue.close()
            self._db.close()

    # -- internals ---------------------------------------------------------------------

    def _cut_chunks(self, entries: Sequence[Entry]) -> Iterable[Chunk]:
        now = time.time()
        current: list[Entry] = []
        size = 0
        for entry in entries:
            full = len(current) >= self.bounds.chunk_records
            if current and (full or size + len(entry.body) > self.bounds.chunk_bytes):
                yield Chunk(now, current)
                current, size = [], 0
            current.append(entry)
            size += len(entry.body)
        if current:
            yield Chunk(now, current)

    def _load_index(self) -> None:
        for stored in queuefile.scan_chunks(self._db):
            if stored.chunk is None:
                # SQLite is fine but the row is not one of ours: keep the bytes for an operator.
                letter = DeadLetter(
                    f"undecodable-{stored.pqid}", None, "undecodable", stored.raw, time.time()
                )
                self._store_dead_letters([letter])
                self._delete_rows([stored.pqid])
                log.error("queue_item_undecodable", stream=self.stream, pqid=stored.pqid)
                continue
            info = ChunkInfo.of(stored.chunk)
            self._ready[stored.pqid] = info
            self._records += info.records
            self._bytes += info.bytes

    def _over_bounds(self) -> bool:
        return self._records > self.bounds.max_records or self._bytes > self.bounds.max_bytes

    def _enforce_bounds(self) -> None:
        if self.stream != DISCOVERY or not self._over_bounds():
            return  # scaling events are never dropped
        if any(info.upserts for info in self._ready.values()):
            # The mark goes first: a crash after it and before the drop costs a resync, not
            # data. Without upserts to drop nothing is lost that a resync would bring back.
            if self._meta.get("resync_needed") != "1":
                self._write_meta(resync_needed="1")
                log.warning("outbox_bound_reached", stream=self.stream, records=self._records)
            dropped = self._drop_oldest(RecordClass.UPSERT, self._over_bounds)
            self._add_to_meta_counter("dropped_upserts", dropped)
            self.reporter.count("records_dropped_upserts", dropped)
        # Past the byte bound with no upserts left: the oldest discovery events go, counted.
        dropped = self._drop_oldest(RecordClass.EVENT, lambda: self._bytes > self.bounds.max_bytes)
        if dropped:
            log.warning("outbox_events_dropped", stream=self.stream, count=dropped)
        self._add_to_meta_counter("dropped_events", dropped)
        self.reporter.count("records_dropped_events", dropped)

    def _drop_oldest(self, cls: RecordClass, still_over: Callable[[], bool]) -> int:
        dropped = 0
        for pqid in list(self._ready):
            if not still_over():
                break
            info = self._ready[pqid]
            if (info.upserts if cls is RecordClass.UPSERT else info.events) == 0:
                continue
            chunk = queuefile.read_chunk(self._db, pqid)
            kept: list[Entry] = []
            for entry in chunk.entries:
                if entry.cls == cls and still_over():
                    self._records -= 1
                    self._bytes -= len(entry.body)
                    dropped += 1
                else:
                    kept.append(entry)
            if kept:
                trimmed = Chunk(chunk.enqueued_at, kept)
                self._queue.update(trimmed, id=pqid)
                self._ready[pqid] = ChunkInfo.of(trimmed)
            else:
                self._delete_rows([pqid])
                del self._ready[pqid]
        return dropped

    def _delete_rows(self, pqids: Sequence[int]) -> None:
        """The ack: delete the rows in one transaction.

        persist-queue's `ack` + `clear_acked_data(keep_latest=0)` reaches the same end state
        in two transactions, and its status flip grows the record by a byte, which makes
        SQLite rewrite the whole chunk (hundreds of KB) only to delete it right after.
        """
        try:
            queuefile.delete_chunks(self._db, pqids)
        except sqlite3.OperationalError as exc:
            # A full volume: the reserve's space lets this delete (and the next ones) go.
            full = exc.sqlite_errorcode == sqlite3.SQLITE_FULL
            if not (full and self._reserve is not None and self._reserve.release()):
                raise
            log.warning("disk_reserve_released", stream=self.stream, error=str(exc))
            queuefile.delete_chunks(self._db, pqids)

    def _shrink_if_drained(self) -> None:
        if self._ready or self._taken or self._freed_since_shrink < SHRINK_AFTER_BYTES:
            return
        try:
            self._queue.shrink_disk_usage()
            # VACUUM went through the WAL; truncating it is what gives the space back.
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError as exc:
            # VACUUM needs room for a copy; the freed pages are reused meanwhile, and the
            # next drain tries again. The ack itself went through.
            log.warning("queue_shrink_failed", stream=self.stream, error=str(exc))
            return
        self._freed_since_shrink = 0
        if self._reserve is not None:
            self._reserve.ensure()

    def _store_dead_letters(self, letters: list[DeadLetter]) -> None:
        pruned = queuefile.store_dead_letters(
            self._db, letters, max_bytes=self.bounds.dead_letter_bytes
        )
        if pruned:
            log.warning(
                "dead_letters_pruned",
                stream=self.stream,
                removed=pruned,
                kept_bytes=self.bounds.dead_letter_bytes,
            )

    def _write_meta(self, **values: str) -> None:
        queuefile.write_meta(self._db, values)
        self._meta.update(values)

    def _add_to_meta_counter(self, key: str, amount: int) -> None:
        if amount:
            self._write_meta(**{key: str(int(self._meta.get(key, "0")) + amount)})


def _record_id(body: bytes) -> str:
    try:
        return _read_record_id(body).id or "unknown"
    except msgspec.DecodeError:
        return "unknown"


class Outbox:
    """A queue directory: its lock and one `StreamOutbox` per stream."""

    def __init__(
        self,
        directory: str | Path,
        *,
        streams: Sequence[str] = STREAMS,
        bounds: Bounds | None = None,
    ) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise QueueFileError(f"cannot create queue directory {self.directory}: {exc}") from exc
        self._lock = DirectoryLock(self.directory)
        self._lock.acquire()
        self.reserve = DiskReserve(self.directory)
        self.reserve.ensure()
        self.streams: dict[str, StreamOutbox] = {}
        try:
            for name in streams:
                self.streams[name] = StreamOutbox(
                    self.directory, name, bounds=bounds or Bounds(), reserve=self.reserve
                )
        except BaseException:
            self.close()
            raise

    def __getitem__(self, stream: str) -> StreamOutbox:
        return self.streams[stream]

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()
        self._lock.release()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
