"""The collector's state store: what survives a restart, and what a broken file becomes."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from collector.snapshots import SNAPSHOT_PART_BYTES, snapshot_parts
from collector.state import DEFERRED_ROWS, PodMemos, StateStore
from runtime import sqlite_file
from tests.state_schema_2 import create_schema_2


def fill(store: StateStore) -> None:
    store.produced.add("deployments", "shop/web", ("deployment", "shop/web"), b"kept")
    store.produced.add("replicasets", "shop/web-1", ("revision", "shop/web-1"), None)
    store.sent.set(("deployment", "shop/web"), b"f" * 16)
    store.pods.set("shop/web-1-x", b"memo", replicaset="shop/web-1", failing=True)
    store.commit()


def test_what_was_committed_is_there_after_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = StateStore(path)
    fill(store)
    store.produced.add("deployments", "shop/uncommitted", ("deployment", "shop/x"), None)
    store.close()  # without a commit: that last row belongs to no completed flush

    again = StateStore(path)
    assert again.quarantined is None
    assert again.sent.get(("deployment", "shop/web")) == b"f" * 16
    assert again.produced.kept("deployments", "shop/web") == [("deployment", "shop/web", b"kept")]
    assert again.produced.keys_of_kind("deployment") == ["shop/web"]
    assert again.pods.get("shop/web-1-x") == b"memo"
    assert again.pods.counts("shop/web-1") == (1, 1)
    assert again.produced.missing("deployments", {"shop/other"}) == {"shop/web"}


def test_forget_all_empties_every_table_but_keeps_the_marks(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.sqlite")
    fill(store)
    store.set_mark("lease_transitions", "3")
    store.forget_all()
    # The Lease mark says whose store this is; a term that starts over still wrote it.
    assert store.get_mark("lease_transitions") == "3"
    assert store.sent.get(("deployment", "shop/web")) is None
    assert store.produced.keys_of_kind("deployment") == []
    assert store.pods.keys() == set()


def test_a_file_that_is_not_a_database_is_moved_aside_with_its_companions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite"
    path.write_bytes(b"this is not SQLite" * 100)
    path.with_name("state.sqlite-wal").write_bytes(b"stale")
    store = StateStore(path)
    assert store.quarantined is not None and store.quarantined.read_bytes().startswith(b"this")
    moved_wal = store.quarantined.with_name(store.quarantined.name + "-wal")
    assert moved_wal.read_bytes() == b"stale"  # it belonged to the broken file
    assert store.produced.keys_of_kind("deployment") == []  # a fresh, working store
    fill(store)


def test_a_store_of_another_schema_version_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    fill(StateStore(path))
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    store = StateStore(path)
    assert store.quarantined is None
    assert store.sent.get(("deployment", "shop/web")) is None
    fill(store)


def records(store: StateStore) -> int:
    """How many rows describe records (one per (kind, key))."""
    ((count,),) = store.rows("SELECT COUNT(*) FROM records")
    return int(count)  # type: ignore[call-overload]


def test_a_store_of_schema_2_is_migrated_in_place_with_every_record_it_remembered(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite"
    with closing(create_schema_2(path)) as db:
        db.executescript(
            """
            INSERT INTO produced
                VALUES ('deployments', 'shop/web', 'deployment', 'shop/web', x'01');
            INSERT INTO produced
                VALUES ('replicasets', 'shop/web-1', 'revision', 'shop/web-1', NULL);
            INSERT INTO sent VALUES ('deployment', 'shop/web', x'ff');
            INSERT INTO sent VALUES ('cluster_metadata', 'cluster', x'ee');
            INSERT INTO pods VALUES ('shop/web-1-x', 'shop/web-1', 1, x'02');
            INSERT INTO event_series VALUES ('shop/oom.1', 'shop/Pod/web-1-x/-/OOMKilled');
            INSERT INTO meta VALUES ('lease_transitions', '3');
            INSERT INTO held VALUES ('deployments', 'shop/held', x'03');
            """
        )
        db.commit()

    store = StateStore(path)
    assert store.quarantined is None
    assert records(store) == 3  # one row per record, produced or sent or both
    assert store.produced.kept("deployments", "shop/web") == [("deployment", "shop/web", b"\x01")]
    assert store.produced.keys_of_kind("revision") == ["shop/web-1"]
    assert store.produced.keys_of_kind("cluster_metadata") == []  # sent, produced by none
    assert store.sent.get(("deployment", "shop/web")) == b"\xff"
    assert store.sent.get(("revision", "shop/web-1")) is None
    assert store.sent.get(("cluster_metadata", "cluster")) == b"\xee"
    assert store.pods.counts("shop/web-1") == (1, 1)
    assert store.events.known("shop/oom.1")
    assert store.get_mark("lease_transitions") == "3"
    assert store.held.pop_many("deployments", ["shop/held"]) == {}  # one term's, never carried
    ((held,),) = store.rows("SELECT sql FROM sqlite_master WHERE name = 'held'")
    assert "WITHOUT ROWID" not in str(held)  # its rows are large
    store.close()
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (3,)
        assert sqlite_file.tables(db) == [
            "deployment_templates",
            "event_series",
            "held",
            "meta",
            "pods",
            "records",
            "replicasets",
        ]


def test_a_migration_that_fails_midway_leaves_the_schema_2_file_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite"
    with closing(create_schema_2(path)) as db:
        db.execute("INSERT INTO sent VALUES ('deployment', 'shop/web', x'ff')")
        # A produced table the copy cannot read: the migration fails after its first steps.
        db.execute("DROP TABLE produced")
        db.execute("CREATE TABLE produced (source TEXT, source_key TEXT, kind TEXT, key TEXT)")
        db.commit()
    with pytest.raises(sqlite3.OperationalError):
        StateStore(path)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (2,)
        assert "records" not in sqlite_file.tables(db)
        assert db.execute("SELECT * FROM sent").fetchall() == [("deployment", "shop/web", b"\xff")]


def test_a_store_of_schema_2_without_its_tables_is_emptied_not_migrated(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE produced (source TEXT)")
        db.execute("PRAGMA user_version = 2")
    store = StateStore(path)
    fill(store)
    assert store.sent.get(("deployment", "shop/web")) == b"f" * 16


def test_a_record_s_one_row_lives_from_produced_to_its_enqueued_delete() -> None:
    store = StateStore()
    web, metadata = ("deployment", "shop/web"), ("cluster_metadata", "cluster")
    store.produced.add("deployments", "shop/web", web, b"kept")
    store.sent.set(web, b"f" * 16)
    store.produced.add("deployments", "shop/web", web, b"rebuilt")  # rebuilt: still sent
    assert store.sent.get(web) == b"f" * 16
    store.sent.set(metadata, b"m" * 16)  # produced by no object
    assert records(store) == 2

    # Gone: no longer produced, but its fingerprint waits for its delete to be enqueued.
    assert store.produced.pop("deployments", "shop/web") == [web]
    assert store.produced.keys_of_kind("deployment") == []
    assert store.produced.kept("deployments", "shop/web") == []
    assert store.sent.get(web) == b"f" * 16
    store.sent.discard_many([web])
    assert store.sent.get(web) is None
    assert records(store) == 1

    # Never enqueued: its delete goes out all the same, and takes the row.
    new = ("deployment", "shop/new")
    store.produced.add("deployments", "shop/new", new, None)
    assert store.produced.pop("deployments", "shop/new") == [new]
    store.sent.discard_many([new])
    assert records(store) == 1

    # Produced again before the delete was enqueued: the row stays, without a fingerprint.
    store.produced.add("deployments", "shop/web", web, None)
    store.sent.set(web, b"f" * 16)
    store.produced.pop("deployments", "shop/web")
    store.produced.add("deployments", "shop/web", web, None)
    store.sent.discard_many([web])
    assert store.produced.keys_of_kind("deployment") == ["shop/web"]
    assert store.sent.get(web) is None


def test_forgetting_fingerprints_keeps_what_objects_produced_and_drops_the_rest() -> None:
    store = StateStore()
    web, svc = ("deployment", "shop/web"), ("service", "shop/web")
    store.produced.add("deployments", "shop/web", web, None)
    store.produced.add("services", "shop/web", svc, None)
    store.sent.set_many([(web, b"f" * 16), (svc, b"s" * 16), (("cluster_metadata", "c"), b"m")])
    store.sent.clear("service")
    assert store.sent.get(svc) is None
    assert store.sent.get(web) == b"f" * 16
    store.sent.clear()
    assert store.sent.get_many([web, svc, ("cluster_metadata", "c")]) == {}
    assert store.produced.keys_of_kind("deployment") == ["shop/web"]
    assert store.produced.keys_of_kind("service") == ["shop/web"]
    assert records(store) == 2


def test_held_objects_are_taken_out_many_at_a_time_and_only_once() -> None:
    store = StateStore()
    for name in ("a", "b", "c"):
        store.held.put("deployments", f"shop/{name}", name.encode())
    store.held.put("replicasets", "shop/a", b"rs")  # another source's, under the same key
    taken = store.held.pop_many("deployments", ["shop/a", "shop/c", "shop/never-held"])
    assert taken == {"shop/a": b"a", "shop/c": b"c"}
    assert store.held.pop_many("deployments", ["shop/a", "shop/c"]) == {}
    assert store.held.missing("deployments", frozenset()) == {"shop/b"}
    assert store.held.pop_many("replicasets", ["shop/a"]) == {"shop/a": b"rs"}
    assert store.held.pop_many("deployments", []) == {}


class _CountedConnection:
    """The store's connection, counting the statements run through it."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.statements: list[str] = []

    def execute(self, sql: str, *parameters: object) -> sqlite3.Cursor:
        self.statements.append(sql)
        return self._db.execute(sql, *parameters)

    def executemany(self, sql: str, rows: object) -> sqlite3.Cursor:
        self.statements.append(sql)
        return self._db.executemany(sql, rows)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)


def test_held_objects_and_produced_rows_are_written_many_per_statement_and_seen_in_order(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state.sqlite")
    counted = _CountedConnection(store._db)
    store._db = counted  # type: ignore[assignment]
    for n in range(1000):
        store.held.put("replicasets", f"shop/web-{n:04d}", b"rs")
        store.rows("SELECT value FROM meta")  # another table's statement writes none of them
    inserts = [sql for sql in counted.statements if sql.startswith("INSERT")]
    assert 1000 // DEFERRED_ROWS <= len(inserts) <= 1000 // DEFERRED_ROWS + 1
    # Whatever names the table sees every write before it, in order.
    assert store.held.pop_many("replicasets", ["shop/web-0999"]) == {"shop/web-0999": b"rs"}
    store.held.put("replicasets", "shop/web-0999", b"again")
    assert store.held.missing("replicasets", frozenset()) == {
        f"shop/web-{n:04d}" for n in range(1000)
    }
    store.produced.add("deployments", "shop/web", ("deployment", "shop/web"), b"v1")
    assert store.produced.kept("deployments", "shop/web") == [("deployment", "shop/web", b"v1")]
    store.produced.add("deployments", "shop/web", ("deployment", "shop/web"), b"v2")
    assert store.produced.pop("deployments", "shop/web") == [("deployment", "shop/web")]
    store.produced.add("deployments", "shop/api", ("deployment", "shop/api"), b"v1")
    store.commit()
    store.close()
    reopened = StateStore(tmp_path / "state.sqlite")
    assert reopened.produced.keys_of_kind("deployment") == ["shop/api"]
    assert reopened.produced.kept("deployments", "shop/api") == [("deployment", "shop/api", b"v1")]


def test_deferred_writes_go_with_a_rollback_and_before_a_forget(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.sqlite")
    fill(store)
    store.produced.add("deployments", "shop/later", ("deployment", "shop/later"), b"later")
    store.forget_all()  # what was produced before it is forgotten with the rest
    assert store.produced.keys_of_kind("deployment") == []
    store.produced.add("deployments", "shop/undone", ("deployment", "shop/undone"), b"x")
    store.held.put("deployments", "shop/undone", b"held")
    (pages,) = store.rows("PRAGMA page_count")[0]
    store.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(sqlite3.OperationalError, match="full"):
        for number in range(500):
            store.sent.set(("pod", f"p{number}"), b"x" * 200)
    assert store.rolled_back
    store.execute("PRAGMA max_page_count = 1073741823")
    assert store.probe_writable()
    store.commit()
    assert store.produced.keys_of_kind("deployment") == []
    assert store.held.pop_many("deployments", ["shop/undone"]) == {}


def test_snapshot_parts_stay_under_the_byte_budget_and_keep_every_key() -> None:
    keys = [f"namespace-{n:05d}/deployment-with-a-long-name-{n:05d}" for n in range(20_000)]
    parts = snapshot_parts(keys)
    assert len(parts) > 1
    assert [key for part in parts for key in part] == keys
    assert all(sum(len(k) + 3 for k in part) <= SNAPSHOT_PART_BYTES for part in parts)
    assert snapshot_parts([]) == [[]]  # no objects left: one empty part says so


def test_a_full_disk_rolls_the_store_back_to_its_last_commit_until_a_probe_goes_through(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state.sqlite")
    fill(store)
    store.produced.add("deployments", "shop/before", ("deployment", "shop/before"), None)
    (pages,) = store.rows("PRAGMA page_count")[0]
    store.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: SQLITE_FULL
    try:
        for number in range(500):
            store.produced.add("pods", f"shop/p{number}", ("pod", f"p{number}"), b"x" * 200)
    except sqlite3.OperationalError as exc:
        assert "full" in str(exc)
    else:
        raise AssertionError("the store never ran out of pages")
    # Neither what came before the failure in its transaction nor after it: the last commit.
    assert store.rolled_back
    assert store.produced.keys_of_kind("pod") == []
    assert store.produced.keys_of_kind("deployment") == ["shop/web"]

    store.execute("PRAGMA max_page_count = 1073741823")
    store.produced.add("pods", "shop/after", ("pod", "after"), None)  # dropped by the probe
    assert store.probe_writable()
    assert not store.rolled_back
    assert store.produced.keys_of_kind("pod") == []
    assert store.sent.get(("deployment", "shop/web")) == b"f" * 16


def test_a_list_of_pods_costs_a_statement_per_round_of_memos_not_two_per_pod() -> None:
    store = StateStore()
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    keys = [f"shop/web-{n:04d}" for n in range(1000)]
    for key in keys:  # a first list: nothing remembered yet
        assert store.pods.get(key) is None
        store.pods.set(key, b"healthy", replicaset="shop/web", failing=False)
    store.commit()
    first = len(statements)
    statements.clear()
    for key in keys:  # the list again after a restart: every memo is there
        assert store.pods.get(key) == b"healthy"
        store.pods.set(key, b"failing", replicaset="shop/web", failing=True)
    store.commit()
    assert store.pods.counts("shop/web") == (1000, 1000)
    # Reads of 64 memos at a time, writes of 256 (each row of a write is traced once).
    reads = [sql for sql in statements if sql.startswith("SELECT key, memo")]
    assert first < 1000 + 50 and len(reads) <= 1000 // PodMemos.READ_AHEAD + 5
    # What is read ahead stays a round's worth, never the whole list.
    assert len(store.pods._ahead) <= PodMemos.READ_AHEAD + PodMemos.WRITE_BEHIND


def test_memos_not_yet_written_go_with_a_full_disk_s_rollback(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.sqlite")
    fill(store)
    store.pods.set("shop/web-1-y", b"later", replicaset="shop/web-1", failing=False)
    store.pods.discard("shop/web-1-x")
    (pages,) = store.rows("PRAGMA page_count")[0]
    store.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(sqlite3.OperationalError, match="full"):
        for number in range(500):
            store.produced.add("pods", f"shop/p{number}", ("pod", f"p{number}"), b"x" * 200)
    assert store.rolled_back
    # As last committed: the discard and the later memo were undone with the rest.
    assert store.pods.get("shop/web-1-x") == b"memo"
    assert store.pods.get("shop/web-1-y") is None
    store.execute("PRAGMA max_page_count = 1073741823")
    store.pods.set("shop/web-1-z", b"after", replicaset="shop/web-1", failing=True)
    assert store.probe_writable()  # what came since the rollback goes too
    store.commit()
    assert store.pods.get("shop/web-1-z") is None
    assert store.pods.counts("shop/web-1") == (1, 1)


POD_KEYS = st.sampled_from([f"shop/p{n}" for n in range(6)])
REPLICASETS = st.sampled_from(["shop/a", "shop/b"])


class PodMemosMachine(RuleBasedStateMachine):
    """The memos read ahead and written behind answer as a table written at once would,
    across commits, reopens and starting over (small rounds, so they turn over often)."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="pod-memos-"))
        self.rounds = (PodMemos.READ_AHEAD, PodMemos.WRITE_BEHIND)
        PodMemos.READ_AHEAD, PodMemos.WRITE_BEHIND = 3, 4
        self.store = StateStore(self.directory / "state.sqlite")
        self.now: dict[str, tuple[str, bool, bytes]] = {}
        self.committed: dict[str, tuple[str, bool, bytes]] = {}

    def teardown(self) -> None:
        PodMemos.READ_AHEAD, PodMemos.WRITE_BEHIND = self.rounds
        self.store.close()
        shutil.rmtree(self.directory)

    @rule(key=POD_KEYS, replicaset=REPLICASETS, failing=st.booleans(), memo=st.binary(max_size=3))
    def remember(self, key: str, replicaset: str, failing: bool, memo: bytes) -> None:
        self.store.pods.set(key, memo, replicaset=replicaset, failing=failing)
        self.now[key] = (replicaset, failing, memo)

    @rule(key=POD_KEYS)
    def discard(self, key: str) -> None:
        self.store.pods.discard(key)
        self.now.pop(key, None)

    @rule(key=POD_KEYS)
    def ask(self, key: str) -> None:
        expected = self.now.get(key)
        assert self.store.pods.get(key) == (None if expected is None else expected[2])

    @rule(replicaset=REPLICASETS)
    def counts(self, replicaset: str) -> None:
        rows = [row for row in self.now.values() if row[0] == replicaset]
        assert self.store.pods.counts(replicaset) == (sum(r[1] for r in rows), len(rows))

    @rule(present=st.sets(POD_KEYS))
    def missing(self, present: set[str]) -> None:
        assert self.store.pods.missing(present) == set(self.now) - present

    @rule()
    def commit(self) -> None:
        self.store.commit()
        self.committed = dict(self.now)

    @rule()
    def reopen(self) -> None:
        self.store.close()  # without a commit: what came after the last one is gone
        self.store = StateStore(self.directory / "state.sqlite")
        self.now = dict(self.committed)

    @rule()
    def forget_all(self) -> None:
        self.store.forget_all()
        self.now, self.committed = {}, {}


TestPodMemosAgainstATable = PodMemosMachine.TestCase
TestPodMemosAgainstATable.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None, database=None
)


def test_pods_asked_in_no_order_are_read_one_at_a_time() -> None:
    store = StateStore()
    for n in range(200):
        store.pods.set(f"shop/web-{n:04d}", b"memo", replicaset="shop/web", failing=False)
    store.commit()
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    for n in (150, 3, 120, 7, 199, 0, 88, 42):  # as a watch's events come
        assert store.pods.get(f"shop/web-{n:04d}") == b"memo"
    reads = [sql for sql in statements if sql.startswith("SELECT key, memo")]
    assert len(reads) == 8 and all(sql.endswith("LIMIT 1") for sql in reads)
