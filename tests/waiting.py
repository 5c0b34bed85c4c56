"""Waiting for something another thread or process does, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], bool],
    timeout: float = 20.0,
    *,
    poll: float = 0.01,
    explain: Callable[[], str] | None = None,
) -> None:
    """Poll `condition` every `poll` seconds until it holds; AssertionError once `timeout`
    seconds pass, saying what `explain` returns then."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            detail = f": {explain()}" if explain else ""
            raise AssertionError(f"condition not met in time{detail}")
        time.sleep(poll)
