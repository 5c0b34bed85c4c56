"""The interval after which the agent's threads trade the interpreter."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from agent import gil


@pytest.fixture
def restored_interval() -> Iterator[None]:
    interval = sys.getswitchinterval()
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("restored_interval")
def test_tuning_lets_a_thread_keep_the_interpreter_longer_than_the_default() -> None:
    sys.setswitchinterval(0.005)  # CPython's default
    gil.tune()
    assert sys.getswitchinterval() == pytest.approx(gil.SWITCH_INTERVAL_SECONDS)
    assert sys.getswitchinterval() > 0.005
