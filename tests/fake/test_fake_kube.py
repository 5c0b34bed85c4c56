"""The fake Kubernetes API server must behave like the real one on the wire, or every
informer, scaling and leader-election test built on it proves nothing. These tests drive it
mostly through the official `kubernetes` client (typed calls, the Watch helper, raw
`_preload_content=False` calls where the helper hides what matters), and through plain
httpx where the client cannot express a request."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from sandbox.kube import ApiError, FakeKube, auth
from sandbox.kube.synthetic import SyntheticSpec, populate
from tests.waiting import wait_until

PROJECT_ROOT = Path(__file__).resolve().parents[2]
NS = "shop"
SUBPROCESS_AUTH = {"Authorization": f"Bearer {auth.DEFAULT_TOKEN}"}


# --- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[FakeKube]:
    with FakeKube(bookmark_interval=0.3, history=50) as kube:
        yield kube


@pytest.fixture
def kube(server: FakeKube) -> FakeKube:
    server.reset()
    server.create(namespace(NS))
    return server


@pytest.fixture(scope="module")
def api(server: FakeKube) -> Iterator[client.ApiClient]:
    with client.ApiClient(server.client_configuration()) as api_client:
        yield api_client


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def pod(
    name: str,
    *,
    ns: str = NS,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    node: str | None = "node-1",
    containers: tuple[str, ...] = ("app",),
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": c, "image": f"{c}:1"} for c in containers]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase},
    }


def deployment(name: str, *, ns: str = NS, replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "shop/web:1",
                            "env": [{"name": "A", "value": "1"}],
                        },
                        {"name": "proxy", "image": "envoy:1"},
                    ]
                },
            },
        },
        "status": {"replicas": replicas, "readyReplicas": replicas},
    }


def raw_events(response: urllib3.BaseHTTPResponse) -> Iterator[dict[str, Any]]:
    """Newline-delimited watch events exactly as they arrive on the wire."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)


def collect(
    stream: Iterator[dict[str, Any]], until: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for event in stream:
        seen.append(event)
        if until(seen):
            break
    return seen


def in_thread(target: Callable[[], Any]) -> dict[str, Any]:
    """Run `target` in a thread; the dict gets "result" or "error" when it ends."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = target()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    outcome["thread"] = thread
    thread.start()
    return outcome


def names(items: list[Any]) -> list[str]:
    return [item.metadata.name for item in items]


class RawAnswer:
    """One request on a connection of its own, its answer read by a thread as it arrives:
    `pieces` holds each read with its `time.monotonic()`, `ended` turns true when the server
    closes (or resets) the connection. Made for watching a dripped answer trickle in."""

    def __init__(
        self, kube: FakeKube, method: str, path: str, body: bytes = b"", content_type: str = ""
    ) -> None:
        self.pieces: list[tuple[float, bytes]] = []
        self.ended = False
        self._socket = socket.create_connection(("127.0.0.1", kube.port), timeout=60)
        lines = [
            f"{method} {path} HTTP/1.1",
            "Host: 127.0.0.1",
            f"Authorization: Bearer {kube.token}",
            f"Content-Length: {len(body)}",
        ]
        if content_type:
            lines.append(f"Content-Type: {content_type}")
        self.sent = time.monotonic()  # before the server can have seen the request
        self._socket.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while piece := self._socket.recv(65536):
                self.pieces.append((time.monotonic(), piece))
        except OSError:
            pass
        self.ended = True

    @property
    def data(self) -> bytes:
        return b"".join(piece for _, piece in list(self.pieces))

    @property
    def head(self) -> bytes | None:
        """The status line and headers, once they have all arrived."""
        data = self.data
        end = data.find(b"\r\n\r\n")
        return None if end < 0 else data[: end + 4]

    @property
    def body(self) -> bytes:
        head = self.head
        return b"" if head is None else self.data[len(head) :]

    @property
    def complete(self) -> bool:
        head = self.head
        if head is None:
            return False
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return len(self.body) >= length

    def arrival(self, offset: int) -> float:
        """When the answer's byte at `offset` was read (no sooner than it was sent)."""
        seen = 0
        for at, piece in list(self.pieces):
            seen += len(piece)
            if offset < seen:
                return at
        raise IndexError(offset)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        self._reader.join(timeout=5)


@pytest.fixture
def raw() -> Iterator[Callable[..., RawAnswer]]:
    opened: list[RawAnswer] = []

    def start(kube: FakeKube, method: str, path: str, *args: Any) -> RawAnswer:
        answer = RawAnswer(kube, method, path, *args)
        opened.append(answer)
        return answer

    yield start
    for answer in opened:
        answer.close()


def new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread not in before]


# --- lists -----------------------------------------------------------------------------------


def test_a_paginated_list_serves_every_object_once_from_the_first_pages_snapshot(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    for i in range(7):
        kube.create(pod(f"p{i}"))
    first = core.list_namespaced_pod(NS, limit=3)
    assert names(first.items) == ["p0", "p1", "p2"]
    assert first.metadata.remaining_item_count == 4
    # Writes after the first page do not show up in the rest of that list.
    kube.create(pod("p7"))
    kube.delete("pods", NS, "p5")
    second = core.list_namespaced_pod(NS, limit=3, _continue=first.metadata.var_continue)
    third = core.list_namespaced_pod(NS, limit=3, _continue=second.metadata.var_continue)
    assert names(second.items) + names(third.items) == ["p3", "p4", "p5", "p6"]
    assert third.metadata.var_continue is None
    assert first.metadata.resource_version == second.metadata.resource_version
    assert first.metadata.resource_version == third.metadata.resource_version
    # List items carry no kind/apiVersion, as upstream; single reads do.
    raw = httpx.get(f"{kube.url}/api/v1/namespaces/{NS}/pods", headers=kube.headers).json()
    assert raw["kind"] == "PodList" and raw["apiVersion"] == "v1"
    assert "kind" not in raw["items"][0] and "apiVersion" not in raw["items"][0]
    single = httpx.get(f"{kube.url}/api/v1/namespaces/{NS}/pods/p0", headers=kube.headers).json()
    assert (single["kind"], single["apiVersion"]) == ("Pod", "v1")


def test_namespaced_resources_are_listed_per_namespace_and_across_all_of_them(
    kube: FakeKube, core: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    kube.create(namespace("other"))
    kube.create(pod("a"))
    kube.create(pod("b", ns="other"))
    kube.create(deployment("web", ns="other"))
    assert names(core.list_namespaced_pod(NS).items) == ["a"]
    assert names(core.list_pod_for_all_namespaces().items) == ["b", "a"]  # "other/b" < "shop/a"
    assert names(apps.list_deployment_for_all_namespaces().items) == ["web"]
    assert names(core.list_namespace().items) == ["other", "shop"]


def test_an_expired_continue_token_answers_410_with_a_token_to_go_on_inconsistently(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    for i in range(5):
        kube.create(pod(f"p{i}"))
    first = core.list_namespaced_pod(NS, limit=2)
    assert kube.expire_continue_tokens() == 1
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod(NS, limit=2, _continue=first.metadata.var_continue)
    assert caught.value.status == 410
    status = json.loads(caught.value.body)
    assert (status["kind"], status["status"], status["reason"], status["code"]) == (
        "Status",
        "Failure",
        "Expired",
        410,
    )
    rest = core.list_namespaced_pod(NS, limit=10, _continue=status["metadata"]["continue"])
    assert names(rest.items) == ["p2", "p3", "p4"]


def test_compaction_expires_continue_tokens_and_watches_from_before_it(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    kube.set_watch_expired_mode("http")
    for i in range(3):
        kube.create(pod(f"p{i}"))
    page = core.list_namespaced_pod(NS, limit=1)
    kube.create(pod("later"))
    assert kube.compact() == kube.current_rv
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod(NS, limit=1, _continue=page.metadata.var_continue)
    assert caught.value.status == 410
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod(
            NS, watch=True, resource_version=page.metadata.resource_version, _preload_content=False
        )
    assert caught.value.status == 410
    # From the compaction point on, watching works again.
    response = core.list_namespaced_pod(
        NS,
        watch=True,
        resource_version=str(kube.current_rv),
        timeout_seconds=1,
        _preload_content=False,
    )
    kube.create(pod("fresh"))
    events = list(raw_events(response))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "fresh")]


def test_history_overflow_makes_old_resource_versions_too_old(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    kube.set_watch_expired_mode("http")
    start = core.list_namespaced_pod(NS).metadata.resource_version
    for i in range(60):  # the module's server keeps 50 changes per resource
        kube.create(pod(f"p{i}"))
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod(NS, watch=True, resource_version=start, _preload_content=False)
    assert caught.value.status == 410
    assert json.loads(caught.value.body)["reason"] == "Expired"


def test_label_selectors_support_equality_sets_and_existence(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    kube.create(pod("web-1", labels={"app": "web", "tier": "front"}))
    kube.create(pod("web-2", labels={"app": "web", "tier": "back"}))
    kube.create(pod("db", labels={"app": "db"}))
    kube.create(pod("bare"))

    def select(selector: str) -> list[str]:
        return names(core.list_namespaced_pod(NS, label_selector=selector).items)

    assert select("app=web") == ["web-1", "web-2"]
    assert select("app==web,tier=back") == ["web-2"]
    assert select("app!=web") == ["bare", "db"]
    assert select("app in (db, web),tier notin (front)") == ["db", "web-2"]
    assert select("tier") == ["web-1", "web-2"]
    assert select("!tier") == ["bare", "db"]
    with pytest.raises(ApiException) as caught:
        select("app in web")
    assert caught.value.status == 400


def test_field_selectors_support_the_real_fields_and_refuse_others_with_400(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    kube.create(pod("running", node="node-1"))
    kube.create(pod("pending", phase="Pending", node=None))
    kube.create(pod("failed", phase="Failed", node="node-2"))
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "helm.sh/release.v1",
            "metadata": {"name": "sh.helm.release.v1.web.v1", "namespace": NS},
        }
    )
    kube.create(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "plain", "namespace": NS}}
    )

    def select(selector: str) -> list[str]:
        return names(core.list_pod_for_all_namespaces(field_selector=selector).items)

    assert select("metadata.name=running") == ["running"]
    assert select(f"metadata.namespace={NS},status.phase!=Running") == ["failed", "pending"]
    assert select("spec.nodeName=node-2") == ["failed"]
    assert select("spec.nodeName=") == ["pending"]
    secrets = core.list_namespaced_secret(NS, field_selector="type=helm.sh/release.v1")
    assert names(secrets.items) == ["sh.helm.release.v1.web.v1"]
    with pytest.raises(ApiException) as caught:
        select("spec.restartCount=3")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == (
        "field label not supported: spec.restartCount"
    )


def test_an_invalid_object_is_named_by_its_group_and_kind(
    kube: FakeKube, api: client.ApiClient
) -> None:
    # staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go, NewInvalid: the message and
    # details name the object's GroupKind, where NotFound and Conflict name its resource.
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 7,
            "maxReplicas": 5,
        },
    }
    with pytest.raises(ApiException) as caught:
        client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(NS, hpa)
    assert caught.value.status == 422
    refusal = json.loads(caught.value.body)
    cause = "Invalid value: 5: must be greater than or equal to `minReplicas`"
    assert refusal["message"] == (
        f'HorizontalPodAutoscaler.autoscaling "web" is invalid: spec.maxReplicas: {cause}'
    )
    assert refusal["details"] == {
        "name": "web",
        "group": "autoscaling",
        "kind": "HorizontalPodAutoscaler",
        "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": "spec.maxReplicas"}],
    }


def test_a_field_selector_on_a_kind_without_field_labels_names_the_two_it_knows(
    core: client.CoreV1Api,
) -> None:
    # No conversion is registered for ConfigMaps, so apimachinery's
    # runtime.DefaultMetaV1FieldSelectorConversion answers (pkg/runtime/conversion.go).
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_config_map(NS, field_selector="data.mode=fast")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == (
        '"data.mode" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


# --- watches ---------------------------------------------------------------------------------


def test_a_watch_from_a_lists_resource_version_sees_only_later_changes(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    kube.create(pod("before"))
    listed = core.list_namespaced_pod(NS)
    kube.create(pod("after", labels={"v": "1"}))
    kube.patch("pods", NS, "after", {"metadata": {"labels": {"v": "2"}}})
    kube.delete("pods", NS, "before")
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        NS,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    )
    events = collect(stream, lambda seen: len(seen) == 3)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "after"),
        ("MODIFIED", "after"),
        ("DELETED", "before"),
    ]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(listed.metadata.resource_version)
    assert events[2]["raw_object"]["kind"] == "Pod"  # watch objects carry kind and apiVersion


def test_a_watch_without_a_resource_version_starts_with_the_current_objects(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    kube.create(pod("one"))
    kube.create(pod("two"))
    for resource_version in (None, "0"):
        kwargs = {"resource_version": resource_version} if resource_version else {}
        response = core.list_namespaced_pod(NS, watch=True, _preload_content=False, **kwargs)
        events = collect(raw_events(response), lambda seen: len(seen) == 2)
        response.release_conn()
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "one"),
            ("ADDED", "two"),
        ]


def test_bookmarks_arrive_periodically_and_on_demand_with_the_current_resource_version(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    # A bookmark only carries news: the cluster's resourceVersion moves past the list's.
    kube.create(namespace("elsewhere"))
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_pod,
        NS,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    )
    first = next(stream)  # periodic: the module's server sends one every 0.3 s
    assert first["type"] == "BOOKMARK"
    assert first["raw_object"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(kube.current_rv)},
        "spec": {"containers": None},  # an empty Pod, as Go encodes one
        "status": {},
    }
    kube.create(pod("new"))
    kube.bookmark_interval = 0  # only on demand from now on (new watches)
    events = collect(stream, lambda seen: seen[-1]["type"] == "ADDED")
    assert events[-1]["object"].metadata.name == "new"
    kube.create(namespace("elsewhere-too"))
    assert kube.bookmark_now("pods") == 1
    bookmark = collect(stream, lambda seen: seen[-1]["type"] == "BOOKMARK")[-1]
    assert bookmark["raw_object"]["metadata"]["resourceVersion"] == str(kube.current_rv)
    assert w.resource_version == str(kube.current_rv)  # the helper advances on bookmarks
    w.stop()


def test_event_watches_get_no_bookmark_but_the_one_ending_their_initial_events(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    # kube-apiserver watches Events straight from etcd, outside its watch cache.
    rv = core.list_namespaced_event(NS).metadata.resource_version
    kube.create(namespace("elsewhere"))  # news a bookmark could carry
    w = watch.Watch()
    quiet = w.stream(
        core.list_namespaced_event,
        NS,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=3,  # a cached resource would get its last bookmark 2 s before it
        _request_timeout=(5, 30),
    )
    assert kube.bookmark_now("events") == 0
    assert list(quiet) == []  # 0.3 s periodic bookmarks elsewhere on this server
    streamed = httpx.get(
        f"{kube.url}/api/v1/namespaces/{NS}/events",
        params={
            "watch": "1",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "1",
        },
        headers=kube.headers,
    )
    [end] = [json.loads(line) for line in streamed.text.splitlines()]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_timeout_seconds_ends_the_stream_cleanly(kube: FakeKube, core: client.CoreV1Api) -> None:
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    started = time.monotonic()
    # A server that ignored timeoutSeconds would leave the client's read timeout to end the
    # stream, with an error instead of a clean end.
    events = list(
        watch.Watch().stream(
            core.list_namespaced_pod,
            NS,
            resource_version=rv,
            timeout_seconds=1,
            _request_timeout=(5, 30),
        )
    )
    assert events == []
    assert time.monotonic() - started >= 0.9  # held open until the timeout, not closed at once
    assert kube.requests[-1].status == 200 and kube.requests[-1].watch


def test_a_too_old_resource_version_is_an_error_event_by_default(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    old = core.list_namespaced_pod(NS).metadata.resource_version
    kube.create(pod("x"))
    kube.compact()
    response = core.list_namespaced_pod(
        NS, watch=True, resource_version=old, _preload_content=False
    )
    assert response.status == 200
    events = list(raw_events(response))  # one ERROR event, then the stream ends
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["apiVersion"], status["status"]) == ("Status", "v1", "Failure")
    assert (status["reason"], status["code"]) == ("Expired", 410)
    assert status["message"].startswith(f"too old resource version: {old} (")
    # The Watch helper turns it into an ApiException 410 (it retries once without a timeout).
    with pytest.raises(ApiException) as caught:
        list(watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=old))
    assert caught.value.status == 410


def test_a_too_old_resource_version_can_be_a_410_answer_for_one_kind(
    kube: FakeKube, core: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    old = core.list_namespaced_pod(NS).metadata.resource_version
    kube.create(pod("x"))
    kube.compact()
    kube.set_watch_expired_mode("http", "pods")
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod(NS, watch=True, resource_version=old, _preload_content=False)
    assert caught.value.status == 410
    assert json.loads(caught.value.body)["reason"] == "Expired"
    response = apps.list_namespaced_deployment(
        NS, watch=True, resource_version=old, _preload_content=False
    )
    assert [e["type"] for e in raw_events(response)] == ["ERROR"]


def test_selectors_apply_to_watches_and_an_object_leaving_the_selection_is_deleted(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    kube.create(pod("web", labels={"app": "web"}))
    kube.create(pod("db", labels={"app": "db"}))
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    response = core.list_namespaced_pod(
        NS,
        watch=True,
        resource_version=rv,
        label_selector="app=web",
        field_selector="status.phase=Running",
        timeout_seconds=5,
        _preload_content=False,
    )
    kube.patch("pods", NS, "db", {"metadata": {"labels": {"app": "web"}}})  # joins: ADDED
    kube.patch("pods", NS, "web", {"status": {"phase": "Failed"}})  # leaves: DELETED
    kube.create(pod("other", labels={"app": "other"}))  # never matches
    kube.patch("pods", NS, "db", {"metadata": {"annotations": {"a": "b"}}})  # stays: MODIFIED
    events = collect(raw_events(response), lambda seen: len(seen) == 3)
    response.release_conn()
    summary = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert summary == [("ADDED", "db"), ("DELETED", "web"), ("MODIFIED", "db")]
    deleted = events[1]["object"]
    assert deleted["status"]["phase"] == "Running"  # the last state that matched...
    assert int(deleted["metadata"]["resourceVersion"]) > int(rv)  # ...at the change's RV


def test_a_namespaced_watch_sees_only_its_namespace(kube: FakeKube, core: client.CoreV1Api) -> None:
    kube.create(namespace("other"))
    rv = str(kube.current_rv)
    response = core.list_namespaced_pod(
        "other", watch=True, resource_version=rv, timeout_seconds=5, _preload_content=False
    )
    kube.create(pod("mine"))
    kube.create(pod("theirs", ns="other"))
    events = collect(raw_events(response), lambda seen: True)
    response.release_conn()
    assert [e["object"]["metadata"]["name"] for e in events] == ["theirs"]


def test_watches_also_answer_the_legacy_watch_path_and_send_initial_events(
    kube: FakeKube,
) -> None:
    kube.create(pod("one"))
    with httpx.stream(
        "GET",
        f"{kube.url}/api/v1/watch/namespaces/{NS}/pods",
        headers=kube.headers,
        params={
            "sendInitialEvents": "true",
            "allowWatchBookmarks": "true",
            "resourceVersionMatch": "NotOlderThan",
            "timeoutSeconds": "1",
        },
    ) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        events = [json.loads(line) for line in response.iter_lines() if line]
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    end = events[1]["object"]["metadata"]
    assert end["annotations"] == {"k8s.io/initial-events-end": "true"}


# --- writes ----------------------------------------------------------------------------------


def test_create_get_and_replace_follow_optimistic_concurrency(
    kube: FakeKube, apps: client.AppsV1Api
) -> None:
    created = apps.create_namespaced_deployment(NS, deployment("web"))
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert created.metadata.generation == 1
    with pytest.raises(ApiException) as caught:
        apps.create_namespaced_deployment(NS, deployment("web"))
    assert caught.value.status == 409
    assert json.loads(caught.value.body)["reason"] == "AlreadyExists"

    current = apps.read_namespaced_deployment("web", NS)
    assert current.metadata.resource_version == created.metadata.resource_version
    current.spec.replicas = 5
    replaced = apps.replace_namespaced_deployment("web", NS, current)
    assert replaced.spec.replicas == 5
    assert replaced.metadata.generation == 2
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    assert replaced.metadata.uid == created.metadata.uid

    current.spec.replicas = 7  # still carries the old resourceVersion
    with pytest.raises(ApiException) as caught:
        apps.replace_namespaced_deployment("web", NS, current)
    assert caught.value.status == 409
    status = json.loads(caught.value.body)
    assert status["reason"] == "Conflict"
    assert "the object has been modified" in status["message"]
    with pytest.raises(ApiException) as caught:
        apps.read_namespaced_deployment("missing", NS)
    assert caught.value.status == 404
    assert json.loads(caught.value.body)["message"] == 'deployments.apps "missing" not found'


def test_status_is_written_only_through_the_status_subresource(
    kube: FakeKube, apps: client.AppsV1Api
) -> None:
    kube.create(deployment("web", replicas=2))
    main = apps.patch_namespaced_deployment(
        "web", NS, {"metadata": {"labels": {"x": "1"}}, "status": {"readyReplicas": 0}}
    )
    assert main.status.ready_replicas == 2  # the main resource ignores status...
    assert main.metadata.generation == 1  # ...and a metadata change is not a new generation
    status = apps.patch_namespaced_deployment_status(
        "web", NS, {"metadata": {"labels": {"y": "1"}}, "status": {"readyReplicas": 1}}
    )
    assert status.status.ready_replicas == 1  # the subresource changes only status
    assert "y" not in status.metadata.labels
    assert apps.read_namespaced_deployment_status("web", NS).status.ready_replicas == 1
    # Python-side writes, like a controller's, may set anything.
    kube.patch("deployments", NS, "web", {"status": {"readyReplicas": 2}})
    assert kube.get("deployments", NS, "web")["status"]["readyReplicas"] == 2


def test_delete_removes_at_once_and_a_second_delete_is_404(
    kube: FakeKube, core: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    kube.create(deployment("web"))
    kube.create(pod("p"))
    status = apps.delete_namespaced_deployment("web", NS)
    assert status["status"] == "Success" and status["details"]["name"] == "web"
    deleted = core.delete_namespaced_pod("p", NS)  # pods answer with the object
    assert deleted.metadata.name == "p"
    for call in (
        lambda: apps.delete_namespaced_deployment("web", NS),
        lambda: core.read_namespaced_pod("p", NS),
    ):
        with pytest.raises(ApiException) as caught:
            call()
        assert caught.value.status == 404


def test_deleting_a_namespace_deletes_what_it_holds(kube: FakeKube, core: client.CoreV1Api) -> None:
    kube.create(pod("p"))
    kube.create(deployment("web"))
    core.delete_namespace(NS)
    assert kube.list("pods") == [] and kube.list("deployments") == []


def test_create_fills_identity_and_honours_generate_name(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    body = {"metadata": {"generateName": "job-", "uid": "forged"}, "data": {"k": "v"}}
    created = core.create_namespaced_config_map(NS, body)
    assert created.metadata.name.startswith("job-") and len(created.metadata.name) == 9
    assert created.metadata.uid != "forged"
    assert created.metadata.resource_version == str(kube.current_rv)
    assert kube.requests[-1].status == 201


def test_pod_logs_are_served_as_text_with_tail_lines_container_and_previous(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    kube.create(pod("job-x", containers=("main", "sidecar")))
    kube.set_pod_log(NS, "job-x", "main", "".join(f"line {i}\n" for i in range(1, 301)))
    kube.set_pod_log(NS, "job-x", "main", "crashed\n", previous=True)
    text = core.read_namespaced_pod_log("job-x", NS, container="main", tail_lines=200)
    lines = text.splitlines()
    assert len(lines) == 200 and lines[0] == "line 101" and lines[-1] == "line 300"
    assert core.read_namespaced_pod_log("job-x", NS, container="main", previous=True) == "crashed\n"
    assert core.read_namespaced_pod_log("job-x", NS, container="sidecar") == ""
    raw = httpx.get(
        f"{kube.url}/api/v1/namespaces/{NS}/pods/job-x/log?container=main&tailLines=1",
        headers=kube.headers,
    )
    assert raw.headers["content-type"] == "text/plain" and raw.text == "line 300\n"
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod_log("job-x", NS)  # two containers: which one?
    assert caught.value.status == 400
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod_log("gone", NS, container="main")
    assert caught.value.status == 404
    # A pod no node runs yet has no kubelet to ask: kube-apiserver answers 204, no body.
    kube.create(pod("pending", node=None))
    unscheduled = httpx.get(
        f"{kube.url}/api/v1/namespaces/{NS}/pods/pending/log?container=app", headers=kube.headers
    )
    assert (unscheduled.status_code, unscheduled.content) == (204, b"")
    assert "content-type" not in unscheduled.headers


def test_leases_can_be_created_and_renewed_with_a_resource_version(
    kube: FakeKube, api: client.ApiClient
) -> None:
    leases = client.CoordinationV1Api(api)
    body = {
        "metadata": {"name": "moonin-discovery"},
        "spec": {
            "holderIdentity": "pod-a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.500000Z",
            "renewTime": "2026-01-01T00:00:00.500000Z",
        },
    }
    created = leases.create_namespaced_lease(NS, body)
    # The client prints a datetime without microseconds when they are zero, which a real
    # server refuses for a MicroTime (apimachinery's micro_time.go parses RFC3339Micro).
    created.spec.renew_time = created.spec.renew_time.replace(second=10, microsecond=0)
    with pytest.raises(ApiException) as unparsable:
        leases.replace_namespaced_lease("moonin-discovery", NS, created)
    assert unparsable.value.status == 400
    created.spec.renew_time = created.spec.renew_time.replace(microsecond=250)
    renewed = leases.replace_namespaced_lease("moonin-discovery", NS, created)
    assert renewed.spec.holder_identity == "pod-a"
    assert renewed.spec.renew_time.second == 10
    created.spec.holder_identity = "pod-b"  # a competitor with the old resourceVersion
    with pytest.raises(ApiException) as caught:
        leases.replace_namespaced_lease("moonin-discovery", NS, created)
    assert caught.value.status == 409
    assert leases.read_namespaced_lease("moonin-discovery", NS).spec.holder_identity == "pod-a"


def test_events_can_be_recorded_in_both_event_apis(
    kube: FakeKube, core: client.CoreV1Api, api: client.ApiClient
) -> None:
    event = {
        "metadata": {"generateName": "web."},
        "involvedObject": {
            "kind": "HorizontalPodAutoscaler",
            "name": "web",
            "namespace": NS,
            "apiVersion": "autoscaling/v2",
        },
        "reason": "MooninScalingApplied",
        "message": "min 3, max 10 until 18:00",
        "type": "Normal",
        "source": {"component": "moonin-scaling"},
    }
    created = core.create_namespaced_event(NS, event)
    assert created.reason == "MooninScalingApplied"
    found = core.list_namespaced_event(
        NS, field_selector="involvedObject.kind=HorizontalPodAutoscaler,source=moonin-scaling"
    )
    assert [e.metadata.name for e in found.items] == [created.metadata.name]
    events_v1 = client.EventsV1Api(api)
    modern = events_v1.create_namespaced_event(
        NS,
        {
            "metadata": {"name": "web.1"},
            "eventTime": "2026-01-01T00:00:00.250000Z",
            "reason": "Scaled",
            "action": "Scale",
            "reportingController": "moonin",
            "reportingInstance": "pod-a",
            "type": "Normal",
            "regarding": {"kind": "Deployment", "name": "web", "namespace": NS},
        },
    )
    assert modern.regarding.name == "web"
    assert [e.metadata.name for e in events_v1.list_namespaced_event(NS).items] == ["web.1"]


def test_version_and_discovery_documents_are_served(kube: FakeKube, api: client.ApiClient) -> None:
    info = client.VersionApi(api).get_code()
    assert (info.git_version, info.major, info.minor, info.platform) == (
        "v1.37.1",
        "1",
        "37",
        "linux/amd64",
    )
    assert "v1" in client.CoreApi(api).get_api_versions().versions
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert {"apps", "batch", "autoscaling", "coordination.k8s.io", "events.k8s.io"} <= groups
    resources = client.AppsV1Api(api).get_api_resources()
    assert {r.name for r in resources.resources} >= {"deployments", "deployments/status"}
    core_resources = httpx.get(f"{kube.url}/api/v1", headers=kube.headers).json()
    assert "pods/log" in {r["name"] for r in core_resources["resources"]}
    assert httpx.get(f"{kube.url}/apis/nothing.example/v1", headers=kube.headers).status_code == 404


def test_python_side_refusals_raise_api_error_with_the_status(kube: FakeKube) -> None:
    with pytest.raises(ApiError) as caught:
        kube.get("pods", NS, "missing")
    assert caught.value.code == 404
    assert caught.value.status()["reason"] == "NotFound"
    created = kube.create(pod("p"))
    kube.patch("pods", NS, "p", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApiError) as caught:
        kube.update(created)  # still at the old resourceVersion
    assert caught.value.code == 409
    with pytest.raises(KeyError):
        kube.list("widgets")


# --- faults ----------------------------------------------------------------------------------


def _watch_pods_and_deployments(
    kube: FakeKube, core: client.CoreV1Api, apps: client.AppsV1Api
) -> tuple[Any, Any]:
    """Watches of both kinds from now on, open once the fake counts both."""
    rv = str(kube.current_rv)
    pods = core.list_namespaced_pod(
        NS, watch=True, resource_version=rv, timeout_seconds=5, _preload_content=False
    )
    deployments = apps.list_namespaced_deployment(
        NS, watch=True, resource_version=rv, timeout_seconds=5, _preload_content=False
    )
    kube.wait_for_watches(2)
    return pods, deployments


def test_dropping_watches_cuts_the_connection_mid_stream(
    kube: FakeKube, core: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    pods, deployments = _watch_pods_and_deployments(kube, core, apps)
    kube.create(pod("p"))
    stream = raw_events(pods)
    assert next(stream)["type"] == "ADDED"
    assert kube.drop_watches("pods") == 1
    with pytest.raises(urllib3.exceptions.ProtocolError):
        next(stream)
    kube.create(deployment("web"))  # the other kind's watch is untouched
    assert next(raw_events(deployments))["object"]["metadata"]["name"] == "web"
    deployments.release_conn()


def test_expiring_open_watches_sends_a_410_error_event_mid_stream_then_ends_cleanly(
    kube: FakeKube, core: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    pods, deployments = _watch_pods_and_deployments(kube, core, apps)
    kube.create(pod("p"))
    assert kube.expire_open_watches("pods") == 1
    events = list(raw_events(pods))  # ends cleanly: no ProtocolError
    assert [event["type"] for event in events] == ["ADDED", "ERROR"]
    # What etcd's watch answers once a compaction passed it: interpretWatchError in
    # staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go.
    status = events[1]["object"]
    assert (status["kind"], status["status"]) == ("Status", "Failure")
    assert (status["reason"], status["code"]) == ("Expired", 410)
    assert status["message"] == "The resourceVersion for the provided watch is too old."
    kube.create(deployment("web"))  # the other kind's watch is untouched
    assert next(raw_events(deployments))["object"]["metadata"]["name"] == "web"
    deployments.release_conn()


def test_a_reset_ends_open_watches_and_forgets_them_at_once(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    pods = core.list_namespaced_pod(
        NS,
        watch=True,
        resource_version=str(kube.current_rv),
        timeout_seconds=30,
        _preload_content=False,
    )
    kube.wait_for_watches(1, "pods")
    kube.reset()
    # Not counted any more, even before the stream's thread has ended it: the next test's
    # `wait_for_watches` waits for a watch of its own.
    assert kube.open_watches() == 0
    assert list(raw_events(pods)) == []  # ended cleanly, with nothing after the reset
    pods.release_conn()


def test_a_stalled_watch_sends_nothing_and_only_a_client_read_timeout_ends_it(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_pod,
        NS,
        resource_version=str(kube.current_rv),
        allow_watch_bookmarks=True,
        timeout_seconds=30,
        _request_timeout=(5, 1),
    )
    outcome = in_thread(lambda: [e["type"] for e in stream])
    kube.wait_for_watches(1, "pods")
    assert kube.stall_watches("pods") == 1
    kube.create(pod("unseen"))
    outcome["thread"].join(timeout=5)
    assert isinstance(outcome.get("error"), urllib3.exceptions.ReadTimeoutError)
    wait_until(lambda: kube.open_watches("pods") == 0)  # the server noticed the client gave up


@pytest.mark.parametrize(("code", "reason"), [(403, "Forbidden"), (500, "InternalError")])
def test_the_next_requests_can_be_made_to_fail_with_the_real_status(
    kube: FakeKube, core: client.CoreV1Api, code: int, reason: str
) -> None:
    kube.fail_next(code, 2, resource="pods")
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            core.list_namespaced_pod(NS)
        assert caught.value.status == code
        assert json.loads(caught.value.body)["reason"] == reason
    core.list_namespaced_pod(NS)  # used up
    core.list_namespace()
    assert [r.status for r in kube.requests[-4:]] == [code, code, 200, 200]


def test_a_429_carries_retry_after_which_the_client_obeys_unless_told_not_to_retry(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    # urllib3's default retry policy, which the client inherits, silently retries a GET
    # answered 429 (or 503) with a Retry-After header, after sleeping that long.
    kube.fail_next(429, resource="pods", retry_after=0)
    assert core.list_namespaced_pod(NS).items == []
    assert [r.status for r in kube.requests[-2:]] == [429, 200]

    configuration = kube.client_configuration()
    configuration.retries = False
    with client.ApiClient(configuration) as no_retries:
        kube.fail_next(429, resource="pods")
        with pytest.raises(ApiException) as caught:
            client.CoreV1Api(no_retries).list_namespaced_pod(NS)
    assert caught.value.status == 429
    assert caught.value.headers["Retry-After"] == "1"
    status = json.loads(caught.value.body)
    assert (status["reason"], status["details"]) == ("TooManyRequests", {"retryAfterSeconds": 1})


def test_a_fault_can_target_a_path_prefix(kube: FakeKube, api: client.ApiClient) -> None:
    kube.fail_next(500, path_prefix="/version")
    with pytest.raises(ApiException) as caught:
        client.VersionApi(api).get_code()
    assert caught.value.status == 500
    assert client.VersionApi(api).get_code().major == "1"


def test_a_fault_can_target_one_verb_so_a_write_fails_after_its_read(
    kube: FakeKube, apps: client.AppsV1Api
) -> None:
    kube.create(deployment("web"))
    kube.fail_next(409, resource="deployments", verb="patch")
    current = apps.read_namespaced_deployment("web", NS)  # the read is not the patch
    fresh = {"metadata": {"resourceVersion": current.metadata.resource_version}}
    with pytest.raises(ApiException) as caught:
        apps.patch_namespaced_deployment(
            "web", NS, fresh, _content_type="application/merge-patch+json"
        )
    assert caught.value.status == 409
    status = json.loads(caught.value.body)
    assert (status["reason"], status["details"]) == (
        "Conflict",
        {"group": "apps", "kind": "deployments"},
    )
    assert status["message"].startswith("Operation cannot be fulfilled on deployments.apps")
    assert kube.get("deployments", NS, "web")["metadata"]["resourceVersion"] == (
        current.metadata.resource_version  # a faulted write changes nothing
    )
    apps.patch_namespaced_deployment("web", NS, fresh, _content_type="application/merge-patch+json")


def test_a_forbidden_kind_keeps_failing_while_the_others_work(
    kube: FakeKube, core: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    kube.forbid("pods")
    for call in (
        lambda: core.list_pod_for_all_namespaces(),
        lambda: core.list_namespaced_pod(NS, watch=True, _preload_content=False),
        lambda: core.create_namespaced_pod(NS, pod("p")),
    ):
        with pytest.raises(ApiException) as caught:
            call()
        assert caught.value.status == 403
    message = json.loads(caught.value.body)["message"]
    assert message.startswith('pods is forbidden: User "system:serviceaccount:')
    assert apps.list_deployment_for_all_namespaces().items == []
    kube.allow("pods")
    assert core.list_pod_for_all_namespaces().items == []


def test_every_request_is_logged(kube: FakeKube, core: client.CoreV1Api) -> None:
    kube.clear_requests()
    core.list_namespaced_pod(NS, limit=5, label_selector="app=web")
    with pytest.raises(ApiException):
        core.read_namespaced_pod("missing", NS)
    first, second = kube.requests
    assert (first.method, first.path, first.status, first.resource, first.watch) == (
        "GET",
        f"/api/v1/namespaces/{NS}/pods",
        200,
        "pods",
        False,
    )
    assert first.query == {"limit": "5", "labelSelector": "app=web"}
    assert (second.path, second.status) == (f"/api/v1/namespaces/{NS}/pods/missing", 404)


def test_a_dripped_get_sends_its_head_at_once_and_its_body_a_byte_at_a_time(
    kube: FakeKube, raw: Callable[..., RawAnswer]
) -> None:
    every = 0.05
    kube.drip_next(resource="namespaces", verb="get", every=every)
    answer = raw(kube, "GET", f"/api/v1/namespaces/{NS}")
    wait_until(lambda: len(answer.body) >= 5)
    assert answer.head is not None and answer.head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Type: application/json\r\n" in answer.head
    start = len(answer.head)
    # Lower bounds only (a slow test thread reads late, never early): body byte k leaves
    # k * every after the head, and byte 5 leaves 4 * every after byte 1.
    for k in range(1, 6):
        assert answer.arrival(start + k - 1) - answer.sent >= 0.9 * k * every
    assert answer.arrival(start + 4) - answer.arrival(start) >= every
    assert (kube.requests[-1].path, kube.requests[-1].status) == (f"/api/v1/namespaces/{NS}", 200)
    # The drip is used up: the same request is answered at once, and began the same way.
    assert httpx.get(f"{kube.url}/api/v1/namespaces/{NS}", headers=kube.headers).content.startswith(
        answer.body
    )


@pytest.mark.parametrize("headers", [False, True])
def test_a_dripped_answer_once_complete_is_the_same_json_as_a_normal_one(
    kube: FakeKube, core: client.CoreV1Api, headers: bool
) -> None:
    # The whole answer takes its length times `every`: a short one, dripped quickly.
    every = 0.005
    normal = core.list_namespaced_config_map(NS, _preload_content=False).data
    kube.drip_next(resource="configmaps", every=every, headers=headers)
    started = time.monotonic()
    dripped = core.list_namespaced_config_map(NS, _preload_content=False)
    body = dripped.data  # read to its end (headers=False: the call returned before the body)
    assert time.monotonic() - started >= 0.9 * every * len(normal)  # it was dripped
    assert dripped.status == 200
    assert dripped.headers["Content-Type"] == "application/json"
    assert json.loads(body) == json.loads(normal)
    assert body == normal
    assert core.list_namespaced_config_map(NS).items == []  # the connection is reusable


def test_a_dripped_patch_changes_the_object_while_its_answer_trickles(
    kube: FakeKube, raw: Callable[..., RawAnswer]
) -> None:
    kube.create(deployment("web"))
    kube.drip_next(resource="deployments", verb="patch", every=0.05)
    answer = raw(
        kube,
        "PATCH",
        f"/apis/apps/v1/namespaces/{NS}/deployments/web",
        b'{"spec":{"replicas":5}}',
        "application/merge-patch+json",
    )
    wait_until(lambda: kube.get("deployments", NS, "web")["spec"]["replicas"] == 5)
    wait_until(lambda: answer.head is not None)
    assert answer.head is not None and answer.head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert (kube.requests[-1].method, kube.requests[-1].status) == ("PATCH", 200)


def test_a_drip_with_headers_delays_the_status_line_too(
    kube: FakeKube, raw: Callable[..., RawAnswer]
) -> None:
    every = 0.05
    kube.drip_next(resource="namespaces", every=every, headers=True)
    answer = raw(kube, "GET", f"/api/v1/namespaces/{NS}")
    status_line = b"HTTP/1.1 200 OK\r\n"
    wait_until(lambda: answer.data.startswith(status_line))
    assert answer.arrival(0) - answer.sent >= 0.9 * every
    assert answer.arrival(len(status_line) - 1) - answer.sent >= 0.9 * len(status_line) * every
    assert kube.requests[-1].status == 200  # logged as usual, as soon as it was decided


def test_a_drip_is_used_up_by_count_matching_requests_and_the_next_is_normal(
    kube: FakeKube, raw: Callable[..., RawAnswer]
) -> None:
    # A byte a minute: a dripped answer cannot complete within `wait_until`'s time.
    kube.drip_next(2, resource="namespaces", verb="get", every=60)
    listing = raw(kube, "GET", "/api/v1/namespaces")  # verb `list`: no match, nothing used
    wait_until(lambda: listing.complete)
    dripped = []
    for _ in range(2):
        dripped.append(raw(kube, "GET", f"/api/v1/namespaces/{NS}"))
        wait_until(lambda: dripped[-1].head is not None)  # one at a time: the order is known
    normal = raw(kube, "GET", f"/api/v1/namespaces/{NS}")
    wait_until(lambda: normal.complete)
    assert json.loads(normal.body) == kube.get("namespaces", None, NS)
    assert [r.status for r in kube.requests[-4:]] == [200, 200, 200, 200]
    kube.clear_faults()  # cuts the dripped answers only
    wait_until(lambda: all(answer.ended for answer in dripped))
    assert not any(answer.complete for answer in dripped)
    assert not normal.ended and not listing.ended  # kept alive


def test_a_failure_comes_before_a_drip_and_a_watch_neither_drips_nor_uses_one_up(
    kube: FakeKube, core: client.CoreV1Api, raw: Callable[..., RawAnswer]
) -> None:
    with pytest.raises(ValueError, match="stall_watches"):
        kube.drip_next(verb="watch")
    kube.fail_next(500, resource="pods", verb="get")
    kube.drip_next(resource="pods", every=60)
    pods = core.list_namespaced_pod(
        NS,
        watch=True,
        resource_version=str(kube.current_rv),
        timeout_seconds=5,
        _preload_content=False,
    )
    kube.wait_for_watches(1, "pods")
    kube.create(pod("p"))
    assert next(raw_events(pods))["object"]["metadata"]["name"] == "p"
    pods.release_conn()
    failed = raw(kube, "GET", f"/api/v1/namespaces/{NS}/pods/p")
    wait_until(lambda: failed.complete)  # the failure, answered at once
    assert failed.head is not None and failed.head.startswith(b"HTTP/1.1 500 ")
    dripped = raw(kube, "GET", f"/api/v1/namespaces/{NS}/pods/p")  # the drip is still there
    wait_until(lambda: dripped.head is not None)
    assert dripped.head is not None and dripped.head.startswith(b"HTTP/1.1 200 ")
    kube.clear_faults()
    wait_until(lambda: dripped.ended)
    assert not dripped.complete


@pytest.mark.parametrize("end", ["reset", "clear_faults", "stop"])
def test_reset_clear_faults_and_stop_end_a_drip_in_progress_and_its_thread(
    raw: Callable[..., RawAnswer], end: str
) -> None:
    with FakeKube() as own:
        own.create(namespace(NS))
        before = set(threading.enumerate())
        # A byte a minute: only ending the drip can end this answer within `wait_until`'s time.
        own.drip_next(resource="namespaces", every=60)
        answer = raw(own, "GET", f"/api/v1/namespaces/{NS}")
        wait_until(lambda: answer.head is not None)
        getattr(own, end)()
        wait_until(lambda: answer.ended)
        assert not answer.complete
        wait_until(lambda: not new_threads(before))  # the handler is not left waiting


def test_a_drip_ends_when_its_client_goes_away(raw: Callable[..., RawAnswer]) -> None:
    with FakeKube() as own:
        own.create(namespace(NS))
        before = set(threading.enumerate())
        own.drip_next(resource="namespaces", every=0.05)
        answer = raw(own, "GET", f"/api/v1/namespaces/{NS}")
        wait_until(lambda: len(answer.body) >= 1)
        answer.close()
        wait_until(lambda: not new_threads(before))  # its next byte's write failed


# --- clients, synthetic cluster, subprocess ---------------------------------------------------


def test_a_written_kubeconfig_connects_the_official_client(kube: FakeKube, tmp_path: Path) -> None:
    path = kube.kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    api_client = config.new_client_from_config(config_file=str(path))
    with api_client:
        assert names(client.CoreV1Api(api_client).list_namespace().items) == [NS]
    assert config.list_kube_config_contexts(str(path))[1]["context"]["namespace"] == NS


def test_a_synthetic_cluster_is_served_in_pages_and_its_objects_fit_the_client_models() -> None:
    spec = SyntheticSpec(
        namespaces=20, deployments=200, pods=2000, nodes=20, cronjobs=20, services=40, jobs=5
    )
    with FakeKube() as kube, client.ApiClient(kube.client_configuration()) as api_client:
        counts = populate(kube, spec)
        assert counts["pods"] == 2000 + 5 and counts["deployments.apps"] == 200
        core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
        seen: set[tuple[str, str]] = set()
        token, pages, resource_versions = None, 0, set()
        while True:  # raw pages, as the agent's informers read them
            response = core.list_pod_for_all_namespaces(
                limit=500, _continue=token, _preload_content=False
            )
            page = json.loads(response.data)
            seen.update((p["metadata"]["namespace"], p["metadata"]["name"]) for p in page["items"])
            resource_versions.add(page["metadata"]["resourceVersion"])
            pages += 1
            token = page["metadata"].get("continue")
            if not token:
                break
        assert len(seen) == counts["pods"] and pages == 5 and len(resource_versions) == 1
        # A page of every kind deserializes into the client's strict models.
        batch, autoscaling = client.BatchV1Api(api_client), client.AutoscalingV2Api(api_client)
        for list_call in (
            core.list_pod_for_all_namespaces,
            core.list_node,
            core.list_namespace,
            core.list_service_for_all_namespaces,
            core.list_endpoints_for_all_namespaces,
            core.list_event_for_all_namespaces,
            core.list_secret_for_all_namespaces,
            core.list_config_map_for_all_namespaces,
            core.list_service_account_for_all_namespaces,
            apps.list_deployment_for_all_namespaces,
            apps.list_replica_set_for_all_namespaces,
            batch.list_cron_job_for_all_namespaces,
            batch.list_job_for_all_namespaces,
            autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces,
            client.NetworkingV1Api(api_client).list_ingress_for_all_namespaces,
            client.NetworkingV1Api(api_client).list_network_policy_for_all_namespaces,
            client.RbacAuthorizationV1Api(api_client).list_cluster_role,
            client.RbacAuthorizationV1Api(api_client).list_role_binding_for_all_namespaces,
            client.CoordinationV1Api(api_client).list_lease_for_all_namespaces,
        ):
            assert list_call(limit=50).items, list_call
        # Failed Job pods have logs to read.
        failed = [j for j in batch.list_job_for_all_namespaces().items if j.status.failed]
        job_pod = core.list_pod_for_all_namespaces(
            label_selector=f"job-name={failed[0].metadata.name}"
        ).items[0]
        log = core.read_namespaced_pod_log(
            job_pod.metadata.name, job_pod.metadata.namespace, tail_lines=200
        )
        assert len(log.splitlines()) == 200
        # Watches work on the synthetic cluster as on any other.
        rv = str(kube.current_rv)
        target = kube.list("deployments", "payments-prod")[0]["metadata"]["name"]
        kube.patch("deployments", "payments-prod", target, {"spec": {"replicas": 9}})
        stream = watch.Watch().stream(
            apps.list_deployment_for_all_namespaces, resource_version=rv, timeout_seconds=5
        )
        event = next(stream)
        assert event["type"] == "MODIFIED" and event["object"].spec.replicas == 9


def test_the_subprocess_mode_prints_its_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox.kube",
            "--port",
            "0",
            "--synthetic",
            "--namespaces",
            "3",
            "--deployments",
            "6",
            "--pods",
            "30",
            "--nodes",
            "2",
            "--cronjobs",
            "2",
            "--services",
            "3",
            "--kubeconfig",
            str(kubeconfig),
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("URL http://127.0.0.1:")
        url = line.split()[1]
        pods = httpx.get(
            f"{url}/api/v1/pods", params={"limit": "10"}, headers=SUBPROCESS_AUTH
        ).json()
        assert pods["kind"] == "PodList" and len(pods["items"]) == 10
        assert pods["metadata"]["remainingItemCount"] == 30 + 0 - 10  # 2 cronjobs: no Jobs
        assert httpx.get(f"{url}/version").json()["gitVersion"] == "v1.37.1"
        assert kubeconfig.exists()
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    assert "synthetic cluster:" in stderr
