"""The fake's resourceVersions: lists at a version, history that ages, what watches send.

What the real server does is in the Kubernetes API concepts page
(https://kubernetes.io/docs/reference/using-api/api-concepts/, the sections on resource
versions, the semantics for get and list, watch bookmarks and streaming lists) and in the
watch cache (staging/src/k8s.io/apiserver/pkg/storage/cacher); each test names its part.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sandbox import objects
from sandbox.kube import FakeKube
from tests.cluster_objects import NS
from tests.waiting import wait_until

PODS = f"/api/v1/namespaces/{NS}/pods"
CONCEPTS = "https://kubernetes.io/docs/reference/using-api/api-concepts/"


class Clock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()


@pytest.fixture(scope="module")
def server() -> Iterator[FakeKube]:
    # No periodic bookmarks and no wait for a resourceVersion not reached: every BOOKMARK is
    # one a test caused, and a too large resourceVersion is refused at once.
    with FakeKube(bookmark_interval=0, too_large_rv_wait=0, clock=CLOCK) as kube:
        yield kube


@pytest.fixture
def kube(server: FakeKube) -> FakeKube:
    server.reset()
    server.create(objects.namespace(name=NS))
    return server


def names(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [item["metadata"]["name"] for item in answer.json()["items"]]


def events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line:
            yield json.loads(line)


def seen(event: dict[str, Any]) -> tuple[str, str]:
    metadata = event["object"]["metadata"]
    return event["type"], metadata.get("name", metadata["resourceVersion"])


def too_large(requested: int, current: int) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Timeout: Too large resource version: {requested}, current: {current}",
        "reason": "Timeout",
        "details": {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
        "code": 504,
    }


# --- lists at a resourceVersion --------------------------------------------------------------


def test_a_list_without_a_resource_version_is_the_most_recent_and_honours_limit(
    kube: FakeKube, http: httpx.Client
) -> None:
    """Unset: "Most Recent", and pages by `limit` (#semantics-for-get-and-list)."""
    for name in ("a", "b", "c"):
        kube.create(objects.pod(name=name, namespace=NS))
    answer = http.get(PODS, params={"limit": "2"})
    assert names(answer) == ["a", "b"]
    metadata = answer.json()["metadata"]
    assert metadata["resourceVersion"] == str(kube.current_rv)
    assert metadata["continue"] and metadata["remainingItemCount"] == 1


def test_a_list_not_older_than_a_version_reached_is_served_now(
    kube: FakeKube, http: httpx.Client
) -> None:
    """NotOlderThan (the default for a non-zero resourceVersion) answers with data at
    least that new: the current state (#semantics-for-get-and-list)."""
    kube.create(objects.pod(name="a", namespace=NS))
    old = kube.current_rv
    kube.create(objects.pod(name="b", namespace=NS))
    for params in ({"resourceVersion": str(old)}, {"resourceVersion": str(old), "limit": "5"}):
        answer = http.get(PODS, params={**params, "resourceVersionMatch": "NotOlderThan"})
        assert names(answer) == ["a", "b"]
        assert answer.json()["metadata"]["resourceVersion"] == str(kube.current_rv)


def test_a_list_not_older_than_a_version_not_reached_waits_for_it() -> None:
    """The watch cache waits a while for a resourceVersion it has not seen yet
    (cacher: waitUntilFreshAndBlock)."""
    with FakeKube(bookmark_interval=0, too_large_rv_wait=60) as kube:
        kube.create(objects.namespace(name=NS))
        wanted = kube.current_rv + 1
        answer: dict[str, httpx.Response] = {}

        def read() -> None:
            params = {"resourceVersion": str(wanted)}
            answer["list"] = httpx.get(
                kube.url + PODS, params=params, headers=kube.headers, timeout=30
            )

        thread = threading.Thread(target=read)
        thread.start()
        wait_until(lambda: kube.stats()["waiting_for_resource_version"] == 1)
        kube.create(objects.pod(name="late", namespace=NS))
        thread.join(30)
        assert names(answer["list"]) == ["late"]
        assert answer["list"].json()["metadata"]["resourceVersion"] == str(wanted)

        # An exact version not reached is refused at once, without that wait.
        ahead = kube.current_rv + 3
        params = {"resourceVersion": str(ahead), "resourceVersionMatch": "Exact"}
        refused = httpx.get(kube.url + PODS, params=params, headers=kube.headers, timeout=30)
        assert refused.status_code == 504
        assert refused.json() == too_large(ahead, kube.current_rv)


def test_a_list_not_older_than_a_version_never_reached_is_a_504_to_retry(
    kube: FakeKube, http: httpx.Client
) -> None:
    """After the wait: 504 Timeout, cause ResourceVersionTooLarge, Retry-After
    (staging/src/k8s.io/apiserver/pkg/storage/errors.go, NewTooLargeResourceVersionError)."""
    ahead = kube.current_rv + 5
    answer = http.get(PODS, params={"resourceVersion": str(ahead)})
    assert answer.status_code == 504
    assert answer.headers["retry-after"] == "1"
    assert answer.json() == too_large(ahead, kube.current_rv)


def test_an_exact_list_is_the_state_at_that_version_rebuilt_from_history(
    kube: FakeKube, http: httpx.Client
) -> None:
    """Exact: "Return data at the exact resource version provided"
    (#semantics-for-get-and-list), paged like any list."""
    kube.create(objects.pod(name="a", namespace=NS, labels={"tier": "one"}))
    kube.create(objects.pod(name="b", namespace=NS))
    at_two = kube.current_rv
    kube.patch("pods", NS, "a", {"metadata": {"labels": {"tier": "two"}}})
    kube.delete("pods", NS, "b")
    kube.create(objects.pod(name="c", namespace=NS))
    kube.create(objects.namespace(name="other"))
    kube.create(
        {**objects.pod(name="x", namespace=NS), "metadata": {"name": "x", "namespace": "other"}}
    )

    def exact(rv: int, **params: str) -> httpx.Response:
        query = {"resourceVersion": str(rv), "resourceVersionMatch": "Exact", **params}
        return http.get(PODS, params=query)

    answer = exact(at_two)
    assert names(answer) == ["a", "b"]
    assert answer.json()["metadata"]["resourceVersion"] == str(at_two)
    assert answer.json()["items"][0]["metadata"]["labels"] == {"tier": "one"}
    assert names(exact(at_two + 1)) == ["a", "b"]
    assert names(exact(at_two + 2)) == ["a"]
    assert names(exact(kube.current_rv)) == ["a", "c"]
    assert names(exact(at_two, labelSelector="tier=one")) == ["a"]
    # Paged: every page from the same old state.
    first = exact(at_two, limit="1")
    assert names(first) == ["a"]
    token = first.json()["metadata"]["continue"]
    second = http.get(PODS, params={"limit": "1", "continue": token})
    assert names(second) == ["b"]
    assert second.json()["metadata"]["resourceVersion"] == str(at_two)


def test_a_paginated_list_at_a_version_without_a_match_is_exact_as_it_always_was(
    kube: FakeKube, http: httpx.Client
) -> None:
    """resourceVersion N with `limit` and no resourceVersionMatch: Exact, the legacy
    meaning kept for compatibility (#semantics-for-get-and-list, the table's
    "limit=<n>, continue unset" row; KEP-2523)."""
    kube.create(objects.pod(name="a", namespace=NS))
    old = kube.current_rv
    kube.create(objects.pod(name="b", namespace=NS))
    answer = http.get(PODS, params={"resourceVersion": str(old), "limit": "5"})
    assert names(answer) == ["a"]
    assert answer.json()["metadata"]["resourceVersion"] == str(old)
    whole = http.get(PODS, params={"resourceVersion": str(old)})  # no limit: not older than
    assert names(whole) == ["a", "b"]
    kube.compact()
    assert http.get(PODS, params={"resourceVersion": str(old), "limit": "5"}).status_code == 410


def test_an_exact_list_older_than_the_history_kept_is_410_expired(
    kube: FakeKube, http: httpx.Client
) -> None:
    """A version compacted away: 410 Expired (#resource-versions; etcd3 store:
    "The resourceVersion for the provided list is too old.")."""
    kube.create(objects.pod(name="a", namespace=NS))
    old = kube.current_rv
    kube.create(objects.pod(name="b", namespace=NS))
    kube.compact()
    params = {"resourceVersion": str(old), "resourceVersionMatch": "Exact"}
    answer = http.get(PODS, params=params)
    assert answer.status_code == 410
    assert answer.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "The resourceVersion for the provided list is too old.",
        "reason": "Expired",
        "code": 410,
    }


# --- history that ages --------------------------------------------------------------------


def test_history_older_than_five_minutes_is_gone_for_watches_and_exact_lists(
    kube: FakeKube, http: httpx.Client
) -> None:
    """etcd is compacted about every 5 minutes; a watch or an exact list from before that
    meets 410 Gone/Expired (#resource-versions, "410 Gone")."""
    kube.create(objects.pod(name="a", namespace=NS))
    old = kube.current_rv
    kube.create(objects.pod(name="b", namespace=NS))
    CLOCK.now += 299
    kube.create(objects.pod(name="c", namespace=NS))
    # Still kept: the watch replays what came after `old`.
    params = {"watch": "1", "resourceVersion": str(old), "timeoutSeconds": "1"}
    assert [seen(e) for e in events(http.get(PODS, params=params))] == [
        ("ADDED", "b"),
        ("ADDED", "c"),
    ]
    CLOCK.now += 2  # b is older than 300 s now, c is not
    expired = list(events(http.get(PODS, params=params)))
    assert [(e["type"], e["object"]["code"]) for e in expired] == [("ERROR", 410)]
    assert expired[0]["object"]["reason"] == "Expired"
    exact = {"resourceVersion": str(old), "resourceVersionMatch": "Exact"}
    assert http.get(PODS, params=exact).status_code == 410
    kube.set_watch_expired_mode("http")
    assert http.get(PODS, params=params).status_code == 410
    # From after the expired change, the rest is still there.
    params["resourceVersion"] = str(kube.current_rv - 1)
    assert [seen(e) for e in events(http.get(PODS, params=params))] == [("ADDED", "c")]


def test_a_continue_token_older_than_five_minutes_is_410_with_a_token_to_go_on(
    kube: FakeKube, http: httpx.Client
) -> None:
    """A continue token is valid until etcd compacts its revision (#retrieving-large-
    results-sets-in-chunks: "410 ResourceExpired" once it is gone)."""
    for name in ("a", "b", "c"):
        kube.create(objects.pod(name=name, namespace=NS))
    token = http.get(PODS, params={"limit": "1"}).json()["metadata"]["continue"]
    CLOCK.now += 299
    assert names(http.get(PODS, params={"limit": "1", "continue": token})) == ["b"]
    CLOCK.now += 2
    answer = http.get(PODS, params={"limit": "1", "continue": token})
    assert (answer.status_code, answer.json()["reason"]) == (410, "Expired")
    fresh = answer.json()["metadata"]["continue"]
    assert names(http.get(PODS, params={"continue": fresh})) == ["b", "c"]


# --- what a watch sends ------------------------------------------------------------------


def test_a_watch_from_a_resource_version_ahead_sends_nothing_until_the_server_passes_it(
    kube: FakeKube, http: httpx.Client
) -> None:
    """The watch cache sends only events and bookmarks newer than the resourceVersion a
    watch started from (cacher/cache_watcher.go, process)."""
    ahead = kube.current_rv + 2
    params = {"watch": "1", "resourceVersion": str(ahead), "allowWatchBookmarks": "true"}
    with http.stream("GET", PODS, params=params) as response:
        stream = events(response)
        kube.wait_for_watches(1, "pods")
        kube.create(objects.pod(name="a", namespace=NS))  # at ahead - 1
        kube.bookmark_now("pods")  # lower than where the watch started: not sent
        kube.create(objects.pod(name="b", namespace=NS))  # at ahead: not newer either
        kube.bookmark_now("pods")
        kube.create(objects.pod(name="c", namespace=NS))
        first = next(stream)
        kube.create(objects.namespace(name="elsewhere"))
        kube.bookmark_now("pods")
        second = next(stream)
    assert seen(first) == ("ADDED", "c")
    assert first["object"]["metadata"]["resourceVersion"] == str(ahead + 1)
    assert seen(second) == ("BOOKMARK", str(ahead + 2))


def test_a_bookmark_comes_only_when_the_resource_version_moved_past_the_last_one_sent(
    kube: FakeKube, http: httpx.Client
) -> None:
    """Bookmarks tell a client how far the server got (#watch-bookmarks): one with nothing
    new is not sent, nor one lower than an event already sent."""
    kube.create(objects.pod(name="a", namespace=NS))
    params = {"watch": "1", "resourceVersion": str(kube.current_rv), "allowWatchBookmarks": "1"}
    plain = {"watch": "1", "resourceVersion": str(kube.current_rv)}
    with (
        http.stream("GET", PODS, params=params) as response,
        http.stream("GET", PODS, params=plain) as without,
    ):
        stream, others = events(response), events(without)
        kube.wait_for_watches(2, "pods")
        kube.bookmark_now("pods")  # nothing new since the watch started
        kube.create(objects.pod(name="b", namespace=NS))
        kube.bookmark_now("pods")  # at b's RV, already told by its event
        kube.create(objects.namespace(name="elsewhere"))
        kube.bookmark_now("pods")
        kube.bookmark_now("pods")  # the same again
        kube.create(objects.pod(name="c", namespace=NS))
        got = [next(stream) for _ in range(3)]
        other = [next(others) for _ in range(2)]
    assert [seen(e) for e in got] == [
        ("ADDED", "b"),
        ("BOOKMARK", str(kube.current_rv - 1)),
        ("ADDED", "c"),
    ]
    # Only watches that allow bookmarks get them.
    assert [seen(e) for e in other] == [("ADDED", "b"), ("ADDED", "c")]


def test_a_watch_gets_a_last_bookmark_shortly_before_its_timeout(
    kube: FakeKube, http: httpx.Client
) -> None:
    """The watch cache sends a bookmark 2 s before a watch's timeout, so the client
    resumes from a fresh resourceVersion (cacher/cache_watcher.go, nextBookmarkTime)."""
    params = {
        "watch": "1",
        "resourceVersion": str(kube.current_rv),
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "3",
    }
    kube.create(objects.namespace(name="elsewhere"))  # news for the watch, not an event on it
    with http.stream("GET", PODS, params=params) as response:
        got = list(events(response))  # the stream ends at its timeout
    assert [seen(e) for e in got] == [("BOOKMARK", str(kube.current_rv))]


def test_a_watch_without_timeout_seconds_ends_within_twice_the_minimum_request_timeout() -> None:
    """Without timeoutSeconds the server picks 1-2x `--min-request-timeout` (apiserver
    endpoints/handlers/get.go, ListResource), so every watch ends some time."""
    with FakeKube(bookmark_interval=0, min_request_timeout=0.5) as kube:
        kube.create(objects.namespace(name=NS))
        params = {"watch": "1", "resourceVersion": str(kube.current_rv)}
        with httpx.stream(
            "GET", kube.url + PODS, params=params, headers=kube.headers, timeout=10
        ) as response:
            assert response.status_code == 200
            assert list(events(response)) == []  # ended cleanly, well before the read timeout
        wait_until(lambda: kube.open_watches() == 0)
