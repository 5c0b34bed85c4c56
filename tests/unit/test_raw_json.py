"""The parts of a JSON document found without decoding it (`collector.raw_json`) are the
parts a decoder finds, and a document too deep for the decoder is cut in parts all the same."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector import raw_json

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
documents = st.dictionaries(st.sampled_from(["type", "object", "items", "x", '"q"']), values)


def encoded(doc: Any, *, indent: bool) -> bytes:
    return json.dumps(doc, indent=1 if indent else None).encode()


@settings(deadline=None)  # a shared machine's pauses are no failure
@given(documents, st.booleans())
def test_members_are_the_values_a_decoder_finds(doc: dict[str, Any], indent: bool) -> None:
    found = raw_json.members(encoded(doc, indent=indent), ("type", "object", "items"))
    expected = {
        name: value
        for name, value in doc.items()
        if name in ("type", "object", "items") and isinstance(value, str | list | dict)
    }
    assert {name: msgspec.json.decode(raw) for name, raw in found.items()} == expected


@settings(deadline=None)
@given(st.lists(values, max_size=6), st.booleans())
def test_elements_are_the_objects_of_an_array(array: list[Any], indent: bool) -> None:
    found = raw_json.elements(encoded(array, indent=indent))
    assert [msgspec.json.decode(raw) for raw in found] == [v for v in array if isinstance(v, dict)]


@pytest.mark.parametrize("gap", [b"", b" ", b"\n\t "])
def test_a_document_too_deep_for_the_decoder_is_cut_and_measured(gap: bytes) -> None:
    deep = (b"[" + gap) * 100_000 + (b"]" + gap) * 100_000
    event = b'{"type": "ADDED", "object": {"metadata": {"name": "x"}, "spec": ' + deep + b"}}"
    with pytest.raises(RecursionError):
        msgspec.json.decode(event)
    parts = raw_json.members(event, ("type", "object"))
    assert parts["type"] == b'"ADDED"'
    assert parts["object"].startswith(b'{"metadata"') and parts["object"].endswith(b"}")
    assert raw_json.depth(parts["object"]) == 100_001
    assert raw_json.members(parts["object"], ("metadata",)) == {"metadata": b'{"name": "x"}'}


@pytest.mark.parametrize(
    "doc",
    [b'{"type": "ADDED", "object": {"a": ', b'{"a": 1}}', b"[1]", b'{"a": "}'],
)
def test_a_document_cut_short_or_unpaired_is_unreadable(doc: bytes) -> None:
    with pytest.raises(raw_json.Unreadable):
        raw_json.members(doc, ("type", "object"))
