"""A scaling role in a test: the fake Kubernetes API, a stub scaling API, a real outbox and
local store in a temporary directory, and the objects and templates the tests use.

Templates default to a daily window 08:00-18:00 UTC, so `at(9)` is inside the window of
2026-12-02 and `at(18, 1)` is after it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kube.api import KubeApi
from kube.cluster import KubeTarget
from kube.globs import ResourceGlobs
from sandbox import objects
from sandbox.kube import FakeKube

# The platform's side comes from the one builder of it, re-exported for the tests.
from sandbox.scaling import action as action
from sandbox.scaling import template as template
from scheduler import annotations as notes
from scheduler.kubeapi import ScalingKube
from scheduler.reconcile import CycleReport, Reconciler
from scheduler.store import Store
from shipper.errors import RetryLater
from shipper.outbox import Bounds, Outbox, StreamOutbox
from shipper.records import SCALING

CLUSTER = "c-1"
NS = "shop"
DAY = datetime(2026, 12, 2, tzinfo=UTC)
WINDOW = "2026-12-02T08:00:00Z"
RUN_UNTIL = "2026-12-02T18:00:00Z"


def at(hour: int, minute: int = 0, *, days: int = 0) -> datetime:
    return DAY.replace(hour=hour, minute=minute) + timedelta(days=days)


def namespace(name: str = NS) -> dict[str, Any]:
    return objects.namespace(name=name)


def deployment(
    name: str = "web", replicas: int | None = 2, *, ns: str = NS, annotations: Any = None
) -> dict[str, Any]:
    return objects.deployment(name=name, namespace=ns, replicas=replicas, annotations=annotations)


def hpa(
    name: str = "web", target: str = "web", low: int | None = 2, high: int = 5, *, ns: str = NS
) -> dict[str, Any]:
    return objects.hpa(
        name=name,
        namespace=ns,
        target=target,
        low=low,
        high=high,
        metric="memory",
        annotations={"team": "shop"},
    )


class StubApi:
    """The scaling API as the reconciler sees it; `down` makes every call fail like an
    unreachable platform."""

    def __init__(self) -> None:
        self.templates: list[dict[str, Any]] = []
        self.actions: dict[str, list[dict[str, Any]]] = {}
        self.down = False
        self.failing_actions: set[str] = set()

    def get_templates(self) -> list[dict[str, Any]]:
        if self.down:
            raise RetryLater("GET https://scaling.example/templates failed: ConnectError")
        return copy.deepcopy(self.templates)

    def get_actions(self, template_id: str) -> list[dict[str, Any]]:
        if self.down or template_id in self.failing_actions:
            raise RetryLater(f"GET .../templates/{template_id}/actions answered 503")
        return copy.deepcopy(self.actions.get(template_id, []))


@dataclass
class Harness:
    kube: FakeKube
    api: StubApi
    outbox: Outbox
    store: Store
    kube_api: ScalingKube
    tmp: Path
    reconciler: Reconciler = field(init=False)

    def __post_init__(self) -> None:
        self.reconciler = self.make_reconciler()

    @property
    def stream(self) -> StreamOutbox:
        return self.outbox[SCALING]

    def make_reconciler(self, **changes: Any) -> Reconciler:
        options: dict[str, Any] = {
            "kube": self.kube_api,
            "api": self.api,
            "outbox": self.stream,
            "store": self.store,
            "cluster_id": CLUSTER,
            "ignore": ResourceGlobs(()),
        }
        options.update(changes)
        return Reconciler(**options)

    def run(self, now: datetime) -> CycleReport:
        return self.reconciler.run_once(now)

    def events(self) -> list[dict[str, Any]]:
        """The events put since the last call, in order (taken and acked)."""
        found: list[dict[str, Any]] = []
        while (batch := self.stream.take(max_records=10_000, max_bytes=1 << 30)) is not None:
            found.extend(msgspec.json.decode(body) for body in batch.bodies)
            self.stream.ack(batch)
        return found

    def hpa(self, name: str = "web", ns: str = NS) -> dict[str, Any]:
        return self.kube.get("horizontalpodautoscalers", ns, name)

    def deployment(self, name: str = "web", ns: str = NS) -> dict[str, Any]:
        return self.kube.get("deployments", ns, name)

    def kube_events(self, reason: str | None = None) -> list[dict[str, Any]]:
        found = self.kube.list("events")
        return [event for event in found if reason is None or event["reason"] == reason]

    def writes(self) -> list[tuple[str, str]]:
        """(method, path) of every write the fake saw since `kube.clear_requests()`."""
        return [(r.method, r.path) for r in self.kube.requests if r.method != "GET"]

    def close(self) -> None:
        self.outbox.close()
        self.store.close()
        self.kube_api.api.close()


def failing_replica_writes(
    kube_api: ScalingKube, error: Callable[[], BaseException], count: int | None = None
) -> Callable[[str, str, dict[str, Any]], dict[str, Any]]:
    """`kube_api.patch_deployment`, except that a patch writing replicas raises `error()`
    (the first `count` times; every time when None). Other Deployment patches (a revert's
    journal label) go through."""
    write = kube_api.patch_deployment
    failed = 0

    def patch_deployment(namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        nonlocal failed
        if "replicas" in (patch.get("spec") or {}) and (count is None or failed < count):
            failed += 1
            raise error()
        return write(namespace, name, patch)

    return patch_deployment


def ours(obj: dict[str, Any]) -> dict[str, str]:
    """The object's annotations under scaling.moonin.app/."""
    found: dict[str, str] = obj["metadata"].get("annotations") or {}
    return {key: value for key, value in found.items() if key.startswith(notes.PREFIX)}


def kube_client(kube: FakeKube, **options: Any) -> KubeApi:
    """The agent's Kubernetes client on the fake API server."""
    return KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token), **options)


def make_harness(kube: FakeKube, tmp: Path, *, bounds: Bounds | None = None) -> Harness:
    kube.create(namespace())
    kube.create(namespace("locked"))
    return Harness(
        kube=kube,
        api=StubApi(),
        outbox=Outbox(tmp / "queue", streams=[SCALING], bounds=bounds),
        store=Store(tmp / "queue" / "scaling-state.db"),
        kube_api=ScalingKube(kube_client(kube)),
        tmp=tmp,
    )


@pytest.fixture
def h(kube: FakeKube, tmp_path: Path) -> Iterator[Harness]:
    """A harness whose platform holds template t-1 with its one action on `web`. A module
    that needs another start defines its own `h`."""
    harness = make_harness(kube, tmp_path)
    harness.api.templates = [template()]
    harness.api.actions = {"t-1": [action()]}
    yield harness
    harness.close()
