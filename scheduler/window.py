"""Whether a template is active at an instant: the contract's activation rules, as pure code.

`evaluate(template, now)` applies the rules of "When a template is active" in their order:
1. disabled, or expired (`now >= valid_until`);
2. a running manual execution, until its end (`run_until`, else `started_at +
   duration_minutes`); once ended it is ignored;
3. the cron schedule in the template's time zone: active while some fire time `t` has
   `t <= now < t + duration` (elapsed time); windows that overlap or touch form one period,
   which starts at its first fire time and must not have begun more than 7 days before
   `now`;
4. `run_until` capped at `valid_until`.

An active template's window is one frozen value, `ActiveWindow`: its start and end as
instants, and as the text event ids, annotations and events carry, formatted here once
(`ActiveWindow.of`); everything downstream copies that text verbatim.

How it fails: it does not raise for any template. A template the rules call invalid (bad
cron, unknown time zone, missing or non-positive duration, an unending period, an end past
the year 9999) gives an `Activation` with reason `invalid`, an error code the reconciler
turns into an error event, and a one-line message. Only a naive `now` raises: no zone can
be guessed for it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from scheduler import cron
from scheduler.templates import RUNNING, MalformedTemplate, Template, format_timestamp

Reason = Literal["disabled", "expired", "manual", "scheduled", "outside_window", "invalid"]
ErrorCode = Literal["invalid_cron", "invalid_timezone", "invalid_template"]

LONGEST_PERIOD = timedelta(days=7)
# The Gregorian calendar repeats every 400 years (146097 days, a whole number of weeks): an
# expression that fires at all fires within any such span, so no search goes further back.
_CALENDAR_CYCLE = timedelta(days=146097) + LONGEST_PERIOD + timedelta(days=1)
_FLOOR = datetime(2, 1, 1, tzinfo=UTC)


class ActiveWindow(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """When an active template's window starts and until when it runs: aware UTC instants,
    and the text of each (`format_timestamp`), made once by `of`."""

    start: datetime
    until: datetime
    start_text: str  # what event ids, the window-start annotation and events carry
    until_text: str  # the run-until annotation's and the events' value

    @classmethod
    def of(cls, start: datetime, until: datetime) -> ActiveWindow:
        start, until = start.astimezone(UTC), until.astimezone(UTC)
        return cls(
            start=start,
            until=until,
            start_text=format_timestamp(start),
            until_text=format_timestamp(until),
        )


class Activation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The verdict on one template at one instant; `window` is set exactly when active."""

    template_id: str
    reason: Reason
    window: ActiveWindow | None = None
    error: str | None = None
    error_code: ErrorCode | None = None

    @property
    def active(self) -> bool:
        return self.window is not None


class _Invalid(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: ErrorCode = code


def evaluate(template: Template | MalformedTemplate, now: datetime) -> Activation:
    """The template's activation at `now` (an aware datetime); one that could not be
    decoded is `invalid`."""
    if now.utcoffset() is None:
        raise ValueError("now must be an aware datetime")
    if isinstance(template, MalformedTemplate):
        return malformed(template)
    try:
        return _evaluate(template, now.astimezone(UTC))
    except _Invalid as exc:
        return invalid(template.id, exc.code, str(exc))
    except OverflowError:
        return invalid(template.id, "invalid_template", "the window falls outside years 1-9999")


def invalid(template_id: str, code: ErrorCode, message: str) -> Activation:
    return Activation(template_id=template_id, reason="invalid", error=message, error_code=code)


def malformed(template: MalformedTemplate) -> Activation:
    """The verdict on a template that could not be decoded."""
    return invalid(template.id, "invalid_template", template.error)


def _evaluate(template: Template, now: datetime) -> Activation:
    if not template.enabled:
        return Activation(template_id=template.id, reason="disabled")
    if template.valid_until is not None and now >= template.valid_until:
        return Activation(template_id=template.id, reason="expired")
    reason: Reason = "manual"
    window = _manual_window(template, now)
    if window is None:
        reason = "scheduled"
        window = _scheduled_window(template, now)
    if window is None:
        return Activation(template_id=template.id, reason="outside_window")
    start, end = window
    if template.valid_until is not None:
        end = min(end, template.valid_until)
    # In UTC here, where an overflow is caught: `started_at` may carry an offset that
    # takes it out of the years a datetime can hold.
    return Activation(template_id=template.id, reason=reason, window=ActiveWindow.of(start, end))


def _manual_window(template: Template, now: datetime) -> tuple[datetime, datetime] | None:
    execution = template.execution
    if execution is None or execution.status != RUNNING:
        return None
    if execution.started_at is None:
        raise _Invalid("invalid_template", "the running execution has no started_at")
    end = execution.run_until
    if end is None:
        if template.duration_minutes is None:
            raise _Invalid(
                "invalid_template",
                "the running execution has no run_until and the template no duration_minutes",
            )
        end = _after(execution.started_at, template.duration_minutes)
    return (execution.started_at, end) if now < end else None


def _scheduled_window(template: Template, now: datetime) -> tuple[datetime, datetime] | None:
    if template.cron is None:
        return None
    schedule = _schedule(template.cron)
    zone = _zone(template.zone_name)
    duration = _duration(template.duration_minutes)
    period = _period(schedule, zone, duration, now)
    if period is None:
        return None
    first, latest = period
    if first < now - LONGEST_PERIOD:
        raise _Invalid(
            "invalid_template",
            "the active period began more than 7 days before now (its windows overlap or "
            "touch without a break); use a manual execution for an always-on change",
        )
    return first, _plus(latest, duration)


def _period(
    schedule: cron.CronSchedule, zone: tzinfo, duration: timedelta, now: datetime
) -> tuple[datetime, datetime] | None:
    """The first and the latest fire time of the period containing `now`, or None.

    The walk back stops once it passes the 7-day horizon: how much earlier the period began
    no longer matters then."""
    horizon = now - LONGEST_PERIOD
    # Newest first: the first is the latest fire time <= now, the rest extend its period back.
    times = cron.fire_times_descending(
        schedule, zone, latest=now, earliest=_search_floor(now, duration)
    )
    latest = next(times, None)
    if latest is None or now >= _plus(latest, duration):
        return None
    first = latest
    for earlier in times:
        if first < horizon or _plus(earlier, duration) < first:
            break
        first = earlier
    return first, latest


def _schedule(expression: str) -> cron.CronSchedule:
    try:
        return cron.parse(expression)
    except cron.CronError as exc:
        raise _Invalid("invalid_cron", f"cron {expression!r}: {exc}") from None


# Files a system's zone directory holds beside the IANA zones: this machine's own zone,
# and copies of the zones under other rules. None of them is a zone a template can mean.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
_NOT_ZONE_PREFIXES = ("posix/", "right/")


def _zone(name: str) -> tzinfo:
    if name in _NOT_ZONES or name.startswith(_NOT_ZONE_PREFIXES):
        raise _Invalid("invalid_timezone", f"{name!r} is not an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # ValueError: keys that are not zone names (absolute paths, `..`); OSError: a
        # directory of the zone database such as `America`.
        raise _Invalid("invalid_timezone", f"unknown time zone {name!r}") from None


def _duration(minutes: int | None) -> timedelta:
    if minutes is None:
        raise _Invalid("invalid_template", "cron is set but duration_minutes is null")
    if minutes <= 0:
        raise _Invalid("invalid_template", f"duration_minutes must be positive, got {minutes}")
    try:
        return timedelta(minutes=minutes)
    except OverflowError:
        raise _Invalid("invalid_template", f"duration_minutes {minutes} is too large") from None


def _after(start: datetime, minutes: int) -> datetime:
    try:
        return start + timedelta(minutes=minutes)
    except OverflowError:
        raise _Invalid(
            "invalid_template", f"duration_minutes {minutes} ends after the year 9999"
        ) from None


def _plus(moment: datetime, duration: timedelta) -> datetime:
    try:
        return moment + duration
    except OverflowError:
        raise _Invalid("invalid_template", "the window ends after the year 9999") from None


def _search_floor(now: datetime, duration: timedelta) -> datetime:
    """How far back a fire time can still matter: one that could start a period reaching
    back past the 7-day horizon, and never more than a calendar cycle."""
    try:
        return max(now - min(LONGEST_PERIOD + duration, _CALENDAR_CYCLE), _FLOOR)
    except OverflowError:
        return _FLOOR
