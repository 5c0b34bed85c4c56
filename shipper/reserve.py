"""A little disk space held back for the day the volume is full.

SQLite needs free space even to delete (the change goes through the WAL first), so on a
full volume the shipper could deliver a batch but never remove it, and the queue could
never shrink. The outbox keeps a small file of zeros beside the queue files; when a delete
fails for lack of space the file goes, the delete is retried in the room it leaves, and the
file comes back once the queue has shrunk.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

log = structlog.get_logger("shipper.reserve")

FILE_NAME = "disk-reserve"
DEFAULT_BYTES = 1024 * 1024  # dozens of acks' worth of WAL pages
_CHUNK = 64 * 1024


class DiskReserve:
    def __init__(self, directory: Path, size: int = DEFAULT_BYTES) -> None:
        self.path = directory / FILE_NAME
        self.size = size

    def ensure(self) -> bool:
        """Hold the space (written out, so the blocks are really taken); False when there is
        no room for it now, which is not an error: the next shrink tries again."""
        try:
            if self.path.stat().st_size >= self.size:
                return True
        except FileNotFoundError:
            pass
        except OSError:
            return False
        try:
            with self.path.open("wb") as file:
                zeros = bytes(_CHUNK)
                for _ in range(0, self.size, _CHUNK):
                    file.write(zeros)
                file.flush()
                os.fsync(file.fileno())
        except OSError as exc:
            self.path.unlink(missing_ok=True)
            log.info("disk_reserve_unavailable", path=str(self.path), error=exc.strerror)
            return False
        return True

    def release(self) -> bool:
        """Give the space back; False when there was none held."""
        try:
            self.path.unlink()
        except OSError:  # gone already, or not ours to remove
            return False
        return True
