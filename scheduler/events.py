"""Scaling events with the contract's deterministic ids.

An id is the first 32 hex digits of SHA-256 over
`cluster_id|template_id|action_id|window_start|type|detail`, where `detail` is `min:max` for
an apply (a changed action mid-window is a new apply), empty for a revert, the reason code
for an action error (one per reason per window), and `<code>:<cron>|<timezone>|<duration>`
as given for a template error (an edit that is still invalid is a new event). The platform
de-duplicates by id, so sending the same event twice (a crash between the outbox put and
the local store's note of it) costs nothing.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

import msgspec

from scheduler.actions import InvalidAction
from scheduler.annotations import Window
from scheduler.ownership import ManagedBy
from shipper.records import ScalingEvent, utc_timestamp

EventType = Literal["apply", "revert", "error"]
RevertReason = Literal["expired", "disabled", "overridden", "manual"]


def event_id(
    cluster_id: str,
    template_id: str,
    action_id: str | None,
    window_start: str | None,
    type: EventType,
    detail: str,
) -> str:
    text = "|".join((cluster_id, template_id, action_id or "", window_start or "", type, detail))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def apply_event(
    *,
    cluster_id: str,
    window: Window,
    provisional: bool,
    managed_by: ManagedBy | None = None,
    now: datetime,
) -> ScalingEvent:
    """The window's bounds are on its HPA (`provisional`: on an HPA made for it), with the
    tool that deploys the target in `details.managed_by` when known (not part of the id)."""
    event = _window_event("apply", cluster_id, window, now, provisional=provisional)
    if managed_by is None:
        return event
    return msgspec.structs.replace(event, details={"managed_by": managed_by.details()})


def revert_event(
    *, cluster_id: str, window: Window, reason: RevertReason, now: datetime
) -> ScalingEvent:
    """The window `window` (as read from its HPA) is over: min and max it applied (null when
    overridden, whose message says what someone else set)."""
    message = None
    if reason == "overridden":
        message = (
            f"min/max changed to {window.min_replicas}:{window.max_replicas} during the "
            "window; left as set"
        )
    elif reason == "manual":
        message = "reverted by moonin-agent scaling revert-all"
    return _window_event(
        "revert",
        cluster_id,
        window,
        now,
        provisional=window.kept.provisional,
        bounds=reason != "overridden",
        blank_end_as_null=True,
        reason=reason,
        message=message,
    )


def action_error(
    *, cluster_id: str, window: Window, reason: str, message: str, now: datetime
) -> ScalingEvent:
    return _window_event("error", cluster_id, window, now, reason=reason, message=message)


def invalid_action(
    *,
    cluster_id: str,
    template_id: str,
    window_start: str,
    run_until: str,
    action: InvalidAction,
    now: datetime,
) -> ScalingEvent:
    """An action of an active template that cannot be applied: what could be read of it."""
    return _event(
        "error",
        cluster_id,
        now,
        template_id=template_id,
        action_id=action.id,
        namespace=action.namespace,
        deployment=action.deployment,
        min_replicas=action.min_replicas,
        max_replicas=action.max_replicas,
        window_start=window_start,
        run_until=run_until,
        reason="invalid_action",
        message=action.message,
    )


def _window_event(
    type: EventType,
    cluster_id: str,
    window: Window,
    now: datetime,
    *,
    provisional: bool = False,
    bounds: bool = True,
    blank_end_as_null: bool = False,
    reason: str | None = None,
    message: str | None = None,
) -> ScalingEvent:
    return _event(
        type,
        cluster_id,
        now,
        template_id=window.template_id,
        action_id=window.action_id,
        namespace=window.namespace,
        deployment=window.deployment or None,
        min_replicas=window.min_replicas if bounds else None,
        max_replicas=window.max_replicas if bounds else None,
        window_start=window.window_start,
        run_until=(window.run_until or None) if blank_end_as_null else window.run_until,
        provisional=provisional,
        reason=reason,
        message=message,
    )


def _event(
    type: EventType,
    cluster_id: str,
    now: datetime,
    *,
    template_id: str,
    action_id: str | None,
    namespace: str | None,
    deployment: str | None,
    min_replicas: int | None,
    max_replicas: int | None,
    window_start: str,
    run_until: str | None,
    provisional: bool = False,
    reason: str | None = None,
    message: str | None = None,
) -> ScalingEvent:
    # The id's detail, as the module docstring gives it.
    if type == "apply":
        detail = f"{min_replicas}:{max_replicas}"
    elif type == "error":
        detail = reason or ""
    else:  # a revert
        detail = ""
    return ScalingEvent(
        id=event_id(cluster_id, template_id, action_id, window_start, type, detail),
        type=type,
        template_id=template_id,
        action_id=action_id,
        namespace=namespace,
        deployment=deployment,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        window_start=window_start,
        run_until=run_until,
        provisional=provisional,
        reason=reason,
        message=message,
        occurred_at=utc_timestamp(now),
    )


def template_error(
    *,
    cluster_id: str,
    template_id: str,
    reason: str,
    cron: Any,
    timezone: Any,
    duration_minutes: Any,
    message: str,
    now: datetime,
) -> ScalingEvent:
    """A template-level error: no action, no window; the values as given go into the id."""
    given = "|".join(_as_given(value) for value in (cron, timezone, duration_minutes))
    detail = f"{reason}:{given}"
    return ScalingEvent(
        id=event_id(cluster_id, template_id, None, None, "error", detail),
        type="error",
        template_id=template_id,
        reason=reason,
        message=message,
        occurred_at=utc_timestamp(now),
    )


def _as_given(value: Any) -> str:
    """A value as the platform sent it: text verbatim, null as nothing, anything else
    (a number, or a wrong type in a malformed template) as its JSON text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)
