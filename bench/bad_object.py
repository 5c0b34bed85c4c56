"""One bad object among many Deployments: what it costs discovery.

The fake Kubernetes API runs in this process with `--deployments` Deployments (and their
namespace) and, unless `--bad none`, one more Deployment the informer cannot use:
`deep` (a field nested 100,000 arrays deep), `huge` (`spec.replicas` past 64 bits) or
`revision` (a ReplicaSet annotated `deployment.kubernetes.io/revision` with 20 digits, next
to a ReplicaSet per Deployment). A collector (the agent's, with its default settings apart
from a 0.05 s flush window) lists them, by streamed list or (`--paged`) in pages of 500, into
an outbox on a scratch directory.

Figures: `listed_seconds`, from the collector's start until every good Deployment's record
is in the outbox; `cpu_seconds`, this process's CPU time over the same span (the fake API
server's included); then, for `--watch-seconds` after that, the requests the Deployments'
and ReplicaSets' informers made (`requests_after_sync`: one watch each when nothing
retries) and whether every informer is alive. `skip_ms` is the time one skip of the bad
object takes (decode attempt, the cut into parts, the warning), the median of 5, measured
on the informer's own methods after the run. Everything talks to 127.0.0.1 only.

The last line printed is one JSON object with the figures and the settings used.

    python bench/bad_object.py [--bad deep|huge|revision|none] [--deployments 2000] [--paged]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import structlog

from collector import resources
from collector.collector import Collector
from collector.informer import _event
from collector.settings import CollectorSettings
from kube.api import KubeApi
from kube.cluster import KubeTarget
from sandbox import objects
from sandbox.kube import FakeKube
from shipper.outbox import Outbox
from shipper.records import DISCOVERY

NS = "bench"


def deployment(name: str) -> dict[str, Any]:
    obj = objects.deployment(name=name, namespace=NS)
    obj["metadata"]["uid"] = f"uid-{name}"  # its ReplicaSet's owner reference names it
    return obj


def bad_objects(kind: str) -> list[dict[str, Any]]:
    if kind == "none":
        return []
    bad = deployment("bad")
    if kind == "deep":
        bad["spec"]["template"]["spec"]["extra"] = msgspec.Raw(b"[" * 100_000 + b"]" * 100_000)
    elif kind == "huge":
        bad["spec"]["replicas"] = 2**70
    rs = objects.replicaset(owner=bad)
    rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "9" * 20
    return [bad, rs] if kind == "revision" else [bad]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bad", choices=["deep", "huge", "revision", "none"], default="deep")
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--paged", action="store_true")
    parser.add_argument("--watch-seconds", type=float, default=20.0)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    scratch = Path(tempfile.mkdtemp())
    with FakeKube() as kube, Outbox(scratch, streams=(DISCOVERY,)) as box:
        kube.create(objects.namespace(name=NS))
        good = [deployment(f"d{i:05}") for i in range(args.deployments)]
        replicasets = [objects.replicaset(owner=d) for d in good]  # before `load` takes them
        kube.load(good[: len(good) // 2] + bad_objects(args.bad) + good[len(good) // 2 :])
        kube.load(replicasets)
        defaults = CollectorSettings()
        settings = dataclasses.replace(
            defaults,
            flush_seconds=0.05,
            anti_entropy_seconds=0,
            state_file=scratch / "collector-state.sqlite",
            informer=dataclasses.replace(defaults.informer, streaming_lists=not args.paged),
        )
        api = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
        collector = Collector(api, box[DISCOVERY], settings=settings)
        wanted = {f"{NS}/d{i:05}" for i in range(args.deployments)}
        found: set[str] = set()
        cpu, started = time.process_time(), time.monotonic()
        collector.start()
        deadline = started + 60
        while not wanted <= found and time.monotonic() < deadline:
            batch = box[DISCOVERY].take(max_records=100_000, max_bytes=10**9)
            if batch is None:
                time.sleep(0.02)
                continue
            for body in batch.bodies:
                record = msgspec.json.decode(body)
                if record["kind"] == "deployment":
                    found.add(record["key"])
            box[DISCOVERY].ack(batch)
        listed = time.monotonic() - started
        cpu_seconds = time.process_time() - cpu
        kube.clear_requests()
        time.sleep(args.watch_seconds)
        watched = {"deployments.apps", "replicasets.apps"}
        requests = sum(1 for r in kube.requests if r.resource in watched)
        alive = all(informer.alive for informer in collector.informers)
        informer = next(i for i in collector.informers if i.resource == resources.DEPLOYMENTS)
        skipped = {
            name: value
            for name, value in informer.reporter.snapshot().counters.items()
            if name.startswith("objects_skipped")
        }
        collector.stop()
        api.close()
        skip_ms = None
        bad = bad_objects(args.bad)
        if args.bad in ("deep", "huge"):
            line = msgspec.json.encode({"type": "MODIFIED", "object": bad[0]})
            times = []
            for _ in range(5):
                at = time.perf_counter()
                informer._handle(_event(line))  # the skip path alone
                times.append((time.perf_counter() - at) * 1000)
            skip_ms = round(statistics.median(times), 2)
    print(
        json.dumps(
            {
                "bad": args.bad,
                "paged": args.paged,
                "deployments": args.deployments,
                "delivered": len(found & wanted),
                "listed_seconds": round(listed, 2),
                "cpu_seconds": round(cpu_seconds, 2),
                "requests_after_sync": requests,
                "watch_seconds": args.watch_seconds,
                "informers_alive": alive,
                "skipped": skipped,
                "skip_ms": skip_ms,
            }
        )
    )


if __name__ == "__main__":
    main()
