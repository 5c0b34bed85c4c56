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
from scheduler.revert_plan import RevertView, plan_revert
from scheduler.steps import (
    Applied,
    CreateHpa,
    DeleteProvisional,
    Enqueue,
    PatchHpa,
    RaiseReplicas,
    Report,
    Reverted,
    Skip,
    Step,
    TakenOver,
)
from scheduler.store import PendingRestore
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
        if isinstance(step, PatchHpa | DeleteProvisional)
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
) -> Hpa:
    """An HPA the window 4:20 of t-1/a-1 manages, now at `low`:`high`, as read."""
    originals = notes.Originals(
        provisional=provisional,
        replicas=replicas,
        min_replicas=None if provisional else original[0],
        max_replicas=None if provisional else original[1],
        spec=None if provisional else original_spec,
    )
    written = planned("t-1", run_until=run_until).annotations(originals)
    hpa = objects.hpa(name="web", namespace="shop", target="web", low=low, high=high)
    hpa["metadata"].update(uid="u-1", resourceVersion="41")
    hpa["metadata"]["annotations"] = {k: v for k, v in written.items() if v is not None}
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
            )
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
            )
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
            )
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
            )
        ],
        (4, 20),
    ),
    "no usable originals at all: released as it is": Case(
        managed_hpa(4, 20, original=(9, 3), original_spec='{"minReplicas": 9, "maxReplicas": 3}'),
        "expired",
        False,
        [PatchHpa(READ, patch(), Reverted(f"{SAID} (expired)"), unusable=(9, 3))],
        (4, 20),
    ),
    "overridden bounds stay, released with the marker": Case(
        managed_hpa(7, 20),
        "overridden",
        False,
        [PatchHpa(READ, patch(marker=True), Reverted(f"{SAID} (overridden)"))],
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
    provisional=False, replicas=2, min_replicas=2, max_replicas=5, spec=spec_text(2, 5)
)


def unmanaged_hpa(name: str = "web", target: str = "web") -> Hpa:
    hpa = objects.hpa(name=name, namespace="shop", target=target, low=2, high=5)
    hpa["metadata"].update(uid="u-1", resourceVersion="41")
    return read(hpa)


def window_patch(window: notes.Window, originals: notes.Originals) -> dict[str, Any]:
    return {
        "metadata": {"resourceVersion": "41", "annotations": window.annotations(originals)},
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
        [PatchHpa(READ, window_patch(PLANNED, PRE_EXISTING), Applied(PRE_EXISTING, resized=True))],
    ),
    "our window, as written: only the replicas are raised": ApplyCase(
        [managed_hpa(4, 20)], [RaiseReplicas(4)]
    ),
    "our window, bounds changed by someone else: left for the revert scan": ApplyCase(
        [managed_hpa(7, 20)], [Skip("overridden")]
    ),
    "our window with a new end: the annotations alone change": ApplyCase(
        [managed_hpa(4, 20, run_until=LATER)],
        [PatchHpa(READ, window_patch(PLANNED, KEPT), Applied(KEPT, resized=False))],
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
    view = ApplyView(
        planned=OTHER,
        deployment=DEPLOYMENT,
        hpas=[hpa],
        hpa=hpa,
        journalled_replicas=None,
        cluster_id=CLUSTER,
        reason_for=ends(reason),
    )
    first, write, said = plan_apply(view, at(9))
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
        )
    assert read_as([write]) == [
        PatchHpa(
            READ, window_patch(OTHER, expected), Applied(expected, resized=reason == "overridden")
        )
    ]
    assert said == TakenOver(hpa, TAKEN_OVER.format(reason))


def test_another_windows_hpa_still_on_is_a_conflict_and_nothing_is_written() -> None:
    view = ApplyView(
        planned=OTHER,
        deployment=DEPLOYMENT,
        hpas=[OTHERS],
        hpa=OTHERS,
        journalled_replicas=None,
        cluster_id=CLUSTER,
        reason_for=ends(None),
    )
    assert plan_apply(view, at(9)) == [
        Report(
            "conflict",
            f"hpa shop/web is managed by template t-1 action a-1 until {RUN_UNTIL}",
        )
    ]
