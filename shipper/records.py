"""Wire records: what the collector and the scheduler put into the outbox.

Both shapes follow the contract in docs/protocol.md field for field. They are frozen
msgspec Structs, encoded to JSON once on their way into the outbox (`Entry`; the collector's
coalescer encodes a record's data once for its fingerprint and the entry), so the shipper
splices the stored bytes straight into a request body without decoding them again.
"""

from __future__ import annotations

import enum
import functools
import random
import time
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

DISCOVERY = "discovery"
SCALING = "scaling"
STREAMS = (DISCOVERY, SCALING)


class RecordClass(enum.IntEnum):
    """How the outbox bounds treat a record (see the design's drop policy)."""

    UPSERT = 1  # state: may be dropped past the bound, the collector re-sends it on resync
    DELETE = 2  # never dropped
    EVENT = 3  # discovery events: dropped only past the byte bound; scaling events never


class Record(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False, gc=False):
    """One discovery record (`POST /v1/clusters/{id}/records`)."""

    id: str
    kind: str
    op: Literal["upsert", "delete", "event"]
    key: str
    observed_at: str
    uid: str | None = None
    namespace: str | None = None
    name: str | None = None
    resource_version: str | None = None
    data: dict[str, Any] | msgspec.Raw = msgspec.field(default_factory=dict)
    """The data, or its JSON as encoded once already (`msgspec.Raw`); decoded, a dict."""

    @property
    def record_class(self) -> RecordClass:
        return _CLASS_OF_OP[self.op]


class ScalingEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One scaling event (`POST /v1/clusters/{id}/events`); ids are deterministic."""

    id: str
    type: Literal["apply", "revert", "error"]
    template_id: str
    occurred_at: str
    action_id: str | None = None
    namespace: str | None = None
    deployment: str | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    window_start: str | None = None
    run_until: str | None = None
    provisional: bool = False
    reason: str | None = None
    message: str | None = None
    details: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    """What else an event says (an apply's `managed_by`); left out of the JSON when unset."""

    @property
    def record_class(self) -> RecordClass:
        return RecordClass.EVENT


Outgoing = Record | ScalingEvent

_CLASS_OF_OP = {
    "upsert": RecordClass.UPSERT,
    "delete": RecordClass.DELETE,
    "event": RecordClass.EVENT,
}

_ENCODER = msgspec.json.Encoder()


def encode(record: Outgoing) -> bytes:
    return _ENCODER.encode(record)


class Entry(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One record as the outbox keeps it: its bound class and its JSON, exactly as it is
    sent."""

    cls: int
    body: bytes


def as_entry(record: Outgoing) -> Entry:
    return Entry(record.record_class, encode(record))


def utc_timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 in UTC with a `Z`, as every timestamp on the wire (now, by default)."""
    if moment is None:
        # Every record is stamped: the second's text is reused, only milliseconds are new.
        now_ms = time.time_ns() // 1_000_000
        seconds, millis = divmod(now_ms, 1000)
        return f"{_utc_second(seconds)}.{millis:03d}Z"
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@functools.lru_cache(maxsize=4)
def _utc_second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


# Two characters (10 bits) at a time: every record gets an id, even one coalesced away.
_CROCKFORD_PAIRS = [first + second for first in _CROCKFORD for second in _CROCKFORD]


def new_id() -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, so ids sort by creation time.
    An id must be unique, not secret: the random bits come from the interpreter's generator
    (seeded by the system), not a system call per record (each also let go of the GIL)."""
    value = (int(time.time() * 1000) << 80) | random.getrandbits(80)
    return "".join([_CROCKFORD_PAIRS[(value >> shift) & 1023] for shift in range(120, -1, -10)])
