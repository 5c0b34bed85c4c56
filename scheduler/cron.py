"""The contract's five-field cron dialect: parsing, matching, and fire times in a time zone.

Written here rather than taken from a cron library because the contract pins down details
that libraries disagree on: Vixie cron's day rule (when both day of month and day of week
are restricted a day matches if either does, and a field that starts with `*` counts as
unrestricted), 7 as a second Sunday, and what happens to a fire time inside a daylight
saving change (a wall-clock time that does not exist fires at the first instant after the
gap; one that occurs twice fires once, at its first occurrence).

Fire times are found by walking matching days, then the hours of each day, then the
minutes of each hour, so a search never steps minute by minute through days that cannot
match, and an hour untouched by a clock change is converted to UTC once.

How it fails: `parse` raises `CronError`, whose message names the field and what is wrong
with it (`minute: 60 is out of range 0-59 in '0,60'`). Nothing else here raises for an
expression that `parse` accepted.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1
    )
}
_DAY_NAMES = {
    name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
}
_NUMBER = re.compile(r"[0-9]+", re.ASCII)
_MAX_DIGITS = 9
_ONE_DAY = timedelta(days=1)


class CronError(ValueError):
    """An expression outside the dialect. `str()` is one line: `<field>: <what is wrong>`."""

    def __init__(self, field: str | None, problem: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}" if field else problem)


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: Mapping[str, int]


_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, _MONTH_NAMES),
    _Field("day-of-week", 0, 7, _DAY_NAMES),
)


@dataclass(frozen=True)
class CronSchedule:
    """A parsed expression. Days of the week count from 0 = Sunday (7 is folded into 0)."""

    expression: str
    minutes: tuple[int, ...]  # ascending
    hours: tuple[int, ...]  # ascending
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    # Vixie cron: a day field starting with `*` counts as unrestricted, whatever its step.
    days_unrestricted: bool
    weekdays_unrestricted: bool

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_date = day.day in self.days
        by_weekday = day.isoweekday() % 7 in self.weekdays
        if self.days_unrestricted or self.weekdays_unrestricted:
            return by_date and by_weekday
        return by_date or by_weekday

    def matches(self, wall: datetime) -> bool:
        """Whether the wall-clock minute `wall` (its zone ignored) is in the schedule."""
        return wall.minute in self.minutes and wall.hour in self.hours and self.matches_day(wall)

    def days_descending(self, first: date, last: date) -> Iterator[date]:
        """Matching days from `first` back to `last` (both included), latest first."""
        year, month = first.year, first.month
        while (year, month) >= (last.year, last.month):
            if month in self.months:
                top = calendar.monthrange(year, month)[1]
                if (year, month) == (first.year, first.month):
                    top = first.day
                bottom = last.day if (year, month) == (last.year, last.month) else 1
                for number in range(top, bottom - 1, -1):
                    day = date(year, month, number)
                    if self.matches_day(day):
                        yield day
            year, month = (year, month - 1) if month > 1 else (year - 1, 12)


def parse(expression: str) -> CronSchedule:
    """Parse a five-field expression; raises `CronError` naming the field at fault."""
    if expression.strip().startswith("@"):
        raise CronError(None, f"{expression.strip()!r}: @-macros are not part of the dialect")
    texts = expression.split()
    if not texts:
        raise CronError(None, "the expression is empty")
    if len(texts) != len(_FIELDS):
        raise CronError(
            None,
            f"expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(texts)} in {expression!r}",
        )
    minutes, hours, days, months, weekdays = (
        _parse_field(field, text) for field, text in zip(_FIELDS, texts, strict=True)
    )
    return CronSchedule(
        expression=expression,
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(value % 7 for value in weekdays),
        days_unrestricted=texts[2].startswith("*"),
        weekdays_unrestricted=texts[4].startswith("*"),
    )


def _parse_field(field: _Field, text: str) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(field.name, f"empty item in the list {text!r}")
        values.update(_parse_item(field, item))
    return values


def _parse_item(field: _Field, item: str) -> range:
    base, slash, step_text = item.partition("/")
    step = _parse_step(field, item, step_text) if slash else 1
    if base == "*":
        return range(field.low, field.high + 1, step)
    if "-" in base:
        low_text, _, high_text = base.partition("-")
        low, high = _parse_value(field, item, low_text), _parse_value(field, item, high_text)
        if low > high:
            raise CronError(field.name, f"the range {base!r} runs backwards")
        return range(low, high + 1, step)
    if slash:
        # Not in the contract's dialect (some crons read `5/10` as `5-max/10`, Vixie refuses).
        raise CronError(field.name, f"a step needs `*` or a range before it, got {item!r}")
    value = _parse_value(field, item, base)
    return range(value, value + 1)


def _parse_step(field: _Field, item: str, text: str) -> int:
    step = _number(field, text) if _NUMBER.fullmatch(text) else 0
    if step == 0:
        raise CronError(field.name, f"bad step {text!r} in {item!r}: expected a whole number >= 1")
    return step


def _parse_value(field: _Field, item: str, text: str) -> int:
    if _NUMBER.fullmatch(text):
        value = _number(field, text)
        if not field.low <= value <= field.high:
            where = "" if item == text else f" in {item!r}"
            raise CronError(field.name, f"{value} is out of range {field.low}-{field.high}{where}")
        return value
    if text.upper() in field.names:
        return field.names[text.upper()]
    if not text:
        raise CronError(field.name, f"missing number in {item!r}")
    kind = {"month": "a number or month name", "day-of-week": "a number or day name"}
    raise CronError(field.name, f"{text!r} is not {kind.get(field.name, 'a number')}")


def _number(field: _Field, digits: str) -> int:
    """The value of a run of digits. Past 9 of them it is out of every field's range, and
    `int` refuses strings of thousands of digits with a plain ValueError."""
    if len(digits.lstrip("0")) > _MAX_DIGITS:
        raise CronError(field.name, f"{digits[:_MAX_DIGITS]}... is out of range")
    return int(digits)


def fire_times_descending(
    schedule: CronSchedule, zone: tzinfo, *, latest: datetime, earliest: datetime
) -> Iterator[datetime]:
    """Fire instants `t` (aware, UTC) with `earliest <= t <= latest`, latest first, each once.

    Wall-clock order maps to instant order (a fold fires at its first occurrence, a gap at
    its end), so the walk can stop at the first instant before `earliest`.
    """
    # A day either side: a fold or gap can put an instant on the neighbouring local date.
    top = _shift(latest.astimezone(zone).date(), _ONE_DAY)
    bottom = _shift(earliest.astimezone(zone).date(), -_ONE_DAY)
    previous: datetime | None = None
    for day in schedule.days_descending(top, bottom):
        for instant in reversed(_day_instants(schedule, zone, day)):
            if instant > latest:
                continue
            if instant < earliest:
                return
            # Wall times inside one gap all fire at its end: that is one fire time.
            if instant != previous:
                previous = instant
                yield instant


def _shift(day: date, delta: timedelta) -> date:
    try:
        return day + delta
    except OverflowError:
        return day


def _day_instants(schedule: CronSchedule, zone: tzinfo, day: date) -> list[datetime]:
    """The fire instants of one matching local day, ascending (duplicates possible in a gap)."""
    minutes = schedule.minutes
    span = timedelta(minutes=minutes[-1] - minutes[0])
    instants: list[datetime] = []
    for hour in schedule.hours:
        first = local_instant(zone, datetime.combine(day, time(hour, minutes[0])))
        last = local_instant(zone, datetime.combine(day, time(hour, minutes[-1])))
        if last - first == span:
            # No clock change between the hour's first and last fire: plain arithmetic.
            instants.extend(first + timedelta(minutes=minute - minutes[0]) for minute in minutes)
        else:
            instants.extend(
                local_instant(zone, datetime.combine(day, time(hour, minute))) for minute in minutes
            )
    return instants


def local_instant(zone: tzinfo, wall: datetime) -> datetime:
    """The instant (aware, UTC) at which the naive wall-clock time `wall` in `zone` fires.

    A time that occurs twice (fold) fires at its first occurrence; one that does not exist
    (gap) fires at the first instant after the gap.
    """
    wall = wall.replace(tzinfo=None, fold=0)
    # fold=0 selects the first of two occurrences (PEP 495).
    instant = wall.replace(tzinfo=zone).astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == wall:
        return instant
    return _gap_end(zone, wall, instant)


def _gap_end(zone: tzinfo, wall: datetime, after: datetime) -> datetime:
    # In a gap, fold=0 reads `wall` with the offset from before the change (an instant past
    # the gap) and fold=1 with the offset from after it (an instant before the gap): the
    # change lies between the two. Transitions fall on whole seconds; bisect to one.
    before = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if before >= after:
        return after
    offset_before = before.astimezone(zone).utcoffset()
    low, high = int(before.timestamp()), int(after.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset_before:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)
