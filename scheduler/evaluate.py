"""`moonin-agent scaling evaluate`: which templates are active at an instant, and why.

Reads a `{"templates": [...]}` document (what the scaling API returns) and prints one JSON
array, one object per template in input order: `template_id`, `active`, `reason`,
`window_start`, `run_until`, `error`. Nothing is read from or written to a cluster or the
platform; the verdicts are those of `scheduler.window.evaluate`, the activation rules.

How it fails: an unreadable file, a payload that is not a templates document, a template
without a readable `id`, or an `--at` that is not an ISO 8601 instant with a UTC offset
raise `EvaluateError` (one line; the CLI exits 2). A template that is malformed but has an
`id` is reported as that template's `invalid` verdict and the others are still evaluated.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from scheduler import window
from scheduler.templates import TemplatesError, decode_templates

STDIN = "-"


class EvaluateError(Exception):
    """Bad input to `scaling evaluate`; `str()` is one line for the CLI to print."""

    def __init__(self, message: str) -> None:
        # A file name or an `--at` value may hold a line break; the CLI prints one line.
        super().__init__(" ".join(message.splitlines()))


class Verdict(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One object of the output array (the shape is fixed by the design)."""

    template_id: str
    active: bool
    reason: str
    window_start: str | None
    run_until: str | None
    error: str | None


def parse_at(text: str | None) -> datetime:
    """The instant of `--at`, or now. A time without a UTC offset is refused: it could mean
    UTC, this machine's zone or each template's zone, and a guess would move every window."""
    if text is None:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise EvaluateError(f"--at: {text!r} is not an ISO 8601 date and time") from None
    if moment.utcoffset() is None:
        raise EvaluateError(
            f"--at: {text!r} has no UTC offset; add Z or +hh:mm (e.g. 2026-12-02T08:00:00Z)"
        )
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise EvaluateError(f"--at: {text!r} is outside the years 1-9999 in UTC") from None


def read_payload(path: str) -> bytes:
    if path == STDIN:
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise EvaluateError(f"--templates {path}: cannot read: {exc.strerror or exc}") from None


def evaluate_payload(payload: bytes, now: datetime, *, source: str = STDIN) -> list[Verdict]:
    try:
        templates = decode_templates(payload)
    except TemplatesError as exc:
        raise EvaluateError(f"--templates {source}: {exc}") from None
    return [_verdict(window.evaluate(template, now)) for template in templates]


def _verdict(activation: window.Activation) -> Verdict:
    active = activation.window
    return Verdict(
        template_id=activation.template_id,
        active=active is not None,
        reason=activation.reason,
        window_start=None if active is None else active.start_text,
        run_until=None if active is None else active.until_text,
        error=activation.error,
    )


def render(verdicts: Sequence[Verdict]) -> bytes:
    """One JSON array with one object per line, readable and still a single document."""
    if not verdicts:
        return b"[]\n"
    rows = b",\n".join(msgspec.json.encode(verdict) for verdict in verdicts)
    return b"[\n" + rows + b"\n]\n"
