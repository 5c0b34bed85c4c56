"""A request body held against its kind's schema, as the real server's decoder holds it.

kube-apiserver decodes a body into the kind's Go struct. A value of the wrong JSON type, an
integer out of its Go range or a timestamp Go cannot parse stops the decode: 400
BadRequest, `Deployment in version "v1" cannot be handled as a Deployment: json: cannot
unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32`. A field
the struct does not have is an *unknown field*: what happens to it is the request's
`fieldValidation` choice (see `admission`). Sources: the API concepts page
(https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation) and
sigs.k8s.io/json's strict decoder, which names unknown fields by their path
(`spec.template.spec.containers[0].foo`).

A key given twice in one JSON object is a *duplicate field* (the last value wins, as in
Go); strict decoding names it beside the unknown ones, in document order, and a field both
unknown and duplicated only as unknown (test/integration/apiserver/apply/
field_validation_test.go upstream). A body that is not JSON at all is refused with Go's
`encoding/json` syntax error (`invalid character 'x' looking for beginning of value`).

The walk follows the schema's `$ref`s; definitions without properties (RawExtension,
FieldsV1, JSON) take anything, as Go's `json.RawMessage` does.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sandbox.kube import gotime
from sandbox.kube.schemas import Schemas, go_type, ref_name

_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
_MICRO_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


class DecodeError(Exception):
    """The decoder's own words, without the `cannot be handled as` prefix."""


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """An unknown or a duplicate field, as strict decoding names it."""

    problem: str  # "unknown", "duplicate", "json patch unknown", "json patch duplicate"
    path: str  # as upstream prints it: spec.containers[0].foo
    parent: dict[str, Any] | None = None
    key: str = ""

    def __str__(self) -> str:
        return f'{self.problem} field "{self.path}"'

    def prune(self) -> None:
        """Drop an unknown field; a duplicate keeps its last value, as Go's decoder does."""
        if self.problem == "unknown" and self.parent is not None:
            self.parent.pop(self.key, None)


def field_problems(
    schemas: Schemas,
    definition: str,
    obj: dict[str, Any],
    duplicates: Collection[str] = (),
    *,
    sort_keys: bool = False,
) -> list[FieldProblem]:
    """Every field of `obj` its schema lacks, and every known field whose path is in
    `duplicates`, in document order (`sort_keys`: in key order, as upstream walks a patched
    object); `DecodeError` on the first value Go would not decode."""
    found: list[FieldProblem] = []
    walk = _Walk(schemas, found, duplicates, sort_keys)
    walk.value(obj, {"$ref": f"#/$defs/{definition}"}, "", "")
    return found


def duplicate_fields(raw: bytes) -> list[str]:
    """The paths of keys given twice in one object of the JSON document `raw`, in document
    order (`metadata.name`, `spec.containers[0].image`); [] when there are none or `raw` is
    not JSON."""
    repeated: dict[int, list[str]] = {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in items:
            if key in obj:
                repeated.setdefault(id(obj), []).append(key)
            obj[key] = value
        return obj

    try:
        tree = json.loads(raw, object_pairs_hook=pairs)
    except ValueError:
        return []
    found: list[str] = []
    if repeated:
        _collect_duplicates(tree, "", repeated, found)
    return found


_JSON_PATCH_MEMBERS = ("op", "path", "value", "from")


def json_patch_problems(patch: list[Any], duplicates: Collection[str]) -> list[FieldProblem]:
    """A JSON patch's operations' unknown and duplicate members (`duplicates` from
    `duplicate_fields`), operation by operation; duplicates inside a value are not seen, as
    upstream's JSON patch library drops them (field_validation_test.go upstream)."""
    found: list[FieldProblem] = []
    for index, operation in enumerate(patch):
        for key in operation if isinstance(operation, dict) else ():
            where = f"[{index}].{key}"
            if key not in _JSON_PATCH_MEMBERS:
                found.append(FieldProblem("json patch unknown", where))
            elif where in duplicates:
                found.append(FieldProblem("json patch duplicate", where))
    return found


def _collect_duplicates(
    node: Any, path: str, repeated: dict[int, list[str]], found: list[str]
) -> None:
    if isinstance(node, dict):
        twice = repeated.get(id(node), ())
        for key, value in node.items():
            where = f"{path}.{key}" if path else key
            if key in twice:
                found.append(where)
            _collect_duplicates(value, where, repeated, found)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            _collect_duplicates(item, f"{path}[{index}]", repeated, found)


def syntax_error(raw: bytes) -> str:
    """Go's `encoding/json` error for `raw`, which is not valid JSON."""
    try:
        json.loads(raw)
    except ValueError as error:
        position = getattr(error, "pos", len(raw))
        message = getattr(error, "msg", "")
    else:  # Python reads NaN and Infinity; Go does not
        return "invalid character 'N' looking for beginning of value"
    text = raw.decode("utf-8", "replace")
    rest = text[position:].lstrip(" \t\r\n")
    if not rest or message.startswith("Unterminated string"):
        return "unexpected end of JSON input"
    escape = message.startswith("Invalid \\escape")  # Go names the letter after the backslash
    character = _quote_char(rest[1] if escape and len(rest) > 1 else rest[0])
    if message.startswith("Expecting ',' delimiter"):
        inside = "object key:value pair" if _innermost(text[:position]) == "{" else "array element"
        return f"invalid character {character} after {inside}"
    context = {
        "Expecting value": "looking for beginning of value",
        "Expecting property name": "looking for beginning of object key string",
        "Expecting ':' delimiter": "after object key",
        "Extra data": "after top-level value",
        "Invalid control character": "in string literal",
        "Invalid \\escape": "in string escape code",
    }
    for python, go in context.items():
        if message.startswith(python):
            return f"invalid character {character} {go}"
    return f"invalid character {character} looking for beginning of value"


def _quote_char(character: str) -> str:
    if character == "'":
        return "'\\''"
    if character == '"':
        return "'\"'"
    quoted = json.dumps(character, ensure_ascii=False)[1:-1]
    return f"'{quoted}'"


def _innermost(text: str) -> str:
    """The bracket open at the end of `text` (a JSON prefix), skipping strings."""
    stack: list[str] = []
    in_string = escaped = False
    for character in text:
        if in_string:
            if escaped:
                escaped = False
            elif character == "\\":
                escaped = True
            elif character == '"':
                in_string = False
        elif character == '"':
            in_string = True
        elif character in "{[":
            stack.append(character)
        elif character in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else ""


class _Walk:
    def __init__(
        self,
        schemas: Schemas,
        found: list[FieldProblem],
        duplicates: Collection[str],
        sort_keys: bool,
    ) -> None:
        self.schemas = schemas
        self.found = found
        self.duplicates = duplicates
        self.sort_keys = sort_keys

    def value(self, value: Any, schema: dict[str, Any], path: str, struct: str) -> None:
        ref = schema.get("$ref")
        go = _go_name(schema, self.schemas)
        if ref is not None:
            name = ref_name(ref)
            if name in (_TIME, _MICRO_TIME):
                return self.time(value, path, struct, micro=name == _MICRO_TIME)
            schema = self.schemas.definition(name)
            if path:
                # Go names the struct that holds the field: keep the parent's for this one.
                self.check_type(value, schema, path, struct, go)
            struct_here = go_type(name)
        else:
            self.check_type(value, schema, path, struct, go)
            struct_here = struct
        if value is None:
            return
        if isinstance(value, dict):
            self.members(value, schema, path, struct_here)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                self.value(item, schema["items"], f"{path}[{index}]", struct_here)

    def members(self, obj: dict[str, Any], schema: dict[str, Any], path: str, struct: str) -> None:
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        items = sorted(obj.items()) if self.sort_keys else list(obj.items())
        for key, member in items:
            where = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                if where in self.duplicates:
                    self.found.append(FieldProblem("duplicate", where))
                self.value(member, properties[key], where, struct)
            elif properties is not None:
                self.found.append(FieldProblem("unknown", where, obj, key))
            elif isinstance(extra, dict):
                self.value(member, extra, path, struct)

    def check_type(
        self, value: Any, schema: dict[str, Any], path: str, struct: str, go: str
    ) -> None:
        if value is None:
            return
        allowed = _types(schema)
        if not allowed:
            return
        kind = _json_type(value)
        if kind == "integer" and "integer" not in allowed and "number" in allowed:
            return
        if kind in allowed:
            if kind == "integer" and schema.get("format") in _INT_RANGES:
                low, high = _INT_RANGES[schema["format"]]
                if not low <= value <= high:
                    raise DecodeError(_unmarshal(f"number {value}", path, struct, go))
            return
        # Go quotes the number only when it was aimed at an integer it cannot fill.
        numeric_target = "integer" in allowed and kind in ("integer", "number")
        described = f"number {value}" if numeric_target else _GO_JSON[kind]
        raise DecodeError(_unmarshal(described, path, struct, go))

    def time(self, value: Any, path: str, struct: str, *, micro: bool) -> None:
        if value is None:
            return
        if not isinstance(value, str):
            go = "v1.MicroTime" if micro else "v1.Time"
            raise DecodeError(_unmarshal(_GO_JSON[_json_type(value)], path, struct, go))
        problem = gotime.time_error(value, micro=micro)
        if problem is not None:
            raise DecodeError(problem)


_GO_JSON = {
    "string": "string",
    "boolean": "bool",
    "object": "object",
    "array": "array",
    "integer": "number",
    "number": "number",
}


def go_json_kind(value: Any) -> str:
    """How Go's decoder names a JSON value's kind in its errors: string, number, object..."""
    return "null" if value is None else _GO_JSON[_json_type(value)]


def _unmarshal(described: str, path: str, struct: str, go: str) -> str:
    return f"json: cannot unmarshal {described} into Go struct field {struct}.{path} of type {go}"


def _types(schema: dict[str, Any]) -> set[str]:
    if "oneOf" in schema:
        return {t for option in schema["oneOf"] for t in _types(option)}
    declared = schema.get("type")
    if declared is None:
        return set()
    names = {declared} if isinstance(declared, str) else set(declared)
    names.discard("null")
    return names


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _go_name(schema: dict[str, Any], schemas: Schemas) -> str:
    """The Go type a schema stands for, as decode errors print it (`int32`, `v1.PodSpec`)."""
    ref = schema.get("$ref")
    if ref is not None:
        name = ref_name(ref)
        if "intstr" in name:
            return "intstr.IntOrString"
        if "resource.Quantity" in name:
            return "resource.Quantity"
        return ".".join(name.rsplit(".", 2)[-2:])
    types = _types(schema)
    if "array" in types:
        items = schema.get("items")
        return "[]" + (_go_name(items, schemas) if isinstance(items, dict) else "interface {}")
    if "object" in types:
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return f"map[string]{_go_name(extra, schemas)}"
        return "map[string]interface {}"
    if "integer" in types:
        return str(schema.get("format") or "int64")
    if "number" in types:
        return "float64"
    if "boolean" in types:
        return "bool"
    return "string"
