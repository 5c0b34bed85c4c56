"""A real full disk in a test: a small tmpfs mounted on a directory, filled, then freed.

Mounting needs root (this machine and CI run tests as root); where it is not permitted the
test is skipped with one line saying so. SQLite keeps a write-ahead log whose blocks it
reuses, so a full volume only refuses a write that needs a new block: `fill` first
truncates the logs of the SQLite files there (through a connection of its own), so the next
write of any of them needs space.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from tests.waiting import wait_until

FILLER = "filler"
_CHUNKS = (1 << 20, 1 << 16, 1 << 12, 1 << 9, 1)


class Volume:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self) -> None:
        """Leave no free byte on the volume."""
        for db in [*self.path.glob("*.db"), *self.path.glob("*.sqlite")]:
            # A process using the file may hold the log a moment: wait for the truncation.
            wait_until(lambda db=db: _truncate_log(db), timeout=10)
        handle = os.open(self.path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in _CHUNKS:
                block = b"\0" * size
                while True:
                    try:
                        if os.write(handle, block) < size:
                            break
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(handle)

    def free(self) -> None:
        (self.path / FILLER).unlink()


def _truncate_log(db: Path) -> bool:
    with closing(sqlite3.connect(str(db), timeout=1)) as conn:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    wal = db.with_name(db.name + "-wal")
    return busy == 0 and (not wal.exists() or wal.stat().st_size == 0)


@contextmanager
def small_volume(path: Path, size: str = "2m") -> Iterator[Volume]:
    """A tmpfs of `size` mounted on `path` (created), unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("a small tmpfs cannot be mounted here (needs root): no real full disk")
    try:
        yield Volume(path)
    finally:
        # Lazily: a file still open (a process being reaped) must not keep the mount.
        subprocess.run(["umount", "-l", str(path)], check=True)
