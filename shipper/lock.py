"""One process per queue directory.

persist-queue is not safe across processes (a second opener resets rows the first one still
holds), so the directory carries a lock file held with flock for the life of the process.
The kernel drops the lock when the process dies, so a SIGKILL never leaves it stuck.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from shipper.queuefile import QueueFileError

LOCK_FILE_NAME = "agent.lock"


class QueueDirectoryBusy(RuntimeError):
    """Another live process owns this queue directory."""


class DirectoryLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            # A claim owned by root without an fsGroup, a read-only volume, a directory in
            # the way: the process cannot use this directory at all.
            raise QueueFileError(
                f"cannot create the lock file {self.path}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise QueueDirectoryBusy(
                f"queue directory {self.path.parent} is in use by another moonin-agent "
                f"process (pid {holder}); each process needs its own QUEUE_DIR"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise QueueFileError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
