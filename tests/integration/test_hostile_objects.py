"""One object no informer can use (a number past 64 bits, JSON nested 100,000 deep, a value
the state store cannot hold) is skipped and reported; its informer and every other object of
its kind go on, however the object arrives: in a list page, a streamed list or a watch."""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec
import pytest
import structlog.testing

from agent.health_watch import HealthWatch
from agent.metrics import AgentMetrics
from collector import relations, resources
from collector.collector import Collector
from collector.informer import Informer
from collector.model import parse_int64
from kube.api import KubeApi
from kube.cluster import KubeTarget
from sandbox import objects
from sandbox.kube import FakeKube
from shipper.outbox import Outbox, StreamOutbox
from shipper.records import DISCOVERY
from tests.informer_harness import PAGED, RecordingSink, Thing
from tests.integration.test_collector import SETTINGS, Received
from tests.integration.test_health_server import samples
from tests.raw_server import serving
from tests.waiting import wait_until

NS = "shop"
DEEP = 100_000
PAST_64_BITS = 2**70
UNBOUNDED = "test.moonin.io/unbounded"


@pytest.fixture
def outbox(tmp_path: Path) -> Iterator[StreamOutbox]:
    with Outbox(tmp_path, streams=(DISCOVERY,)) as box:
        yield box[DISCOVERY]


@pytest.fixture
def start(
    kube: FakeKube, outbox: StreamOutbox, tmp_path: Path
) -> Iterator[Callable[..., Collector]]:
    running: list[Collector] = []

    def make(*, streaming: bool = True) -> Collector:
        api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
        informer = SETTINGS.informer if streaming else PAGED
        settings = dataclasses.replace(
            SETTINGS, informer=informer, state_file=tmp_path / "collector-state.sqlite"
        )
        collector = Collector(api, outbox, settings=settings)
        collector.start()
        running.append(collector)
        return collector

    yield make
    for collector in running:
        collector.stop()
        collector.api.close()


def deep(name: str) -> dict[str, Any]:
    """A Deployment with a field nested `DEEP` arrays deep (msgspec gives up at ~1,000)."""
    obj = objects.deployment(name=name, namespace=NS)
    obj["spec"]["template"]["spec"]["extra"] = msgspec.Raw(b"[" * DEEP + b"]" * DEEP)
    return obj


def huge(name: str) -> dict[str, Any]:
    """A Deployment whose replica count is past 64 bits (SQLite and msgpack refuse it)."""
    obj = objects.deployment(name=name, namespace=NS)
    obj["spec"]["replicas"] = PAST_64_BITS
    return obj


def health(collector: Collector) -> HealthWatch:
    return HealthWatch(collector.reporters)


def skipped_total(collector: Collector) -> dict[tuple[str, str], float]:
    metrics = AgentMetrics()
    metrics.read_from(collector.reporters, queues=dict, leader=lambda: None)
    return {
        (dict(labels)["resource"], dict(labels)["reason"]): value
        for (name, labels), value in samples(metrics.exposition().decode()).items()
        if name == "moonin_agent_objects_skipped_total"
    }


def deployments(received: Received) -> set[str]:
    return {key for (kind, key), r in received.latest().items() if kind == "deployment"}


def revisions(received: Received) -> set[str]:
    return {key for (kind, key), r in received.latest().items() if kind == "revision"}


def passed(kube: FakeKube, received: Received, sentinel: str) -> None:
    """Return once a Deployment created now is in the outbox: the Deployments' informer has
    handled every change before it (one watch, in order)."""
    kube.create(objects.deployment(name=sentinel, namespace=NS))
    wait_until(lambda: f"{NS}/{sentinel}" in deployments(received))


def skip_lines(logs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (line["name"], line["reason"], line["field"])
        for line in logs
        if line["event"] == "object_skipped"
    ]


BAD = {
    "nested_too_deep": (deep, "nesting past the decoder's recursion limit"),
    "number_out_of_range": (huge, "$.spec.replicas"),
}


@pytest.mark.parametrize("reason", sorted(BAD))
@pytest.mark.parametrize("arrives", ["in_a_streamed_list", "in_a_list_page", "in_a_watch"])
def test_an_unusable_object_is_skipped_once_per_change_and_the_rest_of_its_kind_goes_on(
    kube: FakeKube,
    outbox: StreamOutbox,
    start: Callable[..., Collector],
    reason: str,
    arrives: str,
) -> None:
    make_bad, field = BAD[reason]
    kube.create(objects.namespace(name=NS))
    # Listed, the bad object sits between two good ones of the same page.
    kube.create(objects.deployment(name="before", namespace=NS))
    if arrives != "in_a_watch":
        kube.load([make_bad("bad")])
    kube.create(objects.deployment(name="after", namespace=NS))
    with structlog.testing.capture_logs() as logs:
        collector = start(streaming=arrives == "in_a_streamed_list")
        received = Received(outbox)
        if arrives == "in_a_watch":
            assert collector.wait_synced(10)
            kube.load([make_bad("bad")])
        kube.create(objects.deployment(name="later", namespace=NS))
        wait_until(lambda: {f"{NS}/before", f"{NS}/after", f"{NS}/later"} <= deployments(received))
        informer = next(i for i in collector.informers if i.resource == resources.DEPLOYMENTS)
        assert informer.alive
        # Listed again, unchanged: no second warning.
        informer.request_relist()
        collector.api.abort_streams(resources.DEPLOYMENTS.path)
        kube.create(objects.deployment(name="relisted", namespace=NS))
        wait_until(lambda: f"{NS}/relisted" in deployments(received))
    assert f"{NS}/bad" not in deployments(received)
    assert skip_lines(logs) == [("bad", reason, field)]
    assert str(PAST_64_BITS) not in repr(logs)
    assert skipped_total(collector) == {("deployments", reason): 1}
    watch = health(collector)
    assert watch.problems() == [] and watch.not_ready() == []  # /healthz and /readyz: 200
    assert watch.notes() == [
        f"informer.deployments: 1 object skipped, latest {NS}/bad: {reason} ({field})"
    ]
    # Fixed, it goes through and the note goes.
    kube.load([objects.deployment(name="bad", namespace=NS)])
    wait_until(lambda: f"{NS}/bad" in deployments(received))
    assert health(collector).notes() == []
    assert skipped_total(collector) == {("deployments", reason): 1}


def test_each_change_of_a_skipped_object_is_told_once_and_its_delete_clears_the_note(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    kube.create(objects.namespace(name=NS))
    kube.load([deep("bad")])
    with structlog.testing.capture_logs() as logs:
        collector = start()
        received = Received(outbox)
        passed(kube, received, "first")
        kube.load([huge("bad")])  # changed, and unusable another way
        passed(kube, received, "second")
        assert health(collector).notes() != []
        kube.delete("deployments", NS, "bad")
        passed(kube, received, "third")
    assert skip_lines(logs) == [
        ("bad", "nested_too_deep", "nesting past the decoder's recursion limit"),
        ("bad", "number_out_of_range", "$.spec.replicas"),
    ]
    assert health(collector).notes() == []
    assert skipped_total(collector) == {
        ("deployments", "number_out_of_range"): 1,
        ("deployments", "nested_too_deep"): 1,
    }


def test_a_value_the_state_store_cannot_hold_skips_the_object_not_the_informer(
    kube: FakeKube,
    outbox: StreamOutbox,
    start: Callable[..., Collector],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every integer field decoded is bounded; a relation index that let one past 64 bits
    # through (from a field kept as the API gives it) would fail SQLite's insert of the
    # ReplicaSet. Records carry such a number as JSON does; only the store refuses it.
    bounded = relations.revision_number

    def unbounded(annotations: Mapping[str, str]) -> int | None:
        return PAST_64_BITS if UNBOUNDED in annotations else bounded(annotations)

    monkeypatch.setattr(relations, "revision_number", unbounded)
    kube.create(objects.namespace(name=NS))
    for name in ("bad", "good"):  # listed in name order: the bad one goes first
        owner = kube.create(objects.deployment(name=name, namespace=NS))
        replicaset = objects.replicaset(owner=owner)
        if name == "bad":
            replicaset["metadata"]["annotations"][UNBOUNDED] = "yes"
        kube.create(replicaset)
    with structlog.testing.capture_logs() as logs:
        collector = start()
        received = Received(outbox)
        wait_until(lambda: f"{NS}/good-{objects.TEMPLATE_HASH}" in revisions(received))
    assert f"{NS}/bad-{objects.TEMPLATE_HASH}" not in revisions(received)
    assert {f"{NS}/bad", f"{NS}/good"} <= deployments(received)
    assert skip_lines(logs) == [(f"bad-{objects.TEMPLATE_HASH}", "unstorable", "OverflowError")]
    assert skipped_total(collector) == {("replicasets", "unstorable"): 1}
    assert health(collector).problems() == []


def test_an_hpa_whose_behavior_holds_a_number_past_64_bits_is_skipped(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    # Its behavior is kept as the API gives it, so no field type bounds its numbers.
    kube.create(objects.namespace(name=NS))
    for name in ("web", "api"):
        kube.create(objects.deployment(name=name, namespace=NS))
        kube.create(objects.hpa(name=name, namespace=NS))
    bad = objects.hpa(name="bad", namespace=NS)
    bad["spec"]["behavior"] = {"scaleUp": {"policies": [{"value": PAST_64_BITS}]}}
    kube.load([bad])
    with structlog.testing.capture_logs() as logs:
        collector = start()
        received = Received(outbox)
        # Listed in name order: `bad` went through the sink before `web`.
        wait_until(lambda: {("hpa", f"{NS}/web"), ("hpa", f"{NS}/api")} <= set(received.latest()))
    assert ("hpa", f"{NS}/bad") not in received.latest()
    assert skip_lines(logs) == [("bad", "number_out_of_range", "$.spec.behavior")]
    assert skipped_total(collector) == {("horizontalpodautoscalers", "number_out_of_range"): 1}


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("7", 7),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("+3", 3),
        ("9223372036854775808", None),
        ("99999999999999999999", None),
        ("1_000", None),
        (" 12", None),
        ("١٢", None),  # Arabic-Indic digits: int() reads them, Go does not
        ("", None),
        ("1" * 5000, None),
    ],
)
def test_an_integer_in_text_is_read_as_kubernetes_reads_it(text: str, number: int | None) -> None:
    assert parse_int64(text) == number


def test_a_revision_past_64_bits_is_no_revision_and_stops_no_informer(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    # A legal string that anyone who may create ReplicaSets in one namespace can write; the
    # Deployment controller itself reads it as no revision (strconv.ParseInt fails).
    kube.create(objects.namespace(name=NS))
    web = kube.create(objects.deployment(name="web", namespace=NS))
    forged = objects.replicaset(owner=web)
    forged["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "9" * 20
    forged = kube.create(forged)
    other = kube.create(objects.deployment(name="other", namespace=NS))
    kept = kube.create(objects.replicaset(owner=other))
    collector = start()
    received = Received(outbox)
    revisions = {
        ("revision", f"{NS}/{forged['metadata']['name']}"),
        ("revision", f"{NS}/{kept['metadata']['name']}"),
    }
    wait_until(lambda: revisions <= set(received.latest()))
    passed(kube, received, "sentinel")
    latest = received.latest()
    assert latest[("revision", f"{NS}/{forged['metadata']['name']}")]["data"]["number"] is None
    assert latest[("revision", f"{NS}/{kept['metadata']['name']}")]["data"]["number"] == 1
    assert all(informer.alive for informer in collector.informers)
    assert health(collector).problems() == []


NESTED = b"[" * DEEP + b"]" * DEEP
WEB = {"metadata": {"name": "web", "namespace": NS, "resourceVersion": "5"}}
GOOD_PAGE = msgspec.json.encode({"metadata": {"resourceVersion": "5"}, "items": [WEB]})


def _server(
    page: bytes, watch_line: bytes, asked: list[str]
) -> Callable[[socket.socket, threading.Event], None]:
    """A server that lists `page` and answers every watch with `watch_line`, then ends it."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        query = parse_qs(urlsplit(conn.recv(65536).split(b" ", 2)[1].decode()).query)
        asked.append("watch" if "watch" in query else "list")
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        body = watch_line + b"\n" if "watch" in query else page
        conn.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)

    return answer


@pytest.mark.parametrize(
    ("page", "watch_line"),
    [
        (GOOD_PAGE, b'{"type":"BOOKMARK","object":{"metadata":{},"x":' + NESTED + b"}}"),
        (GOOD_PAGE, b'{"type":"ERROR","object":{"code":500,"x":' + NESTED + b"}}"),
        (GOOD_PAGE, b'{"type":"ADDED","object":{"metadata":{"name":"x"},"x":' + NESTED[:-1]),
        (GOOD_PAGE[:-3] + b',"x":' + NESTED + b"]}", b""),  # an item cut short
    ],
    ids=["deep_bookmark", "deep_error", "deep_line_cut_short", "deep_page_cut_short"],
)
def test_an_answer_too_deep_or_cut_short_is_an_error_of_the_answer_retried_not_a_crash(
    page: bytes, watch_line: bytes
) -> None:
    asked: list[str] = []
    with serving(_server(page, watch_line, asked)) as url:
        api = KubeApi(KubeTarget(server=url, verify=False, token=lambda: None))
        informer = Informer(api, resources.DEPLOYMENTS, Thing, RecordingSink(), settings=PAGED)
        informer.start()
        try:
            wait_until(lambda: len(asked) >= 4)
            assert informer.alive
            health = informer.reporter.snapshot().health
            assert not health.fatal and health.reason == "failing: DecodeError"
        finally:
            informer.stop()
            api.abort_streams()
            assert informer.join(5)
            api.close()
    assert informer.reporter.snapshot().counters.get("objects_skipped/nested_too_deep") is None


def test_an_object_without_a_readable_key_in_a_paged_list_does_not_make_it_look_endless() -> None:
    """The list's end is checked by counting the objects each page adds; one that cannot even
    be named adds no key, and must not read as an object given twice."""
    nameless = msgspec.Raw(b'{"x":' + NESTED + b"}")
    pages = {
        None: {"metadata": {"resourceVersion": "5", "continue": "p2"}, "items": [WEB, nameless]},
        "p2": {
            "metadata": {"resourceVersion": "5"},
            "items": [{**WEB, "metadata": {**WEB["metadata"], "name": "api"}}],
        },
    }
    asked: list[str] = []

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        query = parse_qs(urlsplit(conn.recv(65536).split(b" ", 2)[1].decode()).query)
        asked.append("watch" if "watch" in query else "list")
        page = pages[query.get("continue", [None])[0]] if "watch" not in query else None
        body = b"" if page is None else msgspec.json.encode(page)  # a watch that ends at once
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        conn.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)

    with serving(answer) as url:
        api = KubeApi(KubeTarget(server=url, verify=False, token=lambda: None))
        settings = dataclasses.replace(PAGED, page_size=2)
        sink = RecordingSink()
        informer = Informer(api, resources.DEPLOYMENTS, Thing, sink, settings=settings)
        informer.start()
        try:
            assert informer.wait_synced(10)
            assert sink.lists == [frozenset({f"{NS}/web", f"{NS}/api"})]
            assert informer.reporter.snapshot().counters.get("lists_abandoned") is None
        finally:
            informer.stop()
            api.abort_streams()
            assert informer.join(5)
            api.close()
