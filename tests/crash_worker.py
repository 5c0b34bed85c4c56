"""A producer and the real shipper in one process, for tests that kill or inspect it.

Configured like the agent (environment, `agent.config`, `agent.delivery.open_delivery`); it
commits records into the discovery outbox and, only after `put` returned, appends their
ids to a log file: that log is the list of records the outbox promised to deliver.

    python tests/crash_worker.py COMMITTED_LOG RUN_ID [TOTAL]

Without TOTAL it produces until killed; with TOTAL it stops producing after that many
records, waits until the outbox is empty, prints "drained" and exits. With `CRASH_SEED` in
its environment, its batch sizes and pauses are drawn from that seed and its RUN_ID.
"""

from __future__ import annotations

import dataclasses
import os
import random
import sys
import time

from agent.config import load_settings
from agent.delivery import open_delivery
from shipper.records import DISCOVERY, Record, utc_timestamp
from shipper.shipper import ShipperSettings
from shipper.token import TokenSource

FAST_SHIPPING = ShipperSettings(
    batch_max_records=60,
    batch_max_bytes=256 * 1024,
    linger_seconds=0.02,
    backoff_initial_seconds=0.05,
    backoff_max_seconds=0.3,
)


def main() -> int:
    committed_log, run_id = sys.argv[1], sys.argv[2]
    total = int(sys.argv[3]) if len(sys.argv) > 3 else None
    if "CRASH_SEED" in os.environ:
        random.seed(f"{os.environ['CRASH_SEED']}-{run_id}")
    settings = load_settings("discovery", os.environ)
    token = TokenSource(value=settings.identity.token, file=settings.identity.token_file)
    delivery = open_delivery(
        dataclasses.replace(
            settings, outbox=dataclasses.replace(settings.outbox, shipping=FAST_SHIPPING)
        ),
        token,
    )
    stream = delivery.outbox[DISCOVERY]
    print("opened", stream.stats().records, flush=True)
    delivery.start()
    log = os.open(committed_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    produced = 0
    while total is None or produced < total:
        count = random.randint(1, 40) if total is None else min(40, total - produced)
        records = [
            Record(
                id=f"{run_id}-{produced + i}",
                kind="deployment",
                op="upsert",
                key=f"shop/{run_id}-{produced + i}",
                observed_at=utc_timestamp(),
                data={"padding": "x" * random.randint(50, 400)},
            )
            for i in range(count)
        ]
        stream.put(records)
        # One write call per put: a SIGKILL lands before or after it, never inside.
        os.write(log, "".join(f"{record.id}\n" for record in records).encode())
        produced += count
        time.sleep(random.uniform(0, 0.005))
    while stream.stats().records:
        time.sleep(0.05)
    print("drained", flush=True)
    delivery.stop(drain_seconds=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
