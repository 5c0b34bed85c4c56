"""Scaling templates as the scaling API sends them (`{"templates": [Template, ...]}`).

Decoding is strict about types (a string where a boolean belongs is an error, not a guess)
and lenient about presence: a nullable field that is missing reads as null, `timezone`
missing or null reads as UTC, and unknown fields are ignored, as the contract asks.
Timestamps must be RFC 3339 with an offset; a time without one names no instant.

How it fails: one template that does not decode but whose `id` can be read becomes a
`MalformedTemplate` (its evaluation is `invalid`, so one bad template does not hide the
others); a payload that is not a templates document, or a template without a readable
`id`, raises `TemplatesError` with a one-line message.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec

Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]
RUNNING = "running"


class Execution(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A manual execution. `status` is `running`, `finished` or `cancelled`; only `running`
    matters, so a status the contract may add later is read as not running."""

    status: str
    id: str | None = None
    started_at: Timestamp | None = None
    run_until: Timestamp | None = None


class Template(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    id: str
    enabled: bool
    name: str | None = None
    valid_until: Timestamp | None = None
    timezone: str | None = None  # null means UTC (see `zone_name`)
    cron: str | None = None
    duration_minutes: int | None = None
    execution: Execution | None = None

    @property
    def zone_name(self) -> str:
        return "UTC" if self.timezone is None else self.timezone


class MalformedTemplate(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A template whose `id` could be read but not the rest."""

    id: str
    error: str


class TemplatesError(ValueError):
    """The payload as a whole cannot be used; `str()` is one line."""


class _Document(msgspec.Struct, gc=False):
    templates: list[Any]


class _Identity(msgspec.Struct, gc=False):
    id: str


_DOCUMENT = msgspec.json.Decoder(_Document)
_AT_PATH = re.compile(r"(?P<problem>.*) - at `\$\.?(?P<path>.*)`", re.DOTALL)


def decode_templates(payload: bytes) -> list[Template | MalformedTemplate]:
    """The templates of a `{"templates": [...]}` document, in order."""
    try:
        document = _DOCUMENT.decode(payload)
    except msgspec.DecodeError as exc:
        kind = "a templates document" if isinstance(exc, msgspec.ValidationError) else "JSON"
        raise TemplatesError(f"not {kind}: {_describe(exc)}") from None
    return [decode_template(index, raw) for index, raw in enumerate(document.templates)]


def decode_template(index: int, raw: Any) -> Template | MalformedTemplate:
    """The `index`-th template of a templates document, as JSON decodes it (the platform
    client's answer): typed as it is, never encoded and decoded again."""
    try:
        return msgspec.convert(raw, Template)
    except msgspec.ValidationError as exc:
        problem = _describe(exc)
    try:
        identity = msgspec.convert(raw, _Identity)
    except msgspec.ValidationError:
        raise TemplatesError(f"templates[{index}]: no readable id: {problem}") from None
    return MalformedTemplate(id=identity.id, error=f"malformed template: {problem}")


def _describe(exc: msgspec.DecodeError) -> str:
    """msgspec's message with the field first: `enabled: Expected `bool`, got `str``."""
    message = " ".join(str(exc).splitlines())
    match = _AT_PATH.fullmatch(message)
    if match and match["path"]:
        return f"{match['path']}: {match['problem']}"
    return match["problem"] if match else message


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, in whole seconds as the contract's examples are.

    Fire times are whole minutes; only a manual execution's own timestamps can carry a
    fraction, and then it is kept (milliseconds, or microseconds if needed) rather than cut,
    so a window's start reads back as exactly the instant the platform sent.
    """
    moment = moment.astimezone(UTC)
    if moment.microsecond == 0:
        timespec = "seconds"
    elif moment.microsecond % 1000 == 0:
        timespec = "milliseconds"
    else:
        timespec = "microseconds"
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")
