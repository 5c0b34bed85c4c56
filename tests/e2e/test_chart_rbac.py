"""The agent under its own chart's RBAC, and that RBAC no wider than the agent's requests.

The chart is rendered (defaults, and each switch that changes RBAC), its ServiceAccounts,
ClusterRoles, Roles and bindings are loaded into the fake with RBAC on, and every workload
runs as a real process with its own ServiceAccount's token and the environment and
config.yaml the chart gives its container: discovery (two replicas handing the Lease
over, or one without leader election), `preview`, scaling through an apply and a revert,
the uninstall hook (scale-to-zero, then `scaling revert-all`), and `scaling revert-all` as
the scaling ServiceAccount. Nothing may be refused, every record and event must arrive,
and every request each account made is then held against its rendered RBAC: a request no
rule allows, a rule no request used, or a rule another already covers fails the test,
naming it.
"""

from __future__ import annotations

import copy
import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.kube.auth import service_account
from sandbox.kube.faults import RequestRecord
from sandbox.kube.requestinfo import request_info
from sandbox.kube.status import ApiError
from sandbox.platform import FakePlatform
from sandbox.scaling import action
from tests import cluster_objects
from tests import rbac_guard as guard
from tests import scaling_harness as scaling
from tests.agent_process import log_events, run_cli, stop_within
from tests.chart_install import (
    DISCOVERY,
    LEASE,
    SCALING,
    UNINSTALL,
    Installed,
    accounts,
    rbac_objects,
    rendered_variants,
)
from tests.chart_render import NAMESPACE, Rendered
from tests.conftest import view
from tests.scaling_windows import events_of, start_scaling, window
from tests.waiting import wait_until

# The variants whose RBAC differs: what the discovery role is granted changes with each.
RBAC_VARIANTS = (
    "default",
    "collection-off",
    "events-off",
    "scaling-disabled",
    "no-leader-election",
)


@pytest.fixture(scope="module")
def charts() -> Iterator[dict[str, Rendered]]:
    yield rendered_variants(RBAC_VARIANTS)


Install = Callable[[Rendered], Installed]


@pytest.fixture
def install(kube: FakeKube, platform: FakePlatform, tmp_path: Path) -> Iterator[Install]:
    """Load a rendering's ServiceAccounts and RBAC into the fake, each account with a token
    of its own, and turn RBAC on (the `kube` fixture's reset turns it off again)."""
    installs: list[Installed] = []

    def install_(rendered: Rendered) -> Installed:
        kube.create(objects.namespace(name=NAMESPACE))
        for obj in rbac_objects(rendered):
            kube.create(obj)
        tokens = {}
        for name in accounts(rendered):
            tokens[name] = f"token-of-{name}"
            kube.add_token(tokens[name], service_account(NAMESPACE, name))
        kube.enable_rbac()
        installed = Installed(
            rendered,
            platform,
            tmp_path,
            tokens=tokens,
            kubeconfig=lambda path, token: kube.kubeconfig(path, token=token),
            records=lambda: kube.requests,
        )
        installs.append(installed)
        return installed

    yield install_
    for installed in installs:
        installed.stop_all()


def lease_holder(kube: FakeKube) -> str | None:
    try:
        holder: str | None = kube.get("leases", NAMESPACE, LEASE)["spec"].get("holderIdentity")
    except ApiError:
        return None
    return holder


@pytest.mark.parametrize("variant", RBAC_VARIANTS)
def test_discovery_and_preview_run_under_the_charts_rbac_and_use_all_of_it(
    variant: str,
    charts: dict[str, Rendered],
    install: Install,
    kube: FakeKube,
    platform: FakePlatform,
) -> None:
    installed: Installed = install(charts[variant])
    releases = installed.rendered.values.get("config", {}).get("collectHelmReleases", True)
    job_logs = installed.rendered.values.get("config", {}).get("collectJobLogs", True)
    expected = cluster_objects.populate(kube)
    if not releases:
        expected = {slot for slot in expected if slot[0] != "helm_release"}
    workload = installed.rendered.workload("discovery")
    pods = [f"{workload['metadata']['name']}-{n}" for n in range(workload["spec"]["replicas"])]
    agents = {
        pod: installed.start(installed.env("discovery", "agent", pod), "run", "--role", "discovery")
        for pod in pods
    }

    def collected() -> bool:
        found = view(platform)
        jobs = [record for (kind, _), record in found.items() if kind == "job_execution"]
        # A failed run's log follows its record (read on a worker of its own).
        return expected <= set(found) and all(job["data"]["logs"] is not None for job in jobs)

    if job_logs:
        wait_until(collected, timeout=60)
    else:
        wait_until(lambda: expected <= set(view(platform)), timeout=60)
        [job] = [record for (kind, _), record in view(platform).items() if kind == "job_execution"]
        assert job["data"]["logs"] is None, job
    if len(pods) > 1:
        # The leader goes; the standby takes the Lease over and collects what changes next.
        wait_until(lambda: lease_holder(kube) in pods)
        leader = str(lease_holder(kube))
        agents[leader].send_signal(signal.SIGTERM)
        stop_within(agents[leader], 30)
        wait_until(lambda: lease_holder(kube) not in (None, leader), timeout=30)
    kube.create(objects.deployment(name="after-handover", namespace=cluster_objects.NS))
    wait_until(lambda: ("deployment", f"{cluster_objects.NS}/after-handover") in view(platform))

    # Clusters without the WatchList feature (before 1.32, or with it off) answer every
    # streaming list with 422: the agent lists page by page there, so the chart must grant
    # `list` as well as `watch`. Preview meets such a server here.
    kube.set_streaming_lists("refuse")
    preview = run_cli("preview", env=installed.env("discovery", "agent", "preview"))
    assert preview.returncode == 0, preview.stderr
    kinds = {json.loads(line)["kind"] for line in preview.stdout.splitlines()}
    assert {"namespace", "deployment", "job_execution"} <= kinds
    assert ("helm_release" in kinds) == releases

    [done] = [line for line in log_events(preview.stderr) if line["event"] == "preview_done"]
    assert done["forbidden"] == []

    for agent in agents.values():
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)
    # The Lease not there yet, and the streaming lists refused above.
    installed.check_requests(DISCOVERY, provoked={*guard.LEADER_ELECTION, ("watch", "*", 422)})


def hpa_bounds(kube: FakeKube, name: str) -> tuple[int, int]:
    spec = kube.get("horizontalpodautoscalers", scaling.NS, name)["spec"]
    return spec.get("minReplicas", 1), spec["maxReplicas"]


def test_scaling_and_the_uninstall_hook_run_under_the_charts_rbac_and_use_all_of_it(
    charts: dict[str, Rendered], install: Install, kube: FakeKube, platform: FakePlatform
) -> None:
    installed: Installed = install(charts["default"])
    kube.create(scaling.namespace())
    kube.create(scaling.deployment("web", replicas=2))
    kube.create(scaling.hpa("web", low=2, high=5))
    kube.create(scaling.deployment("api", replicas=1))  # no HPA: the window brings one

    # A window applied and reverted: bounds changed and restored, a provisional HPA created
    # and deleted, replicas raised and restored, each with its Kubernetes Event.
    window(platform, "t-1", 6, action("a-1", "web", 4, 20), action("a-2", "api", 3, 6))
    agent = start_scaling(installed, f"{SCALING}-0")
    wait_until(lambda: hpa_bounds(kube, "web") == (4, 20))
    wait_until(lambda: len(kube.list("horizontalpodautoscalers", scaling.NS)) == 2)
    wait_until(lambda: len(events_of(platform, "apply")) == 2)
    wait_until(lambda: hpa_bounds(kube, "web") == (2, 5), timeout=30)
    wait_until(lambda: len(kube.list("horizontalpodautoscalers", scaling.NS)) == 1)
    wait_until(lambda: len(events_of(platform, "revert")) == 2)
    # A revert's platform event is queued before its writes, its Kubernetes Event recorded
    # after them: the shipper may post the one before the other is written.
    wait_until(lambda: len(kube.list("events", scaling.NS)) >= 4)

    # Uninstall during a window: the hook scales the scaling workload to zero, waits for
    # its pod to go, and reverts what the window changed.
    window(platform, "t-2", 3600, action("a-3", "web", 6, 30), action("a-4", "api", 3, 6))
    wait_until(lambda: hpa_bounds(kube, "web") == (6, 30))
    wait_until(lambda: len(kube.list("horizontalpodautoscalers", scaling.NS)) == 2)
    workload = installed.rendered.workload("scaling")
    kube.create(workload)
    labels = workload["spec"]["template"]["metadata"]["labels"]
    scaling_pod = objects.pod(name=f"{SCALING}-0", namespace=NAMESPACE, labels=labels)
    kube.create(scaling_pod)

    def pod_goes() -> None:
        wait_until(lambda: kube.get("deployments", NAMESPACE, SCALING)["spec"]["replicas"] == 0)
        agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)
        kube.delete("pods", NAMESPACE, f"{SCALING}-0")

    hook = installed.scale_to_zero_hook(
        ca_pem=kube.tls.ca_pem, port=kube.port, on_scaled_down=pod_goes
    )
    assert hook.returncode == 0, hook.stdout + hook.stderr
    assert agent.poll() is not None
    # Somebody writes the HPA between revert-all's read and its write: it reads it again.
    kube.fail_next(409, resource="horizontalpodautoscalers", verb="patch")
    revert_all = run_cli(
        "scaling", "revert-all", env=installed.env("uninstall", "revert-all", "uninstall-hook")
    )
    assert revert_all.returncode == 0, revert_all.stderr
    reverted = json.loads(revert_all.stdout)
    assert reverted["failed"] == {} and f"{scaling.NS}/web" in reverted["reverted"]
    assert len(reverted["reverted"]) == 2
    assert hpa_bounds(kube, "web") == (2, 5)
    assert len(kube.list("horizontalpodautoscalers", scaling.NS)) == 1
    assert kube.get("deployments", scaling.NS, "api")["spec"]["replicas"] == 1
    wait_until(lambda: any(e["reason"] == "manual" for e in events_of(platform, "revert")))

    # revert-all as the scaling ServiceAccount, over a window with a provisional HPA.
    window(platform, "t-3", 3600, action("a-5", "api", 2, 4))
    agent = start_scaling(installed, f"{SCALING}-1")
    wait_until(lambda: len(kube.list("horizontalpodautoscalers", scaling.NS)) == 2)
    agent.send_signal(signal.SIGTERM)
    stop_within(agent, 30)
    kube.fail_next(409, resource="horizontalpodautoscalers", verb="delete")
    revert_all = run_cli(
        "scaling", "revert-all", env=installed.env("scaling", "agent", "revert-all")
    )
    assert revert_all.returncode == 0, revert_all.stderr
    assert len(kube.list("horizontalpodautoscalers", scaling.NS)) == 1

    # The two 409s injected above.
    conflicts = {
        ("patch", "horizontalpodautoscalers", 409),
        ("delete", "horizontalpodautoscalers", 409),
    }
    installed.check_requests(SCALING, UNINSTALL, provoked=conflicts)


@pytest.mark.unit
def test_the_guard_names_a_refused_request_an_unused_rule_and_a_rule_held_twice(
    charts: dict[str, Rendered],
) -> None:
    rendered = copy.deepcopy(charts["default"])
    role = rendered.one("ClusterRole", SCALING)
    role["rules"] += [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        {
            "apiGroups": ["autoscaling"],
            "resources": ["horizontalpodautoscalers"],
            "resourceNames": ["web"],
            "verbs": ["get"],
        },
    ]
    grants = guard.grants_of(rendered, SCALING)
    user = service_account(NAMESPACE, SCALING)

    def made(method: str, path: str, status: int = 200) -> RequestRecord:
        info = request_info(method, path, {})
        return RequestRecord(method, path, {}, status, None, False, 0.0, "", user, info)

    hpa = f"/apis/autoscaling/v2/namespaces/{scaling.NS}/horizontalpodautoscalers/web"
    records = [made("GET", hpa), made("GET", f"/api/v1/namespaces/{scaling.NS}/secrets/s")]
    [refused] = guard.refused(records, grants)
    assert 'get "secrets" "s" in API group "", namespace "shop"' in refused
    assert guard.refused([made("GET", hpa, status=403)], grants)
    unused = {str(grant) for grant in guard.unused(records, grants)}
    assert f'ClusterRole/{SCALING}: get "configmaps" in API group ""' in unused
    assert (
        f'ClusterRole/{SCALING}: get "horizontalpodautoscalers" in API group "autoscaling"'
        not in unused
    )
    [twice] = guard.redundant(grants)
    assert twice.names == ("web",) and twice.resource == "horizontalpodautoscalers"
