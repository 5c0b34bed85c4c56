"""`moonin-agent run --role scaling` as a process, while the platform turns hostile after a
window was applied: its answers drip or are gzip bombs, and the agent is even killed in a
loop. The window still ends on time, health says what is wrong, and once the platform
answers properly again every apply and revert event reaches it."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox.kube import FakeKube
from sandbox.platform import ROUTES, Drip, FakePlatform, GzipBomb, Status
from sandbox.scaling import manual_template
from tests import scaling_harness as h
from tests.agent_process import agent_env, log_events, start_agent, stop_within
from tests.waiting import wait_until

INTERVAL = 1.0


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def set_window(platform: FakePlatform, seconds: float) -> datetime:
    """A manual execution running from now for `seconds`; returns its end."""
    started = datetime.now(UTC)
    ends = started + timedelta(seconds=seconds)
    platform.set_templates([manual_template(started, ends)])
    platform.set_actions("t-1", [h.action(low=4, high=20)])
    return ends


def min_replicas(kube: FakeKube) -> int:
    return kube.get("horizontalpodautoscalers", h.NS, "web")["spec"]["minReplicas"]


def requests_to(platform: FakePlatform, route: str) -> int:
    return sum(r.route == route for r in platform.requests)


def delivered_once_healed(platform: FakePlatform, env: dict[str, str]) -> list[dict[str, Any]]:
    """The events the platform holds once it answers properly again and an agent runs on
    the same queue until the revert event has arrived."""
    for route in ROUTES:
        platform.fail_all(route, None)
    agent = start_agent(env, role="scaling")
    try:
        wait_until(lambda: any(e["type"] == "revert" for e in platform.events().values()))
    finally:
        agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)
    return list(platform.events().values())


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.create(h.namespace())
    kube.create(h.deployment(replicas=2))
    kube.create(h.hpa(low=2, high=5))
    return kube


@pytest.mark.parametrize(
    ("fault", "health"),
    [
        (Drip(every=0.5), None),  # its deadline is far away: the GET is still dripping
        (GzipBomb(256 << 20), "platform: answer over 8 MiB: applying nothing new"),
    ],
    ids=["drip", "gzip bomb"],
)
def test_a_window_applied_before_the_platform_turned_hostile_ends_within_an_interval(
    cluster: FakeKube,
    kubeconfig: Path,
    platform: FakePlatform,
    tmp_path: Path,
    fault: Any,
    health: str | None,
) -> None:
    if isinstance(fault, GzipBomb):
        platform.fail_all("heartbeat", fault)  # built now, not after the window was applied
        platform.fail_all("heartbeat", None)
    env = agent_env(
        platform,
        tmp_path / "queue",
        KUBECONFIG=str(kubeconfig),
        RECONCILE_INTERVAL_SECONDS=str(INTERVAL),
        API_DEADLINE_SECONDS="120",
    )
    agent = start_agent(env, role="scaling")
    try:
        # The window opens once the agent polls, so a slow start cannot outlast it.
        wait_until(lambda: requests_to(platform, "templates") >= 1)
        run_until = set_window(platform, 4)
        wait_until(lambda: min_replicas(cluster) == 4)
        wait_until(lambda: any(e["type"] == "apply" for e in platform.events().values()))
        platform.fail_all("templates", fault)
        platform.fail_all("actions", fault)
        platform.fail_all("events", Status(503))  # the revert event waits in the outbox
        wait_until(lambda: min_replicas(cluster) == 2)
        if isinstance(fault, Drip):
            assert platform.open_streams() >= 1  # reverted while the templates GET hangs
    finally:
        agent.send_signal(signal.SIGTERM)
        # Stops at once: the GET in flight is given up, not waited out.
        stderr = stop_within(agent, 30)
    if health is not None:
        reasons = [e.get("reason") for e in log_events(stderr) if e["event"] == "scheduler_health"]
        assert health in reasons

    events = delivered_once_healed(platform, env)
    assert sorted(e["type"] for e in events) == ["apply", "revert"]
    [revert] = [e for e in events if e["type"] == "revert"]
    assert revert["reason"] == "expired"
    # The first revert scan after the end did it (timestamps have whole seconds).
    late = parse(revert["occurred_at"]) - run_until.replace(microsecond=0)
    assert late <= timedelta(seconds=INTERVAL + 1)


def test_an_agent_killed_in_a_loop_reverts_at_its_first_start_after_the_window_ended(
    cluster: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    run_until = set_window(platform, 6)
    env = agent_env(
        platform,
        tmp_path / "queue",
        KUBECONFIG=str(kubeconfig),
        RECONCILE_INTERVAL_SECONDS="0.5",
    )
    agent = start_agent(env, role="scaling")
    try:
        wait_until(lambda: min_replicas(cluster) == 4)
    finally:
        agent.kill()
        agent.wait()
    # From now on every templates GET hangs and no event can be delivered.
    platform.fail_all("templates", Drip(every=1))
    platform.fail_all("actions", Drip(every=1))
    platform.fail_all("events", Status(503))

    starts: list[datetime] = []
    while not starts or starts[-1] <= run_until:
        asked = requests_to(platform, "templates")
        starts.append(datetime.now(UTC))
        agent = start_agent(env, role="scaling")
        try:
            # Killed as it makes its first call to the platform, every time.
            wait_until(lambda: requests_to(platform, "templates") > asked, timeout=30)  # noqa: B023
        finally:
            agent.kill()
            agent.wait()
    assert len(starts) >= 2
    # The first start after the end reverted before asking the platform anything.
    assert min_replicas(cluster) == 2

    events = delivered_once_healed(platform, env)
    assert sorted(e["type"] for e in events) == ["apply", "revert"]
    hpa = cluster.get("horizontalpodautoscalers", h.NS, "web")
    assert not any(key.startswith("scaling.moonin.app/") for key in hpa["metadata"]["annotations"])
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)
