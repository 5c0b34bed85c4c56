"""The synthetic cluster tells the truth about what only Warning Events say.

Kubelets never set waiting reasons such as `CreatePodSandboxError`: a pod whose sandbox or
volumes fail waits as `ContainerCreating`, and a Warning Event says why. The generator's
pods in that trouble look so, a few run with a failing readiness probe, and a few
ReplicaSets want a pod more than their quota lets them create. Fed through the
normalizers, each gives its pod error with its workload.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from collector.filters import Filters
from collector.normalize.base import Context, HpaRef, RevisionRef
from collector.normalize.pod_error import Pod, PodErrorNormalizer
from collector.normalize.pod_event import Event, PodEventNormalizer
from collector.state import StateStore
from sandbox.kube.synthetic import SyntheticSpec, generate

Obj = dict[str, Any]
SPEC = SyntheticSpec(namespaces=20, deployments=1000, pods=3000, nodes=10, cronjobs=5, services=20)


@pytest.fixture(scope="module")
def cluster() -> list[Obj]:
    return [msgspec.json.decode(msgspec.json.encode(obj)) for obj in generate(SPEC)]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


class Owners:
    """Lookups from the generated ReplicaSets (every one of them is a current revision)."""

    def __init__(self, replicasets: list[Obj]) -> None:
        self.owner = {
            (rs["metadata"]["namespace"], rs["metadata"]["name"]): rs["metadata"][
                "ownerReferences"
            ][0]["name"]
            for rs in replicasets
        }

    def deployment_of_replicaset(self, namespace: str, replicaset: str) -> str | None:
        return self.owner.get((namespace, replicaset))

    def current_revision(self, namespace: str, deployment: str) -> RevisionRef | None:
        return None

    def cronjob_of_job(self, namespace: str, job: str) -> str | None:
        return None

    def services_selecting(self, namespace: str, labels: Mapping[str, str]) -> list[str]:
        return []

    def hpa_for(self, namespace: str, deployment: str) -> HpaRef | None:
        return None


def test_pods_the_kubelet_cannot_start_wait_as_container_creating_with_their_event(
    cluster: list[Obj],
) -> None:
    waiting = Counter(
        status["state"]["waiting"]["reason"]
        for pod in of_kind(cluster, "Pod")
        for status in pod["status"].get("containerStatuses", [])
        if "waiting" in status["state"]
    )
    assert not waiting.keys() & {"CreatePodSandboxError", "NetworkPluginNotReady"}
    creating = {
        pod["metadata"]["uid"]
        for pod in of_kind(cluster, "Pod")
        if any(
            s["state"].get("waiting", {}).get("reason") == "ContainerCreating"
            for s in pod["status"].get("containerStatuses", [])
        )
    }
    events = of_kind(cluster, "Event")
    told = {
        event["involvedObject"]["uid"]: event["reason"]
        for event in events
        if event["reason"] in ("FailedCreatePodSandBox", "FailedMount")
    }
    assert creating and set(told) == creating
    assert set(told.values()) == {"FailedCreatePodSandBox", "FailedMount"}
    probes = [event for event in events if event["reason"] == "Unhealthy"]
    assert probes and all(
        e["involvedObject"]["fieldPath"] == "spec.containers{app}" for e in probes
    )


def test_a_replicaset_refused_by_quota_wants_more_pods_than_it_has(cluster: list[Obj]) -> None:
    refused = {
        event["involvedObject"]["name"]
        for event in of_kind(cluster, "Event")
        if event["reason"] == "FailedCreate"
    }
    short = {
        rs["metadata"]["name"]
        for rs in of_kind(cluster, "ReplicaSet")
        if rs["spec"]["replicas"] > rs["status"]["replicas"]
    }
    assert refused and refused == short


def test_the_synthetic_events_become_their_pod_errors(cluster: list[Obj]) -> None:
    store = StateStore()
    pods = PodErrorNormalizer(store.pods)
    events = PodEventNormalizer(pods, store.events, Filters())
    ctx = Context(lookups=Owners(of_kind(cluster, "ReplicaSet")))
    for pod in of_kind(cluster, "Pod"):
        pods.upserts(msgspec.convert(pod, Pod), ctx)
    records = [
        record
        for event in of_kind(cluster, "Event")
        for record in events.upserts(msgspec.convert(event, Event), ctx)
    ]
    reasons = Counter(record.data["reason"] for record in records)
    assert set(reasons) == {
        "CreatePodSandboxError",
        "FailedMount",
        "ReadinessProbeFailed",
        "FailedCreate",
    }
    assert all(record.data["workload"]["kind"] == "Deployment" for record in records)
