"""Each setting reaches the component that uses it: set in the environment, read by
`load_settings`, handed down its branch by the roles, and seen on the wire of the fake API
server (the Lease written, the watches and lists asked for) or in the Moonin API client's
behaviour."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.config import Settings, load_settings
from agent.delivery import Delivery, open_delivery
from agent.roles import build_roles
from agent.scaling import ScalingRole
from kube.cluster import KubeTarget
from kube.errors import TimedOut
from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from shipper.errors import DeadlineExceeded, RetryLater
from shipper.records import DISCOVERY
from shipper.token import TokenSource
from tests.agent_process import agent_env
from tests.waiting import wait_until

LEASE = ("moonin", "moonin-discovery-leader")


@pytest.fixture
def discovery(
    kube: FakeKube, platform: FakePlatform, tmp_path: Path
) -> Iterator[Callable[..., None]]:
    """Starts the discovery role as `run` builds it, from the environment given."""
    kube.create(objects.namespace(name="moonin"))
    stops: list[Callable[[], None]] = []

    def start(**given: str) -> None:
        environ = agent_env(
            platform,
            tmp_path / "queue",
            LEADER_ELECTION="true",
            POD_NAME="pod-a",
            POD_NAMESPACE="moonin",
            **given,
        )
        settings = load_settings("discovery", environ)
        delivery = open_delivery(settings, TokenSource(value=settings.identity.token))
        target = KubeTarget(server=kube.url, verify=False, token=lambda: kube.token)
        roles = build_roles(settings, delivery, target=target, dry_run=False)
        delivery.start()
        for role in roles:
            role.start()

        def stop() -> None:
            for role in roles:
                role.stop()
            delivery.stop(drain_seconds=0)

        stops.append(stop)

    yield start
    for stop in stops:
        stop()


def _watches(kube: FakeKube, path: str) -> list[int]:
    """The `timeoutSeconds` of the watches on `path` (not of the streaming lists)."""
    return [
        int(r.query["timeoutSeconds"])
        for r in kube.requests
        if r.watch and r.path == path and "sendInitialEvents" not in r.query
    ]


def test_the_lease_timing_set_in_the_environment_is_the_one_the_lease_gets(
    kube: FakeKube, discovery: Callable[..., None]
) -> None:
    discovery(
        LEASE_DURATION_SECONDS="40",
        LEASE_RENEW_DEADLINE_SECONDS="30",
        LEASE_RETRY_SECONDS="0.5",
    )

    def held() -> bool:
        return any(lease["metadata"]["name"] == LEASE[1] for lease in kube.list("leases", LEASE[0]))

    wait_until(held)
    # client-go's default, written before the setting reached the Lease, is 15.
    assert kube.get("leases", *LEASE)["spec"]["leaseDurationSeconds"] == 40


def test_the_watch_timeout_set_in_the_environment_is_the_one_the_server_is_asked_for(
    kube: FakeKube, discovery: Callable[..., None]
) -> None:
    discovery(WATCH_TIMEOUT_SECONDS="100")
    # Nodes have bookmarks: their watches are asked to end between the setting and twice it.
    wait_until(lambda: bool(_watches(kube, "/api/v1/nodes")))
    assert all(100 <= timeout <= 200 for timeout in _watches(kube, "/api/v1/nodes"))  # not 300+


def test_the_watch_read_timeout_set_in_the_environment_bounds_quiet_watches(
    kube: FakeKube, discovery: Callable[..., None]
) -> None:
    discovery(WATCH_READ_TIMEOUT_SECONDS="50")
    # Events have no bookmarks: their watches end before the read timeout would cut them,
    # between 60 % and 80 % of it.
    wait_until(lambda: bool(_watches(kube, "/api/v1/events")))
    assert all(30 <= timeout <= 40 for timeout in _watches(kube, "/api/v1/events"))  # not 45+


def test_the_list_page_size_set_in_the_environment_is_the_limit_lists_ask_for(
    kube: FakeKube, discovery: Callable[..., None]
) -> None:
    kube.set_streaming_lists("refuse")  # the informers list by pages
    discovery(LIST_PAGE_SIZE="120")

    def limits() -> set[str]:
        return {
            r.query["limit"]
            for r in kube.requests
            if r.path == "/api/v1/nodes" and not r.watch and "limit" in r.query
        }

    wait_until(lambda: bool(limits()))
    assert limits() == {"120"}  # by default 500


@contextmanager
def _silent_server() -> Iterator[str]:
    """A server that takes connections (the kernel accepts them) and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


@contextmanager
def _role_facing_silence(
    platform: FakePlatform,
    tmp_path: Path,
    role: str,
    environment: Callable[[str], dict[str, str]],
) -> Iterator[tuple[str, Settings, Delivery]]:
    """The role's settings from `environment(url)` and its delivery, where `url` is a
    server that never answers; the delivery is stopped afterwards."""
    with _silent_server() as url:
        settings = load_settings(role, agent_env(platform, tmp_path / "queue", **environment(url)))
        delivery = open_delivery(settings, TokenSource(value=settings.identity.token))
        try:
            yield url, settings, delivery
        finally:
            delivery.stop(drain_seconds=0)


def test_the_moonin_api_read_timeout_set_in_the_environment_ends_a_silent_call(
    platform: FakePlatform, tmp_path: Path
) -> None:
    def environment(url: str) -> dict[str, str]:
        return {"API_URL": url, "API_READ_TIMEOUT_SECONDS": "1", "API_DEADLINE_SECONDS": "20"}

    with _role_facing_silence(platform, tmp_path, "discovery", environment) as (_, _, delivery):
        # The silence ends the call as a read timeout, long before the deadline would
        # (with the default read timeout of 30 s, the deadline ends it first).
        with pytest.raises(RetryLater, match="ReadTimeout") as ended:
            delivery.clients[DISCOVERY].heartbeat({})
        assert not isinstance(ended.value, DeadlineExceeded)


def test_the_kube_read_timeout_of_the_scaling_role_set_in_the_environment_ends_a_silent_call(
    platform: FakePlatform, tmp_path: Path
) -> None:
    def environment(url: str) -> dict[str, str]:
        return {"KUBE_SCALING_READ_TIMEOUT_SECONDS": "1", "KUBE_DEADLINE_SECONDS": "10"}

    with _role_facing_silence(platform, tmp_path, "scaling", environment) as silence:
        url, settings, delivery = silence
        target = KubeTarget(server=url, verify=False, token=lambda: "kube-token")
        (role,) = build_roles(settings, delivery, target=target, dry_run=False)
        assert isinstance(role, ScalingRole)
        try:
            # The silence ends the call as a read timeout, long before the deadline would
            # (with the default read timeout of 20 s, the deadline of 10 s ends it first).
            with pytest.raises(TimedOut, match="ReadTimeout"):
                role.job.reconciler.kube.list_hpas()
        finally:
            role.stop()
