"""Every SQL name the outbox relies on, and the check that persist-queue still matches them.

The outbox reads and deletes chunks in persist-queue's table directly (see docs/outbox.md,
"Taking does not claim"): its public API has no batch take or ack, and per-item get+ack
rewrites every chunk twice before removing it. Those table and column names and the `ACKED`
status value are persist-queue's private choices, so they are written down here, once, as
the outbox expects them, and `mismatch` compares them with the file and the installed
persist-queue at every open: an upgrade that changes them stops start-up with one line
instead of silently delivering nothing. tests/integration/test_queueschema.py fails on such an
upgrade before it ships; pyproject.toml pins persist-queue to the versions tested here.

Our own tables (`outbox_meta`, `dead_letters`) and every statement on any of the tables are
here too, so a reader finds all of the file's SQL in one place.
"""

from __future__ import annotations

import sqlite3
from importlib import metadata

from persistqueue.sqlackqueue import AckStatus

PERSIST_QUEUE_TESTED = "1.1.0"

QUEUE_NAME = "outbox"  # persist-queue names its table ack_queue_<name>
QUEUE_TABLE = f"ack_queue_{QUEUE_NAME}"
# persist-queue's table as SQLite keeps its definition. AUTOINCREMENT counts too: row ids
# are never reused, so a batch id (made of them) never names two different batches.
QUEUE_TABLE_SQL = (
    f"CREATE TABLE `{QUEUE_TABLE}` (_id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " data BLOB, timestamp FLOAT, status INTEGER)"
)
# persist-queue's `AckStatus`: rows below `acked` are still queued.
ACK_STATUSES = {"inited": 0, "ready": 1, "unack": 2, "acked": 5, "ack_failed": 9}
ACKED_STATUS = ACK_STATUSES["acked"]

META_TABLE = "outbox_meta"
DEAD_LETTER_TABLE = "dead_letters"
OWN_TABLES = (
    f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {DEAD_LETTER_TABLE} ("
    " record_id TEXT PRIMARY KEY, status INTEGER, response TEXT,"
    " record BLOB NOT NULL, dead_lettered_at REAL NOT NULL)",
)

SELECT_QUEUED = (
    f"SELECT _id, status, data FROM {QUEUE_TABLE} WHERE status < {ACKED_STATUS} ORDER BY _id"
)
SELECT_QUEUED_IDS = f"SELECT _id FROM {QUEUE_TABLE} WHERE status < {ACKED_STATUS} ORDER BY _id"
SELECT_CHUNK = f"SELECT data FROM {QUEUE_TABLE} WHERE _id = ?"
DELETE_CHUNK = f"DELETE FROM {QUEUE_TABLE} WHERE _id = ?"

SELECT_META = f"SELECT key, value FROM {META_TABLE}"
WRITE_META = f"INSERT OR REPLACE INTO {META_TABLE} (key, value) VALUES (?, ?)"

# Record ids are the key: a crash between storing a letter and the ack cannot double it.
WRITE_DEAD_LETTER = f"INSERT OR REPLACE INTO {DEAD_LETTER_TABLE} VALUES (?, ?, ?, ?, ?)"
COUNT_DEAD_LETTERS = f"SELECT COUNT(*) FROM {DEAD_LETTER_TABLE}"
SELECT_DEAD_LETTERS = (
    f"SELECT record_id, status, response, record, dead_lettered_at FROM {DEAD_LETTER_TABLE}"
    " ORDER BY dead_lettered_at, record_id LIMIT ?"
)
# The oldest letters beyond a byte budget (bound to ?); the newest one always stays.
PRUNE_DEAD_LETTERS = (
    f"DELETE FROM {DEAD_LETTER_TABLE} WHERE record_id IN ("
    " SELECT record_id FROM ("
    "  SELECT record_id, length(record) AS size, SUM(length(record)) OVER ("
    "   ORDER BY dead_lettered_at DESC, record_id DESC) AS newer_and_this"
    f"  FROM {DEAD_LETTER_TABLE})"
    " WHERE newer_and_this > ? AND newer_and_this > size)"
)

TABLES = "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"


def installed_statuses() -> dict[str, int]:
    """The installed persist-queue's `AckStatus`, as numbers."""
    return {
        name: int(value)
        for name, value in vars(AckStatus).items()
        if not name.startswith("_") and isinstance(value, str | int)
    }


def tables(conn: sqlite3.Connection) -> dict[str, str]:
    """Every table of the file, by name, with its definition."""
    return {str(name): str(sql) for name, sql in conn.execute(TABLES)}


def mismatch(conn: sqlite3.Connection) -> str | None:
    """What differs from the outbox's expectation, in a few words; None when nothing does.

    A file with no table at all (new, or never written) has nothing to differ.
    """
    statuses = installed_statuses()
    if statuses != ACK_STATUSES:
        return f"its ack statuses are {statuses}, the outbox expects {ACK_STATUSES}"
    found = tables(conn)
    if not found:
        return None
    if QUEUE_TABLE not in found:
        return f"the file has no table {QUEUE_TABLE} (tables: {', '.join(found)})"
    if found[QUEUE_TABLE] != QUEUE_TABLE_SQL:
        return f"its table is {found[QUEUE_TABLE]!r}, the outbox expects {QUEUE_TABLE_SQL!r}"
    return None


def persist_queue_version() -> str:
    try:
        return metadata.version("persist-queue")
    except metadata.PackageNotFoundError:
        return "unknown"
