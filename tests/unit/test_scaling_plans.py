"""The apply and revert plans (`scheduler.apply_plan.plan_apply`,
`scheduler.revert_plan.plan_revert`) as tables: what was read in, the writes out, in the
order they are made. Nothing here talks to a server."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import msgspec
import pytest

from kube.workloads import Hpa, ObjectMeta, decode_deployment, decode_hpa
from sandbox import objects
from scheduler import annotations as notes
from scheduler.actions import Action
from scheduler.apply import find_hpa
from scheduler.apply_plan import PROVISIONAL_METRICS, ApplyView, plan_apply
from scheduler.events import RevertReason, event_id
from scheduler.gitops import YIELD, GitopsPolicy, synced_back
from scheduler.ownership import FieldOwner, Owners
from scheduler.revert_plan import RevertView, plan_revert
from scheduler.steps import (
    Applied,
    ApplyHpa,
    CreateHpa,
    DeleteProvisional,
    Enqueue,
    HandBack,
    PatchHpa,
    RaiseReplicas,
    Report,
    Reverted,
    Skip,
    Step,
    TakenOver,
)
from scheduler.store import PendingRestore
from scheduler.view import revert_reason
from scheduler.window import ActiveWindow
from tests.scaling_harness import CLUSTER, WINDOW, at

RUN_UNTIL = "2026-12-02T18:00:00Z"
ACTION = Action(
    id="a-1",
    namespace="shop",
    deployment="web",
    min_replicas=4,
    max_replicas=20,
    priority_up=1,
    priority_down=1,
)
MARKER = notes.release_marker("t-1", "a-1", WINDOW)
READ = ObjectMeta(namespace="shop", name="web", uid="u-1", resource_version="41")
REVERT_ID = event_id(CLUSTER, "t-1", "a-1", WINDOW, "revert", "")
# What every revert patch removes: all of our window's annotations.
REMOVED = notes.removal()
# Who owned the bounds before the window: a declared HPA, applied by Argo CD.
ARGO = FieldOwner("argocd-controller", "Apply", "autoscaling/v2")
OWNERS = Owners({"maxReplicas": (ARGO,), "minReplicas": (ARGO,)})
ARGO_ENTRY = {
    "manager": "argocd-controller",
    "operation": "Apply",
    "apiVersion": "autoscaling/v2",
    "time": "2026-12-01T10:00:00Z",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:spec": {"f:minReplicas": {}, "f:maxReplicas": {}, "f:metrics": {}}},
}


def read_as(steps: list[Step]) -> list[Step]:
    """The steps with each write's object cut to what identifies the read: its namespace,
    name, uid and resourceVersion (the preconditions a write carries)."""

    def identity(read: ObjectMeta) -> ObjectMeta:
        return ObjectMeta(
            namespace=read.namespace,
            name=read.name,
            uid=read.uid,
            resource_version=read.resource_version,
        )

    return [
        replace(step, hpa=identity(step.hpa))
        if isinstance(step, PatchHpa | ApplyHpa | DeleteProvisional)
        else step
        for step in steps
    ]


def managed_hpa(
    low: int,
    high: int,
    *,
    provisional: bool = False,
    original: tuple[int | None, int | None] = (2, 5),
    original_spec: str | None = '{"minReplicas": 2, "maxReplicas": 5}',
    replicas: int | None = 3,
    run_until: str = RUN_UNTIL,
    writers: tuple[str, ...] = (),
    extra: dict[str, str] | None = None,
) -> Hpa:
    """An HPA the window 4:20 of t-1/a-1 manages, now at `low`:`high`, as read; `writers`
    own both bounds in managedFields (server-side apply), `extra` annotations besides."""
    originals = notes.Originals(
        provisional=provisional,
        replicas=replicas,
        min_replicas=None if provisional else original[0],
        max_replicas=None if provisional else original[1],
        spec=None if provisional else original_spec,
        owners=None if provisional else OWNERS,
    )
    written = planned("t-1", run_until=run_until).annotations(originals)
    hpa = objects.hpa(name="web", namespace="shop", target="web", low=low, high=high)
    hpa["metadata"].update(uid="u-1", resourceVersion="41")
    hpa["metadata"]["annotations"] = {k: v for k, v in written.items() if v is not None}
    hpa["metadata"]["annotations"].update(extra or {})
    hpa["metadata"]["managedFields"] = [
        {
            "manager": writer,
            "operation": "Apply",
            "apiVersion": "autoscaling/v2",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:minReplicas": {}, "f:maxReplicas": {}}},
        }
        for writer in writers
    ]
    return read(hpa)


def planned(template_id: str, *, run_until: str = RUN_UNTIL) -> notes.Window:
    """The window 4:20 of `template_id`'s action a-1 on shop/web, as planned."""
    active = ActiveWindow.of(datetime.fromisoformat(WINDOW), datetime.fromisoformat(run_until))
    return notes.Window.planned(
        template_id=template_id,
        template_name={"t-1": "black friday", "t-2": "cyber monday"}[template_id],
        window=active,
        action=ACTION,
    )


def read(obj: dict[str, Any]) -> Hpa:
    """`obj` as the scaling role reads it from the API server."""
    return decode_hpa(msgspec.json.encode(obj))


def spec_text(low: int, high: int) -> str:
    """The spec of `objects.hpa` at `low`:`high`, as a window keeps it (`original-spec`)."""
    spec = objects.hpa(name="web", namespace="shop", target="web", low=low, high=high)["spec"]
    return msgspec.json.encode(spec).decode()


def patch(spec: dict[str, Any] | None = None, *, marker: bool = False) -> dict[str, Any]:
    annotations: dict[str, Any] = dict(REMOVED)
    if marker:
        annotations[notes.RELEASED] = MARKER
    body: dict[str, Any] = {"metadata": {"resourceVersion": "41", "annotations": annotations}}
    if spec is not None:
        body["spec"] = spec
    return body


SAID = "template black friday action a-1: window from 2026-12-02T08:00:00Z reverted"


@dataclass(frozen=True)
class Case:
    hpa: Hpa
    reason: RevertReason
    release: bool
    writes: list[Step]  # after the revert event, which always comes first
    event: tuple[int | None, int | None]  # the bounds the revert event reports


CASES = {
    "a pre-existing HPA gets its original bounds back": Case(
        managed_hpa(4, 20),
        "expired",
        False,
        [
            PatchHpa(
                READ, patch({"minReplicas": 2, "maxReplicas": 5}), Reverted(f"{SAID} (expired)")
            ),
            HandBack(OWNERS),
        ],
        (4, 20),
    ),
    "revert-all leaves the released marker": Case(
        managed_hpa(4, 20),
        "manual",
        True,
        [
            PatchHpa(
                READ,
                patch({"minReplicas": 2, "maxReplicas": 5}, marker=True),
                Reverted(f"{SAID} (manual)"),
            ),
            HandBack(OWNERS),
        ],
        (4, 20),
    ),
    "an absent original min is removed again": Case(
        managed_hpa(4, 20, original=(None, 5)),
        "disabled",
        False,
        [
            PatchHpa(
                READ, patch({"minReplicas": None, "maxReplicas": 5}), Reverted(f"{SAID} (disabled)")
            ),
            HandBack(OWNERS),
        ],
        (4, 20),
    ),
    "unusable original bounds give way to the original spec's": Case(
        managed_hpa(4, 20, original=(9, 3), original_spec='{"minReplicas": 1, "maxReplicas": 6}'),
        "expired",
        False,
        [
            PatchHpa(
                READ, patch({"minReplicas": 1, "maxReplicas": 6}), Reverted(f"{SAID} (expired)")
            ),
            HandBack(OWNERS),
        ],
        (4, 20),
    ),
    "no usable originals at all: released as it is": Case(
        managed_hpa(4, 20, original=(9, 3), original_spec='{"minReplicas": 9, "maxReplicas": 3}'),
        "expired",
        False,
        [PatchHpa(READ, patch(), Reverted(f"{SAID} (expired)"), unusable=(9, 3)), HandBack(OWNERS)],
        (4, 20),
    ),
    "overridden bounds stay, released with the marker": Case(
        managed_hpa(7, 20),
        "overridden",
        False,
        [PatchHpa(READ, patch(marker=True), Reverted(f"{SAID} (overridden)")), HandBack(OWNERS)],
        (None, None),
    ),
    "a provisional HPA is deleted, its replicas to restore": Case(
        managed_hpa(4, 20, provisional=True),
        "expired",
        False,
        [DeleteProvisional(READ, PendingRestore("shop", "web", 3, None), f"{SAID} (expired)")],
        (4, 20),
    ),
    "a provisional HPA under revert-all journals the marker with the replicas": Case(
        managed_hpa(4, 20, provisional=True),
        "manual",
        True,
        [DeleteProvisional(READ, PendingRestore("shop", "web", 3, MARKER), f"{SAID} (manual)")],
        (4, 20),
    ),
    "a provisional HPA without original replicas restores nothing": Case(
        managed_hpa(4, 20, provisional=True, replicas=None),
        "expired",
        False,
        [DeleteProvisional(READ, None, f"{SAID} (expired)")],
        (4, 20),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_revert_plan_is_its_event_then_its_writes(case: Case) -> None:
    window = notes.read_window(case.hpa)
    assert window is not None
    view = RevertView(CLUSTER, case.hpa, window, case.reason, case.release)
    first, *writes = plan_revert(view, at(18, 1))
    assert isinstance(first, Enqueue)  # in the outbox before any write
    event = first.event
    assert (event.id, event.type, event.reason) == (REVERT_ID, "revert", case.reason)
    assert (event.min_replicas, event.max_replicas) == case.event
    assert read_as(writes) == case.writes


# --- the apply plan ------------------------------------------------------------------------------

LATER = "2026-12-02T20:00:00Z"
PLANNED = planned("t-1")
OTHER = planned("t-2")
DEPLOYMENT = decode_deployment(
    msgspec.json.encode(objects.deployment(name="web", namespace="shop", replicas=2))
)
PRE_EXISTING = notes.Originals(
    provisional=False,
    replicas=2,
    min_replicas=2,
    max_replicas=5,
    spec=spec_text(2, 5),
    owners=OWNERS,
)


def unmanaged_hpa(name: str = "web", target: str = "web") -> Hpa:
    hpa = objects.hpa(name=name, namespace="shop", target=target, low=2, high=5)
    hpa["metadata"].update(uid="u-1", resourceVersion="41", managedFields=[ARGO_ENTRY])
    return read(hpa)


def window_config(window: notes.Window, originals: notes.Originals) -> dict[str, Any]:
    """The server-side apply config that puts `window` on shop/web as read."""
    annotations = window.annotations(originals)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "resourceVersion": "41",
            "annotations": {k: v for k, v in annotations.items() if v is not None},
        },
        "spec": {"minReplicas": 4, "maxReplicas": 20},
    }


def ends(reason: RevertReason | None) -> Any:
    return lambda window: reason


def provisional_body(name: str, replicas: int) -> tuple[str, dict[str, Any], Applied]:
    originals = notes.Originals(
        provisional=True, replicas=replicas, min_replicas=None, max_replicas=None, spec=None
    )
    body = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {"app.kubernetes.io/managed-by": "moonin-agent"},
            "annotations": {
                k: v for k, v in PLANNED.annotations(originals).items() if v is not None
            },
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 4,
            "maxReplicas": 20,
            "metrics": [dict(metric) for metric in PROVISIONAL_METRICS],
        },
    }
    return name, body, Applied(originals, resized=True)


@dataclass(frozen=True)
class ApplyCase:
    hpas: list[Hpa]
    steps: list[Step]
    journalled: int | None = None
    reason: RevertReason | None = None  # whether another owner's window is over


TAKEN_OVER = (
    "template black friday action a-1: window from 2026-12-02T08:00:00Z ended ({}); taken over"
)
OTHERS = managed_hpa(4, 20)  # t-1's window, as t-2 finds it
KEPT = notes.Originals(
    provisional=False,
    replicas=3,
    min_replicas=2,
    max_replicas=5,
    spec='{"minReplicas": 2, "maxReplicas": 5}',
    owners=OWNERS,
)  # what `managed_hpa` keeps
OTHERS_OVERRIDDEN = managed_hpa(7, 20)
APPLY_CASES = {
    "no HPA: a provisional one keeps the Deployment's replicas": ApplyCase(
        [], [CreateHpa("shop", *provisional_body("web", 2))]
    ),
    "no HPA after a half-done revert: the journalled replicas are the originals": ApplyCase(
        [], [CreateHpa("shop", *provisional_body("web", 3))], journalled=3
    ),
    "an HPA of that name scales something else: the provisional one is named apart": ApplyCase(
        [unmanaged_hpa("web", target="api")],
        [CreateHpa("shop", *provisional_body("web-moonin", 2))],
    ),
    "a pre-existing HPA keeps its bounds as originals and is resized": ApplyCase(
        [unmanaged_hpa()],
        [ApplyHpa(READ, window_config(PLANNED, PRE_EXISTING), Applied(PRE_EXISTING, resized=True))],
    ),
    "our window, as written: only the replicas are raised": ApplyCase(
        [managed_hpa(4, 20)], [RaiseReplicas(4)]
    ),
    "our window, bounds changed by someone else: left for the revert scan": ApplyCase(
        [managed_hpa(7, 20)], [Skip("overridden")]
    ),
    "our window with a new end: the annotations alone change": ApplyCase(
        [managed_hpa(4, 20, run_until=LATER)],
        [ApplyHpa(READ, window_config(PLANNED, KEPT), Applied(KEPT, resized=False))],
    ),
}


@pytest.mark.parametrize("case", APPLY_CASES.values(), ids=APPLY_CASES.keys())
def test_an_apply_plan_writes_what_the_hpa_it_finds_needs(case: ApplyCase) -> None:
    view = ApplyView(
        planned=PLANNED,
        deployment=DEPLOYMENT,
        hpas=case.hpas,
        hpa=find_hpa(case.hpas, "web"),
        journalled_replicas=case.journalled,
        cluster_id=CLUSTER,
        reason_for=ends(case.reason),
    )
    assert read_as(plan_apply(view, at(9))) == case.steps


def view_of(
    hpa: Hpa,
    planned: notes.Window,
    reason: RevertReason | None = None,
    *,
    policy: GitopsPolicy = YIELD,
) -> ApplyView:
    """`planned` as an apply finds it on `hpa`, the only HPA of its namespace."""
    return ApplyView(
        planned=planned,
        deployment=DEPLOYMENT,
        hpas=[hpa],
        hpa=hpa,
        journalled_replicas=None,
        cluster_id=CLUSTER,
        reason_for=ends(reason),
        gitops=policy,
    )


@pytest.mark.parametrize(
    ("hpa", "reason", "originals"),
    [
        (OTHERS, "expired", "kept"),
        (OTHERS_OVERRIDDEN, "overridden", "as now"),
    ],
    ids=["an ended window", "an overridden window"],
)
def test_another_windows_hpa_is_taken_over_once_its_window_is_over(
    hpa: Hpa, reason: RevertReason, originals: str
) -> None:
    managed = notes.read_window(hpa)
    assert managed is not None
    first, write, said = plan_apply(view_of(hpa, OTHER, reason), at(9))
    assert isinstance(first, Enqueue)  # the old window's revert event, before the write
    assert (first.event.id, first.event.reason) == (REVERT_ID, reason)
    if originals == "kept":
        expected = managed.kept
    else:
        low, high = 7, 20  # what someone else set becomes what a revert restores
        expected = notes.Originals(
            provisional=False,
            replicas=2,
            min_replicas=low,
            max_replicas=high,
            spec=spec_text(low, high),
            owners=OWNERS,  # only ours owns the bounds: those the first window noted
        )
    assert read_as([write]) == [
        ApplyHpa(
            READ, window_config(OTHER, expected), Applied(expected, resized=reason == "overridden")
        )
    ]
    assert said == TakenOver(hpa, TAKEN_OVER.format(reason))


def test_another_windows_hpa_still_on_is_a_conflict_and_nothing_is_written() -> None:
    assert plan_apply(view_of(OTHERS, OTHER), at(9)) == [
        Report(
            "conflict",
            f"hpa shop/web is managed by template t-1 action a-1 until {RUN_UNTIL}",
        )
    ]


# --- a GitOps sync during the window ----------------------------------------------------------

SYNCED = managed_hpa(2, 5, writers=("argocd-controller",))  # Argo CD's self-heal: the originals
REASSERT = GitopsPolicy("reassert", reassert_seconds=300)


def same_window(hpa: Hpa, policy: GitopsPolicy, now: datetime) -> list[Step]:
    return read_as(plan_apply(view_of(hpa, PLANNED, policy=policy), now))


def test_a_sync_back_to_the_originals_is_applied_again_with_one_gitops_conflict() -> None:
    window = notes.read_window(SYNCED)
    assert window is not None
    config = window_config(PLANNED, window.kept)
    config["metadata"]["annotations"][notes.REASSERTED_AT] = "2026-12-02T09:00:00Z"
    write, report = same_window(SYNCED, REASSERT, at(9))
    assert write == ApplyHpa(READ, config, Applied(window.kept, resized=True))
    assert isinstance(report, Report) and report.reason == "gitops_conflict"
    assert "argocd (argocd-controller) set hpa shop/web back to 2:5" in report.message


def test_a_sync_back_within_the_interval_waits_for_it() -> None:
    recent = {notes.REASSERTED_AT: "2026-12-02T08:56:00Z"}  # 4 minutes before 09:00
    synced = managed_hpa(2, 5, writers=("argocd-controller",), extra=recent)
    assert same_window(synced, REASSERT, at(9)) == [Skip("reassert_later")]
    assert [type(step) for step in same_window(synced, REASSERT, at(9, 1))] == [ApplyHpa, Report]


@pytest.mark.parametrize(
    ("hpa", "policy"),
    [
        (SYNCED, GitopsPolicy("yield")),
        (managed_hpa(2, 5, writers=("kubectl-edit",)), REASSERT),
        (managed_hpa(3, 5, writers=("argocd-controller",)), REASSERT),
        (managed_hpa(2, 5, writers=("argocd-controller", "kubectl-edit")), REASSERT),
        (managed_hpa(2, 5), REASSERT),
    ],
    ids=[
        "a sync when the policy yields",
        "a person's change back to the originals",
        "a tool's change to other values",
        "a tool's and a person's",
        "a change no manager owns",
    ],
)
def test_anything_but_a_gitops_sync_under_reassert_stays_an_override(
    hpa: Hpa, policy: GitopsPolicy
) -> None:
    assert same_window(hpa, policy, at(9)) == [Skip("overridden")]


def test_a_synced_window_is_on_until_it_ends_and_overridden_when_the_policy_yields() -> None:
    window = notes.read_window(SYNCED)
    assert window is not None and synced_back(SYNCED, window) is not None
    assert revert_reason(window, at(9), None, synced=True) is None
    assert revert_reason(window, at(18, 1), None, synced=True) == "expired"
    assert revert_reason(window, at(9), None) == "overridden"


@pytest.mark.parametrize(
    ("stamp", "due"),
    [
        (None, True),
        ("2026-12-02T08:55:00Z", True),
        ("2026-12-02T08:55:01Z", False),
        ("yesterday", True),
        ("2026-12-02T08:58:00", True),  # no offset: cannot be placed, so not trusted
    ],
)
def test_a_reassert_is_due_once_its_interval_passed_since_the_last(
    stamp: str | None, due: bool
) -> None:
    hpa = managed_hpa(2, 5, extra={notes.REASSERTED_AT: stamp} if stamp else None)
    assert REASSERT.reassert_due(hpa, at(9)) is due
