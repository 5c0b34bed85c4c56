"""`moonin-agent run` as a real process: start-up errors, delivery, SIGTERM, no token leaks."""

from __future__ import annotations

import json
import os
import signal
import socket
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform, Status
from sandbox.tls import TLSAuthority
from shipper.outbox import Outbox
from shipper.records import DISCOVERY, SCALING, Record, ScalingEvent, utc_timestamp
from tests.agent_process import (
    TOKEN,
    agent_env,
    log_events,
    log_until,
    run_cli,
    start_agent,
    stop_within,
)
from tests.waiting import wait_until


@pytest.fixture(autouse=True)
def cluster(kube: FakeKube, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    """Every agent these tests start finds the (empty, freshly reset) fake cluster."""
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    return kube


def queued_records(platform: FakePlatform) -> list[dict]:
    """What the tests queued by hand (the collector adds cluster metadata of its own)."""
    return [r for r in platform.received_records() if r["id"].startswith("q-")]


def fill(queue_dir: Path, count: int) -> None:
    with Outbox(queue_dir) as outbox:
        outbox[DISCOVERY].put(
            [
                Record(
                    id=f"q-{n}",
                    kind="namespace",
                    op="upsert",
                    key=f"ns-{n}",
                    observed_at=utc_timestamp(),
                )
                for n in range(count)
            ]
        )
        outbox[SCALING].put(
            [ScalingEvent(id="ev-1", type="apply", template_id="t-1", occurred_at=utc_timestamp())]
        )


def test_missing_configuration_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "QUEUE_DIR": str(tmp_path),
        "CLUSTER_TOKEN": "tok-3f9a1c77e2b84d05",
    }
    result = run_cli("run", "--role", "discovery", env=env)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "PROJECT_ID" in result.stderr


def _taken_port() -> socket.socket:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    return taken


@pytest.mark.parametrize(
    "failure",
    ["health port taken", "lock file unusable", "scaling store unusable", "state file unusable"],
)
def test_a_start_up_failure_after_the_queue_opened_is_one_line_and_exit_2(
    platform: FakePlatform, tmp_path: Path, failure: str
) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    env = agent_env(platform, queue)
    role = "discovery"
    with closing(_taken_port()) as taken:
        if failure == "health port taken":
            env["HEALTH_ADDR"] = f"127.0.0.1:{taken.getsockname()[1]}"
            expected = "HEALTH_ADDR"
        elif failure == "lock file unusable":  # what a root-owned claim or a read-only volume
            (queue / "agent.lock").mkdir()  # does to the lock file
            expected = "agent.lock"
        elif failure == "scaling store unusable":  # the same, to the scaling role's store
            (queue / "scaling-state.db").mkdir()
            expected, role = "scaling-state.db", "scaling"
        else:  # and to the collector's state: named as what it is
            (queue / "collector-state.sqlite").mkdir()
            expected = "moonin-agent: cannot open state file"
        result = run_cli("run", "--role", role, env=env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "Exception in thread" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1 and lines[0].startswith("moonin-agent: ") and expected in lines[0]


def test_leader_election_without_a_namespace_for_the_lease_is_a_configuration_error(
    platform: FakePlatform, kubeconfig: Path, tmp_path: Path
) -> None:
    # Outside a pod there is no service account to take the namespace from.
    env = agent_env(platform, tmp_path / "queue", KUBECONFIG=str(kubeconfig))
    env.update(LEADER_ELECTION="true", POD_NAME="pod-a")
    env.pop("POD_NAMESPACE", None)
    result = run_cli("run", "--role", "discovery", env=env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "POD_NAMESPACE" in result.stderr


def test_plain_http_is_refused_without_the_switch(platform: FakePlatform, tmp_path: Path) -> None:
    env = agent_env(platform, tmp_path / "queue")
    del env["MOONIN_INSECURE_HTTP"]
    result = run_cli("run", "--role", "discovery", env=env)
    assert result.returncode == 2
    assert "MOONIN_INSECURE_HTTP=true" in result.stderr
    assert platform.requests == []


def test_the_agent_ships_what_was_queued_and_stops_cleanly_on_sigterm(
    platform: FakePlatform, tmp_path: Path
) -> None:
    queue = tmp_path / "queue"
    fill(queue, 50)
    env = agent_env(platform, queue, DISCOVERY_API_URL=platform.url, SCALING_API_URL=platform.url)
    del env["API_URL"]  # role all reads one URL per API
    agent = start_agent(env, role="all")
    try:
        wait_until(lambda: len(queued_records(platform)) == 50 and "ev-1" in platform.events())
        # A second agent on the same directory is refused, and the first keeps running.
        second = start_agent(agent_env(platform, queue))
        assert second.wait(timeout=30) == 2
        assert "in use by another moonin-agent process" in second.communicate()[1]
        assert agent.poll() is None
        agent.send_signal(signal.SIGTERM)
        stderr = stop_within(agent, 30)
    finally:
        agent.kill()
    assert agent.returncode == 0
    events = [entry["event"] for entry in log_events(stderr)]
    assert "agent_started" in events and events[-1] == "agent_stopped"
    assert TOKEN not in stderr


def test_sigterm_ships_for_a_bounded_time_and_keeps_the_rest_on_disk(
    platform: FakePlatform, tmp_path: Path
) -> None:
    queue = tmp_path / "queue"
    fill(queue, 20)
    platform.fail_all("records", Status(503))
    agent = start_agent(agent_env(platform, queue, SHUTDOWN_SHIP_SECONDS="1"))
    try:
        wait_until(lambda: any(r.status == 503 for r in platform.requests))
        agent.send_signal(signal.SIGTERM)
        # The platform fails for ever: only the 1 s bound on shipping lets it stop (the
        # deadline is generous for a loaded machine).
        stop_within(agent, 10)
    finally:
        agent.kill()
    assert agent.returncode == 0
    peek = run_cli("queue", "peek", "--queue-dir", str(queue), "--stream", "discovery")
    left = [json.loads(line)["id"] for line in peek.stdout.splitlines()]
    assert sorted(rid for rid in left if rid.startswith("q-")) == sorted(
        f"q-{n}" for n in range(20)
    )


@pytest.mark.parametrize("rejection", [Status(401), Status(403), Status(500)])
def test_the_token_never_reaches_a_log_line_or_a_body(
    rejection: Status, platform: FakePlatform, tmp_path: Path
) -> None:
    secret = "tok-planted-7f3a9c1e"
    platform.token = secret
    platform.script("records", rejection, rejection)
    queue = tmp_path / "queue"
    fill(queue, 5)
    agent = start_agent(agent_env(platform, queue, CLUSTER_TOKEN=secret, LOG_LEVEL="debug"))
    try:
        wait_until(lambda: len(queued_records(platform)) == 5)
        agent.send_signal(signal.SIGTERM)
        stdout, stderr = agent.communicate(timeout=30)
    finally:
        agent.kill()
    assert any(entry["event"] == "stream_delivering" for entry in log_events(stderr))
    assert secret not in stdout + stderr
    for request in platform.requests:
        assert secret.encode() not in request.body
        assert request.headers["x-cluster-token"] == secret  # where it belongs, and only there


def test_https_with_the_configured_ca_bundle_delivers_and_an_unknown_ca_pauses(
    tmp_path: Path,
) -> None:
    authority = TLSAuthority()
    bundle = authority.write_ca_bundle(tmp_path / "ca.pem")
    with FakePlatform(token=TOKEN, tls=authority) as secure:
        env = agent_env(secure, tmp_path / "trusting", MOONIN_CA_BUNDLE=str(bundle))
        del env["MOONIN_INSECURE_HTTP"]
        fill(tmp_path / "trusting", 3)
        agent = start_agent(env)
        try:
            wait_until(lambda: len(queued_records(secure)) == 3)
        finally:
            agent.send_signal(signal.SIGTERM)
            stop_within(agent, 30)

        env = agent_env(secure, tmp_path / "unknown-ca")
        del env["MOONIN_INSECURE_HTTP"]
        fill(tmp_path / "unknown-ca", 3)
        agent = start_agent(env)
        stderr = ""
        try:
            stderr = log_until(agent, "stream_paused")
        finally:
            agent.send_signal(signal.SIGTERM)
            stderr += stop_within(agent, 30)
    paused = [entry for entry in log_events(stderr) if entry["event"] == "stream_paused"]
    assert len(paused) == 1
    assert "certificate" in str(paused[0]["error"]) and "CA bundle" in str(paused[0]["error"])
    assert len(queued_records(secure)) == 3  # nothing more arrived from the second agent


# --- which cluster: one rule for every role and command -----------------------------------------


def in_a_pod_with_a_second_context(
    kube: FakeKube, kubeconfig: Path, tmp_path: Path
) -> dict[str, str]:
    """What a pod looks like (the service host set; its account and API unreachable from
    here) with a kubeconfig whose current context is elsewhere and whose context `fake` is
    the fake cluster: only the context reaches a cluster that answers."""
    config = yaml.safe_load(kubeconfig.read_text())
    with closing(_taken_port()) as taken:
        nowhere = f"http://127.0.0.1:{taken.getsockname()[1]}"
    config["clusters"].append({"name": "elsewhere", "cluster": {"server": nowhere}})
    config["contexts"].append(
        {"name": "elsewhere", "context": {"cluster": "elsewhere", "user": "fake"}}
    )
    config["current-context"] = "elsewhere"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return {
        "KUBECONFIG": str(path),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": nowhere.rsplit(":", 1)[1],
    }


def test_role_all_with_a_context_in_a_pod_reads_and_scales_the_cluster_the_context_names(
    platform: FakePlatform, kube: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    pod = in_a_pod_with_a_second_context(kube, kubeconfig, tmp_path)
    env = agent_env(platform, tmp_path / "queue", **pod)
    env.update(DISCOVERY_API_URL=platform.url, SCALING_API_URL=platform.url)
    del env["API_URL"]  # role all reads one URL per API
    kube.clear_requests()
    agent = start_agent(env, "all", "--context", "fake")
    try:
        # Discovery lists namespaces and scaling lists HPAs, both on the fake.
        wait_until(
            lambda: (
                {
                    "discovery" if r.path == "/api/v1/namespaces" else "scaling"
                    for r in kube.requests
                    if r.status == 200
                    and (
                        r.path == "/api/v1/namespaces"
                        or r.path.endswith("/horizontalpodautoscalers")
                    )
                }
                == {"discovery", "scaling"}
            ),
            timeout=30,
        )
        assert agent.poll() is None
    finally:
        agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)
    assert agent.returncode == 0


@pytest.mark.parametrize("command", ["preview", "scaling revert-all"])
def test_a_command_with_a_context_in_a_pod_uses_the_cluster_the_context_names(
    platform: FakePlatform, kube: FakeKube, kubeconfig: Path, tmp_path: Path, command: str
) -> None:
    pod = in_a_pod_with_a_second_context(kube, kubeconfig, tmp_path)
    kube.clear_requests()
    result = run_cli(
        *command.split(), "--context", "fake", env=agent_env(platform, tmp_path / "queue", **pod)
    )
    assert result.returncode == 0, result.stderr
    assert any(r.status == 200 for r in kube.requests)
