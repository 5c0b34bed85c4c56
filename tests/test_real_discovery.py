"""Discovery end to end on the real kube-apiserver, under the chart's own RBAC.

The chart is rendered by Helm's engine, its ServiceAccounts and RBAC are applied to the
real server, and the discovery role runs as a process with the discovery ServiceAccount's
token, the fake Moonin platform receiving what it sends. The real controllers do what a
cluster does: the Deployment controller makes ReplicaSets and rolls them over, the Job
controller fails a Job whose pod failed, the namespace controller empties a deleted
namespace, the garbage collector deletes what a deleted owner owned. Pods change only
through `pods/status`, written as a kubelet writes it. Every request the ServiceAccount
made is then read back from the audit log: nothing refused, no error the test did not
provoke.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from sandbox import objects
from sandbox.controlplane import ControlPlane
from sandbox.platform import FakePlatform
from tests import rbac_guard as guard
from tests.agent_process import log_events, run_cli, stop_within
from tests.chart_install import DISCOVERY, Installed, rendered_variants
from tests.chart_render import Rendered
from tests.conftest import view
from tests.real_cluster import NewNamespace, RealInstall
from tests.waiting import wait_until

# Failed Jobs' logs: no kubelet serves them here, so the server answers 400 (no host).
JOB_LOGS_REFUSED: frozenset[guard.Answer] = frozenset({("get", "pods/log", 400)})
PROVOKED = guard.LEADER_ELECTION | JOB_LOGS_REFUSED
# A server with the WatchList feature off answers a streaming list with 422.
STREAMING_REFUSED: frozenset[guard.Answer] = frozenset({("watch", "*", 422)})


@pytest.fixture(scope="module")
def chart() -> Rendered:
    return rendered_variants(["default"])["default"]


@pytest.fixture
def installed(chart: Rendered, real_install: RealInstall) -> Installed:
    return real_install(chart)


def discovery(installed: Installed, pod: str = "discovery-0", **env: str) -> subprocess.Popen[str]:
    """A discovery replica as the chart runs it, named `pod`, the environment as given."""
    return installed.start(
        installed.env("discovery", "agent", pod) | env, "run", "--role", "discovery"
    )


def stop(agent: subprocess.Popen[str]) -> list[dict[str, object]]:
    """SIGTERM the agent; its log lines once it exited."""
    agent.send_signal(signal.SIGTERM)
    stderr = stop_within(agent, 30)
    assert agent.returncode == 0, stderr[-4000:]
    return log_events(stderr)


def nothing_refused(installed: Installed, provoked: frozenset[guard.Answer] = PROVOKED) -> None:
    """No request of the discovery account refused or answered with an error the test did
    not provoke (the whole RBAC check, unused rules included, is the warm-up test's)."""
    made = guard.requests_of(installed.records(), DISCOVERY)
    assert made
    grants = guard.grants_of(installed.rendered, DISCOVERY)
    problems = guard.refused(made, grants) + guard.failed(made, provoked)
    assert not problems, "\n".join(problems)


def events_of(platform: FakePlatform, kind: str, namespace: str) -> list[dict[str, Any]]:
    return [
        r
        for r in platform.received_records()
        if r["kind"] == kind and r["op"] == "event" and r.get("namespace") == namespace
    ]


def pod_named(control_plane: ControlPlane, namespace: str, prefix: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def made() -> bool:
        found[:] = [
            p
            for p in control_plane.list("v1", "Pod", namespace)
            if p["metadata"]["name"].startswith(prefix)
        ]
        return bool(found)

    wait_until(made, timeout=30)
    return found[0]


def kubelet_writes(
    control_plane: ControlPlane, pod: dict[str, Any], status: dict[str, Any]
) -> None:
    """The pod's status as its kubelet writes it: a patch of `pods/status`."""
    meta = pod["metadata"]
    control_plane.patch(
        "v1",
        "Pod",
        meta["namespace"],
        meta["name"],
        {"status": status},
        content_type="application/strategic-merge-patch+json",
        subresource="status",
    )


@pytest.fixture
def cluster_scoped(control_plane: ControlPlane) -> Iterator[list[dict[str, Any]]]:
    """Cluster-scoped objects a test creates (`append` the created object); deleted after."""
    made: list[dict[str, Any]] = []
    yield made
    for obj in made:
        if control_plane.exists(obj["apiVersion"], obj["kind"], None, obj["metadata"]["name"]):
            control_plane.delete(obj["apiVersion"], obj["kind"], None, obj["metadata"]["name"])


def test_discovery_warms_up_by_streaming_lists_and_every_kind_reaches_the_platform(
    control_plane: ControlPlane,
    installed: Installed,
    platform: FakePlatform,
    real_namespace: NewNamespace,
    cluster_scoped: list[dict[str, Any]],
) -> None:
    ns = real_namespace("shop")
    node = f"node-{ns}"
    cluster_scoped.append(control_plane.create(objects.node(name=node)))
    web = control_plane.create(objects.deployment(name="web", namespace=ns, replicas=1))
    control_plane.create(objects.service(name="web", namespace=ns))
    control_plane.create(objects.hpa(name="web", namespace=ns))
    control_plane.create(
        objects.ingress(name="web", namespace=ns, host="shop.example", service="web")
    )
    control_plane.create(objects.network_policy(name="deny-all", namespace=ns))
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    subject = objects.service_account_subject(name="web", namespace=ns)
    control_plane.create(objects.role(name="reader", namespace=ns, rules=[rule]))
    control_plane.create(
        objects.role_binding(name="reader", namespace=ns, role="reader", subjects=[subject])
    )
    viewer = f"viewer-{ns}"
    cluster_scoped.append(
        control_plane.create(objects.role(name=viewer, namespace=None, rules=[rule]))
    )
    cluster_scoped.append(
        control_plane.create(
            objects.role_binding(name=viewer, namespace=None, role=viewer, subjects=[subject])
        )
    )
    release = objects.helm_release(name="shop", namespace=ns, manifest=objects.manifest([web]))
    control_plane.create(
        objects.helm_release_secret(
            name="shop", namespace=ns, revision=1, storage=objects.helm_storage(release)
        )
    )
    control_plane.create(objects.secret(name="db", namespace=ns, data={"password": b"s3cret"}))
    cron = control_plane.create(objects.cronjob(name="report", namespace=ns))
    job = control_plane.create(objects.failed_job(owner=cron))
    job_name = job["metadata"]["name"]
    # The Job controller's pod fails as a kubelet reports it; the controller fails the Job.
    failing = pod_named(control_plane, ns, job_name)
    kubelet_writes(control_plane, failing, objects.failed_job_pod(owner=job)["status"])
    [replicaset] = wait_for_replicasets(control_plane, ns, 1)

    agent = discovery(installed)
    expected = {
        ("namespace", ns),
        ("node", node),
        ("deployment", f"{ns}/web"),
        ("revision", f"{ns}/{replicaset['metadata']['name']}"),
        ("service", f"{ns}/web"),
        ("hpa", f"{ns}/web"),
        ("ingress", f"{ns}/web"),
        ("network_policy", f"{ns}/deny-all"),
        ("rbac", f"Role/{ns}/reader"),
        ("rbac", f"RoleBinding/{ns}/reader"),
        ("rbac", f"ClusterRole/{viewer}"),
        ("rbac", f"ClusterRoleBinding/{viewer}"),
        ("cronjob", f"{ns}/report"),
        ("job_execution", f"{ns}/{job_name}"),
        ("helm_release", f"{ns}/shop/v1"),
    }
    wait_until(lambda: expected <= set(view(platform)), timeout=60)
    wait_until(lambda: failed(view(platform)[("job_execution", f"{ns}/{job_name}")]), timeout=30)
    wait_until(lambda: bool(events_of(platform, "pod_error", ns)), timeout=30)
    current = view(platform)
    run = current[("job_execution", f"{ns}/{job_name}")]["data"]
    assert (run["failure_reason"], run["exit_code"]) == ("BackoffLimitExceeded", 2), run
    helm = current[("helm_release", f"{ns}/shop/v1")]["data"]
    assert (helm["status"], helm["revision"]) == ("deployed", 1), helm
    deployment = current[("deployment", f"{ns}/web")]["data"]
    assert (deployment["revision"], deployment["services"]) == (1, ["web"]), deployment
    [pod_error] = events_of(platform, "pod_error", ns)
    assert (pod_error["data"]["reason"], pod_error["data"]["workload"]["kind"]) == (
        "Error",
        "CronJob",
    ), pod_error
    assert platform.last_heartbeat is not None
    snapshots = {r["data"]["of"] for r in platform.received_records() if r["kind"] == "snapshot"}
    assert {kind for kind, _ in expected} <= snapshots
    assert not any(b"s3cret" in json.dumps(r).encode() for r in platform.received_records())

    stop(agent)
    made = guard.requests_of(installed.records(), DISCOVERY)
    # Every list was a streaming one: a watch sending the initial events, never a plain list.
    assert not [guard.describe(r) for r in made if r.info and r.info.verb == "list"]
    streamed = {
        r.info.full_resource
        for r in made
        if r.info and r.info.verb == "watch" and r.query.get("sendInitialEvents") == "true"
    }
    assert {"namespaces", "nodes", "deployments", "replicasets", "pods", "secrets"} <= streamed

    # A server without WatchList (before 1.32, or with the gate off) refuses streaming lists;
    # preview lists in pages there, with the chart's `list` rules.
    control_plane.restart_apiserver("--feature-gates=WatchList=false")
    try:
        preview = run_cli("preview", env=installed.env("discovery", "agent", "preview"))
    finally:
        control_plane.restart_apiserver("--feature-gates=WatchList=true")
    assert preview.returncode == 0, preview.stderr[-4000:]
    previewed = {(r["kind"], r["key"]) for r in map(json.loads, preview.stdout.splitlines())}
    assert expected <= previewed
    [done] = [line for line in log_events(preview.stderr) if line["event"] == "preview_done"]
    assert done["forbidden"] == []
    installed.check_requests(DISCOVERY, provoked=PROVOKED | STREAMING_REFUSED)


def failed(record: dict[str, Any]) -> bool:
    return bool(record["data"]["status"] == "failed")


def wait_for_replicasets(
    control_plane: ControlPlane, namespace: str, count: int
) -> list[dict[str, Any]]:
    """The namespace's ReplicaSets once the Deployment controller has made `count`."""
    found: list[dict[str, Any]] = []

    def made() -> bool:
        found[:] = control_plane.list("apps/v1", "ReplicaSet", namespace)
        return len(found) == count

    wait_until(made, timeout=30)
    return found
