"""Objects an informer skips: one that cannot be decoded, normalized or stored stops nothing.

Anyone who may create an object in one namespace can make it unusable to the agent (a value
past what SQLite holds, JSON nested 100,000 deep); were it to stop its informer, discovery
of that kind would stop cluster-wide. Such an object is skipped instead, and `Skips` makes
it visible without flooding: one warning per object and change (its key, resourceVersion
and reason; never a value from it), a count by reason (`objects_skipped/<reason>`, which
`agent.metrics` serves as `moonin_agent_objects_skipped_total{resource,reason}`) and a note
shown in `/readyz` details while some object is skipped. The note clears once every
skipped object went through again, was deleted or vanished from a list.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Container
from dataclasses import dataclass

import msgspec
import structlog

from runtime.health import HealthReporter

log = structlog.get_logger("collector.informer")

UNDECODABLE = "undecodable"
NUMBER_OUT_OF_RANGE = "number_out_of_range"
NESTED_TOO_DEEP = "nested_too_deep"
NORMALIZE_FAILED = "normalize_failed"
UNSTORABLE = "unstorable"

COUNTER = "objects_skipped"
# Skipped objects remembered for their notes and for warning once per change; past this
# many (a hostile flood), the oldest are forgotten and may be warned about again.
REMEMBERED = 1000

_FIELD = re.compile(r" - at `([^`]{1,200})`$")
_OUT_OF_RANGE = re.compile(r"^(Expected `int` [<>]=|Number out of range)")


class SkippedObject(Exception):
    """Raised by a sink: this object cannot be normalized or stored, so it is skipped.
    `field` says where or what failed (a field path or an exception type), never a value."""

    def __init__(self, reason: str, field: str) -> None:
        super().__init__(f"{reason}: {field}")
        self.reason = reason
        self.field = field


def undecodable(exc: Exception) -> SkippedObject:
    """The skip for an object msgspec would not decode, said without its values (a
    ValidationError's message quotes an enum's value; only its path and kind are kept)."""
    if isinstance(exc, RecursionError):
        return SkippedObject(NESTED_TOO_DEEP, "nesting past the decoder's recursion limit")
    message = str(exc)
    path = _FIELD.search(message)
    field = path.group(1) if path else "$"
    if isinstance(exc, msgspec.ValidationError):
        reason = NUMBER_OUT_OF_RANGE if _OUT_OF_RANGE.match(message) else UNDECODABLE
        return SkippedObject(reason, field)
    return SkippedObject(UNDECODABLE, f"{field} (malformed JSON)")


@dataclass(frozen=True, slots=True)
class Identity:
    """What is known of a skipped object: its key and resourceVersion when its metadata
    decoded, else only a digest of its bytes (the same bytes are the same change)."""

    key: str | None
    resource_version: str

    @classmethod
    def unknown(cls, raw: bytes) -> Identity:
        return cls(None, hashlib.blake2b(raw, digest_size=8).hexdigest())

    @property
    def slot(self) -> str:
        return self.key if self.key is not None else f"#{self.resource_version}"


class Skips:
    """The skipped objects of one resource. Thread-safe (the informer's thread writes what it
    cannot decode, the processor's what it cannot normalize or store; the health server
    reads the reporter)."""

    def __init__(self, resource: str, reporter: HealthReporter) -> None:
        self._resource = resource
        self._reporter = reporter
        self._lock = threading.Lock()
        self._skipped: dict[str, tuple[str, str, str]] = {}  # slot -> (rv, reason, field)

    def skipped(self, who: Identity, skip: SkippedObject) -> None:
        change = (who.resource_version, skip.reason, skip.field)
        with self._lock:
            if self._skipped.get(who.slot) == change:
                return  # warned about already: the same object, unchanged (a relist)
            self._skipped.pop(who.slot, None)
            self._skipped[who.slot] = change
            while len(self._skipped) > REMEMBERED:
                del self._skipped[next(iter(self._skipped))]
            self._note()
        self._reporter.count(f"{COUNTER}/{skip.reason}")
        namespace, _, name = (who.key or "").rpartition("/")
        log.warning(
            "object_skipped",
            resource=self._resource,
            namespace=namespace or None,
            name=name or None,
            resource_version=who.resource_version if who.key is not None else None,
            reason=skip.reason,
            field=skip.field,
        )

    def passed(self, key: str) -> None:
        """The object went through (or was deleted): it is no longer skipped."""
        if not self._skipped:  # unlocked peek: the common case costs one truth test
            return
        with self._lock:
            if self._skipped.pop(key, None) is not None:
                self._note()

    def listed(self, keys: Container[str]) -> None:
        """A full list: skipped objects it no longer has are gone. Those known only by a
        digest of their bytes stay (whether the list had them is not known)."""
        if not self._skipped:
            return
        with self._lock:
            gone = [slot for slot in self._skipped if slot not in keys and slot[0] != "#"]
            for slot in gone:
                del self._skipped[slot]
            self._note()

    def _note(self) -> None:
        if not self._skipped:
            self._reporter.note(COUNTER, None)
            return
        slot, (_, reason, field) = next(reversed(self._skipped.items()))
        count = len(self._skipped)
        self._reporter.note(
            COUNTER,
            f"{count} object{'s' if count > 1 else ''} skipped, latest {slot}: {reason} ({field})",
        )
