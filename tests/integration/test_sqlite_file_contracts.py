"""What every SQLite file the agent keeps guarantees, held against each store that keeps one.

The outbox, the collector's state and the scaling store open their files through
`runtime.sqlite_file`; one fixture runs the same tests against each (damage, another
schema, a zero-length file, a journal without its database, a lock, a full disk, a file
that cannot be opened, the durability each store declares). Where stores differ by design
(a file of another schema is refused, moved aside or emptied), the test reads the store's
declared `FileKind` and holds it to that.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from collector.state import STATE_FILE, StateStore
from runtime import sqlite_file
from runtime.sqlite_file import FileKind, Foreign, UnusableFile
from runtime.storage_errors import StorageTrouble, classify_storage_error
from scheduler.store import FILE_NAME as SCALING_STORE_FILE
from scheduler.store import STORE_FILE, PendingRestore, Store
from shipper import queuefile
from shipper.outbox import Outbox
from shipper.records import DISCOVERY, Entry, RecordClass
from tests.waiting import wait_until

PAGE = sqlite_file.PAGE_SIZE


class Opened(Protocol):
    """One store, open on its file."""

    def write(self) -> None:
        """Commit one row the store reads back with `written`."""

    def written(self) -> bool: ...

    def connection(self) -> sqlite3.Connection:
        """The store's own connection to its file."""

    def write_until_refused(self, count: int) -> None:
        """Commit `count` rows of a few KB each, one after another."""

    def close(self) -> None: ...


class OpenOutbox:
    PROBE = b'{"id": "probe"}'

    def __init__(self, directory: Path) -> None:
        self.box = Outbox(directory, streams=(DISCOVERY,))
        self.stream = self.box[DISCOVERY]

    def write(self) -> None:
        self.stream.dead_letter([Entry(RecordClass.UPSERT, self.PROBE)], status=400, response="")

    def written(self) -> bool:
        letters = queuefile.read_dead_letters(self.stream._db)
        return any(letter.record == self.PROBE for letter in letters)

    def connection(self) -> sqlite3.Connection:
        return self.stream._db

    def write_until_refused(self, count: int) -> None:
        for n in range(count):
            body = b'{"id": "r-%d", "pad": "%s"}' % (n, b"x" * 4000)
            self.stream.dead_letter([Entry(RecordClass.UPSERT, body)], status=400, response="")

    def close(self) -> None:
        self.box.close()


class OpenState:
    def __init__(self, directory: Path) -> None:
        self.store = StateStore(directory / "collector-state.sqlite")

    def write(self) -> None:
        self.store.set_mark("probe", "1")

    def written(self) -> bool:
        return self.store.get_mark("probe") == "1"

    def connection(self) -> sqlite3.Connection:
        return self.store._db

    def write_until_refused(self, count: int) -> None:
        for n in range(count):
            self.store.produced.add("pods", f"shop/p{n}", ("pod", f"p{n}"), b"x" * 4000)
            self.store.commit()

    def close(self) -> None:
        self.store.close()


class OpenScalingStore:
    def __init__(self, directory: Path) -> None:
        self.store = Store(directory / SCALING_STORE_FILE)

    def write(self) -> None:
        self.store.add_restore(PendingRestore("shop", "web", 3, None))

    def written(self) -> bool:
        return self.store.restore_of("shop", "web") is not None

    def connection(self) -> sqlite3.Connection:
        return self.store._db

    def write_until_refused(self, count: int) -> None:
        for n in range(count):
            self.store.add_restore(PendingRestore("shop", f"web-{n}-{'x' * 4000}", 3, None))

    def close(self) -> None:
        self.store.close()


@dataclass(frozen=True)
class StoreUnderTest:
    file_name: str
    kind: FileKind
    open: Callable[[Path], Opened]


STORES = {
    "outbox": StoreUnderTest(f"{DISCOVERY}.db", queuefile.QUEUE_FILE, OpenOutbox),
    "collector state": StoreUnderTest("collector-state.sqlite", STATE_FILE, OpenState),
    "scaling store": StoreUnderTest(SCALING_STORE_FILE, STORE_FILE, OpenScalingStore),
}


@pytest.fixture(params=list(STORES))
def store(request: pytest.FixtureRequest) -> StoreUnderTest:
    return STORES[request.param]


@pytest.fixture
def opened(store: StoreUnderTest, tmp_path: Path) -> Iterator[Callable[[], Opened]]:
    """Opens the store on `tmp_path` (as often as the test asks), closing each at the end."""
    stores: list[Opened] = []

    def open_store() -> Opened:
        stores.append(store.open(tmp_path))
        return stores[-1]

    yield open_store
    for each in stores:
        each.close()


def moved_aside(store: StoreUnderTest, directory: Path) -> list[Path]:
    return sorted(directory.glob(f"{store.file_name}.corrupt-*"))


def written_and_closed(opened: Callable[[], Opened]) -> None:
    first = opened()
    first.write()
    first.close()


def overwrite_pages(path: Path) -> None:
    """The header still says SQLite; every page after the first two is garbage."""
    with path.open("r+b") as file:
        file.seek(2 * PAGE)
        file.write(b"\xa5" * (path.stat().st_size - 2 * PAGE))


def not_a_database(path: Path) -> None:
    """Garbage from the first byte, and a journal beside it that belonged to the file."""
    path.write_bytes(b"this is not SQLite" * 1000)
    path.with_name(path.name + "-wal").write_bytes(b"stale")


@pytest.mark.parametrize("damage", [overwrite_pages, not_a_database])
def test_a_damaged_file_is_moved_aside_with_its_companions_and_a_fresh_one_works(
    store: StoreUnderTest,
    opened: Callable[[], Opened],
    tmp_path: Path,
    damage: Callable[[Path], None],
) -> None:
    first = opened()
    first.write()
    first.write_until_refused(8)  # pages past the first two, for the damage to land on
    first.close()
    path = tmp_path / store.file_name
    damage(path)
    damaged = path.read_bytes()

    again = opened()
    assert not again.written()
    again.write()
    assert again.written()
    [moved, *companions] = moved_aside(store, tmp_path)
    assert moved.read_bytes() == damaged
    if damage is not_a_database:
        assert [(p.name[-4:], p.read_bytes()) for p in companions] == [("-wal", b"stale")]


def test_a_file_of_another_schema_is_never_taken_for_the_store_s_own(
    store: StoreUnderTest, opened: Callable[[], Opened], tmp_path: Path
) -> None:
    path = tmp_path / store.file_name
    with closing(sqlite3.connect(path)) as db:
        with db:
            db.execute("CREATE TABLE settings (key TEXT, value TEXT)")
            db.execute("INSERT INTO settings VALUES ('owner', 'someone else')")
        db.execute("PRAGMA user_version = 99")

    if store.kind.on_foreign is Foreign.REFUSE:
        with pytest.raises(UnusableFile) as refused:
            opened()
        assert str(refused.value).startswith(f"{store.kind.name} {path} ")
        assert moved_aside(store, tmp_path) == []
        with closing(sqlite3.connect(path)) as db:  # untouched
            assert db.execute("SELECT * FROM settings").fetchall() == [("owner", "someone else")]
        return
    fresh = opened()
    assert "settings" not in sqlite_file.tables(fresh.connection())
    fresh.write()
    assert fresh.written()
    moved = moved_aside(store, tmp_path)
    if store.kind.on_foreign is Foreign.MOVE_ASIDE:
        with closing(sqlite3.connect(moved[0])) as db:
            assert db.execute("SELECT * FROM settings").fetchall() == [("owner", "someone else")]
    else:
        assert store.kind.on_foreign is Foreign.EMPTY
        assert moved == []


def test_a_zero_length_file_is_moved_aside_and_a_fresh_one_works(
    store: StoreUnderTest, opened: Callable[[], Opened], tmp_path: Path
) -> None:
    written_and_closed(opened)
    (tmp_path / store.file_name).write_bytes(b"")
    fresh = opened()
    assert not fresh.written()
    fresh.write()
    assert fresh.written()
    [moved] = moved_aside(store, tmp_path)
    assert moved.stat().st_size == 0


def test_a_journal_left_without_its_database_is_moved_aside_not_replayed(
    store: StoreUnderTest, opened: Callable[[], Opened], tmp_path: Path
) -> None:
    path = tmp_path / store.file_name
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).write_bytes(b"left by a crash")
    fresh = opened()
    fresh.write()
    assert fresh.written()
    moved = moved_aside(store, tmp_path)
    assert sorted(p.name[-4:] for p in moved) == ["-shm", "-wal"]
    assert all(p.read_bytes() == b"left by a crash" for p in moved)


def test_a_locked_file_is_waited_for_then_opened_and_refused_once_the_wait_is_over(
    store: StoreUnderTest,
    opened: Callable[[], Opened],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written_and_closed(opened)
    blocker = sqlite3.connect(tmp_path / store.file_name, timeout=0)
    blocker.execute("PRAGMA locking_mode = EXCLUSIVE")  # readers wait too, even in WAL mode
    blocker.execute("BEGIN EXCLUSIVE")
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_file, "BUSY_TIMEOUT_SECONDS", 0.05)
        with pytest.raises(UnusableFile, match="locked") as refused:
            opened()
        assert str(refused.value).startswith(f"cannot open {store.kind.name} ")

    connecting = threading.Event()
    connect = sqlite_file._connection

    def noticed(path: Path) -> sqlite3.Connection:
        connecting.set()
        return connect(path)

    monkeypatch.setattr(sqlite_file, "_connection", noticed)
    found: list[Opened] = []
    opener = threading.Thread(target=lambda: found.append(opened()))
    opener.start()
    wait_until(connecting.is_set)
    blocker.rollback()  # the lock goes while the store is opening: it waits, then opens
    blocker.close()
    opener.join()
    assert found and found[0].written()
    assert moved_aside(store, tmp_path) == []


def test_a_full_disk_is_a_passing_error_and_the_file_is_kept(
    store: StoreUnderTest, opened: Callable[[], Opened], tmp_path: Path
) -> None:
    first = opened()
    first.write()
    conn = first.connection()
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: SQLITE_FULL
    with pytest.raises(sqlite3.Error) as full:
        first.write_until_refused(100)
    assert classify_storage_error(full.value) is StorageTrouble.PASSING
    first.close()
    again = opened()
    assert again.written()
    assert moved_aside(store, tmp_path) == []


def test_a_file_that_cannot_be_opened_stops_start_up_in_one_line_and_is_kept(
    store: StoreUnderTest, opened: Callable[[], Opened], tmp_path: Path
) -> None:
    path = tmp_path / store.file_name
    path.mkdir()  # what a permission or mount problem looks like to SQLite
    with pytest.raises(UnusableFile) as refused:
        opened()
    message = str(refused.value)
    assert message.startswith(f"cannot open {store.kind.name} {path}: ") and "\n" not in message
    assert path.is_dir()
    assert moved_aside(store, tmp_path) == []


def test_each_connection_keeps_the_durability_its_store_declares(
    store: StoreUnderTest, opened: Callable[[], Opened]
) -> None:
    conn = opened().connection()
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    synchronous = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    (level,) = conn.execute("PRAGMA synchronous").fetchone()
    assert synchronous[level] == store.kind.durability.value


def test_a_deleted_row_s_pages_are_freed_without_being_written_again(
    opened: Callable[[], Opened],
) -> None:
    conn = opened().connection()
    conn.execute("CREATE TABLE scratch (b BLOB)")
    conn.execute("INSERT INTO scratch VALUES (randomblob(1048576))")
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("DELETE FROM scratch")
    conn.commit()
    (path,) = (row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main")
    # Zeroing each freed overflow page would write all 64 of them to the WAL again.
    assert Path(path + "-wal").stat().st_size < 8 * PAGE


def test_a_new_file_has_the_agent_s_page_size_and_one_made_before_keeps_its_own(
    store: StoreUnderTest,
    opened: Callable[[], Opened],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert opened().connection().execute("PRAGMA page_size").fetchone() == (PAGE,)
    # A file an earlier release made with SQLite's default page size: opened, read, written.
    older = tmp_path / "older"
    older.mkdir()
    with monkeypatch.context() as before:
        before.setattr(sqlite_file, "PAGE_SIZE", 4096)
        first = store.open(older)
        first.write()
        first.close()
    again = store.open(older)
    try:
        assert again.connection().execute("PRAGMA page_size").fetchone() == (4096,)
        assert again.written()
        again.write_until_refused(3)
    finally:
        again.close()
    assert moved_aside(store, older) == []
