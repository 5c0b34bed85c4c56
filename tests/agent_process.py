"""The agent (and the crash worker) as processes in a test: their environment against the
fake platform, starting them, stopping them with a deadline, and what they say while they
run (their JSON log lines, what their outbox holds)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from sandbox.platform import FakePlatform

TOKEN = "test-token-6f1d2c"
# The crash worker's token: its fake platform must be told it.
CRASH_TOKEN = "crash-token-4e1a7c"
WORKER = Path(__file__).with_name("crash_worker.py")


def agent_env(platform: FakePlatform, queue_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CLUSTER_", "API_URL", "QUEUE_", "CONFIG_FILE", "LEADER"))
    }
    env.update(
        PROJECT_ID="p-1",
        CLUSTER_ID="c-1",
        CLUSTER_TOKEN=TOKEN,
        API_URL=platform.url,
        MOONIN_INSECURE_HTTP="true",
        QUEUE_DIR=str(queue_dir),
        SHUTDOWN_SHIP_SECONDS="2",
        LINGER_SECONDS="0.01",
        HEALTH_ADDR="127.0.0.1:0",  # any free port: agents run side by side
    )
    env.update(extra)
    return env


def start_agent(
    env: dict[str, str], role: str = "discovery", *options: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "agent.cli", "run", "--role", role, *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def stop_within(agent: subprocess.Popen[str], seconds: float) -> str:
    """Wait for the agent to exit; if it hangs, fail with every thread's stack."""
    try:
        return agent.communicate(timeout=seconds)[1]
    except subprocess.TimeoutExpired:
        agent.send_signal(signal.SIGABRT)  # faulthandler prints the stacks
        stderr = agent.communicate(timeout=10)[1]
        raise AssertionError(f"the agent did not stop:\n{stderr[-6000:]}") from None


def log_until(agent: subprocess.Popen[str], event: str, timeout: float = 20) -> str:
    """The running agent's stderr up to its first log line of `event`; AssertionError if
    none comes within `timeout` seconds. Pass the rest of stderr on (`stop_within`)."""
    assert agent.stderr is not None
    stream = agent.stderr
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in stream:
            lines.append(line)
            if line.startswith("{") and json.loads(line).get("event") == event:
                seen.set()
                return

    threading.Thread(target=read, daemon=True).start()
    if not seen.wait(timeout):
        raise AssertionError(f"no {event} logged:\n{''.join(lines)[-6000:]}")
    return "".join(lines)


def logs_until(env: dict[str, str], event: str) -> str:
    """Everything a discovery agent started with `env` logs until its first `event`, then
    through a clean stop on SIGTERM."""
    agent = start_agent(env)
    try:
        logged = log_until(agent, event)
        agent.send_signal(signal.SIGTERM)
        return logged + stop_within(agent, 30)
    finally:
        agent.kill()


def queued(queue_dir: Path, stream: str = "discovery") -> list[dict[str, Any]]:
    """What the outbox in `queue_dir` holds now, oldest first (read beside a running agent;
    nothing while the agent has not created it yet)."""
    found = run_cli(
        "queue", "peek", "--queue-dir", str(queue_dir), "--stream", stream, "--limit", "1000000"
    )
    if found.returncode != 0:
        return []
    return [json.loads(line) for line in found.stdout.splitlines()]


def log_events(stderr: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


# What preview must not need, and must not use when it is there anyway.
_AGENT_VARIABLES = ("CLUSTER_", "API_URL", "QUEUE_", "CONFIG_FILE", "KUBECONFIG", "LOG_LEVEL")


def preview_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(_AGENT_VARIABLES)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.update(extra)
    return env


def worker_env(platform: FakePlatform, queue_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PROJECT_ID": "p-1",
        "CLUSTER_ID": "c-1",
        "CLUSTER_TOKEN": CRASH_TOKEN,
        "API_URL": platform.url,
        "MOONIN_INSECURE_HTTP": "true",
        "QUEUE_DIR": str(queue_dir),
    }
