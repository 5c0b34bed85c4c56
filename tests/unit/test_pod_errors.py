"""Pod error signals: one event per transition, never a history, never a pod spec secret.

Pods are written as the API returns them, encoded to JSON and decoded into the
normalizer's Struct, the way the informer hands them over.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from hypothesis import assume, given
from hypothesis import strategies as st

from collector.normalize import pod_error
from collector.normalize.base import Context
from collector.normalize.pod_error import PodErrorNormalizer
from collector.state import StateStore
from tests.pod_status import (
    CTX,
    SECRET_ARG,
    SECRET_ENV,
    Lookups,
    condition,
    container,
    crash_looping,
    decode,
    healthy,
    observe,
    pod,
    ready_conditions,
    running,
    terminated,
    unschedulable,
    waiting,
)


def test_first_sight_of_a_crash_looping_pod_gives_exactly_its_current_error() -> None:
    normalizer = PodErrorNormalizer()
    [record] = observe(normalizer, crash_looping(restarts=5))
    assert record.kind == "pod_error"
    assert record.op == "event"
    assert record.key == "shop/web-7d4b9c6f5-x2x9k/app/CrashLoopBackOff/5"
    assert (record.namespace, record.name) == ("shop", "web-7d4b9c6f5-x2x9k")
    data = record.data
    assert data["reason"] == "CrashLoopBackOff"
    assert "back-off 5m0s" in data["message"]
    assert data["occurred_at"] == "2026-12-02T11:55:00Z"  # the last crash, not the sighting
    assert data["pod"] == "web-7d4b9c6f5-x2x9k"
    assert data["pod_uid"] == "b6f0c2a4-1e0d-4b7e-9a39-4f3c2e1d0a11"
    assert data["node"] == "gke-prod-pool-1-8c2f-x7k2"
    assert data["details"] == {
        "container": "app",
        "init_container": False,
        "image": "ghcr.io/acme/app:1.4.2",
        "exit_code": 1,
        "signal": None,
        "restart_count": 5,
        "phase": "Running",
        "condition": None,
        "source": "status",
        "event_reason": None,
        "count": None,
    }


def test_repeating_the_same_status_gives_nothing() -> None:
    normalizer = PodErrorNormalizer()
    assert len(observe(normalizer, crash_looping())) == 1
    assert observe(normalizer, crash_looping()) == []
    assert observe(normalizer, crash_looping()) == []


def test_a_healthy_pod_gives_nothing() -> None:
    normalizer = PodErrorNormalizer()
    last = terminated(0, "Completed", cid="containerd://old")
    assert observe(normalizer, healthy(restarts=2, last=last)) == []


def test_nothing_from_the_pod_spec_or_the_application_output_is_shipped() -> None:
    normalizer = PodErrorNormalizer()
    records = observe(normalizer, crash_looping())
    records += observe(normalizer, pod(statuses=[container(terminated(2, "Error"), restarts=5)]))
    assert len(records) == 2
    encoded = msgspec.json.encode(records)
    for secret in (SECRET_ENV, SECRET_ARG, "hunter2", "/bin/server", "FallbackToLogsOnError"):
        assert secret.encode() not in encoded


# -- transitions --------------------------------------------------------------------------


def test_a_restart_count_increase_gives_one_event_with_the_termination() -> None:
    normalizer = PodErrorNormalizer()
    before = terminated(0, "Completed", cid="containerd://r3")
    assert observe(normalizer, healthy(restarts=3, last=before)) == []
    crash = terminated(
        1, "Error", started="2026-12-02T11:58:00Z", finished="2026-12-02T11:58:41Z", cid="c://r4"
    )
    [record] = observe(normalizer, healthy(restarts=4, last=crash))
    assert record.key == "shop/web-7d4b9c6f5-x2x9k/app/Error/4"
    assert record.data["reason"] == "Error"
    assert record.data["occurred_at"] == "2026-12-02T11:58:41Z"
    assert record.data["details"]["exit_code"] == 1
    assert record.data["details"]["restart_count"] == 4
    assert "exit code 1" in record.data["message"]
    assert observe(normalizer, healthy(restarts=4, last=crash)) == []


def test_a_crash_loop_reports_each_crash_but_the_loop_once() -> None:
    normalizer = PodErrorNormalizer()
    assert observe(normalizer, healthy(restarts=0)) == []
    first = observe(normalizer, crash_looping(restarts=1, finished="2026-12-02T11:55:00Z"))
    assert [r.data["reason"] for r in first] == ["Error", "CrashLoopBackOff"]
    # The next cycle: it runs, crashes again and backs off again.
    again = terminated(1, "Error", finished="2026-12-02T11:55:00Z", cid="containerd://r1")
    assert observe(normalizer, healthy(restarts=2, last=again)) == []  # that crash was reported
    second = observe(normalizer, crash_looping(restarts=2, finished="2026-12-02T11:56:10Z"))
    assert [(r.data["reason"], r.data["details"]["restart_count"]) for r in second] == [
        ("Error", 2)
    ]


def test_oomkilled_after_a_restart() -> None:
    normalizer = PodErrorNormalizer()
    assert observe(normalizer, healthy(restarts=0)) == []
    oom = terminated(137, "OOMKilled", finished="2026-12-02T11:59:02Z", cid="containerd://oom")
    [record] = observe(normalizer, healthy(restarts=1, last=oom))
    assert record.data["reason"] == "OOMKilled"
    assert record.data["details"]["exit_code"] == 137
    assert record.data["details"]["signal"] == 9
    assert "SIGKILL" in record.data["message"]
    assert record.key == "shop/web-7d4b9c6f5-x2x9k/app/OOMKilled/1"


def test_image_pull_back_off_flipping_reports_each_reason_once() -> None:
    normalizer = PodErrorNormalizer()

    def pulling(reason: str) -> dict[str, Any]:
        message = 'Back-off pulling image "ghcr.io/acme/app:1.4.3"'
        return pod(
            phase="Pending",
            statuses=[container(waiting(reason, message))],
            conditions=ready_conditions(False),
        )

    [record] = observe(normalizer, pulling("ImagePullBackOff"))
    assert record.data["reason"] == "ImagePullBackOff"
    assert record.key == "shop/web-7d4b9c6f5-x2x9k/app/ImagePullBackOff/0"
    assert 'Back-off pulling image "ghcr.io/acme/app:1.4.3"' in record.data["message"]
    assert record.data["details"]["phase"] == "Pending"
    assert [r.data["reason"] for r in observe(normalizer, pulling("ErrImagePull"))] == [
        "ErrImagePull"
    ]
    assert observe(normalizer, pulling("ImagePullBackOff")) == []
    assert observe(normalizer, pulling("ErrImagePull")) == []


def test_an_init_container_reason_carries_the_init_prefix() -> None:
    normalizer = PodErrorNormalizer()
    doc = pod(
        phase="Pending",
        init_statuses=[
            container(
                waiting("CrashLoopBackOff", "back-off 40s restarting failed container=migrate"),
                name="migrate",
                restarts=3,
                last=terminated(3, "Error"),
            )
        ],
        statuses=[container(waiting("PodInitializing"))],
        conditions=[
            condition("Initialized", "False", "ContainersNotInitialized"),
            condition("Ready", "False", "ContainersNotReady"),
            condition("PodScheduled", "True"),
        ],
    )
    [record] = observe(normalizer, doc)
    assert record.data["reason"] == "Init:CrashLoopBackOff"
    assert record.key == "shop/web-7d4b9c6f5-x2x9k/migrate/Init:CrashLoopBackOff/3"
    assert record.data["details"]["container"] == "migrate"
    assert record.data["details"]["init_container"] is True
    assert record.data["details"]["exit_code"] == 3


def test_an_evicted_pod_gives_one_evicted_event() -> None:
    normalizer = PodErrorNormalizer()
    message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi."
    doc = pod(
        phase="Failed",
        reason="Evicted",
        message=message,
        statuses=[container(terminated(137, "ContainerStatusUnknown"), restarts=0)],
        conditions=[
            condition(
                "DisruptionTarget", "True", "TerminationByKubelet", at="2026-12-02T11:59:30Z"
            ),
            *ready_conditions(False),
        ],
    )
    [record] = observe(normalizer, doc)
    assert record.data["reason"] == "Evicted"
    assert record.data["message"] == message
    assert record.data["occurred_at"] == "2026-12-02T11:59:30Z"
    assert record.data["details"]["phase"] == "Failed"
    assert record.data["details"]["container"] is None
    assert observe(normalizer, doc) == []


def test_an_unschedulable_pod_is_reported_once() -> None:
    normalizer = PodErrorNormalizer()

    [record] = observe(normalizer, unschedulable("0/3 nodes are available: 3 Insufficient cpu."))
    assert record.data["reason"] == "Unschedulable"
    assert record.data["message"] == "0/3 nodes are available: 3 Insufficient cpu."
    assert record.data["occurred_at"] == "2026-12-02T11:31:00Z"
    assert record.data["details"]["condition"] == "PodScheduled"
    assert record.key == "shop/web-7d4b9c6f5-x2x9k/-/Unschedulable/2026-12-02T11:31:00Z"
    # The scheduler retries with a new message: still the same stuck pod.
    assert observe(normalizer, unschedulable("0/4 nodes are available: 4 Insufficient cpu.")) == []


def test_a_readiness_failure_on_each_transition() -> None:
    normalizer = PodErrorNormalizer()

    def probe_failing(at: str) -> dict[str, Any]:
        return pod(statuses=[container(running())], conditions=ready_conditions(False, at=at))

    assert observe(normalizer, healthy()) == []
    [record] = observe(normalizer, probe_failing("2026-12-02T12:01:00Z"))
    assert record.data["reason"] == "ContainersNotReady"
    assert record.data["message"] == "containers with unready status: [app]"
    assert record.data["occurred_at"] == "2026-12-02T12:01:00Z"
    assert record.data["details"]["condition"] == "Ready"
    assert observe(normalizer, probe_failing("2026-12-02T12:01:00Z")) == []
    assert observe(normalizer, healthy()) == []
    [again] = observe(normalizer, probe_failing("2026-12-02T12:09:00Z"))
    assert again.key != record.key


def test_a_starting_pod_is_not_a_readiness_failure_until_its_grace_ends() -> None:
    starting = pod(statuses=[container(running())], conditions=ready_conditions(False))
    early = PodErrorNormalizer(clock=lambda: datetime(2026, 12, 2, 11, 58, tzinfo=UTC))
    assert observe(early, starting) == []
    late = PodErrorNormalizer(clock=lambda: datetime(2026, 12, 2, 12, 30, tzinfo=UTC))
    [record] = observe(late, starting)  # not ready for 33 minutes when first seen
    assert record.data["reason"] == "ContainersNotReady"
    assert record.data["occurred_at"] == "2026-12-02T11:57:00Z"


def test_a_failed_pod_without_a_container_error_reports_the_phase() -> None:
    normalizer = PodErrorNormalizer()
    assert observe(normalizer, pod(phase="Pending", conditions=[])) == []
    rejected = pod(
        phase="Failed",
        reason="OutOfcpu",
        message="Pod was rejected: Node didn't have enough resource: cpu",
        conditions=[],
    )
    [record] = observe(normalizer, rejected)
    assert record.data["reason"] == "OutOfcpu"
    assert record.data["details"]["phase"] == "Failed"
    assert observe(normalizer, rejected) == []


def test_a_pod_failed_by_its_container_is_one_event_not_two() -> None:
    normalizer = PodErrorNormalizer()
    assert observe(normalizer, healthy()) == []
    failed = pod(
        phase="Failed",
        statuses=[container(terminated(2, "Error", finished="2026-12-02T12:03:00Z"))],
        conditions=ready_conditions(False),
    )
    [record] = observe(normalizer, failed)
    assert record.data["reason"] == "Error"
    assert record.data["details"]["exit_code"] == 2
    assert record.data["occurred_at"] == "2026-12-02T12:03:00Z"


def test_phase_unknown_is_reported() -> None:
    normalizer = PodErrorNormalizer()
    assert observe(normalizer, healthy()) == []
    lost = healthy(reason="NodeLost", message="Node gke-prod-pool-1-8c2f-x7k2 is unresponsive")
    lost["status"]["phase"] = "Unknown"
    [record] = observe(normalizer, lost)
    assert record.data["reason"] == "NodeLost"
    assert record.data["details"]["phase"] == "Unknown"


def test_a_pod_being_deleted_reports_nothing() -> None:
    normalizer = PodErrorNormalizer()
    assert observe(normalizer, healthy()) == []
    killed = pod(statuses=[container(terminated(143, "Error"))], deleting=True)
    assert observe(normalizer, killed) == []


# -- workload scope -----------------------------------------------------------------------


def test_errors_of_a_deployment_pod_attach_to_its_revision_with_counts() -> None:
    normalizer = PodErrorNormalizer()
    names = ["web-7d4b9c6f5-aaaaa", "web-7d4b9c6f5-bbbbb", "web-7d4b9c6f5-ccccc"]
    for index, name in enumerate(names):
        assert observe(normalizer, healthy(name=name, uid=f"uid-{index}")) == []
    crashing = crash_looping()
    crashing["metadata"].update(name=names[0], uid="uid-0")
    first = observe(normalizer, crashing)  # the crash, and the loop it started
    assert [r.data["reason"] for r in first] == ["Error", "CrashLoopBackOff"]
    assert (
        first[0].data["workload"]
        == first[1].data["workload"]
        == {
            "kind": "Deployment",
            "name": "web",
            "replicaset": "web-7d4b9c6f5",
            "revision": 4,
            "current_revision": 4,
            "affected_pods": 1,
            "total_pods": 3,
        }
    )
    crashing["metadata"].update(name=names[1], uid="uid-1")
    second, _ = observe(normalizer, crashing)
    assert (second.data["workload"]["affected_pods"], second.data["workload"]["total_pods"]) == (
        2,
        3,
    )
    assert normalizer.deletes(decode(healthy(name=names[2], uid="uid-2")), CTX) == []
    recovered = healthy(name=names[1], uid="uid-1", restarts=5)
    assert observe(normalizer, recovered) == []
    crashing["metadata"].update(name=names[1], uid="uid-1")
    crashing["status"]["containerStatuses"][0]["restartCount"] = 6
    crashing["status"]["containerStatuses"][0]["lastState"] = terminated(
        1, "Error", finished="2026-12-02T12:20:00Z", cid="containerd://r6"
    )
    third = observe(normalizer, crashing)
    # It had run for half an hour: the kubelet's back-off was reset, this is a new loop.
    assert [r.data["reason"] for r in third] == ["Error", "CrashLoopBackOff"]
    workload = third[0].data["workload"]
    assert (workload["affected_pods"], workload["total_pods"]) == (2, 2)


def test_an_old_revision_pod_names_its_replicaset_without_a_number() -> None:
    lookups = Lookups()
    lookups.deployments[("shop", "web-55f8d9c7b")] = "web"
    ctx = Context(lookups=lookups)
    doc = crash_looping()
    doc["metadata"]["ownerReferences"][0]["name"] = "web-55f8d9c7b"
    [record] = PodErrorNormalizer().upserts(decode(doc), ctx)
    assert record.data["workload"]["replicaset"] == "web-55f8d9c7b"
    assert record.data["workload"]["revision"] is None
    assert record.data["workload"]["current_revision"] == 4


def test_errors_of_a_cronjob_pod_attach_to_the_job_execution() -> None:
    normalizer = PodErrorNormalizer()
    doc = pod(
        name="backup-28930140-6wq2p",
        owner=("Job", "backup-28930140"),
        phase="Failed",
        statuses=[container(terminated(1, "Error"), name="backup")],
        conditions=ready_conditions(False),
    )
    [record] = observe(normalizer, doc)
    assert record.data["workload"] == {
        "kind": "CronJob",
        "name": "backup",
        "job": "backup-28930140",
    }
    assert record.key == "shop/backup-28930140-6wq2p/backup/Error/0"


def test_a_pod_without_owner_has_no_workload() -> None:
    [record] = observe(
        PodErrorNormalizer(),
        pod(owner=None, statuses=crash_looping()["status"]["containerStatuses"]),
    )
    assert record.data["workload"] is None


# -- persisted state ----------------------------------------------------------------------


def test_state_in_the_store_carries_over_to_a_new_normalizer_without_repeating_events() -> None:
    store = StateStore()
    before = PodErrorNormalizer(store.pods)
    assert len(observe(before, crash_looping(restarts=5))) == 1
    assert observe(before, healthy(name="web-7d4b9c6f5-zzzzz", uid="uid-z")) == []

    after = PodErrorNormalizer(store.pods)  # as a restarted collector reading the same store
    assert observe(after, crash_looping(restarts=5)) == []
    crash = terminated(1, "Error", finished="2026-12-02T12:10:00Z", cid="containerd://r6")
    [record] = observe(after, healthy(restarts=6, last=crash))
    assert record.data["reason"] == "Error"
    assert record.data["workload"]["total_pods"] == 2


def test_a_new_pod_with_a_known_name_starts_fresh() -> None:
    normalizer = PodErrorNormalizer()
    assert len(observe(normalizer, crash_looping())) == 1
    reborn = crash_looping()
    reborn["metadata"]["uid"] = "0d6c5e1a-0000-4000-8000-000000000001"
    assert len(observe(normalizer, reborn)) == 1


def test_forget_drops_a_pods_state_and_its_counts() -> None:
    normalizer = PodErrorNormalizer()
    observe(normalizer, crash_looping())
    observe(normalizer, healthy(name="web-7d4b9c6f5-zzzzz", uid="uid-z"))
    assert normalizer.memos.keys() == {"shop/web-7d4b9c6f5-x2x9k", "shop/web-7d4b9c6f5-zzzzz"}
    assert normalizer.memos.counts("shop/web-7d4b9c6f5") == (1, 2)
    normalizer.forget("shop/web-7d4b9c6f5-x2x9k")
    assert normalizer.memos.keys() == {"shop/web-7d4b9c6f5-zzzzz"}
    assert normalizer.memos.counts("shop/web-7d4b9c6f5") == (0, 1)
    normalizer.forget("shop/web-7d4b9c6f5-zzzzz")
    assert len(observe(normalizer, crash_looping())) == 1  # first sight again


_TIMES = st.sampled_from([None, "2026-12-01T10:00:00Z", "2026-12-01T10:09:00Z"])
_IDS = st.sampled_from([None, "containerd://a", "containerd://b"])
_TERMINATED = st.builds(
    pod_error.Terminated,
    exit_code=st.sampled_from([0, 1, 137]),
    reason=st.sampled_from([None, "Error", "Completed", "OOMKilled"]),
    started_at=_TIMES,
    finished_at=_TIMES,
    container_id=_IDS,
)
_WAITING = st.builds(
    pod_error.Waiting,
    reason=st.sampled_from([None, "ContainerCreating", "CrashLoopBackOff", "ErrImagePull"]),
)
_STATE = st.one_of(
    st.builds(pod_error.ContainerState),
    st.builds(pod_error.ContainerState, running=st.builds(pod_error.Running, started_at=_TIMES)),
    st.builds(pod_error.ContainerState, waiting=_WAITING),
    st.builds(pod_error.ContainerState, terminated=_TERMINATED),
)
_BEFORE = st.none() | st.builds(
    pod_error._ContainerMemo,
    restarts=st.integers(0, 3),
    waiting=st.lists(st.sampled_from(["ErrImagePull", "CrashLoopBackOff"]), max_size=1),
    crash_loop=st.booleans(),
    terminations=st.lists(st.sampled_from(["containerd://a", "containerd://b"]), max_size=2),
)


@given(
    st.builds(
        pod_error.ContainerStatus,
        name=st.just("app"),
        restart_count=st.integers(0, 3),
        state=_STATE,
        last_state=_STATE,
    ),
    _BEFORE,
    st.booleans(),
    st.booleans(),
)
def test_a_container_with_nothing_to_say_takes_a_short_way_to_the_same_memo(
    status: pod_error.ContainerStatus,
    before: pod_error._ContainerMemo | None,
    init: bool,
    explained: bool,
) -> None:
    """Most containers run and have not restarted: their memo is made without working
    through terminations and waiting reasons, and is the one the full way gives, which
    finds no signal for them, whatever the memo before."""
    quiet = pod_error._quiet_memo(status, before)
    assume(quiet is not None)
    found: list[Any] = []
    assert quiet == pod_error._container(status, before, init, explained, found)
    assert found == []
