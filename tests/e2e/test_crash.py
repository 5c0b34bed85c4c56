"""SIGKILL a producer+shipper process at random moments: nothing it committed is lost.

The kill moments (and the worker's batch sizes) come from one seed, drawn at random and
printed as `CRASH_SEED=<n>` (pytest shows it with a failure, or with `-s`). To replay a run,
set it: `CRASH_SEED=<n> pytest tests/e2e/test_crash.py`. Where a kill lands inside the worker's
work still depends on timing, so a replay is close to the run, not identical.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from sandbox.platform import FakePlatform
from tests.agent_process import CRASH_TOKEN, WORKER, worker_env

KILLS = 20


def _start(env: dict[str, str], log: Path, run_id: str, *extra: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(log), run_id, *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    opened = proc.stdout.readline()
    assert opened.startswith(b"opened"), proc.stderr.read() if proc.stderr else opened
    return proc


def _record_ids(body: bytes) -> list[str]:
    return [record["id"] for record in msgspec.json.decode(body)["records"]]


@pytest.fixture
def crash_platform() -> FakePlatform:
    platform = FakePlatform(token=CRASH_TOKEN)
    platform.start()
    yield platform
    platform.stop()


def test_sigkill_at_random_moments_loses_no_committed_record(
    crash_platform: FakePlatform, tmp_path: Path
) -> None:
    seed = int(os.environ.get("CRASH_SEED") or random.randrange(2**32))
    print(f"CRASH_SEED={seed}")
    rng = random.Random(seed)
    env = {**worker_env(crash_platform, tmp_path / "queue"), "CRASH_SEED": str(seed)}
    committed = tmp_path / "committed.log"
    windows: list[tuple[float, float]] = []
    for run in range(KILLS):
        started = time.monotonic()
        proc = _start(env, committed, f"r{run}")
        time.sleep(rng.uniform(0.05, 0.6))  # the kill moment: what the test draws
        proc.kill()
        proc.wait()
        windows.append((started, time.monotonic()))
        assert not list((tmp_path / "queue").glob("*.corrupt-*")), "queue file was quarantined"

    final = _start(env, committed, "final", "0")
    out, err = final.communicate(timeout=60)
    assert b"drained" in out, err.decode()
    assert final.returncode == 0

    accepted = [
        request
        for request in crash_platform.requests
        if request.route == "records" and request.status is not None and request.status < 300
    ]
    delivered = Counter(rid for request in accepted for rid in _record_ids(request.body))
    promised = committed.read_text().split()
    assert promised, "the producer never committed anything"
    missing = set(promised) - set(delivered)
    assert not missing, f"{len(missing)} committed records never arrived"

    # A duplicate is only a record whose first delivery was the batch in flight at a kill:
    # the last batch the platform accepted from that run (its ack never reached the disk).
    in_flight: set[str] = set()
    for started, killed in windows:
        of_run = [r for r in accepted if started <= r.time <= killed]
        if of_run:
            in_flight.update(_record_ids(of_run[-1].body))
    duplicates = {rid for rid, count in delivered.items() if count > 1}
    assert duplicates <= in_flight, sorted(duplicates - in_flight)[:10]
