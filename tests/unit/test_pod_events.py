"""Warning Events -> pod errors: one record per incident, redacted, on the right workload.

Events are written as kubelets, the scheduler and the controllers write them (the old
form with `count`/`firstTimestamp`/`lastTimestamp`/`source`, and the events.k8s.io form as
the core API shows it, with `eventTime`, `series` and `reportingComponent`), with their
real message formats, encoded to JSON and decoded the way the informer hands them over.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from collector import event_messages
from collector.filters import Filters
from collector.normalize.pod_error import PodErrorNormalizer
from collector.normalize.pod_event import Event, PodEventNormalizer
from collector.state import StateStore
from shipper.records import Record
from tests.pod_status import CTX, condition, container, observe, pod, unschedulable, waiting

NS = "shop"
POD = "web-7d4b9c6f5-x2x9k"
POD_UID = "b6f0c2a4-1e0d-4b7e-9a39-4f3c2e1d0a11"
NODE = "gke-prod-pool-1-8c2f-x7k2"
NOW = datetime(2026, 12, 2, 11, 50, tzinfo=UTC)
EXEC_OUTPUT_SECRET = "pg-pass-77e1a0c4"


def kubelet_event(
    reason: str,
    message: str,
    *,
    name: str = POD,
    field_path: str | None = None,
    count: int = 1,
    first: str = "2026-12-02T11:40:00Z",
    last: str = "2026-12-02T11:44:00Z",
    series: str = "17e0c1f2a3b4c5d6",
    kind: str = "Pod",
    component: str = "kubelet",
    host: str | None = NODE,
    event_type: str = "Warning",
) -> dict[str, Any]:
    """An Event in the old form, as kubelets and controllers record it."""
    involved: dict[str, Any] = {
        "kind": kind,
        "namespace": NS,
        "name": name,
        "uid": POD_UID if kind == "Pod" else "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "apiVersion": "v1"
        if kind == "Pod"
        else ("apps/v1" if kind == "ReplicaSet" else "batch/v1"),
        "resourceVersion": "981240",
    }
    if field_path is not None:
        involved["fieldPath"] = field_path
    source: dict[str, Any] = {"component": component}
    if host is not None:
        source["host"] = host
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.{series}",
            "namespace": NS,
            "uid": f"e-{series}",
            "resourceVersion": "981300",
            "creationTimestamp": first,
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": source,
        "firstTimestamp": first,
        "lastTimestamp": last,
        "count": count,
        "type": event_type,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host or "",
    }


def series_event(reason: str, message: str, *, count: int = 4) -> dict[str, Any]:
    """An events.k8s.io Event (the scheduler's) as the core API serves it."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{POD}.17e0c1f2d0e1f203",
            "namespace": NS,
            "uid": "e-series",
            "resourceVersion": "981310",
            "creationTimestamp": "2026-12-02T11:31:00Z",
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": NS,
            "name": POD,
            "uid": POD_UID,
            "apiVersion": "v1",
            "resourceVersion": "981001",
        },
        "reason": reason,
        "message": message,
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "type": "Warning",
        "eventTime": "2026-12-02T11:31:00.412345Z",
        "series": {"count": count, "lastObservedTime": "2026-12-02T11:46:00.000000Z"},
        "action": "Scheduling",
        "reportingComponent": "default-scheduler",
        "reportingInstance": "default-scheduler-control-plane-1",
    }


class Setup:
    """A pod error normalizer and an event normalizer sharing one state store."""

    def __init__(self, store: StateStore | None = None, filters: Filters | None = None) -> None:
        self.store = store or StateStore()
        self.pods = PodErrorNormalizer(self.store.pods, clock=lambda: NOW)
        self.events = PodEventNormalizer(
            self.pods, self.store.events, filters or Filters(), clock=lambda: NOW
        )

    def see(self, doc: dict[str, Any]) -> list[Record]:
        obj = msgspec.json.decode(msgspec.json.encode(doc), type=Event)
        return self.events.upserts(obj, CTX)

    def one(self, doc: dict[str, Any]) -> dict[str, Any]:
        [record] = self.see(doc)
        return record.data

    def pod(self, doc: dict[str, Any]) -> list[Record]:
        return observe(self.pods, doc)


def creating() -> dict[str, Any]:
    """A pod its kubelet cannot start: the containers wait as ContainerCreating."""
    return pod(
        phase="Pending",
        statuses=[container(waiting("ContainerCreating"))],
        conditions=[
            condition("PodScheduled", "True"),
            condition("Initialized", "True"),
            condition("ContainersReady", "False", "ContainersNotReady"),
            condition("Ready", "False", "ContainersNotReady"),
        ],
    )


# -- every row of the mapping -------------------------------------------------------------

SANDBOX = (
    "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network"
    ' for sandbox "3f1c9a0e2b7d": plugin type="calico" failed (add): error getting'
    " ClusterInformation: connection is unauthorized: Unauthorized"
)


def test_a_pod_stuck_creating_with_a_sandbox_event_is_an_error_of_its_revision() -> None:
    setup = Setup()
    assert setup.pod(creating()) == []  # ContainerCreating says nothing is wrong
    [record] = setup.see(kubelet_event("FailedCreatePodSandBox", SANDBOX, count=17))
    assert record.kind == "pod_error" and record.op == "event"
    assert record.key == f"{NS}/{POD}/-/CreatePodSandboxError/2026-12-02T11:40:00Z"
    assert (record.namespace, record.name, record.uid) == (NS, POD, POD_UID)
    data = record.data
    assert data["reason"] == "CreatePodSandboxError"
    assert data["occurred_at"] == "2026-12-02T11:40:00Z"  # when the series began
    assert (data["pod"], data["pod_uid"], data["node"]) == (POD, POD_UID, NODE)
    assert data["message"] == (
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup"
        " network for sandbox [REDACTED] type=[REDACTED]"
    )
    assert data["details"] == {
        "container": None,
        "init_container": False,
        "image": None,
        "exit_code": None,
        "signal": None,
        "restart_count": None,
        "phase": "Pending",
        "condition": None,
        "source": "event",
        "event_reason": "FailedCreatePodSandBox",
        "count": 17,
    }
    assert data["workload"] == {
        "kind": "Deployment",
        "name": "web",
        "replicaset": "web-7d4b9c6f5",
        "revision": 4,
        "current_revision": 4,
        "affected_pods": 1,
        "total_pods": 1,
    }


def test_network_not_ready_is_network_plugin_not_ready() -> None:
    setup = Setup()
    setup.pod(creating())
    data = setup.one(
        kubelet_event(
            "NetworkNotReady",
            "network is not ready: container runtime network not ready: NetworkReady=false"
            " reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin"
            " not initialized",
        )
    )
    assert data["reason"] == "NetworkPluginNotReady"
    assert data["message"] == (
        "network is not ready: container runtime network not ready: NetworkReady=false"
        " reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin"
        " not initialized"
    )


@pytest.mark.parametrize(
    ("reason", "message", "kept", "component"),
    [
        (
            "FailedMount",
            'MountVolume.SetUp failed for volume "db-creds" : secret "db-creds" not found',
            'MountVolume.SetUp failed for volume "db-creds" : secret "db-creds" not found',
            "kubelet",
        ),
        (
            "FailedMount",
            'MountVolume.SetUp failed for volume "config" : configmap "web-config" not found',
            'MountVolume.SetUp failed for volume "config" : configmap "web-config" not found',
            "kubelet",
        ),
        (
            "FailedMount",
            "Unable to attach or mount volumes: unmounted volumes=[data],"
            " unattached volumes=[data kube-api-access-8x2lq]: timed out waiting for the"
            " condition",
            "Unable to attach or mount volumes: unmounted volumes=[data],"
            " unattached volumes=[data kube-api-access-8x2lq]: timed out waiting for the"
            " condition",
            "kubelet",
        ),
        (
            "FailedAttachVolume",
            'AttachVolume.Attach failed for volume "pvc-3c1d0f6e" : rpc error: code ='
            ' Internal desc = Could not attach volume "vol-0abc" to node "i-0def":'
            " timed out",
            'AttachVolume.Attach failed for volume "pvc-3c1d0f6e" : rpc error: code ='
            " Internal desc = Could not attach volume [REDACTED]",
            "attachdetach-controller",
        ),
        (
            "FailedAttachVolume",
            'Multi-Attach error for volume "pvc-3c1d0f6e" Volume is already exclusively'
            " attached to one node and can't be attached to another",
            'Multi-Attach error for volume "pvc-3c1d0f6e" Volume is already exclusively'
            " attached to one node and [REDACTED]",
            "attachdetach-controller",
        ),
        (
            "FailedMapVolume",
            'MapVolume.SetUpDevice failed for volume "pvc-9e2a" : kubernetes.io/csi:'
            " blockMapper.SetUpDevice failed to get CSI client: driver name"
            " ebs.csi.aws.com not found in the list of registered CSI drivers",
            'MapVolume.SetUpDevice failed for volume "pvc-9e2a" : kubernetes.io/csi:'
            " blockMapper.SetUpDevice failed to get CSI client: driver name"
            " ebs.csi.aws.com not found in the list of registered CSI drivers",
            "kubelet",
        ),
    ],
)
def test_volume_events_keep_their_reason_and_the_names_in_their_message(
    reason: str, message: str, kept: str, component: str
) -> None:
    setup = Setup()
    setup.pod(creating())
    host = NODE if component == "kubelet" else None
    data = setup.one(kubelet_event(reason, message, component=component, host=host))
    assert data["reason"] == reason
    assert data["message"] == kept
    assert data["node"] == NODE  # from the pod, when the controller names no host
    assert data["workload"]["name"] == "web"


@pytest.mark.parametrize(
    ("message", "reason", "kept"),
    [
        (
            "Liveness probe failed: HTTP probe failed with statuscode: 500",
            "LivenessProbeFailed",
            "Liveness probe failed: HTTP probe failed with statuscode: 500",
        ),
        (
            'Readiness probe failed: Get "http://10.8.2.17:8080/ready?token=abc123": dial tcp'
            " 10.8.2.17:8080: connect: connection refused",
            "ReadinessProbeFailed",
            "Readiness probe failed: connection refused",
        ),
        (
            'Readiness probe failed: Get "http://10.8.2.17:8080/ready": context deadline'
            " exceeded (Client.Timeout exceeded while awaiting headers)",
            "ReadinessProbeFailed",
            "Readiness probe failed: context deadline exceeded, Client.Timeout exceeded while"
            " awaiting headers",
        ),
        (
            f"Startup probe failed: psql: FATAL: password {EXEC_OUTPUT_SECRET} rejected\n",
            "StartupProbeFailed",
            "Startup probe failed: [REDACTED]",
        ),
        (
            'Liveness probe failed: service unhealthy (responded with "NOT_SERVING")',
            "LivenessProbeFailed",
            'Liveness probe failed: service unhealthy (responded with "NOT_SERVING")',
        ),
    ],
)
def test_unhealthy_events_become_the_failed_probe_with_its_failure_class(
    message: str, reason: str, kept: str
) -> None:
    setup = Setup()
    data = setup.one(
        kubelet_event("Unhealthy", message, field_path="spec.containers{app}", count=12)
    )
    assert data["reason"] == reason
    assert data["message"] == kept
    assert data["details"]["container"] == "app"
    assert data["details"]["count"] == 12
    assert EXEC_OUTPUT_SECRET not in msgspec.json.encode(data).decode()


def test_lifecycle_hook_failures_lose_their_command_and_output() -> None:
    setup = Setup()
    pod_name = f"{POD}_{NS}({POD_UID})"
    post_start = setup.one(
        kubelet_event(
            "FailedPostStartHook",
            f"Exec lifecycle hook ([/bin/sh -c /hooks/register --key={EXEC_OUTPUT_SECRET}])"
            f' for Container "app" in Pod "{pod_name}" failed - error: command'
            f" '/bin/sh -c /hooks/register --key={EXEC_OUTPUT_SECRET}' exited with 1: ,"
            f' message: "registration refused for {EXEC_OUTPUT_SECRET}\\n"',
            field_path="spec.containers{app}",
        )
    )
    assert post_start["reason"] == "FailedPostStartHook"
    assert post_start["message"] == (
        f'Exec lifecycle hook ([REDACTED]) for Container "app" in Pod "{pod_name}" failed -'
        " error: exited with 1, message: [REDACTED]"
    )
    pre_stop = setup.one(
        kubelet_event(
            "FailedPreStopHook",
            f'HTTP lifecycle hook (/shutdown?key={EXEC_OUTPUT_SECRET}) for Container "app" in'
            f' Pod "{pod_name}" failed - error: Get "http://10.8.2.17:8080/shutdown": dial'
            " tcp 10.8.2.17:8080: connect: connection refused",
            field_path="spec.containers{app}",
            series="17e0c1f2a3b4c5ff",
        )
    )
    assert pre_stop["reason"] == "FailedPreStopHook"
    assert EXEC_OUTPUT_SECRET not in pre_stop["message"]
    assert pre_stop["message"].startswith("HTTP lifecycle hook ([REDACTED]) for Container")


QUOTA = (
    'Error creating: pods "web-7d4b9c6f5-b8m2q" is forbidden: exceeded quota: compute-quota,'
    " requested: requests.cpu=500m, used: requests.cpu=1800m, limited: requests.cpu=2"
)


def test_a_replicaset_refused_by_quota_is_an_error_of_its_deployments_revision() -> None:
    setup = Setup()
    [record] = setup.see(
        kubelet_event(
            "FailedCreate",
            QUOTA,
            name="web-7d4b9c6f5",
            kind="ReplicaSet",
            component="replicaset-controller",
            host=None,
            count=9,
        )
    )
    data = record.data
    assert record.key == f"{NS}/web-7d4b9c6f5/-/FailedCreate/2026-12-02T11:40:00Z"
    assert (data["reason"], data["pod"], data["pod_uid"], data["node"]) == (
        "FailedCreate",
        None,
        None,
        None,
    )
    assert data["message"] == QUOTA  # names and amounts: nothing to redact
    assert data["workload"] == {
        "kind": "Deployment",
        "name": "web",
        "replicaset": "web-7d4b9c6f5",
        "revision": 4,
        "current_revision": 4,
        "affected_pods": 0,
        "total_pods": 0,
    }
    assert data["details"]["count"] == 9


def test_an_admission_denial_keeps_the_webhook_and_loses_the_quoted_fields() -> None:
    setup = Setup()
    data = setup.one(
        kubelet_event(
            "FailedCreate",
            'Error creating: admission webhook "validate.policy.example.com" denied the'
            ' request: spec.containers[0].env[0].value: Invalid value: "hunter2-7f":'
            " plain-text credentials are not allowed",
            name="web-7d4b9c6f5",
            kind="ReplicaSet",
            component="replicaset-controller",
            host=None,
        )
    )
    assert data["message"] == (
        'Error creating: admission webhook "validate.policy.example.com" denied the request:'
        " [REDACTED]"
    )


def test_a_job_that_cannot_create_its_pod_is_an_error_of_the_cronjob_run() -> None:
    setup = Setup()
    data = setup.one(
        kubelet_event(
            "FailedCreate",
            'Error creating: pods "backup-28930140-x7k2p" is forbidden: exceeded quota:'
            " batch-quota, requested: count/pods=1, used: count/pods=10, limited:"
            " count/pods=10",
            name="backup-28930140",
            kind="Job",
            component="job-controller",
            host=None,
        )
    )
    assert data["reason"] == "FailedCreate"
    assert data["workload"] == {"kind": "CronJob", "name": "backup", "job": "backup-28930140"}
    assert "exceeded quota: batch-quota, requested: count/pods=1" in data["message"]


def test_an_init_container_event_carries_the_init_prefix() -> None:
    setup = Setup()
    data = setup.one(
        kubelet_event(
            "FailedPostStartHook",
            f'HTTP lifecycle hook (/started) for Container "migrate" in Pod "{POD}_{NS}()"'
            " failed - error: EOF",
            field_path="spec.initContainers{migrate}",
        )
    )
    assert data["reason"] == "Init:FailedPostStartHook"
    assert (data["details"]["container"], data["details"]["init_container"]) == (
        "migrate",
        True,
    )


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("BackOff", f"Back-off restarting failed container app in pod {POD}_{NS}({POD_UID})"),
        ("Failed", 'Failed to pull image "ghcr.io/acme/app:9.9": not found'),
        ("Failed", "Error: ErrImagePull"),
        ("FailedKillPod", "error killing pod: failed to stop container"),
        ("Unhealthy", "Probe terminated redundantly"),
    ],
)
def test_what_the_status_reports_or_nothing_maps_gives_no_record(reason: str, message: str) -> None:
    assert Setup().see(kubelet_event(reason, message, field_path="spec.containers{app}")) == []


def test_normal_events_give_nothing_even_if_the_server_sends_them() -> None:
    normal = kubelet_event("FailedMount", "MountVolume.SetUp failed", event_type="Normal")
    assert Setup().see(normal) == []


# -- one record per incident --------------------------------------------------------------


def test_a_rising_count_adds_no_record_and_a_restart_resends_nothing() -> None:
    store = StateStore()
    setup = Setup(store)
    message = 'MountVolume.SetUp failed for volume "db-creds" : secret "db-creds" not found'
    assert len(setup.see(kubelet_event("FailedMount", message, count=1))) == 1
    for count in (2, 5, 40):
        assert setup.see(kubelet_event("FailedMount", message, count=count)) == []
    # Another series of the same incident (the correlator opened a new Event) adds none.
    assert setup.see(kubelet_event("FailedMount", message, series="17e0c1f2aaaa0001")) == []
    restarted = Setup(store)
    assert restarted.see(kubelet_event("FailedMount", message, count=41)) == []
    # Both series gone (an hour after their last update): the next one is a new incident.
    restarted.events.forget(f"{NS}/{POD}.17e0c1f2a3b4c5d6")
    restarted.events.forget(f"{NS}/{POD}.17e0c1f2aaaa0001")
    again = kubelet_event(
        "FailedMount", message, series="17e0c1f2bbbb0002", first="2026-12-02T11:48:00Z"
    )
    [record] = restarted.see(again)
    assert record.data["occurred_at"] == "2026-12-02T11:48:00Z"


def test_a_relist_forgets_the_series_whose_events_are_gone() -> None:
    setup = Setup()
    setup.see(kubelet_event("FailedMount", 'MountVolume.SetUp failed for volume "a" : x'))
    kept = f"{NS}/{POD}.17e0c1f2a3b4c5d6"
    assert setup.events.missing({kept}) == set()
    assert setup.events.missing(set()) == {kept}


# -- Events client-go's correlator merged ---------------------------------------------------

COMBINED = "(combined from similar events): "


def test_a_merged_probe_event_is_the_failed_probe_of_its_last_message() -> None:
    # The correlator's own Event: named after the pod and the time it merged, counting up.
    merged = kubelet_event(
        "Unhealthy",
        f"{COMBINED}Readiness probe failed: HTTP probe failed with statuscode: 503",
        field_path="spec.containers{app}",
        series="187d2a9c4e5f6a7b",
        count=37,
    )
    data = Setup().one(merged)
    assert (data["reason"], data["details"]["container"], data["details"]["count"]) == (
        "ReadinessProbeFailed",
        "app",
        37,
    )
    assert data["message"] == (
        f"{COMBINED}Readiness probe failed: HTTP probe failed with statuscode: 503"
    )


def test_a_merged_failed_create_keeps_what_the_quota_message_fixes() -> None:
    refused = kubelet_event(
        "FailedCreate",
        COMBINED + QUOTA,
        name="web-7d4b9c6f5",
        kind="ReplicaSet",
        component="replicaset-controller",
        host=None,
    )
    assert Setup().one(refused)["message"] == COMBINED + QUOTA


def test_a_merged_message_is_redacted_like_the_message_after_its_prefix() -> None:
    hidden = f"Liveness probe failed: {EXEC_OUTPUT_SECRET}"
    kept = f"{COMBINED}Liveness probe failed: [REDACTED]"
    assert event_messages.redact(COMBINED + hidden) == kept
    assert event_messages.redact(f"{COMBINED}password={EXEC_OUTPUT_SECRET}") == (
        f"{COMBINED}password=[REDACTED]"
    )


# -- series seen for the first time long after they went quiet -----------------------------

PROBE_REFUSED = (
    'Readiness probe failed: Get "http://10.8.2.17:8080/ready": dial tcp 10.8.2.17:8080:'
    " connect: connection refused"
)
PROBE_503 = "Readiness probe failed: HTTP probe failed with statuscode: 503"


def old_probe_series(*, last: str = "2026-12-02T11:10:00Z") -> dict[str, Any]:
    """A series of the incident that went quiet 40 minutes before NOW."""
    return kubelet_event(
        "Unhealthy",
        PROBE_REFUSED,
        field_path="spec.containers{app}",
        first="2026-12-02T10:55:00Z",
        last=last,
        series="17e0aaaa00000001",
        count=12,
    )


def test_an_old_series_does_not_hide_a_live_series_of_the_same_incident() -> None:
    setup = Setup()
    assert setup.see(old_probe_series()) == []
    live = kubelet_event("Unhealthy", PROBE_503, field_path="spec.containers{app}", count=37)
    [record] = setup.see(live)
    assert (record.data["reason"], record.data["message"]) == ("ReadinessProbeFailed", PROBE_503)
    assert record.data["occurred_at"] == "2026-12-02T11:40:00Z"  # the live series' start


def test_an_old_series_that_comes_back_to_life_is_reported_once() -> None:
    setup = Setup()
    assert setup.see(old_probe_series()) == []
    [record] = setup.see(old_probe_series(last="2026-12-02T11:49:00Z"))
    assert record.data["occurred_at"] == "2026-12-02T10:55:00Z"
    assert setup.see(old_probe_series(last="2026-12-02T11:49:30Z")) == []


def test_a_series_quiet_for_long_before_first_sight_is_history_not_an_error() -> None:
    setup = Setup()
    old = kubelet_event(
        "FailedMount",
        'MountVolume.SetUp failed for volume "a" : secret "a" not found',
        first="2026-12-02T10:40:00Z",
        last="2026-12-02T11:00:00Z",
    )
    assert setup.see(old) == []


def test_ignored_objects_give_nothing() -> None:
    setup = Setup(filters=Filters(ignore_resources=[f"pod/{NS}/{POD}", "replicaset/canary-*"]))
    assert setup.see(kubelet_event("FailedCreatePodSandBox", SANDBOX)) == []
    refused = kubelet_event("FailedCreate", QUOTA, name="canary-5f9d", kind="ReplicaSet", host=None)
    assert setup.see(refused) == []


# -- FailedScheduling and Evicted enrich the status signal ---------------------------------

SCHEDULING = (
    "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available:"
    " 3 No preemption victims found for incoming pod."
)


def test_a_failed_scheduling_event_seen_first_enriches_the_unschedulable_record() -> None:
    setup = Setup()
    assert setup.see(series_event("FailedScheduling", SCHEDULING, count=4)) == []
    [record] = setup.pod(unschedulable(SCHEDULING))
    data = record.data
    assert data["reason"] == "Unschedulable"
    assert data["message"] == SCHEDULING
    assert data["details"]["source"] == "status"
    assert (data["details"]["event_reason"], data["details"]["count"]) == ("FailedScheduling", 4)
    assert setup.pod(unschedulable(SCHEDULING)) == []
    assert setup.see(series_event("FailedScheduling", SCHEDULING, count=9)) == []


def test_a_failed_scheduling_event_after_the_status_adds_nothing() -> None:
    setup = Setup()
    [record] = setup.pod(unschedulable(SCHEDULING))
    assert record.data["details"]["event_reason"] is None
    assert setup.see(series_event("FailedScheduling", SCHEDULING)) == []
    assert setup.pod(unschedulable(SCHEDULING)) == []


def test_an_eviction_is_one_record_with_the_kubelets_event() -> None:
    setup = Setup()
    setup.pod(pod(statuses=[container({"running": {"startedAt": "2026-12-02T11:30:00Z"}})]))
    message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi."
    assert setup.see(kubelet_event("Evicted", message, count=1)) == []
    evicted = pod(phase="Failed", reason="Evicted", message=message, statuses=[])
    [record] = setup.pod(evicted)
    assert record.data["reason"] == "Evicted"
    assert record.data["details"]["event_reason"] == "Evicted"
    assert setup.pod(evicted) == []


# -- the message filter on its own --------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        f"Liveness probe failed: {EXEC_OUTPUT_SECRET}",
        f"Liveness probe errored: rpc error: code = Unknown desc = {EXEC_OUTPUT_SECRET}",
        f'Error creating: pods "x" is forbidden: token="{EXEC_OUTPUT_SECRET}"',
        f"something nobody writes: password={EXEC_OUTPUT_SECRET}",
        f'MountVolume.SetUp failed for volume "a" : mount failed: --password={EXEC_OUTPUT_SECRET}',
    ],
)
def test_free_text_is_redacted_whatever_format_it_comes_in(message: str) -> None:
    assert EXEC_OUTPUT_SECRET not in event_messages.redact(message)
