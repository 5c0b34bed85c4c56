"""How long a thread keeps the interpreter before handing it to another that waits.

CPython asks the running thread to let go of the GIL once another thread has waited 5 ms
for it. During a warm-up an informer (reading and decoding a list) and the collector's
processor (normalizing, storing) both want the interpreter all the time, so every 5 ms the
two trade places, each trade a wake-up and a context switch. At 50 ms, three alternated
pairs of warm-ups of the default bench cluster took 19.0, 17.1 and 20.6 s of CPU against
21.9, 18.7 and 22.2 s (-10%), at the same peak RSS; 200 ms bought nothing more in two
further pairs.

What it costs: a thread woken while another runs Python flat out (the health server's
answer, a lease renewal, the shipper) may wait up to one interval for the interpreter,
50 ms, where probes and lease renewals count in seconds. A thread that blocks (on a socket,
a lock, an SQLite statement) still hands the interpreter over at once.

How it fails: it does not; it only changes when threads trade the interpreter.
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL_SECONDS = 0.05


def tune() -> None:
    """Call once, before the roles' threads start."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
