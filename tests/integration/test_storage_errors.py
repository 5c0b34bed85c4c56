"""SQLite's own errors, met for real, sorted by their result code into what each calls for."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from runtime.storage_errors import (
    StorageTrouble,
    classify_storage_error,
    is_passing_storage_error,
)


def not_a_database(path: Path) -> None:
    path.write_bytes(b"this is not SQLite" * 100)
    with closing(sqlite3.connect(path)) as db:
        db.execute("SELECT * FROM sqlite_master").fetchall()


def locked(path: Path) -> None:
    with closing(sqlite3.connect(path)) as holder, closing(sqlite3.connect(path, timeout=0)) as db:
        holder.execute("BEGIN EXCLUSIVE")
        db.execute("SELECT * FROM sqlite_master").fetchall()


def full(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE t (v BLOB)")
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count = {pages}")
        db.execute("INSERT INTO t VALUES (?)", (b"x" * 100_000,))


def a_directory_in_the_way(path: Path) -> None:
    path.mkdir()
    sqlite3.connect(path)


@pytest.mark.parametrize(
    ("meet", "trouble"),
    [
        (not_a_database, StorageTrouble.DAMAGE),
        (locked, StorageTrouble.BUSY),
        (full, StorageTrouble.PASSING),
        (a_directory_in_the_way, StorageTrouble.UNUSABLE),
    ],
)
def test_an_error_sqlite_raises_is_sorted_by_its_result_code(
    tmp_path: Path, meet: Callable[[Path], None], trouble: StorageTrouble
) -> None:
    with pytest.raises(sqlite3.Error) as met:
        meet(tmp_path / "file.db")
    assert classify_storage_error(met.value) is trouble
    assert is_passing_storage_error(met.value) == (trouble is StorageTrouble.PASSING)


def test_the_message_alone_decides_nothing() -> None:
    # Raised by Python's module, not by SQLite: no result code, whatever it says.
    worded_like_a_full_disk = sqlite3.OperationalError("database or disk is full")
    assert classify_storage_error(worded_like_a_full_disk) is StorageTrouble.UNUSABLE
    assert not is_passing_storage_error(worded_like_a_full_disk)


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EDQUOT, errno.EIO])
def test_a_full_or_failing_disk_met_outside_sqlite_passes(number: int) -> None:
    assert is_passing_storage_error(OSError(number, "from the kernel"))
    assert not is_passing_storage_error(OSError(errno.EACCES, "permission denied"))
