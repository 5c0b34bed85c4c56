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

How it fails: a file that is not a database, fails SQLite's check, is empty (zero length) or
holds tables other than this store's (a file written by something else, or by a schema this
version does not know) is moved aside (`<name>.corrupt-<time>`), counted (`store_lost`) and
logged once (`scaling_store_lost`, with how), and a fresh one started. The cost: events
sent again, which the platform de-duplicates, and pending restores forgotten, which the
Deployments' own journal label brings back (`scheduler.revert`). Other SQLite errors
(locked, read-only, disk full) raise `sqlite3.Error` from the call that met them; a write
that failed is kept to be written by the next `commit`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import structlog

from runtime.health import HealthReporter
from shipper.records import ScalingEvent

log = structlog.get_logger("scheduler.store")

# Its name in the role's queue directory, beside (never one of) the outbox's `<stream>.db`.
FILE_NAME = "scaling-state.db"
KEEP_IDS_FOR = 30 * 24 * 3600.0  # seconds
PRUNE_EVERY = 3600.0  # seconds; a cycle with nothing new commits nothing in between
_TIMEOUT = 10.0
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
_EARLIER = {("enqueued", ("id", "at")): "ALTER TABLE enqueued ADD COLUMN event BLOB"}
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
    if _is_empty(path):
        lost = "empty"  # whatever it held is gone; SQLite would take it for a new database
    else:
        try:
            return _connect(path), None
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and not _is_corruption(exc):
                raise
            lost = "foreign schema" if isinstance(exc, _ForeignSchema) else "damaged"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm", "-journal"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            source.replace(Path(f"{aside}{suffix}"))
    log.error(
        "scaling_store_lost",
        how=lost,
        moved_to=str(aside),
        cost="events sent again; pending restores taken from the Deployments",
    )
    return _connect(path), lost


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return False


class _ForeignSchema(sqlite3.DatabaseError):
    """The file is a database, but not this store's."""


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), timeout=_TIMEOUT, check_same_thread=False)
    try:
        check = db.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {check[0] if check else 'no answer'}")
        upgrades = _check_tables(db)
        db.execute("PRAGMA journal_mode=WAL")
        # FULL: a pending restore must survive a power cut, not only a process crash.
        db.execute("PRAGMA synchronous=FULL")
        with db:
            for statement in (*upgrades, *_SCHEMA):
                db.execute(statement)
    except BaseException:
        db.close()
        raise
    return db


def _check_tables(db: sqlite3.Connection) -> list[str]:
    """The statements that bring tables of the store's earlier version up to date; raise
    `_ForeignSchema` when the file holds a table that is not this store's, or one of its
    tables with other columns."""
    upgrades: list[str] = []
    # SQLite's own tables (sqlite_stat1 after an ANALYZE) belong to any database.
    tables = db.execute(
        "SELECT name FROM sqlite_master"
        " WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!'"
    ).fetchall()
    for (table,) in tables:
        expected = _COLUMNS.get(table)
        columns = db.execute("SELECT name FROM pragma_table_info(?)", (table,))
        found = tuple(row[0] for row in columns)
        upgrade = _EARLIER.get((table, found))
        if upgrade is not None:
            upgrades.append(upgrade)
        elif expected is None or found != expected:
            raise _ForeignSchema(f"table {table!r} is not this store's")
    return upgrades


def _is_corruption(exc: sqlite3.OperationalError) -> bool:
    return "malformed" in str(exc) or "not a database" in str(exc)
