"""The fake Moonin platform must behave like the contract, or every delivery test built on it
proves nothing. These tests talk to it over real sockets with a plain httpx client."""

from __future__ import annotations

import gzip
import itertools
import json
import re
import socket
import ssl
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from sandbox.platform import (
    Delay,
    Drip,
    Drop,
    FakePlatform,
    GzipBomb,
    HugeBody,
    Redirect,
    Status,
)
from sandbox.tls import TLSAuthority
from tests.waiting import wait_until

TOKEN = "test-token"
AUTH = {"X-Cluster-Token": TOKEN, "Authorization": f"Bearer {TOKEN}"}
RECORDS = "/v1/clusters/c-1/records"
EVENTS = "/v1/clusters/c-1/events"
HEARTBEAT = "/v1/clusters/c-1/heartbeat"
TEMPLATES = "/v1/clusters/c-1/templates"
PROJECT_ROOT = Path(__file__).resolve().parents[2]

_ids = itertools.count()


def at(second: int) -> str:
    return f"2026-12-02T12:00:{second:02d}Z"


def record(
    key: str, second: int, *, op: str = "upsert", kind: str = "deployment", **extra: Any
) -> dict[str, Any]:
    return {
        "id": f"r-{next(_ids)}",
        "kind": kind,
        "op": op,
        "key": key,
        "observed_at": at(second),
        "data": {},
        **extra,
    }


def snapshot_part(
    of: str, part: int, parts: int, keys: list[str], listed_second: int
) -> dict[str, Any]:
    data = {
        "of": of,
        "snapshot_id": "snap-1",
        "part": part,
        "parts": parts,
        "keys": keys,
        "resource_version": "100",
        "listed_at": at(listed_second),
    }
    return record(f"snap-1/{part}", listed_second, op="event", kind="snapshot", data=data)


def records_body(*records: dict[str, Any]) -> dict[str, Any]:
    return {
        "project_id": "p-1",
        "cluster_id": "c-1",
        "batch_id": f"b-{next(_ids)}",
        "sent_at": at(59),
        "agent_version": "0.1.0",
        "records": list(records),
    }


def event(event_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": event_id,
        "type": "apply",
        "template_id": "t-1",
        "occurred_at": at(0),
        **extra,
    }


def post_json(
    client: httpx.Client, path: str, body: Any, *, key: str | None = None, zipped: bool = False
) -> httpx.Response:
    headers = {"Idempotency-Key": key or f"k-{next(_ids)}", "Content-Type": "application/json"}
    content = json.dumps(body).encode()
    if zipped:
        content = gzip.compress(content)
        headers["Content-Encoding"] = "gzip"
    return client.post(path, content=content, headers=headers)


def post_records(client: httpx.Client, *records: dict[str, Any], **kwargs: Any) -> httpx.Response:
    return post_json(client, RECORDS, records_body(*records), **kwargs)


def post_events(client: httpx.Client, *events: dict[str, Any], **kwargs: Any) -> httpx.Response:
    body = {"project_id": "p-1", "cluster_id": "c-1", "events": list(events)}
    return post_json(client, EVENTS, body, **kwargs)


def view_keys(platform: FakePlatform) -> set[tuple[str, str]]:
    return set(platform.view())


@pytest.fixture(scope="module")
def shared_platform() -> Iterator[FakePlatform]:
    with FakePlatform(token=TOKEN) as platform:
        yield platform


@pytest.fixture
def platform(shared_platform: FakePlatform) -> FakePlatform:
    shared_platform.up()  # in case a test took it down and failed before bringing it back
    shared_platform.reset()
    return shared_platform


@pytest.fixture(scope="module")
def shared_client(shared_platform: FakePlatform) -> Iterator[httpx.Client]:
    # One client for the module: building one loads the system CA store, ~50 ms each.
    with httpx.Client(base_url=shared_platform.url, headers=AUTH, timeout=5) as client:
        yield client


@pytest.fixture
def client(platform: FakePlatform, shared_client: httpx.Client) -> httpx.Client:
    return shared_client


# --- auth and addressing -----------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Cluster-Token": "wrong", "Authorization": "Bearer wrong"},
        {"X-Cluster-Token": TOKEN},
        {"Authorization": f"Bearer {TOKEN}"},
        {"X-Cluster-Token": TOKEN, "Authorization": TOKEN},
        {"X-Cluster-Token": TOKEN, "Authorization": "Bearer wrong"},
    ],
    ids=["none", "wrong", "no-bearer", "no-cluster-token", "not-bearer", "mismatch"],
)
def test_a_request_without_both_token_headers_is_unauthorized(
    platform: FakePlatform, headers: dict[str, str]
) -> None:
    with httpx.Client(base_url=platform.url, headers=headers) as anonymous:
        assert anonymous.get(TEMPLATES).status_code == 401
        assert post_records(anonymous, record("shop/web", 1)).status_code == 401
    assert platform.view() == {}


def test_a_rotated_token_replaces_the_old_one(platform: FakePlatform, client: httpx.Client) -> None:
    platform.token = "rotated"
    assert client.get(TEMPLATES).status_code == 401
    rotated = {"X-Cluster-Token": "rotated", "Authorization": "Bearer rotated"}
    assert client.get(TEMPLATES, headers=rotated).status_code == 200


def test_a_wrong_cluster_id_is_not_found(platform: FakePlatform, client: httpx.Client) -> None:
    assert client.get("/v1/clusters/c-2/templates").status_code == 404
    body = records_body(record("shop/web", 1))
    assert post_json(client, "/v1/clusters/c-2/records", body).status_code == 404
    assert platform.view() == {}


def test_unknown_paths_are_not_found_and_wrong_methods_not_allowed(client: httpx.Client) -> None:
    assert client.get("/v1/clusters/c-1/nothing").status_code == 404
    assert client.get("/").status_code == 404
    assert client.get(RECORDS).status_code == 405
    assert client.post(TEMPLATES, content=b"{}").status_code == 405


def test_a_body_for_another_project_or_cluster_is_rejected(client: httpx.Client) -> None:
    body = records_body(record("shop/web", 1))
    assert post_json(client, RECORDS, {**body, "project_id": "p-2"}).status_code == 400
    assert post_json(client, RECORDS, {**body, "cluster_id": "c-2"}).status_code == 400


# --- body validation ---------------------------------------------------------------------


def _without(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != name}


GOOD = record("shop/web", 1)
MALFORMED_BODIES: dict[str, bytes] = {
    "not-json": b"{nope",
    "a-list": b"[]",
    "no-batch-id": json.dumps(_without(records_body(GOOD), "batch_id")).encode(),
    "records-not-a-list": json.dumps({**records_body(), "records": {}}).encode(),
    "record-not-an-object": json.dumps(records_body("x")).encode(),  # type: ignore[arg-type]
    "no-id": json.dumps(records_body(_without(GOOD, "id"))).encode(),
    "no-key": json.dumps(records_body(_without(GOOD, "key"))).encode(),
    "bad-op": json.dumps(records_body({**GOOD, "op": "patch"})).encode(),
    "no-observed-at": json.dumps(records_body(_without(GOOD, "observed_at"))).encode(),
    "observed-at-not-utc": json.dumps(
        records_body({**GOOD, "observed_at": "2026-12-02T12:00:00+01:00"})
    ).encode(),
    "empty-namespace": json.dumps(records_body({**GOOD, "namespace": ""})).encode(),
    "snapshot-without-listed-at": json.dumps(
        records_body(
            {**snapshot_part("deployment", 1, 1, [], 5), "data": {"of": "deployment", "parts": 1}}
        )
    ).encode(),
    "snapshot-part-past-parts": json.dumps(
        records_body(snapshot_part("deployment", 3, 2, [], 5))
    ).encode(),
}


@pytest.mark.parametrize("content", MALFORMED_BODIES.values(), ids=MALFORMED_BODIES.keys())
def test_a_malformed_records_body_is_400_with_a_json_error(
    platform: FakePlatform, client: httpx.Client, content: bytes
) -> None:
    response = client.post(RECORDS, content=content, headers={"Idempotency-Key": "k"})
    assert response.status_code == 400
    assert response.json()["error"]
    assert platform.received_records() == []


def test_a_corrupt_gzip_body_is_400_and_an_unknown_encoding_415(client: httpx.Client) -> None:
    corrupt = client.post(RECORDS, content=b"\x1f\x8bnope", headers={"Content-Encoding": "gzip"})
    assert corrupt.status_code == 400
    brotli = client.post(RECORDS, content=b"{}", headers={"Content-Encoding": "br"})
    assert brotli.status_code == 415


def test_gzip_and_plain_bodies_are_both_accepted_and_recorded(
    platform: FakePlatform, client: httpx.Client
) -> None:
    assert post_records(client, record("shop/a", 1), zipped=True).status_code == 200
    assert post_records(client, record("shop/b", 1)).status_code == 200
    assert view_keys(platform) == {("deployment", "shop/a"), ("deployment", "shop/b")}
    zipped, plain = platform.requests
    assert zipped.raw_body[:2] == b"\x1f\x8b"
    assert zipped.body == gzip.decompress(zipped.raw_body)
    assert zipped.json()["records"][0]["key"] == "shop/a"
    assert zipped.headers["content-encoding"] == "gzip"
    assert plain.raw_body == plain.body
    assert (plain.method, plain.path, plain.route, plain.status) == (
        "POST",
        RECORDS,
        "records",
        200,
    )
    assert plain.headers["x-cluster-token"] == TOKEN


def test_a_chunked_body_is_read_whole(platform: FakePlatform, client: httpx.Client) -> None:
    content = json.dumps(records_body(record("shop/web", 1))).encode()
    pieces = iter([content[:10], content[10:]])  # an iterator makes httpx send it chunked
    response = client.post(RECORDS, content=pieces)
    assert response.status_code == 200
    assert platform.requests[0].headers["transfer-encoding"] == "chunked"
    assert view_keys(platform) == {("deployment", "shop/web")}


# --- the platform view -------------------------------------------------------------------


def test_the_latest_observed_upsert_wins_regardless_of_arrival_order(
    platform: FakePlatform, client: httpx.Client
) -> None:
    newer = record("shop/web", 20, data={"replicas": 2})
    older = record("shop/web", 10, data={"replicas": 1})
    post_records(client, newer)
    post_records(client, older)
    assert platform.view()[("deployment", "shop/web")]["data"] == {"replicas": 2}
    newest = record("shop/web", 30, data={"replicas": 3})
    post_records(client, newest)
    assert platform.view()[("deployment", "shop/web")]["data"] == {"replicas": 3}


def test_timestamps_compare_as_times_not_as_text(
    platform: FakePlatform, client: httpx.Client
) -> None:
    # As text "12:00:10.500Z" sorts before "12:00:10Z"; as a time it is later.
    post_records(client, record("shop/web", 10, data={"v": "whole"}))
    post_records(client, {**record("shop/web", 10), "observed_at": at(10)[:-1] + ".500Z"})
    assert platform.view()[("deployment", "shop/web")]["observed_at"].endswith(".500Z")


def test_a_later_delete_removes_the_upsert(platform: FakePlatform, client: httpx.Client) -> None:
    post_records(client, record("shop/web", 10), record("shop/api", 10))
    post_records(client, record("shop/web", 11, op="delete"))
    assert view_keys(platform) == {("deployment", "shop/api")}


def test_an_earlier_delete_leaves_a_newer_upsert(
    platform: FakePlatform, client: httpx.Client
) -> None:
    post_records(client, record("shop/web", 20))
    post_records(client, record("shop/web", 10, op="delete"))
    assert view_keys(platform) == {("deployment", "shop/web")}


def test_an_older_upsert_after_a_delete_does_not_resurrect_it(
    platform: FakePlatform, client: httpx.Client
) -> None:
    post_records(client, record("shop/web", 10))
    post_records(client, record("shop/web", 20, op="delete"))
    post_records(client, record("shop/web", 15))
    assert platform.view() == {}
    post_records(client, record("shop/web", 25))  # re-created after the delete
    assert view_keys(platform) == {("deployment", "shop/web")}


def test_a_delete_and_an_upsert_in_the_same_second_go_to_the_later_arrival(
    platform: FakePlatform, client: httpx.Client
) -> None:
    post_records(client, record("shop/web", 10), record("shop/web", 10, op="delete"))
    assert platform.view() == {}
    post_records(client, record("shop/web", 10))
    assert view_keys(platform) == {("deployment", "shop/web")}


def test_the_same_key_of_different_kinds_are_different_objects(
    platform: FakePlatform, client: httpx.Client
) -> None:
    post_records(client, record("shop/web", 10), record("shop/web", 10, kind="service"))
    post_records(client, record("shop/web", 11, op="delete", kind="service"))
    assert view_keys(platform) == {("deployment", "shop/web")}


def test_a_snapshot_forgets_absent_keys_only_after_all_parts_and_only_if_observed_earlier(
    platform: FakePlatform, client: httpx.Client
) -> None:
    post_records(
        client,
        record("shop/kept-1", 10),
        record("shop/kept-2", 10),
        record("shop/gone", 10),
        record("shop/newer", 30),  # created after the list: not in it, but must stay
        record("shop/gone", 10, kind="service"),  # another kind: untouched
    )
    post_records(client, snapshot_part("deployment", 2, 2, ["shop/kept-2"], 20))
    assert len(platform.view()) == 5, "nothing is forgotten before every part arrived"

    post_records(client, snapshot_part("deployment", 1, 2, ["shop/kept-1"], 20))
    assert view_keys(platform) == {
        ("deployment", "shop/kept-1"),
        ("deployment", "shop/kept-2"),
        ("deployment", "shop/newer"),
        ("service", "shop/gone"),
    }

    post_records(client, record("shop/gone", 15))  # a late retry from before the list
    assert ("deployment", "shop/gone") not in platform.view()


def test_snapshot_records_are_received_but_are_not_objects(
    platform: FakePlatform, client: httpx.Client
) -> None:
    post_records(client, snapshot_part("deployment", 1, 1, [], 20))
    post_records(client, record("ns/pod/c/CrashLoopBackOff/3", 5, op="event", kind="pod_error"))
    assert platform.view() == {}
    assert [r["kind"] for r in platform.received_records()] == ["snapshot", "pod_error"]


def test_every_received_record_is_kept_in_arrival_order_with_duplicates(
    platform: FakePlatform, client: httpx.Client
) -> None:
    first, second = record("shop/a", 1), record("shop/b", 1)
    post_records(client, first, second)
    post_records(client, second)  # a re-sent batch under a new key: a duplicate record id
    received = platform.received_records()
    assert [r["id"] for r in received] == [first["id"], second["id"], second["id"]]
    assert Counter(r["id"] for r in received)[second["id"]] == 2


# --- events ------------------------------------------------------------------------------


def test_events_are_deduplicated_by_id_keeping_the_first(
    platform: FakePlatform, client: httpx.Client
) -> None:
    assert post_events(client, event("e-1", message="first"), event("e-2")).status_code == 200
    assert post_events(client, event("e-1", message="again")).status_code == 200
    assert set(platform.events()) == {"e-1", "e-2"}
    assert platform.events()["e-1"]["message"] == "first"
    assert [e["id"] for e in platform.received_events()] == ["e-1", "e-2", "e-1"]


def test_a_malformed_event_is_400(platform: FakePlatform, client: httpx.Client) -> None:
    assert post_events(client, {**event("e-1"), "type": "scale"}).status_code == 400
    assert post_events(client, _without(event("e-1"), "template_id")).status_code == 400
    assert platform.received_events() == []


# --- idempotency, limits, rejection ------------------------------------------------------


def test_a_repeated_idempotency_key_is_409_and_applies_nothing(
    platform: FakePlatform, client: httpx.Client
) -> None:
    assert post_records(client, record("shop/a", 1), key="batch-1").status_code == 200
    assert post_records(client, record("shop/b", 1), key="batch-1").status_code == 409
    assert view_keys(platform) == {("deployment", "shop/a")}
    assert len(platform.received_records()) == 1
    # Keys are per route.
    assert post_events(client, event("e-1"), key="batch-1").status_code == 200


def test_a_refused_or_faulted_body_does_not_use_up_its_idempotency_key(
    platform: FakePlatform, client: httpx.Client
) -> None:
    assert post_json(client, RECORDS, {"nope": 1}, key="batch-1").status_code == 400
    platform.script("records", Status(503))
    assert post_records(client, record("shop/a", 1), key="batch-1").status_code == 503
    assert post_records(client, record("shop/a", 1), key="batch-1").status_code == 200


def test_racing_retries_of_one_batch_are_applied_once(
    platform: FakePlatform, client: httpx.Client
) -> None:
    same = record("shop/a", 1)
    with ThreadPoolExecutor(8) as pool:
        statuses = list(
            pool.map(lambda _: post_records(client, same, key="b").status_code, range(16))
        )
    assert sorted(statuses) == [200] + [409] * 15
    assert len(platform.received_records()) == 1


def test_a_body_over_the_limit_is_413_measured_decompressed(
    platform: FakePlatform, client: httpx.Client
) -> None:
    platform.max_body_bytes = 2000
    big = record("shop/big", 1, data={"padding": "x" * 3000})
    response = post_records(client, big, zipped=True)
    assert response.status_code == 413
    assert len(platform.requests[0].raw_body) < 2000
    assert post_records(client, record("shop/small", 1)).status_code == 200
    assert view_keys(platform) == {("deployment", "shop/small")}


def test_a_rejected_record_makes_the_whole_body_422_and_applies_nothing(
    platform: FakePlatform, client: httpx.Client
) -> None:
    platform.reject_record = lambda item: item.get("key") == "shop/bad"
    bad = record("shop/bad", 1)
    assert post_records(client, record("shop/good", 1), bad, key="b-1").status_code == 422
    assert platform.view() == {}
    assert platform.received_records() == []
    assert post_records(client, record("shop/good", 1), key="b-1").status_code == 200

    platform.reject_record = lambda item: item.get("id") == "e-bad"
    assert post_events(client, event("e-ok"), event("e-bad")).status_code == 422
    assert platform.events() == {}


# --- scripted faults ---------------------------------------------------------------------


def test_scripted_faults_are_consumed_in_order_then_normal_service_resumes(
    platform: FakePlatform, client: httpx.Client
) -> None:
    platform.script(
        "records", Status(503), Status(429, retry_after="2"), Delay(0.3), Drop(), Status(500)
    )
    sent = [record(f"shop/{n}", 1) for n in range(6)]

    assert post_records(client, sent[0]).status_code == 503
    throttled = post_records(client, sent[1])
    assert (throttled.status_code, throttled.headers["Retry-After"]) == (429, "2")
    started = time.monotonic()
    assert post_records(client, sent[2]).status_code == 200
    assert time.monotonic() - started >= 0.3
    with pytest.raises(httpx.RemoteProtocolError):
        post_records(client, sent[3])
    assert post_records(client, sent[4]).status_code == 500
    assert post_records(client, sent[5]).status_code == 200

    assert [r.status for r in platform.requests] == [503, 429, 200, None, 500, 200]
    assert [r["key"] for r in platform.received_records()] == ["shop/2", "shop/5"]


def test_a_scripted_status_may_carry_a_body(client: httpx.Client, platform: FakePlatform) -> None:
    platform.script("heartbeat", Status(502, body="<html>bad gateway</html>"))
    response = post_json(client, HEARTBEAT, {"project_id": "p-1", "cluster_id": "c-1"})
    assert (response.status_code, response.text) == (502, "<html>bad gateway</html>")
    assert platform.last_heartbeat is None


def test_scripts_are_per_route(platform: FakePlatform, client: httpx.Client) -> None:
    platform.script("templates", Status(503))
    assert post_records(client, record("shop/a", 1)).status_code == 200
    assert client.get(TEMPLATES).status_code == 503
    assert client.get(TEMPLATES).status_code == 200


def test_a_drop_after_apply_delivers_but_answers_nothing(
    platform: FakePlatform, client: httpx.Client
) -> None:
    platform.script("records", Drop(apply=True))
    with pytest.raises(httpx.RemoteProtocolError):
        post_records(client, record("shop/a", 1), key="b-1")
    assert view_keys(platform) == {("deployment", "shop/a")}
    assert post_records(client, record("shop/a", 1), key="b-1").status_code == 409


def test_fail_all_breaks_one_route_until_cleared(
    platform: FakePlatform, client: httpx.Client
) -> None:
    heartbeat = {"project_id": "p-1", "cluster_id": "c-1"}
    platform.fail_all("records", Status(503, retry_after=1))
    platform.script("records", Status(429))  # a script goes first
    assert post_records(client, record("shop/a", 1)).status_code == 429
    for _ in range(3):
        assert post_records(client, record("shop/a", 1)).status_code == 503
    assert post_json(client, HEARTBEAT, heartbeat).status_code == 200
    platform.fail_all("records", None)
    assert post_records(client, record("shop/a", 1)).status_code == 200


def test_an_unknown_route_name_is_refused(platform: FakePlatform) -> None:
    with pytest.raises(ValueError, match="record"):
        platform.script("record", Status(503))
    with pytest.raises(ValueError):
        platform.fail_all("stats", Drop())


@pytest.mark.parametrize(
    "value", ["-1", "99999999999", "Wed, 21 Oct 2015 07:28:00 GMT", "soon", -5, 1.5]
)
def test_a_scripted_retry_after_is_passed_through_unchanged(
    platform: FakePlatform, client: httpx.Client, value: str | int | float
) -> None:
    platform.script("templates", Status(429, retry_after=value))
    assert client.get(TEMPLATES).headers["Retry-After"] == str(value)


def test_a_scripted_200_may_carry_json_of_the_wrong_shape(
    platform: FakePlatform, client: httpx.Client
) -> None:
    platform.script("templates", Status(200, body=b'{"templates": "x"}'))
    assert client.get(TEMPLATES).json() == {"templates": "x"}


# --- hostile answers ---------------------------------------------------------------------


def raw_get(port: int, path: str = TEMPLATES) -> socket.socket:
    """A request sent by hand, so that the answer can be read (and timed) byte by byte."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    lines = [f"GET {path} HTTP/1.1", "Host: x", *(f"{k}: {v}" for k, v in AUTH.items())]
    connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return connection


def read_head(connection: socket.socket) -> bytes:
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = connection.recv(1)
        assert byte, f"closed after {head!r}"
        head += byte
    return head


def read_to_end(connection: socket.socket) -> bytes:
    data = b""
    while chunk := connection.recv(65536):
        data += chunk
    return data


def test_a_drip_sends_its_body_one_byte_at_a_time(platform: FakePlatform) -> None:
    platform.script("templates", Drip(every=0.05))
    with raw_get(platform.port) as connection:
        head = read_head(connection)
        started = time.monotonic()
        body = b"".join(connection.recv(1) for _ in range(3))
        elapsed = time.monotonic() - started
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"Connection: close" in head and b"Content-Length" not in head
    assert body == b'{"t'
    assert elapsed >= 0.1  # a pause before each byte; generous lower bound only
    assert [r.status for r in platform.requests] == [200]


def test_an_endless_drip_stops_writing_once_the_client_closes(
    platform: FakePlatform, capfd: pytest.CaptureFixture[str]
) -> None:
    platform.fail_all("templates", Drip(every=0.02))
    with raw_get(platform.port) as connection:
        read_head(connection)
        assert connection.recv(1) == b"{"
    # The thread is gone once its next writes fail, so bytes_sent can no longer grow.
    wait_until(lambda: platform.open_streams() == 0, timeout=5)
    sent = platform.bytes_sent("templates")
    assert 1 <= sent < 100
    assert platform.bytes_sent("templates") == sent
    assert capfd.readouterr().err == "", "a vanished client is not an error"


def test_a_drip_with_a_body_ends_once_all_of_it_was_sent(
    platform: FakePlatform, client: httpx.Client
) -> None:
    body = b'{"templates": []}'
    platform.script("templates", Drip(every=0.01, body=body))
    response = client.get(TEMPLATES)
    assert (response.status_code, response.content) == (200, body)
    assert response.headers["Content-Length"] == str(len(body))
    assert platform.bytes_sent("templates") == len(body)
    assert client.get(TEMPLATES).json() == {"templates": []}  # the connection stays usable


def test_a_headers_drip_delays_the_status_line(platform: FakePlatform) -> None:
    platform.script("templates", Drip(every=0.05, body=b"{}", headers=True))
    with raw_get(platform.port) as connection:
        started = time.monotonic()
        first = b"".join(connection.recv(1) for _ in range(3))
        elapsed = time.monotonic() - started
    assert first == b"HTT"
    assert elapsed >= 0.1
    wait_until(lambda: platform.open_streams() == 0, timeout=5)
    assert platform.bytes_sent("templates") == 0, "no body byte was due yet"


@pytest.mark.parametrize("end", ["reset", "down"])
def test_reset_and_down_end_an_endless_drip(platform: FakePlatform, end: str) -> None:
    platform.fail_all("templates", Drip(every=0.02))
    with raw_get(platform.port) as connection:
        read_head(connection)
        assert connection.recv(1) == b"{"
        try:
            getattr(platform, end)()
            wait_until(lambda: platform.open_streams() == 0, timeout=5)
            rest = read_to_end(connection)  # the platform closed the connection
        finally:
            platform.up()
    assert len(rest) < 100


def test_a_gzip_bomb_inflates_to_exactly_its_size(
    platform: FakePlatform, client: httpx.Client
) -> None:
    size = 8 << 20
    platform.fail_all("templates", GzipBomb(size))
    inflater = zlib.decompressobj(31)
    inflated, start, received = 0, b"", 0
    with client.stream("GET", TEMPLATES) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        length = int(response.headers["Content-Length"])
        for chunk in response.iter_raw():
            received += len(chunk)
            piece = inflater.decompress(chunk)
            start += piece[: 15 - len(start)]
            inflated += len(piece)
    inflated += len(inflater.flush())
    assert inflater.eof
    assert inflated == size
    assert start == b'{"templates": ['
    assert received == length == platform.bytes_sent("templates")
    assert length < size // 100


@pytest.mark.parametrize("size", [17, 8 << 20])
def test_a_huge_body_is_plain_json_of_exactly_its_size(
    platform: FakePlatform, client: httpx.Client, size: int
) -> None:
    platform.script("templates", HugeBody(size))
    response = client.get(TEMPLATES)
    assert "Content-Encoding" not in response.headers
    assert int(response.headers["Content-Length"]) == len(response.content) == size
    assert response.json() == {"templates": []}
    assert platform.bytes_sent("templates") == size


def test_a_huge_body_stops_quietly_when_the_client_goes_away(
    platform: FakePlatform, capfd: pytest.CaptureFixture[str]
) -> None:
    size = 1 << 40
    platform.script("templates", HugeBody(size))
    with raw_get(platform.port) as connection:
        assert f"Content-Length: {size}".encode() in read_head(connection)
        assert connection.recv(65536)
    wait_until(lambda: platform.open_streams() == 0, timeout=5)
    assert 0 < platform.bytes_sent("templates") < size
    assert capfd.readouterr().err == ""


def test_a_redirect_carries_its_location(platform: FakePlatform, client: httpx.Client) -> None:
    platform.script("templates", Redirect("https://elsewhere.example/v1"), Redirect("/x", 301))
    moved = client.get(TEMPLATES)  # httpx does not follow redirects unless told to
    assert (moved.status_code, moved.headers["Location"]) == (307, "https://elsewhere.example/v1")
    assert moved.json()["error"]
    assert client.get(TEMPLATES).headers["Location"] == "/x"
    assert [r.status for r in platform.requests] == [307, 301]


def test_hostile_answers_work_over_https() -> None:
    authority = TLSAuthority()
    with (
        FakePlatform(tls=authority) as secure,
        httpx.Client(base_url=secure.url, verify=authority.client_context(), timeout=5) as client,
    ):
        body = b'{"templates": []}'
        secure.script("templates", Drip(every=0.01, body=body), GzipBomb(1 << 20), Drip(0.02))
        assert client.get(TEMPLATES).content == body
        assert len(client.get(TEMPLATES).content) == 1 << 20  # httpx inflates it
        with client.stream("GET", TEMPLATES) as endless:
            assert next(endless.iter_raw()) == b"{"
        wait_until(lambda: secure.open_streams() == 0, timeout=5)


def test_bytes_sent_counts_body_bytes_per_route_until_reset(
    platform: FakePlatform, client: httpx.Client
) -> None:
    response = client.get(TEMPLATES)
    assert platform.bytes_sent("templates") == len(response.content) > 0
    assert platform.bytes_sent("records") == 0
    platform.reset()
    assert platform.bytes_sent("templates") == 0
    with pytest.raises(ValueError):
        platform.bytes_sent("stats")


# --- heartbeat, templates, actions -------------------------------------------------------


def test_a_heartbeat_is_stored_and_answered_with_the_configured_json(
    platform: FakePlatform, client: httpx.Client
) -> None:
    body = {"project_id": "p-1", "cluster_id": "c-1", "metadata": {"node_count": 3}}
    assert post_json(client, HEARTBEAT, body).json() == {}
    platform.heartbeat_answer = {"resync": True}
    assert post_json(client, HEARTBEAT, body).json() == {"resync": True}
    assert platform.last_heartbeat == body


def test_templates_and_actions_are_served_from_what_was_set(
    platform: FakePlatform, client: httpx.Client
) -> None:
    assert client.get(TEMPLATES).json() == {"templates": []}
    template = {"id": "t-1", "name": "black friday", "enabled": True, "cron": None}
    action = {"id": "a-1", "namespace": "shop", "deployment": "web", "min_replicas": 4}
    platform.set_templates([template])
    platform.set_actions("t-1", [action])
    assert client.get(TEMPLATES).json() == {"templates": [template]}
    assert client.get(f"{TEMPLATES}/t-1/actions").json() == {"actions": [action]}
    assert client.get(f"{TEMPLATES}/t-9/actions").json() == {"actions": []}
    assert [r.route for r in platform.requests] == ["templates"] * 2 + ["actions"] * 2


# --- bookkeeping -------------------------------------------------------------------------


def test_sandbox_stats_need_no_credentials_and_count_delivery(
    platform: FakePlatform, client: httpx.Client
) -> None:
    same, other = record("shop/a", 1), record("shop/b", 1)
    post_records(client, same)
    post_records(client, same, other)
    post_events(client, event("e-1"), event("e-1"))
    stats = httpx.get(f"{platform.url}/_sandbox/stats").json()
    each = [len(msgspec.json.encode(r)) for r in (same, same, other)]
    assert stats == {
        "requests": 3,
        "records_received": 3,
        "record_bytes_received": sum(each),
        "unique_record_ids": 2,
        "events_received": 2,
    }
    assert len(platform.requests) == 3, "the stats endpoint itself is not recorded"


def test_reset_forgets_state_and_restores_the_defaults(
    platform: FakePlatform, client: httpx.Client
) -> None:
    post_records(client, record("shop/a", 1), key="b-1")
    platform.token = "other"
    platform.heartbeat_answer = {"resync": True}
    platform.max_body_bytes = 1
    platform.reject_record = lambda _: True
    platform.script("records", Status(503))
    platform.fail_all("events", Status(503))
    platform.set_templates([{"id": "t-1"}])

    platform.reset()

    assert (platform.requests, platform.view(), platform.received_records()) == ([], {}, [])
    assert post_records(client, record("shop/a", 1), key="b-1").status_code == 200
    assert post_events(client, event("e-1")).status_code == 200
    assert client.get(TEMPLATES).json() == {"templates": []}
    body = {"project_id": "p-1", "cluster_id": "c-1"}
    assert post_json(client, HEARTBEAT, body).json() == {}


# --- lifecycle ---------------------------------------------------------------------------


def test_down_refuses_connections_and_up_serves_again_on_the_same_port(
    platform: FakePlatform, client: httpx.Client
) -> None:
    assert client.get(TEMPLATES).status_code == 200  # leaves a keep-alive connection open
    port, url = platform.port, platform.url
    platform.down()
    try:
        assert not platform.is_up
        with pytest.raises(httpx.ConnectError):
            client.get(TEMPLATES)  # the kept-alive connection was cut too
    finally:
        platform.up()
    assert (platform.port, platform.url) == (port, url)
    assert client.get(TEMPLATES).status_code == 200


def test_https_mode_is_trusted_with_the_ca_bundle_only(tmp_path: Path) -> None:
    authority = TLSAuthority()
    bundle = authority.write_ca_bundle(tmp_path / "ca.pem")
    with FakePlatform(tls=authority) as secure:
        assert secure.url.startswith("https://localhost:")
        trusted = ssl.create_default_context(cafile=str(bundle))
        with httpx.Client(headers=AUTH, verify=trusted) as client:
            assert client.get(f"{secure.url}{TEMPLATES}").status_code == 200
            by_address = f"https://127.0.0.1:{secure.port}{TEMPLATES}"
            assert client.get(by_address).status_code == 200
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{secure.url}{TEMPLATES}", headers=AUTH)
        # The refused handshake did not take the server down.
        with httpx.Client(headers=AUTH, verify=authority.client_context()) as client:
            assert client.get(f"{secure.url}{TEMPLATES}").status_code == 200


def test_the_subprocess_prints_its_url_serves_stats_and_ignores_vanished_clients() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "sandbox.platform", "--port", "0", "--token", "t-2"],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.fullmatch(r"URL (http://127\.0\.0\.1:(\d+))\n", line)
        assert match, line
        url, port = match.group(1), int(match.group(2))
        headers = {"X-Cluster-Token": "t-2", "Authorization": "Bearer t-2"}
        with httpx.Client(base_url=url, headers=headers, timeout=5) as client:
            same = record("shop/a", 1)
            assert post_records(client, same).status_code == 200
            assert post_records(client, same).status_code == 200
            assert post_events(client, event("e-1")).status_code == 200
            _vanish_mid_body(port)
            assert client.get("/_sandbox/stats").json() == {
                "requests": 3,
                "records_received": 2,
                "record_bytes_received": 2 * len(msgspec.json.encode(same)),
                "unique_record_ids": 1,
                "events_received": 1,
            }
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0
    assert stderr == ""


def _vanish_mid_body(port: int) -> None:
    """A client gone half-way through sending a request; returns once the server is done
    with the connection (it closed its end), so what follows sees what it did."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(
            b"POST /v1/clusters/c-1/records HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"
        )
        raw.shutdown(socket.SHUT_WR)  # the body ends there
        while raw.recv(4096):  # whatever it answers, until it closes
            pass
