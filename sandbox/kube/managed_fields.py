"""`metadata.managedFields`: which field manager last set which fields, kept on HTTP writes
as kube-apiserver keeps them for `Update` operations.

The manager is the `fieldManager` query parameter, else the User-Agent up to its first
"/" (`kubectl`, `python-httpx`), as upstream derives it. A create gives the manager every
field of the object. An update or patch (`Tracking`) starts from the object's entries, or
from the list the request itself left in `metadata.managedFields` when that list decodes
(a client may rewrite it: drop an entry, hand fields to another manager; a create may
carry one too); status subresource writes always start from the object's. The fields the
write changed go to its manager and are taken from the others, the fields it removed are
taken from every manager, and a manager left with no field is dropped. The manager's
entry gets the time of the write only when the write changed a field; every other entry
keeps its time. Status subresource writes are recorded with `subresource: status` and
cover only `.status`. Each entry has `operation: Update` (`Apply` for server-side apply,
`applying`), the resource's apiVersion, the time in whole seconds UTC, and `fieldsType:
FieldsV1`; the list is sorted as upstream encodes it (`ordered`: Apply before Update, then
by time, manager, apiVersion, subresource).

A list the client sent that does not decode (an operation other than Apply or Update, no
apiVersion, a fieldsType other than FieldsV1, a fieldsV1 that is no field set) is ignored
without an error: the write starts from the object's entries. An empty list (`[]`) or a
list of one empty entry (`[{}]`) in an update or patch resets: the object is left without
managedFields, even when the write changed fields. Upstream tracks no update of an object
that has no managedFields (a reset one, or one created with no field): its later updates
and patches record nothing, until a server-side apply, which first gives every field the
object has to `before-first-apply`. A write whose only change is the times of the entries
changes nothing. Sources: k8s.io/apimachinery/pkg/util/managedfields/internal
(fieldmanager.go decodeLiveOrNew and isResetManagedFields, managedfields.go,
skipnonapplied.go, managedfieldsupdater.go) and
https://kubernetes.io/docs/reference/using-api/server-side-apply/#field-management.

Simplified: a list is one field (upstream keys the items of associative lists, `k:{...}`),
and the `.` markers of upstream's field sets are not written, though those a client sent
are kept while their field is there. Entries of another apiVersion are taken as they are
(upstream converts the object to compare, and drops the whole list when it cannot), and a
manager name over 128 bytes is not refused. Objects seeded from Python carry no
managedFields and stand for objects a cluster would have tracked since their create: their
first HTTP write is tracked. Python-side writes record nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from sandbox.kube.resources import Resource
from sandbox.kube.store import timestamp
from sandbox.kube.strategy import OMITTED_WHEN_EMPTY

Path = tuple[str, ...]
Entry = dict[str, Any]
OPERATIONS = ("Apply", "Update")
# The manager upstream gives an untracked object's fields before its first apply.
BEFORE_FIRST_APPLY = "before-first-apply"
# ManagedFieldsEntry's fields, in the order Go writes them.
_KEYS = ("manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1", "subresource")
_SERVER_OWNED = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)


def manager(query: dict[str, str], user_agent: str | None) -> str:
    return query.get("fieldManager") or (user_agent or "").split("/")[0]


def on_create(resource: Resource, obj: dict[str, Any], name: str) -> None:
    """Record `name` as the manager of every field of a new object. A list the body carries
    that decodes (and does not reset) is kept, less those fields, as upstream starts a
    create from it as it starts an update."""
    sent = obj["metadata"].pop("managedFields", None)
    base = decoded(sent) if sent is not None and not _is_reset(sent) else None
    owned = set(leaves(obj, status_only=False))
    added = set(_nodes(obj, status_only=False))
    entries = _moved(resource, name, None, base or [], owned, set(), added)
    _set(obj, entries)


class Tracking:
    """The store's mutate for an update or patch by manager `name`: `mutate`, then the
    object's managedFields as that write leaves them. `untracked` holds the uids of the
    objects a request left without managedFields, which upstream tracks no update of
    (skipnonapplied.go); once the store kept the write, `record` notes there whether it
    left its object so. Objects seeded from Python, which never had entries, are not in it."""

    def __init__(
        self,
        resource: Resource,
        name: str,
        status_only: bool,
        mutate: Callable[[dict[str, Any]], dict[str, Any]],
        untracked: set[str],
    ) -> None:
        self._resource = resource
        self._name = name
        self._status_only = status_only
        self._mutate = mutate
        self._untracked = untracked
        self._outcome: tuple[str, bool] | None = None  # (uid, left untracked)

    def __call__(self, current: dict[str, Any]) -> dict[str, Any]:
        status_only = self._status_only
        uid = str(current["metadata"].get("uid") or "")
        live: list[Entry] = current["metadata"].get("managedFields") or []
        before = leaves(current, status_only)
        before_nodes = set(_nodes(current, status_only))
        new = self._mutate(current)
        # A status write keeps the object's metadata, so its list is the object's.
        sent = None if status_only else new["metadata"].get("managedFields")
        reset = sent is not None and _is_reset(sent)
        base: list[Entry] = []
        if not reset:
            # The list sent when it decodes, else the object's (entries seeded from Python
            # that upstream could not decode are taken as they are).
            base = (decoded(sent) if sent is not None else None) or decoded(live) or list(live)
        if not base and (reset or uid in self._untracked):
            new["metadata"].pop("managedFields", None)
            self._outcome = (uid, True)
            return new
        after = leaves(new, status_only)
        after_nodes = set(_nodes(new, status_only))
        changed = {path for path, value in after.items() if before.get(path, _GONE) != value}
        gone = before_nodes - after_nodes
        if sent is None and not changed and not gone:  # a no-op write stays one
            _set(new, live)
            return new
        subresource = "status" if status_only else None
        # Others lose the fields it changed or removed, and the `.` of maps it added.
        taken = changed | gone | (after_nodes - before_nodes)
        entries = _moved(self._resource, self._name, subresource, base, changed, gone, taken)
        if not changed and not gone and _same_but_times(entries, live):
            entries = live  # upstream keeps the times, so that the write is a no-op
        _set(new, entries)
        if entries:
            self._outcome = (uid, False)
        elif base:  # the write removed the last field any manager had
            self._outcome = (uid, True)
        return new

    def record(self) -> None:
        """The write was stored: remember whether it left its object untracked."""
        if self._outcome is None or not self._outcome[0]:
            return
        uid, untracked = self._outcome
        if untracked:
            self._untracked.add(uid)
        else:
            self._untracked.discard(uid)


_GONE = object()


def _moved(
    resource: Resource,
    name: str,
    subresource: str | None,
    base: list[Entry],
    changed: set[Path],
    gone: set[Path],
    taken: set[Path],
) -> list[Entry]:
    """The entries `base` once manager `name` changed the fields `changed` and removed those
    at `gone`: every other manager loses what is at `taken`, `name` loses what is at `gone`
    and gains `changed`, and a manager left with nothing is dropped
    (structured-merge-diff's Updater.Update)."""
    me = (name, "Update", resource.api_version, subresource or "")
    kept: list[Entry] = []
    mine: Entry | None = None
    for old in base:
        tree = old.get("fieldsV1") or {}
        if identity(old) == me:
            mine = {**old, "fieldsV1": pruned(tree, gone)}
        elif fields := pruned(tree, taken):
            kept.append({**old, "fieldsV1": fields})
    if changed:  # it took fields: its entry has the time of this write (else it keeps its own)
        fields = _union(mine["fieldsV1"] if mine else {}, fields_v1(changed))
        mine = entry(resource, name, subresource, (), fields=fields)
    if mine is not None and mine["fieldsV1"]:
        kept.append(mine)
    return ordered(kept)


def _set(obj: dict[str, Any], entries: list[Entry]) -> None:
    if entries:
        obj["metadata"]["managedFields"] = entries
    else:
        obj["metadata"].pop("managedFields", None)


def entry(
    resource: Resource,
    name: str,
    subresource: str | None,
    owned: Iterable[Path],
    operation: str = "Update",
    *,
    fields: dict[str, Any] | None = None,
    time: str | None = "",
) -> Entry:
    """One managedFields entry: `name` owns `owned` (or the FieldsV1 set `fields`) through
    `operation`, as of `time` (by default now; None: without a time)."""
    made: Entry = {"manager": name, "operation": operation, "apiVersion": resource.api_version}
    if time is not None:
        made["time"] = time or timestamp()
    made["fieldsType"] = "FieldsV1"
    made["fieldsV1"] = fields if fields is not None else fields_v1(set(owned))
    if subresource:
        made["subresource"] = subresource
    return made


def identity(entry: Entry) -> tuple[str, str, str, str]:
    """What tells entries apart upstream (BuildManagerIdentifier): the manager, operation
    and subresource, and for an update the apiVersion too."""
    version = "" if entry.get("operation") == "Apply" else entry.get("apiVersion") or ""
    return (
        entry.get("manager") or "",
        entry.get("operation") or "",
        version,
        entry.get("subresource") or "",
    )


def ordered(entries: Iterable[Entry]) -> list[Entry]:
    """The entries in the order upstream encodes them (sortEncodedManagedFields): Apply
    before Update, then by time in whole seconds (none first), manager, apiVersion,
    subresource."""

    def key(entry: Entry) -> tuple[str, float, str, str, str]:
        return (
            entry.get("operation") or "",
            _seconds(entry.get("time")),
            entry.get("manager") or "",
            entry.get("apiVersion") or "",
            entry.get("subresource") or "",
        )

    return sorted(entries, key=key)


def decoded(entries: Any) -> list[Entry] | None:
    """A managedFields list as upstream decodes it (DecodeManagedFields): each entry with its
    known fields only, its time in whole seconds UTC, a later entry of the same identity in
    place of an earlier one; or None when upstream cannot decode it (an operation other
    than Apply or Update, no apiVersion, a fieldsType other than FieldsV1, a fieldsV1 that
    is no field set)."""
    if not isinstance(entries, list):
        return None
    found: dict[tuple[str, str, str, str], Entry] = {}
    for item in entries:
        if not isinstance(item, dict):
            return None
        fields = item.get("fieldsV1")
        fields = {} if fields is None else fields
        if (
            item.get("operation") not in OPERATIONS
            or not item.get("apiVersion")
            or item.get("fieldsType") != "FieldsV1"
            or not _is_field_set(fields)
        ):
            return None
        clean: Entry = {}
        for key in _KEYS:
            value = _sorted(fields) if key == "fieldsV1" else item.get(key)
            if key == "time":
                value = _whole_seconds(value)
            if value not in (None, "") or key == "fieldsV1":
                clean[key] = value
        found[identity(clean)] = clean
    return list(found.values())


def _is_reset(entries: Any) -> bool:
    """Upstream's isResetManagedFields: an empty list, or one entry with nothing in it."""
    if entries == []:
        return True
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        return False
    return all(entries[0].get(key) in (None, "") for key in _KEYS)


def _is_field_set(tree: Any) -> bool:
    """Whether `tree` reads as a FieldsV1 set: members `f:<name>`, `k:<json object>`,
    `v:<json>`, `i:<index>` and `.`, each an object."""
    if not isinstance(tree, dict):
        return False
    for key, child in tree.items():
        if not isinstance(child, dict):
            return False
        if key == ".":
            continue
        kind, _, rest = key.partition(":")
        if kind == "k" or kind == "v":
            try:
                value = json.loads(rest)
            except ValueError:
                return False
            if kind == "k" and not isinstance(value, dict):
                return False
        elif kind == "i":
            if not rest.isdigit():
                return False
        elif kind != "f" or not key.startswith("f:"):
            return False
        if not _is_field_set(child):
            return False
    return True


def _whole_seconds(value: Any) -> Any:
    """A time as Go writes a metav1.Time: UTC, whole seconds (a value that does not parse
    is left for validation to refuse)."""
    if not isinstance(value, str):
        return value
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if moment.tzinfo is None:
        return value
    return timestamp(moment.astimezone(UTC))


def _seconds(value: Any) -> float:
    if not isinstance(value, str):
        return 0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0


def _same_but_times(entries: list[Entry], live: list[Entry]) -> bool:
    """Whether two lists differ at most in their times, entry by entry (as upstream's
    IgnoreManagedFieldsTimestampsTransformer compares them)."""
    if not entries or len(entries) != len(live):
        return False

    def untimed(entry: Entry) -> Entry:
        return {key: value for key, value in entry.items() if key != "time"}

    return all(untimed(a) == untimed(b) for a, b in zip(entries, live, strict=True))


def leaves(obj: dict[str, Any], status_only: bool) -> dict[Path, Any]:
    """Each field of `obj` a manager can own, by its path, with its value."""
    return {path: value for path, value, leaf in _walk(obj, status_only) if leaf}


def _nodes(obj: dict[str, Any], status_only: bool) -> Iterator[Path]:
    """The path of every field of `obj` a manager can own, maps included."""
    return (path for path, _, _ in _walk(obj, status_only))


def _walk(obj: dict[str, Any], status_only: bool) -> Iterator[tuple[Path, Any, bool]]:
    """(path, value, whether it is a leaf) of each field a manager can own: a non-empty map
    is a field and so is each of its members; anything else is a leaf."""

    def walk(value: Any, path: Path) -> Iterator[tuple[Path, Any, bool]]:
        if isinstance(value, dict) and value:
            yield path, value, False
            for key, child in value.items():
                yield from walk(child, (*path, key))
        else:
            yield path, value, True

    for key, value in obj.items():
        if key in ("kind", "apiVersion") or (key == "status") != status_only:
            continue
        if key == "metadata" and isinstance(value, dict):
            for field, child in value.items():
                # An empty `omitempty` list or map of ObjectMeta is not there (strategy).
                if field not in _SERVER_OWNED and (child or field not in OMITTED_WHEN_EMPTY):
                    yield from walk(child, ("metadata", field))
        else:
            yield from walk(value, (key,))


def fields_v1(owned: set[Path]) -> dict[str, Any]:
    """The FieldsV1 set naming `owned`."""
    tree: dict[str, Any] = {}
    for path in sorted(owned):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def paths(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    """The fields a FieldsV1 set names."""
    found: set[Path] = set()
    for key, child in tree.items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        found |= paths(child, path) if child else {path}
    return found


def pruned(tree: dict[str, Any], dropped: set[Path], prefix: Path = ()) -> dict[str, Any]:
    """The FieldsV1 set `tree` without the fields at `dropped`: a dropped leaf goes, a
    dropped map loses its `.` and keeps what it names under it that is not dropped (a
    field a client listed that the object never had stays, as upstream keeps it); a map
    with no named field under it (a list's items, `k:{...}`) goes whole, as the fake's
    lists are one field."""
    kept: dict[str, Any] = {}
    for key, child in tree.items():
        if key == ".":
            if prefix not in dropped:
                kept[key] = child
            continue
        if not key.startswith("f:"):
            kept[key] = child
            continue
        path = (*prefix, key[2:])
        if path in dropped and not any(name.startswith("f:") for name in child):
            continue
        if not child:
            kept[key] = child
        elif rest := pruned(child, dropped, path):
            kept[key] = rest
    return kept


def _union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The FieldsV1 set naming what either names."""
    merged = dict(a)
    for key, child in b.items():
        merged[key] = _union(merged[key], child) if key in merged else child
    return _sorted(merged)


def _sorted(tree: dict[str, Any]) -> dict[str, Any]:
    """A FieldsV1 set with its members in the order upstream writes them: `.` first."""
    return {key: _sorted(tree[key]) for key in sorted(tree, key=lambda key: (key != ".", key))}
