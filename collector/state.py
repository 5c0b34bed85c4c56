"""The collector's per-object memory, kept in SQLite rather than on the Python heap.

A large cluster has tens of thousands of objects, and the collector must remember a little
about each: which records an object produced (to delete them when it vanishes), the data of
records that are rebuilt when a related object changes (Deployments and their revisions),
the fingerprint of the last record enqueued per (kind, key) (coalescing), the error state
of every pod, the Warning Event series already reported (`EventSeries`), and the two
relation indexes that grow with the cluster (Deployments' pod template labels, ReplicaSets'
Deployment and revision: `collector.relations`). As Python objects that is hundreds of
bytes per object, and the churn of decoding list pages between those long-lived objects
fragments the heap on top of it. In SQLite it is a few dozen bytes per row on disk and a
bounded page cache in memory.

One row per record, (kind, key), remembers both what was produced and what was sent
(`ProducedRecords` and `SentFingerprints` are its two views, for the sinks and for the
coalescer). Its life:

- produced (a sink emitted it, `ProducedRecords.add`): the row names its source object
  (`source`, `source_key`) and, for rebuildable kinds, keeps the record's data; its
  fingerprint is NULL until the coalescer enqueues it, and stays as it was when the record
  is produced again;
- enqueued (`SentFingerprints.set_many`, after the outbox's put): the fingerprint is set; a
  record no object produced (the cluster's metadata) is a row with a fingerprint only;
- its object gone (`ProducedRecords.pop`): the row no longer names a source nor keeps data;
  the sink offers the record's delete, and once the coalescer has enqueued it
  (`discard_many`), the row goes. Till then its fingerprint stays, so an object that comes
  back within the flush window is compared with what was sent, as before it went. (Should
  some object produce the record again meanwhile, the enqueued delete only clears the
  fingerprint: the record is to be sent again.)
- forgotten for a resync (`SentFingerprints.clear`): every fingerprint, or one kind's, is
  cleared, and rows left naming no source go.

A record has one producer: should a second object produce the same (kind, key) (only Helm
release Secrets named unlike Helm names them could, `...v01` beside `...v1`), the latest
one owns the row, and the record is deleted when that one goes.

The rows are a few hundred bytes to KiBs (the kept data), so the table is an ordinary rowid
table with a unique index on (kind, key), as are the held objects': SQLite keeps large rows
out of a WITHOUT ROWID table's b-tree badly (about twice the cost per write).

One connection, guarded by one lock: the collector's processor writes (sinks, and the
coalescer's fingerprints), other threads only read. Writes accumulate in one transaction that
the coalescer commits right after each put to the outbox, so there is no commit per object
and the store never gets ahead of the outbox.

With a path the store outlives the process (it sits beside the outbox, on the same volume):
a restart compares the cluster with what it remembers and sends only what changed, plus
deletes for what vanished. The file is opened and checked by `runtime.sqlite_file` as
`STATE_FILE`: one that is not a database, fails SQLite's integrity check or is empty is
moved aside like a corrupt queue file (everything is then sent once); one written by a
store of schema version 2 (a table of what was produced and one of what was sent) is
migrated in place, in one transaction, so an upgrade sends nothing again; one written by any
other schema version is emptied in place. Its durability is NORMAL: a process crash
loses nothing committed, and a lost tail after a power cut only means records sent again,
since the store is committed after the outbox. Without a path the store lives in memory
(`moonin-agent preview`, tests).

A full or failing disk (`runtime.storage_errors`) may make SQLite roll back the open
transaction, all of it or only the failing statement: which writes survived cannot be told.
The store then rolls back the rest itself, so what it holds is again exactly what was last
committed (with the outbox), says so (`rolled_back`), and raises the error for the writer
to hold its place. What the informers wrote since that commit is gone, so the collector
sends everything again once a write goes through (`probe_writable`, `collector.resync`).
"""

from __future__ import annotations

import builtins
import contextlib
import sqlite3
import threading
import time
from collections.abc import Container, Iterable
from pathlib import Path

import msgspec

from runtime import sqlite_file
from runtime.sqlite_file import Durability, FileKind, Foreign
from runtime.storage_errors import is_passing_storage_error

CACHE_KIB = 4096  # SQLite's page cache: the only part of the state held in memory
DEFERRED_ROWS = 64  # deferred writes held in memory at most (a held object is a few KiB)
SCHEMA_VERSION = 3
_MIGRATED_VERSION = 2  # the one older schema `_FROM_2` carries over

_FORGETTABLE = ("records", "pods", "event_series")
# Rebuilt from the lists of every leadership term (`collector.relations`), never carried over.
RELATION_TABLES = ("deployment_templates", "replicasets")
# Objects whose records wait for what they mention (`HeldObjects`): one leadership term's.
_HELD = "held"
# The tables schema 3 shares with schema 2 (those added during schema 2 included).
_SHARED = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pods (
    key TEXT PRIMARY KEY, replicaset TEXT, failing INTEGER NOT NULL, memo BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS pods_by_replicaset ON pods (replicaset) WHERE replicaset IS NOT NULL;
CREATE TABLE IF NOT EXISTS deployment_templates (
    namespace TEXT NOT NULL, name TEXT NOT NULL, labels BLOB NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS replicasets (
    namespace TEXT NOT NULL, name TEXT NOT NULL, deployment TEXT NOT NULL,
    revision INTEGER, created TEXT,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS replicasets_by_deployment ON replicasets (namespace, deployment);
-- `collector.relations.CURRENT_REVISION` without a sort: with only the index by Deployment,
-- SQLite chose the primary key and read every ReplicaSet of the namespace per question.
CREATE INDEX IF NOT EXISTS replicasets_by_revision
    ON replicasets (namespace, deployment, COALESCE(revision, 0), name);
CREATE TABLE IF NOT EXISTS event_series (
    key TEXT PRIMARY KEY, incident TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS event_series_by_incident ON event_series (incident);
"""
# New in schema 3: rowid tables, their rows being large (see the module docstring).
_NEW_IN_3 = f"""
CREATE TABLE records (
    kind TEXT NOT NULL, key TEXT NOT NULL, source TEXT, source_key TEXT, fingerprint BLOB,
    kept BLOB,  -- last: reading the columns before it never reads its overflow pages
    UNIQUE (kind, key)
);
CREATE INDEX records_by_source ON records (source, source_key);
CREATE TABLE {_HELD} (
    source TEXT NOT NULL, source_key TEXT NOT NULL, object BLOB NOT NULL,
    UNIQUE (source, source_key)
);
"""
_SCHEMA = _SHARED + _NEW_IN_3
# Schema 2 -> 3: its tables of what was produced and of what was sent become the one table of
# records (a (kind, key) two objects produced goes to the later row, as `add` would); what
# was held is dropped (it is emptied at every start anyway).
_FROM_2 = f"""
DROP TABLE IF EXISTS {_HELD};
{_SHARED}
{_NEW_IN_3}
INSERT OR REPLACE INTO records (kind, key, source, source_key, kept)
    SELECT kind, key, source, source_key, kept FROM produced;
INSERT INTO records (kind, key, fingerprint) SELECT kind, key, fingerprint FROM sent WHERE true
    ON CONFLICT (kind, key) DO UPDATE SET fingerprint = excluded.fingerprint;
DROP TABLE produced;
DROP TABLE sent;
"""

Slot = tuple[str, str]  # (record kind, record key)


def _other_version(db: sqlite3.Connection) -> str | None:
    (version,) = db.execute("PRAGMA user_version").fetchone()
    tables = sqlite_file.tables(db)
    if version == SCHEMA_VERSION or not tables:
        return None
    if version == _MIGRATED_VERSION and {"produced", "sent"} <= set(tables):
        return None  # migrated when opened (`_FROM_2`)
    return f"is of schema version {version}, not {SCHEMA_VERSION}"


STATE_FILE = FileKind(
    name="state file",
    durability=Durability.NORMAL,
    foreign=_other_version,
    on_foreign=Foreign.EMPTY,
)


class StateStore:
    def __init__(self, path: Path | None = None) -> None:
        self.lock = threading.RLock()
        self._rolled_back = False
        self.rollbacks = 0
        """How many times writes were rolled back: what remembers rows compares it."""
        self._guarded = _Guarded(self)
        # Table -> its deferred writes, in order: (statement, rows) runs (see `defer`).
        self._deferred: dict[str, list[tuple[str, list[tuple[object, ...]]]]] = {}
        self._deferred_rows = 0
        if path is None:
            self._db = sqlite3.connect(":memory:", check_same_thread=False)
            self.quarantined: Path | None = None
        else:
            # Where a broken file was moved (the caller logs it); raises UnusableFile when
            # the file only could not be opened (locked, permissions): that is not damage.
            self._db, checked = sqlite_file.open_file(path, STATE_FILE)
            self.quarantined = checked.moved_to
        self._db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        if version != SCHEMA_VERSION:
            # A new file, one emptied by `_other_version`, or one of schema 2, in one
            # transaction: a migration that fails midway (a full disk) leaves the file as it
            # was, and start-up stops (the next start tries again).
            script = _FROM_2 if version == _MIGRATED_VERSION else _SCHEMA
            try:
                self._db.executescript(
                    f"BEGIN; {script} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                )
            except sqlite3.Error:
                self._db.close()  # which rolls the transaction back
                raise
        self.produced = ProducedRecords(self)
        self.sent = SentFingerprints(self)
        self.pods = PodMemos(self)
        self.events = EventSeries(self)
        self.held = HeldObjects(self)

    def forget_all(self) -> None:
        """Start over: nothing is known to have been sent, no object or pod is remembered.
        The marks stay: they say whose store this is (the trust rule), not what was sent."""
        with self._guarded:
            self.pods.reset()
            self._write_deferred(list(self._deferred))
            for table in _FORGETTABLE:
                self._db.execute(f"DELETE FROM {table}")
            self._db.commit()

    def get_mark(self, name: str) -> str | None:
        found = self.rows("SELECT value FROM meta WHERE name = ?", (name,))
        return str(found[0][0]) if found else None

    def set_mark(self, name: str, value: str) -> None:
        with self._guarded:
            self._write_deferred(list(self._deferred))
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, value))
            self._db.commit()

    @property
    def rolled_back(self) -> bool:
        """Whether a full or failing disk rolled back writes since the last commit, and no
        write went through since (see the module docstring)."""
        with self.lock:
            return self._rolled_back

    def probe_writable(self) -> bool:
        """Whether the disk takes writes again: one small write, committed alone (what was
        written since the rollback is rolled back too: the resync that follows writes it
        again, and the store stays behind the outbox). Clears `rolled_back` when it goes
        through; raises only what is not a full or failing disk."""
        with self.lock:
            try:
                with self._guarded:
                    self._db.rollback()
                    self.pods.reset()
                    self._forget_deferred()
                self.set_mark("writable_at", f"{time.time():.3f}")
            except sqlite3.Error as exc:
                if is_passing_storage_error(exc):
                    return False
                raise
            self._rolled_back = False
        return True

    def execute(self, sql: str, parameters: Iterable[object] = ()) -> sqlite3.Cursor:
        with self._guarded:
            self._write_deferred_for(sql)
            return self._db.execute(sql, tuple(parameters))

    def execute_many(self, sql: str, rows: Iterable[tuple[object, ...]]) -> None:
        """One statement for many rows (prepared once, run in C for each)."""
        with self._guarded:
            self._write_deferred_for(sql)
            self._db.executemany(sql, rows)

    def rows(self, sql: str, parameters: Iterable[object] = ()) -> list[tuple[object, ...]]:
        with self._guarded:
            self._write_deferred_for(sql)
            return self._db.execute(sql, tuple(parameters)).fetchall()

    def missing(self, sql: str, parameters: Iterable[object], present: Container[str]) -> set[str]:
        """The keys the one-column query yields that are not in `present`."""
        with self._guarded:
            self._write_deferred_for(sql)
            return {
                key for (key,) in self._db.execute(sql, tuple(parameters)) if key not in present
            }

    def defer(self, table: str, sql: str, row: tuple[object, ...]) -> None:
        """A write to `table` run later, in one `executemany` with the rows deferred after
        it: before the next statement that names the table (so every read and write sees it,
        in order), once `DEFERRED_ROWS` wait, and at the latest with the commit. A warm-up
        holds and produces tens of thousands of rows in a row, one statement each before."""
        with self.lock:  # no statement runs here, but every `DEFERRED_ROWS`th (`_guarded`)
            runs = self._deferred.setdefault(table, [])
            if runs and runs[-1][0] == sql:
                runs[-1][1].append(row)
            else:
                runs.append((sql, [row]))
            self._deferred_rows += 1
            if self._deferred_rows >= DEFERRED_ROWS:
                with self._guarded:
                    self._write_deferred(list(self._deferred))

    def _write_deferred_for(self, sql: str) -> None:
        """(Lock held.) The deferred writes to the tables the statement names."""
        if self._deferred:
            self._write_deferred([table for table in self._deferred if table in sql])

    def _write_deferred(self, tables: list[str]) -> None:
        """(Lock held.)"""
        for table in tables:
            runs = self._deferred.pop(table, [])
            for sql, rows in runs:
                self._deferred_rows -= len(rows)
                self._db.executemany(sql, rows)

    def _forget_deferred(self) -> None:
        """(Lock held.) Rolled back: what was deferred goes with what was written."""
        self._deferred = {}
        self._deferred_rows = 0

    def commit(self) -> None:
        with self._guarded:
            self._write_deferred(list(self._deferred))
            self.pods.write_pending()
            self._db.commit()

    def _roll_back_after(self, exc: BaseException) -> None:
        """(Lock held.) On a full or failing disk, roll back to the last commit (SQLite may
        have kept part of the transaction) and say so; the error goes on to the writer."""
        if isinstance(exc, sqlite3.Error) and is_passing_storage_error(exc):
            with contextlib.suppress(sqlite3.Error):  # nothing left to undo, or the disk
                self._db.rollback()
            self.pods.reset()
            self._forget_deferred()
            self._rolled_back = True
            self.rollbacks += 1

    def close(self) -> None:
        with self.lock:
            self._db.close()


class _Guarded:
    """`with store._guarded:` holds the store's lock around one use of the connection and
    rolls back after a full or failing disk (`StateStore._roll_back_after`). A class rather
    than a generator: it wraps every statement, tens of thousands in a warm-up."""

    __slots__ = ("_store",)

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        self._store.lock.acquire()

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        try:
            if exc is not None:
                self._store._roll_back_after(exc)
        finally:
            self._store.lock.release()


class ProducedRecords:
    """The records' rows as their source objects see them (`source` = resource plural,
    `source_key` = namespace/name): which records an object produced, and for rebuildable
    kinds the encoded data of its record."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def add(self, source: str, source_key: str, slot: Slot, kept: bytes | None) -> None:
        """The object produced the record (its fingerprint, if any, stays)."""
        self._store.defer(
            "records",
            "INSERT INTO records (kind, key, source, source_key, kept) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (kind, key) DO UPDATE SET"
            " source = excluded.source, source_key = excluded.source_key, kept = excluded.kept",
            (*slot, source, source_key, kept),
        )

    def kept(self, source: str, source_key: str) -> list[tuple[str, str, bytes]]:
        """(kind, key, kept data) of the object's rebuildable records."""
        return self._store.rows(  # type: ignore[return-value]
            "SELECT kind, key, kept FROM records"
            " WHERE source = ? AND source_key = ? AND kept IS NOT NULL",
            (source, source_key),
        )

    def pop(self, source: str, source_key: str) -> list[Slot]:
        """Forget the object; the records it had produced, sorted. Their rows go when
        their deletes are enqueued (`SentFingerprints.discard_many`)."""
        slots = self._store.rows(
            "UPDATE records SET source = NULL, source_key = NULL, kept = NULL"
            " WHERE source = ? AND source_key = ? RETURNING kind, key",
            (source, source_key),
        )
        return sorted((str(kind), str(key)) for kind, key in slots)

    def keys_of_kind(self, kind: str) -> list[str]:
        """Every record key of one kind that some object produced, sorted (a snapshot)."""
        return [
            str(key)
            for (key,) in self._store.rows(
                "SELECT key FROM records WHERE kind = ? AND source IS NOT NULL ORDER BY key",
                (kind,),
            )
        ]

    def missing(self, source: str, present: Container[str]) -> set[str]:
        """The source's objects remembered here but not in `present` (streamed: a relist of
        50,000 pods compares without a second copy of the key set)."""
        return self._store.missing(
            "SELECT DISTINCT source_key FROM records WHERE source = ?", (source,), present
        )


class SentFingerprints:
    """The records' rows as the coalescer sees them: (kind, key) -> fingerprint of the last
    record it enqueued."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def get(self, slot: Slot) -> bytes | None:
        found = self._store.rows("SELECT fingerprint FROM records WHERE kind = ? AND key = ?", slot)
        return found[0][0] if found else None  # type: ignore[return-value]

    def get_many(self, slots: Iterable[Slot]) -> dict[Slot, bytes]:
        """The fingerprints of those slots that have one: one query per kind, not one per
        record (a flush window holds up to a list page of records). The keys go in as one
        JSON array, so the statement text is the same whatever their number and SQLite's
        statement cache holds one prepared statement, not one per count."""
        by_kind: dict[str, list[str]] = {}
        for kind, key in slots:
            by_kind.setdefault(kind, []).append(key)
        found: dict[Slot, bytes] = {}
        for kind, keys in by_kind.items():
            for row_key, mark in self._store.rows(
                "SELECT key, fingerprint FROM records WHERE kind = ?"
                " AND key IN (SELECT value FROM json_each(?)) AND fingerprint IS NOT NULL",
                (kind, msgspec.json.encode(keys).decode()),
            ):
                found[(kind, str(row_key))] = mark  # type: ignore[assignment]
        return found

    def set(self, slot: Slot, fingerprint: bytes) -> None:
        self.set_many([(slot, fingerprint)])

    def set_many(self, marks: Iterable[tuple[Slot, bytes]]) -> None:
        self._store.execute_many(
            "INSERT INTO records (kind, key, fingerprint) VALUES (?, ?, ?)"
            " ON CONFLICT (kind, key) DO UPDATE SET fingerprint = excluded.fingerprint",
            ((kind, key, mark) for (kind, key), mark in marks),
        )

    def discard_many(self, slots: Iterable[Slot]) -> None:
        """The records' deletes were enqueued: their rows go, but for those some object
        produced again since, which only lose their fingerprint."""
        slots = list(slots)
        if not slots:
            return  # a warm-up enqueues no delete: two statements less per flush
        self._store.execute_many(
            "DELETE FROM records WHERE kind = ? AND key = ? AND source IS NULL", slots
        )
        self._store.execute_many(
            "UPDATE records SET fingerprint = NULL WHERE kind = ? AND key = ?", slots
        )

    def clear(self, kind: str | None = None) -> None:
        """Forget every fingerprint, or those of one record kind."""
        which, parameters = ("", ()) if kind is None else (" AND kind = ?", (kind,))
        with self._store.lock:
            self._store.execute(f"DELETE FROM records WHERE source IS NULL{which}", parameters)
            self._store.execute(
                f"UPDATE records SET fingerprint = NULL WHERE fingerprint IS NOT NULL{which}",
                parameters,
            )


class PodMemos:
    """Pod key -> its encoded error memo, with the pod's ReplicaSet and whether it fails
    (so a revision's affected/total pod counts are one indexed query).

    A list brings every pod in key order, each memo asked for and then written: rather than
    two statements per pod, the memos are read ahead (`READ_AHEAD` keys from the one asked,
    once the keys asked have risen three times in a row; a watch's pods come in no order,
    and each is read alone) and written behind (`WRITE_BEHIND` pods in one statement, and
    before any commit or query over the table). What is unwritten answers first; what was
    read ahead is forgotten at each write, so it is never older than the table. Whatever
    undoes the store's writes since its last commit (a rollback, `forget_all`) forgets both
    (`reset`)."""

    READ_AHEAD = 64
    WRITE_BEHIND = 256

    def __init__(self, store: StateStore) -> None:
        self._store = store
        # key -> its row to write, or None for a pod whose memo goes.
        self._unwritten: dict[str, tuple[str, str | None, bool, bytes] | None] = {}
        self._ahead: dict[str, bytes] = {}  # the memos of the keys from `_ahead_from` ...
        self._ahead_from: str | None = None
        self._ahead_to: str | None = None  # ... to this one (None: to the last)
        self._last_asked = ""
        self._rising = 0  # how many keys asked in a row were above the one before

    def get(self, key: str) -> bytes | None:
        with self._store.lock:
            self._rising = self._rising + 1 if key > self._last_asked else 0
            self._last_asked = key
            if key in self._unwritten:
                row = self._unwritten[key]
                return None if row is None else row[3]
            if not self._read(key):
                limit = self.READ_AHEAD if self._rising >= 3 else 1
                found = self._store.rows(
                    "SELECT key, memo FROM pods WHERE key >= ? ORDER BY key LIMIT ?",
                    (key, limit),
                )
                self._ahead = {str(k): memo for k, memo in found}  # type: ignore[misc]
                self._ahead_from = key
                self._ahead_to = str(found[-1][0]) if len(found) == limit else None
            return self._ahead.get(key)

    def set(self, key: str, memo: bytes, *, replicaset: str | None, failing: bool) -> None:
        """`replicaset` is `namespace/name` of the owning ReplicaSet, if any."""
        self._change(key, (key, replicaset, failing, memo))

    def discard(self, key: str) -> None:
        self._change(key, None)

    def keys(self) -> builtins.set[str]:
        return self.missing(frozenset())

    def missing(self, present: Container[str]) -> builtins.set[str]:
        """Pods with a memo that are not in `present`."""
        with self._store.lock:
            self.write_pending()
            return self._store.missing("SELECT key FROM pods", (), present)

    def counts(self, replicaset: str) -> tuple[int, int]:
        """(failing pods, pods) of the ReplicaSet `namespace/name`."""
        with self._store.lock:
            self.write_pending()
            ((failing, total),) = self._store.rows(
                "SELECT COALESCE(SUM(failing), 0), COUNT(*) FROM pods WHERE replicaset = ?",
                (replicaset,),
            )
        return int(failing), int(total)  # type: ignore[call-overload]

    def write_pending(self) -> None:
        """(Lock held.) Write what is unwritten, in two statements, and forget what was read
        ahead."""
        if not self._unwritten:
            return
        rows = [row for row in self._unwritten.values() if row is not None]
        gone = [(key,) for key, row in self._unwritten.items() if row is None]
        self.reset()
        if rows:
            self._store.execute_many("INSERT OR REPLACE INTO pods VALUES (?, ?, ?, ?)", rows)
        if gone:
            self._store.execute_many("DELETE FROM pods WHERE key = ?", gone)

    def reset(self) -> None:
        """(Lock held.) Forget what is unwritten and what was read ahead."""
        self._unwritten = {}
        self._ahead, self._ahead_from, self._ahead_to = {}, None, None

    def _change(self, key: str, row: tuple[str, str | None, bool, bytes] | None) -> None:
        with self._store.lock:
            self._unwritten[key] = row  # asked for before what was read ahead (`get`)
            if len(self._unwritten) >= self.WRITE_BEHIND:
                self.write_pending()

    def _read(self, key: str) -> bool:
        """Whether the key is among those read ahead."""
        start, end = self._ahead_from, self._ahead_to
        return start is not None and start <= key and (end is None or key <= end)


class EventSeries:
    """Warning Event key (`namespace/name`: one Event object is one series, its count
    rising in place) -> the incident it belongs to (object, reason, container). An
    incident is reported once while any of its series is remembered; a series is forgotten
    when its Event goes (the API server deletes Events an hour after their last update)."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def known(self, key: str) -> bool:
        return bool(self._store.rows("SELECT 1 FROM event_series WHERE key = ?", (key,)))

    def open(self, incident: str) -> bool:
        """Whether a remembered series already belongs to the incident."""
        return bool(
            self._store.rows("SELECT 1 FROM event_series WHERE incident = ? LIMIT 1", (incident,))
        )

    def add(self, key: str, incident: str) -> None:
        self._store.execute("INSERT OR REPLACE INTO event_series VALUES (?, ?)", (key, incident))

    def discard(self, key: str) -> None:
        self._store.execute("DELETE FROM event_series WHERE key = ?", (key,))

    def missing(self, present: Container[str]) -> set[str]:
        """Series remembered here whose Events are not in `present`."""
        return self._store.missing("SELECT key FROM event_series", (), present)


class HeldObjects:
    """Per source object: the object itself, encoded, while its records wait for what they
    mention to list (`collector.sources.Held`). It is normalized once, when released,
    rather than once on arrival and again when its relations are known. Emptied when made:
    what waits is one leadership term's, and the term's stale marks live in memory."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        with store.lock:
            store.execute(f"DELETE FROM {_HELD}")
            store.commit()

    def put(self, source: str, source_key: str, encoded: bytes) -> None:
        self._store.defer(
            _HELD,
            f"INSERT OR REPLACE INTO {_HELD} (source, source_key, object) VALUES (?, ?, ?)",
            (source, source_key, encoded),
        )

    def pop_many(self, source: str, source_keys: Iterable[str]) -> dict[str, bytes]:
        """The held objects among those keys, forgotten: one statement, the keys going in as
        one JSON array (see `SentFingerprints.get_many`)."""
        found = self._store.rows(
            f"DELETE FROM {_HELD} WHERE source = ?"
            " AND source_key IN (SELECT value FROM json_each(?)) RETURNING source_key, object",
            (source, msgspec.json.encode(list(source_keys)).decode()),
        )
        return {str(key): encoded for key, encoded in found}  # type: ignore[misc]

    def discard(self, source: str, source_key: str) -> None:
        self._store.execute(
            f"DELETE FROM {_HELD} WHERE source = ? AND source_key = ?", (source, source_key)
        )

    def missing(self, source: str, present: Container[str]) -> set[str]:
        """The source's held objects that are not in `present` (a relist: they went)."""
        return self._store.missing(
            f"SELECT source_key FROM {_HELD} WHERE source = ?", (source,), present
        )
