"""The command line: version, queue inspection shapes, and inspection beside a live agent."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from agent.cli import main
from runtime.version import VERSION
from sandbox.platform import FakePlatform
from shipper.outbox import Bounds, Outbox
from shipper.records import DISCOVERY, SCALING, Record, ScalingEvent, utc_timestamp
from tests.agent_process import (
    CRASH_TOKEN,
    WORKER,
    agent_env,
    log_events,
    logs_until,
    run_cli,
    worker_env,
)

STATS_KEYS = {"records", "bytes", "oldest_age_seconds", "dead_letters", "dropped", "resync_needed"}


def record(n: int) -> Record:
    return Record(
        id=f"r-{n}", kind="namespace", op="upsert", key=f"ns-{n}", observed_at=utc_timestamp()
    )


@pytest.fixture
def queue_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "queue"
    with Outbox(directory, bounds=Bounds(chunk_records=2)) as outbox:
        outbox[DISCOVERY].put([record(n) for n in range(5)])
        outbox[SCALING].put(
            [ScalingEvent(id="e-1", type="apply", template_id="t", occurred_at=utc_timestamp())]
        )
        batch = outbox[DISCOVERY].take(max_records=2, max_bytes=10**6)
        assert batch is not None
        outbox[DISCOVERY].dead_letter(batch.entries[:1], status=422, response="no such kind")
        outbox[DISCOVERY].ack(batch)
    return directory


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == VERSION


def test_queue_stats_prints_one_object_keyed_by_stream(
    queue_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["queue", "stats", "--queue-dir", str(queue_dir)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert set(stats) == {"discovery", "scaling"}
    assert set(stats["discovery"]) == STATS_KEYS
    assert stats["discovery"]["records"] == 3
    assert stats["discovery"]["dead_letters"] == 1
    assert stats["discovery"]["bytes"] > 0
    assert stats["discovery"]["oldest_age_seconds"] >= 0
    assert stats["scaling"]["records"] == 1
    assert stats["scaling"]["resync_needed"] is False


def test_queue_peek_prints_records_oldest_first_as_they_will_be_sent(
    queue_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["queue", "peek", "--queue-dir", str(queue_dir), "--stream", "discovery"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["r-2", "r-3", "r-4"]
    assert main(["queue", "peek", "--queue-dir", str(queue_dir), "--limit", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_queue_dead_letters_prints_the_record_with_the_platform_answer(
    queue_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["queue", "dead-letters", "--queue-dir", str(queue_dir)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    letter = json.loads(line)
    assert (letter["stream"], letter["status"], letter["response"]) == (
        "discovery",
        422,
        "no such kind",
    )
    assert letter["record"]["id"] == "r-0"


@pytest.mark.parametrize("view", ["stats", "peek", "dead-letters"])
def test_a_missing_queue_directory_is_one_line_and_exit_code_2(
    view: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["queue", view, "--queue-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "does not exist" in err


def test_an_unreadable_queue_file_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "discovery.db").write_bytes(b"not a database at all" * 50)
    assert main(["queue", "stats", "--queue-dir", str(tmp_path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.e2e
def test_inspecting_beside_a_shipping_agent_duplicates_and_loses_nothing(
    platform: FakePlatform, tmp_path: Path
) -> None:
    platform.token = CRASH_TOKEN
    queue = tmp_path / "queue"
    committed = tmp_path / "committed.log"
    total = 3000
    agent = subprocess.Popen(
        [sys.executable, str(WORKER), str(committed), "live", str(total)],
        env=worker_env(platform, queue),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    views = 0
    try:
        while agent.poll() is None:
            for view in (["stats"], ["peek", "--limit", "50"], ["dead-letters"]):
                probe = subprocess.run(
                    [sys.executable, "-m", "agent.cli", "queue", *view, "--queue-dir", str(queue)],
                    capture_output=True,
                    timeout=30,
                )
                if probe.returncode == 2 and b"does not exist" in probe.stderr:
                    continue  # the agent has not created its directory yet
                assert probe.returncode == 0, probe.stderr
                if view == ["stats"]:
                    assert set(json.loads(probe.stdout)["discovery"]) == STATS_KEYS
                views += 1
        out, err = agent.communicate(timeout=30)
    finally:
        agent.kill()
    assert b"drained" in out, err.decode()
    assert views >= 3
    delivered = Counter(received["id"] for received in platform.received_records())
    assert sorted(delivered) == sorted(f"live-{n}" for n in range(total))
    assert max(delivered.values()) == 1


# -- ordinary bad input to the cluster-facing commands --------------------------------------


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("case", "exit_code", "says"),
    [
        ("revert-all, cluster unreachable", 1, "list horizontalpodautoscalers"),
        ("revert-all, kubeconfig not YAML", 2, "cannot load the cluster configuration"),
        ("preview, kubeconfig a list", 2, "not a kubeconfig"),
        ("evaluate, --at past year 9999 in UTC", 2, "outside the years 1-9999"),
    ],
)
@pytest.mark.e2e
def test_bad_input_to_a_command_is_one_line_not_a_traceback(
    platform: FakePlatform, tmp_path: Path, case: str, exit_code: int, says: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    env = agent_env(platform, tmp_path / "queue")
    if case.startswith("revert-all, cluster"):
        cluster = {"server": f"http://127.0.0.1:{_closed_port()}"}
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": cluster}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "current-context": "c",
                }
            )
        )
        args = ["scaling", "revert-all", "--kubeconfig", str(kubeconfig)]
    elif case.startswith("revert-all"):
        kubeconfig.write_text("garbage: [\n")
        args = ["scaling", "revert-all", "--kubeconfig", str(kubeconfig)]
    elif case.startswith("preview"):
        kubeconfig.write_text("- a\n")
        args = ["preview", "--kubeconfig", str(kubeconfig)]
    else:
        templates = tmp_path / "templates.json"
        templates.write_text('{"templates": []}')
        args = ["scaling", "evaluate", "--templates", str(templates)]
        args += ["--at", "9999-12-31T23:59:59-05:00"]
    result = run_cli(*args, env=env)
    assert result.returncode == exit_code, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1 and lines[0].startswith("moonin-agent: ") and says in lines[0]


# --- `run`: start-up ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("in_the_way", "command"),
    [
        ("disk-reserve", ("run", "--role", "discovery")),
        ("collector-state.sqlite", ("run", "--role", "discovery")),
        ("disk-reserve", ("scaling", "revert-all")),
    ],
)
@pytest.mark.e2e
def test_a_directory_where_a_queue_file_belongs_is_one_line_not_a_traceback(
    platform: FakePlatform,
    kubeconfig: Path,
    tmp_path: Path,
    in_the_way: str,
    command: tuple[str, ...],
) -> None:
    queue = tmp_path / "queue"
    (queue / in_the_way).mkdir(parents=True)
    env = agent_env(platform, queue, KUBECONFIG=str(kubeconfig), LEADER_ELECTION="false")
    result = run_cli(*command, env=env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "Exception in thread" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1 and lines[0].startswith("moonin-agent: ") and in_the_way in lines[0]


def test_a_misspelt_variable_is_named_at_start_up_without_its_value(
    platform: FakePlatform, tmp_path: Path
) -> None:
    pasted = "k-8c1d55e0a9b34f27"
    env = agent_env(platform, tmp_path / "queue", QUEUE_MAX_RECORD=pasted, NODE_NAME="node-1")
    logged = logs_until(env, "setting_name_misspelt")
    [warning] = [e for e in log_events(logged) if e["event"] == "setting_name_misspelt"]
    assert (warning["variable"], warning["did_you_mean"]) == (
        "QUEUE_MAX_RECORD",
        "QUEUE_MAX_RECORDS",
    )
    assert pasted not in logged


def test_a_key_in_the_api_url_path_stays_out_of_the_retry_lines(
    platform: FakePlatform, kubeconfig: Path, tmp_path: Path
) -> None:
    key = "k-8c1d55e0a9b34f27"
    queue = tmp_path / "queue"
    with Outbox(queue) as outbox:
        outbox[DISCOVERY].put([record(n) for n in range(3)])
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        api_url = f"http://127.0.0.1:{port}/gw/{key}"
        env = agent_env(platform, queue, KUBECONFIG=str(kubeconfig), API_URL=api_url)
        logged = logs_until(env, "stream_retrying")
    assert key not in logged
    assert f"POST http://127.0.0.1:{port}/***/v1/clusters/c-1/records failed" in logged
