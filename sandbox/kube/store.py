"""The fake cluster's objects, its resourceVersion, and the change history watches replay.

One cluster-wide resourceVersion counts every write, as etcd's revision does. Each object
is kept as the JSON bytes of a list item (without `kind`/`apiVersion`), encoded once when
it is written, plus its labels and selectable fields: a list page is a join of stored
bytes and a selector never decodes an object. A write decodes the one object it changes.
The bytes of an object's `metadata` alone (metadata-only answers) are cut out of the stored
ones the first time they are asked for, and kept with that version.

Each resource keeps a history of changes (ADDED/MODIFIED/DELETED with the RV that made
them), bounded by count and by age: a real server compacts etcd about every five minutes,
so changes older than `history_seconds` (on the store's `clock`) are forgotten, lazily,
when a watch or list asks for history. A watch from resourceVersion R replays the changes
after R and then receives new ones through its `Subscription` queue, filled under the same
lock that assigns RVs, so a watcher never sees changes out of order or twice. When R is
older than what the history still holds (it overflowed, aged out, or `compact()` dropped
it) the watch is refused with a 410 `Expired`, as the real server does after etcd
compaction. The same history, walked backwards (`Change.undo`), rebuilds a list as it was
at an older RV (`resourceVersionMatch=Exact`). A request that needs a resourceVersion not
reached yet can wait for it (`wait_for_rv`).

Refusals (not found, exists, stale resourceVersion, bad metadata) raise `ApiError`.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from queue import SimpleQueue
from typing import Any

import msgspec

from sandbox.kube import status, strategy
from sandbox.kube.deletion import DeleteOptions
from sandbox.kube.resources import RESOURCES, Resource
from sandbox.kube.selectors import extract_fields

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_NO_LABELS: dict[str, str] = {}
_BACKGROUND = DeleteOptions()
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what the real server uses for generateName


def timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 with whole seconds, as metadata timestamps are serialized."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


class _MetadataOnly(msgspec.Struct):
    metadata: msgspec.Raw = msgspec.Raw(b"{}")


class Entry:
    """One stored version of one object. Immutable: a write stores a new Entry."""

    __slots__ = ("_metadata", "fields", "item", "labels", "name", "namespace", "rv", "uid")

    def __init__(
        self,
        namespace: str,
        name: str,
        uid: str,
        rv: int,
        labels: dict[str, str],
        fields: dict[str, str] | None,
        item: bytes,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.rv = rv
        self.labels = labels
        self.fields = fields
        self.item = item
        self._metadata: bytes | None = None

    def full(self, resource: Resource) -> bytes:
        """The object as GET and watch events return it: with kind and apiVersion."""
        return resource.prefix + self.item[1:]

    def decode(self) -> dict[str, Any]:
        obj: dict[str, Any] = _decode(self.item)
        return obj

    def metadata(self) -> bytes:
        """The JSON of `metadata` alone, cut out of the stored bytes on first use and kept:
        metadata-only answers about large objects cost a copy of it, not a decode."""
        cut = self._metadata
        if cut is None:
            # Two threads may both cut it; they store equal bytes.
            cut = self._metadata = bytes(_decode(self.item, type=_MetadataOnly).metadata)
        return cut


class Change:
    """One history event. For DELETED, `entry` is the last state stamped with the delete's RV.
    `at`: when it was recorded, on the store's clock."""

    __slots__ = ("at", "entry", "prev", "rv", "type")

    def __init__(
        self, type: str, rv: int, entry: Entry, prev: Entry | None, at: float = 0.0
    ) -> None:
        self.type = type
        self.rv = rv
        self.entry = entry
        self.prev = prev
        self.at = at

    def undo(self, objects: dict[tuple[str, str], Entry]) -> None:
        """Turn `objects` (keyed by namespace and name) back into what it was before this."""
        key = (self.entry.namespace, self.entry.name)
        if self.prev is None:
            objects.pop(key, None)
        else:
            objects[key] = self.prev


class Bookmark:
    """A queue item: every change up to `rv` is ahead of it in this queue."""

    __slots__ = ("rv",)

    def __init__(self, rv: int) -> None:
        self.rv = rv


class Subscription:
    """The mailbox of one open watch: changes and control items, in write order."""

    __slots__ = ("bookmarks", "namespace", "queue", "resource")

    def __init__(self, resource: Resource, namespace: str | None, bookmarks: bool) -> None:
        self.resource = resource
        self.namespace = namespace
        self.bookmarks = bookmarks
        self.queue: SimpleQueue[object] = SimpleQueue()


class _Kind:
    __slots__ = ("floor", "history", "objects", "order", "resource", "subscribers")

    def __init__(self, resource: Resource, history: int) -> None:
        self.resource = resource
        self.objects: dict[str, dict[str, Entry]] = {}  # namespace ("" if cluster-scoped) -> name
        self.history: deque[Change] = deque(maxlen=history)
        self.floor = 0  # changes at or below this RV may be missing from `history`
        self.order: list[tuple[str, str]] | None = None  # sorted keys; None after create/delete
        self.subscribers: set[Subscription] = set()

    def find(self, namespace: str, name: str) -> Entry | None:
        bucket = self.objects.get(namespace)
        return bucket.get(name) if bucket is not None else None


class Store:
    """All objects of the fake cluster. Thread-safe; every method takes the one lock.

    `history`: changes kept per resource; `history_seconds`: how long a change is kept;
    `clock`: monotonic seconds (tests pass one they can move forward)."""

    def __init__(
        self,
        history: int = 1000,
        history_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if history < 0:
            raise ValueError("history must be >= 0")
        self.history_seconds = history_seconds
        self._clock = clock
        self.lock = threading.RLock()
        self._advanced = threading.Condition(self.lock)  # the resourceVersion went up
        self._waiting = 0  # threads in wait_for_rv
        self._rv = 0
        self._kinds = {resource: _Kind(resource, history) for resource in RESOURCES}
        self._random = random.Random()
        self._observers: list[Callable[[Resource, Change], None]] = []
        # The uids of the objects a request left without managedFields (`managed_fields`).
        self.untracked: set[str] = set()

    @property
    def current_rv(self) -> int:
        return self._rv

    def now(self) -> float:
        """The store's clock: what history ages by."""
        return self._clock()

    # reading ------------------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str | None, name: str) -> Entry:
        with self.lock:
            entry = self._kinds[resource].find(_scope(resource, namespace), name)
        if entry is None:
            raise status.not_found(resource, name)
        return entry

    def snapshot(self, resource: Resource, namespace: str | None) -> tuple[int, list[Entry]]:
        """The current RV and the objects in key order (namespace, then name)."""
        with self.lock:
            kind = self._kinds[resource]
            if resource.namespaced and namespace:
                bucket = kind.objects.get(namespace, {})
                return self._rv, [bucket[name] for name in sorted(bucket)]
            if kind.order is None:
                # etcd's order: keys are ".../<namespace>/<name>", compared as strings.
                kind.order = sorted(
                    ((ns, name) for ns, bucket in kind.objects.items() for name in bucket),
                    key=lambda key: f"{key[0]}/{key[1]}",
                )
            objects = kind.objects
            return self._rv, [objects[ns][name] for ns, name in kind.order]

    def snapshot_at(self, resource: Resource, namespace: str | None, rv: int) -> list[Entry]:
        """The objects as they were at `rv`, in key order: the current ones with every later
        change undone. 410 Expired when those changes are no longer all kept; 504 when
        `rv` is not reached yet."""
        with self.lock:
            if rv > self._rv:
                raise status.too_large_resource_version(rv, self._rv)
            kind = self._kinds[resource]
            self._expire(kind)
            if rv < kind.floor:
                raise status.list_expired()
            objects = {
                (ns, name): entry
                for ns, bucket in kind.objects.items()
                if not (resource.namespaced and namespace) or ns == namespace
                for name, entry in bucket.items()
            }
            for change in reversed(kind.history):
                if change.rv <= rv:
                    break
                if not (resource.namespaced and namespace) or change.entry.namespace == namespace:
                    change.undo(objects)
        # etcd's order: keys are ".../<namespace>/<name>", compared as strings.
        return [objects[key] for key in sorted(objects, key=lambda key: f"{key[0]}/{key[1]}")]

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {
                resource.qualified: sum(len(bucket) for bucket in kind.objects.values())
                for resource, kind in self._kinds.items()
            }

    # writing ------------------------------------------------------------------------------

    def create(
        self,
        resource: Resource,
        obj: dict[str, Any],
        *,
        overwrite: bool = False,
        dry_run: bool = False,
    ) -> Entry:
        """Store a new object (`obj` is consumed). Keeps a uid/creationTimestamp it carries.
        `dry_run`: check and answer what would be stored (no resourceVersion), store nothing."""
        with self.lock:
            return self._create(resource, obj, overwrite, dry_run)

    def create_many(self, resource: Resource, objs: Iterable[dict[str, Any]]) -> int:
        """Bulk load (existing objects are replaced); one lock for the lot."""
        count = 0
        with self.lock:
            for obj in objs:
                self._create(resource, obj, True, False)
                count += 1
        return count

    def _create(
        self, resource: Resource, obj: dict[str, Any], overwrite: bool, dry_run: bool
    ) -> Entry:
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        namespace, name = self._identity(resource, obj)
        kind = self._kinds[resource]
        old = kind.find(namespace, name)
        if old is not None and not overwrite:
            raise status.already_exists(resource, name)
        metadata = obj["metadata"]
        if not metadata.get("uid"):
            metadata["uid"] = str(uuid.UUID(int=self._random.getrandbits(128), version=4))
        if not metadata.get("creationTimestamp"):
            metadata["creationTimestamp"] = timestamp()
        strategy.prepare_create(resource, obj)
        if dry_run:
            return self._stamp(resource, obj, namespace, name, None)
        entry = self._stamp(resource, obj, namespace, name, self._next_rv())
        self._store(kind, entry, old)
        return entry

    def modify(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        mutate: Callable[[dict[str, Any]], Any],
        *,
        dry_run: bool = False,
    ) -> Entry:
        """Replace an object with `mutate(current)` (`dry_run`: answer it, store nothing).

        A `metadata.resourceVersion` in the result that differs from the stored one is a
        409 Conflict (the precondition of PUT, patches and applies that carry one);
        `_update_rv` says how it is read. Identity
        (name, namespace, uid, creationTimestamp) is kept and the kind's rules apply
        (`strategy`: generation, deletion fields, finalizers); a result equal to the current
        object writes nothing, as the real server does. An object being deleted that the
        result leaves without finalizers is removed (DELETED), and that result returned.
        """
        scope = _scope(resource, namespace)
        with self.lock:
            kind = self._kinds[resource]
            old = kind.find(scope, name)
            if old is None:
                raise status.not_found(resource, name)
            new = mutate(old.decode())
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise status.invalid(resource, name, "metadata: Required value")
            new.pop("kind", None)
            new.pop("apiVersion", None)
            metadata = new["metadata"]
            given = _update_rv(resource, name, metadata.get("resourceVersion"))
            if given and given != old.rv:
                raise status.conflict(resource, name)
            if metadata.get("name", name) != name:
                raise status.bad_request(
                    f"the name of the object ({metadata['name']}) does not match the name on "
                    f"the URL ({name})"
                )
            if resource.namespaced and metadata.get("namespace", scope) != scope:
                raise status.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            before = old.decode()
            kept = before["metadata"]
            metadata["name"] = name
            if resource.namespaced:
                metadata["namespace"] = scope
            else:
                metadata.pop("namespace", None)
            metadata["uid"] = old.uid
            if "creationTimestamp" in kept:
                metadata["creationTimestamp"] = kept["creationTimestamp"]
            metadata["resourceVersion"] = str(old.rv)
            strategy.prepare_update(resource, new, before)
            if new == before:
                return old
            if strategy.finalized(new):  # the last finalizer went: so does the object
                if not dry_run:
                    self._remove(kind, old)
                # The answer is the object as the write left it, at its last stored version.
                return self._stamp(resource, new, scope, name, old.rv)
            if dry_run:
                return self._stamp(resource, new, scope, name, old.rv)
            entry = self._stamp(resource, new, scope, name, self._next_rv())
            self._store(kind, entry, old)
            return entry

    def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        options: DeleteOptions = _BACKGROUND,
    ) -> tuple[Entry, bool]:
        """Delete an object: (its last state stamped with the delete's RV, True) when it
        goes at once; (the object marked for deletion, False) when finalizers (those it
        has, or `orphan`/`foregroundDeletion` the options add) or the namespace controller
        must act first. `options.dry_run`: answer the same, change nothing."""
        scope = _scope(resource, namespace)
        with self.lock:
            kind = self._kinds[resource]
            old = kind.find(scope, name)
            if old is None:
                raise status.not_found(resource, name)
            if options.uid and options.uid != old.uid:
                raise status.delete_precondition_failed(resource, name, "UID", options.uid, old.uid)
            given = options.resource_version
            if given and given != str(old.rv):
                raise status.delete_precondition_failed(
                    resource, name, "ResourceVersion", given, str(old.rv)
                )
            obj = old.decode()
            metadata = obj["metadata"]
            finalizers = options.finalizers(metadata.get("finalizers") or [])
            if finalizers:
                metadata["finalizers"] = finalizers
            if not strategy.waits_on_delete(resource, obj):
                if options.dry_run:
                    return old, True
                return self._remove(kind, old), True
            strategy.mark_deleting(resource, obj, timestamp())
            if obj == old.decode():
                return old, False
            if options.dry_run:
                return self._stamp(resource, obj, scope, name, old.rv), False
            entry = self._stamp(resource, obj, scope, name, self._next_rv())
            self._store(kind, entry, old)
            return entry, False

    def _remove(self, kind: _Kind, old: Entry) -> Entry:
        bucket = kind.objects[old.namespace]
        del bucket[old.name]
        if not bucket:
            del kind.objects[old.namespace]
        kind.order = None
        rv = self._next_rv()
        obj = old.decode()
        obj["metadata"]["resourceVersion"] = str(rv)
        gone = Entry(old.namespace, old.name, old.uid, rv, old.labels, old.fields, _encode(obj))
        self._record(kind, Change("DELETED", rv, gone, old, self._clock()))
        return gone

    def _identity(self, resource: Resource, obj: dict[str, Any]) -> tuple[str, str]:
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            raise status.invalid(resource, "", "metadata: Required value")
        name = metadata.get("name")
        if not name:
            prefix = metadata.get("generateName")
            if not prefix:
                raise status.invalid(
                    resource, "", "metadata.name: Required value: name or generateName is required"
                )
            name = prefix + "".join(self._random.choices(_SUFFIX_ALPHABET, k=5))
            metadata["name"] = name
        if not isinstance(name, str):
            raise status.invalid(resource, str(name), "metadata.name: must be a string")
        if resource.namespaced:
            namespace = metadata.get("namespace") or "default"
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
            namespace = ""
        return namespace, name

    def _stamp(
        self, resource: Resource, obj: dict[str, Any], namespace: str, name: str, rv: int | None
    ) -> Entry:
        """The entry for `obj` at `rv` (None: a dry-run create, which has no version yet)."""
        metadata = obj["metadata"]
        if rv is None:
            metadata.pop("resourceVersion", None)
        else:
            metadata["resourceVersion"] = str(rv)
        labels = metadata.get("labels")
        if not isinstance(labels, dict):
            labels = _NO_LABELS
        return Entry(
            namespace,
            name,
            metadata["uid"],
            rv or 0,
            labels,
            extract_fields(resource, obj),
            _encode(obj),
        )

    def _store(self, kind: _Kind, entry: Entry, old: Entry | None) -> None:
        bucket = kind.objects.get(entry.namespace)
        if bucket is None:
            bucket = kind.objects[entry.namespace] = {}
        bucket[entry.name] = entry
        if old is None:
            kind.order = None
            self._record(kind, Change("ADDED", entry.rv, entry, None, self._clock()))
        else:
            self._record(kind, Change("MODIFIED", entry.rv, entry, old, self._clock()))

    def _record(self, kind: _Kind, change: Change) -> None:
        history = kind.history
        if history.maxlen == 0:
            kind.floor = change.rv
        elif len(history) == history.maxlen:
            kind.floor = history[0].rv
        history.append(change)
        for subscription in kind.subscribers:
            subscription.queue.put(change)
        for observer in list(self._observers):
            observer(kind.resource, change)

    def _next_rv(self) -> int:
        self._rv += 1
        if self._waiting:
            self._advanced.notify_all()
        return self._rv

    def add_observer(self, observer: Callable[[Resource, Change], None]) -> None:
        """Call `observer` with every change recorded from now on, under the lock (the
        controllers' hook; an observer's own writes reach it too)."""
        with self.lock:
            self._observers.append(observer)

    def remove_observer(self, observer: Callable[[Resource, Change], None]) -> None:
        with self.lock:
            self._observers.remove(observer)

    # watching -----------------------------------------------------------------------------

    def subscribe(
        self, resource: Resource, namespace: str | None, since: int | None, bookmarks: bool
    ) -> tuple[Subscription, list[Change], list[Entry] | None, int]:
        """Open a watch: (mailbox, changes after `since` to replay, or the current objects
        when `since` is None, the current RV). 410 Expired when `since` is older than the
        history still kept."""
        with self.lock:
            kind = self._kinds[resource]
            initial: list[Entry] | None = None
            backlog: list[Change] = []
            self._expire(kind)
            if since is None:
                initial = self.snapshot(resource, namespace)[1]
            elif since < kind.floor:
                raise status.watch_expired(since, kind.floor + 1)
            else:
                backlog = [change for change in kind.history if change.rv > since]
            subscription = Subscription(resource, namespace, bookmarks)
            kind.subscribers.add(subscription)
            return subscription, backlog, initial, self._rv

    def wait_for_rv(self, rv: int, timeout: float) -> bool:
        """Block until the resourceVersion reaches `rv`, for at most `timeout` seconds;
        whether it did."""
        with self._advanced:
            self._waiting += 1
            try:
                return self._advanced.wait_for(lambda: self._rv >= rv, timeout)
            finally:
                self._waiting -= 1

    @property
    def waiting(self) -> int:
        """How many requests wait in `wait_for_rv`."""
        return self._waiting

    def unsubscribe(self, subscription: Subscription) -> None:
        with self.lock:
            self._kinds[subscription.resource].subscribers.discard(subscription)

    def request_bookmark(self, subscription: Subscription) -> None:
        with self.lock:
            subscription.queue.put(Bookmark(self._rv))

    def post(
        self, resource: Resource | None, item_for: Callable[[Subscription], object | None]
    ) -> int:
        """Put `item_for(subscription)` (unless None) into open watches of one kind or all."""
        posted = 0
        with self.lock:
            kinds = self._kinds.values() if resource is None else (self._kinds[resource],)
            for kind in kinds:
                for subscription in kind.subscribers:
                    item = item_for(subscription)
                    if item is not None:
                        subscription.queue.put(item)
                        posted += 1
        return posted

    def watch_count(self, resource: Resource | None = None) -> int:
        with self.lock:
            kinds = self._kinds.values() if resource is None else (self._kinds[resource],)
            return sum(len(kind.subscribers) for kind in kinds)

    # maintenance --------------------------------------------------------------------------

    def _expire(self, kind: _Kind) -> None:
        """Forget the changes older than `history_seconds`, as compaction would have."""
        horizon = self._clock() - self.history_seconds
        history = kind.history
        while history and history[0].at < horizon:
            kind.floor = max(kind.floor, history.popleft().rv)

    def compact(self, rv: int | None = None) -> int:
        """Forget history at or below `rv` (default: all of it); returns the compaction RV."""
        with self.lock:
            rv = self._rv if rv is None else min(rv, self._rv)
            for kind in self._kinds.values():
                while kind.history and kind.history[0].rv <= rv:
                    kind.history.popleft()
                kind.floor = max(kind.floor, rv)
            return rv

    def clear(self, last_item: object) -> None:
        """Drop every object and all history; the RV keeps counting up (it never goes back).
        Open watches get `last_item` and are forgotten at once, so `watch_count` counts
        only watches opened after this, however long their threads take to end."""
        with self.lock:
            for kind in self._kinds.values():
                kind.objects.clear()
                kind.history.clear()
                kind.order = None
                kind.floor = self._rv
            self.post(None, lambda _: last_item)
            for kind in self._kinds.values():
                kind.subscribers.clear()
            self.untracked.clear()


def _update_rv(resource: Resource, name: str, given: Any) -> int:
    """The resourceVersion an update names, 0 for none (an unconditional update), as the
    registry reads it (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go
    Update): with Go's ParseUint, whose error the API layer does not classify (500 without
    a reason); none, or 0, is a 422 for a kind that allows no unconditional update."""
    text = "" if given is None else str(given)
    number = 0
    if text:
        quoted = msgspec.json.encode(text).decode()
        if not (text.isascii() and text.isdigit()):
            raise status.ApiError(500, "", f"strconv.ParseUint: parsing {quoted}: invalid syntax")
        number = int(text)
        if number >= 1 << 64:
            raise status.ApiError(
                500, "", f"strconv.ParseUint: parsing {quoted}: value out of range"
            )
    if number == 0 and not resource.unconditional_update:
        # The registry names the kind by its resource (`leases`), as its TODO there admits.
        error = status.invalid_field(
            "metadata.resourceVersion", 0, "must be specified for an update"
        )
        raise status.invalid_of_kind(resource.group, resource.plural, name, [error])
    return number


def _scope(resource: Resource, namespace: str | None) -> str:
    return (namespace or "default") if resource.namespaced else ""
