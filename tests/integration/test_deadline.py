"""One deadline for a whole call, over httpx: a server that drips its answer (or
its headers) one byte at a time cannot keep a call alive past it. Every call here would
hang for good without the deadline, so returning at all is the proof."""

from __future__ import annotations

import contextlib
import math
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from runtime import deadline
from sandbox.platform import Drip, FakePlatform
from tests.raw_server import serving

TEMPLATES = "/v1/clusters/c-1/templates"
ENDLESS = Drip(every=0.05)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as plain:
        yield deadline.guard_client(plain)


@pytest.mark.parametrize("fault", [ENDLESS, Drip(every=0.05, headers=True)])
def test_an_httpx_call_ends_at_its_deadline_while_the_answer_drips(
    platform: FakePlatform, client: httpx.Client, fault: Drip
) -> None:
    platform.fail_all("templates", fault)
    # Ended by a timeout of its own or by the watchdog shutting the socket down, whichever
    # comes first: `expired` is what tells the caller which.
    with deadline.within(0.5) as limit, contextlib.suppress(httpx.HTTPError):
        client.get(platform.url + TEMPLATES).read()
    assert limit.expired


def test_calls_within_their_deadline_are_untouched_and_their_connections_kept(
    platform: FakePlatform, client: httpx.Client
) -> None:
    platform.fail_all("templates", Drip(every=0.001, body=b'{"templates": []}'))
    for _ in range(2):
        with deadline.within(30) as limit:
            assert client.get(platform.url + TEMPLATES).json() == {"templates": []}
        assert not limit.expired
    pool = client._transport._pool  # type: ignore[attr-defined]
    assert len(pool.connections) == 1


def test_no_deadline_means_the_libraries_own_timeouts(
    platform: FakePlatform, client: httpx.Client
) -> None:
    assert deadline.current() is None
    platform.fail_all("templates", Drip(every=0.001, body=b'{"templates": []}'))
    assert client.get(platform.url + TEMPLATES).status_code == 200


def test_a_call_started_after_its_deadline_fails_at_once(
    platform: FakePlatform, client: httpx.Client
) -> None:
    with deadline.within(30) as limit:
        limit.at = 0.0  # long past
        with pytest.raises(httpx.ConnectTimeout, match="deadline of 30 s exceeded"):
            client.get(platform.url + TEMPLATES)


def test_cancelling_an_outer_deadline_ends_a_call_in_flight_from_another_thread(
    platform: FakePlatform, client: httpx.Client
) -> None:
    platform.fail_all("templates", ENDLESS)
    with deadline.within(math.inf) as scope:
        threading.Timer(0.3, scope.cancel).start()
        with deadline.within(60) as limit, contextlib.suppress(Exception):
            client.get(platform.url + TEMPLATES).read()
    assert scope.expired and limit.expired
    assert limit.remaining() > 0  # ended by the cancel, long before its own deadline


def test_an_inner_deadline_never_outlives_the_outer_one() -> None:
    with deadline.within(1) as outer:
        with deadline.within(60) as inner:
            assert inner.at == outer.at
            assert deadline.current() is inner
        with deadline.within(0.5) as shorter:
            assert shorter.at < outer.at
        assert deadline.current() is outer
    assert deadline.current() is None


def test_the_watchdog_shuts_only_the_sockets_of_calls_still_running() -> None:
    running, ours = socket.socketpair()
    finished, theirs = socket.socketpair()
    try:
        with deadline.within(60) as late:
            late.guard(running)
            late._fire()  # what the watchdog does at the deadline
            assert running.recv(1) == b""  # shut down: a blocked reader wakes up
            assert late.expired
        with deadline.within(60) as done:
            done.guard(finished)
        done._fire()  # the call had ended: its socket is someone else's now
        theirs.sendall(b"x")
        assert finished.recv(1) == b"x"
        assert not done.expired
    finally:
        for sock in (running, ours, finished, theirs):
            sock.close()


def test_a_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"), deadline.within(0):
        pass


def test_an_httpx_without_the_expected_transport_layout_is_refused() -> None:
    transport = httpx.HTTPTransport()
    pool, transport._pool = transport._pool, object()  # type: ignore[assignment]
    try:
        with pytest.raises(RuntimeError, match="deadlines cannot be enforced"):
            deadline.guard_client(httpx.Client(transport=transport))
    finally:
        transport._pool = pool
        transport.close()


def drip_after_connect(conn: socket.socket, stop: threading.Event) -> None:
    """A proxy that accepts a CONNECT, then drips header lines for ever."""
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 200 Connection established\r\n")
    while not stop.wait(0.05):
        conn.sendall(b"X")


@pytest.fixture
def dripping_proxy() -> Iterator[str]:
    with serving(drip_after_connect) as url:
        yield url


def test_a_proxy_that_drips_its_connect_answer_cannot_outlast_the_deadline(
    dripping_proxy: str,
) -> None:
    with httpx.Client(proxy=dripping_proxy, verify=False, timeout=30) as plain:
        through_httpx = deadline.guard_client(plain)
        with deadline.within(0.5) as limit, contextlib.suppress(Exception):
            through_httpx.get("https://kube.example:6443/api")
        assert limit.expired
        assert limit.remaining() > -20  # ended by the deadline, not by the 30 s timeout
