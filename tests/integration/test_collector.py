"""The collector end to end in one process: fake API server -> informers -> outbox."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog.testing

from collector import model
from collector.collector import Collector
from collector.job_logs import JobLogSettings
from collector.metadata import MetadataProbe
from collector.model import ObjectMeta
from collector.normalize import namespace as namespace_kind
from collector.settings import CollectorSettings, FilterSettings
from kube.api import KubeApi
from kube.cluster import KubeTarget
from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.kube.faults import RequestRecord
from shipper.outbox import Bounds, Outbox, StreamOutbox
from shipper.records import DISCOVERY
from tests import cluster_objects
from tests.informer_harness import FAST
from tests.waiting import wait_until

SETTINGS = CollectorSettings(
    filters=FilterSettings(ignore_namespaces=()),
    anti_entropy_seconds=0,
    flush_seconds=0.05,
    informer=FAST,
    warm_up_timeout_seconds=10,
)


class Received:
    """Drains the discovery outbox in the background, keeping every record in order."""

    def __init__(self, stream: StreamOutbox) -> None:
        self.stream = stream
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def drain(self) -> None:
        while (batch := self.stream.take(max_records=10_000, max_bytes=10**8)) is not None:
            with self._lock:
                self.records.extend(msgspec.json.decode(body) for body in batch.bodies)
            self.stream.ack(batch)

    def latest(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The last upsert or delete per (kind, key), as the platform would keep it."""
        self.drain()
        with self._lock:
            return {(r["kind"], r["key"]): r for r in self.records if r["op"] != "event"}

    def events(self, kind: str) -> list[dict[str, Any]]:
        self.drain()
        with self._lock:
            return [r for r in self.records if r["op"] == "event" and r["kind"] == kind]


def job_logs_read(received: Received) -> bool:
    """Whether the failed Job of `cluster_objects` has its record again, with its log (read
    on a worker of its own, after the record went out without it)."""
    job = received.latest().get(("job_execution", f"{cluster_objects.NS}/report-29012345"))
    return job is not None and job["data"]["logs"] is not None


def snapshot_kinds(received: Received) -> set[str]:
    return {record["data"]["of"] for record in received.events("snapshot")}


def flushed(kube: FakeKube, received: Received, sentinel: str) -> None:
    """Return once a namespace created now is in the outbox: whatever the collector offered
    before it is there too (the coalescer commits its buffer in order)."""
    kube.create(objects.namespace(name=sentinel))
    wait_until(lambda: ("namespace", sentinel) in received.latest())


@pytest.fixture
def outbox(tmp_path: Path) -> Iterator[StreamOutbox]:
    with Outbox(tmp_path, streams=(DISCOVERY,)) as box:
        yield box[DISCOVERY]


@pytest.fixture
def start(kube: FakeKube, outbox: StreamOutbox) -> Iterator[Callable[..., Collector]]:
    running: list[Collector] = []

    def make(settings: CollectorSettings = SETTINGS) -> Collector:
        api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
        collector = Collector(api, outbox, settings=settings)
        collector.start()
        running.append(collector)
        return collector

    yield make
    for collector in running:
        collector.stop()
        collector.api.close()


def test_every_kind_becomes_its_records_and_the_secrets_stay_home(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    start()
    received = Received(outbox)
    wait_until(lambda: expected <= set(received.latest()) and job_logs_read(received))
    latest = received.latest()
    deployment = latest[("deployment", "shop/web")]["data"]
    assert deployment["services"] == ["web"]
    assert deployment["hpa"] == {"name": "web", "min_replicas": 2, "max_replicas": 10}
    assert deployment["revision"] == 1
    job = latest[("job_execution", "shop/report-29012345")]["data"]
    assert (job["status"], job["failure_reason"], job["exit_code"]) == (
        "failed",
        "BackoffLimitExceeded",
        2,
    )
    assert job["logs"] == ["starting", "query failed", "exit 2"]
    crash = received.events("pod_error")
    assert {e["data"]["reason"] for e in crash} >= {"CrashLoopBackOff"}
    assert not any(r[0] not in {k for k, _ in expected} for r in latest)
    # Only Helm's Secrets were ever read, and never the Opaque one: collections through
    # Helm's label, bodies one release revision at a time.
    secret_reads = [r for r in kube.requests if "/secrets" in r.path]
    listed = [r for r in secret_reads if not r.path.split("/secrets")[1]]
    fetched = [r.path.rsplit("/", 1)[1] for r in secret_reads if r not in listed]
    assert listed and fetched
    assert all(r.query.get("labelSelector") == "owner=helm" for r in listed)
    assert all(name.startswith("sh.helm.release.v1.") for name in fetched)


@pytest.mark.parametrize("pod_first", [True, False], ids=["pod-before-start", "pod-after-sync"])
def test_a_failing_pod_of_a_cronjobs_job_names_the_cronjob_as_its_workload(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector], pod_first: bool
) -> None:
    kube.create(objects.namespace(name=cluster_objects.NS))
    cron = kube.create(objects.cronjob(name="report", namespace=cluster_objects.NS))
    job = kube.create(objects.failed_job(owner=cron))
    if pod_first:  # the first list has it: Pods list once the Jobs have
        kube.create(objects.failed_job_pod(owner=job))
    collector = start()
    assert collector.wait_synced(10)
    if not pod_first:
        kube.create(objects.failed_job_pod(owner=job))
    received = Received(outbox)
    wait_until(lambda: bool(received.events("pod_error")))
    [error] = received.events("pod_error")
    assert error["data"]["workload"] == {
        "kind": "CronJob",
        "name": "report",
        "job": "report-29012345",
    }


def test_changes_and_deletes_follow_and_relations_rebuild_dependents(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    cluster_objects.populate(kube)
    start()
    received = Received(outbox)
    wait_until(lambda: ("deployment", "shop/web") in received.latest())
    kube.delete("services", "shop", "web")
    wait_until(lambda: received.latest()[("service", "shop/web")]["op"] == "delete")
    # The Deployment's record no longer names the Service, without the Deployment changing.
    wait_until(lambda: received.latest()[("deployment", "shop/web")]["data"]["services"] == [])
    kube.patch("deployments", "shop", "web", {"spec": {"replicas": 5}})
    wait_until(
        lambda: received.latest()[("deployment", "shop/web")]["data"]["desired_replicas"] == 5
    )
    kube.delete("namespaces", None, "shop")  # takes everything in it along
    wait_until(lambda: received.latest()[("deployment", "shop/web")]["op"] == "delete")
    # Its own informer's event: it may reach a later flush than the Deployment's.
    wait_until(lambda: received.latest()[("namespace", "shop")]["op"] == "delete")


def test_a_relist_deletes_every_record_of_objects_that_vanished_unseen(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    collector = start()
    received = Received(outbox)
    wait_until(lambda: expected <= set(received.latest()))
    kube.wait_for_watches(len(collector.informers))
    kube.stall_watches()  # no watch hears the deletes below
    kube.delete("namespaces", None, cluster_objects.NS)  # and everything in it
    kube.compact()  # the history a watch would resume from is gone: every informer relists
    kube.release_stalled()
    namespaced = {slot for slot in expected if slot[1].startswith(f"{cluster_objects.NS}/")}
    assert len(namespaced) >= 8
    # Each informer relists on its own: the namespace's and its objects' deletes come in any
    # order.
    gone = namespaced | {("namespace", cluster_objects.NS)}
    wait_until(lambda: all(received.latest()[slot]["op"] == "delete" for slot in gone))
    latest = received.latest()
    assert latest[("node", "node-1")]["op"] == "upsert"  # what still exists stays
    # The state of the vanished pods went with them.
    assert collector.state.pods.keys() == set()


def test_status_noise_and_resource_version_bumps_produce_nothing(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    kube.create(objects.namespace(name=cluster_objects.NS))
    kube.create(objects.deployment(name="web", namespace=cluster_objects.NS))
    collector = start()
    received = Received(outbox)
    wait_until(lambda: "deployment" in snapshot_kinds(received))  # after the list's upserts
    before = len(received.records)
    for n in range(5):  # a controller writing observedGeneration again and again
        kube.patch("deployments", "shop", "web", {"status": {"observedGeneration": n + 2}})
    # The same watch brings a new Deployment after the noise; once its record is out, a
    # record the noise made would be out too.
    kube.create(objects.deployment(name="sentinel", namespace=cluster_objects.NS))
    wait_until(lambda: ("deployment", "shop/sentinel") in received.latest())
    assert [r for r in received.records[before:] if r["key"] == "shop/web"] == []
    assert collector.coalescer.reporter.snapshot().counters["records_coalesced"] >= 1


def test_ignored_namespaces_and_resources_never_leave(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    kube.create(objects.namespace(name="kube-system"))
    kube.create(objects.deployment(name="coredns", namespace="kube-system"))
    kube.create(objects.namespace(name=cluster_objects.NS))
    kube.create(objects.deployment(name="web", namespace=cluster_objects.NS))
    kube.create(objects.deployment(name="debug", namespace=cluster_objects.NS))
    settings = dataclasses.replace(
        SETTINGS,
        filters=FilterSettings(
            ignore_namespaces=("kube-system",), ignore_resources=("deployment/shop/debug",)
        ),
    )
    start(settings)
    received = Received(outbox)
    # Each snapshot comes after its list's upserts: the ignored ones would be out by then.
    wait_until(lambda: {"deployment", "namespace"} <= snapshot_kinds(received))
    keys = {key for _, key in received.latest()}
    assert "shop/debug" not in keys and "kube-system/coredns" not in keys
    assert "kube-system" not in keys
    # Their deletes stay home too (a delete names the object as much as an upsert does).
    kube.delete("deployments", "kube-system", "coredns")
    kube.delete("deployments", "shop", "debug")
    kube.patch("deployments", "shop", "web", {"spec": {"replicas": 4}})  # heard after them
    wait_until(
        lambda: received.latest()[("deployment", "shop/web")]["data"]["desired_replicas"] == 4
    )
    ignored = {"shop/debug", "kube-system/coredns", "kube-system"}
    assert not [r for r in received.records if r["key"] in ignored]


def test_an_orphaned_replicaset_deletes_its_revision(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    kube.create(objects.namespace(name=cluster_objects.NS))
    web = kube.create(objects.deployment(name="web", namespace=cluster_objects.NS))
    replicaset = kube.create(objects.replicaset(owner=web))
    name = replicaset["metadata"]["name"]
    collector = start()
    received = Received(outbox)
    revision = ("revision", f"shop/{name}")
    wait_until(lambda: revision in received.latest())
    # `kubectl delete deployment --cascade=orphan`: the garbage collector strips the owner.
    # The ReplicaSet lives on, but it is no revision of anything any more.
    kube.delete("deployments", "shop", "web")
    kube.patch("replicasets", "shop", name, {"metadata": {"ownerReferences": None}})
    wait_until(lambda: received.latest()[revision]["op"] == "delete")
    # The Deployment's delete comes from another informer: it may reach another flush.
    wait_until(lambda: received.latest()[("deployment", "shop/web")]["op"] == "delete")
    # Deleted later, it has nothing left to delete; the next snapshot does not list it.
    kube.delete("replicasets", "shop", name)
    # The same watch brings a new revision after the delete; once its record is out, a
    # record the delete made would be out too.
    sentinel = kube.create(objects.deployment(name="sentinel", namespace=cluster_objects.NS))
    sentinel_rs = kube.create(objects.replicaset(owner=sentinel))
    wait_until(lambda: ("revision", f"shop/{sentinel_rs['metadata']['name']}") in received.latest())
    assert [r["op"] for r in received.records if (r["kind"], r["key"]) == revision] == [
        "upsert",
        "delete",
    ]
    assert f"shop/{name}" not in collector.state.produced.keys_of_kind("revision")


def test_an_object_the_normalizer_fails_on_is_skipped_and_its_informer_goes_on(
    kube: FakeKube,
    outbox: StreamOutbox,
    start: Callable[..., Collector],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    normalizer = namespace_kind.NORMALIZER
    upserts = normalizer.upserts
    secret = "do-not-log-this-value"

    def failing(obj: Any, ctx: Any) -> Any:
        if obj.metadata.name.startswith("broken"):
            raise ValueError(f"invalid literal: {secret!r}")
        return upserts(obj, ctx)

    monkeypatch.setattr(normalizer, "upserts", failing)
    kube.create(objects.namespace(name="broken"))
    kube.create(objects.namespace(name="shop"))
    with structlog.testing.capture_logs() as logs:
        collector = start()
        received = Received(outbox)
        wait_until(lambda: ("namespace", "shop") in received.latest())
        kube.create(objects.namespace(name="broken-too"))
        kube.create(objects.namespace(name="later"))
        wait_until(lambda: ("namespace", "later") in received.latest())
    assert {key for kind, key in received.latest() if kind == "namespace"} == {"shop", "later"}
    failed = [line for line in logs if line["event"] == "object_skipped"]
    assert [(line["name"], line["reason"], line["field"]) for line in failed] == [
        ("broken", "normalize_failed", "ValueError"),
        ("broken-too", "normalize_failed", "ValueError"),
    ]
    assert secret not in repr(logs)
    assert all(reporter.snapshot().health.ok for reporter in collector.reporters())


def test_a_forbidden_resource_does_not_stop_the_others(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    kube.forbid("networkpolicies")
    kube.create(objects.namespace(name=cluster_objects.NS))
    kube.create(objects.network_policy(name="deny-all", namespace=cluster_objects.NS))
    collector = start()
    received = Received(outbox)
    wait_until(lambda: ("namespace", "shop") in received.latest())
    wait_until(
        lambda: any(
            r.component == "informer.networkpolicies" and not r.health.ok
            for r in (rep.snapshot() for rep in collector.reporters())
        )
    )
    kube.create(objects.service(name="web", namespace=cluster_objects.NS))
    wait_until(lambda: ("service", "shop/web") in received.latest())


def test_a_resync_resends_every_object_and_clears_the_outbox_mark(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    collector = start()
    received = Received(outbox)
    wait_until(lambda: expected <= set(received.latest()))
    collector.wait_synced(10)
    sent = len(received.records)
    collector.resync()

    def resent() -> set[tuple[str, str]]:
        received.drain()
        return {(r["kind"], r["key"]) for r in received.records[sent:] if r["op"] == "upsert"}

    wait_until(lambda: expected <= resent())
    wait_until(lambda: not collector.resync_in_progress)
    assert not outbox.resync_needed


def test_the_resync_mark_is_cleared_only_once_the_resent_records_are_in_the_outbox(
    kube: FakeKube, tmp_path: Path
) -> None:
    cluster_objects.populate(kube)
    with Outbox(tmp_path / "queue", streams=(DISCOVERY,), bounds=Bounds(max_records=60)) as box:
        stream = box[DISCOVERY]
        # Upserts dropped at the bound (the platform was away): the durable mark is set.
        stream.put(model.upsert("namespace", ObjectMeta(name=f"n{i}"), {}) for i in range(61))
        assert stream.resync_needed
        Received(stream).drain()
        api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
        # A long flush window: only the resync's own commit can put what it re-sends.
        collector = Collector(
            api, stream, settings=dataclasses.replace(SETTINGS, flush_seconds=30.0)
        )
        collector.start()
        try:
            assert collector.wait_synced(10)
            collector.coalescer.flush()
            received = Received(stream)
            received.drain()
            collector.resync()
            wait_until(lambda: not stream.resync_needed)
            # A crash from here on loses nothing: what the resync re-sent is queued.
            received.drain()
            kinds = {r["kind"] for r in received.records}
            assert {"namespace", "deployment", "snapshot"} <= kinds
            assert collector.coalescer.empty
        finally:
            collector.stop()
            api.close()


@pytest.mark.parametrize("forbidden", ["networkpolicies", "clusterroles"])
def test_a_forbidden_resource_neither_blocks_resyncs_nor_snapshots_nor_warm_up(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector], forbidden: str
) -> None:
    kube.forbid(forbidden)
    kube.forbid("cronjobs")  # a warm-up resource, before every later phase
    cluster_objects.populate(kube)
    # Waiting out the warm-up timeout would take longer than any wait below allows.
    collector = start(dataclasses.replace(SETTINGS, warm_up_timeout_seconds=120))
    received = Received(outbox)
    wait_until(lambda: ("service", "shop/web") in received.latest(), timeout=10)

    def snapshot_kinds() -> set[str]:
        return {r["data"]["of"] for r in received.events("snapshot")}

    # rbac's snapshot goes out although one of its four sources cannot list.
    wait_until(lambda: {"rbac", "service", "deployment"} <= snapshot_kinds(), timeout=10)
    # A resync finishes without the forbidden ones, and a later one runs in full.
    for _ in range(2):
        sent = len(received.records)
        collector.resync()
        wait_until(lambda: not collector.resync_in_progress, timeout=10)
        received.drain()
        resent = {(r["kind"], r["key"]) for r in received.records[sent:] if r["op"] == "upsert"}
        assert ("deployment", "shop/web") in resent and ("namespace", "shop") in resent
    assert not [key for kind, key in received.latest() if kind == "cronjob"]


def test_anti_entropy_leaves_the_other_informers_watching(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    cluster_objects.populate(kube)
    with structlog.testing.capture_logs() as logs:
        collector = start(dataclasses.replace(SETTINGS, anti_entropy_seconds=1.0))
        assert collector.wait_synced(10)

        def rounds() -> int:
            return collector.reporter.snapshot().counters.get("anti_entropy_rounds", 0)

        wait_until(lambda: rounds() >= 1, timeout=60)
    # Each informer relisted its own resource; none saw its watch fail on the way.
    assert [line for line in logs if line["event"] == "informer_failing"] == []
    failures = {
        i.resource.plural: i.reporter.snapshot().counters.get("failures", 0)
        for i in collector.informers
    }
    assert set(failures.values()) == {0}, failures


def _lists(request: RequestRecord) -> bool:
    """A list in pages, or streamed as a watch's initial events."""
    if request.watch:
        return request.query.get("sendInitialEvents") == "true"
    return request.method == "GET" and "limit" in request.query


def test_warm_up_lists_namespaces_deployments_and_cronjobs_before_anything_else(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    cluster_objects.populate(kube)
    collector = start()
    assert collector.wait_synced(10)
    lists = [r.path.rsplit("/", 1)[-1] for r in kube.requests if _lists(r)]
    first = {"namespaces", "deployments", "cronjobs"}
    assert set(lists[:3]) == first
    assert set(lists) > first


def test_switched_off_collection_reads_no_secrets_and_no_logs(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    settings = dataclasses.replace(SETTINGS, collect_helm_releases=False, collect_job_logs=False)
    start(settings)
    received = Received(outbox)
    expected -= {("helm_release", "shop/shop/v1")}
    wait_until(lambda: expected <= set(received.latest()))
    job = received.latest()[("job_execution", "shop/report-29012345")]["data"]
    assert job["status"] == "failed" and job["logs"] is None
    assert not [r for r in kube.requests if "/secrets" in r.path or r.path.endswith("/log")]
    assert not any(kind == "helm_release" for kind, _ in received.latest())


SANDBOX = (
    "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network"
    ' for sandbox "3f1c9a0e": plugin type="calico" failed (add): connection is unauthorized'
)


def test_warning_events_become_pod_errors_once_per_series_and_only_warnings_are_read(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    cluster_objects.populate(kube)
    rs = kube.get("replicasets", cluster_objects.NS, "web-5d8f7c9b6")
    stuck = kube.create(objects.creating_pod(owner=rs))
    sandbox = kube.create(
        objects.event(involved=stuck, reason="FailedCreatePodSandBox", message=SANDBOX)
    )
    kube.create(
        objects.event(
            involved=stuck,
            reason="Scheduled",
            message="Successfully assigned",
            event_type="Normal",
            series="a1",
        )
    )
    start()
    received = Received(outbox)

    def by_event() -> list[dict[str, Any]]:
        return [
            e for e in received.events("pod_error") if e["data"]["details"]["source"] == "event"
        ]

    wait_until(lambda: len(by_event()) == 1)
    [record] = by_event()
    assert record["data"]["reason"] == "CreatePodSandboxError"
    assert record["data"]["pod"] == stuck["metadata"]["name"]
    assert record["data"]["workload"]["name"] == "web"
    assert record["data"]["workload"]["replicaset"] == rs["metadata"]["name"]
    # The series counts up: nothing new. A later incident (the sentinel) does arrive.
    sandbox["count"] = 9
    kube.update(sandbox)
    kube.create(
        objects.event(
            involved=stuck,
            reason="FailedMount",
            message='MountVolume.SetUp failed for volume "creds" : secret "creds" not found',
            series="b2",
        )
    )
    wait_until(lambda: len(by_event()) == 2)
    assert [e["data"]["reason"] for e in by_event()] == ["CreatePodSandboxError", "FailedMount"]
    reads = [r for r in kube.requests if r.path == "/api/v1/events"]
    assert reads and all(r.query.get("fieldSelector") == "type=Warning" for r in reads)


def test_a_storm_of_warning_events_gives_one_record_per_incident(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    cluster_objects.populate(kube)
    rs = kube.get("replicasets", cluster_objects.NS, "web-5d8f7c9b6")
    pods = []
    for n in range(40):
        pod = objects.creating_pod(owner=rs)
        pod["metadata"]["name"] = f"web-5d8f7c9b6-s{n:03d}"
        pods.append(kube.create(pod))
    collector = start()
    assert collector.wait_synced(10)
    received = Received(outbox)
    mount = 'MountVolume.SetUp failed for volume "creds" : secret "creds" not found'
    probe = "Readiness probe failed: HTTP probe failed with statuscode: 503"
    storm = []
    for pod in pods:
        storm.append(kube.create(objects.event(involved=pod, reason="FailedMount", message=mount)))
        storm.append(
            kube.create(
                objects.event(
                    involved=pod,
                    reason="Unhealthy",
                    message=probe,
                    field_path="spec.containers{app}",
                    series="p0",
                )
            )
        )
    # The kubelets count up, and their correlators open new series of the same incidents.
    for count in range(2, 7):
        for index, event in enumerate(storm):
            storm[index] = kube.update(event | {"count": count})
    for pod in pods:
        kube.create(objects.event(involved=pod, reason="FailedMount", message=mount, series="m1"))
    sentinel = objects.event(
        involved=pods[0], reason="FailedCreatePodSandBox", message=SANDBOX, series="sentinel"
    )
    kube.create(sentinel)

    def reasons() -> list[str]:
        return [
            e["data"]["reason"]
            for e in received.events("pod_error")
            if e["data"]["details"]["source"] == "event"
        ]

    wait_until(lambda: "CreatePodSandboxError" in reasons())
    found = reasons()
    assert found.count("FailedMount") == len(pods)
    assert found.count("ReadinessProbeFailed") == len(pods)
    assert len(found) == 2 * len(pods) + 1
    # The storm is remembered in the store, one row per series, not on the heap.
    assert len(collector.state.events.missing(frozenset())) == 3 * len(pods) + 1


def test_events_in_ignored_namespaces_or_about_ignored_pods_give_nothing(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    cluster_objects.populate(kube)
    mount = 'MountVolume.SetUp failed for volume "creds" : secret "creds" not found'
    pods = {}
    for ns in ("scratch", "ops"):
        kube.create(objects.namespace(name=ns))
        batch = objects.with_uid(objects.deployment(name="batch", namespace=ns), "abc")
        rs = kube.create(objects.replicaset(owner=batch))
        pods[ns] = kube.create(objects.creating_pod(owner=rs))
        kube.create(objects.event(involved=pods[ns], reason="FailedMount", message=mount))
    rs = kube.get("replicasets", cluster_objects.NS, "web-5d8f7c9b6")
    skipped = kube.create(objects.creating_pod(owner=rs))
    kube.create(objects.event(involved=skipped, reason="FailedMount", message=mount))
    start(
        dataclasses.replace(
            SETTINGS,
            filters=FilterSettings(
                ignore_namespaces=("scratch",),
                ignore_resources=(f"pod/{cluster_objects.NS}/web-5d8f7c9b6-c4k8n",),
            ),
        )
    )
    received = Received(outbox)

    def from_events() -> list[dict[str, Any]]:
        return [
            e for e in received.events("pod_error") if e["data"]["details"]["source"] == "event"
        ]

    # A later Event (the sentinel) comes after everything the list held.
    wait_until(lambda: len(from_events()) >= 1)
    probe = "Readiness probe failed: HTTP probe failed with statuscode: 503"
    kube.create(
        objects.event(
            involved=pods["ops"],
            reason="Unhealthy",
            message=probe,
            field_path="spec.containers{app}",
            series="p1",
        )
    )
    wait_until(lambda: len(from_events()) >= 2)
    ops = pods["ops"]["metadata"]["name"]
    assert sorted((e["namespace"], e["name"], e["data"]["reason"]) for e in from_events()) == [
        ("ops", ops, "FailedMount"),
        ("ops", ops, "ReadinessProbeFailed"),
    ]


def test_switched_off_events_are_never_read(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    cluster_objects.populate(kube)
    collector = start(dataclasses.replace(SETTINGS, collect_events=False))
    assert collector.wait_synced(10)
    assert not [r for r in kube.requests if "/events" in r.path]


def test_forbidden_job_logs_ship_the_record_without_them_and_say_so_once(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    # Only the log is a single Pod read: no list or watch of Pods meets this.
    kube.fail_next(403, 1000, path_prefix=f"/api/v1/namespaces/{cluster_objects.NS}/pods/")
    with structlog.testing.capture_logs() as logs:
        collector = start()
        received = Received(outbox)
        wait_until(lambda: expected <= set(received.latest()))
        wait_until(lambda: collector.reporter.snapshot().counters.get("job_logs_forbidden", 0) >= 1)
        flushed(kube, received, "after-the-read")
    job = received.latest()[("job_execution", "shop/report-29012345")]["data"]
    assert job["status"] == "failed" and job["logs"] is None
    said = [(e["event"], e.get("permission")) for e in logs if "job_log" in e["event"]]
    assert said == [
        (
            "job_logs_forbidden",
            'forbidden: cannot get resource "pods/log" in API group "" '
            f'in the namespace "{cluster_objects.NS}"',
        )
    ]
    assert collector.reporter.snapshot().counters["job_logs_forbidden"] == 1
    assert all(reporter.snapshot().health.ok for reporter in collector.reporters())


def test_a_job_log_the_kubelet_fails_to_give_twice_is_read_again_and_shipped_with_its_record(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    pod = "report-29012345-q7w2s"
    kube.set_pod_log(cluster_objects.NS, pod, "report", "x" * 10_000 + "\nexit 2\n")
    # What the API server answers when the node's kubelet does not (dial or TLS timeout).
    kube.fail_next(500, 2, path_prefix=f"/api/v1/namespaces/{cluster_objects.NS}/pods/{pod}/log")
    job_logs = JobLogSettings(retry_seconds=0.05, max_retry_seconds=0.1)
    collector = start(dataclasses.replace(SETTINGS, job_logs=job_logs))
    received = Received(outbox)
    wait_until(lambda: expected <= set(received.latest()) and job_logs_read(received))
    # Read within the record's wait for it: one record, with the log.
    [job] = [r["data"] for r in received.records if r["kind"] == "job_execution"]
    long_line, last = job["logs"]
    assert len(long_line.encode()) < 2100 and last == "exit 2"
    reads = [r for r in kube.requests if r.path.endswith("/log")]
    assert [r.status for r in reads] == [500, 500, 200]
    assert collector.reporter.snapshot().counters["job_log_reads_failed"] == 2


def test_cluster_metadata_says_nothing_of_the_nodes_and_is_not_sent_until_they_have_listed(
    kube: FakeKube, outbox: StreamOutbox
) -> None:
    cluster_objects.populate(kube)  # one Node, on AWS
    api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
    collector = Collector(api, outbox, settings=SETTINGS)
    probe = MetadataProbe(enabled=False)
    try:
        early = collector.cluster_metadata(probe, leader="agent-0")
        assert not collector.nodes_known()
        assert (early["node_count"], early["provider"]) == (None, "unknown")
        collector.list_once()  # flushes whatever was offered
        received = Received(outbox)
        assert ("cluster_metadata", "cluster") not in received.latest()
        assert collector.nodes_known()
        known = collector.cluster_metadata(probe, leader="agent-0")
        collector.coalescer.flush()
    finally:
        api.close()  # a one-shot collector: no thread to stop
    assert (known["node_count"], known["provider"], known["region"]) == (1, "eks", "eu-west-1")
    assert received.latest()[("cluster_metadata", "cluster")]["data"] == known


def test_a_forbidden_release_secret_read_names_the_get_and_the_release_follows_once_allowed(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    prefix = f"/api/v1/namespaces/{cluster_objects.NS}/secrets/"
    kube.fail_next(403, 10_000, path_prefix=prefix, verb="get")
    collector = start()
    received = Received(outbox)
    release = ("helm_release", "shop/shop/v1")
    wait_until(lambda: expected - {release} <= set(received.latest()))
    [secrets] = [i for i in collector.informers if i.resource.plural == "secrets"]
    denied = 'forbidden: cannot get resource "secrets" in API group "" in the namespace "shop"'
    wait_until(lambda: secrets.reporter.health.reason == denied)
    assert release not in received.latest()

    kube.clear_faults()
    wait_until(lambda: release in received.latest())
    wait_until(lambda: secrets.reporter.health.ok)


def test_snapshots_follow_each_kinds_lists_and_rbac_waits_for_all_four(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    collector = start()
    received = Received(outbox)
    wait_until(lambda: expected <= set(received.latest()))
    collector.wait_synced(10)

    def snapshots() -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for record in received.events("snapshot"):
            found.setdefault(record["data"]["of"], []).append(record["data"])
        return found

    wait_until(lambda: len(snapshots()) == 12)
    rbac = snapshots()["rbac"]
    assert len(rbac) == 1  # one for the four RBAC lists together
    assert rbac[0]["keys"] == sorted(key for kind, key in expected if kind == "rbac")
    assert (rbac[0]["part"], rbac[0]["parts"]) == (1, 1)
    # Each snapshot comes after the upserts of its list.
    order = [(r["kind"], r["data"].get("of")) for r in received.records]
    assert order.index(("snapshot", "deployment")) > order.index(("deployment", None))

    # A relist of one RBAC resource alone is no complete picture of the kind ...
    roles = next(i for i in collector.informers if i.resource.plural == "roles")
    roles.request_relist()
    collector.api.abort_streams()
    wait_until(lambda: roles.reporter.snapshot().counters.get("lists", 0) >= 2)
    flushed(kube, received, "sentinel")  # a snapshot the relist made would be out by now
    assert len(snapshots()["rbac"]) == 1
    # ... until the other three have listed again too.
    for informer in collector.informers:
        if informer.resource.group_version.startswith("rbac.authorization.k8s.io/"):
            informer.request_relist()
    collector.api.abort_streams()
    wait_until(lambda: len(snapshots()["rbac"]) == 2)


def test_anti_entropy_sends_everything_again_one_resource_at_a_time(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    start(dataclasses.replace(SETTINGS, anti_entropy_seconds=1.0))
    received = Received(outbox)
    wait_until(lambda: expected <= set(received.latest()))
    first = len(received.records)

    def resent() -> set[tuple[str, str]]:
        received.drain()
        return {(r["kind"], r["key"]) for r in received.records[first:] if r["op"] == "upsert"}

    # Nothing changed in the cluster, yet every object is sent again, with snapshots.
    wait_until(lambda: expected - {("cluster_metadata", "cluster")} <= resent(), timeout=30)

    def snapshot_kinds() -> set[str]:
        received.drain()
        return {r["data"]["of"] for r in received.records[first:] if r["kind"] == "snapshot"}

    # A resource's snapshot follows its records, possibly in the next flush window.
    wait_until(lambda: {"deployment", "namespace", "rbac", "helm_release"} <= snapshot_kinds())


def test_records_held_for_their_relations_go_out_once_complete_before_their_snapshot(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    expected = cluster_objects.populate(kube)
    for n in range(5):
        kube.create(objects.deployment(name=f"extra-{n}", namespace=cluster_objects.NS))
    # A tiny buffer: commits happen in the middle of the rebuild that releases held records.
    collector = start(dataclasses.replace(SETTINGS, flush_max_records=3))
    received = Received(outbox)
    wait_until(lambda: expected <= set(received.latest()))
    wait_until(lambda: "deployment" in {r["data"]["of"] for r in received.events("snapshot")})
    deployments = [r for r in received.records if r["kind"] == "deployment"]
    # Each Deployment once, already naming its Service and HPA: nothing half-built went out.
    assert sorted(r["key"] for r in deployments) == sorted(
        [f"{cluster_objects.NS}/web", *(f"{cluster_objects.NS}/extra-{n}" for n in range(5))]
    )
    web = next(r for r in deployments if r["key"] == f"{cluster_objects.NS}/web")
    assert web["data"]["services"] == ["web"] and web["data"]["hpa"] is not None
    order = [(r["kind"], r["data"].get("of")) for r in received.records]
    last_deployment = max(i for i, slot in enumerate(order) if slot == ("deployment", None))
    assert order.index(("snapshot", "deployment")) > last_deployment
    assert collector.coalescer.reporter.snapshot().health.ok


def test_a_snapshot_waiting_for_a_source_that_fails_later_goes_out_once_it_fails(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    cluster_objects.populate(kube)
    # The ClusterRoles watch must stay open until the test ends it: a quiet watch reaching
    # its read timeout would reconnect into the 403 early.
    quiet_for_long = dataclasses.replace(FAST, read_timeout_seconds=120.0)
    collector = start(dataclasses.replace(SETTINGS, informer=quiet_for_long))
    received = Received(outbox)

    def rbac_snapshots() -> int:
        return sum(1 for r in received.events("snapshot") if r["data"]["of"] == "rbac")

    wait_until(lambda: rbac_snapshots() == 1)
    informers = {i.resource.plural: i for i in collector.informers}
    kube.forbid("clusterroles")
    # Three of the four RBAC sources list again; ClusterRoles' watch is still open and
    # healthy, so the snapshot waits for it.
    others = ("roles", "rolebindings", "clusterrolebindings")
    lists = {plural: informers[plural].reporter.snapshot().counters["lists"] for plural in others}
    for plural in others:
        informers[plural].request_relist()
        collector.api.abort_streams(informers[plural].resource.path)
    wait_until(
        lambda: all(informers[p].reporter.snapshot().counters["lists"] > lists[p] for p in others)
    )
    flushed(kube, received, "sentinel")  # a snapshot the lists made would be out by now
    assert rbac_snapshots() == 1
    # Only now does ClusterRoles find it cannot list: no list will come to trigger the
    # snapshot, the check before each flush does.
    collector.api.abort_streams(informers["clusterroles"].resource.path)
    wait_until(lambda: not informers["clusterroles"].reporter.snapshot().health.ok)
    wait_until(lambda: rbac_snapshots() == 2)


# -- how lists arrive does not change what is sent --------------------------------------------


def _content(received: Received) -> dict[tuple[str, str], Any]:
    """What the platform would hold: each upsert's data, without ids and timestamps."""
    return {slot: record["data"] for slot, record in received.latest().items()}


def _snapshot_keys(received: Received) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for record in received.events("snapshot"):
        keys.setdefault(record["data"]["of"], []).extend(record["data"]["keys"])
    return {kind: sorted(found) for kind, found in keys.items()}


@pytest.mark.parametrize(
    ("mode", "streaming", "cut"),
    [
        ("serve", True, False),  # streamed
        ("serve", True, True),  # streamed, a stream cut short, listed in pages instead
        ("refuse", True, False),  # 422: pages from then on
        ("ignore", True, False),  # a plain watch came back: pages from then on
    ],
    ids=["streamed", "stream cut", "refused", "ignored"],
)
def test_streamed_lists_and_their_fallbacks_send_what_paginated_lists_send(
    mode: str,
    streaming: bool,
    cut: bool,
    kube: FakeKube,
    tmp_path: Path,
) -> None:
    def collect(settings: CollectorSettings, directory: Path) -> Received:
        with Outbox(directory, streams=(DISCOVERY,)) as box:
            api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
            collector = Collector(api, box[DISCOVERY], settings=settings)
            collector.start()
            try:
                assert collector.wait_synced(10)
                received = Received(box[DISCOVERY])
                wait_until(lambda: expected <= set(received.latest()) and job_logs_read(received))
                wait_until(lambda: set(_snapshot_keys(received)) >= {k for k, _ in expected})
            finally:
                collector.stop()
                api.close()
            received.drain()
            return received

    expected = cluster_objects.populate(kube)
    paged = dataclasses.replace(SETTINGS, informer=dataclasses.replace(FAST, streaming_lists=False))
    baseline = collect(paged, tmp_path / "paged")
    kube.set_streaming_lists(mode)
    if cut:
        for resource in ("deployments", "pods", "secrets", "replicasets"):
            kube.drop_initial_events(resource, after=1)
    # A server that ignores the parameters sends no bookmark while nothing changes: silence
    # tells the informer, as soon as this.
    quiet = dataclasses.replace(FAST, initial_events_quiet_seconds=0.5)
    other = collect(dataclasses.replace(SETTINGS, informer=quiet), tmp_path / "other")
    assert _content(other) == _content(baseline)
    assert _snapshot_keys(other) == _snapshot_keys(baseline)
    assert {(r["kind"], r["key"]) for r in other.events("pod_error")} == {
        (r["kind"], r["key"]) for r in baseline.events("pod_error")
    }
    streamed = [r for r in kube.requests if r.query.get("sendInitialEvents") == "true"]
    assert bool(streamed) == streaming


def keep_as_before(state_file: Path) -> int:
    """Store every kept record's data as releases before this one did (a msgpack map, not
    the record's JSON); how many."""
    with contextlib.closing(sqlite3.connect(state_file)) as db:
        rows = db.execute("SELECT rowid, kept FROM records WHERE kept IS NOT NULL").fetchall()
        for rowid, kept in rows:
            meta, data = msgspec.msgpack.decode(kept)
            earlier = msgspec.msgpack.encode([meta, msgspec.json.decode(data)])
            db.execute("UPDATE records SET kept = ? WHERE rowid = ?", (earlier, rowid))
        db.commit()
    return len(rows)


def web_services(received: Received) -> list[str] | None:
    """The Services the Deployment shop/web's latest record names (None: no record yet)."""
    web = received.latest().get(("deployment", "shop/web"))
    return None if web is None else web["data"]["services"]


@pytest.mark.parametrize("kept", ["as written", "as the release before wrote it"])
def test_a_release_revision_already_recorded_is_not_read_again_after_a_restart(
    kept: str, kube: FakeKube, tmp_path: Path
) -> None:
    expected = cluster_objects.populate(kube)
    settings = dataclasses.replace(SETTINGS, state_file=tmp_path / "state.sqlite")

    def run(change: Callable[[], None] | None = None) -> list[dict[str, Any]]:
        with Outbox(tmp_path / "queue", streams=(DISCOVERY,)) as box:
            api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
            collector = Collector(api, box[DISCOVERY], settings=settings)
            collector.start()
            received = Received(box[DISCOVERY])
            try:
                assert collector.wait_synced(10)
                wait_until(lambda: bool(received.events("snapshot")))
                wait_until(
                    lambda: "helm_release" in {r["data"]["of"] for r in received.events("snapshot")}
                )
                if change is not None:
                    change()
                    # Rebuilt from what was kept: the Deployment did not change.
                    wait_until(lambda: web_services(received) == [])
            finally:
                collector.stop()
                api.close()
            received.drain()
            return received.records

    first = run()
    assert ("helm_release", "shop/shop/v1") in {(r["kind"], r["key"]) for r in first}
    if kept == "as the release before wrote it":
        assert keep_as_before(tmp_path / "state.sqlite") >= 2  # a Deployment's and the release's
    kube.clear_requests()
    again = run(change=lambda: kube.delete("services", "shop", "web"))
    reads = [r.path for r in kube.requests if "/secrets/" in r.path]
    assert reads == []  # the revision's resourceVersion is the one recorded: no body read
    assert not [r for r in again if r["kind"] == "helm_release"]  # and nothing sent again
    assert expected  # the cluster was there all along

    # A new revision is read, and only it.
    kube.create(cluster_objects.helm_release_secret(revision=2))
    run()
    reads = [r.path.rsplit("/", 1)[1] for r in kube.requests if "/secrets/" in r.path]
    assert reads == ["sh.helm.release.v1.shop.v2"]


def test_a_release_body_that_cannot_be_read_for_now_is_read_again_and_nothing_is_deleted(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    cluster_objects.populate(kube)
    kube.fail_next(500, 2, path_prefix="/api/v1/namespaces/shop/secrets/", verb="get")
    collector = start()
    received = Received(outbox)
    wait_until(lambda: ("helm_release", "shop/shop/v1") in received.latest())
    assert not [r for r in received.records if r["kind"] == "helm_release" and r["op"] == "delete"]
    informer = next(i for i in collector.informers if i.resource.plural == "secrets")
    assert informer.reporter.snapshot().counters["failures"] >= 1


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity (Linux) and two CPUs",
)
def test_the_warm_up_runs_on_one_cpu_and_gives_every_cpu_back_once_all_has_listed(
    kube: FakeKube, outbox: StreamOutbox, start: Callable[..., Collector]
) -> None:
    allowed = frozenset(os.sched_getaffinity(0))
    cluster_objects.populate(kube)
    with structlog.testing.capture_logs() as logs:
        collector = start()
        assert collector.wait_synced(10)

        def given_back() -> bool:
            return any(line["event"] == "cpu_affinity_restored" for line in logs)

        wait_until(given_back)
    events = [line["event"] for line in logs if line["event"].startswith("cpu_affinity")]
    assert events == ["cpu_affinity_narrowed", "cpu_affinity_restored"]
    narrowed = next(line for line in logs if line["event"] == "cpu_affinity_narrowed")
    assert narrowed["cpu"] in allowed
    # Every thread of the process, the informers' started during the warm-up among them.
    cpus = []
    for name in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            cpus.append(frozenset(os.sched_getaffinity(int(name))))
    assert len(cpus) > len(collector.informers)
    assert set(cpus) == {allowed}
