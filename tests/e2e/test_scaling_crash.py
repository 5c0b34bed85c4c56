"""SIGKILL the scaling agent at random moments of its applies and reverts: after a restart and
the window's end every HPA and Deployment is exactly as before the window, and the platform
holds exactly one apply and one revert event id per action and window.

The cluster has two Deployments in one namespace: `web`, scaled by a pre-existing
autoscaling/v2 HPA (apply and revert patch it, and its spec comes back exactly), and `api`,
which has none (apply creates a provisional HPA and raises the Deployment's replicas; revert
deletes the HPA and restores the replicas). One template has an action for each.

Three manual windows run one after another, each a new execution (so a new `window_start`
and new event ids). In each, `python -m agent.cli run --role scaling` is started on the same
queue directory every time (a pod restarted on its volume) and SIGKILLed:

- apply: once during start-up, before its first cycle; once a few milliseconds after its
  first Kubernetes write (inside the apply sequence); once just after the window is applied;
- the window: once at a random moment (during start-up or between steady cycles);
- revert: the window's end is moved to a moment just ahead (the platform shortening the
  execution), then one kill during start-up, one a few milliseconds after the first
  Kubernetes write after the end (inside the revert sequence), one at a random moment, and,
  except after the last window, one just after the cluster is back to its state before the
  window. The last window is reverted by the final run.

Start-up (imports, the kubernetes client) takes 1-2 s before the first cycle, so the kills
that must land inside a cycle wait for the cycle's first write rather than guess a delay.
Delays come from a seeded `random.Random`: the seed is printed as `CRASH_SEED=<n>` and
replayed with `CRASH_SEED=<n> pytest tests/e2e/test_scaling_crash.py` (20261202 unless set); where
the kills land still depends on timing, so each run prints what it covered (with `-s`). A
final run lets the last window end, ships every event, and is stopped with SIGTERM.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.queue_inspect import stats as queue_stats
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from sandbox.scaling import manual_execution, stamp
from scheduler.store import FILE_NAME as STORE_FILE
from scheduler.store import Store
from tests import scaling_harness as h
from tests.agent_process import agent_env
from tests.waiting import wait_until

SEED = int(os.environ.get("CRASH_SEED") or 20261202)
WINDOWS = 3
CLUSTER = "c-1"  # agent_env's CLUSTER_ID
TEMPLATE = "t-1"
PREFIX = "scaling.moonin.app/"


@dataclass(frozen=True)
class Target:
    """One action and the Deployment it scales."""

    action_id: str
    deployment: str
    low: int
    high: int
    provisional: bool


# `web` runs at 3 replicas, the window's min: a window never raises it, so its replicas are
# expected back as they were (the design leaves a raised Deployment to its pre-existing HPA).
WEB = Target("a-web", "web", 3, 10, provisional=False)
# `api` has no HPA and 1 replica: a provisional HPA 3..6, the Deployment raised to 3, then 1.
API = Target("a-api", "api", 3, 6, provisional=True)
TARGETS = (WEB, API)


@dataclass(frozen=True)
class Kill:
    window: int
    phase: str  # apply, window, revert
    how: str  # start-up, after write, random, settled
    lived: float  # seconds between start and SIGKILL
    cycled: bool  # the process had asked the platform for templates (a cycle began)
    writes: int  # Kubernetes writes (Events included) this process made
    since_write: float | None  # seconds since this process's latest Kubernetes write
    state: str  # the cluster just after the kill (see `label`)


class Agents:
    """Starts the scaling role on one queue directory, kills it, and reaps every process it
    started, even when the test fails half way. Each process logs to its own file."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        path = self.logs / f"agent-{len(self.started):02d}.log"
        with path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-X",
                    "faulthandler",
                    "-m",
                    "agent.cli",
                    "run",
                    "--role",
                    "scaling",
                ],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.started.append(proc)
        return proc

    def reap_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)

    def log_lines(self, paths: list[Path] | None = None) -> list[dict[str, Any]]:
        """Every JSON log line of every process, or of those logging to `paths` (a killed
        one may end mid-line)."""
        found = []
        for path in sorted(self.logs.glob("agent-*.log")) if paths is None else paths:
            for line in path.read_text().splitlines():
                with suppress(json.JSONDecodeError):
                    found.append(json.loads(line))
        return found

    def running(self, proc: subprocess.Popen[bytes]) -> bool:
        """Whether `proc` has started its role (its SIGTERM handler is in place by then)."""
        path = self.logs / f"agent-{self.started.index(proc):02d}.log"
        return any(line.get("event") == "scaling_started" for line in self.log_lines([path]))

    def tail(self, processes: int = 3, chars: int = 4000) -> str:
        """The end of the last few processes' logs (JSON lines), for a failure message."""
        paths = sorted(self.logs.glob("agent-*.log"))[-processes:]
        return "\n".join(f"--- {p.name}\n{p.read_text()[-chars:]}" for p in paths)


def event_id(action_id: str, window_start: str, kind: str, detail: str) -> str:
    """The contract's id, computed here rather than with `scheduler.events`."""
    text = f"{CLUSTER}|{TEMPLATE}|{action_id}|{window_start}|{kind}|{detail}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def set_window(platform: FakePlatform, number: int, window_start: str, run_until: datetime) -> None:
    execution = manual_execution(window_start, run_until, execution_id=f"x-{number}")
    platform.set_templates([h.template(TEMPLATE, cron=None, execution=execution)])


def cluster_state(kube: FakeKube) -> dict[str, Any]:
    """Every HPA and Deployment: labels, annotations and spec."""

    def summary(obj: dict[str, Any]) -> dict[str, Any]:
        metadata = obj["metadata"]
        return {
            "labels": metadata.get("labels") or {},
            "annotations": metadata.get("annotations") or {},
            "spec": obj["spec"],
        }

    def key(obj: dict[str, Any]) -> str:
        return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    return {
        "hpas": {key(o): summary(o) for o in kube.list("horizontalpodautoscalers")},
        "deployments": {key(o): summary(o) for o in kube.list("deployments")},
    }


def applied(state: dict[str, Any], target: Target, window_start: str) -> bool:
    """The window is fully on this target: its HPA managed for this window with its min:max,
    and the Deployment at least at the min."""
    hpa = state["hpas"].get(f"{h.NS}/{target.deployment}")
    deployment = state["deployments"][f"{h.NS}/{target.deployment}"]
    return (
        hpa is not None
        and hpa["annotations"].get(PREFIX + "window-start") == window_start
        and (hpa["spec"].get("minReplicas"), hpa["spec"]["maxReplicas"])
        == (target.low, target.high)
        and deployment["spec"].get("replicas", 1) >= target.low
    )


def label(state: dict[str, Any], baseline: dict[str, Any], window_start: str, ended: bool) -> str:
    on = sum(applied(state, target, window_start) for target in TARGETS)
    if not ended:
        if state == baseline:
            return "before apply: nothing applied"
        return "window: applied" if on == len(TARGETS) else "apply: partly applied"
    if state == baseline:
        return "after end: reverted"
    return "after end: not reverted" if on == len(TARGETS) else "after end: partly reverted"


def build_cluster(kube: FakeKube) -> None:
    kube.create(h.namespace())
    web = h.deployment("web", replicas=3)
    web["metadata"]["labels"] = {"app": "web", "tier": "front"}
    kube.create(web)
    hpa = h.hpa("web", "web", low=2, high=5)
    hpa["metadata"]["labels"] = {"app": "web"}
    kube.create(hpa)
    api = h.deployment("api", replicas=1, annotations={"owner": "team-api"})
    api["metadata"]["labels"] = {"app": "api"}
    kube.create(api)


class Crashes:
    """The kill loop: starts the agent, SIGKILLs it at a chosen moment, and notes what the
    cluster looked like right after (the process is dead, so nothing moves under the look)."""

    def __init__(self, kube: FakeKube, platform: FakePlatform, agents: Agents) -> None:
        self.kube = kube
        self.platform = platform
        self.agents = agents
        self.baseline = cluster_state(kube)
        self.kills: list[Kill] = []
        self.windows: list[str] = []  # window_start of each window, in order
        self.ends_at = float("inf")  # time.monotonic() of the current window's end

    def kill(
        self, phase: str, how: str, delay: float, trigger: Callable[[int], bool] | None = None
    ) -> None:
        """Start the agent; when there is a `trigger`, wait until it holds (it is given the
        Kubernetes request log's length at the start); wait `delay` seconds more; SIGKILL."""
        offset = len(self.kube.requests)
        started = time.monotonic()
        proc = self.agents.start()
        if trigger is not None:
            try:
                # Polled often: a kill meant to land inside a sequence follows the write closely.
                wait_until(lambda: trigger(offset) or proc.poll() is not None, 30, poll=0.001)
            except AssertionError:
                raise AssertionError(f"{how}: not in time\n{self.agents.tail(1)}") from None
            assert proc.poll() is None, f"the agent exited\n{self.agents.tail(1)}"
        time.sleep(delay)  # the kill moment: what the test draws, not what it waits for
        proc.kill()
        proc.wait(timeout=10)
        killed = time.monotonic()
        writes = [
            r.time
            for r in self.kube.requests[offset:]
            if r.method != "GET" and started <= r.time <= killed
        ]
        cycled = any(
            r.route == "templates" and started <= r.time <= killed for r in self.platform.requests
        )
        ended = killed >= self.ends_at
        self.kills.append(
            Kill(
                window=len(self.windows) - 1,
                phase=phase,
                how=how,
                lived=killed - started,
                cycled=cycled,
                writes=len(writes),
                since_write=killed - writes[-1] if writes else None,
                state=label(self.state(), self.baseline, self.windows[-1], ended),
            )
        )

    def state(self) -> dict[str, Any]:
        return cluster_state(self.kube)

    def is_applied(self, _: int = 0) -> bool:
        state = self.state()
        return all(applied(state, target, self.windows[-1]) for target in TARGETS)

    def is_reverted(self, _: int = 0) -> bool:
        return self.state() == self.baseline

    def writes_after(
        self, since: float, count: int, done: Callable[[int], bool]
    ) -> Callable[[int], bool]:
        """A trigger: this process made `count` Kubernetes writes since `since` (or there is
        nothing left for it to write: `done`)."""

        def seen(offset: int) -> bool:
            requests = self.kube.requests[offset:]
            writes = sum(1 for r in requests if r.method != "GET" and r.time >= since)
            return writes >= count or done(offset)

        return seen


@pytest.fixture
def agents(platform: FakePlatform, kubeconfig: Path, tmp_path: Path) -> Iterator[Agents]:
    env = agent_env(
        platform,
        tmp_path / "queue",
        KUBECONFIG=str(kubeconfig),
        RECONCILE_INTERVAL_SECONDS="0.2",
        SHUTDOWN_SHIP_SECONDS="5",
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    started = Agents(env, logs)
    yield started
    started.reap_all()


def test_sigkill_during_applies_and_reverts_leaves_the_cluster_as_before_and_one_event_each(
    kube: FakeKube, platform: FakePlatform, agents: Agents, tmp_path: Path
) -> None:
    print(f"CRASH_SEED={SEED}")
    rng = random.Random(SEED)
    queue = tmp_path / "queue"
    build_cluster(kube)
    platform.set_actions(
        TEMPLATE,
        [h.action(t.action_id, t.deployment, t.low, t.high, up=1, down=1) for t in TARGETS],
    )
    run = Crashes(kube, platform, agents)

    for number in range(WINDOWS):
        started_at = datetime.now(UTC).replace(microsecond=0)
        run.windows.append(stamp(started_at))
        run.ends_at = float("inf")
        # Far enough ahead to be applied whatever the start-up time; shortened below.
        set_window(platform, number, run.windows[-1], started_at + timedelta(seconds=120))

        # Apply: 5 writes (web's HPA patched, its Kubernetes Event, api's HPA created, its
        # Event, api's replicas raised), each apply event put after its HPA write. A kill
        # just after the 1st to 4th lands inside the sequence, often inside an outbox put.
        run.kill("apply", "start-up", rng.uniform(0.05, 0.4))
        nth = run.writes_after(time.monotonic(), rng.randint(1, 4), run.is_applied)
        run.kill("apply", "after write", rng.uniform(0.0, 0.004), nth)
        run.kill("apply", "settled", rng.uniform(0.0, 0.3), run.is_applied)
        run.kill("window", "random", rng.uniform(0.05, 2.5))

        # Revert: the revert events are put first; api's HPA deleted (its replicas journalled
        # before), api's replicas restored, its Event, web's HPA patched back, its Event.
        ahead = rng.uniform(0.1, 2.0)
        run.ends_at = time.monotonic() + ahead
        set_window(platform, number, run.windows[-1], datetime.now(UTC) + timedelta(seconds=ahead))
        run.kill("revert", "start-up", rng.uniform(0.05, 0.4))
        nth = run.writes_after(run.ends_at, rng.randint(1, 4), run.is_reverted)
        run.kill("revert", "after write", rng.uniform(0.0, 0.004), nth)
        run.kill("revert", "random", rng.uniform(0.05, 2.5))
        if number < WINDOWS - 1:
            run.kill("revert", "settled", rng.uniform(0.0, 0.3), run.is_reverted)
            # The next window finds the cluster exactly as the first one did.
            assert run.state() == run.baseline, agents.tail()
        assert not list(queue.glob("*.corrupt-*")), "a queue or store file was quarantined"

    # The last start: the last window has ended; it is reverted and every event shipped.
    expected: dict[str, tuple[str, str, str]] = {}
    for window_start in run.windows:
        for target in TARGETS:
            apply = event_id(target.action_id, window_start, "apply", f"{target.low}:{target.high}")
            expected[apply] = ("apply", target.action_id, window_start)
            revert = event_id(target.action_id, window_start, "revert", "")
            expected[revert] = ("revert", target.action_id, window_start)
    final = agents.start()
    try:
        # The agent killed last may have done it all already: wait for this one to run, so
        # that the SIGTERM below meets its handler, not its imports.
        wait_until(lambda: agents.running(final), timeout=30)
        wait_until(run.is_reverted, timeout=30)
        wait_until(lambda: set(expected) <= set(platform.events()), timeout=30)
        wait_until(lambda: queue_stats(queue, "scaling")["scaling"].records == 0, timeout=30)
    except AssertionError:
        missing = sorted(set(expected) - set(platform.events()))
        raise AssertionError(
            f"not settled: {run.state()}\nmissing events: {missing}\n{agents.tail()}"
        ) from None
    final.send_signal(signal.SIGTERM)
    assert final.wait(timeout=30) == 0, agents.tail(1)
    report(run.kills, platform)

    # Every HPA and Deployment exactly as before the windows: specs (min, max, metrics,
    # scaleTargetRef, replicas), labels and annotations; no provisional HPA left, and no
    # `scaling.moonin.app/` annotation (expired and disabled reverts leave no released mark).
    assert run.state() == run.baseline
    # Exactly one apply and one revert id per action and window: none missing, none extra
    # (resent duplicates of an id are fine: the platform de-duplicates them).
    assert {event["id"] for event in platform.received_events()} == set(expected)
    events = platform.events()
    assert set(events) == set(expected)
    for key, event in events.items():
        kind, action_id, _ = expected[key]
        target = WEB if action_id == WEB.action_id else API
        assert (event["type"], event["action_id"], event["window_start"]) == expected[key]
        assert (event["namespace"], event["deployment"]) == (h.NS, target.deployment)
        assert (event["min_replicas"], event["max_replicas"]) == (target.low, target.high)
        assert event["provisional"] is target.provisional
        if kind == "apply":
            assert (event["reason"], event["message"]) == (None, None), event
        else:
            assert event["reason"] in {"expired", "disabled"}, event
    # Nothing left behind: the outbox drained, no dead letters, no half-done restore.
    figures = queue_stats(queue, "scaling")["scaling"]
    assert (figures.records, figures.dead_letters, figures.dropped) == (0, 0, 0)
    with closing(sqlite3.connect(f"file:{queue / STORE_FILE}?mode=ro", uri=True)) as store:
        assert store.execute("SELECT count(*) FROM pending_restores").fetchone() == (0,)
    assert not list(queue.glob("*.corrupt-*"))
    # No cycle, apply or revert failed or crashed on the way (they log at error level).
    failures = [line for line in agents.log_lines() if line.get("level") in {"error", "critical"}]
    assert not failures, failures[:5]

    # What the kills covered: before any apply, inside an apply or revert sequence, with the
    # window applied (each window's first kill lands in start-up, long before a cycle).
    assert len(run.kills) >= 20
    states = Counter(k.state for k in run.kills)
    assert states["before apply: nothing applied"] >= 1, states
    assert states["window: applied"] >= 1, states
    assert states["apply: partly applied"] + states["after end: partly reverted"] >= 1, states
    assert any(k.state.startswith("after end") for k in run.kills), states


def report(kills: list[Kill], platform: FakePlatform) -> None:
    """What the kills hit, printed for `pytest -s`."""
    states = Counter(k.state for k in kills)
    near_write = sum(1 for k in kills if k.since_write is not None and k.since_write < 0.05)
    received = platform.received_events()
    lines = [
        f"{len(kills)} kills (seed {SEED}); {sum(not k.cycled for k in kills)} during start-up "
        f"(before the first cycle), {near_write} within 50 ms of a Kubernetes write",
        *(f"  {count:3d}  {state}" for state, count in sorted(states.items())),
        f"events: {len(received)} received, {len(platform.events())} distinct ids",
    ]
    for k in kills:
        since = "-" if k.since_write is None else f"{k.since_write * 1000:.0f} ms"
        lines.append(
            f"  w{k.window} {k.phase:<6} {k.how:<11} lived {k.lived:4.2f} s, {k.writes} writes, "
            f"the last {since:>6} before: {k.state}"
        )
    print("\n".join(lines))


# --- a crash between a provisional HPA's delete and its replicas restore -------------------


class Died(BaseException):
    """The process dies here: not an `Exception`, so no handler of the cycle catches it."""


def test_a_revert_killed_after_the_delete_restores_the_replicas_even_if_a_new_window_began(
    kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daily window 08:00-18:00 UTC; `web` has 2 replicas and no HPA.
    harness = h.make_harness(kube, tmp_path)
    try:
        harness.api.templates = [h.template()]
        harness.api.actions = {"t-1": [h.action()]}  # web, 4..20
        kube.create(h.deployment(replicas=2))
        harness.run(h.at(9))
        assert harness.deployment()["spec"]["replicas"] == 4

        # The revert: journal, DELETE of the provisional HPA, then the process dies before
        # the replicas PATCH (what a SIGKILL there leaves).
        with monkeypatch.context() as patch:
            dying = h.failing_replica_writes(harness.kube_api, Died)
            patch.setattr(harness.kube_api, "patch_deployment", dying)
            with pytest.raises(Died):
                harness.run(h.at(18, 1))
        assert kube.list("horizontalpodautoscalers") == []
        assert harness.deployment()["spec"]["replicas"] == 4
        [pending] = harness.store.restores()
        assert (pending.deployment, pending.replicas) == ("web", 2)

        # The agent comes back only in the next day's window (a node drain, a crash loop, or
        # simply a next window that begins within one reconcile interval).
        harness.store.close()
        harness.store = Store(harness.store.path)
        harness.reconciler = harness.make_reconciler()
        harness.run(h.at(9, days=1))
        harness.run(h.at(18, 1, days=1))
        harness.run(h.at(18, 2, days=1))

        assert kube.list("horizontalpodautoscalers") == []
        assert harness.store.restores() == []
        # As before the first window (today: 4, the first window's minimum, for good).
        assert harness.deployment()["spec"]["replicas"] == 2
    finally:
        harness.close()
