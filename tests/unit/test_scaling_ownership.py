"""Who owns an HPA's bounds, which tool deploys it, and the managedFields list a revert
writes back (`scheduler.ownership`), as tables. Nothing here talks to a server: the real
server's side of it is in tests/real/test_real_scaling_gitops.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from kube.workloads import ObjectMeta, decode_hpa
from sandbox import objects
from scheduler.ownership import (
    FieldOwner,
    ManagedBy,
    Owners,
    classify,
    hand_back,
    owners_of,
    target_managed_by,
)

NOW = datetime(2026, 12, 2, 18, 0, 1, tzinfo=UTC)
SPEC_BOUNDS = {"f:minReplicas": {}, "f:maxReplicas": {}}


def entry(manager: str, operation: str, *spec: str, **extra: Any) -> dict[str, Any]:
    fields = {"f:spec": {f"f:{name}": {} for name in spec}} if spec else {}
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": extra.pop("api_version", "autoscaling/v2"),
        "time": "2026-12-01T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields | extra.pop("fields", {}),
        **extra,
    }


def meta(*entries: dict[str, Any], labels: Any = None, annotations: Any = None) -> ObjectMeta:
    hpa = objects.hpa(name="web", namespace="shop", target="web", low=2, high=5)
    hpa["metadata"].update(managedFields=list(entries), resourceVersion="7")
    hpa["metadata"]["labels"] = labels or {}
    hpa["metadata"]["annotations"] = annotations or {}
    return decode_hpa(msgspec.json.encode(hpa)).metadata


ARGO = FieldOwner("argocd-controller", "Apply", "autoscaling/v2")
CSA = FieldOwner("kubectl-client-side-apply", "Update", "autoscaling/v2")
STATUS = entry("kube-controller-manager", "Update", subresource="status", fields={"f:status": {}})


def test_the_owners_of_the_bounds_leave_ours_and_subresource_writers_out() -> None:
    read = meta(
        entry("argocd-controller", "Apply", "minReplicas", "maxReplicas", "metrics"),
        entry("kubectl-edit", "Update", "minReplicas"),
        entry("moonin-agent", "Apply", "maxReplicas"),
        STATUS,
    )
    edit = FieldOwner("kubectl-edit", "Update", "autoscaling/v2")
    assert owners_of(read).by_field == {"minReplicas": (ARGO, edit), "maxReplicas": (ARGO,)}


def test_a_bound_only_ours_owns_has_the_owners_noted_before_a_window_took_it() -> None:
    read = meta(
        entry("kubectl-edit", "Update", "minReplicas"),
        entry("moonin-agent", "Apply", "maxReplicas"),
    )
    noted = Owners({"minReplicas": (ARGO,), "maxReplicas": (ARGO,)})
    edit = FieldOwner("kubectl-edit", "Update", "autoscaling/v2")
    # min: someone changed it during the window and owns it now; max: still ours.
    assert owners_of(read, noted).by_field == {"minReplicas": (edit,), "maxReplicas": (ARGO,)}


def test_a_note_reads_back_as_the_owners_it_was_written_from() -> None:
    owners = Owners({"minReplicas": (ARGO, CSA)})
    note = owners.note()
    assert Owners.read(note) == owners
    assert "argocd-controller" in note and "kubectl-client-side-apply" in note


@pytest.mark.parametrize("note", [None, "", "{", '["x"]', '{"minReplicas": [["a", "b"]]}'])
def test_a_missing_or_unreadable_note_reads_as_none(note: str | None) -> None:
    assert Owners.read(note) is None


def test_a_note_keeps_only_the_bounds() -> None:
    read = Owners.read('{"minReplicas": [["h", "Apply", "v"]], "spec": [["x", "Apply", "v"]]}')
    assert read == Owners({"minReplicas": (FieldOwner("h", "Apply", "v"),)})


ARGO_LABELS = {"app.kubernetes.io/instance": "web", "app.kubernetes.io/managed-by": "Helm"}
CLASSES = {
    "Argo CD's tracking annotation": (
        {"annotations": {"argocd.argoproj.io/tracking-id": "shop:autoscaling/HPA:shop/web"}},
        ["kubectl-client-side-apply"],
        "argocd",
    ),
    "Argo CD's field manager, over a chart's Helm label": (
        {"labels": ARGO_LABELS},
        ["argocd-controller"],
        "argocd",
    ),
    "Flux's kustomize-controller labels": (
        {"labels": {"kustomize.toolkit.fluxcd.io/name": "apps"}},
        [],
        "flux",
    ),
    "Flux's helm-controller, over the Helm label it also sets": (
        {"labels": {"helm.toolkit.fluxcd.io/name": "web", "app.kubernetes.io/managed-by": "Helm"}},
        ["helm-controller"],
        "flux",
    ),
    "Flux's field manager alone": ({}, ["kustomize-controller"], "flux"),
    "Helm's label": ({"labels": {"app.kubernetes.io/managed-by": "Helm"}}, ["helm"], "helm"),
    "Helm's release annotations": (
        {"annotations": {"meta.helm.sh/release-name": "web"}},
        ["kubectl-client-side-apply"],
        "helm",
    ),
    "Helm 4's field manager alone": ({}, ["helm"], "helm"),
    "another declarative writer": ({}, ["terraform"], "other"),
    "a person's kubectl": ({}, ["kubectl-client-side-apply", "kubectl-edit"], "unmanaged"),
    "no owner at all": ({}, [], "unmanaged"),
}


@pytest.mark.parametrize(("markers", "managers", "tool"), CLASSES.values(), ids=CLASSES.keys())
def test_a_target_is_classified_by_its_markers_and_its_managers(
    markers: dict[str, Any], managers: list[str], tool: str
) -> None:
    found = classify([meta(**markers)], managers)
    assert found == ManagedBy(tool, tuple(sorted(managers)))  # type: ignore[arg-type]
    assert found.details() == {"tool": tool, "managers": sorted(managers)}


def test_the_deployments_markers_count_when_the_hpa_has_none() -> None:
    deployment = meta(labels={"kustomize.toolkit.fluxcd.io/name": "apps"})
    assert classify([meta(), deployment], []).tool == "flux"


def test_a_provisional_target_is_classified_by_who_owns_its_deployments_replicas() -> None:
    deployment = meta(
        entry("helm", "Apply", "replicas", "template"),
        entry("kube-controller-manager", "Update", "replicas", subresource="scale"),
    )
    found = target_managed_by(meta(), deployment, provisional=True, noted=None)
    assert found == ManagedBy("helm", ("helm",))


def test_a_pre_existing_target_is_classified_by_the_owners_its_window_noted() -> None:
    now_ours = meta(entry("moonin-agent", "Apply", "minReplicas", "maxReplicas"))
    noted = Owners({"minReplicas": (ARGO,), "maxReplicas": (ARGO,)})
    found = target_managed_by(now_ours, None, provisional=False, noted=noted)
    assert found == ManagedBy("argocd", ("argocd-controller",))


# --- handing back ----------------------------------------------------------------------------


def handed(read: ObjectMeta, owners: Owners | None) -> list[tuple[str, str, list[str]]]:
    """The list `hand_back` writes, as manager, operation and the spec fields each owns."""
    return handed_fields(read, owners, ("minReplicas", "maxReplicas"))


def handed_fields(
    read: ObjectMeta, owners: Owners | None, fields: tuple[str, ...]
) -> list[tuple[str, str, list[str]]]:
    return [
        (e["manager"], e["operation"], sorted(e.get("fieldsV1", {}).get("f:spec", {})))
        for e in hand_back(read, owners, NOW, fields=fields)
    ]


def test_the_bounds_go_back_to_the_applier_that_owned_them_and_ours_is_dropped() -> None:
    read = meta(
        entry("argocd-controller", "Apply", "metrics", "scaleTargetRef"),
        entry("moonin-agent", "Update", "minReplicas", "maxReplicas"),
        STATUS,
    )
    owners = Owners({"minReplicas": (ARGO,), "maxReplicas": (ARGO,)})
    assert handed(read, owners) == [
        (
            "argocd-controller",
            "Apply",
            ["f:maxReplicas", "f:metrics", "f:minReplicas", "f:scaleTargetRef"],
        ),
        ("kube-controller-manager", "Update", []),
    ]


def test_an_entry_written_back_is_the_entry_read_but_for_the_bounds() -> None:
    argo = entry("argocd-controller", "Apply", "metrics")
    read = meta(argo, entry("moonin-agent", "Apply", "minReplicas"), STATUS)
    back = hand_back(read, Owners({"minReplicas": (ARGO,)}), NOW)
    assert back[0] == {**argo, "fieldsV1": {"f:spec": {"f:metrics": {}, "f:minReplicas": {}}}}
    assert back[1] == STATUS  # untouched, every field as read


def test_an_updater_is_matched_by_its_api_version_too() -> None:
    v1 = entry("kubectl-client-side-apply", "Update", "metrics", api_version="autoscaling/v1")
    v2 = entry("kubectl-client-side-apply", "Update", "behavior")
    read = meta(v1, v2, entry("moonin-agent", "Apply", "minReplicas", "maxReplicas"))
    owners = Owners({"minReplicas": (CSA,), "maxReplicas": (CSA,)})
    assert handed(read, owners) == [
        ("kubectl-client-side-apply", "Update", ["f:metrics"]),
        ("kubectl-client-side-apply", "Update", ["f:behavior", "f:maxReplicas", "f:minReplicas"]),
    ]


def test_an_owner_whose_entry_is_gone_gets_a_new_one_stamped_now() -> None:
    read = meta(entry("moonin-agent", "Apply", "minReplicas", "maxReplicas"), STATUS)
    owners = Owners({"minReplicas": (ARGO,), "maxReplicas": (ARGO,)})
    back = hand_back(read, owners, NOW)
    assert back[-1] == {
        "manager": "argocd-controller",
        "operation": "Apply",
        "apiVersion": "autoscaling/v2",
        "time": "2026-12-02T18:00:01Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": SPEC_BOUNDS},
    }


def test_a_bound_someone_else_took_during_the_window_stays_theirs() -> None:
    read = meta(
        entry("argocd-controller", "Apply", "metrics"),
        entry("kubectl-edit", "Update", "minReplicas"),
        entry("moonin-agent", "Apply", "maxReplicas"),
    )
    owners = Owners({"minReplicas": (ARGO,), "maxReplicas": (ARGO,)})
    assert handed(read, owners) == [
        ("argocd-controller", "Apply", ["f:maxReplicas", "f:metrics"]),
        ("kubectl-edit", "Update", ["f:minReplicas"]),
    ]


def test_without_a_note_ours_is_dropped_and_the_bounds_are_left_unowned() -> None:
    read = meta(
        entry("argocd-controller", "Apply", "metrics"),
        entry("moonin-agent", "Update", "minReplicas", "maxReplicas"),
    )
    assert handed(read, None) == [("argocd-controller", "Apply", ["f:metrics"])]


def test_a_deployments_replicas_go_back_to_their_owner_before_our_write() -> None:
    read = meta(
        entry("helm", "Apply", "template", api_version="apps/v1"),
        entry("moonin-agent", "Update", "replicas", api_version="apps/v1"),
    )  # our write took the replicas from helm
    # Only the field named is handed back: the bounds are not a Deployment's.
    before = Owners({"replicas": (FieldOwner("helm", "Apply", "apps/v1"),)})
    assert owners_of(read, fields=("replicas",)) == Owners({"replicas": ()})
    assert handed_fields(read, before, ("replicas",)) == [
        ("helm", "Apply", ["f:replicas", "f:template"])
    ]
