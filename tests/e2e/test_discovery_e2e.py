"""`moonin-agent run --role discovery` against the fake cluster and the fake platform.

The platform's view must follow the cluster through creates, updates and deletes of every
kind, and still equal it after an outage during which the agent was SIGKILLed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from tests import cluster_objects
from tests.agent_process import queued, stop_within
from tests.conftest import view
from tests.waiting import wait_until

NS = cluster_objects.NS


def test_the_platform_view_follows_the_cluster_through_changes_a_crash_and_an_outage(
    kube: FakeKube,
    platform: FakePlatform,
    discovery_agents: Callable[[], subprocess.Popen[str]],
    discovery_env: dict[str, str],
) -> None:
    expected = cluster_objects.populate(kube)
    agent = discovery_agents()
    wait_until(lambda: set(view(platform)) == expected)

    # Create, update and delete while the agent watches.
    kube.patch(
        "deployments",
        NS,
        "web",
        {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "web:2.0"}]}}}},
    )
    kube.create(objects.deployment(name="api", namespace=cluster_objects.NS))
    kube.delete("ingresses", NS, "web")
    kube.delete("clusterrolebindings", None, "viewer")
    expected |= {("deployment", f"{NS}/api")}
    expected -= {("ingress", f"{NS}/web"), ("rbac", "ClusterRoleBinding/viewer")}
    wait_until(lambda: set(view(platform)) == expected)
    images = view(platform)[("deployment", f"{NS}/web")]["data"]["images"]
    assert [image["image"] for image in images] == ["web:2.0"]

    # The platform goes away; the cluster keeps changing; the agent is killed.
    platform.down()
    kube.patch("deployments", NS, "api", {"spec": {"replicas": 7}})
    kube.delete("services", NS, "web")
    kube.create(objects.namespace(name="blog"))
    kube.create(objects.deployment(name="blog", namespace="blog"))
    expected -= {("service", f"{NS}/web")}
    expected |= {("namespace", "blog"), ("deployment", "blog/blog")}
    changes = {
        ("namespace", "blog"),
        ("deployment", "blog/blog"),
        ("deployment", f"{NS}/api"),
        ("service", f"{NS}/web"),
    }
    wait_until(lambda: changes <= on_disk(Path(discovery_env["QUEUE_DIR"])), timeout=30)
    agent.send_signal(signal.SIGKILL)
    agent.wait()

    # A new agent on the same queue; then the platform comes back.
    lists = namespace_lists(kube)
    agent = discovery_agents()
    wait_until(lambda: namespace_lists(kube) > lists, timeout=30)  # it works, unheard
    platform.up()
    wait_until(lambda: set(view(platform)) == expected, timeout=30)
    current = view(platform)
    assert current[("deployment", f"{NS}/api")]["data"]["desired_replicas"] == 7
    assert current[("deployment", f"{NS}/web")]["data"]["services"] == []
    assert platform.last_heartbeat is not None
    agent.send_signal(signal.SIGTERM)
    stop_within(agent, 30)
    assert agent.returncode == 0


def test_two_replicas_elect_one_collector_and_hand_over_on_sigterm(
    kube: FakeKube,
    platform: FakePlatform,
    discovery_env: dict[str, str],
    tmp_path: Path,
) -> None:
    kube.create(objects.namespace(name=cluster_objects.NS))
    kube.create(objects.namespace(name="moonin"))  # the Lease lives in the agent's own
    replicas = {}
    for name in ("pod-a", "pod-b"):
        env = dict(
            discovery_env,
            LEADER_ELECTION="true",
            POD_NAMESPACE="moonin",
            POD_NAME=name,
            QUEUE_DIR=str(tmp_path / name),
        )
        replicas[name] = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "run", "--role", "discovery"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if name == "pod-a":  # a leads: it starts first
            wait_until(lambda: leader(platform) == "pod-a")
            since = len(kube.requests)
    try:
        wait_until(lambda: standby_rounds(kube, since) >= 2, timeout=30)  # pod-b stands by
        assert leader(platform) == "pod-a"
        assert {r["metadata"]["leader"] for r in heartbeats(platform)} == {"pod-a"}
        replicas["pod-a"].send_signal(signal.SIGTERM)
        stop_within(replicas["pod-a"], 30)
        # The Lease was released, so pod-b takes over well before it would expire.
        wait_until(lambda: leader(platform) == "pod-b", timeout=10)
    finally:
        for agent in replicas.values():
            if agent.poll() is None:
                agent.kill()
            agent.communicate()


def on_disk(queue_dir: Path) -> set[tuple[str, str]]:
    """The (kind, key) of what the agent's outbox holds now."""
    return {(record["kind"], record["key"]) for record in queued(queue_dir)}


def namespace_lists(kube: FakeKube) -> int:
    """Requests to list or watch namespaces: an agent at work."""
    return sum(1 for r in kube.requests if r.resource == "namespaces")


def standby_rounds(kube: FakeKube, since: int) -> int:
    """Election rounds of a standby since request `since`: each round reads the Lease, and
    the leader's rounds each write it too, so the reads beyond the writes are the standby's."""
    on_lease = [r for r in kube.requests[since:] if r.path.endswith("/moonin-discovery-leader")]
    reads = sum(1 for r in on_lease if r.method == "GET")
    return reads - (len(on_lease) - reads)


def heartbeats(platform: FakePlatform) -> list[dict]:
    return [r.json() for r in platform.requests if r.route == "heartbeat" and r.status == 200]


def leader(platform: FakePlatform) -> str | None:
    beats = heartbeats(platform)
    return beats[-1]["metadata"]["leader"] if beats else None
