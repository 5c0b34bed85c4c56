"""LIST answers: consistent pages cut from one snapshot, with opaque continue tokens.

The first page of a paginated list freezes the matching objects (references to immutable
stored entries, so a snapshot of 50,000 pods costs one list of pointers) together with the
RV it was taken at; every later page of that list is cut from the same snapshot, so all
pages are consistent with the first one, as the real server guarantees. A `Page` is written
as the stored bytes of its items joined (or their stored metadata, for a metadata-only
list): nothing is re-encoded per request.

A continue token names its snapshot and position. Snapshots are kept for a bounded number
of lists (oldest forgotten first), also after their last page was served: a real server's
token stays valid until etcd compacts its revision, so a client may ask for the same page
again (one it gave up while reading, to ask for fewer objects). A token whose snapshot is
gone (forgotten, compacted, older than the store's `history_seconds`, or expired on purpose
with `expire_all()`) is answered 410
`Expired`, carrying a fresh token that continues from the same key in the current state,
as the real server does. A token that does not decode is a 400.

A list at an exact resourceVersion (`resourceVersionMatch=Exact`) is rebuilt from the
store's change history and paged the same way.

A hostile server's list that never ends (`endless`, one of `faults.ENDLESS_LIST_MODES`) is
cut the same way, but its last page carries a continue token too: the one it was asked with,
or one that starts the same snapshot over under a new name.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from sandbox.kube import status
from sandbox.kube.resources import Resource
from sandbox.kube.selectors import FieldSelector, LabelSelector
from sandbox.kube.store import Entry, Store

Matcher = Callable[[Entry], bool]


class _Token(msgspec.Struct, omit_defaults=True):
    v: str
    rv: int
    start: str
    snap: int = 0
    pos: int = 0


@dataclass(frozen=True, slots=True)
class Page:
    """One list answer's objects and list metadata."""

    rv: int
    entries: list[Entry]
    continue_token: str | None
    remaining: int | None  # remainingItemCount: known only when no selector filtered

    def metadata(self) -> str:
        """The list metadata's members (JSON, without the braces)."""
        metadata = f'"resourceVersion":"{self.rv}"'
        if self.continue_token is not None:
            metadata += f',"continue":"{self.continue_token}"'
        if self.remaining is not None:
            metadata += f',"remainingItemCount":{self.remaining}'
        return metadata

    def body(self, kind: str, api_version: str, items: bytes | None) -> bytes:
        """The list answer around `items` (the joined item bytes; None writes `null`)."""
        metadata = self.metadata()
        head = f'{{"kind":"{kind}","apiVersion":"{api_version}","metadata":{{{metadata}}},"items":'
        listed = b"null" if items is None else b"[%s]" % items
        return b"".join((head.encode(), listed, b"}"))


@dataclass(slots=True)
class _Snapshot:
    rv: int
    entries: list[Entry]
    filtered: bool
    taken: float  # on the store's clock: etcd compacts its revision after a while


def matcher(labels: LabelSelector | None, fields: FieldSelector | None) -> Matcher | None:
    if labels is None and fields is None:
        return None
    if fields is None:
        assert labels is not None
        return lambda entry: labels.matches(entry.labels)
    if labels is None:
        return lambda entry: fields.matches(entry.namespace, entry.name, entry.fields)
    return lambda entry: (
        labels.matches(entry.labels) and fields.matches(entry.namespace, entry.name, entry.fields)
    )


def _key(entry: Entry) -> str:
    return f"{entry.namespace}/{entry.name}" if entry.namespace else entry.name


def _encode_token(rv: int, start: str, snap: int, pos: int) -> str:
    raw = msgspec.json.encode(_Token("meta.k8s.io/v1", rv, start + "\x00", snap, pos))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str) -> _Token:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        return msgspec.json.decode(raw, type=_Token)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise status.bad_request(
            f"continue key is not valid: {token!r} could not be decoded"
        ) from None


class Pager:
    """Cuts list pages; remembers the snapshots behind outstanding continue tokens."""

    def __init__(self, store: Store, max_snapshots: int = 32) -> None:
        self._store = store
        self._max = max_snapshots
        self._snapshots: OrderedDict[int, _Snapshot] = OrderedDict()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def expire_all(self) -> int:
        """Forget every snapshot: every outstanding continue token now answers 410."""
        with self._lock:
            count = len(self._snapshots)
            self._snapshots.clear()
            return count

    def outstanding(self) -> int:
        with self._lock:
            return len(self._snapshots)

    def page(
        self,
        resource: Resource,
        namespace: str | None,
        match: Matcher | None,
        limit: int | None,
        token: str | None,
        at: int | None = None,
        endless: str | None = None,
    ) -> Page:
        """A page of the objects now, or as they were at resourceVersion `at` (Exact); with
        `endless`, the list never ends (see the module docstring)."""
        if token:
            snapshot_id, snapshot, position = self._resume(resource, namespace, match, token)
        else:
            if at is None:
                rv, entries = self._store.snapshot(resource, namespace)
            else:
                rv, entries = at, self._store.snapshot_at(resource, namespace, at)
            if match is not None:
                entries = [entry for entry in entries if match(entry)]
            snapshot_id, snapshot, position = (
                0,
                _Snapshot(rv, entries, match is not None, self._store.now()),
                0,
            )
        entries = snapshot.entries
        end = len(entries) if not limit or limit <= 0 else min(len(entries), position + limit)
        next_token = None
        remaining = None
        if end < len(entries):
            if not snapshot_id:
                snapshot_id = self._keep(snapshot)
            next_token = _encode_token(
                snapshot.rv, _key(entries[end - 1]) if end else "", snapshot_id, end
            )
            if not snapshot.filtered:
                remaining = len(entries) - end
        elif endless == "repeat" and token:
            next_token = token
        elif endless is not None:
            next_token = _encode_token(snapshot.rv, "", self._keep(snapshot), 0)
            remaining = None if snapshot.filtered else 0
        if endless == "uncounted":
            remaining = None
        return Page(snapshot.rv, entries[position:end], next_token, remaining)

    def _keep(self, snapshot: _Snapshot) -> int:
        with self._lock:
            snapshot_id = next(self._ids)
            self._snapshots[snapshot_id] = snapshot
            while len(self._snapshots) > self._max:
                self._snapshots.popitem(last=False)
            return snapshot_id

    def _resume(
        self, resource: Resource, namespace: str | None, match: Matcher | None, token: str
    ) -> tuple[int, _Snapshot, int]:
        decoded = _decode_token(token)
        with self._lock:
            snapshot = self._snapshots.get(decoded.snap)
            if snapshot is not None:
                self._snapshots.move_to_end(decoded.snap)
        if (
            snapshot is not None
            and decoded.rv == snapshot.rv
            and self._store.now() - snapshot.taken <= self._store.history_seconds
        ):
            return decoded.snap, snapshot, min(decoded.pos, len(snapshot.entries))
        raise status.continue_expired(self._fresh_token(resource, namespace, match, decoded))

    def _fresh_token(
        self, resource: Resource, namespace: str | None, match: Matcher | None, old: _Token
    ) -> str | None:
        """A token continuing after the old one's last key, in today's state (inconsistent)."""
        rv, entries = self._store.snapshot(resource, namespace)
        if match is not None:
            entries = [entry for entry in entries if match(entry)]
        last = old.start.rstrip("\x00")
        position = next((i for i, entry in enumerate(entries) if _key(entry) > last), len(entries))
        if position >= len(entries):
            return None
        snapshot_id = self._keep(_Snapshot(rv, entries, match is not None, self._store.now()))
        return _encode_token(rv, last, snapshot_id, position)
