"""Every Kubernetes call but a watch has a total deadline: a hung API server or a proxy that
answers one byte at a time ends the call with an error saying so, through the one client
as discovery and the scheduler use it, and the loops go on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.leader import LeaderElector, LeaseSettings
from kube.api import KubeApi as CollectorKube
from kube.cluster import KubeTarget
from kube.errors import KubeError
from sandbox.kube import FakeKube
from scheduler.kubeapi import ScalingKube as SchedulerKube
from tests.scaling_harness import (
    Harness,
    action,
    at,
    deployment,
    hpa,
    kube_client,
    make_harness,
    template,
)
from tests.waiting import wait_until

NAMESPACES = "/api/v1/namespaces"


@pytest.fixture
def collector_kube(kube: FakeKube) -> Iterator[CollectorKube]:
    target = KubeTarget(server=kube.url, verify=False, token=lambda: kube.token)
    api = CollectorKube(target, deadline_seconds=0.5)
    yield api
    api.close()


@pytest.fixture
def scheduler_kube(kube: FakeKube) -> Iterator[SchedulerKube]:
    api = kube_client(kube, deadline_seconds=0.5)
    yield SchedulerKube(api)
    api.close()


@pytest.mark.parametrize("headers", [False, True], ids=["body drips", "headers drip"])
def test_a_collector_request_ends_at_its_deadline(
    kube: FakeKube, collector_kube: CollectorKube, headers: bool
) -> None:
    kube.drip_next(verb="list", resource="namespaces", every=0.05, headers=headers)
    with pytest.raises(KubeError, match=r"no complete answer within 0\.5 s"):
        collector_kube.get(NAMESPACES)
    assert collector_kube.get(NAMESPACES)  # the next call is served as usual


def test_a_collector_request_can_have_its_own_deadline(
    kube: FakeKube, collector_kube: CollectorKube
) -> None:
    kube.drip_next(verb="list", resource="namespaces", every=0.05)
    with pytest.raises(KubeError, match=r"no complete answer within 0\.2 s"):
        collector_kube.get(NAMESPACES, within=0.2)


@pytest.mark.parametrize("verb", ["list", "get", "patch", "delete"])
def test_a_scheduler_call_ends_at_its_deadline(
    kube: FakeKube, scheduler_kube: SchedulerKube, verb: str
) -> None:
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    created = kube.create(hpa())
    calls = {
        "list": lambda: scheduler_kube.list_hpas(),
        "get": lambda: scheduler_kube.get_hpa("shop", "web"),
        "patch": lambda: scheduler_kube.patch_hpa("shop", "web", {"spec": {"maxReplicas": 6}}),
        "delete": lambda: scheduler_kube.delete_hpa(
            "shop",
            "web",
            uid=created["metadata"]["uid"],
            resource_version=created["metadata"]["resourceVersion"],
        ),
    }
    kube.drip_next(verb=verb, resource="horizontalpodautoscalers", every=0.05, headers=True)
    with pytest.raises(KubeError, match=r"no complete answer within 0\.5 s") as caught:
        calls[verb]()
    assert caught.value.status is None  # a transport failure: retried next cycle


def test_a_hung_hpa_list_costs_one_revert_scan_and_the_next_one_reverts(
    kube: FakeKube, tmp_path: Path
) -> None:
    h: Harness = make_harness(kube, tmp_path)
    try:
        h.kube_api.api.deadline_seconds = 0.5
        h.api.templates = [template()]
        h.api.actions = {"t-1": [action()]}
        h.kube.create(deployment())
        h.kube.create(hpa(low=2, high=5))
        h.run(at(9))
        h.kube.drip_next(verb="list", resource="horizontalpodautoscalers", every=0.05)
        report = h.reconciler.revert_scan(at(18, 1))
        assert report.kube_reachable is False
        assert h.reconciler.reporter.health.reason == (
            "kubernetes: cannot list HPAs: reverts are waiting"
        )
        assert h.reconciler.revert_scan(at(18, 2)).reverts == 1
        assert h.reconciler.reporter.health.ok
    finally:
        h.close()


def test_a_hung_lease_request_ends_at_the_renew_deadline(
    kube: FakeKube, collector_kube: CollectorKube
) -> None:
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "moonin"}})
    settings = LeaseSettings(
        namespace="moonin",
        identity="pod-a",
        lease_seconds=3,
        renew_deadline_seconds=1,
        retry_seconds=0.1,
    )
    collector_kube.deadline_seconds = 600  # only the renew deadline can end the hung call
    kube.drip_next(resource="leases", every=0.2, headers=True)
    elector = LeaderElector(
        collector_kube, settings, on_started=lambda: None, on_stopped=lambda: None
    )
    elector.start()
    try:
        # The first round hangs on the Lease; the next ones, after it gives up, take it.
        wait_until(lambda: elector.is_leader)
    finally:
        elector.stop()
    lease_requests = [r for r in kube.requests if r.resource and r.resource.startswith("leases")]
    assert len(lease_requests) >= 2
