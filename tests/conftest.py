"""The suite's kinds and the fakes shared across the session.

Each test gets one kind marker (unit, integration, e2e, fake, real) from the folder its file
sits in, and unit tests fail on opening a socket or a process. The fakes: a fake Moonin
platform and a fake Kubernetes API server, each reset before every test that uses it; and
discovery agents run as subprocesses against them."""

from __future__ import annotations

import socket
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


TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "integration", "e2e", "fake", "real")
"""The test folders, each a registered marker of the same name (pyproject.toml)."""
FOLDERS = "tests/{" + ",".join(KINDS) + "}"
PRODUCTION_PACKAGES = ("agent", "collector", "kube", "runtime", "scheduler", "shipper")
"""The packages the image ships (the fakes, sandbox/, are a distribution of their own)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every test gets exactly one kind, so `-m <kind>` selects a partition of the suite.
    for item in items:
        item.add_marker(kind_of(item))


def kind_of(item: pytest.Item) -> str:
    """A kind marked on the test or its module wins (the few tests of a mixed file); then
    whatever needs the real control plane is of the real tier, so `-m real` finds it all;
    otherwise the folder the file sits in decides."""
    for marker in item.iter_markers():
        if marker.name in KINDS:
            return marker.name
    if "control_plane" in getattr(item, "fixturenames", ()):
        return "real"
    folder = item.path.resolve().relative_to(TESTS).parts[0]
    if folder not in KINDS:
        raise pytest.UsageError(f"{item.nodeid}: move the file into {FOLDERS}")
    return folder


class NotAUnitTest(RuntimeError):
    """Not an OSError, so no retry or error handling in the code under test swallows it."""


@pytest.fixture(autouse=True)
def no_socket_or_process_in_unit_tests(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit test that connects or binds a socket, or starts a process, fails: it belongs
    in tests/integration or tests/e2e."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise NotAUnitTest(f"{request.node.nodeid}: a unit test opens no socket or process")

    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


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
