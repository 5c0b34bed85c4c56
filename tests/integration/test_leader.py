"""Leader election on a Lease in the fake API server: one leader, handover, loss, release."""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from agent.config import ConfigError, load_settings
from agent.discovery import lease_namespace, led_last
from collector.leader import JITTER_FACTOR, LeaderElector, LeaseSettings, micro_time
from kube.api import KubeApi
from kube.cluster import KubeTarget
from sandbox import objects
from sandbox.kube import FakeKube
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
    kube.create(objects.namespace(name="moonin"))  # the Lease's namespace exists, as in a cluster
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
    kube: FakeKube, replicas: Callable[..., Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = replicas("pod-a"), replicas("pod-b")
    a.elector.start()
    wait_until(a.started.is_set)
    reads = 0
    read = b.api.get

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return read(*args, **kwargs)

    monkeypatch.setattr(b.api, "get", counted)  # each of b's rounds reads the Lease
    b.elector.start()
    wait_until(lambda: reads >= 5)  # several rounds for b
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


# -- what the elector writes, as client-go's elector writes it --------------------------
# Source: k8s.io/client-go/tools/leaderelection/leaderelection.go (tryAcquireOrRenew,
# release) and resourcelock/leaselock.go (Update writes the Lease it read).

LEASE = "moonin-discovery-leader"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def foreign_lease(kube: FakeKube, **spec: object) -> None:
    """A Lease someone else made, with metadata and spec fields the elector does not know."""
    kube.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": LEASE,
                "namespace": "moonin",
                "labels": {"team": "discovery"},
                "annotations": {"note": "kept"},
            },
            "spec": {"strategy": "OldestEmulationVersion", "preferredHolder": "pod-b", **spec},
        }
    )


def test_taking_and_renewing_keep_the_lease_labels_annotations_and_unknown_spec_fields(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    foreign_lease(kube)
    a = replicas("pod-a")
    a.elector._round()  # takes it
    a.elector._round()  # renews it
    lease = kube.get("leases", "moonin", LEASE)
    assert lease["spec"]["holderIdentity"] == "pod-a"
    assert lease["metadata"]["labels"] == {"team": "discovery"}
    assert lease["metadata"]["annotations"] == {"note": "kept"}
    assert lease["spec"]["strategy"] == "OldestEmulationVersion"
    assert lease["spec"]["preferredHolder"] == "pod-b"


def test_a_release_clears_the_holder_with_a_one_second_lease_and_both_times_now(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    foreign_lease(kube)
    a = replicas("pod-a")
    a.elector._round()
    a.elector._leader = True  # led, as the round's caller would have noted
    acquired = kube.get("leases", "moonin", LEASE)["spec"]["acquireTime"]
    a.elector._release()
    spec = kube.get("leases", "moonin", LEASE)["spec"]
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert spec["acquireTime"] == spec["renewTime"] >= acquired
    assert spec["strategy"] == "OldestEmulationVersion"  # the rest as it was


def test_lease_times_always_carry_six_fractional_digits_and_z() -> None:
    # A real server decodes MicroTime with RFC3339Micro and refuses renewTime without them.
    on_the_second = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)
    assert micro_time(on_the_second) == "2026-12-04T12:00:00.000000Z"
    assert MICRO_TIME.match(micro_time())


def test_written_lease_times_are_micro_times(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    replicas("pod-a").elector._round()
    spec = kube.get("leases", "moonin", LEASE)["spec"]
    assert MICRO_TIME.match(spec["acquireTime"]) and MICRO_TIME.match(spec["renewTime"])


def test_a_lease_shorter_than_a_second_is_written_as_one_second(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    replicas("pod-a", lease_seconds=0.5).elector._round()
    assert kube.get("leases", "moonin", LEASE)["spec"]["leaseDurationSeconds"] == 1


def test_a_conflicting_write_reads_the_lease_again_and_retries_in_the_same_round(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    foreign_lease(kube)
    a = replicas("pod-a")
    kube.clear_requests()
    kube.fail_next(409, resource="leases", verb="update")
    a.elector._round()
    assert a.elector.is_leader
    assert [
        (r.method, r.status) for r in kube.requests if r.resource == "leases.coordination.k8s.io"
    ] == [
        ("GET", 200),
        ("PUT", 409),
        ("GET", 200),
        ("PUT", 200),
    ]
    assert a.elector.reporter.snapshot().counters["lease_conflicts"] == 1


def test_a_replica_that_does_not_lead_waits_the_retry_period_with_jitter(
    kube: FakeKube, replicas: Callable[..., Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    # client-go: wait.JitterUntil(..., RetryPeriod, JitterFactor=1.2, ...) while acquiring,
    # the plain RetryPeriod while renewing.
    a = replicas("pod-a", retry_seconds=2.0)
    monkeypatch.setattr(random, "random", lambda: 1.0)
    assert a.elector._retry_delay() == pytest.approx(2.0 * (1 + JITTER_FACTOR))
    a.elector._leader = True
    assert a.elector._retry_delay() == 2.0


def test_lease_writes_ask_for_strict_field_validation(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    # https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation
    a = replicas("pod-a")
    a.elector._round()  # creates
    a.elector._round()  # updates
    writes = [r for r in kube.requests if r.method in ("POST", "PUT")]
    assert [r.method for r in writes] == ["POST", "PUT"]
    assert all(r.query.get("fieldValidation") == "Strict" for r in writes)


def test_a_refused_lease_write_is_reported_as_refused_not_as_unreachable(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    a = replicas("pod-a")
    kube.fail_next(400, resource="leases", verb="create")
    a.elector._round()
    health = a.elector.reporter.health
    assert not a.elector.is_leader
    assert not health.ok and "the lease write was refused" in (health.reason or "")


def test_a_lease_namespace_that_does_not_exist_is_reported_by_name(
    kube: FakeKube, replicas: Callable[..., Replica]
) -> None:
    # A create into a missing namespace is 404 NotFound on a real server
    # (https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/).
    a = replicas("pod-a")
    kube.fail_next(404, resource="leases", verb="create")
    with structlog.testing.capture_logs() as logs:
        a.elector._round()
    reason = a.elector.reporter.health.reason or ""
    assert "namespace 'moonin' not found (is POD_NAMESPACE right?)" in reason
    assert [line["log_level"] for line in logs if line["event"] == "lease_write_refused"] == [
        "error"
    ]


def test_the_lease_lives_in_the_namespace_of_the_service_account_the_cluster_was_reached_with(
    tmp_path: Path,
) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "namespace").write_text("moonin-agent\n")
    in_pod = KubeTarget(
        server="https://127.0.0.1:1", verify=False, token=lambda: None, service_account=account
    )
    environ = {"PROJECT_ID": "p-1", "CLUSTER_ID": "c-1", "CLUSTER_TOKEN": "tok-3f9a1c77e2b84d05"}
    settings = load_settings("discovery", environ)
    assert lease_namespace(settings.identity, in_pod) == "moonin-agent"
    given = load_settings("discovery", {**environ, "POD_NAMESPACE": "elsewhere"})
    assert lease_namespace(given.identity, in_pod) == "elsewhere"
    (account / "namespace").unlink()
    with pytest.raises(ConfigError, match="POD_NAMESPACE: required for leader election"):
        lease_namespace(settings.identity, in_pod)


@pytest.mark.parametrize(
    ("verb", "permission"),
    [
        ("get", 'cannot get resource "leases" in API group "coordination.k8s.io"'),
        ("create", 'cannot create resource "leases" in API group "coordination.k8s.io"'),
    ],
)
def test_a_forbidden_lease_names_the_permission_once_and_clears_when_allowed(
    kube: FakeKube, replicas: Callable[..., Replica], verb: str, permission: str
) -> None:
    a = replicas("pod-a")
    kube.fail_next(403, 2, resource="leases", verb=verb)
    denied = f'forbidden: {permission} in the namespace "moonin"'
    with structlog.testing.capture_logs() as logs:
        a.elector._round()
        a.elector._round()
        health = a.elector.reporter.health
        assert (health.reason, health.unready, a.elector.is_leader) == (denied, True, False)
        a.elector._round()  # allowed again
    assert a.elector.is_leader and a.elector.reporter.health.ok
    said = [(e["event"], e["permission"]) for e in logs if e["event"] == "lease_forbidden"]
    assert said == [("lease_forbidden", denied)]
