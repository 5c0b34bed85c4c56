"""The pieces of every Kubernetes object the collector reads, and how records are made.

Objects are decoded from the API's raw JSON straight into small msgspec Structs that name
only the fields a record needs (decoding into the kubernetes client's models is ~75x
slower and holds ~13x the memory). Unknown fields are ignored, missing ones default, so a
partial object never fails to decode.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec

from shipper.records import Record, new_id, utc_timestamp

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
"""An integer field of an object, as Kubernetes, SQLite and the platform hold them: one past
64 bits fails the object's decoding (it is skipped) instead of the state store's write."""

_DECIMAL = re.compile(r"[+-]?[0-9]+")


def past_int64(value: Any) -> bool:
    """Whether an integer past 64 bits is anywhere in `value` (as decoded into `Any`: a
    field kept as the API gives it, which no `Int64` bounds)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            return True
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def parse_int64(text: str) -> int | None:
    """An integer written as text (an annotation), read as Go's `strconv.ParseInt(text, 10,
    64)` reads it, as the controllers that write it do; None where that fails. Python's
    `int()` also takes spaces, `_` and non-ASCII digits, and integers of any size."""
    if len(text) > 20 or not _DECIMAL.fullmatch(text):
        return None
    number = int(text)
    return number if INT64_MIN <= number <= INT64_MAX else None


class OwnerReference(msgspec.Struct, rename="camel", frozen=True, gc=False):
    kind: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    controller: bool | None = None


class ObjectMeta(msgspec.Struct, rename="camel", frozen=True, gc=False):
    name: str = ""
    namespace: str | None = None
    uid: str = ""
    resource_version: str = ""
    generation: Int64 | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    annotations: dict[str, str] = msgspec.field(default_factory=dict)
    owner_references: list[OwnerReference] = msgspec.field(default_factory=list)

    @property
    def key(self) -> str:
        """`namespace/name` for namespaced objects, `name` for cluster-scoped ones."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def controller(self) -> OwnerReference | None:
        for owner in self.owner_references:
            if owner.controller:
                return owner
        return None


_decode_data = msgspec.json.Decoder(dict[str, Any]).decode


def decoded_data(data: dict[str, Any] | msgspec.Raw) -> dict[str, Any]:
    """A record's data as a dict, decoded where the record carries it encoded."""
    return _decode_data(data) if isinstance(data, msgspec.Raw) else data


def upsert(
    kind: str, meta: ObjectMeta, data: dict[str, Any] | msgspec.Raw, *, key: str | None = None
) -> Record:
    """An upsert record for an object as it is now."""
    return _record(kind, "upsert", key or meta.key, meta, data)


def delete(kind: str, meta: ObjectMeta, *, key: str | None = None) -> Record:
    """A delete record: the object is gone (its last known identity is kept)."""
    return _record(kind, "delete", key or meta.key, meta, {})


def event(kind: str, key: str, meta: ObjectMeta, data: dict[str, Any]) -> Record:
    """An event record (pod_error, snapshot): never coalesced away, never replaced."""
    return _record(kind, "event", key, meta, data)


def _record(
    kind: str,
    op: Literal["upsert", "delete", "event"],
    key: str,
    meta: ObjectMeta,
    data: dict[str, Any] | msgspec.Raw,
) -> Record:
    return Record(
        id=new_id(),
        kind=kind,
        op=op,
        key=key,
        uid=meta.uid or None,
        namespace=meta.namespace or None,
        name=meta.name or None,
        resource_version=meta.resource_version or None,
        observed_at=utc_timestamp(),
        data=data,
    )
