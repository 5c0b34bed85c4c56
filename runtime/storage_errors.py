"""Telling a full or failing disk from a damaged file, for every SQLite file the agent keeps.

One function, `classify_storage_error`, sorts an error by SQLite's result code (never by its
message, which SQLite may word otherwise in another version):

- `PASSING`: a full volume (SQLITE_FULL) or an I/O error passes once space or the device
  comes back: the writer holds its place and retries.
- `BUSY`: another connection holds the file (`database is locked`). Every connection waits
  for it first (`runtime.sqlite_file.BUSY_TIMEOUT_SECONDS`); one still held after that is
  a file this process cannot use now, not damage.
- `DAMAGE`: a file that is not a database, or whose pages are damaged, does not heal by
  waiting: that is for quarantine (`runtime.sqlite_file`).
- `UNUSABLE`: anything else (no permission, a directory in the way, a read-only volume):
  the file is there but this process cannot use it; start-up stops rather than throw it away.
"""

from __future__ import annotations

import errno
import sqlite3
from enum import Enum

_PRIMARY_CODE_MASK = 0xFF  # extended result codes carry the primary code in the low byte
_PASSING_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


class StorageTrouble(Enum):
    PASSING = "passing"
    BUSY = "busy"
    DAMAGE = "damage"
    UNUSABLE = "unusable"


_BY_CODE = {
    sqlite3.SQLITE_FULL: StorageTrouble.PASSING,
    sqlite3.SQLITE_IOERR: StorageTrouble.PASSING,
    sqlite3.SQLITE_BUSY: StorageTrouble.BUSY,
    sqlite3.SQLITE_LOCKED: StorageTrouble.BUSY,
    sqlite3.SQLITE_CORRUPT: StorageTrouble.DAMAGE,
    sqlite3.SQLITE_NOTADB: StorageTrouble.DAMAGE,
}


def classify_storage_error(exc: BaseException) -> StorageTrouble:
    """What `exc`, met on a file the agent keeps, calls for (see the module docstring).

    An `sqlite3.Error` without a result code was raised by Python's module itself (a closed
    connection, a misuse), never by the file: `UNUSABLE`.
    """
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is None:
            return StorageTrouble.UNUSABLE
        return _BY_CODE.get(code & _PRIMARY_CODE_MASK, StorageTrouble.UNUSABLE)
    if isinstance(exc, OSError) and exc.errno in _PASSING_ERRNOS:
        return StorageTrouble.PASSING
    return StorageTrouble.UNUSABLE


def is_passing_storage_error(exc: BaseException) -> bool:
    """Whether `exc` is a full disk or an I/O error, which a retry can outlast."""
    return classify_storage_error(exc) is StorageTrouble.PASSING
