"""The parts of a JSON document, found without decoding it: for objects that will not decode.

msgspec decodes recursively and stops a document nested deeper than the interpreter's
recursion limit (about a thousand levels) with `RecursionError`; it also refuses the whole
document for one bad value. So when a list page or a watch event does not decode, the
informer cuts it here into its members (a page's `metadata` and `items`, an event's `type`
and `object`) and decodes each on its own: one bad object is skipped, the rest of its page
is not. The scan is iterative (a document nested 100,000 deep costs time, not stack) and
runs only on documents that already failed, so the common path pays nothing for it.
"""

from __future__ import annotations

import re

# A string (escapes included) or one bracket: everything the structure depends on.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


class Unreadable(ValueError):
    """The document is not well-formed JSON (cut short, brackets that do not pair)."""


def depth(doc: bytes) -> int:
    """How deeply the document's arrays and objects nest (0 for a scalar)."""
    deepest = level = 0
    for token in _TOKENS.finditer(doc):
        bracket = doc[token.start()]
        if bracket in b"[{":
            level += 1
            deepest = max(deepest, level)
        elif bracket in b"]}":
            level -= 1
    return deepest


def members(doc: bytes, names: tuple[str, ...]) -> dict[str, bytes]:
    """The raw values of the top-level object's members named in `names` (those present).

    Raises `Unreadable` when the document is not a complete object with paired brackets."""
    wanted = {f'"{name}"'.encode() for name in names}
    found: dict[str, bytes] = {}
    level = 0
    key: bytes | None = None  # the member whose value starts at the next token at level 1
    start = -1
    for token in _TOKENS.finditer(doc):
        text = token.group()
        if text[:1] == b'"':
            if level == 1:
                key = text if _COLON.match(doc, token.end()) else None
                if key is None:
                    continue
                string = _STRING_VALUE.match(doc, token.end())
                if key in wanted and string is not None:
                    found[key[1:-1].decode()] = string.group(1)
            continue
        if text in b"[{":
            level += 1
            if level == 2 and key in wanted:
                start = token.start()
        else:
            level -= 1
            if level < 0:
                raise Unreadable("a closing bracket without its opening one")
            if level == 1 and start >= 0 and key is not None:
                found[key[1:-1].decode()] = doc[start : token.end()]
                start = -1
    if level != 0 or not doc.strip().startswith(b"{"):
        raise Unreadable("not a complete JSON object")
    return found


def elements(array: bytes) -> list[bytes]:
    """The raw objects of a JSON array of objects (other elements are left out).

    Raises `Unreadable` when the brackets do not pair."""
    found = []
    level = 0
    start = -1
    for token in _TOKENS.finditer(array):
        text = token.group()
        if text[:1] == b'"':
            continue
        if text in b"[{":
            level += 1
            if level == 2 and text == b"{":
                start = token.start()
        else:
            level -= 1
            if level < 0:
                raise Unreadable("a closing bracket without its opening one")
            if level == 1 and start >= 0:
                found.append(array[start : token.end()])
                start = -1
    if level != 0:
        raise Unreadable("not a complete JSON array")
    return found


_COLON = re.compile(rb"\s*:")
_STRING_VALUE = re.compile(rb'\s*:\s*("[^"\\]*(?:\\.[^"\\]*)*")')
