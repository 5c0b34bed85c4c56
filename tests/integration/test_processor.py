"""The delta queue and the processor: informers put, one thread takes, in order, rebuilding
dependent records once per drain and committing once per flush window."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from collector import model, resources
from collector.coalesce import Coalescer
from collector.collector import Collector
from collector.deltas import Applied, Call, Delta, DeltaQueue, Listed, Removed
from collector.model import ObjectMeta
from collector.normalize import deployment as deployment_kind
from collector.normalize.deployment import Deployment
from collector.normalize.revision import ReplicaSet
from collector.normalize.service import Service
from collector.processor import Processor
from collector.settings import CollectorSettings, FilterSettings
from kube.api import KubeApi
from kube.cluster import KubeTarget
from runtime.health import HealthReporter
from sandbox import objects
from shipper.outbox import Bounds, Outbox, StreamOutbox
from shipper.records import DISCOVERY
from tests.unit.test_coalesce import queued
from tests.waiting import wait_until

NAMESPACES = resources.NAMESPACES


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[StreamOutbox]:
    with Outbox(tmp_path, streams=(DISCOVERY,)) as outbox:
        yield outbox[DISCOVERY]


class _Sink:
    """Writes down what the processor hands it."""

    def __init__(self, seen: list[tuple[str, str]]) -> None:
        self.seen = seen

    def apply(self, obj: Any) -> None:
        self.seen.append(("apply", obj.metadata.name))

    def remove(self, obj: Any) -> None:
        self.seen.append(("remove", obj.metadata.name))

    def listed(self, keys: Any) -> None:
        self.seen.append(("listed", ",".join(sorted(keys))))


class _Informer:
    def __init__(self) -> None:
        from collector.skips import Skips

        self.skips = Skips("namespaces", HealthReporter("informer.namespaces"))


class _Object(msgspec.Struct):
    metadata: ObjectMeta


def processor(
    deltas: DeltaQueue,
    coalescer: Coalescer,
    *,
    seen: list[tuple[str, str]] | None = None,
    settle: Any = lambda: None,
    resync: Any = lambda: None,
    flush_seconds: float = 60.0,
) -> Processor:
    log = seen if seen is not None else []
    return Processor(
        deltas,
        {NAMESPACES: _Sink(log)},  # type: ignore[dict-item]
        {NAMESPACES: _Informer()},  # type: ignore[dict-item]
        coalescer=coalescer,
        listed=lambda listed: log.append(("after listed", listed.resource.plural)),
        settle=settle,
        resync=resync,
        flush_seconds=flush_seconds,
    )


def obj(name: str) -> _Object:
    return _Object(ObjectMeta(name=name))


def test_a_full_queue_holds_the_putting_informer_until_the_processor_takes_and_drops_nothing() -> (
    None
):
    deltas = DeltaQueue(bound=2)
    sink = deltas.sink(NAMESPACES)
    sink.apply(obj("a"))
    sink.apply(obj("b"))
    third = threading.Thread(target=sink.apply, args=(obj("c"),))
    third.start()
    third.join(0.3)  # a bounded look: the put must still be waiting for room
    assert third.is_alive()
    taken = [deltas.take(1)]
    third.join(5)
    assert not third.is_alive()
    taken += [deltas.take_now(), deltas.take_now(), deltas.take_now()]
    assert [d.obj.metadata.name for d in taken if isinstance(d, Applied)] == ["a", "b", "c"]
    assert taken[-1] is None


def test_a_full_queue_takes_puts_again_only_once_taken_down_to_half() -> None:
    deltas = DeltaQueue(bound=4)
    sink = deltas.sink(NAMESPACES)
    for name in "abcd":
        sink.apply(obj(name))
    fifth = threading.Thread(target=sink.apply, args=(obj("e"),))
    fifth.start()
    assert isinstance(deltas.take(1), Applied)
    fifth.join(0.3)  # three queued, above half of four: the put still waits
    assert fifth.is_alive()
    assert isinstance(deltas.take(1), Applied)
    fifth.join(5)
    assert not fifth.is_alive()
    names = []
    while (delta := deltas.take_now()) is not None:
        assert isinstance(delta, Applied)
        names.append(delta.obj.metadata.name)
    assert names == ["c", "d", "e"]


def _taking(deltas: DeltaQueue, timeout: float) -> tuple[threading.Thread, list[Delta | None]]:
    """A taker waiting on the empty queue, as the processor's drain does."""
    taken: list[Delta | None] = []
    thread = threading.Thread(target=lambda: taken.append(deltas.take(timeout)))
    thread.start()
    return thread, taken


def test_a_waiting_taker_is_woken_by_a_batch_of_objects_not_by_each() -> None:
    deltas = DeltaQueue(bound=8, wake_at=3)
    sink = deltas.sink(NAMESPACES)
    taker, taken = _taking(deltas, 30)
    sink.apply(obj("a"))
    sink.remove(obj("b"))
    taker.join(0.3)  # a bounded look: two objects wait, and the taker still sleeps
    assert taker.is_alive()
    sink.apply(obj("c"))
    taker.join(5)
    assert not taker.is_alive()
    assert [d.obj.metadata.name for d in taken if isinstance(d, Applied)] == ["a"]


@pytest.mark.parametrize(
    "wakes", [Listed(NAMESPACES, "7", "now", frozenset()), Call(lambda: None)], ids=type
)
def test_a_completed_list_or_a_call_wakes_the_taker_at_once(wakes: Delta) -> None:
    deltas = DeltaQueue(bound=8, wake_at=3)
    taker, taken = _taking(deltas, 30)
    deltas.put(Applied(NAMESPACES, obj("a")))
    deltas.put(wakes)
    taker.join(5)
    assert not taker.is_alive()
    assert isinstance(taken[0], Applied)
    assert [deltas.take_now(), deltas.take_now()] == [wakes, None]


def test_an_object_that_did_not_wake_the_taker_is_taken_when_its_wait_ends() -> None:
    deltas = DeltaQueue(bound=8, wake_at=3)
    taker, taken = _taking(deltas, 0.5)
    deltas.put(Applied(NAMESPACES, obj("a")))
    taker.join(5)
    assert [d.obj.metadata.name for d in taken if isinstance(d, Applied)] == ["a"]


def test_a_closed_queue_lets_a_blocked_informer_go_on_to_its_stop() -> None:
    deltas = DeltaQueue(bound=1)
    deltas.put(Applied(NAMESPACES, obj("a")))
    blocked = threading.Thread(target=deltas.put, args=(Applied(NAMESPACES, obj("b")),))
    blocked.start()
    deltas.close()
    blocked.join(5)
    assert not blocked.is_alive()


def test_the_processor_takes_deltas_and_calls_in_the_order_they_were_put(
    stream: StreamOutbox,
) -> None:
    deltas, seen = DeltaQueue(), []
    work = processor(deltas, Coalescer(stream), seen=seen)
    deltas.put(Applied(NAMESPACES, obj("a")))
    deltas.put(Call(lambda: seen.append(("call", "1"))))
    deltas.put(Removed(NAMESPACES, obj("a")))
    deltas.put(Listed(NAMESPACES, "7", "now", frozenset({"b"})))
    deltas.put(Applied(NAMESPACES, obj("b")))
    work.start()
    try:
        wait_until(lambda: len(seen) == 6)
    finally:
        deltas.close()
        work.stop(5)
    assert seen == [
        ("apply", "a"),
        ("call", "1"),
        ("remove", "a"),
        ("listed", "b"),
        ("after listed", "namespaces"),  # snapshots and the rest: after the sink's sweep
        ("apply", "b"),
    ]


def test_stop_processes_what_is_queued_and_commits_what_the_window_holds(
    stream: StreamOutbox,
) -> None:
    deltas, coalescer = DeltaQueue(), Coalescer(stream)
    work = processor(deltas, coalescer, flush_seconds=60)
    work.start()
    deltas.put(Call(lambda: coalescer.offer(model.upsert("namespace", ObjectMeta(name="a"), {}))))
    deltas.close()
    work.stop(5)
    assert [key for _, key, _ in queued(stream)] == ["a"]


def test_the_processor_asks_for_a_resync_once_the_marked_outbox_has_room(tmp_path: Path) -> None:
    asked = threading.Event()
    with Outbox(tmp_path, streams=(DISCOVERY,), bounds=Bounds(max_records=2)) as outbox:
        stream = outbox[DISCOVERY]
        deltas, coalescer = DeltaQueue(), Coalescer(stream)
        work = processor(deltas, coalescer, resync=asked.set, flush_seconds=0.01)
        work.start()
        try:

            def offer(name: str) -> None:
                record = model.upsert("namespace", ObjectMeta(name=name), {})
                deltas.put(Call(lambda: coalescer.offer(record)))

            for name in "abc":  # past the bound: the oldest upsert is dropped
                offer(name)
            wait_until(lambda: stream.resync_needed)

            def coalesced() -> int:
                return coalescer.reporter.snapshot().counters.get("records_coalesced", 0)

            def one_window() -> None:
                """A flush goes by: it coalesces away a repeat of what was sent."""
                seen = coalesced()
                offer("c")
                wait_until(lambda: coalesced() > seen)

            one_window()
            one_window()  # so the first window's resync check is done too
            # Still full (the platform is away): a re-send now would only overflow again.
            assert not asked.is_set()
            batch = stream.take(max_records=10, max_bytes=10**6)
            assert batch is not None
            stream.ack(batch)  # the platform is back and took it all
            assert asked.wait(5)
        finally:
            deltas.close()
            work.stop(5)


def test_a_processor_that_crashes_says_so_for_liveness(stream: StreamOutbox) -> None:
    def broken() -> None:
        raise RuntimeError("a bug in what a drain settles")

    work = processor(DeltaQueue(), Coalescer(stream), settle=broken, flush_seconds=0.01)
    work.start()
    wait_until(lambda: work.reporter.snapshot().health.fatal)
    assert "processor crashed" in (work.reporter.snapshot().health.reason or "")


def _full_disk() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorcode = sqlite3.SQLITE_FULL  # as SQLite itself raises it
    return error


def test_a_full_disk_while_a_completed_list_is_taken_in_pauses_its_informer(
    stream: StreamOutbox,
) -> None:
    failing: list[Exception] = []

    class Informer(_Informer):
        def storage_failing(self, exc: Exception) -> None:
            failing.append(exc)

    def listed(_: Listed) -> None:  # a snapshot's read, spilling the page cache to disk
        raise _full_disk()

    work = Processor(
        DeltaQueue(),
        {NAMESPACES: _Sink([])},  # type: ignore[dict-item]
        {NAMESPACES: Informer()},  # type: ignore[dict-item]
        coalescer=Coalescer(stream),
        listed=listed,
        settle=lambda: None,
        resync=lambda: None,
        flush_seconds=60.0,
    )
    work.process(Listed(NAMESPACES, "7", "now", frozenset({"a"})))
    assert [getattr(exc, "sqlite_errorcode", None) for exc in failing] == [sqlite3.SQLITE_FULL]


def test_a_full_disk_under_a_rebuild_leaves_the_processor_running_to_settle_again(
    stream: StreamOutbox,
) -> None:
    settled: list[int] = []

    def rebuild_on_a_full_disk() -> None:
        settled.append(1)
        if len(settled) == 1:
            raise _full_disk()

    work = processor(
        DeltaQueue(), Coalescer(stream), settle=rebuild_on_a_full_disk, flush_seconds=0.01
    )
    work.start()
    try:
        wait_until(lambda: len(settled) >= 3)
        assert not work.reporter.snapshot().health.fatal
    finally:
        work.stop(5)


def _decoded(struct: type[Any], raw: dict[str, Any]) -> Any:
    return msgspec.json.decode(msgspec.json.encode(raw), type=struct)


def test_a_deployment_marked_stale_many_times_in_one_drain_is_rebuilt_once(
    stream: StreamOutbox,
) -> None:
    # Never started: the processor is driven here one delta at a time, as its thread would.
    api = KubeApi(KubeTarget(server="http://127.0.0.1:9", verify=False, token=lambda: "t"))
    collector = Collector(
        api, stream, settings=CollectorSettings(filters=FilterSettings(ignore_namespaces=()))
    )
    try:
        for informer in collector.informers:
            collector._listings.took(informer.resource)  # nothing is held back
        rebuilt: list[str] = []
        sink = collector.sinks[resources.DEPLOYMENTS]
        rebuild = sink.rebuild
        sink.rebuild = lambda key, held: (rebuilt.append(key), rebuild(key, held))[-1]  # type: ignore[method-assign]
        web = objects.deployment(name="web", namespace="shop")
        collector.processor.process(Applied(resources.DEPLOYMENTS, _decoded(Deployment, web)))
        for name in ("web", "web-canary", "web-admin"):  # three Services now select it
            service = objects.service(name=name, namespace="shop")
            service["spec"]["selector"] = {"app": "web"}
            collector.processor.process(Applied(resources.SERVICES, _decoded(Service, service)))
        assert rebuilt == []  # not while draining
        collector.processor.settle()
        assert rebuilt == ["shop/web"]
        collector.processor.settle()  # nothing new marked: nothing rebuilt
        assert rebuilt == ["shop/web"]
        collector.coalescer.flush()
        batch = stream.take(max_records=100, max_bytes=10**7)
        assert batch is not None
        bodies = [msgspec.json.decode(raw) for raw in batch.bodies]
        [record] = [b["data"] for b in bodies if b["kind"] == "deployment"]
        assert record["services"] == ["web", "web-admin", "web-canary"]
    finally:
        collector.state.close()
        api.close()


def test_a_deployment_held_in_the_warm_up_is_built_once_when_released(
    stream: StreamOutbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = KubeApi(KubeTarget(server="http://127.0.0.1:9", verify=False, token=lambda: "t"))
    collector = Collector(
        api, stream, settings=CollectorSettings(filters=FilterSettings(ignore_namespaces=()))
    )
    builds: list[str] = []
    normalizer = type(deployment_kind.NORMALIZER)
    upserts, relink = normalizer.upserts, normalizer.relink
    monkeypatch.setattr(
        normalizer, "upserts", lambda self, *a: (builds.append("upserts"), upserts(self, *a))[-1]
    )
    monkeypatch.setattr(
        normalizer, "relink", lambda self, *a: (builds.append("relink"), relink(self, *a))[-1]
    )
    try:
        web = objects.deployment(name="web", namespace="shop")
        # ReplicaSets, Services and HPAs have not listed: its record waits.
        collector.processor.process(Applied(resources.DEPLOYMENTS, _decoded(Deployment, web)))
        collector.processor.settle()
        assert builds == []
        for resource in (resources.REPLICASETS, resources.SERVICES, resources.HPAS):
            collector.processor.process(Listed(resource, "1", "now", frozenset()))
        collector.processor.settle()
        assert builds == ["upserts"]
        collector.coalescer.flush()
        batch = stream.take(max_records=100, max_bytes=10**7)
        assert batch is not None
        kinds = [msgspec.json.decode(raw)["kind"] for raw in batch.bodies]
        assert kinds.count("deployment") == 1
    finally:
        collector.state.close()
        api.close()


def test_a_held_object_keeps_no_manifest_and_gives_the_records_it_gives_unheld(
    stream: StreamOutbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = '{"spec": {"env": "' + "x" * 4000 + '"}}'
    web = objects.with_uid(
        objects.deployment(
            name="web",
            namespace="shop",
            annotations={"kubectl.kubernetes.io/last-applied-configuration": manifest, "team": "a"},
        ),
        "4c1d0e7a-0000-4000-8000-000000000001",
    )
    web_rs = objects.replicaset(owner=web)
    # A key no record carries, yet it makes the revision a GitOps one.
    web_rs["metadata"]["annotations"]["argocd.argoproj.io/sync-token"] = "abc123"
    arrivals = [
        Applied(resources.DEPLOYMENTS, _decoded(Deployment, web)),
        Applied(resources.REPLICASETS, _decoded(ReplicaSet, web_rs)),
    ]
    listed_rs = frozenset({f"shop/{web_rs['metadata']['name']}"})
    needs = [
        Listed(resources.REPLICASETS, "1", "now", listed_rs),
        Listed(resources.SERVICES, "1", "now", frozenset()),
        Listed(resources.HPAS, "1", "now", frozenset()),
    ]

    def records(deltas: list[Any]) -> tuple[dict[str, Any], list[bytes]]:
        api = KubeApi(KubeTarget(server="http://127.0.0.1:9", verify=False, token=lambda: "t"))
        collector = Collector(
            api, stream, settings=CollectorSettings(filters=FilterSettings(ignore_namespaces=()))
        )
        held: list[bytes] = []
        put = collector.state.held.put
        monkeypatch.setattr(
            collector.state.held, "put", lambda *a: (held.append(a[2]), put(*a))[-1]
        )
        try:
            for delta in deltas:
                collector.processor.process(delta)
            collector.processor.settle()
            collector.coalescer.flush()
            batch = stream.take(max_records=100, max_bytes=10**7)
            assert batch is not None
            stream.ack(batch)
            bodies = [msgspec.json.decode(raw) for raw in batch.bodies]
            return {b["kind"]: b["data"] for b in bodies if b["kind"] != "snapshot"}, held
        finally:
            collector.state.close()
            api.close()

    held_then_built, held = records(arrivals + needs)
    built_at_once, none_held = records(needs + arrivals)
    assert len(held) == 2 and none_held == []
    held_web, held_rs = held
    # The keys stay, the values go.
    assert b"last-applied-configuration" in held_web and b"xxxx" not in held_web
    assert b"sync-token" in held_rs and b"abc123" not in held_rs
    assert held_then_built == built_at_once
    assert held_then_built["revision"]["type"] == "gitops"
    assert held_then_built["deployment"]["annotations"]["team"] == "a"
