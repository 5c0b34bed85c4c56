"""What one informer's objects become: `SourceSink` keeps the relation indexes current,
filters, normalizes and hands the records on; `Stale` remembers which dependent records
to rebuild before the next flush.

A sink calls nothing above it: what it produces goes to the `Wiring` it was given (the
collector's `offer`, the `Stale` marks), and the collector's processor drives it
(`collector.processor`: `apply`, `remove`, `listed`, `rebuild`), on its one thread, so
indexes and normalizer state change one object at a time without a lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from collector import sanitize
from collector.filters import Filters
from collector.model import ObjectMeta, decoded_data, delete, upsert
from collector.normalize.base import Context, Object
from collector.relations import Relations
from collector.resources import Resource
from collector.skips import NORMALIZE_FAILED, UNSTORABLE, Identity, SkippedObject, Skips
from collector.sources import DEPENDENTS, RELATION_DEPENDENTS, Dependents, Keep, Source
from collector.state import HeldObjects, ProducedRecords
from kube.errors import KubeError
from shipper.records import Record

T = TypeVar("T", bound=Object)

# What a value the state store cannot hold raises (an integer past 64 bits, in SQLite or in
# the msgpack of a kept record). SQLite's own failures (a full disk) are not among them: they
# are no fault of the object.
_UNSTORABLE = (OverflowError, sqlite3.InterfaceError, msgspec.EncodeError)


class _Storing:
    """`with _STORING:` an object whose values the state store cannot hold is skipped
    (`SkippedObject`). A class rather than a generator: it wraps every object."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, _UNSTORABLE):
            raise SkippedObject(UNSTORABLE, type(exc).__name__) from None


_STORING = _Storing()


class Stale:
    """Keys of the objects whose dependent records are to be rebuilt (or were held back),
    by `Dependents`; taken once what those records mention has listed."""

    def __init__(self, listed: Callable[[frozenset[Resource]], bool]) -> None:
        self._listed = listed
        self._keys: dict[Dependents, set[str]] = {dependents: set() for dependents in DEPENDENTS}

    def waiting(self, dependents: Dependents) -> bool:
        """Whether some of what these records mention has not listed yet."""
        return not self._listed(dependents.needs)

    def mark(self, dependents: Dependents, keys: Iterable[str]) -> None:
        self._keys[dependents].update(keys)

    def due(self) -> list[tuple[Dependents, list[str]]]:
        """The marked keys (sorted) of each `Dependents` whose needs have listed, forgotten."""
        found = []
        for dependents, keys in self._keys.items():
            if keys and self._listed(dependents.needs):
                self._keys[dependents] = set()
                found.append((dependents, sorted(keys)))
        return found


class _Kept(msgspec.Struct, array_like=True, gc=False):
    """A rebuildable record as the state store keeps it: its identity, and its data as the
    JSON the record carried (encoded once, for the store, the fingerprint and the outbox).
    Stores written before keep a msgpack map instead, decoded as a dict."""

    meta: ObjectMeta  # identity only: what the record envelope needs
    data: bytes | dict[str, Any]


_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(_Kept).decode
_encode_json = msgspec.json.Encoder().encode


def _kept_data(kept: _Kept) -> msgspec.Raw | dict[str, Any]:
    """The kept data as a record carries it."""
    return msgspec.Raw(kept.data) if isinstance(kept.data, bytes) else kept.data


def _slim(obj: T) -> T:
    """The object as it is kept until its records are built (`objects`, the held ones):
    without the annotation values no record carries (packed, the bench's Deployments went
    from 6.0 to 2.6 KB)."""
    meta = obj.metadata
    slim = sanitize.without_dropped_values(meta)
    if slim is meta:
        return obj
    # Every decoded object is a msgspec Struct (`Source.normalizer.struct`).
    return msgspec.structs.replace(obj, metadata=slim)  # type: ignore[type-var]


@dataclass(frozen=True, slots=True)
class _MetadataOnly:
    """What a vanished object is known as when its sink kept no copy of it."""

    metadata: ObjectMeta


@dataclass(frozen=True, slots=True, kw_only=True)
class Wiring:
    """What every sink shares: the indexes, and where its output goes."""

    produced: ProducedRecords
    held: HeldObjects
    relations: Relations
    context: Context
    filters: Filters
    offer: Callable[[Iterable[Record]], None]
    stale: Stale


class SourceSink(Generic[T]):
    """One source's sink (`collector.informer.Sink`)."""

    def __init__(self, source: Source[T], wiring: Wiring) -> None:
        self.source = source
        self.normalizer = source.normalizer
        self._wiring = wiring
        self._name = source.resource.plural
        self._produced = wiring.produced
        self._held = wiring.held
        self._decode_held = msgspec.msgpack.Decoder(source.normalizer.struct).decode
        self.objects: dict[str, T] = {}
        self.skips: Skips | None = None
        """Where an object that fails only when its held records are built is reported
        (its informer's, set by the collector)."""

    def apply(self, obj: T) -> None:
        """Raises `SkippedObject` for an object it cannot normalize or store."""
        with _STORING:
            meta = obj.metadata
            if self._ignored(meta):
                return
            wiring, source = self._wiring, self.source
            affected = wiring.relations.observe(self.normalizer.source, obj)
            if source.keep is Keep.OBJECTS:
                self.objects[meta.key] = _slim(obj)
            self.emit(obj)
            for follower in source.followers:
                follower.observe(obj)
            if source.marks is not None:
                owner = source.marks.owner(obj)
                if owner is not None:
                    wiring.stale.mark(source.marks.dependents, [owner])
            if affected:  # most objects (every pod) affect none: no mark to hash
                wiring.stale.mark(RELATION_DEPENDENTS, affected)

    def emit(self, obj: T) -> None:
        """Raises `SkippedObject` for an object the normalizer fails on."""
        meta = obj.metadata
        wiring, source = self._wiring, self.source
        if self._holds(meta):
            # Built once, when released (`rebuild`), not now and again then.
            if source.keep is not Keep.OBJECTS:  # else `objects` has it already
                self._held.put(self._name, meta.key, _pack(_slim(obj)))
            return
        if source.keep is Keep.VERSIONED:
            unchanged = self._unchanged(meta)
            if unchanged:
                wiring.offer(unchanged)
                return
        try:
            records = self.normalizer.upserts(obj, wiring.context)
        except KubeError:
            raise  # a read it needed failed for now: its informer tries the object again
        except SkippedObject:
            raise  # the normalizer said itself what it cannot use
        except Exception as exc:
            # One object the normalizer cannot handle must not stop its informer. The
            # message could quote the object's contents, so only its type is said.
            raise SkippedObject(NORMALIZE_FAILED, type(exc).__name__) from None
        if not source.events_only and not any(record.op == "upsert" for record in records):
            # It no longer yields its kind's record (a ReplicaSet orphaned from its
            # Deployment, a release Secret that stopped decoding): what it produced goes.
            records = records + [
                delete(kind, meta, key=record_key)
                for kind, record_key in self._produced.pop(self._name, meta.key)
            ]
        wiring.offer(self._produce(meta, records))

    def _holds(self, meta: ObjectMeta) -> bool:
        """Whether to hold the object's records back until what they depend on has listed
        (they are built then); marks it for that build."""
        held = self.source.held
        if held is None:
            return False
        stale = self._wiring.stale
        if not stale.waiting(held.dependents):
            return False
        owner = held.owner(meta, self._wiring.relations)
        if owner is None:
            return False  # nothing to wait for (a ReplicaSet of no Deployment)
        stale.mark(held.dependents, [owner])
        return True

    def _unchanged(self, meta: ObjectMeta) -> list[Record]:
        """The object's records as last built, if built from this very resourceVersion."""
        records = []
        for kind, record_key, encoded in self._produced.kept(self._name, meta.key):
            kept = _unpack(encoded)
            if kept.meta.resource_version != meta.resource_version:
                return []
            records.append(upsert(kind, kept.meta, _kept_data(kept), key=record_key))
        return records

    def take_held(self, keys: list[str]) -> dict[str, bytes]:
        """The held objects among `keys`, encoded and forgotten by the store: what
        `rebuild` is handed for them, taken in one statement."""
        if self.source.held is None or self.source.keep is Keep.OBJECTS:
            return {}  # it holds nothing in the store
        return self._held.pop_many(self._name, keys)

    def rebuild(self, key: str, held: Mapping[str, bytes]) -> None:
        """Send the object's record again, its relation fields decided anew; a held
        object's records (`held`: from `take_held`) are built for the first time."""
        if self.source.keep is Keep.OBJECTS:
            obj = self.objects.get(key)
            if obj is not None:
                self._release(obj)
            return
        encoded = held.get(key)
        if encoded is not None:
            self._release(self._decode_held(encoded))
            return
        relink = self.source.relink
        if relink is None:
            return  # nothing in its records mentions other kinds
        for kind, record_key, encoded in self._produced.kept(self._name, key):
            kept = _unpack(encoded)
            data = relink.relink(decoded_data(_kept_data(kept)), kept.meta, self._wiring.relations)
            record = upsert(kind, kept.meta, data, key=record_key)
            self._wiring.offer([self._remember(key, record, kept.meta)])

    def _release(self, obj: T) -> None:
        """Build the object's records now; one that cannot be built is reported skipped
        (once per resourceVersion: `Skips`) and keeps what it produced before."""
        meta = obj.metadata
        try:
            with _STORING:
                self.emit(obj)
        except SkippedObject as skip:
            if self.skips is not None:
                self.skips.skipped(Identity(meta.key, meta.resource_version), skip)

    def _produce(self, meta: ObjectMeta, records: list[Record]) -> list[Record]:
        """Note the upserts as the object's (with their data, where the sink keeps it); the
        records as they are offered."""
        if self.source.keep not in (Keep.RECORDS, Keep.VERSIONED):
            for record in records:
                if record.op == "upsert":
                    self._produced.add(self._name, meta.key, (record.kind, record.key), None)
            return records
        identity = msgspec.structs.replace(meta, labels={}, annotations={}, owner_references=[])
        return [
            self._remember(meta.key, record, identity) if record.op == "upsert" else record
            for record in records
        ]

    def _remember(self, key: str, record: Record, identity: ObjectMeta) -> Record:
        """Keep the upsert's data to rebuild it from; the record as it is offered, its data
        the JSON kept (so nothing encodes the data again)."""
        data = _encode_json(record.data)
        self._produced.add(self._name, key, (record.kind, record.key), _pack(_Kept(identity, data)))
        return msgspec.structs.replace(record, data=msgspec.Raw(data))

    def remove(self, obj: T) -> None:
        """Raises `SkippedObject` for an object whose values it cannot handle."""
        with _STORING:
            meta = obj.metadata
            if self._ignored(meta):
                return  # never collected (see `apply`), so nothing to delete
            wiring = self._wiring
            affected = wiring.relations.forget(self.normalizer.source, obj)
            self.objects.pop(meta.key, None)
            self._held.discard(self._name, meta.key)
            produced = self._produced.pop(self._name, meta.key)
            records = self.normalizer.deletes(obj, wiring.context)
            # Whatever it produced goes too, even where the normalizer no longer sees it as
            # its kind's (a ReplicaSet orphaned from its Deployment still has a revision).
            named = {(record.kind, record.key) for record in records}
            records += [
                delete(kind, meta, key=record_key)
                for kind, record_key in produced
                if (kind, record_key) not in named
            ]
            wiring.offer(records)
            self._forget(meta.key, affected)

    def listed(self, keys: Container[str]) -> None:
        """A full list: whatever is remembered but was not listed was deleted meanwhile."""
        gone = self._produced.missing(self._name, keys)
        gone.update(key for key in self.objects if key not in keys)
        gone.update(self._held.missing(self._name, keys))
        if self.source.memory is not None:
            gone.update(self.source.memory.missing(keys))
        for key in sorted(gone):
            self._vanished(key)

    def _vanished(self, key: str) -> None:
        namespace, _, name = key.rpartition("/")
        meta = ObjectMeta(name=name, namespace=namespace or None)
        gone = self.objects.pop(key, None) or _MetadataOnly(meta)
        self._held.discard(self._name, key)
        affected = self._wiring.relations.forget(self.normalizer.source, gone)
        self._wiring.offer(
            [
                delete(kind, meta, key=record_key)
                for kind, record_key in self._produced.pop(self._name, key)
            ]
        )
        self._forget(key, affected)

    def _forget(self, key: str, affected: set[str]) -> None:
        if self.source.memory is not None:
            self.source.memory.forget(key)
        for follower in self.source.followers:
            follower.forget(key)
        self._wiring.stale.mark(RELATION_DEPENDENTS, affected)

    def _ignored(self, meta: ObjectMeta) -> bool:
        return self._wiring.filters.skip(self.normalizer.kind, meta.namespace, meta.name)
