"""The revert plan (`scheduler.revert_plan.plan_revert`) as a table: an HPA as read and its
annotations in, the writes out, in the order they are made. Nothing here talks to a server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from sandbox import objects
from scheduler import annotations as notes
from scheduler.events import RevertReason, event_id
from scheduler.objects import Ref
from scheduler.revert_plan import (
    DeleteProvisional,
    Enqueue,
    PatchHpa,
    RevertView,
    Write,
    plan_revert,
)
from scheduler.store import PendingRestore
from tests.scaling_harness import CLUSTER, WINDOW, at

RUN_UNTIL = "2026-12-02T18:00:00Z"
MARKER = notes.release_marker("t-1", "a-1", WINDOW)
READ = Ref(namespace="shop", name="web", uid="u-1", resource_version="41")
REVERT_ID = event_id(CLUSTER, "t-1", "a-1", WINDOW, "revert", "")
# What every revert patch removes: all of our window's annotations.
REMOVED = notes.removal()


def managed_hpa(
    low: int,
    high: int,
    *,
    provisional: bool = False,
    original: tuple[int | None, int | None] = (2, 5),
    original_spec: str | None = '{"minReplicas": 2, "maxReplicas": 5}',
    replicas: int | None = 3,
) -> dict[str, Any]:
    """An HPA the window 4:20 of t-1/a-1 manages, now at `low`:`high`."""
    originals = notes.Originals(
        provisional=provisional,
        replicas=replicas,
        min_replicas=None if provisional else original[0],
        max_replicas=None if provisional else original[1],
        spec=None if provisional else original_spec,
    )
    written = notes.window_annotations(
        template_id="t-1",
        action_id="a-1",
        template_name="black friday",
        window_start=WINDOW,
        run_until=RUN_UNTIL,
        priority_up=1,
        priority_down=1,
        managed_hash=notes.managed_hash("t-1", "a-1", WINDOW, 4, 20),
        originals=originals,
    )
    hpa = objects.hpa(name="web", namespace="shop", target="web", low=low, high=high)
    hpa["metadata"].update(uid="u-1", resourceVersion="41")
    hpa["metadata"]["annotations"] = {k: v for k, v in written.items() if v is not None}
    return hpa


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
    hpa: dict[str, Any]
    reason: RevertReason
    release: bool
    writes: list[Write]  # after the revert event, which always comes first
    event: tuple[int | None, int | None]  # the bounds the revert event reports


CASES = {
    "a pre-existing HPA gets its original bounds back": Case(
        managed_hpa(4, 20),
        "expired",
        False,
        [PatchHpa(READ, patch({"minReplicas": 2, "maxReplicas": 5}), f"{SAID} (expired)")],
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
                f"{SAID} (manual)",
            )
        ],
        (4, 20),
    ),
    "an absent original min is removed again": Case(
        managed_hpa(4, 20, original=(None, 5)),
        "disabled",
        False,
        [PatchHpa(READ, patch({"minReplicas": None, "maxReplicas": 5}), f"{SAID} (disabled)")],
        (4, 20),
    ),
    "unusable original bounds give way to the original spec's": Case(
        managed_hpa(4, 20, original=(9, 3), original_spec='{"minReplicas": 1, "maxReplicas": 6}'),
        "expired",
        False,
        [PatchHpa(READ, patch({"minReplicas": 1, "maxReplicas": 6}), f"{SAID} (expired)")],
        (4, 20),
    ),
    "no usable originals at all: released as it is": Case(
        managed_hpa(4, 20, original=(9, 3), original_spec='{"minReplicas": 9, "maxReplicas": 3}'),
        "expired",
        False,
        [PatchHpa(READ, patch(), f"{SAID} (expired)", unusable=(9, 3))],
        (4, 20),
    ),
    "overridden bounds stay, released with the marker": Case(
        managed_hpa(7, 20),
        "overridden",
        False,
        [PatchHpa(READ, patch(marker=True), f"{SAID} (overridden)")],
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
    managed = notes.read_managed(case.hpa)
    assert managed is not None
    view = RevertView(CLUSTER, case.hpa, managed, case.reason, case.release)
    first, *writes = plan_revert(view, at(18, 1))
    assert isinstance(first, Enqueue)  # in the outbox before any write
    event = first.event
    assert (event.id, event.type, event.reason) == (REVERT_ID, "revert", case.reason)
    assert (event.min_replicas, event.max_replicas) == case.event
    assert writes == case.writes
