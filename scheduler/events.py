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

import dataclasses
import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import msgspec

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


@dataclass(frozen=True, kw_only=True)
class Window:
    """What an apply, revert or action error is about: one action's window on one HPA.

    Each field is the `ScalingEvent` field of the same name."""

    template_id: str
    action_id: str | None
    namespace: str | None
    deployment: str | None
    min_replicas: int | None
    max_replicas: int | None
    window_start: str
    run_until: str | None


def apply_event(
    *, cluster_id: str, window: Window, provisional: bool, now: datetime
) -> ScalingEvent:
    return _window_event("apply", cluster_id, window, now, provisional=provisional)


def revert_event(
    *,
    cluster_id: str,
    window: Window,
    provisional: bool,
    reason: RevertReason,
    message: str | None,
    now: datetime,
) -> ScalingEvent:
    return _window_event(
        "revert", cluster_id, window, now, provisional=provisional, reason=reason, message=message
    )


def action_error(
    *, cluster_id: str, window: Window, reason: str, message: str, now: datetime
) -> ScalingEvent:
    return _window_event("error", cluster_id, window, now, reason=reason, message=message)


def _window_event(
    type: EventType,
    cluster_id: str,
    window: Window,
    now: datetime,
    *,
    provisional: bool = False,
    reason: str | None = None,
    message: str | None = None,
) -> ScalingEvent:
    # The id's detail, as the module docstring gives it.
    if type == "apply":
        detail = f"{window.min_replicas}:{window.max_replicas}"
    elif type == "error":
        detail = reason or ""
    else:  # a revert
        detail = ""
    return ScalingEvent(
        id=event_id(
            cluster_id, window.template_id, window.action_id, window.window_start, type, detail
        ),
        type=type,
        **dataclasses.asdict(window),
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
