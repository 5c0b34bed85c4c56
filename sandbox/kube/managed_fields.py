"""`metadata.managedFields`: which field manager last set which fields, kept on HTTP writes
as kube-apiserver keeps them for `Update` operations.

The manager is the `fieldManager` query parameter, else the User-Agent up to its first
"/" (`kubectl`, `python-httpx`), as upstream derives it. A create gives the manager every
field of the object; an update or patch gives it the fields it changed and takes those
from the other managers; a manager left with no field is dropped. Status subresource
writes are recorded with `subresource: status` and cover only `.status`. Each entry has
`operation: Update` (`Apply` for server-side apply, `applying`), the resource's
apiVersion, the time, and `fieldsType: FieldsV1`.

Simplified: a list is one field (upstream keys the items of associative lists, `k:{...}`),
and the `.` markers of upstream's field sets are not written. Python-side writes record
nothing. Source:
https://kubernetes.io/docs/reference/using-api/server-side-apply/#field-management.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sandbox.kube.resources import Resource
from sandbox.kube.store import timestamp

Path = tuple[str, ...]
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
    """Record `name` as the manager of every field of a new object."""
    owned = leaves(obj, status_only=False)
    obj["metadata"].pop("managedFields", None)
    if owned:
        obj["metadata"]["managedFields"] = [entry(resource, name, None, owned)]


def tracking(
    resource: Resource,
    name: str,
    status_only: bool,
    mutate: Callable[[dict[str, Any]], dict[str, Any]],
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """`mutate`, followed by moving the fields it changed to manager `name`."""

    def run(current: dict[str, Any]) -> dict[str, Any]:
        before = leaves(current, status_only)
        entries = current["metadata"].get("managedFields") or []
        new = mutate(current)
        after = leaves(new, status_only)
        changed = {path for path, value in after.items() if before.get(path, _GONE) != value}
        removed = set(before) - set(after)
        if not changed and not removed:  # a no-op write stays one
            _set(new, entries)
            return new
        subresource = "status" if status_only else None
        kept = []
        mine: set[Path] = set()
        for old in entries:
            fields = paths(old.get("fieldsV1") or {}) - changed - removed
            if (old.get("manager"), old.get("operation"), old.get("subresource")) == (
                name,
                "Update",
                subresource,
            ):
                mine = fields
            elif fields:
                kept.append({**old, "fieldsV1": fields_v1(fields)})
        mine |= changed
        if mine:
            kept.append(entry(resource, name, subresource, dict.fromkeys(mine)))
        _set(new, kept)
        return new

    return run


_GONE = object()


def _set(obj: dict[str, Any], entries: list[dict[str, Any]]) -> None:
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
) -> dict[str, Any]:
    """One managedFields entry: `name` owns `owned` through `operation`, as of now."""
    made = {
        "manager": name,
        "operation": operation,
        "apiVersion": resource.api_version,
        "time": timestamp(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1(set(owned)),
    }
    if subresource:
        made["subresource"] = subresource
    return made


def leaves(obj: dict[str, Any], status_only: bool) -> dict[Path, Any]:
    """Each field of `obj` a manager can own, by its path, with its value."""
    found: dict[Path, Any] = {}

    def walk(value: Any, path: Path) -> None:
        if isinstance(value, dict) and value:
            for key, child in value.items():
                walk(child, (*path, key))
        else:
            found[path] = value

    for key, value in obj.items():
        if key in ("kind", "apiVersion") or (key == "status") != status_only:
            continue
        if key == "metadata" and isinstance(value, dict):
            for field, child in value.items():
                if field not in _SERVER_OWNED:
                    walk(child, ("metadata", field))
        else:
            walk(value, (key,))
    return found


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
