"""The Moonin client against a platform (or a proxy in front of it) that answers badly, over
real sockets: every call ends with a clear error naming the endpoint and what was wrong,
reads no more than its bound, and never follows the platform elsewhere with the token."""

from __future__ import annotations

import math
import socket
import threading
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from runtime import deadline
from runtime.backoff import RETRY_AFTER_CEILING_SECONDS, Backoff
from sandbox.platform import Drip, FakePlatform, GzipBomb, HugeBody, Redirect, Status
from shipper.client import ApiClient, ApiSettings
from shipper.errors import (
    AnswerOverLimit,
    CallCancelled,
    DeadlineExceeded,
    Misconfigured,
    RetryLater,
)
from shipper.token import TokenSource
from tests.raw_server import serving
from tests.waiting import wait_until

TOKEN = "hostile-test-token-5c1d"
DEADLINE = 1.0
LIMIT = 1 << 20


@pytest.fixture
def observed() -> list[tuple[str, str]]:
    return []


def client_for(url: str, observed: list[tuple[str, str]], **settings: Any) -> ApiClient:
    return ApiClient(
        base_url=url,
        project_id="p-1",
        cluster_id="c-1",
        token=TokenSource(TOKEN),
        settings=ApiSettings(insecure_http=True, **settings),
        observe=lambda endpoint, outcome, _: observed.append((endpoint, outcome)),
    )


@pytest.fixture
def client(platform: FakePlatform, observed: list[tuple[str, str]]) -> Iterator[ApiClient]:
    platform.token = TOKEN
    with client_for(
        platform.url, observed, deadline_seconds=DEADLINE, max_answer_bytes=LIMIT
    ) as made:
        yield made


CALLS: dict[str, Callable[[ApiClient], object]] = {
    "templates": lambda c: c.get_templates(),
    "actions": lambda c: c.get_actions("t-1"),
    "heartbeat": lambda c: c.heartbeat({}),
}


@pytest.mark.parametrize("route", list(CALLS))
@pytest.mark.parametrize(
    "drip",
    [Drip(every=0.05), Drip(every=0.05, headers=True), Drip(every=0.2, body=b"{}" * 100)],
    ids=["endless body", "dripped headers", "slow body"],
)
def test_an_answer_that_drips_past_the_deadline_is_a_deadline_error(
    platform: FakePlatform,
    client: ApiClient,
    observed: list[tuple[str, str]],
    route: str,
    drip: Drip,
) -> None:
    platform.fail_all(route, drip)
    with pytest.raises(DeadlineExceeded) as caught:
        CALLS[route](client)
    assert str(caught.value).endswith(f"/{route}: no complete answer within 1 s")
    assert caught.value.summary == "deadline exceeded"
    assert observed == [(route, "deadline")]


def test_a_call_the_stopping_agent_gives_up_is_cancelled_not_a_deadline_error(
    platform: FakePlatform, observed: list[tuple[str, str]]
) -> None:
    platform.token = TOKEN
    platform.fail_all("templates", Drip(every=0.05))

    def cancel_once_answering(scope: deadline.Deadline) -> None:
        wait_until(lambda: platform.open_streams() == 1)
        scope.cancel()

    with (
        client_for(platform.url, observed, deadline_seconds=60) as client,
        deadline.within(math.inf) as stopping,
    ):
        canceller = threading.Thread(target=cancel_once_answering, args=(stopping,))
        canceller.start()
        with pytest.raises(CallCancelled) as caught:
            client.get_templates()
        canceller.join()
    assert str(caught.value).endswith("/templates: given up, the agent is stopping")
    assert caught.value.summary == "cancelled"
    assert observed == [("templates", "cancelled")]


def test_a_slow_answer_that_ends_within_the_deadline_is_used(
    platform: FakePlatform, client: ApiClient
) -> None:
    platform.fail_all("templates", Drip(every=0.001, body=b'{"templates": [{"id": "t-1"}]}'))
    assert client.get_templates() == [{"id": "t-1"}]


@pytest.mark.parametrize("route", ["templates", "actions"])
@pytest.mark.parametrize(
    "fault", [GzipBomb(64 << 20), HugeBody(8 << 20)], ids=["gzip bomb", "huge plain body"]
)
def test_an_answer_over_the_limit_is_refused_naming_the_endpoint_and_the_limit(
    platform: FakePlatform,
    client: ApiClient,
    observed: list[tuple[str, str]],
    route: str,
    fault: GzipBomb | HugeBody,
) -> None:
    platform.fail_all(route, fault)
    with pytest.raises(AnswerOverLimit) as caught:
        CALLS[route](client)
    assert f"/{route}: the answer over 1 MiB that a call may read" in str(caught.value)
    assert caught.value.summary == "answer over 1 MiB"
    assert isinstance(caught.value, RetryLater)  # handled like an unavailable platform
    assert observed == [(route, "over_limit")]


def test_the_heartbeat_answer_has_a_small_limit_of_its_own(
    platform: FakePlatform, client: ApiClient
) -> None:
    platform.fail_all("heartbeat", HugeBody(65 * 1024))
    with pytest.raises(AnswerOverLimit, match="answer over 64 KiB"):
        client.heartbeat({})


def test_a_batch_answered_2xx_is_delivered_whatever_body_follows(
    platform: FakePlatform, client: ApiClient, observed: list[tuple[str, str]]
) -> None:
    # The status line is the answer; a bomb, a flood or a drip after it changes nothing.
    for fault in (GzipBomb(64 << 20), HugeBody(8 << 20), Drip(every=0.05)):
        platform.script("records", fault)
        client.post_records("b-1", [b'{"id": "r-1"}'])
        platform.script("events", fault)
        client.post_events("b-2", [b'{"id": "e-1"}'])
    assert observed == [("records", "2xx"), ("events", "2xx")] * 3


def test_a_bomb_in_an_error_answer_does_not_hide_the_status(
    platform: FakePlatform, client: ApiClient
) -> None:
    platform.fail_all("templates", Status(503, body=b"x" * (4 << 20), retry_after="7"))
    with pytest.raises(RetryLater) as caught:
        client.get_templates()
    assert caught.value.status == 503 and caught.value.retry_after == 7.0
    assert len(caught.value.body) <= 500


def test_a_redirect_to_another_host_is_not_followed_and_the_token_never_goes_there(
    platform: FakePlatform, client: ApiClient
) -> None:
    with FakePlatform(token=TOKEN) as elsewhere:
        for route in CALLS:
            platform.fail_all(route, Redirect(f"{elsewhere.url}/v1/clusters/c-1/{route}"))
            with pytest.raises(Misconfigured, match="a redirect to"):
                CALLS[route](client)
        assert elsewhere.requests == []


def test_retry_after_negative_huge_or_a_date_gives_a_bounded_wait(
    platform: FakePlatform, client: ApiClient
) -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=90), usegmt=True)
    waits = {}
    for value in ("-5", "99999999999", soon, "Wed, 21 Oct 2015 07:28:00 GMT", "soon"):
        platform.script("templates", Status(429, retry_after=value))
        with pytest.raises(RetryLater) as caught:
            client.get_templates()
        backoff = Backoff(initial=1.0, maximum=300.0)
        waits[value] = (
            caught.value.retry_after,
            backoff.next_delay(at_least=caught.value.retry_after),
        )
    # Unparseable or negative: the caller's own backoff (at most its first ceiling, 1 s).
    assert waits["-5"][0] is None and waits["-5"][1] <= 1.0
    assert waits["soon"][0] is None
    # Huge: honoured, but never longer than the ceiling.
    assert waits["99999999999"][1] == RETRY_AFTER_CEILING_SECONDS
    # A date: seconds from now; one in the past is no wait at all.
    assert 60 <= waits[soon][1] <= 90
    assert waits["Wed, 21 Oct 2015 07:28:00 GMT"][0] == 0.0


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("templates", b'{"templates": "all of them"}'),
        ("templates", b"[]"),
        ("templates", b'"templates"'),
        ("templates", b"null"),
        ("templates", b'{"templates": [1, 2]'),
        ("actions", b'{"actions": {"a-1": {}}}'),
        ("actions", b'{"actions": 3}'),
        ("heartbeat", b'["resync"]'),
        ("heartbeat", b"true"),
    ],
)
def test_wrong_json_types_at_the_top_are_a_malformed_answer_retried_later(
    platform: FakePlatform, client: ApiClient, route: str, body: bytes
) -> None:
    platform.fail_all(route, Status(200, body=body))
    with pytest.raises(RetryLater, match=f"malformed answer from .*/{route}"):
        CALLS[route](client)


def half_gzip_then_a_byte_a_second(conn: socket.socket, stop: threading.Event) -> None:
    """A 200 with half of a gzip body at once, then the rest a byte a second, ending with
    the connection (no Content-Length)."""
    body = zlib.compress(b'{"templates": []}' + b" " * 4096, 9, wbits=31)
    conn.recv(65536)
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Content-Encoding: gzip\r\nConnection: close\r\n\r\n" + body[: len(body) // 2]
    )
    for byte in body[len(body) // 2 :]:
        if stop.wait(1.0):
            return
        conn.sendall(bytes((byte,)))


def test_a_compressed_answer_cut_by_the_deadline_is_a_deadline_error_not_a_malformed_one(
    observed: list[tuple[str, str]],
) -> None:
    with (
        serving(half_gzip_then_a_byte_a_second) as url,
        client_for(url, observed, deadline_seconds=0.5) as client,
    ):
        for _ in range(3):  # however the cut falls: a timeout, or an early end of the body
            with pytest.raises(DeadlineExceeded):
                client.get_templates()
    assert observed == [("templates", "deadline")] * 3


def test_a_batch_whose_2xx_answer_drips_is_delivered_without_waiting_out_the_deadline(
    platform: FakePlatform, observed: list[tuple[str, str]]
) -> None:
    platform.token = TOKEN
    platform.fail_all("records", Drip(every=0.5))
    with client_for(platform.url, observed, deadline_seconds=120) as client:
        posting = threading.Thread(target=client.post_records, args=("b-1", [b'{"id": "r"}']))
        posting.start()
        wait_until(lambda: not posting.is_alive())  # long before 120 s
    assert observed == [("records", "2xx")]
