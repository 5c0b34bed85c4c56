"""The keys of one list's objects, held as small numbers rather than strings.

A completed list hands its key set to the sink, which asks only whether a key it remembers
is among them (whatever is not was deleted meanwhile). The set lives from the list's first
page until the processor has taken the list in, and a list of 50,000 pods holds it at the
agent's peak of memory: as strings (a key is about 40 characters) it took about 6.5 MiB.
Held as 60-bit hashes it takes about 3.5 MiB: CPython stores an integer of up to 60 bits in
32 bytes, against about 96 for such a string.

The hash is the interpreter's string hash (SipHash, keyed per process) of the key behind a
prefix drawn anew for every key set, so two keys that share a hash in one list most likely
do not in the next. Two listed keys of one hash read as one key given twice: the list is
taken for one that goes round (`collector.list_end`) and tried again later, with a new
prefix. A deleted object whose key shares a listed key's hash is taken as still there until
the next list: about once in 10¹² lists, for 50,000 objects and 20 deleted meanwhile
(n·d / 2⁶⁰).
"""

from __future__ import annotations

import secrets

_MASK = (1 << 60) - 1  # one bit more and CPython takes 48 bytes an integer, not 32


class ListedKeys:
    """Keys added one by one, asked for membership; not enumerable (only hashes are held)."""

    __slots__ = ("_hashes", "_prefix")

    def __init__(self) -> None:
        self._hashes: set[int] = set()
        self._prefix = secrets.token_hex(8)

    def add(self, key: str) -> None:
        self._hashes.add(hash(self._prefix + key) & _MASK)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and hash(self._prefix + key) & _MASK in self._hashes

    def __len__(self) -> int:
        return len(self._hashes)

    def __eq__(self, other: object) -> bool:
        """Equal to a set of the same keys, as far as the hashes tell."""
        if isinstance(other, (set, frozenset)):
            return len(other) == len(self) and all(key in self for key in other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a set

    def __repr__(self) -> str:
        return f"ListedKeys({len(self)} keys)"
