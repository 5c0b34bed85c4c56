"""The informer tests' shared parts: fast settings, a recording sink, the `api` and
`running` fixtures (registered for the whole suite in `tests/conftest.py`)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from collector.informer import Informer, InformerSettings
from collector.model import ObjectMeta
from collector.resources import DEPLOYMENTS, Resource
from kube.api import KubeApi
from kube.cluster import KubeTarget
from sandbox import objects
from sandbox.kube import FakeKube

FAST = InformerSettings(
    page_size=10,
    watch_timeout_seconds=(30, 30),
    read_timeout_seconds=5.0,
    forbidden_retry_seconds=0.3,
    backoff_initial_seconds=0.05,
    backoff_max_seconds=0.2,
    relist_backoff_max_seconds=0.2,
)
# Lists in pages even where the server streams them (the fake does unless told otherwise).
PAGED = dataclasses.replace(FAST, streaming_lists=False)


class Thing(msgspec.Struct):
    metadata: ObjectMeta
    spec: dict[str, Any] = msgspec.field(default_factory=dict)


class RecordingSink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str, Any]] = []
        self.lists: list[frozenset[str]] = []
        self.on_apply: Callable[[Thing], None] | None = None

    def apply(self, obj: Thing) -> None:
        if self.on_apply is not None:
            self.on_apply(obj)
        with self.lock:
            self.calls.append(("apply", obj.metadata.key, obj.spec.get("replicas")))

    def remove(self, obj: Thing) -> None:
        with self.lock:
            self.calls.append(("remove", obj.metadata.key, None))

    def listed(self, *, resource_version: str, listed_at: str, keys: frozenset[str]) -> None:
        with self.lock:
            self.lists.append(keys)

    def seen(self, call: tuple[str, str, Any]) -> bool:
        with self.lock:
            return call in self.calls


def deployment(name: str, replicas: int = 1, namespace: str = "shop") -> dict[str, Any]:
    return objects.deployment(name=name, namespace=namespace, replicas=replicas)


@pytest.fixture
def api(kube: FakeKube) -> Iterator[KubeApi]:
    client = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
    yield client
    client.close()


@pytest.fixture
def running() -> Iterator[Callable[..., tuple[Informer[Thing], RecordingSink]]]:
    started: list[tuple[Informer[Thing], KubeApi]] = []

    def start(
        api: KubeApi, resource: Resource = DEPLOYMENTS, settings: InformerSettings = FAST
    ) -> tuple[Informer[Thing], RecordingSink]:
        sink = RecordingSink()
        informer = Informer(api, resource, Thing, sink, settings=settings)
        informer.start()
        started.append((informer, api))
        return informer, sink

    yield start
    for informer, _ in started:
        informer.stop()
    for informer, api in started:
        api.abort_streams()
        assert informer.join(5)
