"""A managed HPA read through its annotations: the window they describe, whether someone
else changed its bounds since, and the revert event that ends it. Used by the apply (a
takeover ends the old window first), the revert and the rule that ends a window
(`scheduler.view.revert_reason`).

How it fails: nothing here raises for an object's content.
"""

from __future__ import annotations

from datetime import datetime

from kube.workloads import Hpa
from scheduler import annotations as notes
from scheduler import events
from scheduler.objects import bounds
from shipper.records import ScalingEvent


def is_overridden(hpa: Hpa, managed: notes.Managed) -> bool:
    """Whether min or max differ from what the window set (its managed hash says what)."""
    low, high = bounds(hpa)
    expected = notes.managed_hash(
        managed.template_id, managed.action_id, managed.window_start, low, high or 0
    )
    return expected != managed.managed_hash


def managed_window(
    hpa: Hpa, managed: notes.Managed, low: int | None, high: int | None, run_until: str | None
) -> events.Window:
    """The window a managed HPA's annotations describe, with the bounds an event reports."""
    return events.Window(
        template_id=managed.template_id,
        action_id=managed.action_id,
        namespace=hpa.metadata.namespace,
        deployment=hpa.spec.scale_target_ref.name or None,
        min_replicas=low,
        max_replicas=high,
        window_start=managed.window_start,
        run_until=run_until,
    )


def revert_event(
    cluster_id: str,
    now: datetime,
    hpa: Hpa,
    managed: notes.Managed,
    reason: events.RevertReason,
) -> ScalingEvent:
    """The window's revert event: min and max it applied (null when overridden, whose
    message says what someone else set)."""
    low, high = bounds(hpa)
    message = None
    if reason == "overridden":
        message = f"min/max changed to {low}:{high} during the window; left as set"
    elif reason == "manual":
        message = "reverted by moonin-agent scaling revert-all"
    kept = reason != "overridden"
    return events.revert_event(
        cluster_id=cluster_id,
        window=managed_window(
            hpa, managed, low if kept else None, high if kept else None, managed.run_until or None
        ),
        provisional=managed.originals.provisional,
        reason=reason,
        message=message,
        now=now,
    )
