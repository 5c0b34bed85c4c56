"""Label and field selectors, parsed and matched the way the real API server does.

Label selectors: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`,
`a<1`; a comma means AND. Field selectors: `field=value`, `field==value`, `field!=value`
(backslash escapes `\\,` `\\=` `\\\\`), only on the fields the resource supports; any other
field is refused with 400 in the real server's words for that kind. A selector that does
not parse is a 400 as well.

Field values are extracted once per write (`extract_fields`) and kept beside the stored
bytes, so filtering a 50,000-object list never decodes an object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from sandbox.kube.resources import Resource
from sandbox.kube.status import ApiError, bad_request

_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EQUALITY = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*")
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*")
_COMPARE = re.compile(rf"\s*({_KEY})\s*([<>])\s*(-?[0-9]+)\s*")
_EXISTS = re.compile(rf"\s*(!?)\s*({_KEY})\s*")
_SET_VALUE = re.compile(rf"\s*({_VALUE})\s*")

LabelTest = Callable[[Mapping[str, str]], bool]


def _split_top_level(text: str) -> list[str]:
    """Split at commas that are not inside parentheses (`a in (x,y),b`)."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def _requirement(text: str) -> LabelTest:
    if match := _EQUALITY.fullmatch(text):
        key, op, value = match.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _SET.fullmatch(text):
        key, op, raw_values = match.groups()
        values = set()
        for raw in raw_values.split(","):
            value_match = _SET_VALUE.fullmatch(raw)
            if value_match is None:
                raise bad_request(f"unable to parse requirement: invalid value {raw!r} in {text!r}")
            values.add(value_match.group(1))
        if op == "in":
            return lambda labels: key in labels and labels[key] in values
        return lambda labels: labels.get(key) not in values
    if match := _COMPARE.fullmatch(text):
        key, op, number = match.group(1), match.group(2), int(match.group(3))
        return lambda labels: _compare(labels.get(key), op, number)
    if match := _EXISTS.fullmatch(text):
        negated, key = match.groups()
        if negated:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: {text.strip()!r} is not a valid requirement")


def _compare(value: str | None, op: str, number: int) -> bool:
    try:
        actual = int(value) if value is not None else None
    except ValueError:
        return False
    if actual is None:
        return False
    return actual > number if op == ">" else actual < number


class LabelSelector:
    """A parsed label selector; `matches(labels)` is true when every requirement holds."""

    __slots__ = ("_tests", "text")

    def __init__(self, text: str, tests: list[LabelTest]) -> None:
        self.text = text
        self._tests = tests

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector | None:
        """None for an empty selector (everything matches); ApiError 400 if it does not parse."""
        if text is None or not text.strip():
            return None
        tests = [_requirement(part) for part in _split_top_level(text)]
        return cls(text, tests)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(test(labels) for test in self._tests)


# --- field selectors -----------------------------------------------------------------------


def _split_escaped(text: str, separator: str) -> list[str]:
    parts, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _field_term(text: str) -> tuple[str, str, str]:
    # The operator is the first unescaped `!=`, `==` or `=`.
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if text.startswith("!=", index) or text.startswith("==", index):
            return text[:index], text[index : index + 2], text[index + 2 :]
        if char == "=":
            return text[:index], "=", text[index + 1 :]
        index += 1
    raise bad_request(f"invalid selector: {text!r}; can't understand {text!r}")


def _unsupported_field(field: str, resource: Resource) -> ApiError:
    # Kinds that register field label conversions (pkg/apis/*/v1/conversion.go) refuse in
    # their own words; the others fall back to apimachinery's
    # runtime.DefaultMetaV1FieldSelectorConversion, which names the two it knows.
    if resource.fields:
        return bad_request(f"field label not supported: {field}")
    return bad_request(
        f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


def required_value(text: str, field: str) -> str | None:
    """The value a field selector requires `field` to equal (`metadata.name=web`), as
    apimachinery's `RequiresExactMatch` finds it; None when no term does or the selector
    does not parse."""
    try:
        for raw in _split_escaped(text, ","):
            if not raw.strip():
                continue
            name, op, value = _field_term(raw)
            if _unescape(name).strip() == field and op != "!=":
                return _unescape(value)
    except ApiError:
        return None
    return None


class FieldSelector:
    """A parsed field selector for one resource."""

    __slots__ = ("_terms", "text")

    def __init__(self, text: str, terms: list[tuple[str, bool, str]]) -> None:
        self.text = text
        self._terms = terms  # (field, wanted equal, value)

    @classmethod
    def parse(cls, text: str | None, resource: Resource) -> FieldSelector | None:
        if text is None or not text.strip():
            return None
        supported = resource.field_labels
        terms = []
        for raw in _split_escaped(text, ","):
            if not raw.strip():
                continue
            field, op, value = _field_term(raw)
            field = _unescape(field).strip()
            if field not in supported:
                raise _unsupported_field(field, resource)
            terms.append((field, op != "!=", _unescape(value)))
        return cls(text, terms) if terms else None

    def matches(self, namespace: str, name: str, fields: Mapping[str, str] | None) -> bool:
        for field, equal, value in self._terms:
            if field == "metadata.name":
                actual = name
            elif field == "metadata.namespace":
                actual = namespace
            else:
                actual = fields.get(field, "") if fields else ""
            if (actual == value) != equal:
                return False
        return True


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def extract_fields(resource: Resource, obj: Mapping[str, Any]) -> dict[str, str] | None:
    """The selectable field values of one object (absent ones are the empty string).

    Runs on every write, 50,000 times when a big cluster is loaded: hence the plain loop.
    """
    if not resource.field_paths:
        return None
    values: dict[str, str] = {}
    for label, steps in resource.field_paths:
        node: Any = obj
        try:
            for step in steps:
                node = node.get(step)
        except AttributeError:  # a missing or non-object step on the way
            continue
        if node is None or node == "":
            continue
        values[label] = node if type(node) is str else _text(node)
    return values
