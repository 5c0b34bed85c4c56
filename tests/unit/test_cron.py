"""The cron dialect: every feature, every invalid form, Vixie's day rule, and fire times in
time zones with daylight saving changes, cross-checked against a minute-by-minute reference.
"""

from __future__ import annotations

import calendar
import random
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduler.cron import CronError, CronSchedule, fire_times_descending, local_instant, parse

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
SANTIAGO = ZoneInfo("America/Santiago")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(expression: str, zone: ZoneInfo, earliest: str, latest: str) -> list[datetime]:
    """Fire instants in [earliest, latest] (UTC), oldest first."""
    found = list(
        fire_times_descending(parse(expression), zone, latest=utc(latest), earliest=utc(earliest))
    )
    assert found == sorted(set(found), reverse=True)  # latest first, each once
    return found[::-1]


# --- the dialect ---------------------------------------------------------------------------


def test_numbers_stars_ranges_lists_and_steps_expand_per_field() -> None:
    schedule = parse("5,10-12 */6 1-31/10 * 1-5/2")

    assert schedule.minutes == (5, 10, 11, 12)
    assert schedule.hours == (0, 6, 12, 18)
    assert schedule.days == {1, 11, 21, 31}
    assert schedule.months == set(range(1, 13))
    assert schedule.weekdays == {1, 3, 5}


def test_a_step_over_a_star_starts_at_the_field_minimum() -> None:
    assert parse("*/15 * * * *").minutes == (0, 15, 30, 45)
    assert parse("* * */10 * *").days == {1, 11, 21, 31}
    assert parse("* * * */5 *").months == {1, 6, 11}


def test_a_step_larger_than_the_range_keeps_only_the_first_value() -> None:
    assert parse("*/90 * * * *").minutes == (0,)


def test_month_and_day_names_are_case_insensitive_and_work_in_ranges() -> None:
    schedule = parse("0 0 * jan,Mar-MAY,dec mon-Fri")

    assert schedule.months == {1, 3, 4, 5, 12}
    assert schedule.weekdays == {1, 2, 3, 4, 5}
    assert parse("0 0 * * SUN,sat").weekdays == {0, 6}


def test_day_of_week_0_and_7_are_both_sunday() -> None:
    assert parse("0 0 * * 0").weekdays == {0}
    assert parse("0 0 * * 7").weekdays == {0}
    assert parse("0 0 * * 5-7").weekdays == {5, 6, 0}
    assert parse("0 0 * * */7").weekdays == {0}
    assert parse("0 0 * * 1-7").weekdays == {0, 1, 2, 3, 4, 5, 6}


def test_leading_zeros_do_not_count_towards_the_digit_limit() -> None:
    assert parse("0000000000005 * * * *").minutes == (5,)


def test_fields_may_be_separated_by_any_whitespace() -> None:
    assert parse("  0\t8 * *   * ").hours == (8,)


@pytest.mark.parametrize(
    ("expression", "field", "words"),
    [
        ("", None, "the expression is empty"),
        ("   ", None, "the expression is empty"),
        ("0 8 * * MON-FRI extra", None, "expected 5 fields"),
        ("* * * *", None, "got 4"),
        ("* * * * * *", None, "got 6"),
        ("@daily", None, "@-macros"),
        ("60 * * * *", "minute", "60 is out of range 0-59"),
        ("* 24 * * *", "hour", "24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month", "0 is out of range 1-31"),
        ("* * 32 * *", "day-of-month", "32 is out of range 1-31"),
        ("* * * 0 *", "month", "0 is out of range 1-12"),
        ("* * * 13 *", "month", "13 is out of range 1-12"),
        ("* * * * 8", "day-of-week", "8 is out of range 0-7"),
        ("0,60 * * * *", "minute", "60 is out of range 0-59"),
        ("1-60 * * * *", "minute", "in '1-60'"),
        ("*/0 * * * *", "minute", "bad step '0'"),
        ("*/x * * * *", "minute", "bad step 'x'"),
        ("*/ * * * *", "minute", "bad step ''"),
        ("*/-2 * * * *", "minute", "bad step '-2'"),
        ("1-5/2/3 * * * *", "minute", "bad step '2/3'"),
        ("5/10 * * * *", "minute", "a step needs `*` or a range"),
        ("1,,2 * * * *", "minute", "empty item"),
        ("1, * * * *", "minute", "empty item"),
        (",1 * * * *", "minute", "empty item"),
        ("5-3 * * * *", "minute", "runs backwards"),
        ("* * * * FRI-MON", "day-of-week", "runs backwards"),
        ("-1 * * * *", "minute", "missing number"),
        ("1- * * * *", "minute", "missing number"),
        ("1-2-3 * * * *", "minute", "'2-3' is not a number"),
        ("*-5 * * * *", "minute", "'*' is not a number"),
        ("a * * * *", "minute", "'a' is not a number"),
        ("1.5 * * * *", "minute", "'1.5' is not a number"),
        ("\u0661 * * * *", "minute", "is not a number"),  # an Arabic-Indic digit one
        ("* * * FOO *", "month", "'FOO' is not a number or month name"),
        ("* * * MON *", "month", "'MON' is not a number or month name"),
        ("* * * * JAN", "day-of-week", "'JAN' is not a number or day name"),
        ("* * * * MONDAY", "day-of-week", "'MONDAY' is not a number or day name"),
        ("* * MON * *", "day-of-month", "'MON' is not a number"),
        # Past 4,300 digits `int` raises a plain ValueError; far fewer are out of range.
        ("1" * 5000 + " * * * *", "minute", "111111111... is out of range"),
        ("*/" + "2" * 5000 + " * * * *", "minute", "222222222... is out of range"),
    ],
)
def test_expressions_outside_the_dialect_name_the_field_and_the_problem(
    expression: str, field: str | None, words: str
) -> None:
    with pytest.raises(CronError) as caught:
        parse(expression)

    assert caught.value.field == field
    message = str(caught.value)
    assert words in message
    assert "\n" not in message
    if field:
        assert message.startswith(f"{field}: ")


# --- which days match ----------------------------------------------------------------------
# December 2026: the 1st is a Tuesday, the 7th a Monday, the 6th a Sunday.


def matching_days(schedule: CronSchedule, month: int = 12) -> list[int]:
    last = calendar.monthrange(2026, month)[1]
    return [day for day in range(1, last + 1) if schedule.matches_day(date(2026, month, day))]


def test_when_both_day_fields_are_restricted_either_one_matching_is_enough() -> None:
    # The 1st and 15th, and every Monday (7, 14, 21, 28).
    assert matching_days(parse("0 0 1,15 * 1")) == [1, 7, 14, 15, 21, 28]


def test_a_restricted_range_covering_every_day_still_counts_as_restricted() -> None:
    # `1-31` does not start with `*`: Vixie ORs it with Mondays, so every day matches.
    assert matching_days(parse("0 0 1-31 * 1")) == list(range(1, 32))


def test_a_day_field_starting_with_a_star_is_unrestricted_so_both_must_match() -> None:
    # `*/2` (odd days) counts as unrestricted: odd days that are also Mondays.
    assert matching_days(parse("0 0 */2 * 1")) == [7, 21]
    # `*/7` (Sunday) counts as unrestricted too: the 1st or the 6th, if it is a Sunday.
    assert matching_days(parse("0 0 1,6 * */7")) == [6]
    assert matching_days(parse("0 0 * * 1")) == [7, 14, 21, 28]
    assert matching_days(parse("0 0 13 * *")) == [13]


def test_the_month_field_always_restricts() -> None:
    assert matching_days(parse("0 0 1 jan *")) == []
    assert matching_days(parse("0 0 31 * *"), month=11) == []


def test_matches_checks_all_five_fields_on_wall_clock_time() -> None:
    schedule = parse("30 8 * * MON-FRI")

    assert schedule.matches(datetime(2026, 12, 2, 8, 30))  # a Wednesday
    assert not schedule.matches(datetime(2026, 12, 2, 8, 31))
    assert not schedule.matches(datetime(2026, 12, 2, 9, 30))
    assert not schedule.matches(datetime(2026, 12, 6, 8, 30))  # a Sunday


def test_days_descending_walks_back_across_months_and_years() -> None:
    schedule = parse("0 0 1 jan,dec *")
    days = list(schedule.days_descending(date(2027, 1, 31), date(2025, 12, 1)))

    assert days == [date(2027, 1, 1), date(2026, 12, 1), date(2026, 1, 1), date(2025, 12, 1)]


def test_an_expression_that_never_fires_yields_no_fire_times() -> None:
    assert fires("0 0 30 2 *", ZoneInfo("UTC"), "2020-01-01T00:00", "2029-01-01T00:00") == []


# --- fire times in a zone -------------------------------------------------------------------


def test_fire_times_are_wall_clock_times_in_the_zone() -> None:
    # Santiago is at -03:00 in December (southern summer).
    assert fires("0 8 * * 1-5", SANTIAGO, "2026-12-04T00:00", "2026-12-08T00:00") == [
        utc("2026-12-04T11:00"),  # Friday
        utc("2026-12-07T11:00"),  # Monday
    ]


def test_fire_times_include_both_bounds() -> None:
    assert fires("0 * * * *", ZoneInfo("UTC"), "2026-12-02T08:00", "2026-12-02T10:00") == [
        utc("2026-12-02T08:00"),
        utc("2026-12-02T09:00"),
        utc("2026-12-02T10:00"),
    ]


@pytest.mark.parametrize(
    ("zone", "wall", "instant"),
    [
        # Spring forward: the local time does not exist, it fires when the gap ends.
        (NEW_YORK, "2026-03-08T02:30", "2026-03-08T07:00"),  # 03:00 EDT
        (NEW_YORK, "2026-03-08T02:00", "2026-03-08T07:00"),
        (BERLIN, "2026-03-29T02:30", "2026-03-29T01:00"),  # 03:00 CEST
        (SANTIAGO, "2026-09-06T00:30", "2026-09-06T04:00"),  # 01:00 -03
        # Fall back: the local time happens twice, it fires at the first occurrence.
        (NEW_YORK, "2026-11-01T01:30", "2026-11-01T05:30"),  # EDT, not 06:30Z (EST)
        (BERLIN, "2026-10-25T02:30", "2026-10-25T00:30"),  # CEST, not 01:30Z (CET)
        (SANTIAGO, "2026-04-04T23:30", "2026-04-05T02:30"),  # -03, not 03:30Z (-04)
        # Ordinary times on the same days.
        (NEW_YORK, "2026-03-08T03:00", "2026-03-08T07:00"),
        (NEW_YORK, "2026-11-01T02:00", "2026-11-01T07:00"),
        (SANTIAGO, "2026-04-05T00:00", "2026-04-05T04:00"),
    ],
)
def test_local_instant_applies_the_gap_and_fold_rules(
    zone: ZoneInfo, wall: str, instant: str
) -> None:
    assert local_instant(zone, datetime.fromisoformat(wall)) == utc(instant)


def test_a_gap_fires_once_at_its_end_however_many_wall_times_it_swallows() -> None:
    # 02:00, 02:30 and 03:00 all fall on 07:00Z: one fire time.
    assert fires("0,30 2-3 8 3 *", NEW_YORK, "2026-03-08T00:00", "2026-03-09T00:00") == [
        utc("2026-03-08T07:00"),
        utc("2026-03-08T07:30"),
    ]


def test_a_daily_time_inside_the_gap_moves_only_on_the_day_of_the_change() -> None:
    assert fires("30 2 * * *", NEW_YORK, "2026-03-07T00:00", "2026-03-10T00:00") == [
        utc("2026-03-07T07:30"),  # 02:30 EST
        utc("2026-03-08T07:00"),  # 02:30 does not exist: 03:00 EDT
        utc("2026-03-09T06:30"),  # 02:30 EDT
    ]


def test_a_time_in_the_fold_fires_once_at_its_first_occurrence() -> None:
    assert fires("*/20 1 * * *", NEW_YORK, "2026-11-01T04:00", "2026-11-01T08:00") == [
        utc("2026-11-01T05:00"),
        utc("2026-11-01T05:20"),
        utc("2026-11-01T05:40"),
    ]
    assert fires("30 23 4 4 *", SANTIAGO, "2026-04-04T00:00", "2026-04-06T00:00") == [
        utc("2026-04-05T02:30")
    ]


def test_a_fire_time_earlier_in_the_fold_than_now_on_the_wall_clock_is_still_found() -> None:
    # 06:30Z is 01:30 EST, the second 01:30; 01:45 EDT (05:45Z) fired before it.
    assert fires("45 1 * * *", NEW_YORK, "2026-11-01T05:00", "2026-11-01T06:30") == [
        utc("2026-11-01T05:45")
    ]


# --- cross-check against a minute-by-minute reference -----------------------------------------

# Stars weigh more than restrictions so that most cases fire at least once.
PIECES = {
    "minute": ["*", "0", "*/7", "15-45/10", "0,30", "59", "1-3", "*/20"],
    "hour": ["*", "*", "2", "1-3", "*/5", "0,23", "22-23", "0-4"],
    "day-of-month": ["*", "*", "*", "1", "*/2", "4-8,25", "1-7", "29-31"],
    "month": ["*", "*", "*", "mar,apr,sep,oct,nov", "*/4", "FEB-Apr", "9-12"],
    "day-of-week": ["*", "*", "*", "0", "7", "1-5", "sat,sun", "*/3"],
}
# Clock changes (UTC instants) in each zone, plus a month end in UTC: the reference must meet
# gaps and folds of an hour and of half an hour.
CHANGES = [
    ("America/New_York", "2026-03-08T07:00"),
    ("America/New_York", "2026-11-01T06:00"),
    ("Europe/Berlin", "2026-03-29T01:00"),
    ("Europe/Berlin", "2026-10-25T01:00"),
    ("America/Santiago", "2026-04-05T03:00"),
    ("America/Santiago", "2026-09-06T04:00"),
    ("Australia/Lord_Howe", "2026-04-04T15:00"),
    ("Australia/Lord_Howe", "2026-10-03T15:30"),
    ("UTC", "2026-02-28T23:00"),
]


def reference_fire_times(
    schedule: CronSchedule, zone: ZoneInfo, earliest: datetime, latest: datetime
) -> list[datetime]:
    """Every UTC minute, one by one: a wall time fires when first reached; wall times a clock
    change skips fire at the instant the clock lands after them."""
    found: list[datetime] = []
    moment = earliest
    previous_wall = (earliest - timedelta(minutes=1)).astimezone(zone).replace(tzinfo=None)
    while moment <= latest:
        local = moment.astimezone(zone)
        wall = local.replace(tzinfo=None)
        skipped = wall - previous_wall > timedelta(minutes=1)
        fires_now = schedule.matches(wall) and local.fold == 0
        if skipped:
            skipped_walls = (
                previous_wall + timedelta(minutes=step)
                for step in range(1, (wall - previous_wall) // timedelta(minutes=1))
            )
            fires_now = fires_now or any(schedule.matches(w) for w in skipped_walls)
        if fires_now:
            found.append(moment)
        previous_wall = max(previous_wall, wall)
        moment += timedelta(minutes=1)
    return found


def test_fire_times_agree_with_a_minute_by_minute_reference() -> None:
    rng = random.Random(20261202)
    compared = 0
    for _ in range(80):
        expression = " ".join(rng.choice(options) for options in PIECES.values())
        zone_name, change = rng.choice(CHANGES)
        zone = ZoneInfo(zone_name)
        centre = utc(change) + timedelta(minutes=rng.randrange(-240, 240))
        earliest = centre - timedelta(minutes=rng.randrange(0, 1200))
        latest = centre + timedelta(minutes=rng.randrange(0, 1200))
        schedule = parse(expression)

        fast = list(fire_times_descending(schedule, zone, latest=latest, earliest=earliest))
        expected = reference_fire_times(schedule, zone, earliest, latest)

        assert fast[::-1] == expected, (expression, zone, earliest, latest)
        compared += bool(expected)
    assert compared >= 40  # the sample must not be mostly empty ranges
