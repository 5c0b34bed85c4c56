"""The one queue between the informers and the processor (`collector.processor`).

Informers only list and watch: what they learn goes onto this queue as deltas, in the order
they learned it (an object applied or removed, a full list completed), and the processor
thread takes them one at a time. Threads that are neither (the Job log reader, the
heartbeat, a resync asked for from outside) hand the processor their work as a `Call`, so
nothing but the processor ever touches the sinks, the relation indexes or the state store's
per-object rows.

The queue is bounded: an informer that gets ahead of the processor blocks in `put` until
there is room (backpressure on the API's stream, as client-go's DeltaFIFO has it), so
nothing is dropped and at most `bound` decoded objects wait in memory. Once full, it takes
puts again only when the processor has taken it down to half: in a warm-up the processor is
the slower side, and a putter let in for every delta taken woke once per object.

The taker is woken the same way, by the batch: an applied or removed object wakes it only
once `WAKE_AT` deltas wait; a completed list and a call wake it at once. A delta that does
not wake it is still taken when the taker's wait ends (`take`'s timeout: the processor's
drain deadline, at most its flush window), so it reaches the same flush, and a pod list
no longer costs a wake-up (a context switch each) per pod the processor took alone.

How it fails: it does not, by itself. Once closed (the collector stopping) a `put` returns
at once without queueing: the informer putting stops at its next object, and what was not
processed is listed again by the next term. In one-shot mode (`run_inline`) each delta is
processed on the putting thread as it is put, and whatever the processor raises reaches
the caller.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Container
from typing import Any

import msgspec

from collector.resources import Resource

BOUND = 256
"""Deltas waiting at most: half a list page of decoded objects. At three times the bench's
default cluster, 1,024 (two pages) peaked 4 MiB higher for the same CPU."""
WAKE_AT = 64
"""Applied or removed objects waiting that wake the taker (see the module docstring)."""


# Deltas are frozen Structs rather than frozen dataclasses: one is made per object listed,
# and a frozen dataclass's `__init__` (a `object.__setattr__` per field) cost 7 times more.
class Applied(msgspec.Struct, frozen=True, gc=False):
    """The object exists as given (a list item, ADDED or MODIFIED)."""

    resource: Resource
    obj: Any


class Removed(msgspec.Struct, frozen=True, gc=False):
    """The object was deleted; `obj` is its last state."""

    resource: Resource
    obj: Any


class Listed(msgspec.Struct, frozen=True, gc=False):
    """A full list completed: `keys` is every object of the resource at that point."""

    resource: Resource
    resource_version: str
    listed_at: str
    keys: Container[str]


class Call(msgspec.Struct, frozen=True):
    """Work another thread hands the processor (it runs on the processor's thread). Tracked
    by the garbage collector, unlike every other Struct here: its closure may reach what
    holds it, and only a tracked Struct lets the collector see such a cycle."""

    work: Callable[[], None]


Delta = Applied | Removed | Listed | Call


class DeltaQueue:
    """Many putters (informers and the few other threads), one taker (the processor)."""

    def __init__(self, bound: int = BOUND, wake_at: int = WAKE_AT) -> None:
        self._bound = bound
        self._wake_at = min(wake_at, bound)
        self._reopen_at = bound // 2
        self._deltas: deque[Delta] = deque()
        self._full = False  # from reaching the bound till taken down to `_reopen_at`
        self._closed = False
        self._lock = threading.Lock()
        self._queued = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._inline: Callable[[Delta], None] | None = None

    def put(self, delta: Delta) -> None:
        """Queue the delta, waiting while the queue is full (see the module docstring)."""
        inline = self._inline
        if inline is not None:
            inline(delta)
            return
        with self._lock:
            while self._full and not self._closed:
                self._room.wait()
            if self._closed:
                return
            self._deltas.append(delta)
            if len(self._deltas) >= self._bound:
                self._full = True
            if len(self._deltas) >= self._wake_at or isinstance(delta, Listed | Call):
                self._queued.notify()

    def take(self, timeout: float) -> Delta | None:
        """The oldest delta, waiting up to `timeout` seconds for one; None if none came. The
        wait ends early only when the queue wakes the taker (see the module docstring)."""
        with self._lock:
            if not self._deltas and timeout > 0:
                self._queued.wait(timeout)
            return self._take()

    def take_now(self) -> Delta | None:
        """The oldest delta if one is queued, else None."""
        with self._lock:
            return self._take()

    def _take(self) -> Delta | None:
        """(`_lock` held.)"""
        if not self._deltas:
            return None
        delta = self._deltas.popleft()
        if self._full and len(self._deltas) <= self._reopen_at:
            self._full = False
            self._room.notify_all()
        return delta

    def close(self) -> None:
        """Queue nothing more (stopping): blocked putters return."""
        with self._lock:
            self._closed = True
            self._room.notify_all()

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

    def listed(self, *, resource_version: str, listed_at: str, keys: Container[str]) -> None:
        self._deltas.put(Listed(self._resource, resource_version, listed_at, keys))
