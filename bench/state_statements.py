"""What the collector's state store costs per record, statement by statement, in the rhythm
the collector runs them: windows of 500 records, each window committed once (as the
coalescer commits after each put), on a file in a temporary directory.

    python -m bench.state_statements [--records N]

Prints µs per record for each step: a warm-up (a sink adds the record, the coalescer reads
and writes its fingerprint), a restart (added again, read, unchanged), a change (added,
read, written), a rebuild's read of the kept data, a delete (the object popped, the
fingerprint read, the delete enqueued), and the held objects' put and pop. Kept data and
held objects are 2.5 KB, the synthetic cluster's median Deployment and revision record and
held ReplicaSet. Runs in a few seconds; nothing here is a test, and on a loaded machine the
figures vary by a third from run to run: compare runs of one sitting.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from collector.state import Slot, StateStore

WINDOW = 500
PAYLOAD_BYTES = 2500


def measure(store: StateStore, records: int) -> dict[str, float]:
    kept, held = os.urandom(PAYLOAD_BYTES), os.urandom(PAYLOAD_BYTES)
    keys = [f"ns-{n % 1000:04d}/deployment-{n:06d}" for n in range(records)]
    windows = [keys[i : i + WINDOW] for i in range(0, records, WINDOW)]

    def slots(window: list[str]) -> list[Slot]:
        return [("deployment", key) for key in window]

    def add(window: list[str]) -> None:
        for key in window:
            store.produced.add("deployments", key, ("deployment", key), kept)

    def warm_up(window: list[str]) -> None:
        add(window)
        store.sent.get_many(slots(window))
        store.sent.set_many((slot, b"f" * 16) for slot in slots(window))

    def restart(window: list[str]) -> None:
        add(window)
        store.sent.get_many(slots(window))

    def change(window: list[str]) -> None:
        add(window)
        store.sent.get_many(slots(window))
        store.sent.set_many((slot, b"g" * 16) for slot in slots(window))

    def rebuild_read(window: list[str]) -> None:
        for key in window:
            store.produced.kept("deployments", key)

    def delete(window: list[str]) -> None:
        for key in window:
            store.produced.pop("deployments", key)
        store.sent.get_many(slots(window))
        store.sent.discard_many(slots(window))

    def held_put(window: list[str]) -> None:
        for key in window:
            store.held.put("replicasets", key, held)

    def held_pop(window: list[str]) -> None:
        store.held.pop_many("replicasets", window)

    steps: dict[str, Callable[[list[str]], None]] = {
        "warm-up": warm_up,
        "restart": restart,
        "change": change,
        "kept read": rebuild_read,
        "delete": delete,
        "held put": held_put,
        "held pop": held_pop,
    }
    costs = {}
    for name, step in steps.items():
        start = time.perf_counter()
        for window in windows:
            step(window)
            store.commit()
        costs[name] = (time.perf_counter() - start) / records * 1e6
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        store = StateStore(Path(directory) / "state.sqlite")
        try:
            costs = measure(store, args.records)
        finally:
            store.close()
    for name, micros in costs.items():
        print(f"{name:10s} {micros:6.1f} µs per record")


if __name__ == "__main__":
    main()
