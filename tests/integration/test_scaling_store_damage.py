"""The scaling role's files under damage: a full disk, and a local store or scaling outbox
that is truncated, emptied, deleted or of another schema. In every case nothing applied to
an HPA or a Deployment stays unreverted, no event is lost without a count, and the role
keeps running (no traceback, no exit).

A full disk is a real one (a 2 MiB tmpfs holding the queue directory, filled to the last
byte): readiness fails, the cycle holds its place, and once space is back it catches up.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import structlog

from agent.queue_inspect import stats as queue_stats
from runtime.backoff import Backoff
from runtime.health import HealthReporter
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from sandbox.scaling import manual_template
from sandbox.serving import free_port
from scheduler import annotations as notes
from scheduler.revertall import revert_all
from scheduler.store import FILE_NAME as STORE_FILE
from scheduler.store import Store
from shipper.outbox import Outbox
from shipper.records import SCALING
from tests.agent_process import agent_env, log_events, start_agent, stop_within
from tests.scaling_harness import (
    CLUSTER,
    NS,
    Harness,
    action,
    at,
    deployment,
    failing_replica_writes,
    hpa,
    make_harness,
    namespace,
    template,
)
from tests.small_volume import Volume, small_volume
from tests.waiting import wait_until

# Retries after a full disk come at once here (the role's first is within 1 s).
QUICK = Backoff(initial=1e-6, maximum=1e-6)


@pytest.fixture
def on_small_volume(kube: FakeKube, tmp_path: Path) -> Iterator[tuple[Harness, Volume]]:
    """A harness whose queue directory (outbox and store) is a 2 MiB tmpfs; its platform
    holds the daily 08:00-18:00 window with one action on `web` (4..20), which has 2
    replicas and no HPA: the window makes a provisional HPA."""
    with small_volume(tmp_path / "queue") as volume:
        harness = make_harness(kube, tmp_path)
        harness.reconciler = harness.make_reconciler(storage_backoff=QUICK)
        harness.api.templates = [template()]
        harness.api.actions = {"t-1": [action()]}
        kube.create(deployment(replicas=2))
        try:
            yield harness, volume
        finally:
            harness.close()


def replicas(h: Harness) -> int:
    value: int = h.deployment()["spec"]["replicas"]
    return value


def hpa_names(h: Harness) -> list[str]:
    return [hpa["metadata"]["name"] for hpa in h.kube.list("horizontalpodautoscalers")]


def problems(logs: list[dict[str, Any]]) -> list[str]:
    """Error-level lines and every line carrying a traceback."""
    return [
        line["event"]
        for line in logs
        if line["log_level"] in {"error", "critical"} or "exc_info" in line
    ]


# --- a full disk ---------------------------------------------------------------------------


def test_a_revert_on_a_full_disk_waits_unready_then_goes_through_once_space_is_back(
    on_small_volume: tuple[Harness, Volume],
) -> None:
    h, volume = on_small_volume
    h.run(at(9))
    assert (hpa_names(h), replicas(h)) == (["web"], 4)
    assert [event["type"] for event in h.events()] == ["apply"]

    volume.fill()
    with structlog.testing.capture_logs() as logs:
        for minute in (1, 2, 3):  # the window is over; the disk holds every try back
            h.run(at(18, minute))  # the apply cycle, with nothing to write, and the scan
    # Nothing half done: the HPA is still there and the Deployment at the window's size
    # (its revert event could not be put, so its revert was not made either).
    assert (hpa_names(h), replicas(h)) == (["web"], 4)
    health = h.reconciler.reporter.health
    assert health.unready and "storage" in (health.reason or ""), health
    assert h.reconciler.reporter.snapshot().counters["storage_errors"] >= 1
    assert problems(logs) == ["scaling_storage_unavailable"]  # one line, no traceback

    volume.free()
    wait_until(lambda: h.reconciler.revert_scan(at(18, 4)).reverts == 1)
    assert (hpa_names(h), replicas(h)) == ([], 2)
    assert h.reconciler.reporter.health.ok
    assert [(e["type"], e["reason"]) for e in h.events()] == [("revert", "expired")]
    assert h.store.restores() == []


def test_a_window_beginning_on_a_full_disk_is_applied_and_reported_once_space_is_back(
    on_small_volume: tuple[Harness, Volume],
) -> None:
    h, volume = on_small_volume
    volume.fill()
    with structlog.testing.capture_logs() as logs:
        h.run(at(9))
        h.run(at(9, 1))
    assert problems(logs) == ["scaling_storage_unavailable"]
    assert h.reconciler.reporter.health.unready

    volume.free()

    def caught_up() -> bool:
        h.run(at(9, 2))
        return h.reconciler.reporter.health.ok and replicas(h) == 4

    wait_until(caught_up)
    assert hpa_names(h) == ["web"]
    events = h.events()
    assert [(e["type"], e["min_replicas"], e["max_replicas"]) for e in events] == [("apply", 4, 20)]


# --- a local store lost --------------------------------------------------------------------


class Died(BaseException):
    """The process dies here: not an `Exception`, so no handler of the cycle catches it."""


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def empty(path: Path) -> None:
    path.write_bytes(b"")


def delete(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def older_schema(path: Path) -> None:
    """A store as another version could have left it: the same table, other columns."""
    delete(path)
    with closing(sqlite3.connect(str(path))) as db, db:
        db.execute("CREATE TABLE enqueued (id TEXT PRIMARY KEY)")


def written_by_something_else(path: Path) -> None:
    delete(path)
    with closing(sqlite3.connect(str(path))) as db, db:
        db.execute("CREATE TABLE settings (key TEXT, value TEXT)")


@pytest.mark.parametrize(
    ("damage", "lost"),
    [
        (truncate, "damaged"),
        (empty, "empty"),
        (delete, None),  # nothing says a store was ever there: the first start looks alike
        (older_schema, "foreign schema"),
        (written_by_something_else, "foreign schema"),
    ],
)
def test_a_store_lost_with_a_restore_pending_still_restores_the_deployment(
    h: Harness,
    monkeypatch: pytest.MonkeyPatch,
    damage: Callable[[Path], None],
    lost: str | None,
) -> None:
    h.kube.create(deployment(replicas=2))
    h.run(at(9))
    assert replicas(h) == 4
    # The revert deletes the provisional HPA, then dies before the replicas are restored.
    with monkeypatch.context() as patch:
        dying = failing_replica_writes(h.kube_api, Died)
        patch.setattr(h.kube_api, "patch_deployment", dying)
        with pytest.raises(Died):
            h.run(at(18, 1))
    assert (hpa_names(h), replicas(h)) == ([], 4)
    h.store.close()
    damage(h.store.path)

    with structlog.testing.capture_logs() as logs:
        reporter = HealthReporter("scheduler")
        h.store = Store(h.store.path, reporter=reporter)
        h.reconciler = h.make_reconciler(reporter=reporter)
        h.run(at(18, 2))
    assert h.store.lost == lost
    assert reporter.snapshot().counters.get("store_lost", 0) == (lost is not None)
    assert problems(logs) == (["scaling_store_lost"] if lost else [])
    assert (hpa_names(h), replicas(h)) == ([], 2)
    assert notes.RESTORE_REPLICAS not in (h.deployment()["metadata"].get("labels") or {})
    assert h.store.restores() == []
    # Every event once: the apply, and the revert put before the write it reports.
    assert [event["type"] for event in h.events()] == ["apply", "revert"]


def test_a_store_of_the_earlier_version_is_kept_and_brought_up_to_date(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with closing(sqlite3.connect(str(path))) as db, db:
        db.execute("CREATE TABLE enqueued (id TEXT PRIMARY KEY, at REAL NOT NULL)")
        db.execute("INSERT INTO enqueued VALUES ('e-1', ?)", (time.time(),))
    store = Store(path)
    try:
        assert store.lost is None and store.enqueued("e-1")
        assert store.events() == ([], 1)  # an id without its event: it cannot be put again
    finally:
        store.close()


# --- a scaling outbox lost -----------------------------------------------------------------


def garbage(path: Path) -> None:
    path.write_bytes(b"not a database" * 1000)


@pytest.mark.parametrize("damage", [truncate, garbage, empty, delete])
def test_a_scaling_outbox_lost_with_events_undelivered_gets_every_event_again(
    kube: FakeKube, tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    h = make_harness(kube, tmp_path)
    try:
        # t-2 (06:00-07:00) on `api`, which has no HPA; t-1 (08:00-18:00) on `web`'s HPA.
        h.api.templates = [template(), template("t-2", cron="0 6 * * *", duration_minutes=60)]
        h.api.actions = {"t-1": [action()], "t-2": [action("a-2", "api", 2, 3)]}
        h.kube.create(deployment(replicas=2))
        h.kube.create(hpa(low=2, high=5))
        h.kube.create(deployment("api", replicas=1))
        h.run(at(6, 30))
        h.run(at(7, 1))  # t-2's window reverted: nothing on the cluster says so any more
        h.run(at(9))
        batch = h.stream.take(max_records=100, max_bytes=1 << 20)  # taken, never delivered
        assert batch is not None
        undelivered = [msgspec.json.decode(body)["id"] for body in batch.bodies]
        assert len(undelivered) == 3
        h.outbox.close()

        damage(tmp_path / "queue" / "scaling.db")
        h.outbox = Outbox(tmp_path / "queue", streams=[SCALING])
        h.reconciler = h.make_reconciler()
        with structlog.testing.capture_logs() as logs:
            h.reconciler.revert_scan(at(9, 1))
        assert [e["id"] for e in h.events()] == undelivered
        assert h.reconciler.reporter.snapshot().counters["events_replayed"] == 3
        assert "scaling_outbox_replaced" in [line["event"] for line in logs]
        assert problems(logs) == []  # nothing was lost
        # Both windows as they were: t-2's reverted, t-1's on (`web` raised to its min).
        assert (h.deployment("api")["spec"]["replicas"], replicas(h)) == (1, 4)
        assert hpa_names(h) == ["web"] and h.hpa()["spec"]["minReplicas"] == 4
    finally:
        h.close()


def test_ids_an_earlier_store_kept_without_their_events_are_counted_when_the_outbox_is_lost(
    h: Harness,
) -> None:
    h.kube.create(deployment(replicas=2))
    h.run(at(9))
    h.outbox.close()
    h.store.close()
    # The store as the earlier version kept it: ids alone.
    with closing(sqlite3.connect(str(h.store.path))) as db, db:
        db.execute("DROP TABLE enqueued")
        db.execute("DROP TABLE meta")
        db.execute("CREATE TABLE enqueued (id TEXT PRIMARY KEY, at REAL NOT NULL)")
        db.execute("INSERT INTO enqueued VALUES ('from-before', ?)", (time.time(),))
    garbage(h.stream.path)
    h.outbox = Outbox(h.tmp / "queue", streams=[SCALING])
    h.store = Store(h.store.path)
    h.reconciler = h.make_reconciler()
    with structlog.testing.capture_logs() as logs:
        h.reconciler.revert_scan(at(9, 1))
    assert h.reconciler.reporter.snapshot().counters["events_unrecoverable"] == 1
    [line] = [line for line in logs if line["event"] == "scaling_outbox_replaced"]
    assert (line["log_level"], line["unrecoverable"]) == ("error", 1)
    # The open window's apply event, rebuilt from its HPA.
    assert [e["type"] for e in h.events()] == ["apply"]


def test_revert_all_on_its_own_queue_finishes_a_restore_the_role_left_half_done(
    h: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    h.kube.create(deployment(replicas=2))
    h.run(at(9))
    with monkeypatch.context() as patch:
        patch.setattr(h.kube_api, "patch_deployment", failing_replica_writes(h.kube_api, Died))
        with pytest.raises(Died):
            h.run(at(18, 1))
    assert (hpa_names(h), replicas(h)) == ([], 4)

    # The uninstall hook: its own queue directory, so its own (empty) store.
    hook_store = Store(tmp_path / "hook" / "scaling-state.db")
    try:
        report = revert_all(
            kube=h.kube_api, outbox=h.stream, store=hook_store, cluster_id=CLUSTER, now=at(18, 2)
        )
    finally:
        hook_store.close()
    assert report.ok
    assert replicas(h) == 2
    assert notes.RESTORE_REPLICAS not in (h.deployment()["metadata"].get("labels") or {})


# --- the scaling role as a process ---------------------------------------------------------


def readiness_at(port: int) -> tuple[int, str]:
    """/readyz's status and problems (0 while the server is not up yet)."""
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/readyz")
    except httpx.TransportError:
        return 0, ""
    return answer.status_code, " ".join(answer.json()["problems"])


@pytest.mark.e2e
def test_the_scaling_process_starts_on_a_store_of_another_schema_and_sets_it_aside(
    kube: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    written_by_something_else(queue / STORE_FILE)
    port = free_port()
    env = agent_env(platform, queue, KUBECONFIG=str(kubeconfig), HEALTH_ADDR=f"127.0.0.1:{port}")
    agent = start_agent(env, role="scaling")
    try:
        wait_until(lambda: readiness_at(port)[0] == 200 or agent.poll() is not None)
        assert agent.poll() is None
    finally:
        agent.send_signal(signal.SIGTERM)
        stderr = stop_within(agent, 30)
    assert agent.returncode == 0
    [lost] = [line for line in log_events(stderr) if line["event"] == "scaling_store_lost"]
    assert lost["how"] == "foreign schema"
    assert len(list(queue.glob(f"{STORE_FILE}.corrupt-*"))) == 1


@pytest.mark.e2e
def test_the_scaling_process_on_a_full_volume_is_unready_keeps_running_and_catches_up(
    kube: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    kube.create(namespace())
    kube.create(deployment(replicas=2))
    kube.create(hpa(low=2, high=5))
    started = datetime.now(UTC)
    platform.set_templates([manual_template(started, started + timedelta(hours=1))])
    platform.set_actions("t-1", [action()])
    port = free_port()
    queue = tmp_path / "queue"

    def readiness() -> tuple[int, str]:
        return readiness_at(port)

    def min_replicas() -> int:
        value: int = kube.get("horizontalpodautoscalers", NS, "web")["spec"]["minReplicas"]
        return value

    with small_volume(queue) as volume:
        env = agent_env(
            platform,
            queue,
            KUBECONFIG=str(kubeconfig),
            RECONCILE_INTERVAL_SECONDS="0.2",
            HEALTH_ADDR=f"127.0.0.1:{port}",
        )
        agent = start_agent(env, role="scaling")
        try:
            wait_until(lambda: min_replicas() == 4)
            # The apply event delivered and removed: the outbox has nothing left to write.
            wait_until(lambda: [e["type"] for e in platform.received_events()] == ["apply"])
            wait_until(lambda: queue_stats(queue, SCALING)[SCALING].records == 0)
            volume.fill()
            # The window ends (the platform shortens it) on a full disk: its revert waits,
            # and readiness says why.
            platform.set_templates([manual_template(started, datetime.now(UTC))])
            wait_until(
                lambda: readiness()[0] == 503 and "storage" in readiness()[1],
                30,
                explain=lambda: f"readiness {readiness()}, min replicas {min_replicas()}",
            )
            assert min_replicas() == 4
            assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            assert agent.poll() is None

            volume.free()
            wait_until(lambda: min_replicas() == 2, 30)
            wait_until(lambda: readiness() == (200, ""), 30)
            wait_until(
                lambda: [e["type"] for e in platform.received_events()] == ["apply", "revert"]
            )
        finally:
            agent.send_signal(signal.SIGTERM)
            stderr = stop_within(agent, 30)
    assert agent.returncode == 0
    assert "Traceback" not in stderr
    logged = [line["event"] for line in log_events(stderr)]
    assert logged.count("scaling_storage_unavailable") == 1


def test_a_role_refused_the_list_of_deployments_still_reverts_and_says_so_once(
    h: Harness,
) -> None:
    # A chart of the earlier version: no `list` on Deployments.
    h.kube.create(deployment(replicas=2))
    h.kube.fail_next(403, 3, resource="deployments", verb="list")
    with structlog.testing.capture_logs() as logs:
        h.run(at(9))
        h.run(at(9, 1))
        h.run(at(18, 1))
    assert (hpa_names(h), replicas(h)) == ([], 2)
    unread = [line for line in logs if line["event"] == "restore_journal_unread"]
    assert [line["log_level"] for line in unread if line["log_level"] != "debug"] == ["warning"]


def test_a_store_full_after_the_reverts_were_written_keeps_their_ids_until_it_can_commit(
    h: Harness,
) -> None:
    # Always runs (no mount): the store's own connection may not grow its file
    # (`PRAGMA max_page_count`), which SQLite reports as a full disk. The outbox, another
    # file, still takes the events: the reverts are written, then the store's commit fails.
    h.reconciler = h.make_reconciler(storage_backoff=QUICK)
    names = [f"web-{n:02d}" for n in range(20)]
    h.api.actions = {"t-1": [action(f"a-{name}", name) for name in names]}
    for name in names:
        h.kube.create(deployment(name, replicas=4))
        h.kube.create(hpa(name, name, low=2, high=5))
    h.run(at(9))
    assert len(h.events()) == 20
    store = h.store._db  # the store's own connection: the pragma holds for it alone
    store.execute(f"PRAGMA max_page_count = {store.execute('PRAGMA page_count').fetchone()[0]}")

    with structlog.testing.capture_logs() as logs:
        h.reconciler.revert_scan(at(18, 1))
    assert problems(logs) == ["scaling_storage_unavailable"]
    assert h.reconciler.reporter.health.unready
    assert all(h.hpa(name)["spec"]["minReplicas"] == 2 for name in names)
    reverts = [e["id"] for e in h.events()]
    assert len(reverts) == 20

    store.execute("PRAGMA max_page_count = 1073741823")  # room again
    wait_until(lambda: h.reconciler.revert_scan(at(18, 2)).kube_reachable is True)
    assert h.reconciler.reporter.health.ok
    assert h.events() == []  # nothing put twice
    h.store.close()
    h.store = Store(h.store.path)
    assert all(h.store.enqueued(event_id) for event_id in reverts)  # committed at last
