"""The one queue between the informers and the processor (`collector.processor`).

Informers only list and watch: what they learn goes onto this queue as deltas, in the order
they learned it (an object applied or removed, a full list completed), and the processor
thread takes them one at a time. Threads that are neither (the Job log reader, the
heartbeat, a resync asked for from outside) hand the processor their work as a `Call`, so
nothing but the processor ever touches the sinks, the relation indexes or the state store's
per-object rows.

The queue is bounded: an informer that gets ahead of the processor blocks in `put` until
there is room (backpressure on the API's stream, as client-go's DeltaFIFO has it), so
nothing is dropped and at most `bound` decoded objects wait in memory.

How it fails: it does not, by itself. Once closed (the collector stopping) a `put` returns
at once without queueing: the informer putting stops at its next object, and what was not
processed is listed again by the next term. In one-shot mode (`run_inline`) each delta is
processed on the putting thread as it is put, and whatever the processor raises reaches
the caller.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from collector.resources import Resource

BOUND = 256
"""Deltas waiting at most: half a list page of decoded objects. At three times the bench's
default cluster, 1,024 (two pages) peaked 4 MiB higher for the same CPU."""

_PUT_SLICE = 0.5  # how often a blocked `put` looks whether the queue was closed


@dataclass(frozen=True, slots=True)
class Applied:
    """The object exists as given (a list item, ADDED or MODIFIED)."""

    resource: Resource
    obj: Any


@dataclass(frozen=True, slots=True)
class Removed:
    """The object was deleted; `obj` is its last state."""

    resource: Resource
    obj: Any


@dataclass(frozen=True, slots=True)
class Listed:
    """A full list completed: `keys` is every object of the resource at that point."""

    resource: Resource
    resource_version: str
    listed_at: str
    keys: AbstractSet[str]


@dataclass(frozen=True, slots=True)
class Call:
    """Work another thread hands the processor (it runs on the processor's thread)."""

    work: Callable[[], None]


Delta = Applied | Removed | Listed | Call


class DeltaQueue:
    """Many putters (informers and the few other threads), one taker (the processor)."""

    def __init__(self, bound: int = BOUND) -> None:
        self._queue: queue.Queue[Delta] = queue.Queue(maxsize=bound)
        self._closed = False
        self._inline: Callable[[Delta], None] | None = None

    def put(self, delta: Delta) -> None:
        """Queue the delta, waiting while the queue is full (see the module docstring)."""
        inline = self._inline
        if inline is not None:
            inline(delta)
            return
        while not self._closed:
            try:
                self._queue.put(delta, timeout=_PUT_SLICE)
                return
            except queue.Full:
                continue

    def take(self, timeout: float) -> Delta | None:
        """The oldest delta, waiting up to `timeout` seconds for one; None if none came."""
        try:
            return self._queue.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None

    def take_now(self) -> Delta | None:
        """The oldest delta if one is queued, else None."""
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def close(self) -> None:
        """Queue nothing more (stopping): blocked putters return."""
        self._closed = True

    def run_inline(self, process: Callable[[Delta], None]) -> None:
        """From now on, process each delta on the thread that puts it (one-shot listing)."""
        self._inline = process

    def sink(self, resource: Resource) -> ResourceDeltas:
        """What an informer of `resource` reports to (`collector.informer.Sink`)."""
        return ResourceDeltas(self, resource)


class ResourceDeltas:
    """One informer's `Sink`: each call becomes a delta on the queue."""

    def __init__(self, deltas: DeltaQueue, resource: Resource) -> None:
        self._deltas = deltas
        self._resource = resource

    def apply(self, obj: Any) -> None:
        self._deltas.put(Applied(self._resource, obj))

    def remove(self, obj: Any) -> None:
        self._deltas.put(Removed(self._resource, obj))

    def listed(self, *, resource_version: str, listed_at: str, keys: AbstractSet[str]) -> None:
        self._deltas.put(Listed(self._resource, resource_version, listed_at, keys))
