"""The fake cluster's controllers, each turned on by name per test.

A real cluster runs controllers beside the API server: the garbage collector deletes what a
deleted owner owned, the HPA controller keeps a Deployment's replicas within its HPA's
bounds. The fake runs none unless a test asks (`FakeKube(controllers=[...])` or
`enable_controller`), so a test that does not ask sees exactly the writes it made.

A controller reacts to each change the store records, synchronously and under the store's
lock, and writes through the store like any client; its own writes reach it (and the other
controllers) in turn, so a cascade runs to its end before the write that started it
returns. Controllers register their factory in `REGISTRY` under the name tests use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sandbox.kube.resources import Resource
from sandbox.kube.store import Change, Store


class Controller(Protocol):
    def react(self, resource: Resource, change: Change) -> None:
        """Act on one recorded change (the store's lock is held)."""


Factory = Callable[[Store], Controller]
REGISTRY: dict[str, Factory] = {}


def register(name: str) -> Callable[[Factory], Factory]:
    def add(factory: Factory) -> Factory:
        REGISTRY[name] = factory
        return factory

    return add


class Controllers:
    """The controllers running on one store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._running: dict[str, Controller] = {}

    def enable(self, name: str) -> None:
        if name not in REGISTRY:
            known = ", ".join(sorted(REGISTRY)) or "none"
            raise KeyError(f"no controller named {name!r} (known: {known})")
        with self._store.lock:
            if name not in self._running:
                controller = REGISTRY[name](self._store)
                self._running[name] = controller
                self._store.add_observer(controller.react)

    def disable(self, name: str) -> None:
        with self._store.lock:
            controller = self._running.pop(name, None)
            if controller is not None:
                self._store.remove_observer(controller.react)

    def running(self) -> tuple[str, ...]:
        return tuple(self._running)
