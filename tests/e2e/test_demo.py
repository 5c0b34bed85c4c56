"""`moonin-agent demo`: the whole story in one run, nothing left behind, and one line without
the sandbox extra."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent import config
from agent.demo import NO_SANDBOX, agent_environment


def processes_in_group(group: int) -> list[str]:
    """`pid command` of every live process whose process group or session is `group`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # it ended while we looked
        command, _, rest = text.partition(" (")[2].rpartition(")")
        fields = rest.split()
        # After the command: state, ppid, pgrp, session.
        if fields[0] != "Z" and group in (int(fields[2]), int(fields[3])):
            found.append(f"{stat.parent.name} {command}")
    return found


def test_the_demo_replays_an_outage_applies_and_reverts_and_leaves_nothing_running() -> None:
    # Its own session: whatever it started, and did not stop, would still carry its id.
    demo = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = demo.communicate(timeout=120)  # the demo gives up by itself after 60 s
        left = processes_in_group(demo.pid)
    finally:
        if demo.poll() is None or processes_in_group(demo.pid):
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    assert demo.returncode == 0, f"{out}\n{err}"
    assert left == []
    delivered = re.search(r"records delivered: \d+ \((.*)\)", out)
    assert delivered is not None, out
    for kind in ("namespace", "deployment", "hpa", "job_execution", "helm_release", "pod_error"):
        assert re.search(rf"\b{kind} \d+", delivered.group(1)), kind
    assert re.search(r"outage: platform down [\d.]+ s; [1-9]\d* records queued", out), out
    assert re.search(r"replayed [\d.]+ s after it came back", out), out
    assert "scaling: applied t-1/a-1 to shop/web (min 4, max 20" in out
    assert re.search(r"reverted \(expired\) at \+[\d.]+ s: back to min 2, max 10", out), out
    assert "queue: empty (discovery 0, scaling 0 records; no dead letters)" in out
    assert "stopped on SIGTERM (exit 0)" in out


@pytest.mark.parametrize("missing", ["trustme", "sandbox.kube"])
def test_without_the_sandbox_extra_the_demo_says_which_extra_in_one_line(missing: str) -> None:
    # A None entry in sys.modules makes every import of that module fail.
    code = (
        f"import sys; sys.modules[{missing!r}] = None; "
        "from agent.cli import main; sys.exit(main(['demo']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [NO_SANDBOX]


def test_the_agent_inherits_no_setting_that_would_point_it_elsewhere(tmp_path: Path) -> None:
    inherited = {
        "PATH": "/usr/bin",
        "PYTHONPATH": "/src",
        "API_URL": "https://api-discover.moonin.app",
        "CLUSTER_TOKEN_FILE": "/var/run/secrets/moonin/CLUSTER_TOKEN",
        "CONFIG_FILE": "/etc/moonin-agent/config.yaml",
        "QUEUE_MAX_BYTES": "1",
        "MOONIN_CA_BUNDLE": "/ca.pem",
        "IGNORE_RESOURCES": "deployment/*",
        "POD_NAMESPACE": "moonin",
        "https_proxy": "http://proxy.example:3128",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
    }
    env = agent_environment(
        inherited,
        platform_url="http://127.0.0.1:1234",
        queue_dir=tmp_path / "queue",
        kubeconfig=tmp_path / "kubeconfig",
        health_port=4321,
    )
    assert env["PATH"] == "/usr/bin" and env["PYTHONPATH"] == "/src"
    for name in ("API_URL", "CLUSTER_TOKEN_FILE", "CONFIG_FILE", "QUEUE_MAX_BYTES"):
        assert name not in env
    for name in ("MOONIN_CA_BUNDLE", "IGNORE_RESOURCES", "POD_NAMESPACE", "https_proxy"):
        assert name not in env
    # Run in a pod, the real cluster must stay out of reach.
    assert "KUBERNETES_SERVICE_HOST" not in env and "KUBERNETES_SERVICE_PORT" not in env
    assert env["DISCOVERY_API_URL"] == env["SCALING_API_URL"] == "http://127.0.0.1:1234"
    assert env["HEALTH_ADDR"] == "127.0.0.1:4321"
    assert env["QUEUE_DIR"] == str(tmp_path / "queue")
    assert env["LEADER_ELECTION"] == "false"


def test_the_agent_inherits_none_of_the_variables_its_configuration_reads(tmp_path: Path) -> None:
    inherited = dict.fromkeys(config.ENVIRONMENT, "inherited")
    env = agent_environment(
        inherited,
        platform_url="http://127.0.0.1:1234",
        queue_dir=tmp_path / "queue",
        kubeconfig=tmp_path / "kubeconfig",
        health_port=4321,
    )
    assert "inherited" not in env.values()
    assert {"COLLECT_EVENTS", "KUBE_DEADLINE_SECONDS", "ANTI_ENTROPY_SECONDS"} <= config.ENVIRONMENT
