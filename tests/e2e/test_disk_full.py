"""A full disk is a pause, not a crash: the collector's writes (its state store, the outbox)
fail with `database or disk is full`, discovery says it is not ready and holds its place, and
once space returns it catches up without a restart, nothing missing at the platform."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from collector.collector import Collector
from kube.api import KubeApi
from kube.cluster import KubeTarget
from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from shipper.outbox import Outbox
from shipper.records import DISCOVERY
from tests import cluster_objects
from tests.agent_process import stop_within
from tests.conftest import view
from tests.integration.test_collector import SETTINGS, Received
from tests.small_volume import small_volume
from tests.waiting import wait_until

ADDED = 60  # enough Deployments for their state to need new pages
FULL_NS = "while-full"


def added_deployments(kube: FakeKube, count: int = ADDED) -> set[tuple[str, str]]:
    kube.create(objects.namespace(name=FULL_NS))
    for number in range(count):
        name = f"made-while-the-disk-was-full-{number:04d}"
        kube.create(objects.deployment(name=name, namespace=FULL_NS, image=f"app:{number}"))
    return {("namespace", FULL_NS)} | {
        ("deployment", f"{FULL_NS}/made-while-the-disk-was-full-{n:04d}") for n in range(count)
    }


@pytest.mark.integration
def test_a_full_state_disk_holds_the_collector_unready_and_it_catches_up_without_a_restart(
    kube: FakeKube, tmp_path: Path
) -> None:
    expected = cluster_objects.populate(kube)
    settings = dataclasses.replace(SETTINGS, state_file=tmp_path / "collector-state.sqlite")
    api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
    with Outbox(tmp_path / "queue", streams=(DISCOVERY,)) as box:
        collector = Collector(api, box[DISCOVERY], settings=settings)
        collector.start()
        try:
            received = Received(box[DISCOVERY])
            assert collector.wait_synced(10)
            wait_until(lambda: expected <= set(received.latest()))
            state = collector.state
            # SQLITE_FULL without a full volume: the store's file may not grow any more.
            with state.lock:
                (pages,) = state._db.execute("PRAGMA page_count").fetchone()
                state._db.execute(f"PRAGMA max_page_count = {pages}")
            expected |= added_deployments(kube)

            def held() -> bool:
                health = collector.reporter.snapshot().health
                return health.unready and "disk full" in (health.reason or "")

            wait_until(held)
            assert all(informer.alive for informer in collector.informers)

            with state.lock:  # space comes back
                state._db.execute("PRAGMA max_page_count = 1073741823")
            # The probe's backoff (up to 30 s) decides when; a few seconds here.
            wait_until(lambda: expected <= set(received.latest()), timeout=40)
            wait_until(lambda: collector.reporter.snapshot().health.ok)
            assert all(informer.alive for informer in collector.informers)
            counters = collector.reporter.snapshot().counters
            assert counters["state_rollbacks"] >= 1
            assert counters["resyncs"] >= 1
        finally:
            collector.stop()
            api.close()


@pytest.mark.integration
def test_a_relist_taken_in_on_a_full_state_disk_is_a_pause_and_its_deletes_follow_after(
    kube: FakeKube, tmp_path: Path
) -> None:
    # The objects that vanished while no watch heard are forgotten as the relist's key set
    # is taken in: writes, on a disk with no room for them.
    expected = cluster_objects.populate(kube)
    gone = {slot for slot in expected if slot[1].startswith(f"{cluster_objects.NS}/")}
    gone.add(("namespace", cluster_objects.NS))
    api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
    with (
        small_volume(tmp_path / "volume") as volume,
        Outbox(tmp_path / "queue", streams=(DISCOVERY,)) as box,
    ):
        settings = dataclasses.replace(SETTINGS, state_file=volume.path / "collector-state.db")
        collector = Collector(api, box[DISCOVERY], settings=settings)
        collector.start()
        try:
            received = Received(box[DISCOVERY])
            wait_until(lambda: expected <= set(received.latest()))
            kube.wait_for_watches(len(collector.informers))
            kube.stall_watches()  # no watch hears the deletes below
            kube.delete("namespaces", None, cluster_objects.NS)  # and everything in it
            with collector.state.lock:
                # A page cache as small as SQLite allows: the deletes' pages spill to the
                # disk as they are made, as those of a large cluster's do (not only at the
                # commit, which the coalescer's flush waits out).
                collector.state._db.execute("PRAGMA cache_size = 1")
            volume.fill()
            kube.compact()  # every informer relists
            kube.release_stalled()
            processor = collector.processor.reporter

            def held() -> bool:
                health = collector.reporter.snapshot().health
                return health.unready and "disk full" in (health.reason or "")

            wait_until(lambda: held() or not processor.health.ok)
            assert processor.health.ok, processor.health.reason  # a pause, not a crash

            volume.free()
            wait_until(lambda: all(received.latest()[slot]["op"] == "delete" for slot in gone))
            wait_until(lambda: collector.reporter.snapshot().health.ok)
            assert received.latest()[("node", "node-1")]["op"] == "upsert"  # it still exists
            assert processor.health.ok
            assert collector.reporter.snapshot().counters["resyncs"] >= 1
        finally:
            collector.stop()
            api.close()


# -- a real full volume, under the agent process -------------------------------------------


def readiness(port: int) -> tuple[int, str]:
    answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5, trust_env=False)
    return answer.status_code, answer.text


def health_port(log: Path) -> int | None:
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            found = json.loads(line)
            if found.get("event") == "health_server_started":
                return int(found["port"])
    return None


def test_a_full_volume_under_the_agent_is_a_pause_and_nothing_is_missing_once_space_returns(
    kube: FakeKube,
    platform: FakePlatform,
    discovery_env: dict[str, str],
    tmp_path: Path,
) -> None:
    expected = cluster_objects.populate(kube)
    log = tmp_path / "agent.log"
    with small_volume(tmp_path / "volume", size="16m") as volume:
        env = {**discovery_env, "QUEUE_DIR": str(volume.path)}
        with log.open("w") as stderr:
            agent = subprocess.Popen(
                [sys.executable, "-m", "agent.cli", "run", "--role", "discovery"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                text=True,
            )
        try:
            wait_until(lambda: set(view(platform)) == expected, timeout=30)
            port = health_port(log)
            assert port is not None
            volume.fill()
            expected |= added_deployments(kube, 600)

            def unready() -> bool:
                status, body = readiness(port)
                return status == 503 and "disk full" in body

            wait_until(unready, timeout=30)
            assert agent.poll() is None

            volume.free()
            wait_until(lambda: set(view(platform)) == expected, timeout=60)
            wait_until(lambda: readiness(port)[0] == 200, timeout=30)
            assert agent.poll() is None  # the same process: no restart
            assert "informer_crashed" not in log.read_text()
        finally:
            agent.send_signal(signal.SIGTERM)
            stop_within(agent, 30)
