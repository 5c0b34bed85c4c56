"""Warm-up: which resources have listed once, and starting informers in the order their
sources declare (`Source.starts_after`).

Both belong to the collector's processor (`collector.processor`): a list counts once the
processor has taken it in, and the warm-up advances at the end of each of its drains, so
no thread waits for it. An informer that cannot list now (forbidden, failing: its health
says so and it retries on its own) counts as listed: nothing waits forever for it. One
that is merely slow is waited for up to the warm-up timeout from its start, then the ones
after it start anyway (`warm_up_slow`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from collector.informer import Informer
from collector.resources import Resource
from collector.sources import Source
from runtime.cpu_affinity import OneCpu

log = structlog.get_logger("collector")


def cannot_list(informer: Informer[Any]) -> bool:
    """Forbidden or failing now; it retries on its own and its health says why (the
    health is its report, read by people: this asks the informer)."""
    return informer.failing


class Listings:
    """Which resources have listed once (or failed to: not forever). Written by the
    processor; `listed` and `all` may be read from other threads (set lookups)."""

    def __init__(self, informers: Mapping[Resource, Informer[Any]]) -> None:
        self._informers = informers
        self._listed: set[Resource] = set()
        self._done: set[Resource] = set()

    def add(self, resource: Resource) -> None:
        """Nothing waits for it any more (a one-shot list found it forbidden)."""
        self._done.add(resource)

    def took(self, resource: Resource) -> None:
        """The processor has taken in a full list of the resource."""
        self._listed.add(resource)
        self._done.add(resource)

    def listed(self, resource: Resource) -> bool:
        """Whether this resource has listed once (not merely given up on)."""
        return resource in self._listed

    def every_one(self) -> bool:
        """Whether every resource has listed once."""
        return len(self._listed) == len(self._informers)

    def all(self, needed: frozenset[Resource]) -> bool:
        """Whether each of these resources has listed once or cannot list now."""
        waiting = needed - self._done
        if not waiting:
            return True  # asked for every object a sink holds back: the common answer first
        for resource in waiting:
            informer = self._informers.get(resource)
            if informer is not None and cannot_list(informer):
                self._done.add(resource)
        return needed <= self._done


class WarmUp:
    """Starts each source's informer once what it starts after has listed; with
    `one_cpu`, keeps the process on one CPU (`runtime.cpu_affinity`) from `begin` until
    every resource has listed or cannot list, the timeout has passed since the last
    informer started (a list that never ends must not keep it there), or `end`."""

    def __init__(
        self,
        sources: Sequence[Source[Any]],
        informers: Mapping[Resource, Informer[Any]],
        listings: Listings,
        *,
        timeout: float,
        one_cpu: bool,
    ) -> None:
        self._sources = sources
        self._informers = informers
        self._listings = listings
        self._timeout = timeout
        self._started: dict[Resource, float] = {}  # resource -> when its informer started
        self._slow: set[Resource] = set()  # waited for past the timeout: not any more
        self._one_cpu = OneCpu() if one_cpu else None
        self._every_resource = frozenset(source.resource for source in sources)

    def order(self) -> list[Informer[Any]]:
        """Every informer, in warm-up order."""
        return [self._informers[source.resource] for source in self._sources]

    def begin(self) -> None:
        """The warm-up starts (its first informers start at the next `advance`)."""
        if self._one_cpu is not None:
            self._one_cpu.narrow()

    def end(self) -> None:
        """The warm-up is over or abandoned (the term ends); any thread may call it."""
        if self._one_cpu is not None:
            self._one_cpu.widen()

    def advance(self) -> None:
        """Start every informer whose turn has come (cheap: called after each drain)."""
        if len(self._started) == len(self._sources):
            if self._one_cpu is not None and self._one_cpu.narrowed and self._listed_or_given_up():
                self.end()
            return
        now = time.monotonic()
        for source in self._sources:
            if source.resource in self._started or not self._due(source.starts_after, now):
                continue
            self._informers[source.resource].start()
            self._started[source.resource] = now

    def _listed_or_given_up(self) -> bool:
        """(Every informer started.) Every resource has listed or cannot list, or the
        timeout has passed since the last one started."""
        last_start = max(self._started.values(), default=0.0)
        return self._listings.all(self._every_resource) or (
            time.monotonic() - last_start > self._timeout
        )

    def _due(self, needed: frozenset[Resource], now: float) -> bool:
        unlisted = [r for r in needed - self._slow if not self._listings.all(frozenset({r}))]
        if not unlisted:
            return True
        if any(r not in self._started or now - self._started[r] <= self._timeout for r in unlisted):
            return False
        for resource in unlisted:
            log.warning("warm_up_slow", resource=resource.plural)
            self._slow.add(resource)
        return True
