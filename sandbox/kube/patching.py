"""The three patch formats the API server accepts, applied to plain JSON documents.

- JSON merge patch (RFC 7386): objects merge recursively, `null` removes, anything else
  (lists included) replaces.
- Strategic merge patch, for the fields the agent and its tests use: lists of objects are
  merged by their merge key (`name` for containers, env, volumes...; `containerPort` or
  `port` for ports; `mountPath`, `type`, `uid` for a few others; and, by default, `name`
  whenever every item has one); `finalizers` merge as a set; `$patch: delete|replace`
  and `$deleteFromPrimitiveList/...` work; `$setElementOrder/...` and `$retainKeys` are
  accepted. Lists without a merge key are replaced, as the real server does.
- JSON patch (RFC 6902): add, remove, replace, move, copy, test with JSON pointers.

Documents are never mutated in place except by `json_patch`, which works on the copy it is
given. A patch that cannot apply raises `PatchError`; the HTTP layer answers 422.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """The patch is well-formed JSON but cannot be applied to this document."""


# --- JSON merge patch ----------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge patch -----------------------------------------------------------------

# Field name -> merge key, for lists whose items have no `name` or merge by something else.
_MERGE_KEYS = {
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "readinessGates": "conditionType",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of plain values that merge as a set instead of being replaced.
_PRIMITIVE_MERGE = frozenset({"finalizers"})
_DIRECTIVE = "$patch"


def _merge_key(field: str, items: list[Any]) -> str | None:
    dicts = [item for item in items if isinstance(item, dict)]
    if len(dicts) != len(items) or not dicts:
        return None
    if field == "ports":
        for key in ("containerPort", "port"):
            if all(key in item or item.get(_DIRECTIVE) for item in dicts):
                return key
        return None
    key = _MERGE_KEYS.get(field, "name")
    if all(key in item or item.get(_DIRECTIVE) for item in dicts):
        return key
    return None


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return {k: v for k, v in patch.items() if k != _DIRECTIVE}
    if directive == "delete":
        return _DELETE
    if directive is not None:
        raise PatchError(f"unknown patch directive {directive!r}")
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    deletions: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            deletions[key.split("/", 1)[1]] = value if isinstance(value, list) else [value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        merged = _merge_value(key, result.get(key), value)
        if merged is _DELETE:
            result.pop(key, None)
        else:
            result[key] = merged
    for key, unwanted in deletions.items():
        if isinstance(result.get(key), list):
            result[key] = [item for item in result[key] if item not in unwanted]
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


class _Deleted:
    __slots__ = ()


_DELETE = _Deleted()


def _merge_value(field: str, current: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return strategic_merge_patch(current, value)
    if isinstance(value, list):
        if field in _PRIMITIVE_MERGE and isinstance(current, list):
            return current + [item for item in value if item not in current]
        if isinstance(current, list):
            key = _merge_key(field, value + current)
            if key is not None:
                return _merge_list(current, value, key)
        return _strip_directives(value)
    return value


def _merge_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
        return _strip_directives([item for item in patch if item.get(_DIRECTIVE) != "replace"])
    result = list(current)
    for item in patch:
        position = next((i for i, old in enumerate(result) if old.get(key) == item.get(key)), None)
        if item.get(_DIRECTIVE) == "delete":
            result = [old for old in result if old.get(key) != item.get(key)]
        elif position is None:
            result.append(strategic_merge_patch(None, item))
        else:
            result[position] = strategic_merge_patch(result[position], item)
    return _in_upstream_order(result, patch, current, key)


def _in_upstream_order(
    merged: list[Any], patch: list[Any], current: list[Any], key: str
) -> list[Any]:
    """The merged items in the order upstream gives them (normalizeElementOrder in
    apimachinery's strategicpatch): the patch's items in patch order and the others in
    their old order, interleaved so that two items the old list had keep its order, and
    a new item goes before the old one it meets."""
    named = [item.get(key) for item in patch if item.get(_DIRECTIVE) != "delete"]
    patched = sorted(
        (item for item in merged if item.get(key) in named), key=lambda i: named.index(i.get(key))
    )
    others = [item for item in merged if item.get(key) not in named]
    old = {item.get(key): index for index, item in enumerate(current)}
    ordered: list[Any] = []
    while patched and others:
        mine, theirs = old.get(patched[0].get(key)), old[others[0].get(key)]
        source = others if mine is not None and theirs < mine else patched
        ordered.append(source.pop(0))
    return ordered + patched + others


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(item) for item in value]
    return value


# --- JSON patch ----------------------------------------------------------------------------


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise PatchError(f"a JSON pointer must be a string, got {path!r}")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if token == "-" and for_add:
        return len(container)
    if not token.isdigit() or (token.startswith("0") and token != "0"):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not for_add):
        raise PatchError(f"array index {index} is out of range")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path element {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise PatchError(f"cannot descend into a scalar at {token!r}")
    return node


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path element {last!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise PatchError(f"cannot read {last!r} from a scalar")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise PatchError(f"cannot add {last!r} to a scalar")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path element {last!r} does not exist")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, for_add=False)]
    else:
        raise PatchError(f"cannot remove {last!r} from a scalar")
    return doc


def _replace(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path element {last!r} does not exist")
        parent[last] = value
    elif isinstance(parent, list):
        parent[_index(parent, last, for_add=False)] = value
    else:
        raise PatchError(f"cannot replace {last!r} in a scalar")
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    # Python's 1 == True must not make a JSON test pass.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations to `doc` (modified in place and returned)."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation:
            raise PatchError(f"invalid JSON patch operation {operation!r}")
        op, tokens = operation["op"], _pointer(operation.get("path"))
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f"{op} operation needs a value")
        if op == "add":
            doc = _add(doc, tokens, copy.deepcopy(operation["value"]))
        elif op == "remove":
            doc = _remove(doc, tokens)
        elif op == "replace":
            doc = _replace(doc, tokens, copy.deepcopy(operation["value"]))
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from"))
            value = _get(doc, source)
            if op == "move":
                if tokens[: len(source)] == source and len(tokens) > len(source):
                    raise PatchError("cannot move a value into one of its children")
                doc = _remove(doc, source)
            else:
                value = copy.deepcopy(value)
            doc = _add(doc, tokens, value)
        elif op == "test":
            if not _json_equal(_get(doc, tokens), operation["value"]):
                raise PatchError(
                    f"testing value {operation.get('path')} failed: expected {operation['value']!r}"
                )
        else:
            raise PatchError(f"unknown JSON patch operation {op!r}")
    return doc
