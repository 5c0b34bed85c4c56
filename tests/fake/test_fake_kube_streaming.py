"""Streaming lists (watches with `sendInitialEvents`) and metadata-only answers
(`as=PartialObjectMetadata`) of the fake Kubernetes API server, checked on the wire as
kube-apiserver serves them: the options it accepts and the 422s it words, the annotated
bookmark that ends the initial events, the three kinds of server a client can meet
("serve", "refuse", "ignore"), a streaming list cut short, and Accept negotiation with its
406s. Driven through plain httpx, since the official client cannot say these requests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any

import httpx
import msgspec
import pytest

from sandbox import objects
from sandbox.kube import FakeKube, resources
from sandbox.kube.store import Store
from tests.cluster_objects import NS
from tests.waiting import wait_until

PODS = f"/api/v1/namespaces/{NS}/pods"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
STREAM = {
    "watch": "1",
    "sendInitialEvents": "true",
    "resourceVersionMatch": "NotOlderThan",
    "allowWatchBookmarks": "true",
}
END = {"k8s.io/initial-events-end": "true"}
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
# What client-go's metadata client sends for a list.
CLIENT_GO_LIST = (
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
)
SERVED_TYPES = "application/json, application/yaml, application/vnd.kubernetes.protobuf"
HELM = "helm.sh/release.v1"


# --- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[FakeKube]:
    # No periodic bookmarks: every BOOKMARK a test sees is one it caused.
    with FakeKube(bookmark_interval=0, history=50) as kube:
        yield kube


@pytest.fixture
def kube(server: FakeKube) -> FakeKube:
    server.reset()
    server.create(objects.namespace(name=NS))
    return server


def secret(name: str, *, type: str = HELM, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": labels,
            "annotations": {"meta.helm.sh/release-name": name},
        },
        "type": type,
        "data": {"release": "H4sI" + "A" * 4096},
    }


def events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Watch events as they arrive, one at a time."""
    for line in response.iter_lines():
        if line:
            yield json.loads(line)


def take(response: httpx.Response, count: int) -> list[dict[str, Any]]:
    stream = events(response)
    return [next(stream) for _ in range(count)]


def seen(event: dict[str, Any]) -> tuple[str, str]:
    metadata = event["object"]["metadata"]
    return event["type"], metadata.get("name", metadata["resourceVersion"])


# An empty Pod as Go encodes it: the fields without omitempty, empty (a ConfigMap has none).
EMPTY_POD = {"spec": {"containers": None}, "status": {}}


def end_bookmark(rv: int, kind: str = "Pod", api_version: str = "v1") -> dict[str, Any]:
    metadata = {"resourceVersion": str(rv), "annotations": END}
    empty = EMPTY_POD if kind == "Pod" else {}
    return {
        "type": "BOOKMARK",
        "object": {"kind": kind, "apiVersion": api_version, "metadata": metadata, **empty},
    }


def partial(obj: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj["metadata"],
    }


def refusal(message: str, causes: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'ListOptions.meta.k8s.io "" is invalid: {message}',
        "reason": "Invalid",
        "details": {
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": [
                {"reason": reason, "message": body, "field": field}
                for field, reason, body in causes
            ],
        },
        "code": 422,
    }


# --- streaming lists -------------------------------------------------------------------------


def test_a_streaming_list_sends_the_matching_objects_then_the_annotated_bookmark_then_changes(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(objects.pod(name="a", namespace=NS, labels={"app": "web"}))
    kube.create(objects.pod(name="b", namespace=NS, labels={"app": "db"}))
    kube.create(objects.pod(name="c", namespace=NS, labels={"app": "web"}))
    listed_at = kube.current_rv
    with http.stream("GET", PODS, params={**STREAM, "labelSelector": "app=web"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        stream = events(response)
        initial = [next(stream) for _ in range(3)]
        kube.create(objects.pod(name="d", namespace=NS, labels={"app": "web"}))
        kube.create(objects.pod(name="e", namespace=NS, labels={"app": "db"}))
        kube.delete("pods", NS, "a")
        live = [next(stream) for _ in range(2)]
    assert [seen(e) for e in initial[:2]] == [("ADDED", "a"), ("ADDED", "c")]
    assert initial[2] == end_bookmark(listed_at)
    assert [seen(e) for e in live] == [("ADDED", "d"), ("DELETED", "a")]


@pytest.mark.parametrize("start", ["unset", "0", "compacted", "current"])
def test_a_streaming_list_from_a_resource_version_the_fake_has_reached_sends_the_current_state(
    start: str, kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(objects.pod(name="a", namespace=NS))
    old = kube.current_rv
    kube.create(objects.pod(name="b", namespace=NS))
    kube.compact()  # a plain watch from `old` would now be 410
    rv = {"unset": "", "0": "0", "compacted": str(old), "current": str(kube.current_rv)}[start]
    with http.stream("GET", PODS, params={**STREAM, "resourceVersion": rv}) as response:
        got = take(response, 3)
    assert [seen(e) for e in got[:2]] == [("ADDED", "a"), ("ADDED", "b")]
    assert got[2] == end_bookmark(kube.current_rv)


def test_a_streaming_list_from_a_resource_version_not_reached_yet_waits_for_it() -> None:
    with FakeKube(bookmark_interval=0, too_large_rv_wait=60) as kube:
        kube.create(objects.namespace(name=NS))
        kube.create(objects.pod(name="a", namespace=NS))
        wanted = kube.current_rv + 1
        answer: dict[str, Any] = {}

        def watch() -> None:
            params = {**STREAM, "resourceVersion": str(wanted)}
            with httpx.stream(
                "GET", kube.url + PODS, params=params, headers=kube.headers, timeout=30
            ) as response:
                answer["status"] = response.status_code
                answer["events"] = take(response, 3)

        thread = threading.Thread(target=watch)
        thread.start()
        wait_until(lambda: kube.stats()["waiting_for_resource_version"] == 1)
        kube.create(objects.pod(name="b", namespace=NS))
        thread.join(30)
        assert not thread.is_alive()
        assert kube.stats()["waiting_for_resource_version"] == 0
    assert answer["status"] == 200
    assert [seen(e) for e in answer["events"][:2]] == [("ADDED", "a"), ("ADDED", "b")]
    assert answer["events"][2] == end_bookmark(wanted)


def test_a_streaming_list_from_a_resource_version_never_reached_ends_with_a_504_error_event() -> (
    None
):
    """The watch cache answers a streaming list it cannot serve with a watch carrying one
    ERROR event (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go, Watch:
    `newErrWatcher`), not with an HTTP error."""
    with FakeKube(bookmark_interval=0, too_large_rv_wait=0) as kube:
        kube.create(objects.namespace(name=NS))
        current = kube.current_rv
        params = {**STREAM, "resourceVersion": str(current + 5)}
        response = httpx.get(kube.url + PODS, params=params, headers=kube.headers)
        assert kube.open_watches() == 0
    assert response.status_code == 200
    assert list(events(response)) == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"Timeout: Too large resource version: {current + 5}, current: "
                f"{current}",
                "reason": "Timeout",
                "details": {
                    "causes": [
                        {
                            "reason": "ResourceVersionTooLarge",
                            "message": "Too large resource version",
                        }
                    ],
                    "retryAfterSeconds": 1,
                },
                "code": 504,
            },
        }
    ]


def test_send_initial_events_false_watches_from_now_or_from_the_resource_version_given(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(objects.pod(name="a", namespace=NS))
    before_b = kube.current_rv
    kube.create(objects.pod(name="b", namespace=NS))
    params = {**STREAM, "sendInitialEvents": "false"}
    for rv in ("", "0"):
        with http.stream("GET", PODS, params={**params, "resourceVersion": rv}) as response:
            kube.create(objects.pod(name=f"after-{rv or 'unset'}", namespace=NS))
            assert seen(take(response, 1)[0]) == ("ADDED", f"after-{rv or 'unset'}")
    with http.stream("GET", PODS, params={**params, "resourceVersion": str(before_b)}) as response:
        assert seen(take(response, 1)[0]) == ("ADDED", "b")


def test_initial_events_without_allow_watch_bookmarks_end_with_no_bookmark(
    kube: FakeKube, http: httpx.Client
) -> None:
    # Upstream accepts this: the client gets the objects but cannot tell where they end.
    kube.create(objects.pod(name="a", namespace=NS))
    params = {k: v for k, v in STREAM.items() if k != "allowWatchBookmarks"}
    with http.stream("GET", PODS, params=params) as response:
        assert response.status_code == 200
        stream = events(response)
        first = next(stream)
        kube.create(objects.pod(name="b", namespace=NS))
        second = next(stream)
    assert [seen(first), seen(second)] == [("ADDED", "a"), ("ADDED", "b")]


@pytest.mark.parametrize(
    ("params", "message", "causes"),
    [
        (
            {"watch": "1", "sendInitialEvents": "true"},
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
            "resourceVersionMatch to NotOlderThan",
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                    "NotOlderThan",
                )
            ],
        ),
        (
            {"watch": "1", "sendInitialEvents": "false", "allowWatchBookmarks": "true"},
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
            "resourceVersionMatch to NotOlderThan",
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                    "NotOlderThan",
                )
            ],
        ),
        (
            {"watch": "1", "resourceVersionMatch": "NotOlderThan", "resourceVersion": "5"},
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch "
            "unless sendInitialEvents is provided",
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden for watch unless "
                    "sendInitialEvents is provided",
                )
            ],
        ),
        (
            {**STREAM, "resourceVersionMatch": "Exact"},
            "[resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
            "resourceVersionMatch to NotOlderThan, resourceVersionMatch: Unsupported value: "
            '"Exact": supported values: "NotOlderThan"]',
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                    "NotOlderThan",
                ),
                (
                    "resourceVersionMatch",
                    "FieldValueNotSupported",
                    'Unsupported value: "Exact": supported values: "NotOlderThan"',
                ),
            ],
        ),
        (
            {**STREAM, "continue": "abc"},
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue "
            "is provided",
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                )
            ],
        ),
        (
            {"sendInitialEvents": "true"},
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
            [
                (
                    "sendInitialEvents",
                    "FieldValueForbidden",
                    "Forbidden: sendInitialEvents is forbidden for list",
                )
            ],
        ),
        (
            {"sendInitialEvents": "false", "resourceVersionMatch": "NotOlderThan"},
            "[resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
            "resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is "
            "forbidden for list]",
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is "
                    "provided",
                ),
                (
                    "sendInitialEvents",
                    "FieldValueForbidden",
                    "Forbidden: sendInitialEvents is forbidden for list",
                ),
            ],
        ),
        (
            {"resourceVersion": "0", "resourceVersionMatch": "Exact"},
            'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for '
            'resourceVersion "0"',
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
            ],
        ),
        (
            {"resourceVersion": "5", "resourceVersionMatch": "Newest"},
            'resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", '
            '"NotOlderThan", ""',
            [
                (
                    "resourceVersionMatch",
                    "FieldValueNotSupported",
                    'Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""',
                )
            ],
        ),
    ],
)
def test_options_a_list_or_watch_may_not_carry_are_422_worded_as_upstream(
    params: dict[str, str],
    message: str,
    causes: list[tuple[str, str, str]],
    kube: FakeKube,
    http: httpx.Client,
) -> None:
    response = http.get(PODS, params=params)
    assert response.status_code == 422
    assert response.json() == refusal(message, causes)
    assert kube.open_watches() == 0


@pytest.mark.parametrize(("mode", "ends"), [("serve", True), ("refuse", False), ("ignore", False)])
def test_a_legacy_watch_that_allows_bookmarks_becomes_a_streaming_list_only_where_served(
    mode: str, ends: bool, kube: FakeKube, http: httpx.Client
) -> None:
    kube.set_streaming_lists(mode)
    kube.create(objects.pod(name="a", namespace=NS))
    listed = kube.current_rv
    params = {"watch": "1", "allowWatchBookmarks": "true"}
    with http.stream("GET", PODS, params=params) as response:
        stream = events(response)
        first = next(stream)
        kube.create(
            objects.namespace(name="elsewhere")
        )  # a bookmark only comes once the RV moved on
        kube.bookmark_now("pods")
        second = next(stream)
    assert seen(first) == ("ADDED", "a")
    if ends:
        assert second == end_bookmark(listed)
    else:
        assert second["type"] == "BOOKMARK" and "annotations" not in second["object"]["metadata"]


def test_a_server_without_the_watch_list_feature_refuses_streaming_lists_with_422(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.set_streaming_lists("refuse")
    gate = "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    for value in ("true", "false"):
        response = http.get(PODS, params={**STREAM, "sendInitialEvents": value})
        assert response.status_code == 422
        assert response.json() == refusal(
            f"sendInitialEvents: Forbidden: {gate}",
            [("sendInitialEvents", "FieldValueForbidden", f"Forbidden: {gate}")],
        )
    assert http.get(PODS).json()["kind"] == "PodList"  # lists are unaffected


def test_a_server_that_ignores_the_parameters_serves_a_plain_watch(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.set_streaming_lists("ignore")
    kube.create(objects.pod(name="a", namespace=NS))
    before_b = kube.current_rv
    kube.create(objects.pod(name="b", namespace=NS))
    with http.stream("GET", PODS, params=STREAM) as response:
        stream = events(response)
        initial = [next(stream) for _ in range(2)]
        kube.create(objects.namespace(name="elsewhere"))  # a bookmark needs a newer RV
        kube.bookmark_now("pods")
        bookmark = next(stream)
    assert [seen(e) for e in initial] == [("ADDED", "a"), ("ADDED", "b")]
    assert bookmark["object"]["metadata"] == {"resourceVersion": str(kube.current_rv)}
    # A resourceVersion is read as a plain watch's: the changes after it, no current state.
    with http.stream("GET", PODS, params={**STREAM, "resourceVersion": str(before_b)}) as response:
        assert seen(take(response, 1)[0]) == ("ADDED", "b")
    # Nothing about the parameters is checked, not even what "serve" refuses.
    with http.stream("GET", PODS, params={"watch": "1", "sendInitialEvents": "true"}) as response:
        assert response.status_code == 200
    assert http.get(PODS, params={"sendInitialEvents": "true"}).json()["kind"] == "PodList"


def test_the_streaming_list_mode_can_differ_per_resource_and_reset_restores_the_constructors(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.set_streaming_lists("refuse", "pods")
    assert http.get(PODS, params=STREAM).status_code == 422
    configmaps = f"/api/v1/namespaces/{NS}/configmaps"
    with http.stream("GET", configmaps, params=STREAM) as response:
        assert take(response, 1) == [end_bookmark(kube.current_rv, "ConfigMap")]
    kube.reset()
    kube.create(objects.namespace(name=NS))
    with http.stream("GET", PODS, params=STREAM) as response:
        assert take(response, 1) == [end_bookmark(kube.current_rv)]

    with FakeKube(streaming_lists="refuse") as other:
        other.create(objects.namespace(name=NS))
        other.set_streaming_lists("serve")
        other.reset()
        assert httpx.get(other.url + PODS, params=STREAM, headers=other.headers).status_code == 422


def test_an_unknown_streaming_list_mode_or_a_negative_cut_is_a_value_error(kube: FakeKube) -> None:
    with pytest.raises(ValueError, match="streaming_lists must be one of serve, refuse, ignore"):
        FakeKube(streaming_lists="stream")
    with pytest.raises(ValueError, match="streaming_lists"):
        kube.set_streaming_lists("off")
    with pytest.raises(ValueError, match="after must not be negative"):
        kube.drop_initial_events("pods", after=-1)


@pytest.mark.parametrize("after", [0, 2, 10])
def test_a_streaming_list_can_be_cut_after_n_initial_events_without_a_clean_end(
    after: int, kube: FakeKube, http: httpx.Client
) -> None:
    start = str(kube.current_rv)
    for name in "abc":
        kube.create(objects.pod(name=name, namespace=NS))
    kube.drop_initial_events("pods", after=after)
    # A watch that is no streaming list leaves the fault for the next one that is.
    with http.stream("GET", PODS, params={"watch": "1", "resourceVersion": start}) as response:
        assert seen(take(response, 1)[0]) == ("ADDED", "a")
    received: list[dict[str, Any]] = []
    with pytest.raises(httpx.RemoteProtocolError), http.stream("GET", PODS, params=STREAM) as cut:
        received.extend(events(cut))
    assert [seen(e) for e in received] == [("ADDED", name) for name in "abc"[:after]]
    with http.stream("GET", PODS, params=STREAM) as response:
        assert take(response, 4)[3] == end_bookmark(kube.current_rv)  # used up
    assert kube.requests[-2].status == 200 and kube.requests[-2].watch


def test_boolean_parameters_are_read_as_the_real_server_reads_them(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(objects.pod(name="a", namespace=NS))
    with http.stream("GET", f"{PODS}?watch") as response:  # no value: true
        assert seen(take(response, 1)[0]) == ("ADDED", "a")
    for value in ("0", "False"):
        assert http.get(PODS, params={"watch": value}).json()["kind"] == "PodList"


# --- metadata-only answers -------------------------------------------------------------------


def test_a_metadata_list_carries_each_objects_whole_metadata_as_partial_object_metadata(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(secret("one", owner="helm"))
    kube.create(secret("two", type="Opaque"))
    response = http.get(SECRETS, headers={"Accept": METADATA_LIST})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": str(kube.current_rv)},
        "items": [partial(kube.get("secrets", NS, name)) for name in ("one", "two")],
    }


def test_a_metadata_list_pages_and_selects_as_any_list_does(
    kube: FakeKube, http: httpx.Client
) -> None:
    for index in range(5):
        kube.create(secret(f"release-{index}", owner="helm"))
    kube.create(secret("config", type="Opaque", owner="helm"))
    kube.create(secret("other-release"))
    params = {"fieldSelector": f"type={HELM}", "labelSelector": "owner=helm", "limit": "2"}
    names: list[str] = []
    pages: list[dict[str, Any]] = []
    while True:
        page = http.get(SECRETS, params=params, headers={"Accept": METADATA_LIST}).json()
        pages.append(page)
        names += [item["metadata"]["name"] for item in page["items"]]
        if "continue" not in page["metadata"]:
            break
        params["continue"] = page["metadata"]["continue"]
    assert names == [f"release-{index}" for index in range(5)]
    assert len(pages) == 3
    assert {page["metadata"]["resourceVersion"] for page in pages} == {str(kube.current_rv)}
    assert all("remainingItemCount" not in page["metadata"] for page in pages)  # filtered
    unfiltered = http.get(SECRETS, params={"limit": "3"}, headers={"Accept": METADATA_LIST})
    assert unfiltered.json()["metadata"]["remainingItemCount"] == 4


def test_an_empty_metadata_list_has_null_items_as_upstream_encodes_it(
    kube: FakeKube, http: httpx.Client
) -> None:
    body = http.get(SECRETS, headers={"Accept": METADATA_LIST}).json()
    assert body["kind"] == "PartialObjectMetadataList" and body["items"] is None
    assert http.get(SECRETS).json()["items"] == []


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_one_object_and_a_write_answer_can_be_partial_object_metadata(
    version: str, kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(secret("one"))
    kube.create(objects.pod(name="web", namespace=NS))
    accept = {"Accept": f"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v={version}"}
    got = http.get(f"{SECRETS}/one", headers=accept)
    assert got.headers["content-type"] == "application/json"
    assert got.json() == partial(kube.get("secrets", NS, "one"), version)
    patched = http.patch(
        f"{PODS}/web",
        json={"metadata": {"labels": {"patched": "yes"}}},
        headers={**accept, "Content-Type": "application/merge-patch+json"},
    )
    assert patched.json() == partial(kube.get("pods", NS, "web"), version)
    assert patched.json()["metadata"]["labels"] == {"patched": "yes"}
    status = http.get(f"{PODS}/web/status", headers=accept).json()
    assert status == partial(kube.get("pods", NS, "web"), version)


def test_a_kind_that_does_not_fit_the_chosen_transformation_is_406_whatever_comes_after(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(secret("one"))
    list_as_object = http.get(SECRETS, headers={"Accept": f"{METADATA}, application/json"})
    assert list_as_object.status_code == 406
    assert list_as_object.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "you requested PartialObjectMetadata, but the requested object is a list "
        "(*core.SecretList)",
        "reason": "NotAcceptable",
        "code": 406,
    }
    object_as_list = http.get(f"{SECRETS}/one", headers={"Accept": f"{METADATA_LIST}, */*"})
    assert object_as_list.status_code == 406
    assert object_as_list.json()["message"] == (
        "you requested PartialObjectMetadataList, but the requested object is not a list "
        "(*core.Secret)"
    )
    leases = http.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", headers={"Accept": METADATA}
    )
    assert leases.json()["message"].endswith("is a list (*coordination.LeaseList)")
    # The object is read first: one that is not there is a 404 before any 406.
    assert http.get(f"{SECRETS}/none", headers={"Accept": METADATA_LIST}).status_code == 404


@pytest.mark.parametrize(
    ("accept", "kind"),
    [
        (CLIENT_GO_LIST, "PartialObjectMetadataList"),
        ("*/*;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", "PartialObjectMetadataList"),
        (f"application/json;q=0.5, {METADATA_LIST}", "PartialObjectMetadataList"),
        (f"{METADATA_LIST};q=0.5, application/json", "SecretList"),
        ("application/json;as=Table;g=meta.k8s.io;v=v1, application/json", "Table"),
        ("application/json;as=Table;g=meta.k8s.io;v=v2, application/json", "SecretList"),
        ("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v2, */*", "SecretList"),
        ("application/json;as=PartialObjectMetadataList, application/json", "SecretList"),
        (f"{METADATA_LIST};stream=bogus, application/json", "SecretList"),
    ],
)
def test_the_first_clause_the_server_can_honour_picks_the_answer(
    accept: str, kind: str, kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(secret("one"))
    response = http.get(SECRETS, headers={"Accept": accept})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json()["kind"] == kind


def test_an_accept_header_the_server_cannot_honour_is_406_naming_what_it_serves(
    kube: FakeKube, http: httpx.Client
) -> None:
    for accept in ("application/json;as=Table;g=meta.k8s.io;v=v2", "text/html"):
        response = http.get(SECRETS, headers={"Accept": accept})
        assert response.status_code == 406
        assert response.json()["message"] == (
            f"only the following media types are accepted: {SERVED_TYPES}"
        )
    watch = http.get(PODS, params={"watch": "1"}, headers={"Accept": "application/yaml"})
    assert watch.status_code == 406
    assert watch.json()["message"] == (
        "only the following media types are accepted: application/json;stream=watch, "
        "application/vnd.kubernetes.protobuf;stream=watch"
    )
    assert kube.open_watches() == 0


def test_a_metadata_watch_streams_partial_objects_and_bookmarks(
    kube: FakeKube, http: httpx.Client
) -> None:
    listed = [partial(kube.create(secret(name, owner="helm"))) for name in ("one", "two")]
    listed_at = kube.current_rv
    params = {**STREAM, "labelSelector": "owner=helm"}
    with http.stream("GET", SECRETS, params=params, headers={"Accept": METADATA}) as response:
        stream = events(response)
        initial = [next(stream) for _ in range(3)]
        kube.patch("secrets", NS, "one", {"metadata": {"annotations": {"seen": "yes"}}})
        modified = next(stream)
        kube.patch("secrets", NS, "two", {"metadata": {"labels": {"owner": "someone"}}})
        left = next(stream)
        left_at = kube.current_rv
        kube.create(objects.namespace(name="elsewhere"))  # a bookmark needs a newer RV
        kube.bookmark_now("secrets")
        bookmark = next(stream)
    assert initial[:2] == [{"type": "ADDED", "object": obj} for obj in listed]
    assert initial[2] == end_bookmark(listed_at, "PartialObjectMetadata", "meta.k8s.io/v1")
    assert modified == {"type": "MODIFIED", "object": partial(kube.get("secrets", NS, "one"))}
    # Leaving the selection: DELETED with the state it was selected in, at the change's RV.
    assert left["type"] == "DELETED" and left["object"]["kind"] == "PartialObjectMetadata"
    assert left["object"]["metadata"]["labels"] == {"owner": "helm"}
    assert left["object"]["metadata"]["resourceVersion"] == str(left_at)
    assert bookmark["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": str(kube.current_rv)},
    }


def test_a_watch_that_asks_for_a_partial_object_metadata_list_ends_empty_at_its_first_event(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(secret("one"))
    with http.stream("GET", SECRETS, params=STREAM, headers={"Accept": METADATA_LIST}) as response:
        assert response.status_code == 200
        assert response.read() == b""  # and a clean end: no RemoteProtocolError


def test_metadata_is_cut_from_the_stored_bytes_once_per_stored_version() -> None:
    store = Store()
    secrets = resources.resolve("secrets")
    entry = store.create(secrets, secret("one"))
    first = entry.metadata()
    assert msgspec.json.decode(first) == entry.decode()["metadata"]
    assert entry.metadata() is first

    def relabel(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["labels"] = {"version": "2"}
        return obj

    changed = store.modify(secrets, NS, "one", relabel)
    assert msgspec.json.decode(changed.metadata())["labels"] == {"version": "2"}
    assert entry.metadata() is first  # the old version keeps its own


def test_the_request_log_records_each_requests_accept_header(
    kube: FakeKube, http: httpx.Client
) -> None:
    http.get(SECRETS, headers={"Accept": CLIENT_GO_LIST})
    connection = HTTPConnection("127.0.0.1", kube.port, timeout=10)
    connection.request("GET", SECRETS, headers=kube.headers)  # http.client sends no Accept
    assert connection.getresponse().status == 200
    connection.close()
    assert [r.accept for r in kube.requests if r.path == SECRETS] == [CLIENT_GO_LIST, ""]


def test_a_continue_token_serves_its_page_again_after_the_last_page_went_out(
    kube: FakeKube,
) -> None:
    # A client may give a page up while reading it and ask again for fewer objects; a real
    # server's token stays valid until etcd compacts its revision.
    kube.load(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{n}", "namespace": "a"}}
        for n in range(3)
    )
    with httpx.Client(base_url=kube.url, headers=kube.headers, trust_env=False) as http:
        first = http.get("/api/v1/configmaps", params={"limit": "1"}).json()
        token = first["metadata"]["continue"]
        rest = http.get("/api/v1/configmaps", params={"limit": "5", "continue": token})
        again = http.get("/api/v1/configmaps", params={"limit": "1", "continue": token})
    assert [i["metadata"]["name"] for i in rest.json()["items"]] == ["c1", "c2"]
    assert again.status_code == 200
    assert [i["metadata"]["name"] for i in again.json()["items"]] == ["c1"]
