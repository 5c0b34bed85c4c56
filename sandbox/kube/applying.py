"""Server-side apply: `PATCH` with `application/apply-patch+yaml`, as kube-apiserver runs it.

A field manager (the `fieldManager` parameter, required: 422 without it) sends the fields it
wants to own with their values. Against an object that does not exist the apply creates
it (201); otherwise the configuration is merged into the object (maps key by key, any other
value replaced), and each field the manager applied before but applies no more, and that
no other manager owns, is removed. A field applied with a value other than the object's,
owned by another manager (by apply or by update), is a conflict: 409 `Conflict`, one
`FieldManagerConflict` cause per field, worded as upstream (`Apply failed with 1 conflict:
conflict with "kubectl-create" using v1: .data.mode`; `using v1` only for a manager that
updated); with `force=true` the fields move to the applier instead. A field applied with
the value it has is shared. The manager's entry in `managedFields` has `operation: Apply`
and the fields it applied, and the time of the apply only when the apply changed the object
(otherwise the time it had: none, for a new entry, as upstream's managedFieldsUpdater);
the entries are sorted as `managed_fields.ordered` says. A configuration that carries
`metadata.managedFields` (even `[]`) is refused: 400 `metadata.managedFields must be nil`.
A `metadata.resourceVersion` in it is a precondition, as for any update (`Store.modify`:
409 `Conflict` when stale, checked after the field conflicts, dryRun or force alike; it is
ignored when the apply creates the object). An object a request left without
managedFields (`managed_fields.Tracking`) gets, before the apply, an `Update` entry of
`before-first-apply` owning every field it has, as upstream's skipNonAppliedManager gives
it, so the apply conflicts with it on fields it sets to other values.

Simplified as `managed_fields` is: a list is one field, so applying a list replaces it
whole (upstream merges the items of associative lists such as containers by their key and
writes `k:{...}` and `.` markers). Source:
https://kubernetes.io/docs/reference/using-api/server-side-apply/.
"""

from __future__ import annotations

import copy
from typing import Any

from sandbox.kube import managed_fields, status
from sandbox.kube.managed_fields import Path
from sandbox.kube.resources import Resource

MEDIA_TYPE = "application/apply-patch+yaml"
OPERATION = "Apply"
_GONE = object()


def manager(query: dict[str, str]) -> str:
    """The applier; ApiError 422 when the request names none."""
    name = query.get("fieldManager", "")
    if not name:
        error = status.required_field("fieldManager", "is required for apply patch")
        raise status.invalid_options("PatchOptions", [error])
    return name


def apply(
    resource: Resource,
    config: dict[str, Any],
    current: dict[str, Any] | None,
    name: str,
    *,
    force: bool,
    untracked: bool = False,
) -> dict[str, Any]:
    """The object once `name` applied `config` to `current` (None: it does not exist yet),
    with its managedFields; ApiError 409 for conflicts unless `force`, 400 for a config
    that carries managedFields. `untracked`: `current` is an object a request left without
    managedFields, whose fields go to `before-first-apply` first."""
    if (config.get("metadata") or {}).get("managedFields") is not None:
        raise status.bad_request("metadata.managedFields must be nil")
    wanted = managed_fields.leaves(config, status_only=False)
    live = managed_fields.leaves(current, status_only=False) if current else {}
    entries: list[dict[str, Any]] = (current or {}).get("metadata", {}).get("managedFields") or []
    if current is not None and not entries and untracked:
        # skipnonapplied.go: an update from nothing to the object by that manager first.
        first = managed_fields.entry(resource, managed_fields.BEFORE_FIRST_APPLY, None, live)
        entries = [first] if live else []
    mine = next((e for e in entries if _is_mine(e, name)), None)
    others = [e for e in entries if e is not mine]
    conflicts = [
        (entry, path)
        for entry in others
        if not entry.get("subresource")
        for path in sorted(managed_fields.paths(entry.get("fieldsV1") or {}) & set(wanted))
        if live.get(path, _GONE) != wanted[path]
    ]
    if conflicts and not force:
        raise _conflict(conflicts)
    taken = {path for _, path in conflicts}
    kept = []
    still_owned: set[Path] = set()
    for entry in others:
        fields = managed_fields.pruned(entry.get("fieldsV1") or {}, taken)
        if fields:
            kept.append({**entry, "fieldsV1": fields})
            still_owned |= managed_fields.paths(fields)
    before = managed_fields.paths(mine.get("fieldsV1") or {}) if mine else set()
    new = _merged(copy.deepcopy(current) if current else {}, config)
    for path in sorted(before - set(wanted) - still_owned, reverse=True):
        _remove(new, path)
    # managedfieldsupdater.go: the applier's entry has the time of an apply that changed the
    # object; otherwise it keeps the one it had (none, for a new entry).
    changed = current is None or managed_fields.leaves(new, status_only=False) != live
    if changed:
        entry = managed_fields.entry(resource, name, None, set(wanted), OPERATION)
    elif mine is not None and before == set(wanted):
        entry = mine
    else:
        time = mine.get("time") if mine else None
        entry = managed_fields.entry(resource, name, None, set(wanted), OPERATION, time=time)
    new.setdefault("metadata", {})["managedFields"] = managed_fields.ordered(
        [*kept, entry] if wanted else kept
    )
    if not new["metadata"]["managedFields"]:
        del new["metadata"]["managedFields"]
    return new


def _is_mine(entry: dict[str, Any], name: str) -> bool:
    return (
        entry.get("manager") == name
        and entry.get("operation") == OPERATION
        and not entry.get("subresource")
    )


def _merged(base: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    for key, value in config.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merged(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _remove(obj: dict[str, Any], path: Path) -> None:
    """Remove the field at `path`, and each map left empty by it (as a map is only there
    for the fields in it)."""
    parents = [obj]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)
    for depth in range(len(parents) - 1, 0, -1):
        if parents[depth]:
            break
        parents[depth - 1].pop(path[depth - 1], None)


def _conflict(conflicts: list[tuple[dict[str, Any], Path]]) -> status.ApiError:
    """409 as structured-merge-diff's ConflictError and the apply handler word it."""
    by_manager: dict[str, list[str]] = {}
    causes = []
    for entry, path in conflicts:
        who = f'"{entry.get("manager", "")}"'
        if entry.get("operation") != OPERATION:
            who += f" using {entry.get('apiVersion', '')}"
        field = "".join(f".{key}" for key in path)
        by_manager.setdefault(who, []).append(field)
        cause = {"reason": "FieldManagerConflict", "message": f"conflict with {who}"}
        causes.append(cause | {"field": field})
    parts = []
    for who, fields in by_manager.items():
        if len(fields) == 1:
            parts.append(f"conflict with {who}: {fields[0]}")
        else:
            parts.append(f"conflicts with {who}:\n" + "\n".join(f"- {f}" for f in fields))
    count = len(conflicts)
    message = f"Apply failed with {count} conflict{'s' if count > 1 else ''}: " + "\n".join(parts)
    return status.ApiError(409, "Conflict", message, details={"causes": causes})
