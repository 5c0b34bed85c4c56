"""Fakes shared across the session: a fake Moonin platform and a fake Kubernetes API server,
each reset before every test that uses it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.kube import FakeKube
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


@pytest.fixture(scope="session")
def session_kube() -> Iterator[FakeKube]:
    with FakeKube(bookmark_interval=0.2) as kube:
        yield kube


@pytest.fixture
def kube(session_kube: FakeKube) -> FakeKube:
    session_kube.reset()
    session_kube.bookmark_interval = 0.2
    return session_kube


@pytest.fixture(scope="session")
def kubeconfig(session_kube: FakeKube, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_kube.kubeconfig(tmp_path_factory.mktemp("kube") / "config")
