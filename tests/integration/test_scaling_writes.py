"""What the scaling role writes, held to what a real API server takes: strict field
validation, no writes to an object being deleted, reverts a server would refuse."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import msgspec
import pytest
import structlog.testing

from kube.workloads import Deployment, Hpa
from sandbox.kube import FakeKube
from scheduler import annotations as notes
from scheduler import handback
from scheduler.kubeapi import Obj, ScalingKube
from scheduler.names import is_subdomain
from tests.scaling_harness import (
    NS,
    Harness,
    action,
    at,
    deployment,
    hpa,
    ours,
)

HPAS = "horizontalpodautoscalers"


def applied(h: Harness) -> None:
    """A pre-existing HPA (2:5) under the window (4:20)."""
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    h.run(at(9))
    h.events()


# --- fieldValidation=Strict --------------------------------------------------------------
# https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation


def test_every_write_asks_for_strict_field_validation(h: Harness) -> None:
    h.kube.create(deployment(name="solo", replicas=1))  # no HPA: one is created
    h.api.actions = {"t-1": [action(), action("a-2", "solo")]}
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    h.kube.clear_requests()
    h.run(at(9))
    h.run(at(18, 1))
    writes = [r for r in h.kube.requests if r.method in ("POST", "PATCH", "PUT")]
    kinds = {r.resource for r in writes}
    assert {"horizontalpodautoscalers.autoscaling", "events", "deployments.apps"} <= kinds
    assert all(r.query.get("fieldValidation") == "Strict" for r in writes)


def test_a_write_the_server_refuses_as_a_bad_request_is_logged_as_refused(h: Harness) -> None:
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    h.kube.fail_next(400, resource=HPAS, verb="patch")
    with structlog.testing.capture_logs() as logs:
        report = h.run(at(9))
    assert report.failures == 1
    [refused] = [line for line in logs if line["event"] == "scaling_write_refused"]
    assert refused["log_level"] == "error" and refused["status"] == 400


# --- objects being deleted ---------------------------------------------------------------
# https://kubernetes.io/docs/concepts/overview/working-with-objects/finalizers/: a delete
# of an object with finalizers sets metadata.deletionTimestamp and keeps the object.


def terminating(kube: FakeKube, name: str = "web", resource: str = HPAS) -> dict[str, Any]:
    """Delete the object while a finalizer holds it: the server keeps it, marked as deleting."""
    hold = {"metadata": {"finalizers": ["example.com/hold"]}}
    kube.patch(resource, NS, name, hold, patch_type="merge")
    kube.delete(resource, NS, name)
    held = kube.get(resource, NS, name)
    assert held["metadata"]["deletionTimestamp"]
    return held


def test_a_managed_hpa_being_deleted_is_not_reverted(h: Harness) -> None:
    applied(h)
    terminating(h.kube)
    h.kube.clear_requests()
    report = h.run(at(18, 1))
    assert report.reverts == 0 and report.failures == 0
    assert h.writes() == []
    assert ours(h.hpa())[notes.MANAGED] == "true"


def test_an_hpa_being_deleted_is_not_applied_to_and_gets_no_provisional_twin(
    h: Harness,
) -> None:
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    terminating(h.kube)
    h.kube.clear_requests()
    report = h.run(at(9))
    assert report.applies == 0
    assert h.writes() == []
    assert [item["metadata"]["name"] for item in h.kube.list(HPAS)] == ["web"]


def test_a_deployment_being_deleted_gets_no_provisional_hpa(h: Harness) -> None:
    h.kube.create(deployment(replicas=3))
    terminating(h.kube, resource="deployments")
    h.kube.clear_requests()
    report = h.run(at(9))
    assert (report.applies, report.errors) == (0, 0)
    assert h.writes() == []
    assert h.kube.list(HPAS) == []


# --- reverts a server would refuse -------------------------------------------------------
# The API server validates an HPA's spec (pkg/apis/autoscaling/validation:
# ValidateHorizontalPodAutoscalerSpec): maxReplicas >= 1, 1 <= minReplicas <= maxReplicas.


def edit_originals(h: Harness, **annotations: str) -> None:
    h.kube.patch(HPAS, NS, "web", {"metadata": {"annotations": annotations}}, patch_type="merge")


def test_originals_with_min_above_max_give_way_to_the_original_spec(h: Harness) -> None:
    applied(h)
    edit_originals(h, **{notes.ORIGINAL_MIN: "7", notes.ORIGINAL_MAX: "5"})
    report = h.run(at(18, 1))
    assert report.reverts == 1 and report.failures == 0
    restored = h.hpa()
    assert (restored["spec"]["minReplicas"], restored["spec"]["maxReplicas"]) == (2, 5)
    assert ours(restored) == {}


@pytest.mark.parametrize("original_max", ["0", "-3"])
def test_unusable_originals_everywhere_release_the_hpa_once_with_an_error(
    h: Harness, original_max: str
) -> None:
    applied(h)
    edit_originals(
        h,
        **{
            notes.ORIGINAL_MIN: "1",
            notes.ORIGINAL_MAX: original_max,
            notes.ORIGINAL_SPEC: '{"minReplicas": 9, "maxReplicas": 3}',
        },
    )
    with structlog.testing.capture_logs() as logs:
        report = h.run(at(18, 1))
    assert report.reverts == 1 and report.failures == 0
    released = h.hpa()
    assert ours(released) == {}
    assert (released["spec"]["minReplicas"], released["spec"]["maxReplicas"]) == (4, 20)
    [line] = [line for line in logs if line["event"] == "original_bounds_unusable"]
    assert line["log_level"] == "error"
    [revert] = h.events()
    assert (revert["type"], revert["reason"]) == ("revert", "expired")
    h.kube.clear_requests()
    h.run(at(18, 2))
    assert h.writes() == []  # released: nothing loops


# --- Kubernetes Events -------------------------------------------------------------------


def test_an_event_about_an_hpa_with_a_maximal_name_has_a_valid_name_and_names_its_reporter(
    h: Harness,
) -> None:
    long_name = "w" * 253  # the longest name an HPA can have
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(name=long_name, low=2, high=5))
    h.run(at(9))
    [event] = h.kube_events("MooninScalingApplied")
    assert is_subdomain(event["metadata"]["name"])
    assert event["involvedObject"]["name"] == long_name
    assert event["reportingComponent"] == "moonin-agent"
    assert event["reportingInstance"] == event["source"]["host"] == socket.gethostname()


# --- with the cluster's HPA controller ---------------------------------------------------
# https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/: the controller
# keeps the target's replicas within the HPA's [minReplicas, maxReplicas].


def test_a_window_scales_the_deployment_up_and_its_revert_brings_it_back_within_the_bounds(
    h: Harness,
) -> None:
    h.kube.enable_controller("horizontal-pod-autoscaler")
    applied(h)  # 3 replicas, HPA 2:5, window 4:20
    assert h.deployment()["spec"]["replicas"] == 4
    # Load during the window: the controller scaled further, within the window's bounds.
    h.kube.patch("deployments", NS, "web", {"spec": {"replicas": 8}})
    assert h.deployment()["spec"]["replicas"] == 8
    report = h.run(at(18, 1))
    assert report.reverts == 1 and report.failures == 0
    assert (h.hpa()["spec"]["minReplicas"], h.hpa()["spec"]["maxReplicas"]) == (2, 5)
    assert h.deployment()["spec"]["replicas"] == 5
    assert h.hpa()["status"]["desiredReplicas"] == 5


# --- who owns the bounds: managedFields ------------------------------------------------------


def applied_as(h: Harness, manager: str, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` server-side applied over HTTP by `manager`, as a GitOps tool does."""
    meta = obj["metadata"]
    path = f"/apis/autoscaling/v2/namespaces/{meta['namespace']}/{HPAS}/{meta['name']}"
    with httpx.Client(base_url=h.kube.url, headers=h.kube.headers) as http:
        answer = http.patch(
            path,
            params={"fieldManager": manager, "force": "true"},
            content=msgspec.json.encode(obj),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
    assert answer.status_code in (200, 201), answer.text
    return answer.json()  # type: ignore[no-any-return]


def owners(obj: dict[str, Any]) -> dict[str, set[str]]:
    """Manager/operation -> the spec fields it owns."""
    return {
        f"{e['manager']}/{e['operation']}": set((e.get("fieldsV1") or {}).get("f:spec") or {})
        for e in obj["metadata"].get("managedFields") or []
    }


ARGO_HPA = {
    **hpa(low=2, high=5),
    "metadata": {
        "name": "web",
        "namespace": NS,
        "annotations": {"argocd.argoproj.io/tracking-id": "shop:autoscaling/x:shop/web"},
    },
}
BOUNDS = {"f:minReplicas", "f:maxReplicas"}


def test_a_window_owns_the_bounds_and_its_revert_hands_them_back(h: Harness) -> None:
    h.kube.create(deployment(replicas=3))
    applied_as(h, "argocd-controller", ARGO_HPA)
    with structlog.testing.capture_logs() as logs:
        h.run(at(9))
        h.run(at(9, 1))
    during = h.hpa()
    assert owners(during)["moonin-agent/Apply"] >= BOUNDS
    # Its Deployment raised to the new min, and its replicas left to the HPA controller.
    assert h.deployment()["spec"]["replicas"] == 4
    assert not [name for name in owners(h.deployment()) if name.startswith("moonin-agent")]
    assert not BOUNDS & owners(during)["argocd-controller/Apply"]
    [event] = h.events()
    assert event["details"] == {"managed_by": {"tool": "argocd", "managers": ["argocd-controller"]}}
    [advice] = [line for line in logs if line["event"] == "scaling_gitops_target"]
    assert (advice["tool"], advice["target"]) == ("argocd", f"{NS}/web")
    h.kube.clear_requests()
    h.run(at(18, 1))
    after = h.hpa()
    assert (after["spec"]["minReplicas"], after["spec"]["maxReplicas"]) == (2, 5)
    assert ours(after) == {}
    assert [name for name in owners(after) if name.startswith("moonin-agent")] == []
    assert owners(after)["argocd-controller/Apply"] >= BOUNDS
    hpa_path = f"/apis/autoscaling/v2/namespaces/{NS}/{HPAS}/web"
    assert [w for w in h.writes() if w[1] == hpa_path] == [("PATCH", hpa_path)] * 2
    h.kube.clear_requests()
    h.run(at(18, 2))
    assert h.writes() == []


def test_an_hpa_an_earlier_agent_reverted_is_handed_back_once(h: Harness) -> None:
    """Agents before the hand-back reverted with a merge patch alone, which left an entry
    of ours owning both bounds."""
    applied_as(h, "argocd-controller", ARGO_HPA)
    path = f"/apis/autoscaling/v2/namespaces/{NS}/{HPAS}/web"
    with httpx.Client(base_url=h.kube.url, headers=h.kube.headers) as http:
        for low, high in ((4, 20), (2, 5)):
            http.patch(
                path,
                params={"fieldManager": "moonin-agent"},
                json={"spec": {"minReplicas": low, "maxReplicas": high}},
                headers={"Content-Type": "application/merge-patch+json"},
            ).raise_for_status()
    assert owners(h.hpa())["moonin-agent/Update"] >= BOUNDS
    h.kube.clear_requests()
    h.run(at(7))  # no template active: only the scan's work
    assert h.writes() == [("PATCH", path)]
    left = h.hpa()
    assert [name for name in owners(left) if name.startswith("moonin-agent")] == []
    assert (left["spec"]["minReplicas"], left["spec"]["maxReplicas"]) == (2, 5)  # untouched
    h.kube.clear_requests()
    h.run(at(7, 1))
    assert h.writes() == []


def test_a_hand_back_that_meets_a_write_reads_again_and_is_made_in_the_same_cycle(
    h: Harness,
) -> None:
    h.kube.create(deployment(replicas=3))
    applied_as(h, "argocd-controller", ARGO_HPA)
    h.run(at(9))
    h.events()
    kube = StatusBeforeHandBack(h.kube, h.kube_api)
    h.reconciler = h.make_reconciler(kube=kube)
    report = h.run(at(18, 1))
    assert report.reverts == 1
    assert kube.patches == 3  # the revert, the hand-back's 409, the hand-back again
    after = h.hpa()
    assert after["status"]["desiredReplicas"] == 7  # the controller's write stays
    assert [name for name in owners(after) if name.startswith("moonin-agent")] == []
    assert ours(after) == {}


def test_a_raise_s_hand_back_that_meets_the_controller_three_times_waits_longer_each_time(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Deployment controller writes the status more than once after a raise (its
    ReplicaSet's pods come): tried at once, three tries all met it, and left our entry."""
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    pauses: list[float] = []
    monkeypatch.setattr(handback.time, "sleep", pauses.append)
    kube = StatusBeforeDeploymentHandBacks(h.kube, h.kube_api, writes=3)
    h.reconciler = h.make_reconciler(kube=kube)
    h.run(at(9))
    raised = h.deployment()
    assert raised["spec"]["replicas"] == 4
    assert raised["status"]["replicas"] == 3  # the controller's last write stays
    assert [name for name in owners(raised) if name.startswith("moonin-agent")] == []
    assert kube.patches == 5  # the raise, three 409s, the hand-back
    assert len(pauses) == 3 and 0 < pauses[0] < pauses[1] < pauses[2] < 1


class StatusBeforeDeploymentHandBacks(ScalingKube):
    """The Deployment controller writes the status before each of the first `writes` tries
    of a raise's hand-back."""

    def __init__(self, kube: FakeKube, inner: ScalingKube, *, writes: int) -> None:
        super().__init__(inner.api)
        self.fake = kube
        self.writes = writes
        self.patches = 0

    def patch_deployment(self, namespace: str, name: str, patch: Obj) -> Deployment:
        self.patches += 1
        if 2 <= self.patches <= 1 + self.writes:  # a try of the hand-back
            status = {"status": {"replicas": 3, "observedGeneration": self.patches}}
            self.fake.patch("deployments", namespace, name, status)
        return super().patch_deployment(namespace, name, patch)


class StatusBeforeHandBack(ScalingKube):
    """The HPA controller writes the status between a revert's patch and its hand-back."""

    def __init__(self, kube: FakeKube, inner: ScalingKube) -> None:
        super().__init__(inner.api)
        self.fake = kube
        self.patches = 0

    def patch_hpa(self, namespace: str, name: str, patch: Obj) -> Hpa:
        self.patches += 1
        if self.patches == 2:  # the hand-back
            status = {"status": {"currentReplicas": 3, "desiredReplicas": 7}}
            self.fake.patch(HPAS, namespace, name, status)
        return super().patch_hpa(namespace, name, patch)
