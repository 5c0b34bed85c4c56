"""Full-jitter exponential backoff, shared by every retry loop in the agent, and the one
reading of a server's `Retry-After`.

Each failure doubles the ceiling (from `initial` up to `maximum`) and the wait is drawn
uniformly below it, so many agents that failed together do not retry together. A loop whose
retries must be bounded in number, not only on average, waits at least a fraction of the
ceiling (`least`: 0.5 is "equal jitter"), so n waits in a row take at least that much of
their ceilings.
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# A server may ask for a pause longer than our own ceiling; past an hour it is more likely a
# bug than a plan, and waiting longer would only hide the outage.
RETRY_AFTER_CEILING_SECONDS = 3600.0
_DELTA_SECONDS = re.compile(r"[0-9]+")


class Backoff:
    def __init__(self, *, initial: float = 1.0, maximum: float = 300.0, least: float = 0.0) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError("backoff needs 0 < initial <= maximum")
        if not 0 <= least <= 1:
            raise ValueError("backoff needs 0 <= least <= 1")
        self.initial = initial
        self.maximum = maximum
        self.least = least
        self.failures = 0

    def next_delay(self, *, at_least: float | None = None) -> float:
        """Count a failure and return how long to wait; `at_least` honours a Retry-After."""
        ceiling = min(self.maximum, self.initial * 2**self.failures)
        self.failures = min(self.failures + 1, 64)  # 2**64 is far past any maximum
        delay = random.uniform(ceiling * self.least, ceiling)
        if at_least is not None:
            delay = max(delay, min(at_least, RETRY_AFTER_CEILING_SECONDS))
        return delay

    def reset(self) -> None:
        self.failures = 0


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` value (delta-seconds or an HTTP date).

    A date in the past gives 0; anything unparseable gives None (the caller's backoff).
    """
    if value is None:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC without saying so
        when = when.replace(tzinfo=UTC)
    delay = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, delay)
