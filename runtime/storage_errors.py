"""Telling a full or failing disk from a damaged file, for every SQLite file the agent keeps.

A full volume (SQLITE_FULL) or an I/O error passes once space or the device comes back: the
writer holds its place and retries. A file that is not a database, or whose pages are
damaged, does not heal by waiting: that is for quarantine (`shipper.queuefile`).
"""

from __future__ import annotations

import errno
import sqlite3

_PRIMARY_CODE_MASK = 0xFF  # extended result codes carry the primary code in the low byte
_PASSING_CODES = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR})
_PASSING_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def is_passing_storage_error(exc: BaseException) -> bool:
    """Whether `exc` is a full disk or an I/O error, which a retry can outlast."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            return code & _PRIMARY_CODE_MASK in _PASSING_CODES
        return "disk is full" in str(exc) or "disk I/O error" in str(exc)
    if isinstance(exc, OSError):
        return exc.errno in _PASSING_ERRNOS
    return False
