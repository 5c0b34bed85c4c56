"""glibc malloc settings suited to a long-running agent with many threads.

Two glibc defaults cost the collector most of its resident memory, not its live data:
- every thread that allocates gets its own arena (up to eight per core), and memory freed in
  one arena is not reused by another thread's allocations, so sixteen informer threads
  decoding multi-megabyte list pages each keep a high-water mark of their own;
- the mmap threshold rises to the size of the largest block freed so far (up to 32 MiB), so
  after the first list page, pages are carved from the heap instead of mapped, and their
  freed space stays resident.

Two arenas and a fixed 1 MiB threshold take the warm-up of a large cluster from ~190 to
~130 MiB (`bench/collect.py`) at no measurable cost in time: the work is bound by the GIL,
not by allocator contention. Settings already given in the environment (`MALLOC_ARENA_MAX`,
`MALLOC_MMAP_THRESHOLD_`) win; other C libraries (musl) are left alone.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Callable, Mapping

# mallopt() parameter numbers from glibc's malloc.h.
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

ARENAS = 2
MMAP_THRESHOLD_BYTES = 1024 * 1024

_SETTINGS = (
    ("MALLOC_ARENA_MAX", M_ARENA_MAX, ARENAS),
    ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
)


def tune(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Apply the settings (call before starting threads); returns the names of those applied."""
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return []
    return [
        name
        for name, parameter, value in _SETTINGS
        if name not in environ and mallopt(parameter, value) == 1
    ]


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt
