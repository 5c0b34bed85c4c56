"""One way to open and keep an SQLite file the agent owns, whichever store it belongs to.

The agent keeps three kinds of SQLite file: the outbox's streams (`shipper.outbox`), the
collector's state (`collector.state`) and the scaling store (`scheduler.store`). Each store
keeps its own tables and statements; what a file needs before and around them is here,
once, so every file is opened, checked, set aside and waited on by the same rules:

- **Open** (`open_file`, or `check` then `connect` when a library opens the file too, as
  persist-queue does for the outbox): every connection waits up to
  `BUSY_TIMEOUT_SECONDS` for another writer (`database is locked`) and is set to its
  store's durability (below). A file `connect` creates has pages of `PAGE_SIZE` bytes.
- **Integrity check and quarantine** (`check`): a `-wal`/`-shm`/`-journal` whose database is
  gone, a file whose header is not SQLite's, or one that fails `PRAGMA integrity_check` is
  moved aside with its companions as `<name>.corrupt-<time>` (`move_aside`) and a fresh
  file starts. The header is read before SQLite opens the file, because opening a damaged
  file lets SQLite discard its WAL, which is evidence. A zero-length file is moved aside
  the same way, and said apart (`Found.EMPTY`): whatever it held is gone, nothing of it
  can be read.
- **Schema guard**: a database of another schema or version (`FileKind.foreign` says so)
  is never read as if it were this store's: per store, start-up stops (`Foreign.REFUSE`),
  it is moved aside like damage (`Foreign.MOVE_ASIDE`), or its tables are dropped
  (`Foreign.EMPTY`).
- **Durability** (`Durability`), chosen per store by what it needs: every file is in WAL
  mode (readers never wait for the writer); `synchronous=FULL` where nothing else holds the
  rows (the outbox: a record committed there is gone for good if its file loses it; the
  scaling store: a pending restore must survive a power cut, not only a process crash),
  `synchronous=NORMAL` where a lost tail is re-derived (the collector's state is committed
  after the outbox, so a power cut only means records sent again).
- **Deleting** (`secure_delete=FAST`, on every connection `connect` makes): Debian's SQLite
  (the image's) is built to overwrite every deleted byte with zeros, so each freed page of a
  large row (a taken chunk of records, a held object released) was written to the WAL once
  more, and again into the file by the checkpoint; about a fifth of a warm-up's writes.
  FAST zeroes what sits on the pages a delete writes anyway and leaves freed pages as they
  were until reused. Zeroing them never kept a row's bytes off the volume: every page
  written went through the WAL first, which SQLite does not zero.

Errors are sorted by `runtime.storage_errors.classify_storage_error`, on SQLite's result
codes. The stores log and count what was found under their own names; this module logs
nothing.

How it fails: anything met while opening or checking that is not damage (locked past the
busy timeout, no permission, a directory in the way, an I/O error, a file refused as
foreign) raises `UnusableFile`, which stops start-up (exit 2): moving a file aside that
only could not be opened would throw its rows away. A file that cannot even be moved aside
raises the `OSError`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

from runtime.storage_errors import StorageTrouble, classify_storage_error

# How long any connection waits for another writer before failing with "database is locked".
BUSY_TIMEOUT_SECONDS = 10.0
PAGE_SIZE = 16384
"""The page size of a file the agent creates (SQLite's default is 4 KiB). The stores' rows
are large (a Deployment's kept record, a chunk of records), so a commit and the checkpoint
that copies it into the file write fewer, fuller pages: at the bench's default size the
warm-up's writes to the state file and the outbox fell by about a third. A file made with
another page size keeps it: WAL mode fixes the page size once the file exists."""

SQLITE_HEADER = b"SQLite format 3\x00"
_COMPANIONS = ("-wal", "-shm", "-journal")


class Durability(Enum):
    """`PRAGMA synchronous` of a store's connections (every file is in WAL mode)."""

    FULL = "FULL"
    """A commit survives a power cut: for rows nothing else holds."""
    NORMAL = "NORMAL"
    """A commit survives a process crash; a power cut may lose the last ones (WAL): for
    rows that are re-derived."""


class Foreign(Enum):
    """What becomes of a database of another schema or version."""

    REFUSE = "refuse"
    """Start-up stops (`UnusableFile`): the file may hold what nothing else holds."""
    MOVE_ASIDE = "move aside"
    """Quarantined like a damaged file; a fresh one starts."""
    EMPTY = "empty"
    """Every table is dropped; the store starts afresh in the same file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FileKind:
    """A store's file, as this module needs to know it."""

    name: str
    """How errors name the file ("queue file", ...)."""
    durability: Durability
    foreign: Callable[[sqlite3.Connection], str | None]
    """What makes the file not this store's, as the rest of a sentence that starts with
    "<name> <path>"; None when it is this store's (or has no table yet)."""
    on_foreign: Foreign


class UnusableFile(RuntimeError):
    """The file cannot be used and must not be thrown away: start-up stops (exit 2)."""


class Found(Enum):
    """What `check` found at the file's path."""

    NOTHING = "nothing"  # no file: a fresh one will be made
    HEALTHY = "healthy"
    EMPTY = "empty"  # zero length, moved aside
    DAMAGED = "damaged"  # moved aside
    FOREIGN = "foreign schema"  # moved aside or emptied, per `FileKind.on_foreign`


@dataclass(frozen=True, slots=True)
class Checked:
    found: Found
    moved_to: Path | None = None
    """Where the file (or its journal, when the file was gone) was moved; None when it was
    healthy, absent, or emptied in place (`Foreign.EMPTY`)."""


def check(path: Path, kind: FileKind) -> Checked:
    """Check the file at `path` before its store uses it, and quarantine it if it is damaged
    or foreign (see the module docstring)."""
    if not path.exists():
        if any(companion.exists() for companion in _companions(path)):
            # SQLite would replay a journal into the new file as if it belonged to it.
            return Checked(Found.DAMAGED, move_aside(path))
        return Checked(Found.NOTHING)
    header = _read_header(path, kind)
    if not header:
        # It holds nothing, but a `-wal` beside it would be replayed into the new file.
        return Checked(Found.EMPTY, move_aside(path))
    if header != SQLITE_HEADER:
        return Checked(Found.DAMAGED, move_aside(path))
    try:
        with closing(_connection(path)) as conn:
            if [row[0] for row in conn.execute("PRAGMA integrity_check")] != ["ok"]:
                return Checked(Found.DAMAGED, move_aside(path))
            problem = kind.foreign(conn)
            if problem is None:
                return Checked(Found.HEALTHY)
            if kind.on_foreign is Foreign.REFUSE:
                raise UnusableFile(f"{kind.name} {path} {problem}")
            if kind.on_foreign is Foreign.EMPTY:
                _drop_every_table(conn)
                return Checked(Found.FOREIGN)
    except sqlite3.Error as exc:
        if classify_storage_error(exc) is not StorageTrouble.DAMAGE:
            raise unusable(kind, path, exc) from exc
        return Checked(Found.DAMAGED, move_aside(path))
    return Checked(Found.FOREIGN, move_aside(path))


def connect(path: Path, kind: FileKind) -> sqlite3.Connection:
    """A connection to the store's file, in WAL mode at the store's durability, usable from
    any thread (the store serialises its own use). The file is made when absent."""
    try:
        conn = _connection(path)
    except sqlite3.Error as exc:
        raise unusable(kind, path, exc) from exc
    try:
        # Before WAL mode, whose switch writes the new file's first page: only then does the
        # size take. On an existing file SQLite ignores it.
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {kind.durability.value}")
        conn.execute("PRAGMA secure_delete = FAST")
    except sqlite3.Error as exc:
        conn.close()
        raise unusable(kind, path, exc) from exc
    return conn


def open_file(path: Path, kind: FileKind) -> tuple[sqlite3.Connection, Checked]:
    """`check` the file, then `connect` to it (a fresh file when it was moved aside)."""
    checked = check(path, kind)
    return connect(path, kind), checked


def unusable(kind: FileKind, path: Path, exc: BaseException) -> UnusableFile:
    """The start-up error for a file that could not be opened or checked (not damage)."""
    return UnusableFile(f"cannot open {kind.name} {path}: {exc}")


def move_aside(path: Path) -> Path:
    """Move the file and its `-wal`/`-shm`/`-journal` to `<name>.corrupt-<time>[-wal...]`,
    where an operator finds them; return the file's new path."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix, companion in zip(_COMPANIONS, _companions(path), strict=True):
        if companion.exists():
            companion.rename(target.with_name(target.name + suffix))
    if path.exists():
        path.rename(target)
    return target


def _connection(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_SECONDS, check_same_thread=False)


def _read_header(path: Path, kind: FileKind) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise unusable(kind, path, exc) from exc


def _companions(path: Path) -> tuple[Path, ...]:
    return tuple(path.with_name(path.name + suffix) for suffix in _COMPANIONS)


def tables(conn: sqlite3.Connection) -> list[str]:
    """The file's tables, SQLite's own (sqlite_sequence, sqlite_stat1) left out: they belong
    to any database, and go with the tables they describe."""
    rows = conn.execute(
        "SELECT name FROM sqlite_master"
        " WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY name"
    )
    return [str(name) for (name,) in rows]


def _drop_every_table(conn: sqlite3.Connection) -> None:
    with conn:
        for table in tables(conn):
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    conn.execute("PRAGMA user_version = 0")
