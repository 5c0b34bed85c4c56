"""A list's key set held as hashes: membership, size and equality as a set of the keys."""

from __future__ import annotations

import pytest

from collector.listed_keys import ListedKeys

KEYS = [f"shop/web-{n:05d}" for n in range(2000)]


def listed(keys: list[str]) -> ListedKeys:
    held = ListedKeys()
    for key in keys:
        held.add(key)
    return held


def test_it_holds_what_was_added_and_nothing_else() -> None:
    held = listed(KEYS[:1000])
    assert all(key in held for key in KEYS[:1000])
    assert not any(key in held for key in KEYS[1000:])
    assert 42 not in held  # not a key at all


def test_a_key_added_again_is_counted_once() -> None:
    # How a paged list tells an object given twice (`collector.list_end`).
    held = listed(KEYS[:10])
    held.add(KEYS[3])
    assert len(held) == 10


def test_it_equals_a_set_of_the_same_keys_and_no_other() -> None:
    held = listed(KEYS[:5])
    assert held == frozenset(KEYS[:5]) and held == set(KEYS[:5])
    assert held != frozenset(KEYS[:4])
    assert held != frozenset([*KEYS[:4], KEYS[6]])
    assert held != KEYS[:5]  # a list is no set


def test_each_key_set_hashes_anew() -> None:
    # Keys that share a hash in one set need not in the next: a list taken for an endless
    # one because two of its keys collide is not taken so again when it is tried again.
    first, second = listed(KEYS), listed(KEYS)
    assert first._hashes != second._hashes
    assert first == frozenset(KEYS) and second == frozenset(KEYS)


def test_it_cannot_be_enumerated_only_asked() -> None:
    with pytest.raises(TypeError):
        iter(listed(KEYS[:3]))  # type: ignore[call-overload]
