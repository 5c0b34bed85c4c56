"""`moonin-agent queue ...`: look into a queue directory without disturbing its owner.

Every file is opened read-only through SQLite (never as a persist-queue queue, which would
reset the running agent's in-flight rows), so these commands are safe beside a live agent.
A file whose persist-queue table is not the one `shipper.queueschema` describes is refused
with `InspectError`, not shown as empty.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Iterable, Iterator
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


def _check_directory(queue_dir: Path) -> None:
    if not queue_dir.is_dir():
        raise InspectError(f"queue directory {queue_dir} does not exist or is not a directory")
    try:
        next(iter(queue_dir.iterdir()), None)
    except OSError as exc:
        raise InspectError(f"queue directory {queue_dir} cannot be read: {exc.strerror}") from exc


def _open(queue_dir: Path, stream: str) -> sqlite3.Connection | None:
    path = queuefile.stream_path(queue_dir, stream)
    if not path.exists():
        return None
    try:
        return queuefile.open_readonly(path)
    except QueueFileError as exc:
        raise InspectError(str(exc)) from exc


def _streams(stream: str | None) -> tuple[str, ...]:
    return STREAMS if stream is None else (stream,)


def _each_stream(
    queue_dir: Path, stream: str | None, rows: Callable[[sqlite3.Connection], Iterable[T]]
) -> Iterator[tuple[str, T]]:
    """(stream, row) for every row `rows` reads, stream by stream, reading lazily."""
    _check_directory(queue_dir)
    for name in _streams(stream):
        conn = _open(queue_dir, name)
        if conn is None:
            continue  # this role never used the stream
        with closing(conn):
            try:
                for row in rows(conn):
                    yield name, row
            except sqlite3.Error as exc:
                raise InspectError(f"cannot read the {name} queue: {exc}") from exc


def stats(queue_dir: Path, stream: str | None = None) -> dict[str, StreamStats]:
    empty = queuefile.summarise([], dead_letters=0, dropped=0, resync_needed=False)
    result = dict.fromkeys(_streams(stream), empty)
    for name, figures in _each_stream(queue_dir, stream, lambda c: [queuefile.stream_stats(c)]):
        result[name] = figures
    return result


def peek(queue_dir: Path, stream: str | None = None, limit: int | None = None) -> Iterator[bytes]:
    """Queued records, oldest first, exactly as they will be sent (JSON)."""
    bodies = (
        entry.body
        for _, stored in _each_stream(queue_dir, stream, queuefile.scan_chunks)
        for entry in (stored.chunk.entries if stored.chunk else ())
    )
    return itertools.islice(bodies, limit)


class DeadLetterLine(msgspec.Struct, gc=False):
    stream: str
    status: int | None
    response: str
    dead_lettered_at: str
    record: msgspec.Raw


def dead_letters(
    queue_dir: Path, stream: str | None = None, limit: int | None = None
) -> Iterator[bytes]:
    """One JSON line per dead-lettered record, with the status and answer that put it there."""
    letters = _each_stream(queue_dir, stream, queuefile.read_dead_letters)
    for name, letter in itertools.islice(letters, limit):
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
