"""`moonin-agent run --role scaling` against the fake cluster and the fake platform: a manual
execution a few seconds long is applied to the HPA, reverted when it ends, and both events
reach the platform; an outage of the platform delays the events and loses none."""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from sandbox.scaling import manual_template
from tests import scaling_harness as h
from tests.agent_process import agent_env, run_cli, start_agent, stop_within
from tests.waiting import wait_until


def test_a_manual_window_is_applied_reverted_and_reported_through_an_outage(
    kube: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    kube.create(h.namespace())
    kube.create(h.deployment(replicas=2))
    kube.create(h.hpa(low=2, high=5))
    started = datetime.now(UTC)
    platform.set_templates([manual_template(started, started + timedelta(seconds=6))])
    platform.set_actions("t-1", [h.action(low=4, high=20)])
    env = agent_env(
        platform, tmp_path / "queue", KUBECONFIG=str(kubeconfig), RECONCILE_INTERVAL_SECONDS="0.5"
    )
    agent = start_agent(env, role="scaling")
    try:
        wait_until(
            lambda: kube.get("horizontalpodautoscalers", h.NS, "web")["spec"]["minReplicas"] == 4
        )
        spec = kube.get("horizontalpodautoscalers", h.NS, "web")["spec"]
        assert spec["maxReplicas"] == 20
        wait_until(lambda: kube.get("deployments", h.NS, "web")["spec"]["replicas"] == 4)
        wait_until(lambda: any(e["type"] == "apply" for e in platform.events().values()))

        platform.down()  # the revert happens on time anyway; its event waits on disk

        def reverted() -> dict[str, Any]:
            return kube.get("horizontalpodautoscalers", h.NS, "web")

        wait_until(lambda: reverted()["spec"]["minReplicas"] == 2, timeout=30)
        assert reverted()["spec"]["maxReplicas"] == 5
        # Its second write, the hand-back, follows at once: then nothing of ours is left.
        wait_until(lambda: h.ours(reverted()) == {}, timeout=30)
        platform.up()
        wait_until(lambda: any(e["type"] == "revert" for e in platform.events().values()))
        events = platform.events().values()
        [revert] = [e for e in events if e["type"] == "revert"]
        [apply] = [e for e in events if e["type"] == "apply"]
        assert revert["reason"] in {"expired", "disabled"}
        assert (apply["min_replicas"], apply["max_replicas"]) == (4, 20)
        assert apply["window_start"] == revert["window_start"]
    finally:
        agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)


def test_revert_all_reverts_a_window_in_progress_and_ships_its_event(
    kube: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    kube.create(h.namespace())
    kube.create(h.deployment(replicas=2))
    kube.create(h.hpa(low=2, high=5))
    started = datetime.now(UTC)
    platform.set_templates([manual_template(started, started + timedelta(hours=1))])
    platform.set_actions("t-1", [h.action(low=4, high=20)])
    env = agent_env(
        platform, tmp_path / "queue", KUBECONFIG=str(kubeconfig), RECONCILE_INTERVAL_SECONDS="0.5"
    )
    agent = start_agent(env, role="scaling")
    try:
        wait_until(
            lambda: kube.get("horizontalpodautoscalers", h.NS, "web")["spec"]["minReplicas"] == 4
        )
    finally:
        agent.send_signal(signal.SIGTERM)  # the uninstall hook scales the workload to zero first
        stop_within(agent, 30)

    # The hook's own queue directory: the workload's volume may be gone with it.
    result = run_cli("scaling", "revert-all", env={**env, "QUEUE_DIR": str(tmp_path / "hook")})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"reverted": [f"{h.NS}/web"], "failed": {}}
    hpa = kube.get("horizontalpodautoscalers", h.NS, "web")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)
    marker = hpa["metadata"]["annotations"]["scaling.moonin.app/released"]
    assert marker.startswith("t-1/a-1/")
    [revert] = [e for e in platform.events().values() if e["type"] == "revert"]
    assert revert["reason"] == "manual"


def test_dry_runs_log_each_change_send_it_as_a_dry_run_and_store_nothing(
    kube: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    kube.create(h.namespace())
    kube.create(h.deployment(replicas=2))  # no HPA: a real run would create one
    started = datetime.now(UTC)
    platform.set_templates([manual_template(started, started + timedelta(hours=1))])
    platform.set_actions("t-1", [h.action(low=4, high=20)])
    queue = tmp_path / "queue"
    env = agent_env(platform, queue, KUBECONFIG=str(kubeconfig), RECONCILE_INTERVAL_SECONDS="0.2")
    kube.clear_requests()
    agent = start_agent(env, "scaling", "--dry-run")
    try:
        wait_until(lambda: sum(r.route == "templates" for r in platform.requests) >= 3)
    finally:
        agent.send_signal(signal.SIGTERM)
        stderr = stop_within(agent, 30)
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    changes = [line for line in lines if line["event"] == "dry_run_change"]
    intended = {(c["verb"], c["kind"]) for c in changes}
    assert {("create", "horizontalpodautoscaler"), ("patch", "deployment")} <= intended
    # Nothing changes, so every cycle means the same create again: the first says it all.
    create = next(c for c in changes if c["verb"] == "create")
    assert (create["spec"]["minReplicas"], create["spec"]["maxReplicas"]) == (4, 20)
    applies = [e for e in lines if e["event"] == "dry_run_event" and e["type"] == "apply"]
    # Who deploys the target, as the apply event would say it (made by the fake's Python
    # side, the Deployment's replicas have no owner).
    assert applies and applies[0]["managed_by"] == {"tool": "unmanaged", "managers": []}
    # Nothing written: every Kubernetes write went as a dry run the server validated and
    # did not store, no event sent, no scaling store.
    sent = [r for r in kube.requests if r.method != "GET"]
    assert {(r.method, r.path.rsplit("/", 1)[-1]) for r in sent} >= {
        ("POST", "horizontalpodautoscalers"),
        ("PATCH", "web"),
    }
    assert all(r.query.get("dryRun") == "All" for r in sent)
    assert kube.list("horizontalpodautoscalers") == []
    assert kube.get("deployments", h.NS, "web")["spec"]["replicas"] == 2
    assert platform.events() == {}
    assert not (queue / "scaling-state.db").exists()

    # revert-all --dry-run over a window really applied: it says what it would revert.
    agent = start_agent(env, "scaling")
    try:
        wait_until(lambda: kube.list("horizontalpodautoscalers") != [])
    finally:
        agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)
    before = kube.list("horizontalpodautoscalers"), kube.get("deployments", h.NS, "web")
    writes = sum(r.method != "GET" and "dryRun" not in r.query for r in kube.requests)
    hook_queue = tmp_path / "hook"
    result = run_cli(
        "scaling", "revert-all", "--dry-run", env={**env, "QUEUE_DIR": str(hook_queue)}
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"reverted": [f"{h.NS}/web"], "failed": {}}
    assert "dry_run_change" in result.stderr
    assert sum(r.method != "GET" and "dryRun" not in r.query for r in kube.requests) == writes
    # The revert (a provisional HPA's delete) was sent, as a dry run the server kept nothing of.
    assert any(r.method == "DELETE" and r.query.get("dryRun") == "All" for r in kube.requests)
    assert (kube.list("horizontalpodautoscalers"), kube.get("deployments", h.NS, "web")) == before
    assert not hook_queue.exists()
