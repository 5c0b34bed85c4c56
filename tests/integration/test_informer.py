"""The informer against the fake API server: lists, watches, and every way they break."""

from __future__ import annotations

import dataclasses
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec
import pytest
import structlog.testing

from collector.informer import Informer, _WatchEvent
from collector.resources import DEPLOYMENTS, EVENTS, NAMESPACES, NODES
from kube.api import KubeApi
from kube.cluster import KubeTarget
from sandbox.kube import FakeKube
from tests.informer_harness import FAST, PAGED, RecordingSink, Thing, deployment
from tests.integration.test_storage_errors import full
from tests.raw_server import serving
from tests.waiting import wait_until


def test_a_paginated_list_reports_every_object_then_the_complete_key_set(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    informer, sink = running(api, settings=PAGED)
    assert informer.wait_synced(10)
    assert sorted(key for _, key, _ in sink.calls) == [f"shop/web-{n:02d}" for n in range(25)]
    assert sink.lists == [frozenset(f"shop/web-{n:02d}" for n in range(25))]
    assert informer.reporter.snapshot().counters["list_pages"] == 3


def test_the_watch_starts_at_the_list_and_reports_only_later_changes_in_order(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.create(deployment("web"))
    informer, sink = running(api)
    assert informer.wait_synced(10)
    kube.wait_for_watches(1, "deployments")
    kube.patch("deployments", "shop", "web", {"spec": {"replicas": 3}})
    kube.create(deployment("api"))
    kube.delete("deployments", "shop", "web")
    wait_until(lambda: sink.seen(("remove", "shop/web", None)))
    assert sink.calls == [
        ("apply", "shop/web", 1),
        ("apply", "shop/web", 3),
        ("apply", "shop/api", 1),
        ("remove", "shop/web", None),
    ]
    assert informer.resource_version == str(kube.current_rv)


def test_bookmarks_advance_the_resource_version_without_events(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    informer, _ = running(api)
    assert informer.wait_synced(10)
    kube.wait_for_watches(1, "deployments")
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}})
    wait_until(lambda: informer.resource_version == str(kube.current_rv))
    assert informer.reporter.snapshot().counters["bookmarks"] >= 1


def test_a_watch_ended_by_the_server_resumes_without_a_relist(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    settings = dataclasses.replace(FAST, watch_timeout_seconds=(1, 1))
    informer, sink = running(api, settings=settings)
    assert informer.wait_synced(10)
    wait_until(lambda: informer.reporter.snapshot().counters["watches"] >= 2, timeout=5)
    kube.create(deployment("late"))
    wait_until(lambda: sink.seen(("apply", "shop/late", 1)))
    assert informer.reporter.snapshot().counters["lists"] == 1


def test_a_resource_without_bookmarks_ends_quiet_watches_and_moves_on_by_one_object_lists(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    # Events: the fake, like kube-apiserver, sends their watches no bookmark.
    settings = dataclasses.replace(FAST, read_timeout_seconds=3.0, progress_probe_seconds=0.5)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "first"}})
    informer, _ = running(api, resource=EVENTS, settings=settings)
    assert informer.wait_synced(10)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}})
    moved_to = str(kube.current_rv)
    wait_until(lambda: informer.resource_version == moved_to)
    counters = informer.reporter.snapshot().counters
    assert counters.get("bookmarks", 0) == 0 and counters.get("quiet_watches", 0) == 0
    reads = [r for r in kube.requests if r.path == "/api/v1/events"]
    watches = [r.query for r in reads if r.watch and "sendInitialEvents" not in r.query]
    assert watches and all(int(query["timeoutSeconds"]) <= 2 for query in watches)
    probes = [r for r in reads if not r.watch]
    assert probes and all(r.query == {"limit": "1"} for r in probes)
    assert all("as=PartialObjectMetadataList" in r.accept for r in probes)  # no Event's text


def test_a_resource_version_read_during_a_watch_cut_short_is_not_resumed_from(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    # A watch ended before its timeout, cleanly or not, may not have delivered every change
    # up to the read.
    settings = dataclasses.replace(FAST, read_timeout_seconds=3.0, progress_probe_seconds=0.5)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "first"}})
    informer, _ = running(api, resource=EVENTS, settings=settings)
    assert informer.wait_synced(10)
    held = informer.resource_version
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}})

    def counted(name: str) -> int:
        return int(informer.reporter.snapshot().counters.get(name, 0))

    wait_until(lambda: counted("progress_probes") >= 1)
    assert kube.end_watches("events") == 1
    wait_until(lambda: counted("progress_probes") >= 2)  # the next watch, from `held`
    assert informer.resource_version == held
    assert kube.drop_watches("events") == 1
    wait_until(lambda: counted("failures") >= 1)
    assert informer.resource_version == held
    # A later watch that runs its course after its own read moves it on.
    wait_until(lambda: informer.resource_version == str(kube.current_rv))


def test_a_silently_stalled_watch_is_abandoned_and_nothing_is_missed(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.bookmark_interval = 0  # silence is what a stall looks like
    # Paged: the watch stalled is then the only one the fake has seen (a streaming list's
    # request can linger on the server's side for a moment after its end).
    settings = dataclasses.replace(PAGED, read_timeout_seconds=0.5)
    informer, sink = running(api, settings=settings)
    assert informer.wait_synced(10)
    kube.wait_for_watches(1, "deployments")
    kube.stall_watches("deployments")
    kube.create(deployment("during-stall"))
    wait_until(lambda: sink.seen(("apply", "shop/during-stall", 1)))
    counters = informer.reporter.snapshot().counters
    assert counters["watches"] >= 2 and counters["lists"] == 1
    kube.release_stalled()


@pytest.mark.parametrize("mode", ["event", "http"])
def test_a_410_relists_and_hands_over_the_complete_key_set(
    mode: str, kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.set_watch_expired_mode(mode)
    kube.load([deployment("stays"), deployment("goes")])
    informer, sink = running(api)
    assert informer.wait_synced(10)
    kube.wait_for_watches(1, "deployments")
    kube.stall_watches("deployments")  # the informer hears nothing from here on
    kube.delete("deployments", "shop", "goes")
    kube.create(deployment("arrives"))
    kube.compact()  # ... and the history it would resume from is gone
    kube.release_stalled()
    wait_until(lambda: informer.reporter.snapshot().counters.get("relists", 0) >= 1)
    wait_until(lambda: len(sink.lists) == 2)
    assert sink.seen(("apply", "shop/arrives", 1))
    # The watch never saw the delete; the relist's key set is how the sink learns of it.
    assert not sink.seen(("remove", "shop/goes", None))
    assert sink.lists[0] == frozenset({"shop/stays", "shop/goes"})
    assert sink.lists[-1] == frozenset({"shop/stays", "shop/arrives"})


def test_a_watch_cut_mid_stream_resumes_where_it_was_and_every_change_arrives_once(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load([deployment("a"), deployment("b")])
    # Paged: the watch cut is then the only one open (a streaming list's request can linger
    # on the server's side for a moment after its end).
    informer, sink = running(api, settings=PAGED)
    assert informer.wait_synced(10)
    kube.wait_for_watches(1, "deployments")
    kube.patch("deployments", "shop", "a", {"spec": {"replicas": 2}})
    wait_until(lambda: sink.seen(("apply", "shop/a", 2)))
    assert kube.drop_watches("deployments") == 1  # no clean end: the connection is shut
    # Made while the informer notices the cut and watches again, or after.
    kube.create(deployment("c"))
    kube.delete("deployments", "shop", "b")
    kube.patch("deployments", "shop", "a", {"spec": {"replicas": 3}})
    wait_until(lambda: sink.seen(("apply", "shop/a", 3)))
    assert sink.calls == [
        ("apply", "shop/a", 1),
        ("apply", "shop/b", 1),
        ("apply", "shop/a", 2),
        ("apply", "shop/c", 1),
        ("remove", "shop/b", None),
        ("apply", "shop/a", 3),
    ]
    counters = informer.reporter.snapshot().counters
    assert counters["failures"] >= 1  # the cut was one
    assert counters["lists"] == 1 and len(sink.lists) == 1  # resumed, not listed again


class _Gate:
    """A page gate a test can close: a list waits in it until the gate opens again."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.opened.set()

    def __enter__(self) -> None:
        assert self.opened.wait(10)

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_410_error_event_mid_stream_relists_at_once_and_nothing_is_lost_or_twice(
    kube: FakeKube, api: KubeApi
) -> None:
    kube.load([deployment("a"), deployment("b")])
    gate = _Gate()
    sink = RecordingSink()
    informer = Informer(api, DEPLOYMENTS, Thing, sink, settings=PAGED, page_gate=gate)
    informer.start()
    try:
        assert informer.wait_synced(10)
        kube.wait_for_watches(1, "deployments")
        gate.opened.clear()  # the relist waits until the changes below are all made
        kube.patch("deployments", "shop", "a", {"spec": {"replicas": 2}})
        assert kube.expire_open_watches("deployments") == 1  # after the patch's event
        # Never sent on that stream, and compacted away: only a list can tell them.
        kube.create(deployment("c"))
        kube.delete("deployments", "shop", "b")
        kube.patch("deployments", "shop", "a", {"spec": {"replicas": 3}})
        kube.compact()
        gate.opened.set()
        wait_until(lambda: len(sink.lists) == 2)
        kube.wait_for_watches(1, "deployments")
        kube.create(deployment("d"))  # the watch after the relist goes on from its list
        wait_until(lambda: sink.seen(("apply", "shop/d", 1)))
        assert sink.calls == [
            ("apply", "shop/a", 1),
            ("apply", "shop/b", 1),
            ("apply", "shop/a", 2),  # sent before the ERROR on the same stream
            ("apply", "shop/a", 3),  # the relist: each object once, as it is now
            ("apply", "shop/c", 1),
            ("apply", "shop/d", 1),
        ]
        assert sink.lists[-1] == frozenset({"shop/a", "shop/c"})  # b: gone, by the key set
        # The ERROR is answered with a list, not with a watch from the version held.
        requests = [r.watch for r in kube.requests if r.path == DEPLOYMENTS.path]
        assert requests[:4] == [False, True, False, True]
        assert informer.reporter.snapshot().counters["relists"] == 1
    finally:
        informer.stop()
        api.abort_streams()
        assert informer.join(5)


@pytest.fixture
def disk_full(tmp_path: Path) -> sqlite3.Error:
    """SQLite's own "database or disk is full", met for real (its result code says so)."""
    with pytest.raises(sqlite3.Error) as met:
        full(tmp_path / "full.db")
    return met.value


def test_a_full_disk_under_the_sink_mid_list_is_waited_out_and_a_relist_loses_nothing(
    kube: FakeKube, api: KubeApi, disk_full: sqlite3.Error
) -> None:
    keys = frozenset(f"shop/web-{n:02d}" for n in range(25))
    kube.load(deployment(f"web-{n:02d}") for n in range(25))  # three pages of ten
    filled = threading.Event()

    def store(obj: Thing) -> None:
        if obj.metadata.name == "web-12":
            filled.set()  # the disk fills up while the second page goes in, and stays
        if filled.is_set():
            raise disk_full

    sink = RecordingSink()
    sink.on_apply = store
    informer = Informer(api, DEPLOYMENTS, Thing, sink, settings=PAGED)
    informer.start()
    try:
        wait_until(lambda: informer.reporter.snapshot().counters.get("failures", 0) >= 2)
        health = informer.reporter.health
        assert health.unready and "disk full" in (health.reason or "")
        assert informer.alive and not informer.wait_synced(0)
        sink.on_apply = None  # space comes back
        assert informer.wait_synced(10)
        wait_until(lambda: informer.reporter.health.ok)
        assert sink.lists == [keys]  # one complete list, after the failed ones
        assert {key for _, key, _ in sink.calls} == keys  # every object reached the sink
        firsts = [r for r in kube.requests if r.path == DEPLOYMENTS.path and not r.watch]
        assert sum("continue" not in r.query for r in firsts) >= 2  # listed again, from the top
    finally:
        informer.stop()
        api.abort_streams()
        assert informer.join(5)


def test_a_full_disk_under_the_sink_at_a_watch_event_ends_in_a_relist_once_it_passes(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any], disk_full: sqlite3.Error
) -> None:
    # What the sink stored before may have been rolled back with the failed write: only a
    # complete list says again what exists.
    keys = frozenset(f"shop/web-{n:02d}" for n in range(25))
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    informer, sink = running(api, settings=PAGED)
    assert informer.wait_synced(10)
    kube.wait_for_watches(1, "deployments")

    def store(obj: Thing) -> None:
        raise disk_full

    sink.on_apply = store
    kube.patch("deployments", "shop", "web-12", {"spec": {"replicas": 2}})
    wait_until(lambda: informer.reporter.snapshot().counters.get("failures", 0) >= 2)
    health = informer.reporter.health
    assert health.unready and "disk full" in (health.reason or "")
    sink.on_apply = None  # space comes back
    wait_until(lambda: len(sink.lists) == 2)
    assert sink.lists[-1] == keys
    assert sink.seen(("apply", "shop/web-12", 2))
    wait_until(lambda: informer.reporter.health.ok)
    assert informer.alive


def test_an_expired_continue_token_restarts_the_list(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    expired = threading.Event()

    def expire_once(obj: Thing) -> None:
        if not expired.is_set():
            expired.set()
            kube.expire_continue_tokens()

    sink = RecordingSink()
    sink.on_apply = expire_once
    informer = Informer(api, DEPLOYMENTS, Thing, sink, settings=PAGED)
    informer.start()
    try:
        assert informer.wait_synced(10)
        assert sink.lists == [frozenset(f"shop/web-{n:02d}" for n in range(25))]
        assert informer.reporter.snapshot().counters["list_restarts"] == 1
    finally:
        informer.stop()
        api.abort_streams()
        informer.join(5)


def test_a_403_disables_one_resource_naming_the_permission_while_others_keep_working(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    kube.forbid("nodes")
    denied = 'forbidden: cannot list resource "nodes" in API group "" at the cluster scope'
    # The ceiling of a real deployment: only backoff from a short start can recover soon.
    patient = dataclasses.replace(PAGED, forbidden_retry_seconds=300.0)
    with structlog.testing.capture_logs() as logs:
        blocked, _ = running(api, NODES, settings=patient)
        namespaces, ns_sink = running(api, NAMESPACES)
        assert namespaces.wait_synced(10)
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "new"}})
        wait_until(lambda: ns_sink.seen(("apply", "new", None)))
        wait_until(lambda: blocked.reporter.snapshot().counters.get("forbidden", 0) >= 3)
        health = blocked.reporter.health
        assert (health.ok, health.reason, health.unready) == (False, denied, True)
        assert not blocked.wait_synced(0)

        kube.allow("nodes")  # RBAC fixed: picked up at the next retry, minutes before 300 s
        assert blocked.wait_synced(10)
        wait_until(lambda: blocked.reporter.health.ok)
    said = [(e["event"], e.get("permission")) for e in logs if e.get("resource") == "nodes"]
    assert said == [("informer_forbidden", denied), ("informer_healthy", None)]


def test_server_errors_and_throttling_are_retried_with_backoff(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.create(deployment("web"))
    kube.fail_next(500, 1, resource="deployments")
    kube.fail_next(429, 1, resource="deployments", retry_after=1)
    started = time.monotonic()
    informer, sink = running(api)
    assert informer.wait_synced(10)
    assert time.monotonic() - started >= 1.0  # Retry-After was honoured
    assert informer.reporter.snapshot().counters["failures"] == 2
    assert sink.seen(("apply", "shop/web", 1))


def test_stop_ends_a_quiet_watch_at_once(kube: FakeKube, api: KubeApi) -> None:
    # Nothing but the stop can end this watch within the test: no read timeout would.
    patient = dataclasses.replace(FAST, read_timeout_seconds=120.0)
    informer = Informer(api, DEPLOYMENTS, Thing, RecordingSink(), settings=patient)
    informer.start()
    assert informer.wait_synced(10)
    kube.wait_for_watches(1, "deployments")
    informer.stop()
    api.abort_streams()
    assert informer.join(5)


# -- quiet watches and resourceVersions as a real server gives them ------------------------


def test_a_watch_quiet_until_the_read_timeout_resumes_at_once_from_the_same_version(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    # A real server sends bookmarks at its discretion, about once a minute, and none on
    # a resource that does not change: https://kubernetes.io/docs/reference/using-api/
    # api-concepts/#watch-bookmarks. Silence is not a failure.
    kube.bookmark_interval = 3600.0
    kube.create(deployment("web"))
    quiet = dataclasses.replace(FAST, read_timeout_seconds=0.3)
    informer, sink = running(api, settings=quiet)
    assert informer.wait_synced(10)

    def counters() -> dict[str, int]:
        return informer.reporter.snapshot().counters

    wait_until(lambda: counters().get("quiet_watches", 0) >= 3)
    assert counters().get("failures", 0) == 0
    assert informer.reporter.health.ok
    watches = [r for r in kube.requests if r.watch and "resourceVersion" in r.query]
    assert len({r.query["resourceVersion"] for r in watches}) == 1
    kube.patch("deployments", "shop", "web", {"spec": {"replicas": 4}})
    wait_until(lambda: sink.seen(("apply", "shop/web", 4)))  # and it still hears changes


def test_a_bookmark_older_than_the_version_held_does_not_move_it_back(
    api: KubeApi,
) -> None:
    # A lagging server (an HA peer whose watch cache is behind) can send one.
    informer = Informer(api, DEPLOYMENTS, Thing, RecordingSink(), settings=FAST)
    informer.resource_version = "100"
    informer._handle(_WatchEvent("BOOKMARK", msgspec.Raw(b'{"metadata":{"resourceVersion":"99"}}')))
    assert informer.resource_version == "100"
    informer._handle(
        _WatchEvent("BOOKMARK", msgspec.Raw(b'{"metadata":{"resourceVersion":"1000"}}'))
    )
    assert informer.resource_version == "1000"
    assert informer.reporter.snapshot().counters["stale_resource_versions"] == 1


def test_an_event_older_than_the_version_held_does_not_move_it_back(api: KubeApi) -> None:
    sink = RecordingSink()
    informer = Informer(api, DEPLOYMENTS, Thing, sink, settings=FAST)
    informer.resource_version = "100"
    old = b'{"metadata":{"name":"web","namespace":"shop","resourceVersion":"98"}}'
    informer._handle(_WatchEvent("MODIFIED", msgspec.Raw(old)))
    assert informer.resource_version == "100"
    assert sink.seen(("apply", "shop/web", None))  # the sink still hears of it


def _lagging_server(watched_from: list[str]) -> Callable[[socket.socket, threading.Event], None]:
    """A server whose watch cache lags: lists at resourceVersion 100, then its first watch
    sends a bookmark at 90 and ends; later watches stay open and quiet."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        target = conn.recv(65536).split(b" ", 2)[1].decode()
        query = parse_qs(urlsplit(target).query)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        if "watch" not in query:
            body = b'{"kind":"DeploymentList","metadata":{"resourceVersion":"100"},"items":[]}'
            conn.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            return
        watched_from.append(query["resourceVersion"][0])
        conn.sendall(head + b"\r\n")
        if len(watched_from) == 1:
            conn.sendall(b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"90"}}}\n')
            return
        stop.wait()

    return answer


def test_a_lagging_servers_older_bookmark_does_not_rewind_the_watch() -> None:
    watched_from: list[str] = []
    with serving(_lagging_server(watched_from)) as url:
        api = KubeApi(KubeTarget(server=url, verify=False, token=lambda: None))
        informer = Informer(api, DEPLOYMENTS, Thing, RecordingSink(), settings=PAGED)
        informer.start()
        try:
            wait_until(lambda: len(watched_from) >= 2)
        finally:
            informer.stop()
            api.abort_streams()
            assert informer.join(5)
            api.close()
    assert watched_from[:2] == ["100", "100"]
    assert informer.reporter.snapshot().counters["stale_resource_versions"] == 1
