"""Timestamps parsed as strictly as the Go types Kubernetes declares them with.

`metav1.Time` is parsed with Go's `time.RFC3339` layout (fractional seconds optional, a
`Z` or a `+hh:mm` offset), `metav1.MicroTime` with `RFC3339Micro`
(`2006-01-02T15:04:05.000000Z07:00`): exactly six fractional digits, so a Lease
`renewTime` of `2026-12-04T10:00:00Z` is refused by a real server. Source:
staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/time.go and micro_time.go.
"""

from __future__ import annotations

import re
from datetime import datetime

RFC3339 = "2006-01-02T15:04:05Z07:00"
RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"

_DATE_TIME = r"(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})"
_ZONE = r"(Z|[+-]\d{2}:\d{2})"
_TIME = re.compile(rf"{_DATE_TIME}([.,]\d+)?{_ZONE}")
_MICRO_TIME = re.compile(rf"{_DATE_TIME}([.,]\d{{6}}){_ZONE}")
# Each layout's elements in order, and what Go's parser takes for each (time/format.go).
_ELEMENTS = [
    ("2006", r"\d{4}"),
    ("-", "-"),
    ("01", r"\d{2}"),
    ("-", "-"),
    ("02", r"\d{2}"),
    ("T", "T"),
    ("15", r"\d{1,2}"),
    (":", ":"),
    ("04", r"\d{2}"),
    (":", ":"),
    ("05", r"\d{2}"),
]
_ZONE_ELEMENT = ("Z07:00", r"Z|[+-]\d{2}:\d{2}")
_LAYOUT_ELEMENTS = {
    # After seconds Go takes a fraction the layout does not name.
    RFC3339: [*_ELEMENTS, ("", r"(?:[.,]\d+)?"), _ZONE_ELEMENT],
    RFC3339_MICRO: [*_ELEMENTS, (".000000", r"[.,]\d{6}"), _ZONE_ELEMENT],
}


def time_error(value: str, *, micro: bool) -> str | None:
    """Go's parse error for `value`, or None when Go accepts it."""
    layout = RFC3339_MICRO if micro else RFC3339
    pattern = _MICRO_TIME if micro else _TIME
    match = pattern.fullmatch(value)
    if match is None:
        return _layout_error(value, layout)
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    try:
        datetime(year, month, day, hour, minute, second)
    except ValueError:
        return f'parsing time "{value}": value out of range'
    zone = match.group(8)
    if zone != "Z" and (int(zone[1:3]) > 23 or int(zone[4:6]) > 59):
        return f'parsing time "{value}": time zone offset out of range'
    return None


def _layout_error(value: str, layout: str) -> str:
    """Where Go's parser stops: the rest of the value and the layout element it failed on,
    or the text left over once the layout is used up."""
    at = 0
    for element, taken in _LAYOUT_ELEMENTS[layout]:
        found = re.compile(taken).match(value, at)
        if found is None:
            return (
                f'parsing time "{value}" as "{layout}": cannot parse "{value[at:]}" as "{element}"'
            )
        at = found.end()
    return f'parsing time "{value}": extra text: "{value[at:]}"'
