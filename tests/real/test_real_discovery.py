"""Discovery end to end on the real kube-apiserver, under the chart's own RBAC.

The chart is rendered by Helm's engine, its ServiceAccounts and RBAC are applied to the
real server, and the discovery role runs as a process with the discovery ServiceAccount's
token, the fake Moonin platform receiving what it sends. The real controllers do what a
cluster does: the Deployment controller makes ReplicaSets and rolls them over, the Job
controller fails a Job whose pod failed, the namespace controller empties a deleted
namespace, the garbage collector deletes what a deleted owner owned. Pods change only
through `pods/status`, written as a kubelet writes it. The server itself is put through
what clusters do: WatchList off (lists in pages), etcd compacted and the API server
restarted under running watches (410, relist), the Lease's holder SIGKILLed (a standby
takes over), the token file rotated and the old token revoked. Every request the
ServiceAccount made is then read back from the audit log: nothing refused, no error the
test did not provoke.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.leader import JITTER_FACTOR, LeaseSettings
from sandbox import objects
from sandbox.controlplane import ControlPlane
from sandbox.kube.auth import service_account
from sandbox.platform import FakePlatform
from tests import rbac_guard as guard
from tests.agent_process import log_events, run_cli, stop_within
from tests.chart_install import DISCOVERY, LEASE, Installed, rendered_variants
from tests.chart_render import NAMESPACE, Rendered
from tests.conftest import view
from tests.real_cluster import NewNamespace, RealInstall
from tests.waiting import wait_until

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


def nothing_refused(
    installed: Installed, provoked: frozenset[guard.Answer] = guard.LEADER_ELECTION
) -> None:
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
    # No node runs the pod, so its log is a 204 from the server: the run has no log lines.
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
    installed.check_requests(DISCOVERY, provoked=guard.LEADER_ELECTION | STREAMING_REFUSED)


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


def replicasets_of(control_plane: ControlPlane, namespace: str, deployment: str) -> list[str]:
    listed = control_plane.list(
        "apps/v1", "ReplicaSet", namespace, labelSelector=f"app={deployment}"
    )
    return sorted(rs["metadata"]["name"] for rs in listed)


def deletes(platform: FakePlatform) -> set[tuple[str, str]]:
    return {(r["kind"], r["key"]) for r in platform.received_records() if r["op"] == "delete"}


def test_rollouts_namespace_deletion_and_cascading_deletes_reach_the_platform(
    control_plane: ControlPlane,
    installed: Installed,
    platform: FakePlatform,
    real_namespace: NewNamespace,
) -> None:
    ns, doomed = real_namespace("shop"), real_namespace("gone")
    for name, where in (("web", ns), ("api", ns), ("blog", doomed)):
        control_plane.create(objects.deployment(name=name, namespace=where, replicas=1))
    control_plane.create(objects.service(name="blog", namespace=doomed))
    wait_until(lambda: all(replicasets_of(control_plane, ns, d) for d in ("web", "api")))
    wait_until(lambda: bool(replicasets_of(control_plane, doomed, "blog")))
    [web_first] = replicasets_of(control_plane, ns, "web")
    [api_rs] = replicasets_of(control_plane, ns, "api")
    [blog_rs] = replicasets_of(control_plane, doomed, "blog")
    agent = discovery(installed)
    in_doomed = {
        ("namespace", doomed),
        ("deployment", f"{doomed}/blog"),
        ("revision", f"{doomed}/{blog_rs}"),
        ("service", f"{doomed}/blog"),
    }
    api = {("deployment", f"{ns}/api"), ("revision", f"{ns}/{api_rs}")}
    wait_until(lambda: in_doomed | api <= set(view(platform)), timeout=30)

    # A rollout: the Deployment controller makes the new ReplicaSet, revision 2.
    template = {"spec": {"containers": [{"name": "app", "image": "registry.example/web:2.0"}]}}
    control_plane.patch(
        "apps/v1",
        "Deployment",
        ns,
        "web",
        {"spec": {"template": template}},
        content_type="application/strategic-merge-patch+json",
    )
    wait_until(lambda: len(replicasets_of(control_plane, ns, "web")) == 2)
    [web_second] = set(replicasets_of(control_plane, ns, "web")) - {web_first}

    def rolled_out() -> bool:
        current = view(platform)
        deployment = current.get(("deployment", f"{ns}/web"), {}).get("data", {})
        revision = current.get(("revision", f"{ns}/{web_second}"), {}).get("data", {})
        return deployment.get("revision") == 2 and revision.get("number") == 2

    wait_until(rolled_out, timeout=30)
    images = view(platform)[("revision", f"{ns}/{web_second}")]["data"]["images"]
    assert [i["image"] for i in images] == ["registry.example/web:2.0"], images
    assert ("revision", f"{ns}/{web_first}") in view(platform)  # the old one stays, scaled down

    # The namespace controller empties a deleted namespace; the garbage collector deletes
    # what a Deployment deleted in the background owned.
    control_plane.delete("v1", "Namespace", None, doomed)
    control_plane.delete("apps/v1", "Deployment", ns, "api", propagationPolicy="Background")
    wait_until(lambda: in_doomed | api <= deletes(platform), timeout=60)
    assert not (in_doomed | api) & set(view(platform))
    nothing_refused(installed)
    stop(agent)
    nothing_refused(installed)


def bind(control_plane: ControlPlane, pod: dict[str, Any], node: str) -> None:
    """What the scheduler does: the pod's Binding to `node`."""
    meta = pod["metadata"]
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    control_plane.create(binding)


def container(
    image: str, *, restarts: int, state: dict[str, Any], last: dict[str, Any]
) -> dict[str, Any]:
    """A container status of `app` as the kubelet reports it."""
    return {
        "name": "app",
        "image": image,
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": restarts,
        "state": state,
        "lastState": last,
    }


def terminated(exit_code: int, reason: str) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": "2026-12-02T10:00:00Z",
            "finishedAt": "2026-12-02T10:00:05Z",
            "containerID": "containerd://9f3a",
        }
    }


def test_pod_errors_come_from_statuses_a_kubelet_writes_and_from_its_warning_events(
    control_plane: ControlPlane,
    installed: Installed,
    platform: FakePlatform,
    real_namespace: NewNamespace,
) -> None:
    ns = real_namespace("shop")
    control_plane.create(objects.deployment(name="web", namespace=ns, replicas=4))
    wait_until(lambda: len(control_plane.list("v1", "Pod", ns)) == 4, timeout=30)
    # Each read whole: the items of a list carry no kind or apiVersion.
    names = sorted(p["metadata"]["name"] for p in control_plane.list("v1", "Pod", ns))
    crashing, oom, pulling, pending = (control_plane.get("v1", "Pod", ns, n) for n in names)
    image = crashing["spec"]["containers"][0]["image"]
    scheduled = [{"type": "PodScheduled", "status": "True"}]
    for pod in (crashing, oom, pulling):
        bind(control_plane, pod, "node-1")
    # The agent watches the pods before their kubelets report: a restart is a transition
    # it sees (a pod seen first already restarted tells only the state it is in now).
    agent = discovery(installed)
    wait_until(lambda: ("deployment", f"{ns}/web") in view(platform), timeout=30)
    running = {"running": {"startedAt": "2026-12-02T10:00:06Z"}}
    started = container(image, restarts=0, state=running, last={})
    kubelet_writes(
        control_plane,
        oom,
        {"phase": "Running", "conditions": scheduled, "containerStatuses": [started]},
    )
    back_off = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}}
    kubelet_writes(
        control_plane,
        crashing,
        {
            "phase": "Running",
            "conditions": scheduled,
            "containerStatuses": [
                container(image, restarts=4, state=back_off, last=terminated(1, "Error"))
            ],
        },
    )
    pull = {
        "waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
    }
    kubelet_writes(
        control_plane,
        pulling,
        {
            "phase": "Pending",
            "conditions": scheduled,
            "containerStatuses": [container(image, restarts=0, state=pull, last={})],
        },
    )
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu.",
    }
    kubelet_writes(control_plane, pending, {"phase": "Pending", "conditions": [unschedulable]})

    def reasons() -> dict[str, str]:
        return {e["data"]["reason"]: e["data"]["pod"] for e in events_of(platform, "pod_error", ns)}

    from_status = {
        "CrashLoopBackOff": crashing["metadata"]["name"],
        "ImagePullBackOff": pulling["metadata"]["name"],
        "Unschedulable": pending["metadata"]["name"],
    }
    wait_until(lambda: from_status.items() <= reasons().items(), timeout=30)
    # The running container (seen running above: its pod's change came first on the same
    # watch) is OOMKilled and restarted.
    oom_killed = container(image, restarts=1, state=running, last=terminated(137, "OOMKilled"))
    kubelet_writes(
        control_plane,
        oom,
        {"phase": "Running", "conditions": scheduled, "containerStatuses": [oom_killed]},
    )
    wait_until(lambda: reasons().get("OOMKilled") == oom["metadata"]["name"], timeout=30)
    [crash] = [
        e for e in events_of(platform, "pod_error", ns) if e["data"]["reason"] == "CrashLoopBackOff"
    ]
    assert crash["data"]["workload"]["name"] == "web", crash

    # Warning Events as kubelets record them, about pods already listed.
    mount = 'MountVolume.SetUp failed for volume "creds" : secret "creds" not found'
    control_plane.create(objects.event(involved=pulling, reason="FailedMount", message=mount))
    probe = "Readiness probe failed: HTTP probe failed with statuscode: 500"
    control_plane.create(
        objects.event(
            involved=oom,
            reason="Unhealthy",
            message=probe,
            count=3,
            series="4c2e9a1b",
            field_path="spec.containers{app}",
        )
    )
    from_events = {
        "FailedMount": pulling["metadata"]["name"],
        "ReadinessProbeFailed": oom["metadata"]["name"],
    }
    wait_until(lambda: from_events.items() <= reasons().items(), timeout=30)
    stop(agent)
    nothing_refused(installed)


def snapshots_of(platform: FakePlatform, kind: str) -> int:
    return sum(
        1
        for r in platform.received_records()
        if r["kind"] == "snapshot" and r["data"]["of"] == kind
    )


def web_and_api(control_plane: ControlPlane, ns: str) -> None:
    """Two small applications: a Deployment and a Service each, named web and api."""
    for name in ("web", "api"):
        control_plane.create(objects.deployment(name=name, namespace=ns, replicas=1))
        control_plane.create(objects.service(name=name, namespace=ns))


def test_after_etcd_compaction_and_an_api_server_restart_the_agent_relists_and_converges(
    control_plane: ControlPlane,
    installed: Installed,
    platform: FakePlatform,
    real_namespace: NewNamespace,
) -> None:
    ns = real_namespace("shop")
    web_and_api(control_plane, ns)
    agent = discovery(installed, LEADER_ELECTION="false")
    listed = {
        (kind, f"{ns}/{name}") for kind in ("deployment", "service") for name in ("web", "api")
    }
    wait_until(lambda: listed <= set(view(platform)), timeout=30)
    wait_until(lambda: snapshots_of(platform, "service") > 0)
    snapshots = snapshots_of(platform, "service")

    # Changes the agent cannot watch (it is frozen), etcd compacted past every
    # resourceVersion it holds, and the API server restarted: every watch drops, and the
    # new watch cache starts after them. Resuming from them answers 410.
    agent.send_signal(signal.SIGSTOP)
    try:
        control_plane.delete("v1", "Service", ns, "api")
        control_plane.delete("apps/v1", "Deployment", ns, "api", propagationPolicy="Background")
        control_plane.create(objects.service(name="late", namespace=ns))
        control_plane.compact()
        control_plane.restart_apiserver()
    finally:
        agent.send_signal(signal.SIGCONT)
    gone = {("service", f"{ns}/api"), ("deployment", f"{ns}/api")}
    wait_until(lambda: gone <= deletes(platform), timeout=60)
    wait_until(lambda: ("service", f"{ns}/late") in view(platform), timeout=30)
    wait_until(lambda: snapshots_of(platform, "service") > snapshots, timeout=30)
    current = set(view(platform))
    assert not gone & current
    assert {("service", f"{ns}/web"), ("deployment", f"{ns}/web")} <= current

    relisted = {line["resource"] for line in stop(agent) if line["event"] == "informer_relist"}
    assert {"services", "deployments"} <= relisted
    nothing_refused(installed)


def lease_holder(control_plane: ControlPlane) -> str | None:
    if not control_plane.exists("coordination.k8s.io/v1", "Lease", NAMESPACE, LEASE):
        return None
    lease = control_plane.get("coordination.k8s.io/v1", "Lease", NAMESPACE, LEASE)
    holder: str | None = lease["spec"].get("holderIdentity")
    return holder


def test_a_standby_takes_the_real_lease_over_from_a_killed_leader_and_no_change_is_lost(
    control_plane: ControlPlane,
    installed: Installed,
    platform: FakePlatform,
    real_namespace: NewNamespace,
) -> None:
    ns = real_namespace("shop")
    web_and_api(control_plane, ns)
    pods = ("discovery-0", "discovery-1")
    agents = {pod: discovery(installed, pod) for pod in pods}
    wait_until(lambda: lease_holder(control_plane) in pods, timeout=30)
    leader = str(lease_holder(control_plane))
    [standby] = set(pods) - {leader}
    wait_until(lambda: ("service", f"{ns}/api") in view(platform), timeout=30)

    agents[leader].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    # Changes while nobody leads: a create, an update, a delete.
    control_plane.create(objects.deployment(name="during", namespace=ns, replicas=1))
    control_plane.patch("apps/v1", "Deployment", ns, "web", {"spec": {"replicas": 3}})
    control_plane.delete("v1", "Service", ns, "api")
    settings = LeaseSettings(namespace=NAMESPACE, identity=standby)
    bound = settings.lease_seconds + 2 * settings.retry_seconds * (1 + JITTER_FACTOR) + 10
    wait_until(lambda: lease_holder(control_plane) == standby, timeout=bound)
    takeover = time.monotonic() - killed
    print(f"lease takeover after SIGKILL of the leader: {takeover:.1f} s")
    control_plane.create(objects.service(name="after", namespace=ns))

    def converged() -> bool:
        current = view(platform)
        web = current.get(("deployment", f"{ns}/web"), {}).get("data", {})
        return (
            web.get("desired_replicas") == 3
            and {("deployment", f"{ns}/during"), ("service", f"{ns}/after")} <= set(current)
            and ("service", f"{ns}/api") not in current
        )

    wait_until(converged, timeout=30)
    wait_until(lambda: (platform.last_heartbeat or {})["metadata"]["leader"] == standby)
    stop(agents[standby])
    nothing_refused(installed)


def token_id(token: str) -> str:
    """The `jti` of a ServiceAccount token, which the audit log names it by."""
    payload = token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"])


def credential_of(event: dict[str, Any]) -> str:
    extra = event["user"].get("extra", {})
    return " ".join(extra.get("authentication.kubernetes.io/credential-id", []))


def test_a_token_file_rotated_while_running_is_used_once_the_old_token_is_revoked(
    control_plane: ControlPlane,
    installed: Installed,
    platform: FakePlatform,
    real_namespace: NewNamespace,
    tmp_path: Path,
) -> None:
    ns = real_namespace("shop")
    control_plane.create(objects.deployment(name="web", namespace=ns, replicas=1))
    holders: list[str] = []

    def bound_token() -> str:
        """A token bound to a Secret of its own, so deleting the Secret revokes it."""
        holder = control_plane.create(
            objects.secret(name=f"token-holder-{len(holders)}", namespace=NAMESPACE, data={})
        )
        holders.append(holder["metadata"]["name"])
        ref = {"kind": "Secret", "name": holders[-1], "uid": holder["metadata"]["uid"]}
        return control_plane.token(NAMESPACE, DISCOVERY, bound_to=ref)

    # The pod's token is a file the kubelet rotates; the kubeconfig names the file.
    token_file = tmp_path / "token"
    token_file.write_text(bound_token())
    config = json.loads(control_plane.kubeconfig(tmp_path / "kubeconfig").read_text())
    config["users"][0]["user"] = {"tokenFile": str(token_file)}
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    try:
        agent = discovery(installed, KUBECONFIG=str(tmp_path / "kubeconfig"))
        wait_until(lambda: ("deployment", f"{ns}/web") in view(platform), timeout=30)

        # Rotated as the kubelet does it (the new file replaces the old at once), then the
        # old token revoked.
        rotated = bound_token()
        staged = tmp_path / "token.new"
        staged.write_text(rotated)
        staged.replace(token_file)
        mark = control_plane.audit_mark()
        control_plane.delete("v1", "Secret", NAMESPACE, holders[0])
        user = service_account(NAMESPACE, DISCOVERY)

        def settled() -> bool:
            return any(
                event["user"].get("username", "") == user
                and token_id(rotated) in credential_of(event)
                and event.get("responseStatus", {}).get("code", 0) < 300
                for event in control_plane.audit(mark)
            )

        wait_until(settled, timeout=30)
        since = control_plane.audit_mark()
        control_plane.create(objects.deployment(name="after", namespace=ns, replicas=1))
        wait_until(lambda: ("deployment", f"{ns}/after") in view(platform), timeout=30)
        assert lease_holder(control_plane) == "discovery-0"
        logs = stop(agent)
    finally:
        for name in holders:
            if control_plane.exists("v1", "Secret", NAMESPACE, name):
                control_plane.delete("v1", "Secret", NAMESPACE, name)
    lost = [line for line in logs if line["event"] == "leadership_lost"]
    assert [line["reason"] for line in lost] == ["stopping"]  # at SIGTERM only
    # The requests made once the rotation settled (not the watches begun before it).
    assert control_plane.audit_log is not None
    earlier = control_plane.audit_log.read_bytes()[:since].splitlines()
    begun_before = {json.loads(line)["auditID"] for line in earlier}
    after = [
        event
        for event in control_plane.audit(since)
        if event["user"].get("username", "") == user and event["auditID"] not in begun_before
    ]
    assert after
    assert all(token_id(rotated) in credential_of(event) for event in after)
    assert [
        e["requestURI"] for e in after if e.get("responseStatus", {}).get("code", 0) >= 400
    ] == []
    # A refused token names no user in the audit log; the agent's User-Agent does.
    assert unauthorized(control_plane, since) == []
    refused = unauthorized(control_plane, mark)
    print(f"requests refused (401) while the rotation settled: {len(refused)}")
    nothing_refused(installed)


def unauthorized(control_plane: ControlPlane, since: int) -> list[str]:
    return [
        event["requestURI"]
        for event in control_plane.audit(since)
        if event.get("userAgent", "").startswith("moonin-agent/")
        and event.get("responseStatus", {}).get("code") == 401
    ]
