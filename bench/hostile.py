"""Hostile servers: the scaling role through gzip bombs, and discovery through hostile API
servers (`--table`).

Gzip bombs (the default):

The fake Kubernetes API (one Deployment with its HPA) and the fake Moonin platform run in
this process; the agent runs as `moonin-agent run --role scaling` (through `python -m
agent.cli`) in its own, so only its own memory is measured. A manual execution applies a
window at once; the agent then runs `--idle-seconds` against a well-behaved platform, and
`idle_rss_mib` is the median of its VmRSS samples (every 0.1 s) over the last half of that.
Then the templates and actions answers become gzip bombs (`--bomb-mib` of inflated JSON in
about a thousandth of it, ~2 MB for the default 2 GiB) for `--bomb-seconds`, one bombed
cycle every `--interval` seconds, while the window's end passes. `bomb_peak_rss_mib` is the
highest VmRSS sample during the bombs, `peak_over_idle_mib` its distance from the idle
median (the target: at most 10), and `hwm_growth_mib` how much the process's VmHWM (its
peak resident set ever) grew during the bombs. `revert_late_seconds` is the time from the
window's `run_until` to the revert's PATCH reaching the fake API server (the target: at most
one interval). Everything listens on and talks to 127.0.0.1 only.

The last line printed is one JSON object with the figures and the settings used.

    python bench/hostile.py [--bomb-mib 2048] [--idle-seconds 10] [--bomb-seconds 15]

Hostile API servers (`--table`, the table in docs/operations.md): for each mode asked for
(`--mode`, repeated; every one of `MODES` by default), a fresh fake Kubernetes API in this
process holds `--deployments` Deployments and turns hostile for the Deployments only, before
the agent starts (`moonin-agent run --role discovery` through `python -m agent.cli`, run from
`--agent-tree`, by default this checkout: another checkout measures its code against the
same servers). From the agent's first Deployments request on, for `--seconds`, the bench
counts the requests the fake API server answered (all of them, and those for Deployments)
and the agent's CPU time (user plus system, /proc/<pid>/stat), both given per minute, and
how many of the Deployments the platform then holds (`delivered_while_hostile`). Then
the server turns sane, a Deployment is created, and `recovery_s` is the time until the
platform holds every Deployment (the new one included): a relist waiting out its backoff,
or a list that never completed, counts in it. A row is printed per mode as it ends (Markdown,
for the docs), and the last line is one JSON object with every row and the settings used.

    python bench/hostile.py --table [--mode 410-loop ...] [--seconds 45] [--deployments 100]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from collect import cpu_seconds  # beside this file: the bench runs as a script

from agent.demo import CLUSTER_ID, PROJECT_ID, TOKEN, agent_environment
from sandbox import demo_cluster, objects
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform, GzipBomb
from sandbox.scaling import action, manual_template

NS = "shop"
HOSTILE_KIND = "deployments"
REPO = Path(__file__).resolve().parent.parent


def memory_mib(pid: int) -> dict[str, float]:
    """VmHWM (peak resident set) and VmRSS of a process, in MiB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            found[key] = int(value.split()[0]) / 1024
    return found


def cluster(kube: FakeKube) -> None:
    kube.create(demo_cluster.namespace(NS))
    kube.create(demo_cluster.deployment("web", NS))
    kube.create(objects.hpa(name="web", namespace=NS, low=2, high=5))


def window(platform: FakePlatform, seconds: float) -> datetime:
    """A manual execution from now for `seconds`; returns its end."""
    started = datetime.now(UTC)
    ends = started + timedelta(seconds=seconds)
    platform.set_templates([manual_template(started, ends, name="bench")])
    platform.set_actions("t-1", [action(ns=NS)])
    return ends


def environment(kube: FakeKube, platform: FakePlatform, scratch: Path) -> dict[str, str]:
    """The agent's environment for these fakes, its queue and kubeconfig under `scratch`."""
    kubeconfig = scratch / "kubeconfig"
    kube.kubeconfig(kubeconfig)
    return agent_environment(
        os.environ,
        platform_url=platform.url,
        queue_dir=scratch / "queue",
        kubeconfig=kubeconfig,
        health_port=0,
    )


def stop(agent: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the agent is not gone within 30 s."""
    agent.send_signal(signal.SIGTERM)
    try:
        agent.wait(30)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()


def sample(pid: int, seconds: float, into: list[float]) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        into.append(memory_mib(pid)["VmRSS"])
        time.sleep(0.1)


def wait_for(condition: object, timeout: float, what: str) -> None:
    until = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > until:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.05)


# -- hostile API servers -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mode:
    """A hostile API server: what `make_hostile` does to the fake, `clear_faults()` and
    serving streaming lists again undo."""

    title: str
    make_hostile: Callable[[FakeKube], None]


def _paged(kube: FakeKube) -> None:
    kube.set_streaming_lists("refuse", HOSTILE_KIND)


def _expired_paged(kube: FakeKube) -> None:
    _paged(kube)
    kube.expire_watches(HOSTILE_KIND)


def _endless(kube: FakeKube) -> None:
    _paged(kube)
    kube.endless_lists(HOSTILE_KIND, "restart")


MODES = {
    "410-loop": Mode("410 for every watch", lambda kube: kube.expire_watches(HOSTILE_KIND)),
    "410-loop-paged": Mode("410 for every watch, paged lists", _expired_paged),
    "endless-continue": Mode("a continue token that never ends", _endless),
    "cut-mid-line": Mode(
        "streams cut inside a line", lambda kube: kube.cut_streams(HOSTILE_KIND, after=3)
    ),
}


def _deployments_at_platform(platform: FakePlatform) -> int:
    return sum(1 for kind, _ in platform.view() if kind == "deployment")


def run_mode(name: str, args: argparse.Namespace) -> dict[str, object]:
    mode = MODES[name]
    with (
        FakeKube() as kube,
        FakePlatform(token=TOKEN, project_id=PROJECT_ID, cluster_id=CLUSTER_ID) as platform,
        tempfile.TemporaryDirectory(prefix="moonin-bench-") as scratch,
    ):
        kube.create(demo_cluster.namespace(NS))
        kube.load(
            objects.deployment(name=f"web-{n:04d}", namespace=NS) for n in range(args.deployments)
        )
        mode.make_hostile(kube)
        env = environment(kube, platform, Path(scratch))
        agent = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "run", "--role", "discovery"],
            cwd=args.agent_tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            def hostile_requests() -> list[float]:
                return [r.time for r in kube.requests if r.resource == "deployments.apps"]

            wait_for(lambda: hostile_requests(), 60, "the agent's first Deployments request")
            started, cpu_before = hostile_requests()[0], cpu_seconds(agent.pid)
            time.sleep(max(0.0, started + args.seconds - time.monotonic()))
            ended, cpu_after = time.monotonic(), cpu_seconds(agent.pid)
            delivered = _deployments_at_platform(platform)
            requests = [r for r in kube.requests if started <= r.time <= ended]
            hostile = [r for r in requests if r.resource == "deployments.apps"]

            kube.clear_faults()
            kube.set_streaming_lists("serve", HOSTILE_KIND)
            sane = time.monotonic()
            kube.create(objects.deployment(name="after-the-storm", namespace=NS))
            wait_for(
                lambda: _deployments_at_platform(platform) == args.deployments + 1,
                args.recovery_limit,
                "every Deployment at the platform",
            )
            recovered = time.monotonic()
        finally:
            stop(agent)
    per_minute = 60.0 / (ended - started)
    return {
        "mode": name,
        "title": mode.title,
        "requests_per_min": round(len(requests) * per_minute),
        "deployment_requests_per_min": round(len(hostile) * per_minute),
        "cpu_s_per_min": round((cpu_after - cpu_before) * per_minute, 2),
        "delivered_while_hostile": delivered,
        "recovery_s": round(recovered - sane, 1),
    }


def table(args: argparse.Namespace) -> None:
    print(
        "| mode | requests/min | of them Deployments | agent CPU s/min "
        "| Deployments delivered while hostile | recovery s |"
    )
    print("|---|---|---|---|---|---|")
    rows = []
    for name in args.mode or list(MODES):
        row = run_mode(name, args)
        rows.append(row)
        print(
            f"| {row['title']} | {row['requests_per_min']} | "
            f"{row['deployment_requests_per_min']} | {row['cpu_s_per_min']} | "
            f"{row['delivered_while_hostile']} of {args.deployments} | {row['recovery_s']} |",
            flush=True,
        )
    settings = {"seconds": args.seconds, "deployments": args.deployments}
    print(json.dumps({"rows": rows, "settings": settings}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bomb-mib", type=int, default=2048, help="inflated size of a bomb")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--bomb-seconds", type=float, default=15.0)
    parser.add_argument("--interval", type=float, default=1.0, help="RECONCILE_INTERVAL_SECONDS")
    parser.add_argument("--table", action="store_true", help="the hostile API servers instead")
    parser.add_argument("--mode", action="append", choices=list(MODES))
    parser.add_argument("--seconds", type=float, default=45.0, help="hostile for this long")
    parser.add_argument("--deployments", type=int, default=100)
    parser.add_argument("--recovery-limit", type=float, default=120.0)
    parser.add_argument("--agent-tree", type=Path, default=REPO, help="the agent's checkout")
    args = parser.parse_args()
    if args.table:
        table(args)
    else:
        bombs(args)


def bombs(args: argparse.Namespace) -> None:
    bomb = GzipBomb(args.bomb_mib << 20)
    with (
        FakeKube() as kube,
        FakePlatform(token=TOKEN, project_id=PROJECT_ID, cluster_id=CLUSTER_ID) as platform,
        tempfile.TemporaryDirectory(prefix="moonin-bench-") as scratch,
    ):
        print(f"building a {args.bomb_mib} MiB gzip bomb", flush=True)
        platform.fail_all("heartbeat", bomb)  # builds it once, before anything is timed
        platform.fail_all("heartbeat", None)
        cluster(kube)
        # The window ends a few seconds into the bombs.
        run_until = window(platform, args.idle_seconds + min(5.0, args.bomb_seconds / 2))
        run_until_monotonic = time.monotonic() + (run_until - datetime.now(UTC)).total_seconds()
        env = environment(kube, platform, Path(scratch))
        env["RECONCILE_INTERVAL_SECONDS"] = str(args.interval)
        agent = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "run", "--role", "scaling"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            def hpa_min() -> int:
                return kube.get("horizontalpodautoscalers", NS, "web")["spec"]["minReplicas"]

            wait_for(lambda: hpa_min() == 4, 60, "the window to be applied")
            print("window applied; idle against a well-behaved platform", flush=True)
            idle: list[float] = []
            sample(agent.pid, args.idle_seconds / 2, [])
            sample(agent.pid, args.idle_seconds / 2, idle)
            hwm_before = memory_mib(agent.pid)["VmHWM"]
            asked_before = sum(r.route == "templates" for r in platform.requests)
            print("bombs from now on", flush=True)
            platform.fail_all("templates", bomb)
            platform.fail_all("actions", bomb)
            bombed: list[float] = []
            sample(agent.pid, args.bomb_seconds, bombed)
            memory = memory_mib(agent.pid)
            cycles = sum(r.route == "templates" for r in platform.requests) - asked_before
            reverts = [
                r.time
                for r in kube.requests
                if r.method == "PATCH" and "horizontalpodautoscalers" in r.path
            ]
            reverted = hpa_min() == 2
        finally:
            stop(agent)
    idle_rss = statistics.median(idle)
    revert_late = None
    if reverted and len(reverts) >= 2:  # the apply's PATCH, then the revert's
        revert_late = round(reverts[-1] - run_until_monotonic, 2)
    result = {
        "bomb_inflated_mib": args.bomb_mib,
        "bombed_cycles": cycles,
        "interval_seconds": args.interval,
        "idle_rss_mib": round(idle_rss, 1),
        "bomb_peak_rss_mib": round(max(bombed), 1),
        "peak_over_idle_mib": round(max(bombed) - idle_rss, 1),
        "hwm_growth_mib": round(memory["VmHWM"] - hwm_before, 1),
        "revert_late_seconds": revert_late,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
