"""Full-jitter backoff: the ceiling doubles to its maximum and Retry-After is a floor; a
Retry-After reads as delta-seconds or an HTTP date, for Moonin and Kubernetes alike."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from runtime.backoff import RETRY_AFTER_CEILING_SECONDS, Backoff, parse_retry_after


def test_each_failure_doubles_the_ceiling_until_the_maximum() -> None:
    random.seed(7)
    for failures, ceiling in enumerate([1.0, 2.0, 4.0, 8.0, 8.0, 8.0]):
        delays = []
        for _ in range(300):
            backoff = Backoff(initial=1.0, maximum=8.0)
            for _ in range(failures):
                backoff.next_delay()
            delays.append(backoff.next_delay())
        assert min(delays) >= 0 and max(delays) <= ceiling
        assert max(delays) > ceiling * 0.9  # full jitter spreads over the whole range
        assert min(delays) < ceiling * 0.1


def test_a_floor_keeps_each_wait_within_the_upper_part_of_its_ceiling() -> None:
    random.seed(7)
    backoff = Backoff(initial=1.0, maximum=8.0, least=0.5)
    delays = [backoff.next_delay() for _ in range(300)]
    ceilings = [1.0, 2.0, 4.0] + [8.0] * 297
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert min(delays[3:]) < 4.5 and max(delays[3:]) > 7.5  # still spread over that part
    with pytest.raises(ValueError):
        Backoff(least=1.5)


def test_a_retry_after_is_waited_at_least_but_an_absurd_one_is_capped() -> None:
    backoff = Backoff(initial=0.01, maximum=0.02)
    assert backoff.next_delay(at_least=5.0) == 5.0
    assert backoff.next_delay(at_least=10**9) == RETRY_AFTER_CEILING_SECONDS


def test_reset_brings_the_ceiling_back_to_the_start() -> None:
    backoff = Backoff(initial=1.0, maximum=300.0)
    after_reset = []
    for _ in range(50):
        for _ in range(10):
            backoff.next_delay()
        backoff.reset()
        after_reset.append(backoff.next_delay())
    assert max(after_reset) <= 1.0


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        Backoff(initial=0, maximum=1)
    with pytest.raises(ValueError):
        Backoff(initial=2, maximum=1)


NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("0", 0.0),
        ("7", 7.0),
        (" 30 ", 30.0),
        ("Wed, 02 Dec 2026 12:01:00 GMT", 60.0),
        ("Wednesday, 02-Dec-26 12:00:30 GMT", 30.0),
        ("Wed Dec  2 12:00:10 2026", 10.0),
        ("Wed, 02 Dec 2026 11:00:00 GMT", 0.0),  # in the past
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("soon", None),
        ("-5", None),
        ("1.5", None),
        ("", None),
        ("Wed, 99 Foo 2026", None),
        (None, None),
    ],
)
def test_a_retry_after_reads_as_seconds_or_an_http_date(
    value: str | None, seconds: float | None
) -> None:
    assert parse_retry_after(value, now=NOW) == seconds
