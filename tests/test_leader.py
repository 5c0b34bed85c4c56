"""Leader election on a Lease in the fake API server: one leader, handover, loss, release."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from agent.discovery import led_last
from collector.kube import KubeApi
from collector.kubeconfig import KubeTarget
from collector.leader import LeaderElector, LeaseSettings
from sandbox.kube import FakeKube
from tests.cluster_objects import namespace
from tests.waiting import wait_until


class Replica:
    """One agent replica's elector, with what its callbacks saw."""

    def __init__(self, kube: FakeKube, identity: str, **timing: float) -> None:
        self.api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
        self.started = threading.Event()
        self.stopped = threading.Event()
        settings = LeaseSettings(
            namespace="moonin",
            identity=identity,
            lease_seconds=timing.get("lease_seconds", 1.0),
            renew_deadline_seconds=timing.get("renew_deadline_seconds", 0.6),
            retry_seconds=timing.get("retry_seconds", 0.1),
        )
        self.elector = LeaderElector(
            self.api, settings, on_started=self.started.set, on_stopped=self.stopped.set
        )


@pytest.fixture
def replicas(kube: FakeKube) -> Iterator[Callable[..., Replica]]:
    kube.create(namespace("moonin"))  # the Lease's namespace exists, as in a cluster
    made: list[Replica] = []

    def make(identity: str, **timing: float) -> Replica:
        replica = Replica(kube, identity, **timing)
        made.append(replica)
        return replica

    yield make
    for replica in made:
        replica.elector.stop()
        replica.api.close()


def holder(kube: FakeKube) -> str | None:
    return kube.get("leases", "moonin", "moonin-discovery-leader")["spec"].get("holderIdentity")


def test_only_one_replica_leads_and_the_lease_names_it(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    a, b = replicas("pod-a"), replicas("pod-b")
    a.elector.start()
    wait_until(a.started.is_set)
    b.elector.start()
    time.sleep(0.5)  # several rounds for b
    assert a.elector.is_leader and not b.elector.is_leader
    assert not b.started.is_set()
    assert holder(kube) == "pod-a"


def test_stopping_the_leader_releases_the_lease_and_the_other_takes_over_at_once(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    a = replicas("pod-a")
    b = replicas("pod-b", lease_seconds=30.0)  # would wait 30 s for an unreleased lease
    a.elector.start()
    wait_until(a.started.is_set)
    b.elector.start()
    a.elector.stop()
    assert a.stopped.is_set()
    wait_until(b.started.is_set, timeout=5)
    assert holder(kube) == "pod-b"
    lease = kube.get("leases", "moonin", "moonin-discovery-leader")
    assert lease["spec"]["leaseTransitions"] >= 1


def test_a_crashed_leader_is_replaced_once_its_lease_runs_out(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    a, b = replicas("pod-a"), replicas("pod-b")
    a.elector.start()
    wait_until(a.started.is_set)
    b.elector.start()
    a.api.abort_streams()
    a.elector._stopped.set()  # the process froze: no renewals, no release
    wait_until(b.started.is_set, timeout=5)
    assert holder(kube) == "pod-b"


def test_seeing_another_holder_stops_collection_at_once(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    a = replicas("pod-a", renew_deadline_seconds=60.0)
    a.elector.start()
    wait_until(a.started.is_set)
    kube.patch(
        "leases",
        "moonin",
        "moonin-discovery-leader",
        {"spec": {"holderIdentity": "intruder", "renewTime": "2099-01-01T00:00:00.000000Z"}},
        patch_type="merge",
    )
    wait_until(a.stopped.is_set, timeout=3)  # long before the renew deadline
    assert not a.elector.is_leader


def test_an_unreachable_api_ends_leadership_after_the_renew_deadline(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    a = replicas("pod-a")
    a.elector.start()
    wait_until(a.started.is_set)
    kube.forbid("leases")
    wait_until(a.stopped.is_set, timeout=5)
    assert not a.elector.reporter.health.ok
    kube.allow("leases")
    a.started.clear()
    wait_until(a.started.is_set, timeout=5)  # and it comes back when the API does


def test_a_renewal_that_hangs_ends_leadership_at_the_renew_deadline(
    kube: FakeKube, replicas: Callable[..., Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API server stops answering mid-request (a black-holed connection): the request
    # would wait for its 30 s timeout, long past the lease another replica then takes.
    a = replicas("pod-a", lease_seconds=3.0, renew_deadline_seconds=1.0, retry_seconds=0.1)
    a.elector.start()
    wait_until(a.started.is_set)
    answer = threading.Event()
    get = a.api.get

    def hanging(*args: object, **kwargs: object) -> bytes:
        answer.wait(30)
        return get(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(a.api, "get", hanging)
    wait_until(a.stopped.is_set, timeout=5)
    # Ended while the request still hangs: the round never got to look at the clock.
    assert not answer.is_set() and not a.elector.is_leader
    answer.set()  # the request comes back: the round goes on, and may lead again
    monkeypatch.setattr(a.api, "get", get)
    a.started.clear()
    wait_until(a.started.is_set, timeout=5)


def test_a_crash_of_the_election_thread_stops_collection_and_reports_unhealthy(
    kube: FakeKube, replicas: Callable[..., Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    a = replicas("pod-a")
    a.elector.start()
    wait_until(a.started.is_set)

    def broken() -> bool:
        raise RuntimeError("bug")

    monkeypatch.setattr(a.elector, "_try_acquire_or_renew", broken)
    wait_until(lambda: not a.elector.alive)
    assert a.stopped.is_set()
    assert a.elector.reporter.health.reason == "leader election thread crashed"


def test_an_acquisition_records_whether_anyone_else_led_in_between(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    a1 = replicas("pod-a")
    a1.elector.start()
    wait_until(a1.started.is_set)
    first = a1.elector.acquisition
    assert first is not None and first.transitions_before is None  # there was no Lease
    a1.elector.stop()  # releases

    a2 = replicas("pod-a")  # the same pod, restarted: nobody led meanwhile
    a2.elector.start()
    wait_until(a2.started.is_set)
    second = a2.elector.acquisition
    assert second is not None
    assert led_last(str(first.transitions), second)
    a2.elector.stop()

    b = replicas("pod-b")
    b.elector.start()
    wait_until(b.started.is_set)
    b.elector.stop()
    a3 = replicas("pod-a")
    a3.elector.start()
    wait_until(a3.started.is_set)
    third = a3.elector.acquisition
    assert third is not None
    assert not led_last(str(second.transitions), third)  # pod-b led in between
    assert not led_last(None, third)  # an empty store proves nothing either
