"""Fakes shared across the session: one fake Moonin platform, reset before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.platform import FakePlatform

TOKEN = "test-token-6f1d2c"


@pytest.fixture(scope="session")
def session_platform() -> Iterator[FakePlatform]:
    platform = FakePlatform(token=TOKEN)
    platform.start()
    yield platform
    platform.stop()


@pytest.fixture
def platform(session_platform: FakePlatform) -> FakePlatform:
    session_platform.reset()
    if not session_platform.is_up:
        session_platform.up()
    return session_platform
