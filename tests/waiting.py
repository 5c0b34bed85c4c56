"""Waiting for something another thread or process does, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout: float = 20.0, *, poll: float = 0.01) -> None:
    """Poll `condition` every `poll` seconds until it holds; AssertionError once `timeout`
    seconds pass."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(poll)
