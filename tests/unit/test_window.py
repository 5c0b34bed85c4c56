"""The activation rules, each with instants worked out by hand.

Calendar facts used below (2026): December 2 is a Wednesday. New York springs forward on
March 8 at 07:00Z (02:00 EST -> 03:00 EDT) and falls back on November 1 at 06:00Z (02:00
EDT -> 01:00 EST). Berlin: March 29 at 01:00Z (02:00 -> 03:00) and October 25 at 01:00Z
(03:00 -> 02:00). Santiago (southern hemisphere): September 6 at 04:00Z (00:00 -> 01:00)
and April 5 at 03:00Z (April 5 00:00 -> April 4 23:00); it is at -03:00 in December.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import msgspec
import pytest

from scheduler.templates import MalformedTemplate, Template, format_timestamp
from scheduler.window import Activation, evaluate, malformed


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def template(**fields: Any) -> Template:
    """A template decoded from JSON, as it arrives from the scaling API."""
    document = {"id": "t-1", "enabled": True} | fields
    return msgspec.json.decode(json.dumps(document), type=Template)


def scheduled(
    cron: str, duration: int | None, timezone: str | None = "UTC", **fields: Any
) -> Template:
    return template(cron=cron, duration_minutes=duration, timezone=timezone, **fields)


def running(
    started_at: str | None, run_until: str | None = None, status: str = "running"
) -> dict[str, Any]:
    return {"id": "x-9", "status": status, "started_at": started_at, "run_until": run_until}


def window(activation: Activation) -> tuple[str, str | None, str | None]:
    """(reason, window_start, run_until) with instants as UTC ISO strings, for comparisons."""

    def iso(moment: datetime | None) -> str | None:
        return None if moment is None else moment.isoformat().replace("+00:00", "Z")

    active = activation.window
    if active is None:
        return activation.reason, None, None
    # The text every event and annotation carries is the instant's, formatted once.
    texts = (format_timestamp(active.start), format_timestamp(active.until))
    assert (active.start_text, active.until_text) == texts
    return activation.reason, iso(active.start), iso(active.until)


def assert_inactive(activation: Activation, reason: str) -> None:
    assert activation.reason == reason
    assert activation.active is False
    assert activation.window is None
    assert (activation.error, activation.error_code) == (None, None)


def assert_invalid(activation: Activation, code: str, words: str) -> None:
    assert activation.reason == "invalid"
    assert activation.active is False
    assert activation.window is None
    assert activation.error_code == code
    assert activation.error is not None
    assert words in activation.error
    assert "\n" not in activation.error


# --- rule 1: disabled and expired -----------------------------------------------------------


def test_a_disabled_template_is_inactive_even_inside_its_window() -> None:
    disabled = scheduled("0 8 * * *", 600, enabled=False)

    assert_inactive(evaluate(disabled, at("2026-12-02T12:00:00Z")), "disabled")


def test_disabled_wins_over_expired_and_over_invalid_fields() -> None:
    disabled = scheduled(
        "not a cron",
        None,
        timezone="Nowhere/Else",
        enabled=False,
        valid_until="2026-01-01T00:00:00Z",
    )

    assert_inactive(evaluate(disabled, at("2026-12-02T12:00:00Z")), "disabled")


def test_a_template_expires_at_the_instant_of_valid_until() -> None:
    expiring = scheduled("0 8 * * *", 600, valid_until="2026-12-02T12:00:00Z")

    assert_inactive(evaluate(expiring, at("2026-12-02T12:00:00Z")), "expired")
    assert_inactive(evaluate(expiring, at("2026-12-03T09:00:00Z")), "expired")
    # One second earlier it is active, and run_until (18:00) is capped at valid_until.
    assert window(evaluate(expiring, at("2026-12-02T11:59:59Z"))) == (
        "scheduled",
        "2026-12-02T08:00:00Z",
        "2026-12-02T12:00:00Z",
    )


def test_expiry_wins_over_a_running_manual_execution() -> None:
    expired = template(
        valid_until="2026-12-02T12:00:00Z",
        execution=running("2026-12-02T10:00:00Z"),
        duration_minutes=600,
    )

    assert_inactive(evaluate(expired, at("2026-12-02T12:00:00Z")), "expired")


def test_valid_until_in_another_offset_is_the_same_instant() -> None:
    expiring = scheduled("0 8 * * *", 600, valid_until="2026-12-02T09:00:00-03:00")

    assert_inactive(evaluate(expiring, at("2026-12-02T12:00:00Z")), "expired")


# --- rule 2: manual executions ---------------------------------------------------------------


def test_a_running_execution_is_active_until_its_run_until() -> None:
    manual = template(execution=running("2026-12-02T10:00:00Z", "2026-12-02T14:00:00Z"))

    activation = evaluate(manual, at("2026-12-02T12:00:00Z"))

    assert activation.active is True
    assert window(activation) == ("manual", "2026-12-02T10:00:00Z", "2026-12-02T14:00:00Z")
    assert (activation.error, activation.error_code) == (None, None)


def test_without_run_until_an_execution_ends_at_started_at_plus_duration() -> None:
    manual = template(execution=running("2026-12-02T10:00:00Z"), duration_minutes=90)

    assert window(evaluate(manual, at("2026-12-02T11:29:59Z"))) == (
        "manual",
        "2026-12-02T10:00:00Z",
        "2026-12-02T11:30:00Z",
    )
    assert_inactive(evaluate(manual, at("2026-12-02T11:30:00Z")), "outside_window")


def test_an_execution_with_neither_run_until_nor_duration_is_invalid() -> None:
    manual = template(execution=running("2026-12-02T10:00:00Z"), duration_minutes=None)

    assert_invalid(evaluate(manual, at("2026-12-02T11:00:00Z")), "invalid_template", "run_until")


def test_a_running_execution_without_started_at_is_invalid() -> None:
    manual = template(execution=running(None, "2026-12-02T14:00:00Z"))

    assert_invalid(evaluate(manual, at("2026-12-02T11:00:00Z")), "invalid_template", "started_at")


def test_once_an_execution_ended_the_schedule_decides() -> None:
    manual = scheduled(
        "0 12 * * *", 60, execution=running("2026-12-02T10:00:00Z", "2026-12-02T12:15:00Z")
    )

    assert window(evaluate(manual, at("2026-12-02T12:10:00Z")))[0] == "manual"
    # Ended exactly now: ignored, and the 12:00-13:00 window applies.
    assert window(evaluate(manual, at("2026-12-02T12:15:00Z"))) == (
        "scheduled",
        "2026-12-02T12:00:00Z",
        "2026-12-02T13:00:00Z",
    )
    assert_inactive(evaluate(manual, at("2026-12-02T13:30:00Z")), "outside_window")


def test_an_ended_execution_without_cron_leaves_the_template_outside_its_window() -> None:
    manual = template(execution=running("2026-12-02T10:00:00Z", "2026-12-02T11:00:00Z"))

    assert_inactive(evaluate(manual, at("2026-12-02T11:00:00Z")), "outside_window")


@pytest.mark.parametrize("status", ["finished", "cancelled", "paused"])
def test_only_a_running_execution_counts(status: str) -> None:
    execution = running("2026-12-02T10:00:00Z", "2026-12-02T14:00:00Z", status=status)
    ignored = template(execution=execution)

    assert_inactive(evaluate(ignored, at("2026-12-02T12:00:00Z")), "outside_window")


def test_a_running_execution_wins_over_an_invalid_schedule() -> None:
    execution = running("2026-12-02T10:00:00Z", "2026-12-02T14:00:00Z")
    manual = scheduled("61 * * * *", None, timezone="Nowhere/Else", execution=execution)

    assert window(evaluate(manual, at("2026-12-02T12:00:00Z")))[0] == "manual"
    # After it ended, the schedule is judged, and found invalid.
    assert_invalid(evaluate(manual, at("2026-12-02T14:00:00Z")), "invalid_cron", "minute")


def test_a_manual_run_until_is_capped_at_valid_until() -> None:
    manual = template(
        valid_until="2026-12-02T13:00:00Z",
        execution=running("2026-12-02T10:00:00Z", "2026-12-02T14:00:00Z"),
    )

    assert window(evaluate(manual, at("2026-12-02T12:00:00Z"))) == (
        "manual",
        "2026-12-02T10:00:00Z",
        "2026-12-02T13:00:00Z",
    )


def test_an_execution_is_active_from_now_until_its_end_even_if_it_starts_later() -> None:
    # The rule reads "while now is before the end"; started_at is only the window's start.
    manual = template(execution=running("2026-12-02T15:00:00Z", "2026-12-02T16:00:00Z"))

    assert window(evaluate(manual, at("2026-12-02T12:00:00Z"))) == (
        "manual",
        "2026-12-02T15:00:00Z",
        "2026-12-02T16:00:00Z",
    )


def test_a_duration_past_the_year_9999_is_invalid_not_an_exception() -> None:
    manual = template(execution=running("2026-12-02T10:00:00Z"), duration_minutes=10**13)

    assert_invalid(evaluate(manual, at("2026-12-02T11:00:00Z")), "invalid_template", "9999")


# --- rule 3: the schedule --------------------------------------------------------------------


def test_a_template_without_cron_is_outside_its_window_whatever_else_it_says() -> None:
    no_cron = template(cron=None, duration_minutes=None, timezone="Nowhere/Else")

    assert_inactive(evaluate(no_cron, at("2026-12-02T12:00:00Z")), "outside_window")


@pytest.mark.parametrize(
    ("duration", "words"),
    [(None, "duration_minutes is null"), (0, "positive, got 0"), (-30, "positive, got -30")],
)
def test_a_cron_needs_a_positive_duration(duration: int | None, words: str) -> None:
    activation = evaluate(scheduled("0 8 * * *", duration), at("2026-12-02T09:00:00Z"))

    assert_invalid(activation, "invalid_template", words)


def test_an_invalid_cron_is_reported_with_the_field_at_fault() -> None:
    activation = evaluate(scheduled("0 8 * * 1-8", 600), at("2026-12-02T09:00:00Z"))

    assert_invalid(activation, "invalid_cron", "day-of-week: 8 is out of range 0-7")
    assert "'0 8 * * 1-8'" in (activation.error or "")


@pytest.mark.parametrize(
    "zone",
    [
        *("Mars/Olympus_Mons", "America", "", "../etc/passwd", "/UTC"),
        # In a system's zone directory, but not zones a template can mean.
        *("localtime", "posixrules", "Factory", "right/Europe/Berlin", "posix/Europe/Berlin"),
    ],
)
def test_an_unknown_time_zone_is_invalid(zone: str) -> None:
    activation = evaluate(scheduled("0 8 * * *", 600, timezone=zone), at("2026-12-02T09:00:00Z"))

    assert_invalid(activation, "invalid_timezone", repr(zone))


def test_the_cron_is_checked_before_the_time_zone_and_the_duration() -> None:
    broken = scheduled("0 8 * *", None, timezone="Nowhere/Else")

    assert evaluate(broken, at("2026-12-02T09:00:00Z")).error_code == "invalid_cron"
    broken = scheduled("0 8 * * *", None, timezone="Nowhere/Else")
    assert evaluate(broken, at("2026-12-02T09:00:00Z")).error_code == "invalid_timezone"


@pytest.mark.parametrize("timezone", [None, "absent"])
def test_the_time_zone_defaults_to_utc(timezone: str | None) -> None:
    fields: dict[str, Any] = {"cron": "0 8 * * *", "duration_minutes": 60}
    if timezone is None:
        fields["timezone"] = None

    assert window(evaluate(template(**fields), at("2026-12-02T08:30:00Z"))) == (
        "scheduled",
        "2026-12-02T08:00:00Z",
        "2026-12-02T09:00:00Z",
    )


def test_the_contract_example_is_active_from_eight_to_six_santiago_time_on_weekdays() -> None:
    example = scheduled("0 8 * * 1-5", 600, timezone="America/Santiago")

    assert_inactive(evaluate(example, at("2026-12-02T10:59:59Z")), "outside_window")
    for now in ("2026-12-02T11:00:00Z", "2026-12-02T20:59:59Z"):
        assert window(evaluate(example, at(now))) == (
            "scheduled",
            "2026-12-02T11:00:00Z",
            "2026-12-02T21:00:00Z",
        )
    assert_inactive(evaluate(example, at("2026-12-02T21:00:00Z")), "outside_window")
    assert_inactive(evaluate(example, at("2026-12-05T12:00:00Z")), "outside_window")  # Sat


def test_an_instant_with_an_offset_is_the_same_instant() -> None:
    example = scheduled("0 8 * * 1-5", 600, timezone="America/Santiago")

    assert window(evaluate(example, at("2026-12-02T09:00:00-03:00"))) == (
        "scheduled",
        "2026-12-02T11:00:00Z",
        "2026-12-02T21:00:00Z",
    )


# --- durations and clock changes ------------------------------------------------------------


def test_durations_are_elapsed_time_across_spring_forward() -> None:
    # Midnight EST is 05:00Z; four hours later is 09:00Z, which the wall clock calls 05:00.
    night = scheduled("0 0 8 3 *", 240, timezone="America/New_York")

    assert window(evaluate(night, at("2026-03-08T08:59:00Z"))) == (
        "scheduled",
        "2026-03-08T05:00:00Z",
        "2026-03-08T09:00:00Z",
    )
    assert_inactive(evaluate(night, at("2026-03-08T09:00:00Z")), "outside_window")


def test_durations_are_elapsed_time_across_fall_back() -> None:
    # Midnight CEST is 22:00Z; three hours later is 01:00Z, which the wall clock calls 02:00.
    night = scheduled("0 0 25 10 *", 180, timezone="Europe/Berlin")

    assert window(evaluate(night, at("2026-10-25T00:59:00Z"))) == (
        "scheduled",
        "2026-10-24T22:00:00Z",
        "2026-10-25T01:00:00Z",
    )
    assert_inactive(evaluate(night, at("2026-10-25T01:00:00Z")), "outside_window")


@pytest.mark.parametrize(
    ("zone", "cron", "now", "start", "end"),
    [
        # 02:30 does not exist on March 8: the window opens at 03:00 EDT.
        ("America/New_York", "30 2 * * *", "2026-03-08T07:30:00Z", "07:00", "08:00"),
        ("Europe/Berlin", "30 2 * * *", "2026-03-29T01:30:00Z", "01:00", "02:00"),
        # 00:30 does not exist on September 6 in Santiago: it opens at 01:00 -03.
        ("America/Santiago", "30 0 * * *", "2026-09-06T04:30:00Z", "04:00", "05:00"),
    ],
)
def test_a_window_in_the_spring_forward_gap_opens_when_the_gap_ends(
    zone: str, cron: str, now: str, start: str, end: str
) -> None:
    day = now[:11]
    activation = evaluate(scheduled(cron, 60, timezone=zone), at(now))

    assert window(activation) == ("scheduled", f"{day}{start}:00Z", f"{day}{end}:00Z")


@pytest.mark.parametrize(
    ("zone", "cron", "first", "start", "second"),
    [
        # 01:30 happens at 05:30Z (EDT) and again at 06:30Z (EST).
        (
            "America/New_York",
            "30 1 * * *",
            "2026-11-01T05:45:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:45:00Z",
        ),
        # 02:30 happens at 00:30Z (CEST) and again at 01:30Z (CET).
        (
            "Europe/Berlin",
            "30 2 * * *",
            "2026-10-25T00:45:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T01:45:00Z",
        ),
        # 23:30 on April 4 happens at 02:30Z (-03) and again at 03:30Z (-04).
        (
            "America/Santiago",
            "30 23 * * *",
            "2026-04-05T02:45:00Z",
            "2026-04-05T02:30:00Z",
            "2026-04-05T03:45:00Z",
        ),
    ],
)
def test_a_window_in_the_fall_back_fold_opens_once_at_the_first_occurrence(
    zone: str, cron: str, first: str, start: str, second: str
) -> None:
    night = scheduled(cron, 30, timezone=zone)

    assert window(evaluate(night, at(first)))[:2] == ("scheduled", start)
    assert_inactive(evaluate(night, at(second)), "outside_window")


# --- periods -----------------------------------------------------------------------------------


def test_overlapping_windows_form_one_period_from_its_first_fire_time() -> None:
    # 08:00-09:30, 09:00-10:30, 10:00-11:30: one period 08:00-11:30.
    hourly = scheduled("0 8-10 * * *", 90)

    assert window(evaluate(hourly, at("2026-12-02T10:15:00Z"))) == (
        "scheduled",
        "2026-12-02T08:00:00Z",
        "2026-12-02T11:30:00Z",
    )
    assert window(evaluate(hourly, at("2026-12-02T11:29:59Z")))[1] == "2026-12-02T08:00:00Z"
    assert_inactive(evaluate(hourly, at("2026-12-02T11:30:00Z")), "outside_window")


def test_run_until_belongs_to_the_latest_fire_time_not_the_end_of_the_period() -> None:
    hourly = scheduled("0 8-10 * * *", 90)

    assert window(evaluate(hourly, at("2026-12-02T08:30:00Z"))) == (
        "scheduled",
        "2026-12-02T08:00:00Z",
        "2026-12-02T09:30:00Z",
    )


def test_touching_windows_form_one_period() -> None:
    # 08:00-10:00 and 10:00-12:00 touch at 10:00.
    touching = scheduled("0 8,10 * * *", 120)

    for now in ("2026-12-02T10:00:00Z", "2026-12-02T11:00:00Z"):
        assert window(evaluate(touching, at(now))) == (
            "scheduled",
            "2026-12-02T08:00:00Z",
            "2026-12-02T12:00:00Z",
        )


def test_windows_a_minute_apart_are_separate_periods() -> None:
    # 08:00-09:59 and 10:00-11:59: a one-minute gap.
    apart = scheduled("0 8,10 * * *", 119)

    assert window(evaluate(apart, at("2026-12-02T11:00:00Z")))[1] == "2026-12-02T10:00:00Z"
    assert window(evaluate(apart, at("2026-12-02T09:58:59Z")))[1:] == (
        "2026-12-02T08:00:00Z",
        "2026-12-02T09:59:00Z",
    )
    assert_inactive(evaluate(apart, at("2026-12-02T09:59:00Z")), "outside_window")


def test_a_period_runs_across_midnight() -> None:
    # 22:00-00:00 touches 00:00-02:00 of the next day.
    late = scheduled("0 0,22 * * *", 120)

    assert window(evaluate(late, at("2026-12-03T01:00:00Z"))) == (
        "scheduled",
        "2026-12-02T22:00:00Z",
        "2026-12-03T02:00:00Z",
    )


def test_a_scheduled_run_until_is_capped_at_valid_until() -> None:
    capped = scheduled("0 8 * * *", 600, valid_until="2026-12-02T15:30:00Z")

    assert window(evaluate(capped, at("2026-12-02T09:00:00Z")))[2] == "2026-12-02T15:30:00Z"
    uncapped = scheduled("0 8 * * *", 600, valid_until="2026-12-31T00:00:00Z")
    assert window(evaluate(uncapped, at("2026-12-02T09:00:00Z")))[2] == "2026-12-02T18:00:00Z"


# --- the 7-day rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(("cron", "duration"), [("* * * * *", 2), ("0 0 * * *", 1440)])
def test_a_period_that_never_breaks_is_invalid(cron: str, duration: int) -> None:
    always = scheduled(cron, duration)

    assert_invalid(evaluate(always, at("2026-12-02T12:00:00Z")), "invalid_template", "7 days")


def test_a_period_may_have_begun_exactly_seven_days_ago_but_not_a_second_more() -> None:
    # Daily windows of 24 hours from December 1 to 8: one period, December 1 to 9.
    week = scheduled("0 0 1-8 12 *", 1440)

    assert window(evaluate(week, at("2026-12-08T00:00:00Z"))) == (
        "scheduled",
        "2026-12-01T00:00:00Z",
        "2026-12-09T00:00:00Z",
    )
    assert_invalid(evaluate(week, at("2026-12-08T00:00:01Z")), "invalid_template", "7 days")


def test_a_single_window_longer_than_seven_days_turns_invalid_after_seven_days() -> None:
    # One ten-day window from December 1: the period began more than 7 days before now.
    long = scheduled("0 0 1 12 *", 14400)

    assert window(evaluate(long, at("2026-12-07T23:59:00Z"))) == (
        "scheduled",
        "2026-12-01T00:00:00Z",
        "2026-12-11T00:00:00Z",
    )
    assert_invalid(evaluate(long, at("2026-12-08T00:01:00Z")), "invalid_template", "7 days")
    assert_inactive(evaluate(long, at("2026-12-11T00:00:00Z")), "outside_window")


def test_daily_windows_with_a_break_are_never_too_long() -> None:
    # 23-hour windows leave an hour's break every day.
    daily = scheduled("0 0 * * *", 1380)

    assert window(evaluate(daily, at("2026-12-02T12:00:00Z"))) == (
        "scheduled",
        "2026-12-02T00:00:00Z",
        "2026-12-02T23:00:00Z",
    )


def test_an_expression_that_never_fires_is_outside_its_window_even_with_a_huge_duration() -> None:
    never = scheduled("0 0 30 2 *", 10**12)

    assert_inactive(evaluate(never, at("2026-12-02T12:00:00Z")), "outside_window")


# --- the result ------------------------------------------------------------------------------


def test_window_instants_are_aware_utc_datetimes() -> None:
    activation = evaluate(
        scheduled("0 8 * * 1-5", 600, timezone="America/Santiago"), at("2026-12-02T12:00:00Z")
    )

    active = activation.window
    assert active is not None
    for moment in (active.start, active.until):
        assert moment.utcoffset() is not None
        assert moment.utcoffset().total_seconds() == 0
    assert activation.template_id == "t-1"


def test_a_malformed_template_is_invalid_with_its_decoding_error() -> None:
    activation = malformed(MalformedTemplate(id="t-9", error="enabled: Expected `bool`"))

    assert activation.template_id == "t-9"
    assert_invalid(activation, "invalid_template", "enabled")


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        evaluate(scheduled("0 8 * * *", 60), datetime(2026, 12, 2, 12))


# --- tables: Sydney's clock changes, day fields and names, calendar crossings ----------------
# Calendar facts (worked out by hand): Australia/Sydney is at +10:00 (AEST) in winter and
# +11:00 (AEDT) in summer. 2026-04-01 is a Wednesday, so daylight saving ends on Sunday April 5:
# at 03:00 AEDT (2026-04-04T16:00Z) the clock goes back to 02:00 AEST, and 02:00-02:59 happen
# twice (first at 15:00Z-15:59Z, again at 16:00Z-16:59Z). 2026-10-01 is a Thursday, so it
# starts on Sunday October 4: at 02:00 AEST (2026-10-03T16:00Z) the clock jumps to 03:00 AEDT,
# and 02:00-02:59 do not exist. December 2026: the 6th is a Sunday, the 7th a Monday. 2028 is
# a leap year; 2028-02-29 is a Tuesday.

Expected = tuple[str, str | None, str | None]  # (reason, window_start, run_until) in UTC


def outside() -> Expected:
    return ("outside_window", None, None)


@pytest.mark.parametrize(
    ("cron", "duration", "now", "expected"),
    [
        # Spring forward (October 4). 02:30 does not exist: it fires when the gap ends,
        # 03:00 AEDT = 16:00Z, and the hour-long window runs to 17:00Z.
        pytest.param(
            "30 2 * * *",
            60,
            "2026-10-03T16:30:00Z",
            ("scheduled", "2026-10-03T16:00:00Z", "2026-10-03T17:00:00Z"),
            id="gap-fires-at-gap-end",
        ),
        # 02:00 and 02:30 are both in the gap: one fire time at 16:00Z, so one 30-minute
        # window that ends at 16:30Z (not two windows, not a 60-minute period).
        pytest.param(
            "0,30 2 * * *",
            30,
            "2026-10-03T16:20:00Z",
            ("scheduled", "2026-10-03T16:00:00Z", "2026-10-03T16:30:00Z"),
            id="two-gap-times-fire-once",
        ),
        pytest.param("0,30 2 * * *", 30, "2026-10-03T16:30:00Z", outside(), id="gap-window-ends"),
        # The days around it keep their own offsets: 02:30 AEST on October 3 is 16:30Z of
        # October 2; 02:30 AEDT on October 5 is 15:30Z of October 4.
        pytest.param(
            "30 2 * * *",
            60,
            "2026-10-02T17:00:00Z",
            ("scheduled", "2026-10-02T16:30:00Z", "2026-10-02T17:30:00Z"),
            id="day-before-gap-aest",
        ),
        pytest.param(
            "30 2 * * *",
            60,
            "2026-10-04T15:45:00Z",
            ("scheduled", "2026-10-04T15:30:00Z", "2026-10-04T16:30:00Z"),
            id="day-after-gap-aedt",
        ),
        # Elapsed time across the gap: midnight AEST on October 4 is 14:00Z; 4 hours later
        # is 18:00Z, which the wall clock calls 05:00 AEDT, not 04:00.
        pytest.param(
            "0 0 4 10 *",
            240,
            "2026-10-03T17:59:00Z",
            ("scheduled", "2026-10-03T14:00:00Z", "2026-10-03T18:00:00Z"),
            id="elapsed-across-gap",
        ),
        pytest.param("0 0 4 10 *", 240, "2026-10-03T18:00:00Z", outside(), id="gap-window-over"),
        # Fall back (April 5). 02:30 happens at 15:30Z (AEDT) and again at 16:30Z (AEST):
        # it fires once, at the first, and the second is no new window.
        pytest.param(
            "30 2 * * *",
            30,
            "2026-04-04T15:45:00Z",
            ("scheduled", "2026-04-04T15:30:00Z", "2026-04-04T16:00:00Z"),
            id="fold-fires-at-first-occurrence",
        ),
        pytest.param("30 2 * * *", 30, "2026-04-04T16:45:00Z", outside(), id="fold-not-twice"),
        # 02:00 AEDT is 15:00Z; an hour later (16:00Z) the wall clock reads 02:00 again, and
        # the window is over although "02:00-03:00" on the wall is not.
        pytest.param("0 2 * * *", 60, "2026-04-04T16:30:00Z", outside(), id="fold-second-hour"),
        # 03:00 happens once, after the fold: 03:00 AEST = 17:00Z.
        pytest.param(
            "0 3 * * *",
            60,
            "2026-04-04T17:30:00Z",
            ("scheduled", "2026-04-04T17:00:00Z", "2026-04-04T18:00:00Z"),
            id="after-fold-aest",
        ),
        # Elapsed time across the fold: midnight AEDT on April 5 is 13:00Z; 4 hours later is
        # 17:00Z, which the wall clock calls 03:00 AEST, not 04:00.
        pytest.param(
            "0 0 5 4 *",
            240,
            "2026-04-04T16:59:00Z",
            ("scheduled", "2026-04-04T13:00:00Z", "2026-04-04T17:00:00Z"),
            id="elapsed-across-fold",
        ),
        pytest.param("0 0 5 4 *", 240, "2026-04-04T17:00:00Z", outside(), id="fold-window-over"),
    ],
)
def test_sydney_spring_forward_and_fall_back(
    cron: str, duration: int, now: str, expected: Expected
) -> None:
    activation = evaluate(scheduled(cron, duration, timezone="Australia/Sydney"), at(now))

    assert window(activation) == expected
    assert activation.active is (expected[0] == "scheduled")


@pytest.mark.parametrize(
    ("cron", "now", "active"),
    [
        # Day of week: 0 and 7 are both Sunday, and names are case-insensitive.
        pytest.param("0 8 * * 0", "2026-12-06T08:30:00Z", True, id="0-is-sunday"),
        pytest.param("0 8 * * 7", "2026-12-06T08:30:00Z", True, id="7-is-sunday"),
        pytest.param("0 8 * * sun", "2026-12-06T08:30:00Z", True, id="sun-name"),
        pytest.param("0 8 * * 7", "2026-12-07T08:30:00Z", False, id="7-is-not-monday"),
        pytest.param("0 8 * * 5-7", "2026-12-06T08:30:00Z", True, id="fri-to-sun-by-7"),
        pytest.param("0 8 * * 5-7", "2026-12-03T08:30:00Z", False, id="fri-to-sun-not-thu"),
        pytest.param("0 8 * * Mon-FRI", "2026-12-02T08:30:00Z", True, id="weekday-names"),
        pytest.param("0 8 * * MON-FRI", "2026-12-05T08:30:00Z", False, id="saturday-excluded"),
        # Both day fields restricted: either matching is enough (the 1st, or a Monday).
        pytest.param("0 8 1 * 1", "2026-12-01T08:30:00Z", True, id="or-day-of-month"),
        pytest.param("0 8 1 * 1", "2026-12-07T08:30:00Z", True, id="or-day-of-week"),
        pytest.param("0 8 1 * 1", "2026-12-02T08:30:00Z", False, id="or-neither"),
        # A day field starting with `*` is unrestricted: both must match (odd days that are
        # Mondays: the 7th is, the 14th is even, the 3rd is a Thursday).
        pytest.param("0 8 */2 * 1", "2026-12-07T08:30:00Z", True, id="star-step-and"),
        pytest.param("0 8 */2 * 1", "2026-12-14T08:30:00Z", False, id="star-step-even"),
        pytest.param("0 8 */2 * 1", "2026-12-03T08:30:00Z", False, id="star-step-thursday"),
        # Month names.
        pytest.param("0 8 * dec *", "2026-12-02T08:30:00Z", True, id="month-name"),
        pytest.param("0 8 * JAN-NOV *", "2026-12-02T08:30:00Z", False, id="month-range-names"),
    ],
)
def test_day_fields_and_names_decide_the_day(cron: str, now: str, active: bool) -> None:
    activation = evaluate(scheduled(cron, 60), at(now))

    if active:
        day = now[:11]
        assert window(activation) == ("scheduled", f"{day}08:00:00Z", f"{day}09:00:00Z")
    else:
        assert_inactive(activation, "outside_window")


@pytest.mark.parametrize(
    ("cron", "duration", "zone", "now", "expected"),
    [
        # Midnight: 22:00 + 4 h ends at 02:00 the next day.
        pytest.param(
            "0 22 * * *",
            240,
            "UTC",
            "2026-12-03T01:00:00Z",
            ("scheduled", "2026-12-02T22:00:00Z", "2026-12-03T02:00:00Z"),
            id="midnight",
        ),
        # Local midnight in Santiago (-03:00 in December): 22:00 on December 2 is 01:00Z on
        # December 3, so the window starts on the next UTC day and ends at 05:00Z.
        pytest.param(
            "0 22 * * *",
            240,
            "America/Santiago",
            "2026-12-03T04:00:00Z",
            ("scheduled", "2026-12-03T01:00:00Z", "2026-12-03T05:00:00Z"),
            id="local-midnight-santiago",
        ),
        # Month end: January 31 22:00 + 4 h is February 1 02:00.
        pytest.param(
            "0 22 31 1 *",
            240,
            "UTC",
            "2026-02-01T01:00:00Z",
            ("scheduled", "2026-01-31T22:00:00Z", "2026-02-01T02:00:00Z"),
            id="month-end",
        ),
        pytest.param("0 22 31 1 *", 240, "UTC", "2026-02-01T02:00:00Z", outside(), id="month-over"),
        # A day-31 cron in a 30-day month never fires that month: November 30 22:00 is no
        # fire time, so December 1 01:00 is outside (October 31's window is long over).
        pytest.param("0 22 31 * *", 240, "UTC", "2026-12-01T01:00:00Z", outside(), id="no-31st"),
        # Year end: December 31 22:00 + 4 h is January 1 02:00 of the next year.
        pytest.param(
            "0 22 31 12 *",
            240,
            "UTC",
            "2027-01-01T01:00:00Z",
            ("scheduled", "2026-12-31T22:00:00Z", "2027-01-01T02:00:00Z"),
            id="year-end",
        ),
        # New Year in Sydney (+11:00 in summer) is 13:00Z on December 31: the window of
        # "January 1" is active while UTC is still in the old year.
        pytest.param(
            "0 0 1 1 *",
            120,
            "Australia/Sydney",
            "2026-12-31T14:00:00Z",
            ("scheduled", "2026-12-31T13:00:00Z", "2026-12-31T15:00:00Z"),
            id="year-end-sydney-ahead-of-utc",
        ),
        # Leap day: February 29 2028 20:00 + 6 h is March 1 02:00.
        pytest.param(
            "0 20 29 2 *",
            360,
            "UTC",
            "2028-03-01T01:00:00Z",
            ("scheduled", "2028-02-29T20:00:00Z", "2028-03-01T02:00:00Z"),
            id="leap-day",
        ),
        # No February 29 in 2027 (the last one, 2024, is long over): outside.
        pytest.param("0 20 29 2 *", 360, "UTC", "2027-03-01T01:00:00Z", outside(), id="no-leap"),
        # February 28 22:00 + 4 h ends on February 29 in a leap year...
        pytest.param(
            "0 22 28 2 *",
            240,
            "UTC",
            "2028-02-29T01:00:00Z",
            ("scheduled", "2028-02-28T22:00:00Z", "2028-02-29T02:00:00Z"),
            id="feb-28-leap-year",
        ),
        # ...and on March 1 in a common year.
        pytest.param(
            "0 22 28 2 *",
            240,
            "UTC",
            "2027-03-01T01:00:00Z",
            ("scheduled", "2027-02-28T22:00:00Z", "2027-03-01T02:00:00Z"),
            id="feb-28-common-year",
        ),
        # The leap day's weekday: 2028-02-29 is a Tuesday.
        pytest.param(
            "0 8 * 2 TUE",
            60,
            "UTC",
            "2028-02-29T08:30:00Z",
            ("scheduled", "2028-02-29T08:00:00Z", "2028-02-29T09:00:00Z"),
            id="leap-day-is-tuesday",
        ),
        # Overlapping windows across a month end: 22:00 and 23:00 on January 31, 3 hours each,
        # form one period from 22:00; run_until is the latest fire time's end, 02:00.
        pytest.param(
            "0 22,23 31 1 *",
            180,
            "UTC",
            "2026-02-01T00:30:00Z",
            ("scheduled", "2026-01-31T22:00:00Z", "2026-02-01T02:00:00Z"),
            id="overlap-across-month-end",
        ),
    ],
)
def test_windows_crossing_midnight_month_and_year_ends_and_leap_days(
    cron: str, duration: int, zone: str, now: str, expected: Expected
) -> None:
    activation = evaluate(scheduled(cron, duration, timezone=zone), at(now))

    assert window(activation) == expected


@pytest.mark.parametrize(
    ("template_fields", "now", "expected"),
    [
        # valid_until cuts a window that crosses a month end at midnight: run_until is
        # February 1 00:00, not 02:00.
        pytest.param(
            {"cron": "0 22 31 1 *", "duration_minutes": 240},
            "2026-01-31T23:00:00Z",
            ("scheduled", "2026-01-31T22:00:00Z", "2026-02-01T00:00:00Z"),
            id="scheduled-capped-at-month-end",
        ),
        # A manual run across the year end, capped the same way.
        pytest.param(
            {"execution": running("2026-12-31T20:00:00Z", "2027-01-01T06:00:00Z")},
            "2026-12-31T23:00:00Z",
            ("manual", "2026-12-31T20:00:00Z", "2027-01-01T00:00:00Z"),
            id="manual-capped-at-year-end",
        ),
        # At valid_until itself the template has expired, mid-window.
        pytest.param(
            {"cron": "0 22 31 1 *", "duration_minutes": 240},
            "2026-02-01T00:00:00Z",
            ("expired", None, None),
            id="expired-at-the-cap",
        ),
    ],
)
def test_valid_until_caps_windows_that_cross_calendar_boundaries(
    template_fields: dict[str, Any], now: str, expected: Expected
) -> None:
    field = "2027-01-01T00:00:00Z" if "execution" in template_fields else "2026-02-01T00:00:00Z"
    capped = template(valid_until=field, timezone="UTC", **template_fields)

    assert window(evaluate(capped, at(now))) == expected


@pytest.mark.parametrize(
    ("execution", "duration", "now", "expected"),
    [
        # Running across a Sydney clock change: manual windows are instants, no zone applies.
        pytest.param(
            running("2026-10-03T15:00:00Z", "2026-10-03T17:00:00Z"),
            None,
            "2026-10-03T16:30:00Z",
            ("manual", "2026-10-03T15:00:00Z", "2026-10-03T17:00:00Z"),
            id="running-across-dst",
        ),
        # Without run_until: started_at + duration, across a leap day (Feb 28 23:00 + 2 h).
        pytest.param(
            running("2028-02-28T23:00:00Z"),
            120,
            "2028-02-29T00:30:00Z",
            ("manual", "2028-02-28T23:00:00Z", "2028-02-29T01:00:00Z"),
            id="running-duration-leap-day",
        ),
        # Ended (run_until == now): ignored, and with no cron the template is outside.
        pytest.param(
            running("2026-12-31T22:00:00Z", "2027-01-01T00:00:00Z"),
            None,
            "2027-01-01T00:00:00Z",
            ("outside_window", None, None),
            id="ended-at-year-end",
        ),
        # A cancelled execution is ignored even inside its times.
        pytest.param(
            running("2026-12-31T22:00:00Z", "2027-01-01T02:00:00Z", status="cancelled"),
            None,
            "2027-01-01T00:00:00Z",
            ("outside_window", None, None),
            id="cancelled",
        ),
        # Invalid: running with neither run_until nor duration_minutes.
        pytest.param(
            running("2026-12-31T22:00:00Z"),
            None,
            "2027-01-01T00:00:00Z",
            ("invalid", None, None),
            id="invalid-no-end",
        ),
    ],
)
def test_manual_runs_running_ended_and_invalid(
    execution: dict[str, Any], duration: int | None, now: str, expected: Expected
) -> None:
    manual = template(execution=execution, duration_minutes=duration)

    activation = evaluate(manual, at(now))

    assert window(activation) == expected
    if expected[0] == "invalid":
        assert activation.error_code == "invalid_template"
