"""Warning Events on the real server: written as kubelets and controllers write them (the
ReplicaSet controller's own, merged by its correlator), read by the agent's Events
informer and normalizer in this process, and that informer's requests across etcd
compactions read back from the audit log."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Set
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collector.event_messages import COMBINED
from collector.filters import Filters
from collector.informer import Informer
from collector.normalize.pod_error import PodErrorNormalizer
from collector.normalize.pod_event import Event, PodEventNormalizer
from collector.resource_version import is_behind
from collector.resources import EVENTS
from collector.state import StateStore
from kube.api import KubeApi
from kube.cluster import load_target
from sandbox import objects
from sandbox.controlplane import ControlPlane, ControlPlaneError, record_of
from shipper.records import Record
from tests.informer_harness import FAST
from tests.pod_status import CTX
from tests.real_cluster import NewNamespace
from tests.waiting import wait_until

# Event watches the server ends after 3-4 s; a resourceVersion refreshed after 1 s still.
QUICK = dataclasses.replace(FAST, read_timeout_seconds=6.0, progress_probe_seconds=1.0)
PROBE_503 = "Readiness probe failed: HTTP probe failed with statuscode: 503"
PROBE_500 = "Readiness probe failed: HTTP probe failed with statuscode: 500"
PROBE_REFUSED = (
    'Readiness probe failed: Get "http://10.244.1.7:8080/ready": dial tcp 10.244.1.7:8080:'
    " connect: connection refused"
)


class Reported:
    """The Events informer's sink as the agent's: each Event through the normalizer and
    its state store, the records kept; a completed list forgets the series gone."""

    def __init__(self) -> None:
        store = StateStore()
        pods = PodErrorNormalizer(store.pods)
        self.normalizer = PodEventNormalizer(pods, store.events, Filters())
        self._lock = threading.Lock()
        self._records: list[Record] = []

    def apply(self, obj: Event) -> None:
        records = self.normalizer.upserts(obj, CTX)
        with self._lock:
            self._records.extend(records)

    def remove(self, obj: Event) -> None:
        self.normalizer.deletes(obj, CTX)

    def listed(self, *, resource_version: str, listed_at: str, keys: Set[str]) -> None:
        for key in self.normalizer.missing(keys):
            self.normalizer.forget(key)

    def records(self, *namespaces: str) -> list[dict[str, Any]]:
        """The data of the records about objects in `namespaces` (other tests' Events are
        in the cluster too), in the order they came."""
        with self._lock:
            return [r.data for r in self._records if r.key.split("/")[0] in namespaces]


Start = Callable[[], tuple[Informer[Event], Reported]]


@pytest.fixture
def events_informer(real_kubeconfig: Path) -> Iterator[Start]:
    """Start the agent's Events informer on the real server (as its admin), in QUICK time."""
    api = KubeApi(load_target({}, kubeconfig=str(real_kubeconfig)))
    started: list[Informer[Event]] = []

    def start() -> tuple[Informer[Event], Reported]:
        reported = Reported()
        informer = Informer(api, EVENTS, Event, reported, settings=QUICK)
        informer.start()
        started.append(informer)
        assert informer.wait_synced(20)
        return informer, reported

    yield start
    for informer in started:
        informer.stop()
    api.abort_streams()
    for informer in started:
        assert informer.join(5)
    api.close()


def kubelet_event(pod: dict[str, Any], message: str, **options: Any) -> dict[str, Any]:
    return objects.event(
        involved=pod,
        reason="Unhealthy",
        message=message,
        field_path="spec.containers{app}",
        **options,
    )


def merged_failed_create(control_plane: ControlPlane, namespace: str) -> dict[str, Any]:
    """A Deployment whose pods a quota refuses: the ReplicaSet controller's correlator
    merges its FailedCreate Events (each names another pod) from the tenth on. The
    unmerged ones are deleted, as the API server does an hour after their last update, so
    what is left is what a long incident leaves: the merged Event, still counting."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute", "namespace": namespace},
        "spec": {"hard": {"pods": "0"}},
    }
    control_plane.create(quota)

    answers: list[str] = []

    def quota_admitted() -> bool:
        # The quota admission reads quotas from a cache of its own: until the new one is
        # there, a pod gets in, and the Deployment would never be refused.
        try:
            control_plane.create(objects.pod(name="probe", namespace=namespace), dryRun="All")
        except ControlPlaneError as refused:
            answers.append(str(refused))
            return refused.status == 403 and "exceeded quota" in str(refused)
        answers.append("admitted")
        return False

    wait_until(quota_admitted, timeout=60, poll=0.2, explain=lambda: answers[-1])
    web = objects.deployment(name="web", namespace=namespace, replicas=1)
    del web["status"]
    control_plane.create(web)

    def merged() -> list[dict[str, Any]]:
        found = control_plane.list("v1", "Event", namespace, fieldSelector="reason=FailedCreate")
        return [event for event in found if event["message"].startswith(COMBINED)]

    def progress() -> str:
        # What the controllers did so far, should the merged Event be late.
        failures = control_plane.list("v1", "Event", namespace, fieldSelector="reason=FailedCreate")
        sets = [
            s["metadata"]["name"] for s in control_plane.list("apps/v1", "ReplicaSet", namespace)
        ]
        log = (control_plane.dir / "logs" / "kube-controller-manager.log").read_text()
        mentions = [line for line in log.splitlines() if namespace in line][-5:]
        return (
            f"{len(failures)} FailedCreate Events, ReplicaSets {sets}, the controller"
            f" manager's last lines on the namespace: {mentions}"
        )

    # The ReplicaSet controller retries a refused create 5 ms, 10 ms, ... apart: the tenth
    # refusal (the first merged) comes about 2.6 s after the first, the next ones 5, 10 and
    # 20 s later; a machine slow enough to miss the tenth gets up to a minute.
    wait_until(lambda: bool(merged()), timeout=60, poll=0.2, explain=progress)
    for event in control_plane.list("v1", "Event", namespace, fieldSelector="reason=FailedCreate"):
        if not event["message"].startswith(COMBINED):
            control_plane.delete("v1", "Event", namespace, event["metadata"]["name"])
    [event] = merged()
    return event


def test_merged_and_old_series_beside_live_ones_report_every_incident_once(
    control_plane: ControlPlane, real_namespace: NewNamespace, events_informer: Start
) -> None:
    quota_ns = real_namespace("quota")
    refused = merged_failed_create(control_plane, quota_ns)
    ns = real_namespace("probes")
    web_a, web_b = (
        control_plane.create(objects.pod(name=name, namespace=ns)) for name in ("web-a", "web-b")
    )
    # The kubelet's correlator merged web-a's probe failures (ten messages in ten minutes)
    # into an Event of its own, named after the pod and the moment, which it counts up.
    merged = control_plane.create(
        kubelet_event(web_a, COMBINED + PROBE_503, series=f"{time.time_ns():x}")
    )
    # web-b: an old series of its probe failures, quiet for 40 minutes, and a live one.
    long_ago = datetime.now(UTC) - timedelta(minutes=40)
    control_plane.create(kubelet_event(web_b, PROBE_REFUSED, count=12, series="0ld", now=long_ago))
    live = control_plane.create(kubelet_event(web_b, PROBE_500, count=5, series="11fe"))
    informer, reported = events_informer()
    control_plane.patch("v1", "Event", ns, live["metadata"]["name"], {"count": 6})
    counted = control_plane.patch("v1", "Event", ns, merged["metadata"]["name"], {"count": 37})

    wait_until(lambda: len(reported.records(ns, quota_ns)) == 3)
    by_target = {(r["pod"], r["reason"]): r for r in reported.records(ns, quota_ns)}
    assert by_target[("web-a", "ReadinessProbeFailed")]["message"] == COMBINED + PROBE_503
    assert by_target[("web-b", "ReadinessProbeFailed")]["message"] == PROBE_500
    failed_create = by_target[(None, "FailedCreate")]["message"]
    quota = "exceeded quota: compute, requested: pods=1, used: pods=0, limited: pods=0"
    assert failed_create == refused["message"]  # the controller's own words, nothing quoted
    assert failed_create.startswith(f"{COMBINED}Error creating: pods ")
    assert failed_create.endswith(quota)
    # The counts rising (the merged probe series at 37) added nothing.
    rv = counted["metadata"]["resourceVersion"]
    wait_until(lambda: not is_behind(informer.resource_version, rv))
    assert len(reported.records(ns, quota_ns)) == 3


def events_requests(
    control_plane: ControlPlane, mark: int, since: datetime
) -> list[tuple[str, str]]:
    """The cluster-wide Event requests received since `since` (the audit log after `mark`
    also ends requests begun before it: a streaming list the informer left at its end),
    as (verb, what kind of read)."""
    found: dict[str, tuple[str, str]] = {}
    for event in control_plane.audit(mark):
        record = record_of(event)
        received = datetime.fromisoformat(event["requestReceivedTimestamp"])
        if record.path != "/api/v1/events" or record.info is None or received < since:
            continue
        query = record.query
        if record.info.verb == "list":
            kind = "one object" if query.get("limit") == "1" else "full"
        else:
            kind = "streaming list" if query.get("sendInitialEvents") == "true" else "resume"
        found[event["auditID"]] = (record.info.verb, kind)
    return list(found.values())


def watches(informer: Informer[Event]) -> int:
    return informer.reporter.snapshot().counters.get("watches", 0)


def test_a_quiet_event_watch_outlives_compactions_with_small_requests_and_still_reports(
    control_plane: ControlPlane, real_namespace: NewNamespace, events_informer: Start
) -> None:
    ns = real_namespace("quiet")
    pod = control_plane.create(objects.pod(name="web-c", namespace=ns))
    informer, reported = events_informer()
    mark, since = control_plane.audit_mark(), datetime.now(UTC)
    # kube-apiserver's compactor keeps the last interval's history: it compacts up to the
    # revision it saw one interval before. The quiet informer resumes past it by then.
    written = control_plane.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later", "namespace": ns}}
    )
    earlier = written["metadata"]["resourceVersion"]
    wait_until(lambda: not is_behind(informer.resource_version, earlier))
    control_plane.compact(int(earlier))
    resumed_after = watches(informer) + 2
    wait_until(lambda: watches(informer) >= resumed_after)
    control_plane.create(kubelet_event(pod, PROBE_503, series="a1"))
    wait_until(lambda: len(reported.records(ns)) == 1)
    counters = informer.reporter.snapshot().counters
    assert counters.get("relists", 0) == 0
    assert counters.get("quiet_watches", 0) == 0  # the server ended every watch
    requests = events_requests(control_plane, mark, since)
    assert set(requests) <= {("watch", "resume"), ("list", "one object")}
    assert requests.count(("list", "one object")) <= requests.count(("watch", "resume"))

    # A compaction of everything (a far harsher one than the API server's): at most one
    # relist, a streaming one, and the next Warning is reported.
    mark, since = control_plane.audit_mark(), datetime.now(UTC)
    control_plane.compact()
    resumed_after = watches(informer) + 2
    wait_until(lambda: watches(informer) >= resumed_after)
    control_plane.create(
        objects.event(involved=pod, reason="FailedMount", message="MountVolume.SetUp failed")
    )
    wait_until(lambda: len(reported.records(ns)) == 2)
    assert reported.records(ns)[1]["reason"] == "FailedMount"
    requests = events_requests(control_plane, mark, since)
    assert ("list", "full") not in requests
    assert requests.count(("watch", "streaming list")) <= 1
