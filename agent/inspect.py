"""`moonin-agent queue ...`: look into a queue directory without disturbing its owner.

Every file is opened read-only through SQLite (never as a persist-queue queue, which would
reset the running agent's in-flight rows), so these commands are safe beside a live agent.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import msgspec

from shipper import queuefile
from shipper.queuefile import QueueFileError, StreamStats
from shipper.records import STREAMS

T = TypeVar("T")


class InspectError(Exception):
    """The directory or a file in it cannot be read; the CLI prints it and exits 2."""


def _stream_file(queue_dir: Path, stream: str) -> Path:
    return queue_dir / f"{stream}.db"


def _check_directory(queue_dir: Path) -> None:
    if not queue_dir.is_dir():
        raise InspectError(f"queue directory {queue_dir} does not exist or is not a directory")
    try:
        next(iter(queue_dir.iterdir()), None)
    except OSError as exc:
        raise InspectError(f"queue directory {queue_dir} cannot be read: {exc.strerror}") from exc


def _open(queue_dir: Path, stream: str) -> sqlite3.Connection | None:
    path = _stream_file(queue_dir, stream)
    if not path.exists():
        return None  # this role never used the stream
    try:
        return queuefile.open_readonly(path)
    except QueueFileError as exc:
        raise InspectError(str(exc)) from exc


def _streams(stream: str | None) -> tuple[str, ...]:
    return STREAMS if stream is None else (stream,)


def stats(queue_dir: Path, stream: str | None = None) -> dict[str, StreamStats]:
    _check_directory(queue_dir)
    result: dict[str, StreamStats] = {}
    for name in _streams(stream):
        conn = _open(queue_dir, name)
        if conn is None:
            result[name] = queuefile.summarise([], dead_letters=0, dropped=0, resync_needed=False)
            continue
        with closing(conn):
            result[name] = _read(conn, queuefile.stream_stats, name)
    return result


def peek(queue_dir: Path, stream: str | None = None, limit: int | None = None) -> Iterator[bytes]:
    """Queued records, oldest first, exactly as they will be sent (JSON)."""
    _check_directory(queue_dir)
    shown = 0
    for name in _streams(stream):
        conn = _open(queue_dir, name)
        if conn is None:
            continue
        with closing(conn):
            chunks = _read(conn, lambda c: list(queuefile.scan_chunks(c)), name)
        for stored in chunks:
            for entry in stored.chunk.entries if stored.chunk else ():
                if limit is not None and shown >= limit:
                    return
                shown += 1
                yield entry.body


class DeadLetterLine(msgspec.Struct):
    stream: str
    status: int | None
    response: str
    dead_lettered_at: str
    record: msgspec.Raw


def dead_letters(
    queue_dir: Path, stream: str | None = None, limit: int | None = None
) -> Iterator[bytes]:
    """One JSON line per dead-lettered record, with the status and answer that put it there."""
    _check_directory(queue_dir)
    shown = 0
    for name in _streams(stream):
        conn = _open(queue_dir, name)
        if conn is None:
            continue
        with closing(conn):
            letters = _read(conn, queuefile.read_dead_letters, name)
        for letter in letters:
            if limit is not None and shown >= limit:
                return
            shown += 1
            yield msgspec.json.encode(
                DeadLetterLine(
                    stream=name,
                    status=letter.status,
                    response=letter.response,
                    dead_lettered_at=datetime.fromtimestamp(letter.dead_lettered_at, UTC)
                    .isoformat(timespec="seconds")
                    .replace("+00:00", "Z"),
                    record=msgspec.Raw(_as_json(letter.record)),
                )
            )


def _as_json(body: bytes) -> bytes:
    try:
        msgspec.json.decode(body)
    except msgspec.DecodeError:
        return msgspec.json.encode(body.decode("utf-8", errors="replace"))  # keep it one line
    return body


def _read(conn: sqlite3.Connection, reader: Callable[[sqlite3.Connection], T], stream: str) -> T:
    try:
        return reader(conn)
    except sqlite3.Error as exc:
        raise InspectError(f"cannot read the {stream} queue: {exc}") from exc
