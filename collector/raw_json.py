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

import itertools
import re
from collections.abc import Iterator

# A string (escapes included), or a run of opening or of closing brackets (a document nested
# 100,000 deep is then two runs, not 200,000 tokens): everything the structure depends on.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{](?:\s*[\[{])*|[\]}](?:\s*[\]}])*|"')
_BRACKET = re.compile(rb"[\[\]{}]")
_COLON = re.compile(rb"\s*:")
_STRING_VALUE = re.compile(rb'\s*:\s*("[^"\\]*(?:\\.[^"\\]*)*")')


class Unreadable(ValueError):
    """The document is not well-formed JSON (cut short, brackets that do not pair)."""


def depth(doc: bytes) -> int:
    """How deeply the document's arrays and objects nest (0 for a scalar)."""
    return max((level for _, _, level in _runs(doc)), default=0)


def members(doc: bytes, names: tuple[str, ...]) -> dict[str, bytes]:
    """The raw values of the top-level object's members named in `names` (those present;
    string, object or array values).

    Raises `Unreadable` when the document is not a complete object with paired brackets."""
    if not doc.lstrip().startswith(b"{"):
        raise Unreadable("not a JSON object")
    wanted = {f'"{name}"'.encode() for name in names}
    found: dict[str, bytes] = {}
    key: bytes | None = None  # the member whose value comes next
    start = -1
    for token, before, after in _runs(doc):
        if before == after:  # a string
            if after == 1:
                text = token.group()
                key = text if _COLON.match(doc, token.end()) else None
                string = _STRING_VALUE.match(doc, token.end()) if key in wanted else None
                if key is not None and string is not None:
                    found[key[1:-1].decode()] = string.group(1)
        elif before <= 1 < after and key in wanted:
            start = _nth(doc, token.start(), 2 - before)
        elif after <= 1 < before and start >= 0 and key is not None:
            found[key[1:-1].decode()] = doc[start : _nth(doc, token.start(), before - 1) + 1]
            start = -1
    return found


def elements(array: bytes) -> list[bytes]:
    """The raw objects of a JSON array of objects (other elements are left out).

    Raises `Unreadable` when the brackets do not pair."""
    found = []
    start = -1
    for token, before, after in _runs(array):
        if before <= 1 < after:
            start = _nth(array, token.start(), 2 - before)
            if array[start] != ord("{"):
                start = -1
        elif after <= 1 < before and start >= 0:
            found.append(array[start : _nth(array, token.start(), before - 1) + 1])
            start = -1
    return found


def _runs(doc: bytes) -> Iterator[tuple[re.Match[bytes], int, int]]:
    """Each string and each run of brackets, with the nesting level before and after it."""
    level = 0
    for token in _TOKENS.finditer(doc):
        first = doc[token.start()]
        if first == ord('"'):
            if token.end() - token.start() == 1:
                raise Unreadable("a string cut short")
            yield token, level, level
            continue
        text = token.group()
        count = len(text) - text.count(b" ") - text.count(b"\n") - text.count(b"\r")
        count -= text.count(b"\t")
        before, level = level, level + (count if first in b"[{" else -count)
        if level < 0:
            raise Unreadable("a closing bracket without its opening one")
        yield token, before, level
    if level != 0:
        raise Unreadable("brackets that do not pair: the document is cut short")


def _nth(doc: bytes, start: int, n: int) -> int:
    """Where the `n`th bracket (from 1) at or after `start` is."""
    return next(itertools.islice(_BRACKET.finditer(doc, start), n - 1, None)).start()
