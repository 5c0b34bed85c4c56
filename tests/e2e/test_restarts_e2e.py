"""Restarts without amnesia: `moonin-agent run --role discovery` killed, the cluster changed
while no agent watched, the agent started again (on the same volume, or a fresh one): the
platform's view ends equal to the cluster, and an unchanged cluster costs no upserts."""

from __future__ import annotations

import hashlib
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import msgspec
import pytest

from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from tests import cluster_objects
from tests.agent_process import queued, stop_within
from tests.conftest import view
from tests.state_schema_2 import rewrite_as_schema_2
from tests.waiting import wait_until

NS = cluster_objects.NS
BLOG = "blog"


def populate_with_a_second_namespace(kube: FakeKube) -> set[tuple[str, str]]:
    expected = cluster_objects.populate(kube)
    kube.create(objects.namespace(name=BLOG))
    kube.create(objects.deployment(name="blog", namespace=BLOG))
    kube.create(cluster_objects.helm_release_secret("blog", ns=BLOG))
    return expected | {
        ("namespace", BLOG),
        ("deployment", f"{BLOG}/blog"),
        ("helm_release", f"{BLOG}/blog/v1"),
    }


def kill(agent: subprocess.Popen[str]) -> None:
    agent.send_signal(signal.SIGKILL)
    agent.wait()


def cluster_changes_while_no_agent_watches(kube: FakeKube, expected: set) -> set:
    """Delete a namespace with its Deployment and Helm release, change an image, add a
    Deployment; returns the slots the platform must end with."""
    kube.delete("namespaces", None, BLOG)  # takes its Deployment and release Secret along
    kube.patch(
        "deployments",
        NS,
        "web",
        {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "web:3.0"}]}}}},
    )
    kube.create(objects.deployment(name="added", namespace=cluster_objects.NS))
    gone = {
        ("namespace", BLOG),
        ("deployment", f"{BLOG}/blog"),
        ("helm_release", f"{BLOG}/blog/v1"),
    }
    return (expected - gone) | {("deployment", f"{NS}/added")}


@pytest.mark.parametrize("volume", ["kept", "fresh"])
def test_the_view_converges_after_kills_an_outage_and_changes_nobody_watched(
    volume: str,
    kube: FakeKube,
    platform: FakePlatform,
    discovery_agents: Callable[[], subprocess.Popen[str]],
    discovery_env: dict[str, str],
) -> None:
    expected = populate_with_a_second_namespace(kube)
    agent = discovery_agents()
    wait_until(lambda: set(view(platform)) == expected)

    platform.down()
    kill(agent)
    expected = cluster_changes_while_no_agent_watches(kube, expected)
    if volume == "fresh":  # a failover: the next agent starts on an empty volume
        shutil.rmtree(discovery_env["QUEUE_DIR"])
    queue = Path(discovery_env["QUEUE_DIR"])
    snapshots = deployment_snapshots(queue)
    agent = discovery_agents()
    # It lists the cluster and queues what it found (its Deployments' snapshot comes after
    # their upserts), then dies too.
    wait_until(lambda: deployment_snapshots(queue) > snapshots, timeout=30)
    kill(agent)

    platform.up()
    discovery_agents()
    wait_until(lambda: set(view(platform)) == expected, timeout=30)
    image = view(platform)[("deployment", f"{NS}/web")]["data"]["images"][0]["image"]
    assert image == "web:3.0"


@pytest.mark.parametrize(
    ("election", "store"),
    [
        ("without leader election", "as written"),
        ("with leader election", "as written"),
        # An upgrade: the state file of the release before is migrated, not emptied.
        ("without leader election", "of schema 2"),
        # An upgrade: the fingerprints as releases before defined them still match.
        ("without leader election", "with the earlier fingerprints"),
    ],
)
def test_a_restart_against_an_unchanged_cluster_sends_no_upserts(
    election: str,
    store: str,
    kube: FakeKube,
    platform: FakePlatform,
    discovery_agents: Callable[[], subprocess.Popen[str]],
    discovery_env: dict[str, str],
) -> None:
    if election == "with leader election":
        # As the chart runs it: the store is trusted because this pod led last.
        discovery_env.update(LEADER_ELECTION="true", POD_NAMESPACE="moonin", POD_NAME="pod-a")
    expected = populate_with_a_second_namespace(kube)
    if election == "with leader election":  # the Lease lives in the agent's own namespace
        kube.create(objects.namespace(name="moonin"))
        expected.add(("namespace", "moonin"))
    agent = discovery_agents()
    wait_until(lambda: set(view(platform)) == expected)
    snapshots_before = len(snapshot_records(platform))
    wait_until(lambda: len(snapshot_records(platform)) >= 12)  # every kind listed once
    agent.send_signal(signal.SIGTERM)
    stop_within(agent, 30)
    before = len(platform.received_records())
    state_file = Path(discovery_env["QUEUE_DIR"]) / "collector-state.sqlite"
    if store == "of schema 2":
        rewrite_as_schema_2(state_file)
    if store == "with the earlier fingerprints":
        assert fingerprint_earlier_versions(state_file, platform) >= len(expected)

    discovery_agents()
    # The restart lists every kind again: each list ends with a snapshot.
    wait_until(lambda: len(snapshot_records(platform)) >= 2 * max(snapshots_before, 12))
    # A change made now arrives after anything the restart made before it.
    kube.create(objects.namespace(name="sentinel"))
    wait_until(lambda: ("namespace", "sentinel") in view(platform))
    expected.add(("namespace", "sentinel"))
    after = [r for r in platform.received_records()[before:] if r["key"] != "sentinel"]
    assert [r for r in after if r["op"] == "upsert" and r["kind"] != "cluster_metadata"] == []
    assert [r for r in after if r["op"] == "delete"] == []
    assert {r["kind"] for r in after} <= {"snapshot", "cluster_metadata"}
    assert set(view(platform)) == expected


def fingerprint_earlier_versions(state_file: Path, platform: FakePlatform) -> int:
    """Store the fingerprint of each record the platform holds as releases before this one
    stored it (the hash of `[op, uid, data]` with every key sorted); how many."""
    latest = {(r["kind"], r["key"]): r for r in platform.received_records() if r["op"] == "upsert"}
    with closing(sqlite3.connect(state_file)) as db:
        for (kind, key), record in latest.items():
            encoded = msgspec.json.encode(
                (record["op"], record["uid"], record["data"]), order="sorted"
            )
            db.execute(
                "UPDATE records SET fingerprint = ? WHERE kind = ? AND key = ?",
                (hashlib.blake2b(encoded, digest_size=16).digest(), kind, key),
            )
        db.commit()
        (changed,) = db.execute(
            "SELECT COUNT(*) FROM records WHERE length(fingerprint) = 16"
        ).fetchone()
    return int(changed)


def deployment_snapshots(queue: Path) -> int:
    """Snapshots of the Deployments in the outbox, waiting to be sent."""
    return sum(
        1 for r in queued(queue) if r["kind"] == "snapshot" and r["data"]["of"] == "deployment"
    )


def snapshot_records(platform: FakePlatform) -> list[dict]:
    return [r for r in platform.received_records() if r["kind"] == "snapshot"]
