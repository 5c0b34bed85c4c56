"""Warm-up: which resources have listed once, and starting informers in the order their
sources declare (`Source.starts_after`).

An informer that cannot list now (forbidden, failing: its health says so and it retries on
its own) counts as listed: nothing waits forever for it. One that is merely slow is waited
for up to the warm-up timeout, then the next ones start anyway (`warm_up_slow`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from collector.informer import Informer
from collector.resources import Resource
from collector.sources import Source

log = structlog.get_logger("collector")


def cannot_list(informer: Informer[Any]) -> bool:
    """Forbidden or failing now; it retries on its own and its health says why."""
    return not informer.reporter.snapshot().health.ok


class Listings:
    """Which resources have listed once (or failed to: not forever)."""

    def __init__(self, informers: Mapping[Resource, Informer[Any]]) -> None:
        self._informers = informers
        self._done: set[Resource] = set()

    def add(self, resource: Resource) -> None:
        """Nothing waits for it any more (a one-shot list found it forbidden)."""
        self._done.add(resource)

    def listed(self, resource: Resource) -> bool:
        """Whether this resource has listed once (not merely given up on)."""
        informer = self._informers.get(resource)
        return informer is not None and informer.wait_synced(0)

    def all(self, needed: frozenset[Resource]) -> bool:
        """Whether each of these resources has listed once or cannot list now."""
        waiting = needed - self._done
        if not waiting:
            return True  # asked for every object a sink holds back: the common answer first
        for resource in waiting:
            informer = self._informers.get(resource)
            if informer is not None and (informer.wait_synced(0) or cannot_list(informer)):
                self._done.add(resource)
        return needed <= self._done


class WarmUp:
    """Starts each source's informer once what it starts after has listed."""

    def __init__(
        self,
        sources: Sequence[Source[Any]],
        informers: Mapping[Resource, Informer[Any]],
        *,
        timeout: float,
        stopped: threading.Event,
    ) -> None:
        self._sources = sources
        self._informers = informers
        self._timeout = timeout
        self._stopped = stopped

    def order(self) -> list[Informer[Any]]:
        """Every informer, in warm-up order."""
        return [self._informers[source.resource] for source in self._sources]

    def run(self) -> None:
        waited: set[Resource] = set()
        # What each source starts after is a superset of what the ones before it start
        # after, so fewer first is the order that waits least.
        for source in sorted(self._sources, key=lambda source: len(source.starts_after)):
            due = [r for r in self._informers if r in source.starts_after and r not in waited]
            if due:
                for resource in due:
                    informer = self._informers[resource]
                    if not self._wait_listed(informer):
                        log.warning("warm_up_slow", resource=resource.plural)
                    if self._stopped.is_set():
                        return
                waited.update(due)
                log.info("warm_up_phase_done", resources=[r.plural for r in due])
            if self._stopped.is_set():
                return
            self._informers[source.resource].start()

    def _wait_listed(self, informer: Informer[Any]) -> bool:
        """Until the informer has listed once or cannot list now; False when the warm-up
        timeout passed first."""
        deadline = time.monotonic() + self._timeout
        while not informer.wait_synced(0.1):
            if cannot_list(informer):
                return True
            if self._stopped.is_set() or time.monotonic() > deadline:
                return False
        return True
