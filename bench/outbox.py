"""Outbox throughput: our pipeline against a hand-written SQLite one and the naive pattern.

Every variant moves the same ~1 KB discovery records from a producer thread through a
durable queue (WAL, synchronous=FULL) and a consumer thread that POSTs them with the same
API client (gzip level 1) to the fake platform running in another process:

- pipeline:  shipper.Outbox.put (500-record chunks) -> StreamShipper take -> POST -> ack
- reference: sqlite3 directly, 500 rows per transaction: INSERT 500 | SELECT 500 -> POST
             -> DELETE
- naive:     one persist-queue put per record, one get+ack per record, one POST per record
             (run on fewer records: it is slow, and since its cost per record grows with
             the number of acked rows left in the table, a short run flatters it)

Each variant runs `--rounds` times, interleaved; the median rate counts. The last line
printed is one JSON object with the figures.

    python bench/outbox.py [--records 50000] [--naive-records 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import persistqueue

from shipper.client import ApiClient, ApiSettings
from shipper.outbox import Bounds, Outbox
from shipper.records import DISCOVERY, Record, encode, new_id, utc_timestamp
from shipper.shipper import ShipperSettings, StreamShipper
from shipper.token import TokenSource

TOKEN = "bench-token-5e8a1c"
BATCH = 500


def make_records(count: int) -> list[Record]:
    observed = utc_timestamp()
    padding = "x" * 760  # the envelope fields bring each encoded record to about 1 KB
    return [
        Record(
            id=new_id(),
            kind="deployment",
            op="upsert",
            key=f"bench/web-{n}",
            uid=f"00000000-0000-0000-0000-{n:012d}",
            namespace="bench",
            name=f"web-{n}",
            resource_version=str(n),
            observed_at=observed,
            data={"replicas": 3, "images": ["registry.example/web:1.0"], "padding": padding},
        )
        for n in range(count)
    ]


class Platform:
    """The fake platform in its own process, so its CPU is not charged to the agent."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sandbox.platform", "--port", "0", "--token", TOKEN],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "URL":
            raise RuntimeError("the fake platform did not start")
        self.url = line[1]

    def records_received(self) -> int:
        return httpx.get(f"{self.url}/_sandbox/stats").json()["records_received"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def client(url: str) -> ApiClient:
    return ApiClient(
        base_url=url,
        project_id="p-1",
        cluster_id="c-1",
        token=TokenSource(value=TOKEN),
        settings=ApiSettings(insecure_http=True),
    )


def timed(producer: Callable[[], None], consumer: Callable[[], None]) -> float:
    """Run producer and consumer threads together; seconds until both finished."""
    started = time.perf_counter()
    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def run_pipeline(records: list[Record], url: str, directory: Path) -> float:
    outbox = Outbox(directory, streams=(DISCOVERY,), bounds=Bounds(chunk_records=BATCH))
    stream = outbox[DISCOVERY]
    api = client(url)
    shipper = StreamShipper(
        stream, api.post_records, settings=ShipperSettings(batch_max_records=BATCH)
    )

    produced = threading.Event()

    def produce() -> None:
        for start in range(0, len(records), BATCH):
            stream.put(records[start : start + BATCH])
        produced.set()

    def consume() -> None:
        shipper.start()
        produced.wait()
        # Shipped means acked: the stream is empty once everything was delivered.
        while shipper.reporter.snapshot().counters.get("records_shipped", 0) < len(records):
            time.sleep(0.002)
        while stream.stats().records:  # shipped is counted just before the ack
            time.sleep(0.002)
        shipper.stop(drain_seconds=0)

    elapsed = timed(produce, consume)
    api.close()
    outbox.close()
    return elapsed


def _full_durability(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")


def run_reference(records: list[Record], url: str, directory: Path) -> float:
    path = directory / "reference.db"
    setup = sqlite3.connect(path)
    _full_durability(setup)
    setup.execute("CREATE TABLE q (id INTEGER PRIMARY KEY AUTOINCREMENT, body BLOB)")
    setup.commit()
    setup.close()
    api = client(url)
    run_id = new_id()  # batch ids must differ between rounds, or the platform answers 409
    total = len(records)
    added = threading.Condition()
    inserted = 0

    def produce() -> None:
        nonlocal inserted
        conn = sqlite3.connect(path)
        _full_durability(conn)
        for start in range(0, total, BATCH):
            rows = [(encode(record),) for record in records[start : start + BATCH]]
            with conn:
                conn.executemany("INSERT INTO q (body) VALUES (?)", rows)
            with added:
                inserted += len(rows)
                added.notify()
        conn.close()

    def consume() -> None:
        conn = sqlite3.connect(path)
        _full_durability(conn)
        sent = 0
        batch = 0
        while sent < total:
            with added:
                added.wait_for(lambda sent=sent: inserted > sent)
            rows = conn.execute("SELECT id, body FROM q ORDER BY id LIMIT ?", (BATCH,)).fetchall()
            api.post_records(f"{run_id}-{batch}", [body for _, body in rows])
            with conn:
                conn.execute("DELETE FROM q WHERE id <= ?", (rows[-1][0],))
            sent += len(rows)
            batch += 1
        conn.close()

    elapsed = timed(produce, consume)
    api.close()
    return elapsed


class _Bytes:
    """persist-queue serializer for pre-encoded bytes (no pickle, same as the pipeline)."""

    @staticmethod
    def dumps(value: bytes) -> bytes:
        return value

    @staticmethod
    def loads(value: bytes) -> bytes:
        return value


def run_naive(records: list[Record], url: str, directory: Path) -> float:
    queue = persistqueue.SQLiteAckQueue(
        str(directory), multithreading=True, serializer=_Bytes, db_file_name="naive.db"
    )
    api = client(url)
    run_id = new_id()
    total = len(records)

    def produce() -> None:
        for record in records:
            queue.put(encode(record))

    def consume() -> None:
        for n in range(total):
            item = queue.get(block=True, raw=True)
            api.post_records(f"{run_id}-{n}", [item["data"]])
            queue.ack(id=item["pqid"])

    elapsed = timed(produce, consume)
    api.close()
    queue.close()
    return elapsed


def synchronous_mode_of_persist_queue(directory: Path) -> int:
    queue = persistqueue.SQLiteAckQueue(str(directory), db_file_name="probe.db")
    mode = queue._putter.execute("PRAGMA synchronous").fetchone()[0]  # 2 = FULL
    queue.close()
    return int(mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--naive-records", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3, help="the median of the rounds counts")
    args = parser.parse_args()

    records = make_records(args.records)
    size = sum(len(encode(record)) for record in records[:100]) / 100
    platform = Platform()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            assert synchronous_mode_of_persist_queue(root) == 2, "persist-queue is not at FULL"
            figures: dict[str, float] = {}
            rates: dict[str, list[float]] = {}
            for round_number in range(args.rounds):
                for name, runner, count in (
                    ("pipeline", run_pipeline, args.records),
                    ("sqlite_reference", run_reference, args.records),
                    ("naive", run_naive, args.naive_records),
                ):
                    before = platform.records_received()
                    directory = root / f"{name}-{round_number}"
                    directory.mkdir()
                    elapsed = runner(records[:count], platform.url, directory)
                    arrived = platform.records_received() - before
                    if arrived < count:
                        raise RuntimeError(f"{name}: only {arrived} of {count} records arrived")
                    rates.setdefault(name, []).append(count / elapsed)
                    print(f"{name:>17}: {count} records in {elapsed:.2f} s", flush=True)
            for name, values in rates.items():
                figures[f"{name}_records_per_s"] = round(statistics.median(values))
    finally:
        platform.close()

    result = {
        **figures,
        "ratio_to_reference": round(
            figures["pipeline_records_per_s"] / figures["sqlite_reference_records_per_s"], 3
        ),
        "ratio_to_naive": round(
            figures["pipeline_records_per_s"] / figures["naive_records_per_s"], 1
        ),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "records": args.records,
        "naive_records": args.naive_records,
        "rounds": args.rounds,
        "record_bytes": round(size),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
