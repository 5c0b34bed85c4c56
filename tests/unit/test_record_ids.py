"""Record ids: ULIDs, 48 bits of milliseconds then 80 random bits in Crockford's base 32."""

from __future__ import annotations

import time

from shipper.records import new_id

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def decoded(ulid: str) -> int:
    value = 0
    for char in ulid:
        value = value * 32 + CROCKFORD.index(char)
    return value


def test_an_id_is_26_crockford_characters_that_start_with_the_millisecond_it_was_made() -> None:
    before = time.time_ns() // 1_000_000
    ulid = new_id()
    after = time.time_ns() // 1_000_000
    assert len(ulid) == 26
    assert set(ulid) <= set(CROCKFORD)
    value = decoded(ulid)
    assert value < 2**128  # the first character carries only the top three bits
    assert before <= value >> 80 <= after


def test_ids_made_in_later_milliseconds_sort_after_and_none_repeat() -> None:
    earlier = [new_id() for _ in range(200)]
    time.sleep(0.002)  # the next millisecond at least: the test is about the ordering
    later = [new_id() for _ in range(200)]
    assert max(earlier) < min(later)
    assert len(set(earlier + later)) == 400
    random_parts = {decoded(ulid) & (2**80 - 1) for ulid in earlier + later}
    assert len(random_parts) == 400
