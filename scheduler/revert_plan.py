"""A revert as a plan: what to write to end one managed HPA's window, decided from what was
read before anything is written (`plan_revert`, pure), then carried out in order by
`scheduler.executor.perform` (for `scheduler.revert`).

The plan, by case (the safety model of `scheduler.revert`):
- `overridden` (someone else changed min or max): the revert event, then one HPA patch that
  removes our annotations and leaves the RELEASED marker; their bounds stay.
- a provisional HPA: the revert event, then its delete (uid and resourceVersion
  preconditions), with the Deployment's replicas to restore journalled first (none when
  the HPA has no target or no original replicas were kept).
- a pre-existing HPA: the revert event, then one patch putting min and max back to the
  originals (`original_bounds`) and removing our annotations; when no originals would make
  a valid HPA, the patch only releases it (`unusable` says so, for the log).

Each HPA patch is followed by the hand-back (`scheduler.ownership`): a second patch that
drops every managedFields entry of ours and returns the bounds to the owners the window
noted, so no field is left owned by `moonin-agent`. Until it is made the HPA keeps the
ORIGINAL_MANAGERS annotation, by which a later scan finishes it.

The revert event always comes first, so it is in the outbox before any write. Every HPA
write carries the resourceVersion that was read (`kube.workloads.ObjectMeta.precondition`).

How it fails: nothing here raises for an object's content; a managed HPA read from the API
server always has its namespace, name, uid and resourceVersion.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from kube.workloads import Hpa, ObjectMeta
from scheduler import annotations as notes
from scheduler import events
from scheduler.annotations import Window
from scheduler.steps import DeleteProvisional, Enqueue, HandBack, PatchHpa, Reverted, Step
from scheduler.store import PendingRestore


@dataclass(frozen=True, slots=True)
class RevertView:
    """What a revert is decided on: the HPA as read this cycle and the window it is in."""

    cluster_id: str
    hpa: Hpa
    window: Window
    reason: events.RevertReason
    release: bool = False
    """Leave the RELEASED marker (revert-all); an `overridden` revert always leaves it."""


def plan_revert(view: RevertView, now: datetime) -> list[Step]:
    """The writes that end the window of `view.hpa`, in the order they must be made."""
    hpa, window, reason = view.hpa, view.window, view.reason
    originals = window.kept
    read = hpa.metadata
    said = _message(window, reason)
    marker = window.release_marker if view.release or reason == "overridden" else None
    event = events.revert_event(cluster_id=view.cluster_id, window=window, reason=reason, now=now)
    steps: list[Step] = [Enqueue(event)]
    if reason == "overridden":
        steps.append(PatchHpa(read, _released(hpa, read, marker), Reverted(said)))
    elif originals.provisional:
        deployment, replicas = window.deployment, originals.replicas
        restore = None
        if deployment and replicas is not None:
            restore = PendingRestore(read.namespace, deployment, replicas, marker)
        return [*steps, DeleteProvisional(read, restore, said)]
    elif (restorable := original_bounds(originals)) is None:
        # Nothing a server would take (a missing max, min > max, max < 1 are a 422 every
        # cycle): leave the spec, hand the HPA back.
        unusable = (originals.min_replicas, originals.max_replicas)
        released = _released(hpa, read, marker)
        steps.append(PatchHpa(read, released, Reverted(said), unusable=unusable))
    else:
        low, high = restorable
        # A min that was absent is removed again (the API then defaults it to 1).
        spec = {"minReplicas": low, "maxReplicas": high}
        patch = {**_released(hpa, read, marker), "spec": spec}
        steps.append(PatchHpa(read, patch, Reverted(said)))
    return [*steps, HandBack(originals.owners)]


def original_bounds(originals: notes.Originals) -> tuple[int | None, int] | None:
    """The min and max to restore: `original-min`/`original-max` when they make a valid
    HPA, else those of `original-spec`; None when neither does. Valid as the API server
    validates an HPA (`ValidateHorizontalPodAutoscalerSpec`): max >= 1, an absent min, or
    1 <= min <= max."""
    for low, high in (
        (originals.min_replicas, originals.max_replicas),
        _spec_bounds(originals.spec),
    ):
        if high is not None and high >= 1 and (low is None or 1 <= low <= high):
            return low, high
    return None


def _released(hpa: Hpa, read: ObjectMeta, marker: str | None) -> dict[str, Any]:
    """The patch that removes our annotations (and leaves `marker`), if nothing changed."""
    annotations: dict[str, Any] = notes.removal()
    if marker is not None:
        annotations[notes.RELEASED] = notes.with_released(hpa.metadata.annotations, marker)
    return {"metadata": {**read.precondition(), "annotations": annotations}}


def _spec_bounds(spec_json: str | None) -> tuple[int | None, int | None]:
    try:
        spec = msgspec.json.decode(spec_json or "")
    except msgspec.DecodeError:
        return None, None
    if not isinstance(spec, dict):
        return None, None
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    return (
        low if isinstance(low, int) else None,
        high if isinstance(high, int) else None,
    )


def _message(window: Window, reason: str) -> str:
    name = window.template_name or window.template_id
    return (
        f"template {name} action {window.action_id}: window from {window.window_start} "
        f"reverted ({reason})"
    )
