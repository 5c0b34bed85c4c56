"""The scaling role's local memory: which events are already in the outbox, and which
Deployment replica counts still have to be restored.

Event ids make "report once" cheap: an apply, revert or error event is put into the outbox
only when its id is not noted here, so a steady cycle puts nothing and an error is reported
once per window, not once per cycle. Ids are noted after the outbox put has committed, and
committed to this file once per cycle (`commit`): a crash before that commit only means the
same ids are put again, which the platform de-duplicates. Ids older than `KEEP_IDS_FOR` are
forgotten; at worst an event is sent a second time with the same id.

Each id is kept with its event, and with the identity (`epoch`) of the outbox file it went
into, so an outbox file that is lost (quarantined, emptied, deleted) loses no event: every
event noted here is put into the new file again (`events`), and the platform de-duplicates
the ones it already had.

Pending restores are the journal of a provisional revert: the Deployment's original
replicas are committed here (at once, not at the end of the cycle) before the HPA is
deleted, and cleared once the Deployment is restored, so a crash between the two cannot
strand a Deployment at the window's size.

The file is opened and checked by `runtime.sqlite_file` as `STORE_FILE`, at durability
FULL: a pending restore must survive a power cut, not only a process crash.

How it fails: a file that is not a database, fails SQLite's check, is empty (zero length) or
holds tables other than this store's (a file written by something else, or by a schema this
version does not know) is moved aside (`<name>.corrupt-<time>`), counted (`store_lost`) and
logged once (`scaling_store_lost`, with how), and a fresh one started. The cost: events
sent again, which the platform de-duplicates, and pending restores forgotten, which the
Deployments' own journal label brings back (`scheduler.restores`). A file that cannot be
opened (locked, no permission) raises `UnusableFile`; SQLite errors met later (read-only,
disk full) raise `sqlite3.Error` from the call that met them; a write that failed is kept
to be written by the next `commit`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import structlog

from runtime import sqlite_file
from runtime.health import HealthReporter
from runtime.sqlite_file import Durability, FileKind, Foreign, Found
from shipper.records import ScalingEvent

log = structlog.get_logger("scheduler.store")

# Its name in the role's queue directory, beside (never one of) the outbox's `<stream>.db`.
FILE_NAME = "scaling-state.db"
KEEP_IDS_FOR = 30 * 24 * 3600.0  # seconds
PRUNE_EVERY = 3600.0  # seconds; a cycle with nothing new commits nothing in between
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS enqueued (id TEXT PRIMARY KEY, at REAL NOT NULL, event BLOB)",
    "CREATE TABLE IF NOT EXISTS pending_restores ("
    " namespace TEXT NOT NULL, deployment TEXT NOT NULL, replicas INTEGER NOT NULL,"
    " released TEXT, PRIMARY KEY (namespace, deployment))",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
# Each table's columns, in order: a file whose tables differ is not this store's.
_COLUMNS = {
    "enqueued": ("id", "at", "event"),
    "pending_restores": ("namespace", "deployment", "replicas", "released"),
    "meta": ("key", "value"),
}
# Tables as the store's earlier version left them, and the statement that brings each up to
# date (its rows have no event: they cannot be put again).
_EARLIER: dict[tuple[str, tuple[str, ...]], str] = {
    ("enqueued", ("id", "at")): "ALTER TABLE enqueued ADD COLUMN event BLOB"
}
_OUTBOX_EPOCH = "outbox_epoch"
_encode_event = msgspec.json.Encoder().encode
_decode_event = msgspec.json.Decoder(ScalingEvent).decode


_SELECT_RESTORES = "SELECT namespace, deployment, replicas, released FROM pending_restores"


@dataclass(frozen=True, slots=True)
class PendingRestore:
    namespace: str
    deployment: str
    replicas: int
    released: str | None  # a RELEASED marker to leave on the Deployment (manual reverts)


class Store:
    """One SQLite file; thread-safe (scheduler jobs run on pool threads)."""

    def __init__(self, path: str | Path, *, reporter: HealthReporter | None = None) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db, self.lost = _open(self.path)
        if self.lost is not None and reporter is not None:
            reporter.count("store_lost")
        self._ids = {row[0] for row in self._db.execute("SELECT id FROM enqueued")}
        self._unsaved: dict[str, tuple[float, bytes]] = {}
        self._pruned_at = float("-inf")
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (_OUTBOX_EPOCH,))
        found = row.fetchone()
        self._outbox_epoch: str | None = found[0] if found else None

    # enqueued event ids -------------------------------------------------------------------

    def enqueued(self, event_id: str) -> bool:
        with self._lock:
            return event_id in self._ids

    def note_enqueued(self, events: Iterable[ScalingEvent]) -> None:
        """Remember events already committed to the outbox; written at the next `commit`."""
        now = time.time()
        with self._lock:
            for event in events:
                self._ids.add(event.id)
                self._unsaved[event.id] = (now, _encode_event(event))

    def events(self) -> tuple[list[ScalingEvent], int]:
        """Every event noted (oldest first), and how many ids are noted without one (kept by
        the store's earlier version, or unreadable)."""
        with self._lock:
            rows = self._db.execute("SELECT id, event FROM enqueued ORDER BY at").fetchall()
            bodies = dict(rows)
            bodies.update((event_id, body) for event_id, (_, body) in self._unsaved.items())
        found: list[ScalingEvent] = []
        for body in bodies.values():
            try:
                found.append(_decode_event(body))
            except (msgspec.DecodeError, TypeError):  # None: an id without its event
                continue
        return found, len(bodies) - len(found)

    @property
    def outbox_epoch(self) -> str | None:
        """The outbox file the noted events went into; None before the first."""
        with self._lock:
            return self._outbox_epoch

    def follow_outbox(self, epoch: str) -> None:
        """From now on events go into the outbox file `epoch` (written at once)."""
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_OUTBOX_EPOCH, epoch))
            self._outbox_epoch = epoch

    def commit(self) -> None:
        """Write the ids noted since the last commit, and forget old ones: one transaction,
        none at all when nothing was noted and the last pruning is recent."""
        now = time.time()
        horizon = now - KEEP_IDS_FOR
        with self._lock:
            rows = [(event_id, at, body) for event_id, (at, body) in self._unsaved.items()]
            if not rows and now - self._pruned_at < PRUNE_EVERY:
                return
            self._pruned_at = now
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO enqueued VALUES (?, ?, ?)", rows)
                forgotten = self._db.execute(
                    "SELECT id FROM enqueued WHERE at < ?", (horizon,)
                ).fetchall()
                self._db.execute("DELETE FROM enqueued WHERE at < ?", (horizon,))
            self._unsaved.clear()
            self._ids.difference_update(row[0] for row in forgotten)

    # pending replica restores -------------------------------------------------------------

    def add_restore(self, restore: PendingRestore) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO pending_restores VALUES (?, ?, ?, ?)",
                (restore.namespace, restore.deployment, restore.replicas, restore.released),
            )

    def restores(self) -> list[PendingRestore]:
        with self._lock:
            rows = self._db.execute(f"{_SELECT_RESTORES} ORDER BY namespace, deployment").fetchall()
        return [PendingRestore(*row) for row in rows]

    def restore_of(self, namespace: str, deployment: str) -> PendingRestore | None:
        with self._lock:
            row = self._db.execute(
                f"{_SELECT_RESTORES} WHERE namespace = ? AND deployment = ?",
                (namespace, deployment),
            ).fetchone()
        return PendingRestore(*row) if row else None

    def drop_restore(self, namespace: str, deployment: str) -> None:
        with self._lock, self._db:
            self._db.execute(
                "DELETE FROM pending_restores WHERE namespace = ? AND deployment = ?",
                (namespace, deployment),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _open(path: Path) -> tuple[sqlite3.Connection, str | None]:
    """The store's connection, and how the file found there was lost (None: it was not)."""
    db, checked = sqlite_file.open_file(path, STORE_FILE)
    try:
        with db:
            for statement in (*_upgrades(db), *_SCHEMA):
                db.execute(statement)
    except BaseException:
        db.close()
        raise
    lost = _LOST.get(checked.found)
    if lost is not None:
        log.error(
            "scaling_store_lost",
            how=lost,
            moved_to=str(checked.moved_to),
            cost="events sent again; pending restores taken from the Deployments",
        )
    return db, lost


# What `scaling_store_lost` says of a file moved aside.
_LOST = {
    Found.EMPTY: "empty",  # whatever it held is gone; SQLite would take it for a new database
    Found.DAMAGED: "damaged",
    Found.FOREIGN: "foreign schema",
}


def _tables(db: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """Every table of the file with its columns, in order."""
    return {
        table: tuple(
            row[0] for row in db.execute("SELECT name FROM pragma_table_info(?)", (table,))
        )
        for table in sqlite_file.tables(db)
    }


def _upgrades(db: sqlite3.Connection) -> list[str]:
    """The statements that bring tables of the store's earlier version up to date."""
    return [
        upgrade
        for table, columns in _tables(db).items()
        if (upgrade := _EARLIER.get((table, columns))) is not None
    ]


def _foreign(db: sqlite3.Connection) -> str | None:
    """Which table makes the file not this store's: one it does not know, or one of its own
    with other columns (neither as this version nor as the earlier one made it)."""
    for table, columns in _tables(db).items():
        if columns != _COLUMNS.get(table) and (table, columns) not in _EARLIER:
            return f"holds table {table!r}, which is not this store's"
    return None


STORE_FILE = FileKind(
    name="scaling store",
    durability=Durability.FULL,
    foreign=_foreign,
    on_foreign=Foreign.MOVE_ASIDE,
)
