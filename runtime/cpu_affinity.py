"""Every thread of the process on one CPU for a while, then back on the CPUs it had.

A discovery warm-up runs its informers and the collector's processor flat out at once. Only
one of them runs Python at a time (the interpreter's lock), and they trade that lock at
every socket read and every SQLite statement, each of which lets it go: about 50,000
trades in a warm-up of the default bench cluster. On two CPUs each trade wakes the other
CPU, and each thread comes back to caches the other one has filled. On one CPU the thread
that let go takes the lock back before the woken one runs, so the threads trade only when
one blocks or its time slice ends. Measured (`bench/collect.py`, default cluster, 2 cores,
alternated runs): the warm-up's CPU 14% lower, its voluntary context switches from about
53,000 to 7,000, and the warm-up no slower, since what the threads lose is only the overlap
of the little C work they do without the lock (TLS, SQLite, compression).

Hence one CPU only while the burst lasts: a steady agent is mostly idle, and a thread kept
on one CPU for days could not leave a CPU that a neighbour keeps busy. The CPU kept is the
one the calling thread is on, within the process's allowed set (a container's cpuset).

How it fails: a change of CPUs the kernel refuses (a seccomp profile, a cpuset changed
under the process) is logged and the threads stay where they were; a platform
without CPU affinity (not Linux) does nothing. Nothing else depends on it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Set as AbstractSet

import structlog

log = structlog.get_logger("runtime")

_TASKS = "/proc/self/task"


class OneCpu:
    """Narrowed once (`narrow`), widened once (`widen`, also before any narrowing, which
    then never happens): one object per burst. Any thread may call either."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._allowed: frozenset[int] | None = None  # the CPUs to give back, while narrowed
        self._over = False

    @property
    def narrowed(self) -> bool:
        return self._allowed is not None

    def narrow(self) -> None:
        with self._lock:
            if self._over or self._allowed is not None or not hasattr(os, "sched_setaffinity"):
                return
            allowed = frozenset(os.sched_getaffinity(0))
            if len(allowed) < 2:
                return
            here = _current_cpu()
            one = frozenset({here if here in allowed else min(allowed)})
            if _set_every_thread(one):
                self._allowed = allowed
                log.info("cpu_affinity_narrowed", cpu=min(one), allowed=len(allowed))
            else:
                _set_every_thread(allowed)  # whatever was narrowed before the refusal

    def widen(self) -> None:
        with self._lock:
            self._over = True
            if self._allowed is None:
                return
            allowed, self._allowed = self._allowed, None
            if _set_every_thread(allowed):
                log.info("cpu_affinity_restored", allowed=len(allowed))


def _set_every_thread(cpus: AbstractSet[int]) -> bool:
    """Every thread of the process on `cpus`; False if the kernel refused (logged).

    A thread started meanwhile takes its starter's CPUs, old or new: so the tasks are
    listed again until a listing shows none not yet set. A thread started after that last
    listing was started by one already set."""
    done: set[int] = set()
    while True:
        try:
            tasks = {int(name) for name in os.listdir(_TASKS)} - done
        except OSError as exc:
            log.warning("cpu_affinity_unavailable", error=str(exc))
            return False
        if not tasks:
            return True
        for task in tasks:
            try:
                os.sched_setaffinity(task, cpus)
            except ProcessLookupError:
                pass  # the thread ended
            except OSError as exc:
                log.warning("cpu_affinity_refused", cpus=sorted(cpus), error=str(exc))
                return False
        done |= tasks


def _current_cpu() -> int:
    """The CPU the calling thread last ran on (-1 where unknown): field 39 of its stat."""
    try:
        with open("/proc/thread-self/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        return int(fields[36])
    except (OSError, IndexError, ValueError):
        return -1
