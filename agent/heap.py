"""The cyclic garbage collector's thresholds, set for an agent that decodes objects in bulk.

CPython runs a young-generation collection every 700 container allocations beyond
deallocations. Decoding one list page of pods allocates hundreds of thousands of containers
(each pod's metadata, containers, statuses) that live until the page is processed, so the
default runs a collection every few pods, and each one walks every young object again. On
one thread (a one-shot listing of the default bench cluster) that was about a tenth of the
CPU: 27.4 s with the defaults, 25.0 s with these, 1,826 young collections became 174. In
the running agent, whose CPU varies by a tenth from run to run here, three alternated
pairs did not show it (25.3 s without, 26.1 s with, on average; peak RSS within 2 MiB).
The decoded trees hold no reference cycles, so a larger young generation only delays
freeing the rare cycles by a moment. `moonin-agent preview` lists a whole cluster the same
way and sets them too: counted in instructions (`bench/instructions.py`), 2% less for the
`--small` cluster's listing.

The objects alive once the agent is configured (modules, classes, settings) live as long as
the process: `freeze` moves them out of the generations so that no collection walks them.

How it fails: it does not; it only changes when the interpreter collects.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000
OLDER_THRESHOLD = 20  # collections of the younger generation before one of the next


def tune() -> None:
    """Call once the process is configured, before its threads start."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
