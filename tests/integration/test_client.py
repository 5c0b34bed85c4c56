"""The Moonin API client against httpx's MockTransport, plus a local proxy for the env tests.

Grouped by behaviour: headers, bodies and gzip, status classes, Retry-After, transport
errors, answers of the GET calls and the heartbeat, secrecy of the token, URL rules,
token rotation, proxies.
"""

from __future__ import annotations

import gzip
import json
import re
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.version import VERSION
from shipper.client import ApiClient, ApiSettings
from shipper.errors import (
    CredentialsRejected,
    InsecureURLError,
    Misconfigured,
    MooninAPIError,
    RejectedBody,
    RetryLater,
    StreamPaused,
)
from shipper.token import TokenSource

TOKEN = "tok-3f9a1c7e5b2d"
BASE = "https://moonin.test/"
CLUSTER_URL = "https://moonin.test/v1/clusters/c-1"

Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """A MockTransport handler that answers from a script and keeps every request."""

    def __init__(self, *responses: httpx.Response | Exception) -> None:
        self.requests: list[httpx.Request] = []
        self._responses = list(responses)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        answer = self._responses.pop(0) if len(self._responses) > 1 else self._responses[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]


def ok(payload: Any = None, status: int = 200, **kwargs: Any) -> httpx.Response:
    if payload is None:
        return httpx.Response(status, **kwargs)
    return httpx.Response(status, json=payload, **kwargs)


def make_client(handler: Handler, *, token: TokenSource | None = None, **kwargs: Any) -> ApiClient:
    settings: dict[str, Any] = {
        "base_url": BASE,
        "project_id": "p-1",
        "cluster_id": "c-1",
        "token": token or TokenSource(value=TOKEN),
        "transport": httpx.MockTransport(handler),
    }
    settings.update(kwargs)
    return ApiClient(**settings)


def body_of(request: httpx.Request) -> Any:
    content = request.content
    if request.headers.get("Content-Encoding") == "gzip":
        content = gzip.decompress(content)
    return json.loads(content)


def record(i: int, **extra: Any) -> bytes:
    return json.dumps({"id": f"r-{i}", "kind": "deployment", **extra}).encode()


# -- headers --------------------------------------------------------------------------------


CALLS: dict[str, Callable[[ApiClient], Any]] = {
    "post_records": lambda c: c.post_records("b-1", [record(1)]),
    "post_events": lambda c: c.post_events("b-1", [record(1)]),
    "heartbeat": lambda c: c.heartbeat({"provider": "gke"}),
    "get_templates": lambda c: c.get_templates(),
    "get_actions": lambda c: c.get_actions("t-1"),
}


@pytest.mark.parametrize("call", CALLS)
def test_every_request_carries_both_token_headers_the_user_agent_and_accept(call: str) -> None:
    recorder = Recorder(ok({"templates": [], "actions": []}))
    with make_client(recorder) as client:
        CALLS[call](client)
    headers = recorder.last.headers
    assert headers["X-Cluster-Token"] == TOKEN
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["User-Agent"] == f"moonin-agent/{VERSION}"
    assert headers["Accept"] == "application/json"


@pytest.mark.parametrize("call", ["post_records", "post_events", "heartbeat"])
def test_posts_are_json(call: str) -> None:
    recorder = Recorder(ok({}))
    with make_client(recorder) as client:
        CALLS[call](client)
    assert recorder.last.method == "POST"
    assert recorder.last.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("call", ["get_templates", "get_actions"])
def test_gets_send_no_body_and_no_idempotency_key(call: str) -> None:
    recorder = Recorder(ok({"templates": [], "actions": []}))
    with make_client(recorder) as client:
        CALLS[call](client)
    assert recorder.last.method == "GET"
    assert recorder.last.content == b""
    assert "Idempotency-Key" not in recorder.last.headers


@pytest.mark.parametrize("method", ["post_records", "post_events"])
def test_the_idempotency_key_is_the_batch_id_on_every_retry_of_a_batch(method: str) -> None:
    recorder = Recorder(ok(status=503), httpx.ConnectError("refused"), ok(status=200))
    with make_client(recorder) as client:
        post = getattr(client, method)
        for _ in range(2):
            with pytest.raises(RetryLater):
                post("01JBATCH", [record(1)])
        post("01JBATCH", [record(1)])
    assert [r.headers["Idempotency-Key"] for r in recorder.requests] == ["01JBATCH"] * 3


def test_each_heartbeat_has_its_own_idempotency_key() -> None:
    recorder = Recorder(ok({}))
    with make_client(recorder) as client:
        client.heartbeat({})
        client.heartbeat({})
    keys = [r.headers["Idempotency-Key"] for r in recorder.requests]
    assert all(keys) and keys[0] != keys[1]


# -- bodies and gzip ------------------------------------------------------------------------


def test_a_records_body_splices_the_records_verbatim_into_valid_json() -> None:
    records = [
        record(1, name="web", data={"q": 'say "hi"\n', "u": "ñandú ✓"}),
        b'{"id":"r-2","kind":"namespace","data":{}}',
        record(3, namespace=None),
    ]
    recorder = Recorder(ok(status=202))
    with make_client(recorder, project_id='p-"1"\\') as client:
        client.post_records("01JBATCH", records)
    request = recorder.last
    raw = gzip.decompress(request.content) if "Content-Encoding" in request.headers else None
    raw = raw or request.content
    for one in records:
        assert one in raw
    body = json.loads(raw)
    assert list(body) == [
        "project_id",
        "cluster_id",
        "batch_id",
        "sent_at",
        "agent_version",
        "records",
    ]
    assert body["project_id"] == 'p-"1"\\'
    assert body["cluster_id"] == "c-1"
    assert body["batch_id"] == "01JBATCH"
    assert body["agent_version"] == VERSION
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", body["sent_at"])
    sent_at = datetime.fromisoformat(body["sent_at"].replace("Z", "+00:00"))
    assert abs(datetime.now(UTC) - sent_at) < timedelta(seconds=5)
    assert body["records"] == [json.loads(one) for one in records]
    assert request.url == f"{CLUSTER_URL}/records"


def test_an_events_body_has_only_project_cluster_and_events() -> None:
    events = [record(1, type="apply"), record(2, type="revert")]
    recorder = Recorder(ok(status=200))
    with make_client(recorder) as client:
        client.post_events("01JB", events)
    assert body_of(recorder.last) == {
        "project_id": "p-1",
        "cluster_id": "c-1",
        "events": [json.loads(e) for e in events],
    }
    assert recorder.last.url == f"{CLUSTER_URL}/events"


def test_an_empty_batch_is_still_valid_json() -> None:
    recorder = Recorder(ok(status=200))
    with make_client(recorder) as client:
        client.post_events("01JB", [])
    assert body_of(recorder.last)["events"] == []


def test_a_heartbeat_body_carries_the_metadata() -> None:
    metadata = {"provider": "gke", "region": "europe-west1", "node_count": 12, "leader": None}
    recorder = Recorder(ok({}))
    with make_client(recorder) as client:
        client.heartbeat(metadata)
    body = body_of(recorder.last)
    assert body.pop("sent_at").endswith("Z")
    assert body == {
        "project_id": "p-1",
        "cluster_id": "c-1",
        "agent_version": VERSION,
        "metadata": metadata,
    }
    assert recorder.last.url == f"{CLUSTER_URL}/heartbeat"


def _events_body_of_size(size: int) -> bytes:
    """One event padded so that the whole events body is exactly `size` bytes."""
    envelope = len(b'{"project_id":"p-1","cluster_id":"c-1","events":[]}')
    skeleton = len(b'{"pad":""}')
    return b'{"pad":"' + b"x" * (size - envelope - skeleton) + b'"}'


@pytest.mark.parametrize(("size", "gzipped"), [(200, False), (1024, False), (1025, True)])
def test_only_bodies_larger_than_1_kib_are_gzipped(size: int, gzipped: bool) -> None:
    event = _events_body_of_size(size)
    recorder = Recorder(ok(status=200))
    with make_client(recorder) as client:
        client.post_events("01JB", [event])
    request = recorder.last
    assert ("Content-Encoding" in request.headers) is gzipped
    raw = gzip.decompress(request.content) if gzipped else request.content
    assert len(raw) == size
    assert body_of(request)["events"] == [json.loads(event)]
    if gzipped:
        assert request.headers["Content-Encoding"] == "gzip"
        assert len(request.content) < size
        assert int(request.headers["Content-Length"]) == len(request.content)


def test_a_large_records_batch_is_gzipped_and_decompresses_to_the_expected_json() -> None:
    records = [
        record(i, data={"image": "nginx:1.25", "labels": {"app": f"web-{i}"}}) for i in range(200)
    ]
    recorder = Recorder(ok(status=200))
    with make_client(recorder) as client:
        client.post_records("01JB", records)
    request = recorder.last
    assert request.headers["Content-Encoding"] == "gzip"
    assert body_of(request)["records"] == [json.loads(r) for r in records]


# -- status classes -------------------------------------------------------------------------


STATUS_TABLE: list[tuple[int, type[MooninAPIError] | None]] = [
    (200, None),
    (201, None),
    (204, None),
    (409, None),
    (400, RejectedBody),
    (413, RejectedBody),
    (422, RejectedBody),
    (401, CredentialsRejected),
    (403, CredentialsRejected),
    (404, Misconfigured),
    (405, Misconfigured),
    (418, Misconfigured),
    (408, RetryLater),
    (429, RetryLater),
    (500, RetryLater),
    (503, RetryLater),
]


@pytest.mark.parametrize(("status", "expected"), STATUS_TABLE)
def test_each_status_maps_to_its_class_in_the_contract(
    status: int, expected: type[MooninAPIError] | None
) -> None:
    recorder = Recorder(httpx.Response(status, text="" if status == 204 else "nope"))
    with make_client(recorder) as client:
        if expected is None:
            client.post_records("01JB", [record(1)])
            return
        with pytest.raises(expected) as caught:
            client.post_records("01JB", [record(1)])
    error = caught.value
    assert type(error) is expected
    assert error.status == status
    assert error.body == "nope"
    assert f"POST {CLUSTER_URL}/records answered {status}" in str(error)


def test_credentials_and_configuration_errors_pause_the_stream() -> None:
    assert issubclass(CredentialsRejected, StreamPaused)
    assert issubclass(Misconfigured, StreamPaused)


def test_a_409_on_a_get_is_a_configuration_error_not_a_delivery() -> None:
    with make_client(Recorder(ok(status=409))) as client, pytest.raises(Misconfigured):
        client.get_templates()


def test_a_409_on_a_heartbeat_counts_as_delivered() -> None:
    with make_client(Recorder(httpx.Response(409, text="seen"))) as client:
        assert client.heartbeat({}) == {}


def test_a_redirect_is_not_followed_and_is_a_configuration_error() -> None:
    recorder = Recorder(httpx.Response(301, headers={"Location": "https://elsewhere.test/"}))
    with make_client(recorder) as client, pytest.raises(Misconfigured) as caught:
        client.post_records("01JB", [record(1)])
    assert len(recorder.requests) == 1
    assert "elsewhere.test" in str(caught.value)


def test_an_undecodable_error_body_does_not_hide_the_status() -> None:
    answer = httpx.Response(
        401, stream=httpx.ByteStream(b"not gzip"), headers={"Content-Encoding": "gzip"}
    )
    with make_client(Recorder(answer)) as client, pytest.raises(CredentialsRejected) as caught:
        client.get_templates()
    assert caught.value.body == "(unreadable body)"


def test_an_error_body_is_cut_short() -> None:
    recorder = Recorder(httpx.Response(500, text="é" * 100_000))
    with make_client(recorder) as client, pytest.raises(RetryLater) as caught:
        client.post_records("01JB", [record(1)])
    assert caught.value.body == "é" * 500


# -- Retry-After ----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 429, 503])
def test_retry_after_in_seconds_reaches_the_caller(status: int) -> None:
    recorder = Recorder(httpx.Response(status, headers={"Retry-After": "120"}))
    with make_client(recorder) as client, pytest.raises(RetryLater) as caught:
        client.post_events("01JB", [record(1)])
    assert caught.value.retry_after == 120.0


def test_retry_after_as_an_http_date_becomes_seconds_from_now() -> None:
    later = datetime.now(UTC) + timedelta(seconds=90)
    header = format_datetime(later, usegmt=True)
    recorder = Recorder(httpx.Response(429, headers={"Retry-After": header}))
    with make_client(recorder) as client, pytest.raises(RetryLater) as caught:
        client.post_records("01JB", [record(1)])
    assert caught.value.retry_after is not None
    assert 85 <= caught.value.retry_after <= 90


def test_no_retry_after_header_means_none() -> None:
    with make_client(Recorder(ok(status=502))) as client, pytest.raises(RetryLater) as caught:
        client.get_templates()
    assert caught.value.retry_after is None


# -- transport errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("connection refused"),
        httpx.ConnectTimeout("timed out"),
        httpx.ReadTimeout("timed out"),
        httpx.WriteTimeout("timed out"),
        httpx.PoolTimeout("timed out"),
        httpx.ReadError("connection reset"),
        httpx.RemoteProtocolError("server disconnected without sending a response"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_transport_errors_are_retried_later_without_a_status(error: Exception) -> None:
    with make_client(Recorder(error)) as client, pytest.raises(RetryLater) as caught:
        client.post_records("01JB", [record(1)])
    assert caught.value.status is None
    assert caught.value.retry_after is None
    assert caught.value.__cause__ is error
    assert f"POST {CLUSTER_URL}/records failed: {type(error).__name__}" in str(caught.value)


def test_a_real_refused_connection_is_retried_later() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = ApiClient(
        base_url=f"http://127.0.0.1:{port}",
        project_id="p-1",
        cluster_id="c-1",
        token=TokenSource(value=TOKEN),
        settings=ApiSettings(insecure_http=True, read_timeout_seconds=5),
    )
    with client, pytest.raises(RetryLater) as caught:
        client.heartbeat({})
    assert caught.value.status is None
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_a_certificate_verification_failure_is_a_configuration_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        try:
            raise ssl.SSLCertVerificationError(1, "certificate verify failed")
        except ssl.SSLError as e:
            raise httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED]") from e

    with make_client(handler) as client, pytest.raises(Misconfigured) as caught:
        client.get_templates()
    message = str(caught.value)
    assert f"{CLUSTER_URL}/templates" in message
    assert "certificate could not be verified" in message
    assert "CA bundle" in message
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


# -- answers --------------------------------------------------------------------------------


def test_heartbeat_returns_the_resync_request() -> None:
    with make_client(Recorder(ok({"resync": True}))) as client:
        assert client.heartbeat({}) == {"resync": True}


@pytest.mark.parametrize("status", [200, 202, 204])
def test_heartbeat_with_an_empty_answer_returns_an_empty_dict(status: int) -> None:
    with make_client(Recorder(httpx.Response(status))) as client:
        assert client.heartbeat({}) == {}


def test_templates_are_returned_as_sent() -> None:
    template = {
        "id": "t-1",
        "name": "black friday",
        "enabled": True,
        "valid_until": None,
        "timezone": "America/Santiago",
        "cron": "0 8 * * 1-5",
        "duration_minutes": 600,
        "execution": None,
    }
    recorder = Recorder(ok({"templates": [template], "unknown": 1}))
    with make_client(recorder) as client:
        assert client.get_templates() == [template]
    assert recorder.last.url == f"{CLUSTER_URL}/templates"


def test_actions_are_returned_as_sent_and_the_template_id_is_quoted() -> None:
    action = {"id": "a-1", "namespace": "shop", "deployment": "web", "min_replicas": 4}
    recorder = Recorder(ok({"actions": [action]}))
    with make_client(recorder) as client:
        assert client.get_actions("t 1/x") == [action]
    assert recorder.last.url.raw_path == b"/v1/clusters/c-1/templates/t%201%2Fx/actions"


MALFORMED = [
    b"<html>gateway</html>",
    b"",
    b"[]",
    b'{"templates": {"t-1": {}}}',
    b'{"templates": null}',
    b'{"actions": []}',
]


@pytest.mark.parametrize("content", MALFORMED)
def test_a_malformed_templates_answer_is_retried_later(content: bytes) -> None:
    with (
        make_client(Recorder(httpx.Response(200, content=content))) as client,
        pytest.raises(RetryLater) as caught,
    ):
        client.get_templates()
    assert str(caught.value).startswith(f"malformed answer from {CLUSTER_URL}/templates")


@pytest.mark.parametrize("content", [b"{", b'{"actions": 3}', b'{"actions": {}}', b"null"])
def test_a_malformed_actions_answer_is_retried_later(content: bytes) -> None:
    with (
        make_client(Recorder(httpx.Response(200, content=content))) as client,
        pytest.raises(RetryLater, match="malformed answer from"),
    ):
        client.get_actions("t-1")


def test_list_elements_are_passed_on_as_sent_for_the_scheduler_to_judge_one_by_one() -> None:
    # One element that is not an object must not hide the others (and their error events).
    templates = b'{"templates": ["t-1", null, {"id": "t-2"}]}'
    with make_client(Recorder(httpx.Response(200, content=templates))) as client:
        assert client.get_templates() == ["t-1", None, {"id": "t-2"}]
    actions = b'{"actions": [1, {"id": "a-1"}]}'
    with make_client(Recorder(httpx.Response(200, content=actions))) as client:
        assert client.get_actions("t-1") == [1, {"id": "a-1"}]


@pytest.mark.parametrize("content", [b"not json", b"[1, 2]", b'"resync"'])
def test_a_malformed_heartbeat_answer_is_retried_later(content: bytes) -> None:
    with (
        make_client(Recorder(httpx.Response(200, content=content))) as client,
        pytest.raises(RetryLater, match="malformed answer from"),
    ):
        client.heartbeat({})


# -- the token stays secret -----------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(401, text=f"token {TOKEN} is not valid"),
        httpx.Response(500, text=f"boom {TOKEN}"),
        httpx.Response(200, text=f"<p>{TOKEN}</p>"),
        httpx.ConnectError(f"proxy said no to {TOKEN}"),
    ],
    ids=["401", "500", "malformed", "transport"],
)
def test_the_token_never_appears_in_an_error(answer: httpx.Response | Exception) -> None:
    with make_client(Recorder(answer)) as client, pytest.raises(MooninAPIError) as caught:
        client.get_templates()
    error = caught.value
    for text in (str(error), repr(error), error.body, repr(error.args)):
        assert TOKEN not in text
    assert "[redacted]" in str(error) + error.body


def test_an_old_token_is_redacted_after_rotation(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text("old-token-1-5e0c9a\n")
    token = TokenSource(file=str(file))
    file.write_text("new-token-2-5e0c9a\n")
    assert token.reload()
    answer = httpx.Response(403, text="old-token-1-5e0c9a and new-token-2-5e0c9a are both wrong")
    with (
        make_client(Recorder(answer), token=token) as client,
        pytest.raises(CredentialsRejected) as caught,
    ):
        client.post_records("01JB", [record(1)])
    assert "token" not in caught.value.body.replace("[redacted]", "")


LONG_TOKEN = "tok-" + "0123456789abcdef" * 4


@pytest.mark.parametrize("status", [403, 200])
@pytest.mark.parametrize(
    "body",
    [
        # ASCII: the token straddles the 500 characters kept.
        "x" * 490 + LONG_TOKEN + " is wrong",
        # Four-byte characters: the 2,000 bytes read end inside the token, and 10 of its
        # characters would still be within the 500 kept.
        "\U0001f600" * 490 + LONG_TOKEN + " is wrong",
    ],
    ids=["cut at 500 characters", "read stops at 2,000 bytes"],
)
def test_no_part_of_the_token_survives_where_the_kept_body_is_cut(status: int, body: str) -> None:
    # An error body, or a 2xx that does not decode: both keep the start of the body.
    answer = httpx.Response(status, content=body.encode())
    token = TokenSource(value=LONG_TOKEN)
    with (
        make_client(Recorder(answer), token=token) as client,
        pytest.raises(MooninAPIError) as caught,
    ):
        client.get_templates()
    kept = caught.value.body
    assert kept.startswith(body[:490]) and len(kept) <= 500
    for size in range(4, len(LONG_TOKEN) + 1):
        assert LONG_TOKEN[:size] not in kept, size


def test_the_token_source_repr_hides_the_token() -> None:
    assert TOKEN not in repr(TokenSource(value=TOKEN))


# -- URL rules ------------------------------------------------------------------------------


def test_plain_http_is_refused_without_the_switch() -> None:
    with pytest.raises(InsecureURLError) as caught:
        make_client(Recorder(ok({})), base_url="http://moonin.test")
    message = str(caught.value)
    assert "http://moonin.test" in message
    assert "MOONIN_INSECURE_HTTP=true" in message
    assert isinstance(caught.value, ValueError)


def test_plain_http_is_allowed_with_the_switch() -> None:
    recorder = Recorder(ok({}))
    with make_client(
        recorder, base_url="http://moonin.test", settings=ApiSettings(insecure_http=True)
    ) as client:
        client.heartbeat({})
    assert recorder.last.url == "http://moonin.test/v1/clusters/c-1/heartbeat"


@pytest.mark.parametrize("url", ["ftp://moonin.test", "moonin.test", "ws://moonin.test", ""])
def test_other_schemes_are_refused(url: str) -> None:
    with pytest.raises(InsecureURLError, match="https://"):
        make_client(Recorder(ok({})), base_url=url, settings=ApiSettings(insecure_http=True))


@pytest.mark.parametrize(
    "url",
    [
        "https://",
        "https://moonin.test/?a=1",
        "https://moonin.test/#top",
        "https://h:port/",
        "https://[::1",
        "https://moonin test/",
    ],
)
def test_unusable_https_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="API_URL"):
        make_client(Recorder(ok({})), base_url=url)


@pytest.mark.parametrize("url", ["https://user:s3cr3t@moonin.test", "ftp://user:s3cr3t@h"])
def test_credentials_in_the_url_are_refused_without_repeating_them(url: str) -> None:
    with pytest.raises(ValueError, match="must not contain credentials") as caught:
        make_client(Recorder(ok({})), base_url=url)
    assert "s3cr3t" not in str(caught.value)


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("https://moonin.test", "https://moonin.test/v1/clusters/c-1/templates"),
        ("https://moonin.test/", "https://moonin.test/v1/clusters/c-1/templates"),
        ("HTTPS://moonin.test:8443/api/", "https://moonin.test:8443/api/v1/clusters/c-1/templates"),
    ],
)
def test_urls_are_built_under_the_base_url(base: str, expected: str) -> None:
    recorder = Recorder(ok({"templates": []}))
    with make_client(recorder, base_url=base) as client:
        client.get_templates()
    assert str(recorder.last.url) == expected


PATH_KEY = "k-8c1d55e0a9b34f27"


@pytest.mark.parametrize(
    "answer",
    [
        ok(status=503),
        ok(status=401),
        ok(status=302, headers={"Location": f"https://moonin.test/{PATH_KEY}?k={PATH_KEY}"}),
        ok(status=200, content=b"not json"),
        httpx.ConnectError(f"cannot reach https://moonin.test/gw/{PATH_KEY}/v1"),
    ],
    ids=["retry", "refused", "redirect", "malformed", "unreachable"],
)
def test_a_key_in_the_path_prefix_stays_out_of_every_message(
    answer: httpx.Response | Exception,
) -> None:
    # Retry lines repeat these messages every few seconds while the API is down.
    recorder = Recorder(answer)
    with (
        make_client(recorder, base_url=f"https://moonin.test/gw/{PATH_KEY}") as client,
        pytest.raises(MooninAPIError) as caught,
    ):
        client.get_templates()
    assert str(recorder.last.url) == f"https://moonin.test/gw/{PATH_KEY}/v1/clusters/c-1/templates"
    assert PATH_KEY not in str(caught.value)
    assert "https://moonin.test/***/v1/clusters/c-1/templates" in str(caught.value)


def test_an_unusable_url_is_refused_without_repeating_it() -> None:
    with pytest.raises(ValueError, match="API_URL") as caught:
        make_client(Recorder(ok({})), base_url=f"https://moonin.test/v1?apikey={PATH_KEY}")
    assert PATH_KEY not in str(caught.value)


@pytest.mark.parametrize(
    ("cluster_id", "raw_path"),
    [
        ("c/1", b"/v1/clusters/c%2F1/records"),
        ("c 1?", b"/v1/clusters/c%201%3F/records"),
        ("..", b"/v1/clusters/%2E%2E/records"),
    ],
)
def test_path_segments_are_quoted(cluster_id: str, raw_path: bytes) -> None:
    recorder = Recorder(ok({}))
    with make_client(recorder, cluster_id=cluster_id) as client:
        client.post_records("01JB", [])
    assert recorder.last.url.raw_path == raw_path
    assert body_of(recorder.last)["cluster_id"] == cluster_id


def test_a_missing_ca_bundle_is_refused_at_construction(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ValueError, match=r"CA bundle .* does not exist"):
        make_client(Recorder(ok({})), settings=ApiSettings(ca_bundle=str(missing)))


def test_a_ca_bundle_without_certificates_is_refused_at_construction(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(ValueError, match="no usable PEM certificate"):
        make_client(Recorder(ok({})), settings=ApiSettings(ca_bundle=str(bad)))
    with pytest.raises(ValueError, match="cannot be read"):
        make_client(Recorder(ok({})), settings=ApiSettings(ca_bundle=str(tmp_path)))


# -- token rotation -------------------------------------------------------------------------


def test_a_rotated_token_file_changes_the_headers_of_the_next_request(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text("first-token-7a2c4e\n")
    token = TokenSource(file=str(file))
    recorder = Recorder(ok(status=401), ok(status=200))
    with make_client(recorder, token=token) as client:
        with pytest.raises(CredentialsRejected):
            client.post_records("01JB", [record(1)])
        file.write_text("  second-token-7a2c4e \n")
        assert token.reload() is True
        client.post_records("01JB", [record(1)])
    first, second = recorder.requests
    assert first.headers["X-Cluster-Token"] == "first-token-7a2c4e"
    assert second.headers["X-Cluster-Token"] == "second-token-7a2c4e"
    assert second.headers["Authorization"] == "Bearer second-token-7a2c4e"
    assert token.secrets() == ("first-token-7a2c4e", "second-token-7a2c4e")


@pytest.mark.parametrize("refusal", [401, 403])
def test_a_refused_read_rereads_the_token_file_for_the_next_call(
    tmp_path: Path, refusal: int
) -> None:
    # A quiet scaling pod only reads templates: a rotated token must reach those too.
    file = tmp_path / "token"
    file.write_text("old-token-3b8d1f06\n")
    token = TokenSource(file=str(file))
    recorder = Recorder(ok(status=refusal), ok({"templates": []}))
    with make_client(recorder, token=token) as client:
        file.write_text("new-token-3b8d1f06\n")  # the Secret rotated
        with pytest.raises(CredentialsRejected):
            client.get_templates()
        assert client.get_templates() == []
    first, second = recorder.requests
    assert (first.headers["X-Cluster-Token"], second.headers["X-Cluster-Token"]) == (
        "old-token-3b8d1f06",
        "new-token-3b8d1f06",
    )


def test_reload_without_a_change_answers_false(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text("same-token-9c1e4b7a\n")
    token = TokenSource(file=str(file))
    assert token.reload() is False
    assert TokenSource(value="fixed-token-6d0b3a").reload() is False


@pytest.mark.parametrize(
    "damage", ["remove", "empty", "whitespace", "binary", "spaces-inside", "too-short"]
)
def test_a_missing_or_unusable_token_file_keeps_the_old_token(tmp_path: Path, damage: str) -> None:
    file = tmp_path / "token"
    file.write_text("good-token-4f6a2d9e")
    token = TokenSource(file=str(file))
    if damage == "remove":
        file.unlink()
    elif damage == "empty":
        file.write_text("")
    elif damage == "whitespace":
        file.write_text(" \n\n")
    elif damage == "binary":
        file.write_bytes(b"\xff\xfe\x00")
    elif damage == "too-short":
        file.write_text("short-token")  # a cut paste: the log redactor could not hide it
    else:
        file.write_text("two words")
    assert token.reload() is False
    assert token.current() == "good-token-4f6a2d9e"
    assert token.secrets() == ("good-token-4f6a2d9e",)


def test_the_token_value_is_stripped() -> None:
    assert TokenSource(value="  tok-3f9a1c7e5b2d\n").current() == "tok-3f9a1c7e5b2d"


def test_from_env_prefers_the_file_because_it_is_the_one_that_rotates(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text("from-file-token-8e2b\n")
    env = {"CLUSTER_TOKEN": "from-env-token-1f7c", "CLUSTER_TOKEN_FILE": str(file)}
    assert TokenSource.from_env(env).current() == "from-file-token-8e2b"
    assert (
        TokenSource.from_env({"CLUSTER_TOKEN": "from-env-token-1f7c"}).current()
        == "from-env-token-1f7c"
    )
    assert (
        TokenSource.from_env({"CLUSTER_TOKEN_FILE": str(file)}).current() == "from-file-token-8e2b"
    )


def test_from_env_falls_back_to_the_value_while_the_file_is_missing(tmp_path: Path) -> None:
    file = tmp_path / "token"
    token = TokenSource.from_env(
        {"CLUSTER_TOKEN": "from-env-token-1f7c", "CLUSTER_TOKEN_FILE": str(file)}
    )
    assert token.current() == "from-env-token-1f7c"
    file.write_text("from-file-token-8e2b")
    assert token.reload() is True
    assert token.current() == "from-file-token-8e2b"


@pytest.mark.parametrize(
    "env",
    [{}, {"CLUSTER_TOKEN": ""}, {"CLUSTER_TOKEN": "  \n"}, {"CLUSTER_TOKEN_FILE": ""}],
)
def test_no_token_is_a_clear_error(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"^CLUSTER_TOKEN or CLUSTER_TOKEN_FILE must be set$"):
        TokenSource.from_env(env)


def test_an_empty_token_file_is_a_clear_error(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text("\n")
    with pytest.raises(ValueError, match="CLUSTER_TOKEN or CLUSTER_TOKEN_FILE must be set") as e:
        TokenSource.from_env({"CLUSTER_TOKEN_FILE": str(file)})
    assert str(file) in str(e.value)


def test_a_token_that_cannot_be_a_header_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError, match="cannot be sent in an HTTP header") as caught:
        TokenSource(value="sëcret-3f9a1c7e5b2d")
    assert "sëcret" not in str(caught.value)


def test_a_token_too_short_to_be_told_from_ordinary_text_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError, match="has length 11") as caught:
        TokenSource(value="short-token")
    assert "short-token" not in str(caught.value)


def test_the_token_source_is_safe_to_share_between_threads(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text("token-rotation-00")
    token = TokenSource(file=str(file))
    seen: set[str] = set()

    def read() -> None:
        for _ in range(2000):
            seen.add(token.current())

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    for i in range(1, 50):
        file.write_text(f"token-rotation-{i:02d}")
        token.reload()
    for reader in readers:
        reader.join()
    assert seen <= set(token.secrets())
    assert token.current() == "token-rotation-49"


# -- proxies from the environment -----------------------------------------------------------


class _ProxyLog(BaseHTTPRequestHandler):
    """Answers every request itself and remembers its request line (absolute form = proxied)."""

    lines: list[str]

    def _answer(self) -> None:
        self.lines.append(self.requestline)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        payload = b'{"templates": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def do_CONNECT(self) -> None:
        self.lines.append(self.requestline)
        self.send_response(502)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    lines: list[str] = []
    handler = type("Handler", (_ProxyLog,), {"lines": lines})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", lines
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _real_client(base_url: str) -> ApiClient:
    return ApiClient(
        base_url=base_url,
        project_id="p-1",
        cluster_id="c-1",
        token=TokenSource(value=TOKEN),
        settings=ApiSettings(insecure_http=True, read_timeout_seconds=5),
    )


def test_http_proxy_from_the_environment_is_used(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy_url, lines = proxy
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    with _real_client("http://example.invalid") as client:
        assert client.get_templates() == []
    assert lines == ["GET http://example.invalid/v1/clusters/c-1/templates HTTP/1.1"]


def test_https_proxy_from_the_environment_is_used_for_https(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy_url, lines = proxy
    monkeypatch.setenv("HTTPS_PROXY", proxy_url)
    with _real_client("https://example.invalid") as client, pytest.raises(RetryLater):
        client.get_templates()  # the test proxy refuses the tunnel
    assert lines == ["CONNECT example.invalid:443 HTTP/1.1"]


def test_no_proxy_matching_the_host_bypasses_the_proxy(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy_url, lines = proxy
    port = proxy_url.rsplit(":", 1)[1]
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    # The same server is the origin here: a direct request arrives in origin form.
    with _real_client(f"http://localhost:{port}") as client:
        client.get_templates()
    monkeypatch.setenv("NO_PROXY", "localhost")
    with _real_client(f"http://localhost:{port}") as client:
        client.get_templates()
    assert lines == [
        f"GET http://localhost:{port}/v1/clusters/c-1/templates HTTP/1.1",
        "GET /v1/clusters/c-1/templates HTTP/1.1",
    ]


def test_a_ca_bundle_keeps_the_environment_proxies(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trustme = pytest.importorskip("trustme")
    bundle = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(bundle))
    proxy_url, lines = proxy
    monkeypatch.setenv("HTTPS_PROXY", proxy_url)
    client = ApiClient(
        base_url="https://example.invalid",
        project_id="p-1",
        cluster_id="c-1",
        token=TokenSource(value=TOKEN),
        settings=ApiSettings(ca_bundle=str(bundle), read_timeout_seconds=5),
    )
    with client, pytest.raises(RetryLater):
        client.get_templates()
    assert lines == ["CONNECT example.invalid:443 HTTP/1.1"]
