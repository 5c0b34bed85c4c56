"""Scaling windows beside Argo CD, Flux and Helm 4, on the real API server with the real HPA
controller running: each tool's apply during a window (`tests/gitops_tools`, configured
by the snippets of docs/scaling.md), in both `GITOPS_CONFLICTS` modes, with the agent
SIGKILLed and started again mid-window; and the managedFields a window leaves on HPAs made
by `kubectl apply` (client-side), by server-side apply as each tool, and provisional ones.

What each scenario holds to: the HPA's spec and managedFields after the revert (the
original spec, no entry of `moonin-agent`), the events sent, and the agent's writes to the
HPA during the window, counted from the audit log: one apply, a revert of two writes (the
patch and the hand-back), and under `reassert` at most one apply again per interval,
however often the tool syncs."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.controlplane import ControlPlane, ControlPlaneError
from sandbox.kube import RequestRecord
from sandbox.kube.auth import service_account
from sandbox.platform import FakePlatform
from sandbox.scaling import action
from scheduler import annotations as notes
from tests import scaling_harness as scaling
from tests.agent_process import stop_within
from tests.chart_install import SCALING, Installed, rendered_variants
from tests.chart_render import NAMESPACE, Rendered
from tests.gitops_tools import ArgoCd, Flux, Helm4, entries, owners_of, snippet
from tests.kubectl import COMMAND_TIMEOUT
from tests.real_cluster import WRITES, NewNamespace, RealInstall
from tests.scaling_harness import ours
from tests.scaling_windows import events_of, start_scaling, window
from tests.waiting import wait_until

HPA = ("autoscaling/v2", "HorizontalPodAutoscaler")
OURS = "moonin-agent"
BOUNDS = (("spec", "minReplicas"), ("spec", "maxReplicas"))
REASSERT_SECONDS = 2.0
ARGO_TRACKING = {"argocd.argoproj.io/tracking-id": "shop:autoscaling/HorizontalPodAutoscaler"}
FLUX_LABELS = {"kustomize.toolkit.fluxcd.io/name": "apps"}


@pytest.fixture(scope="module")
def chart() -> Rendered:
    return rendered_variants(["default"])["default"]


@pytest.fixture
def installed(real_install: RealInstall, chart: Rendered) -> Installed:
    return real_install(chart)


@dataclass
class Scene:
    """One namespace with the Deployment `web` (2 replicas) and its declared HPA (2:5), the
    agent's scaling workload, and a window 4:6 on the platform."""

    plane: ControlPlane
    installed: Installed
    platform: FakePlatform
    ns: str
    mode: str
    agent: subprocess.Popen[str] | None = None

    def declared(
        self, low: int = 2, high: int = 5, *, labels: Any = None, annotations: Any = None
    ) -> dict[str, Any]:
        body = scaling.hpa("web", "web", low, high, ns=self.ns)
        body["metadata"]["labels"] = dict(labels or {})
        body["metadata"]["annotations"] = dict(annotations or {})
        return body

    def start(self) -> None:
        env = self.installed.env("scaling", "agent", f"{SCALING}-0")
        env.update(GITOPS_CONFLICTS=self.mode, REASSERT_SECONDS=str(REASSERT_SECONDS))
        self.agent = self.installed.start(env, "run", "--role", "scaling")

    def kill(self) -> None:
        """SIGKILL: no revert, no shipping, no store commit beyond what was made."""
        assert self.agent is not None
        self.agent.send_signal(signal.SIGKILL)
        self.agent.wait(timeout=30)

    def stop(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            stop_within(self.agent, 30)

    def open_window(self) -> None:
        window(self.platform, "t-1", 3600, action("a-1", "web", 4, 6, ns=self.ns))
        wait_until(lambda: self.bounds() == (4, 6), timeout=30)

    def close_window(self) -> None:
        self.platform.set_templates([])
        wait_until(lambda: len(events_of(self.platform, "revert")) == 1, timeout=30)
        wait_until(lambda: handed_back(self.hpa()), timeout=30)

    def deployed_and_windowed(self, deploy: Callable[[], object]) -> dict[str, Any]:
        """The HPA put in by `deploy`, then the agent started and the window on; the HPA as
        it was before the window."""
        deploy()
        before = self.hpa()
        self.start()
        self.open_window()
        return before

    def holds_across_a_restart(self, tool_runs: Callable[[], object]) -> None:
        """The agent SIGKILLed, the tool run meanwhile, the agent started again: after a few
        of its cycles the window still holds and nothing was reverted."""
        self.kill()
        tool_runs()
        self.start()
        self.quiet_cycles(self.plane.audit_mark())
        assert self.bounds() == (4, 6) and events_of(self.platform, "revert") == []

    def hpa(self) -> dict[str, Any]:
        return self.plane.get(*HPA, self.ns, "web")

    def bounds(self) -> tuple[int, int]:
        spec = self.hpa()["spec"]
        return spec.get("minReplicas", 1), spec["maxReplicas"]

    def agent_requests(self, mark: int) -> list[RequestRecord]:
        return self.plane.requests(mark, user=service_account(NAMESPACE, SCALING))

    def agent_writes(self, mark: int) -> list[str]:
        """The writes to the HPA the server took from the agent since `mark`, as verb and
        content type (a 409 on a stale read is not a write)."""
        path = self.plane.path(*HPA, self.ns, "web")
        return [
            f"{r.info.verb} {r.query.get('fieldManager', '')}"
            for r in self.agent_requests(mark)
            if r.info and r.info.verb in WRITES and r.path == path and r.status < 300
        ]

    def quiet_cycles(self, mark: int, cycles: int = 3) -> None:
        """Wait until the agent has listed the cluster's HPAs `cycles` more times since
        `mark` (revert scans): a sentinel for "it had every chance to write and did not"."""
        path = "/apis/autoscaling/v2/horizontalpodautoscalers"

        def listed() -> int:
            made = self.agent_requests(mark)
            return sum(1 for r in made if r.info and r.info.verb == "list" and r.path == path)

        wait_until(lambda: listed() >= cycles, timeout=30)


def handed_back(hpa: dict[str, Any]) -> bool:
    """No annotation of ours but the released marker, and no managedFields entry of ours."""
    kept = {key for key in ours(hpa) if key != notes.RELEASED}
    return not kept and not any(name.startswith(OURS) for name in entries(hpa))


@pytest.fixture
def scene_of(
    control_plane: ControlPlane,
    installed: Installed,
    real_namespace: NewNamespace,
    platform: FakePlatform,
) -> Iterator[Callable[[str], Scene]]:
    made: list[Scene] = []

    def make(mode: str) -> Scene:
        ns = real_namespace("gitops")
        control_plane.create(scaling.deployment("web", 2, ns=ns))
        made.append(Scene(control_plane, installed, platform, ns, mode))
        return made[-1]

    yield make
    for scene in made:
        scene.stop()


# --- a tool takes the bounds back during the window ---------------------------------------


@dataclass(frozen=True)
class Tool:
    """How a tool puts its HPA in the cluster, and its sync during a window."""

    deploy: Callable[[Scene, dict[str, Any]], None]
    sync: Callable[[Scene, dict[str, Any]], None]
    markers: dict[str, Any]
    manager: str


def _argo(scene: Scene, declared: dict[str, Any]) -> None:
    ArgoCd(scene.plane).sync(declared)


def _argo_heal(scene: Scene, declared: dict[str, Any]) -> None:
    ArgoCd(scene.plane).self_heal(declared)


def _flux(scene: Scene, declared: dict[str, Any]) -> None:
    Flux(scene.plane).reconcile(declared)


def _helm(scene: Scene, declared: dict[str, Any]) -> None:
    spec = declared["spec"]
    values = {"name": "web", "minReplicas": spec["minReplicas"], "maxReplicas": spec["maxReplicas"]}
    chart = Helm4.chart(scene.plane, scene.installed.tmp / f"chart-{scene.ns}", "web", scene.ns)
    chart.upgrade(values, force_conflicts=True)


TOOLS = {
    "argo self-heal": Tool(_argo, _argo_heal, {"annotations": ARGO_TRACKING}, ArgoCd.MANAGER),
    "flux reconcile": Tool(_flux, _flux, {"labels": FLUX_LABELS}, Flux.MANAGER),
    "helm upgrade --force-conflicts": Tool(_helm, _helm, {}, Helm4.MANAGER),
}


@pytest.mark.parametrize("tool", TOOLS.values(), ids=TOOLS.keys())
def test_a_sync_during_the_window_ends_it_once_when_the_agent_yields(
    scene_of: Callable[[str], Scene], tool: Tool
) -> None:
    scene = scene_of("yield")
    declared = scene.declared(**tool.markers)
    mark = scene.plane.audit_mark()
    before = scene.deployed_and_windowed(lambda: tool.deploy(scene, declared))
    scene.kill()  # the sync lands while no agent runs; the next one finds it
    tool.sync(scene, declared)
    assert scene.bounds() == (2, 5) and owners_of(scene.hpa(), BOUNDS[0]) == {tool.manager}
    scene.start()
    wait_until(lambda: len(events_of(scene.platform, "revert")) == 1, timeout=30)
    [revert] = events_of(scene.platform, "revert")
    assert revert["reason"] == "overridden"
    wait_until(lambda: handed_back(scene.hpa()), timeout=30)
    after = scene.hpa()
    assert after["spec"] == before["spec"]
    assert owners_of(after, BOUNDS[0]) == owners_of(after, BOUNDS[1]) == {tool.manager}
    assert ours(after) == {notes.RELEASED: f"t-1/a-1/{revert['window_start']}"}
    # One apply; a revert of two writes: the release patch and the hand-back.
    assert len(scene.agent_writes(mark)) == 3, scene.agent_writes(mark)
    settled = scene.plane.audit_mark()
    scene.quiet_cycles(settled)
    assert scene.agent_writes(settled) == []  # released: the same window stays off
    assert [e["type"] for e in scene.platform.events().values()].count("error") == 0


@pytest.mark.parametrize("tool", TOOLS.values(), ids=TOOLS.keys())
def test_a_sync_is_undone_at_most_once_per_interval_when_the_agent_reasserts(
    scene_of: Callable[[str], Scene], tool: Tool
) -> None:
    scene = scene_of("reassert")
    declared = scene.declared(**tool.markers)
    before = scene.deployed_and_windowed(lambda: tool.deploy(scene, declared))
    mark = scene.plane.audit_mark()
    started = time.monotonic()
    syncs = 0
    killed = False
    while time.monotonic() - started < 4 * REASSERT_SECONDS:
        if scene.bounds() != (2, 5):
            tool.sync(scene, declared)  # the tool's self-heal, at once after each drift
            syncs += 1
        if not killed and time.monotonic() - started > 1.5 * REASSERT_SECONDS:
            scene.kill()  # the interval is kept on the HPA: a restart does not shorten it
            scene.start()
            killed = True
        time.sleep(0.2)
    elapsed = time.monotonic() - started
    applies = scene.agent_writes(mark)  # each an apply again: the revert comes after
    assert 1 <= len(applies) <= math.ceil(elapsed / REASSERT_SECONDS) + 1, applies
    assert syncs >= len(applies)
    wait_until(lambda: len(events_of(scene.platform, "error")) == 1, timeout=30)
    [error] = events_of(scene.platform, "error")
    assert error["reason"] == "gitops_conflict" and tool.manager in error["message"]
    assert events_of(scene.platform, "revert") == []  # a sync does not end the window

    scene.close_window()
    after = scene.hpa()
    assert after["spec"] == before["spec"]
    assert ours(after) == {}
    assert {OURS} & {name.split("/")[0] for name in entries(after)} == set()


def test_a_persons_kubectl_edit_during_the_window_stays_overridden_when_the_agent_reasserts(
    scene_of: Callable[[str], Scene], kubectl_binary: Path, tmp_path: Path
) -> None:
    scene = scene_of("reassert")
    ArgoCd(scene.plane).sync(scene.declared(annotations=ARGO_TRACKING))
    scene.start()
    scene.open_window()
    scene.kill()
    Kubectl(kubectl_binary, scene.plane, tmp_path).edit(
        scene.ns, "web", "minReplicas: 4", "minReplicas: 3"
    )
    scene.start()
    wait_until(lambda: len(events_of(scene.platform, "revert")) == 1, timeout=30)
    [revert] = events_of(scene.platform, "revert")
    assert revert["reason"] == "overridden"
    wait_until(lambda: handed_back(scene.hpa()), timeout=30)
    after = scene.hpa()
    assert scene.bounds() == (3, 6)  # as the person left them
    assert owners_of(after, BOUNDS[0]) == {"kubectl-edit"}
    assert owners_of(after, BOUNDS[1]) == {ArgoCd.MANAGER}  # the one we held, handed back
    assert events_of(scene.platform, "error") == []


# --- configured as docs/scaling.md says: the window holds ----------------------------------


def test_argo_cd_with_the_documented_ignore_rule_leaves_the_window_alone(
    scene_of: Callable[[str], Scene],
) -> None:
    scene = scene_of("yield")
    argo = ArgoCd(scene.plane, yaml.safe_load(snippet("argocd")))
    declared = scene.declared(annotations=ARGO_TRACKING)
    before = scene.deployed_and_windowed(lambda: argo.sync(declared))
    assert not argo.out_of_sync(declared)  # no OutOfSync: self-heal has nothing to do
    # A sync for another change keeps the live bounds.
    scene.holds_across_a_restart(lambda: argo.sync(declared))
    scene.close_window()
    after = scene.hpa()
    assert after["spec"] == before["spec"]
    assert owners_of(after, BOUNDS[0]) == owners_of(after, BOUNDS[1]) == {ArgoCd.MANAGER}
    assert not argo.out_of_sync(declared)
    # A commit changing the bounds syncs as usual once the window is over.
    argo.sync(scene.declared(3, 7, annotations=ARGO_TRACKING))
    assert scene.bounds() == (3, 7)


def test_flux_with_the_documented_ignore_rule_leaves_the_window_alone(
    scene_of: Callable[[str], Scene],
) -> None:
    scene = scene_of("yield")
    flux = Flux(scene.plane, yaml.safe_load(snippet("flux-ignore")))
    declared = scene.declared(labels=FLUX_LABELS)
    before = scene.deployed_and_windowed(lambda: flux.reconcile(declared))
    applied: list[bool] = []  # it applies, without the bounds another applier owns
    scene.holds_across_a_restart(lambda: applied.append(flux.reconcile(declared)))
    assert applied == [True]
    scene.close_window()
    after = scene.hpa()
    assert after["spec"] == before["spec"]
    assert owners_of(after, BOUNDS[0]) == {Flux.MANAGER}
    flux.reconcile(declared)  # owned by Flux alone again: it keeps the live values
    assert scene.bounds() == (2, 5) and events_of(scene.platform, "revert")[0]["reason"] == (
        "disabled"
    )


def test_flux_with_the_documented_ssa_annotation_never_applies_the_hpa_again(
    scene_of: Callable[[str], Scene],
) -> None:
    scene = scene_of("yield")
    flux = Flux(scene.plane)
    annotation = yaml.safe_load(snippet("flux-ssa"))["metadata"]["annotations"]
    declared = scene.declared(labels=FLUX_LABELS, annotations=annotation)
    assert flux.reconcile(declared)  # created
    scene.start()
    scene.open_window()
    applied: list[bool] = []
    scene.holds_across_a_restart(lambda: applied.append(flux.reconcile(declared)))
    assert applied == [False]
    scene.close_window()
    assert scene.bounds() == (2, 5) and not flux.reconcile(declared)


def test_a_helm_4_upgrade_during_the_window_conflicts_as_the_docs_quote_it(
    scene_of: Callable[[str], Scene],
) -> None:
    scene = scene_of("yield")
    helm = Helm4.chart(scene.plane, scene.installed.tmp / f"chart-{scene.ns}", "web", scene.ns)
    values = {"name": "web", "minReplicas": 2, "maxReplicas": 5}
    helm.upgrade(values)
    scene.start()
    scene.open_window()
    scene.kill()
    with pytest.raises(ControlPlaneError) as refused:
        helm.upgrade(values)
    assert refused.value.status == 409
    assert snippet("helm-conflict").strip() in str(refused.value)
    assert scene.bounds() == (4, 6)  # nothing of the upgrade went through
    scene.start()
    scene.close_window()
    helm.upgrade({**values, "minReplicas": 3})  # after the window: no conflict
    assert scene.bounds() == (3, 5)


# --- each way an HPA gets into the cluster: kubectl, Argo CD, Flux, Helm 4, provisional ----

# What each tool leaves on what it deploys, besides its field manager.
OWNER_MARKERS: dict[str, dict[str, Any]] = {
    "argo": {"annotations": {"argocd.argoproj.io/tracking-id": "shop:autoscaling/x:ns/argo"}},
    "flux": {"labels": {"kustomize.toolkit.fluxcd.io/name": "apps"}},
    "helm": {
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "helm", "meta.helm.sh/release-namespace": "x"},
    },
}
APPLIERS = {"argo": "argocd-controller", "flux": "kustomize-controller", "helm": "helm"}
OWNER_TOOLS = {"csa": "unmanaged", "argo": "argocd", "flux": "flux", "helm": "helm"}


def declared_as(name: str, ns: str, low: int = 2, high: int = 5) -> dict[str, Any]:
    """The HPA `name` as a repository declares it, with its tool's markers."""
    body = scaling.hpa(name, name, low, high, ns=ns)
    marks = OWNER_MARKERS.get(name, {})
    body["metadata"]["labels"] = marks.get("labels", {})
    body["metadata"]["annotations"] = marks.get("annotations", {})
    return body


class Kubectl:
    """The real kubectl as a person or a pipeline runs it against the control plane."""

    def __init__(self, binary: Path, plane: ControlPlane, folder: Path) -> None:
        self.binary = binary
        self.config = plane.kubeconfig(folder / "kubeconfig")
        self.folder = folder

    def apply(self, obj: dict[str, Any]) -> None:
        manifest = self.folder / f"{obj['metadata']['name']}.json"
        manifest.write_text(json.dumps(obj))
        self._run("apply", "-f", str(manifest))

    def edit(self, namespace: str, name: str, old: str, new: str) -> None:
        """`kubectl edit` of an HPA by a person whose editor replaces `old` with `new`."""
        editor = self.folder / "editor.py"
        editor.write_text(
            "import pathlib, sys\n"
            "page = pathlib.Path(sys.argv[1])\n"
            f"page.write_text(page.read_text().replace({old!r}, {new!r}))\n"
        )
        self._run("edit", "-n", namespace, "hpa", name, editor=f"{sys.executable} {editor}")

    def _run(self, *args: str, editor: str | None = None) -> None:
        env = {**os.environ, **({"KUBE_EDITOR": editor} if editor else {})}
        done = subprocess.run(
            [str(self.binary), "--kubeconfig", str(self.config), *args],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
            env=env,
        )
        assert done.returncode == 0, done.stderr


def owners_of_bounds(hpa: dict[str, Any]) -> set[str]:
    return {
        manager
        for manager, fields in entries(hpa).items()
        if {"f:minReplicas", "f:maxReplicas"} <= set(fields)
    }


def test_a_window_takes_the_bounds_and_its_revert_gives_them_back_to_each_tool(
    control_plane: ControlPlane,
    installed: Installed,
    real_namespace: NewNamespace,
    platform: FakePlatform,
    kubectl_binary: Path,
    tmp_path: Path,
) -> None:
    ns = real_namespace("owners")
    plane = control_plane
    kubectl = Kubectl(kubectl_binary, plane, tmp_path)
    for name in ("csa", *APPLIERS, "bare"):
        plane.create(scaling.deployment(name, 2, ns=ns))
    kubectl.apply(declared_as("csa", ns))
    for name, manager in APPLIERS.items():
        plane.apply(declared_as(name, ns), manager=manager)
    before = {name: plane.get(*HPA, ns, name) for name in OWNER_TOOLS}
    assert owners_of_bounds(before["csa"]) == {"kubectl-client-side-apply/Update"}
    assert owners_of_bounds(before["argo"]) == {"argocd-controller/Apply"}

    window(
        platform,
        "t-1",
        3600,
        *(action(f"a-{name}", name, 4, 6, ns=ns) for name in (*OWNER_TOOLS, "bare")),
    )
    agent = start_scaling(installed, f"{SCALING}-0")
    try:
        wait_until(
            lambda: all(bounds_of(plane, ns, name) == (4, 6) for name in OWNER_TOOLS), timeout=30
        )
        wait_until(lambda: plane.exists(*HPA, ns, "bare"), timeout=30)
        for name in OWNER_TOOLS:
            during = plane.get(*HPA, ns, name)
            assert owners_of_bounds(during) == {f"{OURS}/Apply"}, entries(during)
        wait_until(lambda: len(events_of(platform, "apply")) == 5, timeout=30)
        tools = {e["deployment"]: e.get("details") for e in events_of(platform, "apply")}
        for name, tool in OWNER_TOOLS.items():
            assert tools[name]["managed_by"]["tool"] == tool, tools[name]
        assert tools["argo"]["managed_by"]["managers"] == ["argocd-controller"]
        assert tools["csa"]["managed_by"]["managers"] == ["kubectl-client-side-apply"]

        platform.set_templates([])  # the window ends
        wait_until(lambda: len(events_of(platform, "revert")) == 5, timeout=30)
        wait_until(lambda: not plane.exists(*HPA, ns, "bare"), timeout=30)
        wait_until(
            lambda: all(handed_back(plane.get(*HPA, ns, n)) for n in OWNER_TOOLS), timeout=30
        )
    finally:
        agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)

    for name in OWNER_TOOLS:
        after = plane.get(*HPA, ns, name)
        assert after["spec"] == before[name]["spec"], name
        assert ours(after) == {}, name
        assert not [m for m in entries(after) if m.startswith(OURS)], entries(after)
        assert owners_of_bounds(after) == owners_of_bounds(before[name]), entries(after)
    # Each Deployment was raised to the window's min (the provisional HPA's restored after
    # it): its replicas are not ours either.
    for name in (*OWNER_TOOLS, "bare"):
        deployment = plane.get("apps/v1", "Deployment", ns, name)
        assert not [m for m in entries(deployment) if m.startswith(OURS)], entries(deployment)
    assert plane.get("apps/v1", "Deployment", ns, "bare")["spec"]["replicas"] == 2

    # Each tool's next change to the bounds (a commit synced, an upgrade) needs no force.
    changed = {name: declared_as(name, ns, low=3, high=7) for name in OWNER_TOOLS}
    kubectl.apply(changed["csa"])
    for name, manager in APPLIERS.items():
        plane.apply(changed[name], manager=manager)
    assert all(bounds_of(plane, ns, name) == (3, 7) for name in OWNER_TOOLS)


def test_without_the_hand_back_a_tools_next_apply_would_conflict_with_us(
    control_plane: ControlPlane, real_namespace: NewNamespace
) -> None:
    """Why the revert hands the bounds back: the merge-patch revert of earlier agents left
    `moonin-agent` co-owning them, and the next server-side apply changing them failed."""
    ns = real_namespace("owners")
    plane = control_plane
    plane.apply(declared_as("argo", ns), manager="argocd-controller")
    path_args = (*HPA, ns, "argo")
    plane.patch(*path_args, {"spec": {"minReplicas": 4, "maxReplicas": 6}}, fieldManager=OURS)
    plane.patch(*path_args, {"spec": {"minReplicas": 2, "maxReplicas": 5}}, fieldManager=OURS)
    with pytest.raises(ControlPlaneError) as refused:
        plane.apply(declared_as("argo", ns, low=3), manager="argocd-controller")
    assert refused.value.status == 409 and OURS in str(refused.value)


def _hpas(plane: ControlPlane, ns: str) -> list[dict[str, Any]]:
    return [plane.get(*HPA, ns, name) for name in OWNER_TOOLS]


def bounds_of(plane: ControlPlane, ns: str, name: str) -> tuple[int, int]:
    spec = plane.get(*HPA, ns, name)["spec"]
    return spec.get("minReplicas", 1), spec["maxReplicas"]
