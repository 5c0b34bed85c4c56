"""Fakes shared across the session: a fake Moonin platform and a fake Kubernetes API server,
each reset before every test that uses it; and discovery agents run as subprocesses
against them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from tests.agent_process import TOKEN, agent_env

# The informer tests' `api` and `running` fixtures; the scaling tests' harness `h`; real
# kubectl against the fake; the real control plane.
pytest_plugins = (
    "tests.informer_harness",
    "tests.scaling_harness",
    "tests.kubectl",
    "tests.real_cluster",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Whatever needs the real control plane is of the real tier, so `-m real` finds it all.
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session")
def session_platform() -> Iterator[FakePlatform]:
    platform = FakePlatform(token=TOKEN)
    platform.start()
    yield platform
    platform.stop()


@pytest.fixture
def platform(session_platform: FakePlatform) -> FakePlatform:
    session_platform.reset()
    if not session_platform.is_up:
        session_platform.up()
    return session_platform


@pytest.fixture(scope="session")
def session_kube() -> Iterator[FakeKube]:
    with FakeKube(bookmark_interval=0.2) as kube:
        yield kube


@pytest.fixture
def kube(session_kube: FakeKube) -> FakeKube:
    session_kube.reset()
    session_kube.bookmark_interval = 0.2
    return session_kube


@pytest.fixture
def http(kube: FakeKube) -> Iterator[httpx.Client]:
    """Plain HTTP to the fake Kubernetes API as its default ServiceAccount."""
    with httpx.Client(
        base_url=kube.url, headers=kube.headers, trust_env=False, timeout=10
    ) as client:
        yield client


@pytest.fixture(scope="session")
def kubeconfig(session_kube: FakeKube, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_kube.kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture
def discovery_env(platform: FakePlatform, kubeconfig: Path, tmp_path: Path) -> dict[str, str]:
    return agent_env(
        platform,
        tmp_path / "queue",
        KUBECONFIG=str(kubeconfig),
        LEADER_ELECTION="false",
        HEARTBEAT_SECONDS="1",
    )


@pytest.fixture
def discovery_agents(
    discovery_env: dict[str, str],
) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        agent = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "agent.cli", "run", "--role", "discovery"],
            env=discovery_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(agent)
        return agent

    yield start
    for agent in started:
        if agent.poll() is None:
            agent.kill()
        agent.communicate()


def view(platform: FakePlatform) -> dict[tuple[str, str], dict]:
    """The platform's objects, cluster metadata aside."""
    return {
        slot: record for slot, record in platform.view().items() if slot[0] != "cluster_metadata"
    }
