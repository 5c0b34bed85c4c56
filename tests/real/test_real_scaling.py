"""The scaling role end to end on a real kube-apiserver, with the real Deployment and HPA
controllers acting, under the chart's own RBAC.

The chart is rendered with the real Helm engine, its ServiceAccounts and RBAC applied to
the real server (`real_install`), and the scaling workload, `scaling revert-all` and the
uninstall hook run as processes with their accounts' TokenRequest tokens; the fake Moonin
platform serves the templates and receives the events. There is no metrics server, so the
HPA controller reports FailedGetResourceMetric, but it still writes the HPA's status and
clamps the Deployment's replicas into [minReplicas, maxReplicas].

What the real server decides here and a fake could only imitate: the defaults it fills into
an HPA (a revert must give back exactly what it stored), the 409s of resourceVersion
preconditions (the controllers' own writes race the agent's; a write made inside an
admission webhook lands exactly between the agent's read and its write), authentication
of rotated and revoked ServiceAccount tokens, and the audit log of every request each
account made, held against the chart's RBAC.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.controlplane import MERGE_PATCH, ControlPlane
from sandbox.kube.auth import service_account
from sandbox.platform import FakePlatform
from sandbox.scaling import action
from scheduler import annotations as notes
from tests import scaling_harness as scaling
from tests.admission_webhook import AdmissionWebhook, Request
from tests.agent_process import log_until, run_cli, stop_within
from tests.chart_install import SCALING, UNINSTALL, Installed, rendered_variants
from tests.chart_render import NAMESPACE, Rendered
from tests.real_cluster import NewNamespace, RealInstall, writes_since
from tests.scaling_harness import ours
from tests.scaling_windows import events_of, start_scaling, window
from tests.waiting import wait_until

HPA = ("autoscaling/v2", "HorizontalPodAutoscaler")
DEPLOYMENT = ("apps/v1", "Deployment")
WEBHOOK_CONFIGURATION = ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration")
# What the real controllers provoke: the Deployment controller writes the Deployment's
# status and the HPA controller the HPA's status and the Deployment's scale (raising it to a
# new minimum as the agent does), so a write carrying the resourceVersion the agent read may
# meet a 409; the next cycle (or revert-all at once) tries again on fresh state.
RACED = frozenset(
    {
        ("patch", "deployments", 409),
        ("patch", "horizontalpodautoscalers", 409),
        ("delete", "horizontalpodautoscalers", 409),
    }
)


@pytest.fixture(scope="module")
def chart() -> Iterator[Rendered]:
    yield rendered_variants(["default"])["default"]


class Cluster:
    """The admin's view of one namespace of the real server."""

    def __init__(self, plane: ControlPlane, ns: str) -> None:
        self.plane = plane
        self.ns = ns

    def hpa(self, name: str) -> dict[str, Any]:
        return self.plane.get(*HPA, self.ns, name)

    def hpas(self) -> list[str]:
        return sorted(h["metadata"]["name"] for h in self.plane.list(*HPA, self.ns))

    def bounds(self, name: str) -> tuple[int, int]:
        spec = self.hpa(name)["spec"]
        return spec["minReplicas"], spec["maxReplicas"]

    def replicas(self, name: str) -> int:
        return int(self.plane.get(*DEPLOYMENT, self.ns, name)["spec"]["replicas"])

    def deployment(self, name: str, replicas: int) -> None:
        self.plane.create(scaling.deployment(name, replicas, ns=self.ns))

    def hpa_on(self, name: str, low: int | None, high: int, **spec: Any) -> dict[str, Any]:
        """An HPA on the Deployment `name`, as the server stored it (defaults filled in)."""
        body = scaling.hpa(name, name, low, high, ns=self.ns)
        body["spec"].update(spec)
        return self.plane.create(body)

    def someone_patches(self, name: str, patch: dict[str, Any]) -> int:
        """Someone else's merge patch of the HPA `name` (as `kubectl patch` sends it), on a
        connection of its own, so an admission webhook's thread may make it."""
        with self.plane.client() as admin:
            path = self.plane.path(*HPA, self.ns, name)
            return admin.patch(path, json=patch, headers={"Content-Type": MERGE_PATCH}).status_code

    def event_reasons(self, obj: dict[str, Any]) -> set[str]:
        """The reasons of the Events about `obj`, found as `kubectl describe` finds them."""
        meta = obj["metadata"]
        selector = ",".join(
            f"involvedObject.{field}={value}"
            for field, value in (
                ("kind", obj["kind"]),
                ("name", meta["name"]),
                ("uid", meta["uid"]),
            )
        )
        events = self.plane.list("v1", "Event", self.ns, fieldSelector=selector)
        return {event["reason"] for event in events}


def controller_status(hpa: dict[str, Any]) -> tuple[int | None, str | None]:
    """What the HPA controller last wrote: the replicas it saw, and why it is not scaling
    on metrics."""
    status = hpa.get("status") or {}
    active = [c for c in status.get("conditions") or () if c["type"] == "ScalingActive"]
    return status.get("currentReplicas"), active[0]["reason"] if active else None


def written(hpa: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """What anyone but the HPA controller writes: the spec as the server serializes it, and
    the annotations."""
    return json.dumps(hpa["spec"]), hpa["metadata"].get("annotations") or {}


def without_ours(obj: dict[str, Any]) -> dict[str, str]:
    found = obj["metadata"].get("annotations") or {}
    return {key: value for key, value in found.items() if not key.startswith(notes.PREFIX)}


@pytest.fixture
def installed(real_install: RealInstall, chart: Rendered) -> Installed:
    return real_install(chart)


@pytest.fixture
def cluster(control_plane: ControlPlane, real_namespace: NewNamespace) -> Cluster:
    return Cluster(control_plane, real_namespace("shop"))


def revert_all(installed: Installed, component: str, container: str, *options: str) -> Any:
    done = run_cli(
        "scaling", "revert-all", *options, env=installed.env(component, container, "revert-all")
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_window_bounds_a_real_hpa_the_controller_acts_on_and_restores_it_exactly(
    control_plane: ControlPlane,
    installed: Installed,
    cluster: Cluster,
    platform: FakePlatform,
) -> None:
    cluster.deployment("web", 2)  # under its HPA, below the window's min
    # A partial behavior: the server fills in the rest of it, and the revert keeps all of it.
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 30}}
    before = cluster.hpa_on("web", 2, 5, behavior=behavior)
    assert before["spec"]["behavior"]["scaleUp"]["policies"]  # the server's defaults
    cluster.deployment("big", 9)  # under its HPA, above the window's max
    big = cluster.hpa_on("big", None, 10)  # minReplicas left to the server's default
    assert big["spec"]["minReplicas"] == 1
    cluster.deployment("api", 6)  # no HPA: the window brings a provisional one

    window(
        platform,
        "t-1",
        3600,
        action("a-1", "web", 4, 6, ns=cluster.ns),
        action("a-2", "big", 3, 5, ns=cluster.ns),
        action("a-3", "api", 2, 4, ns=cluster.ns),
    )
    agent = start_scaling(installed, f"{SCALING}-0")
    wait_until(lambda: cluster.bounds("web") == (4, 6), timeout=30)
    wait_until(lambda: cluster.hpas() == ["api", "big", "web"])
    wait_until(lambda: cluster.replicas("web") == 4)
    # The HPA controller clamps what is over the new max, the provisional HPA's included.
    wait_until(lambda: cluster.replicas("big") == 5, timeout=30)
    wait_until(lambda: cluster.replicas("api") == 4, timeout=30)
    # The controller acts on the bounded HPA: no metrics, but its status is written.
    wait_until(lambda: controller_status(cluster.hpa("web")) == (4, "FailedGetResourceMetric"))
    wait_until(lambda: len(events_of(platform, "apply")) == 3)

    platform.set_templates([])  # the window ends
    wait_until(lambda: cluster.hpas() == ["big", "web"], timeout=30)
    wait_until(lambda: cluster.bounds("web") == (2, 5))
    wait_until(lambda: cluster.replicas("api") == 6)
    wait_until(lambda: len(events_of(platform, "revert")) == 3)
    # The bounds come back first; the hand-back (managers, our annotation) is a second patch.
    wait_until(lambda: written(cluster.hpa("web")) == written(before), timeout=30)
    wait_until(lambda: written(cluster.hpa("big")) == written(big))
    # Beside the controller's own Events, as `kubectl describe` shows them. Each is recorded
    # after the write it tells of, so it may come after the writes waited for above.
    expected = {"MooninScalingApplied", "MooninScalingReverted", "FailedGetResourceMetric"}
    wait_until(lambda: expected <= cluster.event_reasons(before))
    api = control_plane.get(*DEPLOYMENT, cluster.ns, "api")
    wait_until(lambda: "MooninScalingReverted" in cluster.event_reasons(api))

    agent.send_signal(signal.SIGTERM)
    stop_within(agent, 30)
    installed.check_requests(SCALING, provoked=RACED, every_rule_used=False)


def test_dry_runs_of_run_and_revert_all_write_nothing_where_the_real_ones_apply_and_revert(
    control_plane: ControlPlane,
    installed: Installed,
    cluster: Cluster,
    platform: FakePlatform,
) -> None:
    cluster.deployment("web", 2)
    before = cluster.hpa_on("web", 2, 5)
    cluster.deployment("api", 1)
    window(
        platform,
        "t-1",
        3600,
        action("a-1", "web", 3, 8, ns=cluster.ns),
        action("a-2", "api", 2, 4, ns=cluster.ns),
    )

    mark = control_plane.audit_mark()
    dry = start_scaling(installed, f"{SCALING}-dry", "--dry-run")
    log_until(dry, "dry_run_change", timeout=30)
    wait_until(lambda: writes_since(control_plane, mark, SCALING, dry_run=True) != [])
    dry.send_signal(signal.SIGTERM)
    stop_within(dry, 30)
    assert writes_since(control_plane, mark, SCALING) == []
    assert cluster.hpas() == ["web"] and written(cluster.hpa("web")) == written(before)

    agent = start_scaling(installed, f"{SCALING}-0")
    wait_until(lambda: cluster.hpas() == ["api", "web"], timeout=30)
    wait_until(lambda: cluster.bounds("web") == (3, 8))
    agent.send_signal(signal.SIGTERM)
    stop_within(agent, 30)
    applied = written(cluster.hpa("web"))

    mark = control_plane.audit_mark()
    report = revert_all(installed, "scaling", "agent", "--dry-run")
    assert sorted(report["reverted"]) == [f"{cluster.ns}/api", f"{cluster.ns}/web"]
    assert writes_since(control_plane, mark, SCALING) == []
    assert writes_since(control_plane, mark, SCALING, dry_run=True) != []
    assert written(cluster.hpa("web")) == applied

    # revert-all as the scaling account itself (a pod of the workload, by hand).
    report = revert_all(installed, "scaling", "agent")
    assert sorted(report["reverted"]) == [f"{cluster.ns}/api", f"{cluster.ns}/web"]
    assert report["failed"] == {}
    assert cluster.hpas() == ["web"] and cluster.bounds("web") == (2, 5)
    assert cluster.replicas("api") == 1
    wait_until(lambda: {e["reason"] for e in events_of(platform, "revert")} == {"manual"})
    installed.check_requests(SCALING, provoked=RACED, every_rule_used=False)


POLICY = ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy")
POLICY_BINDING = ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding")


@pytest.fixture
def at_most_six(control_plane: ControlPlane, cluster: Cluster) -> Iterator[None]:
    """An admission policy of the real server: no HPA of the namespace above 6 replicas."""
    name = f"moonin-test-max-six-{cluster.ns}"
    control_plane.create(
        {
            "apiVersion": POLICY[0],
            "kind": POLICY[1],
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["autoscaling"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["horizontalpodautoscalers"],
                        }
                    ]
                },
                "validations": [
                    {"expression": "object.spec.maxReplicas <= 6", "message": "at most 6"}
                ],
            },
        }
    )
    control_plane.create(
        {
            "apiVersion": POLICY_BINDING[0],
            "kind": POLICY_BINDING[1],
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": cluster.ns}
                    }
                },
            },
        }
    )
    try:
        yield
    finally:
        control_plane.delete(*POLICY_BINDING, None, name)
        control_plane.delete(*POLICY, None, name)


def test_a_dry_run_shows_a_write_the_server_refuses_as_refused_and_changes_nothing(
    control_plane: ControlPlane,
    installed: Installed,
    cluster: Cluster,
    platform: FakePlatform,
    at_most_six: None,
) -> None:
    cluster.deployment("web", 2)
    before = cluster.hpa_on("web", 2, 5)
    window(platform, "t-1", 3600, action("a-1", "web", 3, 8, ns=cluster.ns))

    mark = control_plane.audit_mark()
    dry = start_scaling(installed, f"{SCALING}-dry", "--dry-run")
    # The policy takes effect within a moment; each cycle sends the patch again until then.
    refused = log_until(dry, "scaling_write_refused", timeout=30)
    dry.send_signal(signal.SIGTERM)
    stop_within(dry, 30)
    [line] = [
        json.loads(text)
        for text in refused.splitlines()
        if text.startswith("{") and json.loads(text)["event"] == "scaling_write_refused"
    ]
    assert line["status"] == 422 and "at most 6" in line["error"]
    # The window's bounds go on by server-side apply.
    assert line["error"].startswith(f"apply horizontalpodautoscaler {cluster.ns}/web: 422")
    assert writes_since(control_plane, mark, SCALING) == []
    assert f"patch /apis/autoscaling/v2/namespaces/{cluster.ns}/horizontalpodautoscalers/web" in (
        writes_since(control_plane, mark, SCALING, dry_run=True)
    )
    assert written(cluster.hpa("web")) == written(before)


@pytest.fixture
def scaling_workload(control_plane: ControlPlane) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Create the chart's scaling Deployment in the real server; deleted when the test ends."""
    made: list[dict[str, Any]] = []

    def create(workload: dict[str, Any]) -> None:
        made.append(control_plane.create(workload))

    yield create
    for workload in made:
        control_plane.delete(*DEPLOYMENT, NAMESPACE, workload["metadata"]["name"])


Webhook = Callable[[Callable[[Request], None], str], AdmissionWebhook]


@pytest.fixture
def hpa_webhook(control_plane: ControlPlane) -> Iterator[Webhook]:
    """`hpa_webhook(on_request, namespace)`: an admission webhook the real server calls on
    every HPA update in `namespace` (which holds an HPA already), live when this returns;
    removed when the test ends."""
    made: list[tuple[AdmissionWebhook, str]] = []

    def start(on_request: Callable[[Request], None], namespace: str) -> AdmissionWebhook:
        webhook = AdmissionWebhook(on_request)
        name = f"between-read-and-write-{namespace}"
        config = webhook.configuration(
            name, group="autoscaling", resource="horizontalpodautoscalers", namespace=namespace
        )
        control_plane.create(config)
        made.append((webhook, name))
        # The server picks the configuration up from its own watch: probe with dry-run
        # patches of an HPA of the namespace until it calls.
        probed = control_plane.list(*HPA, namespace)[0]["metadata"]["name"]
        probe = {"metadata": {"annotations": {"probe": "1"}}}

        def called() -> bool:
            control_plane.patch(*HPA, namespace, probed, probe, dryRun="All")
            return bool(webhook.requests)

        wait_until(called, poll=0.1)
        return webhook

    yield start
    for webhook, name in made:
        control_plane.delete(*WEBHOOK_CONFIGURATION, None, name)
        webhook.stop()


def test_the_uninstall_hook_scales_the_workload_to_zero_then_reverts_every_live_window(
    control_plane: ControlPlane,
    installed: Installed,
    cluster: Cluster,
    scaling_workload: Callable[[dict[str, Any]], None],
    hpa_webhook: Webhook,
    platform: FakePlatform,
) -> None:
    cluster.deployment("web", 2)
    before = cluster.hpa_on("web", 2, 5)
    cluster.deployment("api", 1)
    uninstall_user = service_account(NAMESPACE, UNINSTALL)
    theirs = {"metadata": {"annotations": {"team": "payments"}}}
    written_between: list[int] = []

    def between(request: Request) -> None:
        # Someone edits the HPA between revert-all's read and its write: it reads it again.
        if request["userInfo"]["username"] == uninstall_user and not written_between:
            written_between.append(cluster.someone_patches("web", theirs))

    hpa_webhook(between, cluster.ns)
    window(
        platform,
        "t-1",
        3600,
        action("a-1", "web", 6, 30, ns=cluster.ns),
        action("a-2", "api", 3, 6, ns=cluster.ns),
    )
    agent = start_scaling(installed, f"{SCALING}-0")
    wait_until(lambda: cluster.hpas() == ["api", "web"], timeout=30)
    wait_until(lambda: cluster.bounds("web") == (6, 30))

    # The scaling workload itself, whose pods the real Deployment controller makes (they
    # stay Pending: there is no scheduler) and removes once it is scaled to zero.
    workload = installed.rendered.workload("scaling")
    scaling_workload(workload)
    selector = ",".join(f"{k}={v}" for k, v in workload["spec"]["selector"]["matchLabels"].items())
    wait_until(lambda: bool(control_plane.list("v1", "Pod", NAMESPACE, labelSelector=selector)))

    def pod_goes() -> None:
        wait_until(
            lambda: control_plane.get(*DEPLOYMENT, NAMESPACE, SCALING)["spec"]["replicas"] == 0
        )
        agent.send_signal(signal.SIGTERM)  # what the kubelet does to the pod's container
        stop_within(agent, 30)

    port = int(control_plane.url.rsplit(":", 1)[1])
    hook = installed.scale_to_zero_hook(
        ca_pem=control_plane.ca_file.read_bytes(), port=port, on_scaled_down=pod_goes
    )
    assert hook.returncode == 0, hook.stdout + hook.stderr
    assert agent.poll() is not None
    assert control_plane.list("v1", "Pod", NAMESPACE, labelSelector=selector) == []

    mark = control_plane.audit_mark()
    report = revert_all(installed, "uninstall", "revert-all")
    assert sorted(report["reverted"]) == [f"{cluster.ns}/api", f"{cluster.ns}/web"]
    assert report["failed"] == {}
    assert written_between == [200]
    made = control_plane.requests(mark)
    conflicts = [
        (r.info.verb, r.info.resource, r.info.name)
        for r in made
        if r.user == uninstall_user and r.status == 409
    ]
    # The Deployment controller writes api's status after the journal label, so the replicas
    # restore may meet a 409 of its own; it reads again and goes through in the same run.
    web_hpa = ("patch", "horizontalpodautoscalers", "web")
    assert [c for c in conflicts if c not in {web_hpa, ("patch", "deployments", "api")}] == []
    # The planted edit makes web's first 409. The HPA controller writes the status right after
    # the bounds restore, so the hand-back may meet one more: never more than others wrote.
    written_by_others = [
        r
        for r in made
        if r.info.verb in {"patch", "update"}
        and (r.info.resource, r.info.name) == web_hpa[1:]
        and r.user != uninstall_user
        and r.status == 200
    ]
    assert 1 <= conflicts.count(web_hpa) <= len(written_by_others)
    after = cluster.hpa("web")
    assert json.dumps(after["spec"]) == json.dumps(before["spec"])
    # Their edit kept; of ours only the released marker stays, so the window is not
    # applied again.
    assert without_ours(after) == before["metadata"]["annotations"] | {"team": "payments"}
    assert set(ours(after)) == {notes.RELEASED}
    assert cluster.hpas() == ["web"] and cluster.replicas("api") == 1
    wait_until(lambda: len(events_of(platform, "revert")) == 2)
    # The uninstall account used every rule it holds, its `get` on HPAs for the retry.
    installed.check_requests(UNINSTALL, provoked=RACED)
    installed.check_requests(SCALING, provoked=RACED, every_rule_used=False)


def test_bounds_someone_changes_during_a_window_are_left_as_set_and_reported_overridden(
    control_plane: ControlPlane,
    installed: Installed,
    cluster: Cluster,
    platform: FakePlatform,
) -> None:
    cluster.deployment("web", 2)
    cluster.hpa_on("web", 2, 5)
    window(platform, "t-1", 3600, action("a-1", "web", 4, 6, ns=cluster.ns))
    agent = start_scaling(installed, f"{SCALING}-0")
    wait_until(lambda: cluster.bounds("web") == (4, 6), timeout=30)

    assert cluster.someone_patches("web", {"spec": {"minReplicas": 3, "maxReplicas": 9}}) == 200
    wait_until(lambda: [e["reason"] for e in events_of(platform, "revert")] == ["overridden"])
    [reverted] = events_of(platform, "revert")
    assert reverted["min_replicas"] is None and "3:9" in reverted["message"]
    wait_until(lambda: set(ours(cluster.hpa("web"))) == {notes.RELEASED})
    # The revert's Kubernetes Event follows its patch: it is not one of the later writes.
    wait_until(lambda: "MooninScalingReverted" in cluster.event_reasons(cluster.hpa("web")))
    # The window is still on: later cycles leave the bounds as they were set.
    mark = control_plane.audit_mark()
    user = service_account(NAMESPACE, SCALING)
    wait_until(
        lambda: (
            sum(r.info.verb == "list" for r in control_plane.requests(mark, user=user) if r.info)
            >= 3
        ),
        timeout=30,
    )
    assert cluster.bounds("web") == (3, 9)
    assert writes_since(control_plane, mark, SCALING) == []
    agent.send_signal(signal.SIGTERM)
    stop_within(agent, 30)
    installed.check_requests(SCALING, provoked=RACED, every_rule_used=False)


def test_a_write_between_the_agents_read_and_its_revert_is_kept_and_the_hpa_released(
    control_plane: ControlPlane,
    installed: Installed,
    cluster: Cluster,
    hpa_webhook: Webhook,
    platform: FakePlatform,
) -> None:
    cluster.deployment("web", 2)
    cluster.hpa_on("web", 2, 5)
    agent_user = service_account(NAMESPACE, SCALING)
    someone = {"spec": {"minReplicas": 3, "maxReplicas": 9}}
    written_between: list[int] = []

    def between(request: Request) -> None:
        # The agent's revert (its write that removes the window's annotations): someone
        # changes the bounds after the server read the HPA for it, before it writes.
        by_agent = request["userInfo"]["username"] == agent_user
        reverting = by_agent and notes.MANAGED not in ours(request["object"])
        if reverting and not written_between:
            written_between.append(cluster.someone_patches("web", someone))

    hpa_webhook(between, cluster.ns)
    window(platform, "t-1", 3600, action("a-1", "web", 4, 6, ns=cluster.ns))
    agent = start_scaling(installed, f"{SCALING}-0")
    wait_until(lambda: cluster.bounds("web") == (4, 6), timeout=30)

    mark = control_plane.audit_mark()
    platform.set_templates([])  # the window ends
    wait_until(lambda: set(ours(cluster.hpa("web"))) == {notes.RELEASED}, timeout=30)
    assert written_between == [200]
    assert cluster.bounds("web") == (3, 9)  # theirs, not clobbered by the revert
    made = control_plane.requests(mark, user=agent_user)
    conflicts = [(r.info.verb, r.info.resource, r.info.name) for r in made if r.status == 409]
    # The Deployment controller writes a Deployment's status after each of our writes to it
    # (api's journal label, web's replicas raised at apply), so the replicas restore and the
    # Deployment's hand-back may meet a 409 of their own; each reads again and goes through
    # in the same run. So may the HPA's hand-back after the release (the HPA controller
    # writes the status at once after a revert): it too reads again at once.
    others = [c for c in conflicts if c[:2] != ("patch", "deployments")]
    assert others[:1] == [("patch", "horizontalpodautoscalers", "web")]
    assert set(others) == {("patch", "horizontalpodautoscalers", "web")}
    # The revert event was put before the write that met the 409 (one revert event a
    # window); the next revert scan found the bounds changed and released the HPA as is.
    wait_until(lambda: len(events_of(platform, "revert")) == 1)
    [reverted] = events_of(platform, "revert")
    assert reverted["reason"] == "disabled"
    assert (reverted["min_replicas"], reverted["max_replicas"]) == (4, 6)
    agent.send_signal(signal.SIGTERM)
    stop_within(agent, 30)
    installed.check_requests(SCALING, provoked=RACED, every_rule_used=False)


@pytest.fixture
def bound_token(control_plane: ControlPlane) -> Iterator[Callable[[str], str]]:
    """`bound_token(name)`: a token of the scaling account that deleting the Secret `name`
    (made here, in the chart's namespace) revokes. Secrets left are deleted at the end."""
    made: list[str] = []

    def mint(name: str) -> str:
        meta = {"name": name, "namespace": NAMESPACE}
        secret = control_plane.create({"apiVersion": "v1", "kind": "Secret", "metadata": meta})
        made.append(name)
        bound = {"kind": "Secret", "name": name, "uid": secret["metadata"]["uid"]}
        return control_plane.token(NAMESPACE, SCALING, bound_to=bound)

    yield mint
    for name in made:
        if control_plane.exists("v1", "Secret", NAMESPACE, name):
            control_plane.delete("v1", "Secret", NAMESPACE, name)


def authenticated(plane: ControlPlane, token: str) -> bool:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {}}
    return bool(plane.create(review | {"spec": {"token": token}})["status"].get("authenticated"))


def test_a_token_rotated_and_the_old_one_revoked_while_running_leaves_reconcile_going(
    control_plane: ControlPlane,
    installed: Installed,
    cluster: Cluster,
    bound_token: Callable[[str], str],
    platform: FakePlatform,
    tmp_path: Path,
) -> None:
    cluster.deployment("web", 2)
    cluster.hpa_on("web", 2, 5)
    # The account's token in a file the kubeconfig names, as a kubelet projects it.
    token_file = tmp_path / "token"
    token_file.write_text(bound_token("scaling-token-1"))
    kubeconfig = json.loads(control_plane.kubeconfig(tmp_path / "kubeconfig").read_text())
    kubeconfig["users"][0]["user"] = {"tokenFile": str(token_file)}
    (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
    env = installed.env("scaling", "agent", f"{SCALING}-0")
    env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
    window(platform, "t-1", 3600, action("a-1", "web", 3, 6, ns=cluster.ns))
    agent = installed.start(env, "run", "--role", "scaling")
    wait_until(lambda: cluster.bounds("web") == (3, 6), timeout=30)

    mark = control_plane.audit_mark()
    old = token_file.read_text()
    rotated = tmp_path / "token.new"
    rotated.write_text(bound_token("scaling-token-2"))
    rotated.replace(token_file)  # swapped in at once, as the kubelet's atomic writer does
    control_plane.delete("v1", "Secret", NAMESPACE, "scaling-token-1")
    wait_until(lambda: not authenticated(control_plane, old), timeout=30)

    window(platform, "t-2", 3600, action("a-2", "web", 4, 7, ns=cluster.ns))
    wait_until(lambda: cluster.bounds("web") == (4, 7), timeout=30)
    # One write takes the HPA over from the ended window, its revert event put first.
    wait_until(lambda: [e["template_id"] for e in events_of(platform, "revert")] == ["t-1"])
    agent.send_signal(signal.SIGTERM)
    stop_within(agent, 30)
    with control_plane.client(old) as client:
        assert client.get(f"/api/v1/namespaces/{cluster.ns}").status_code == 401
    # The agent never sent the revoked token: the one refusal is the probe's just above.
    [refused] = [r for r in control_plane.requests(mark) if r.status == 401]
    assert refused.path == f"/api/v1/namespaces/{cluster.ns}"
    installed.check_requests(SCALING, provoked=RACED, every_rule_used=False)
