"""Discovery warm-up: a large synthetic cluster into the outbox, the agent's memory, decoding.

Three processes, so that no CPU or memory of one is charged to another: the fake Kubernetes
API serving a synthetic cluster (`python -m sandbox.kube --synthetic`; by default 1,000
namespaces, 10,000 Deployments with their ReplicaSets, 50,000 Pods, 500 Nodes, 1,000
CronJobs, 2,000 Services, plus the HPAs, Jobs, Ingresses, RBAC objects and Helm release
Secrets the generator derives from them), the fake Moonin platform, and the agent itself,
started as `moonin-agent run --role discovery` (through `python -m agent.cli`, the same entry
point) with leader election off. Everything listens on and talks to 127.0.0.1 only.

Warm-up is the time from starting the agent process (imports included) until every record
its first full list produces is in the outbox. The shipper delivers while the collector
works, so "in the outbox" is counted as records still queued (read from the queue file
read-only, as `moonin-agent queue stats` does) plus records the platform received (unique
record ids, so retries are not counted twice). The platform is read first, then the queue,
so a record is missed only if it was both posted and acked between the two reads
(milliseconds apart), and counted twice while its batch is answered but not yet acked (the
ack can wait a moment for the outbox's lock). Warm-up is over when

- every informer has listed: the fake holds one open watch per informer, and an informer
  opens its watch only after its whole list went through the collector;
- the count reached the expected minimum: one record per object of every kind that always
  yields one (namespaces, Deployments, ReplicaSets, CronJobs, Jobs, Services, HPAs, Nodes,
  Ingresses, NetworkPolicies, RBAC objects, Helm releases); pods add `pod_error` events for
  the few in trouble, and every list adds its kind's snapshot, so the real count is a
  little higher;
- and the count has not changed for `--quiet-seconds` (longer than the collector's 1 s flush
  window plus the shipper's linger); the bench also waits for the queue to drain, for
  `delivered_seconds` below.

`warmup_seconds` runs to the last poll at which the count changed (polls are 0.25 s apart;
the quiet period is not included). A double-counted batch changes the count again when its
ack lands, so the figure lies between the moment the last record was committed and the
moment the last batch was delivered and acked: it errs on the long side, never the short
one. `delivered_seconds` is the first poll at which the platform had every record.
`records` is the final count and `records_per_s` is `records / warmup_seconds`.
`peak_rss_mib` is the agent process's VmHWM, read from /proc just before it is stopped.

Then the agent is started again on the same queue volume, against the unchanged cluster,
and run the same way until it is quiet. `restart_bytes_sent_ratio` is the bytes of records
the platform received from the restart (each record as JSON, before gzip: snapshots and
anything else) over the bytes the cold start sent; the target is at most 0.05.

Decoding, in this process once the agent has stopped: the same list pages the informers
fetch (`limit=500`) of Deployments and Pods are decoded (a) with msgspec into the
collector's own Structs wrapped in a list-page Struct, as the informer does, and (b) with
the kubernetes client's models (`ApiClient.deserialize(text, "V1DeploymentList", ...)`,
bytes to text included, as the client does). Each variant decodes every page once per round;
the medians of the rounds are compared: `decode_speedup_vs_client_models` is the client's
time over msgspec's, over the same bytes. Pages the client's models refuse (they reject
objects missing fields they declare required) are counted and left out of both times.

The last line printed is one JSON object with the figures and the sizes used.

    python bench/collect.py [--small] [--decode-pages 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import msgspec

from agent import inspect
from collector.collector import Collector, CollectorSettings
from collector.kube import KubeApi
from collector.normalize.deployment import Deployment
from collector.normalize.pod_error import Pod
from sandbox.kube.synthetic import SyntheticSpec
from shipper.outbox import StreamOutbox
from shipper.records import DISCOVERY

TOKEN = "bench-collect-token"
PROJECT_ID = "p-1"
CLUSTER_ID = "c-1"
PAGE_SIZE = 500

FULL_SIZES = {
    "namespaces": 1_000,
    "deployments": 10_000,
    "pods": 50_000,
    "nodes": 500,
    "cronjobs": 1_000,
    "services": 2_000,
}
SMALL_DIVISOR = 10

# Resources (as the fake names them in its stats) whose every object yields a record.
ONE_RECORD_EACH = (
    "namespaces",
    "nodes",
    "services",
    "deployments.apps",
    "replicasets.apps",
    "horizontalpodautoscalers.autoscaling",
    "jobs.batch",
    "cronjobs.batch",
    "ingresses.networking.k8s.io",
    "networkpolicies.networking.k8s.io",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
)
# Listed by the agent too, without a record per object (pods: events for those in trouble).
LISTED_OTHERWISE = ("pods",)

# What the decode comparison reads: path, the collector's Struct, the client's list model.
DECODED = (
    ("deployments", "/apis/apps/v1/deployments", Deployment, "V1DeploymentList"),
    ("pods", "/api/v1/pods", Pod, "V1PodList"),
)

# Children get a clean environment: no proxy, no in-cluster detection, no stray kubeconfig,
# no agent settings from the caller's shell beyond the ones set here.
_DROPPED_ENV = (
    "KUBECONFIG",
    "CONFIG_FILE",
    "CLUSTER_TOKEN_FILE",
    "DISCOVERY_API_URL",
    "SCALING_API_URL",
    "MOONIN_CA_BUNDLE",
    "POD_NAME",
    "POD_NAMESPACE",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra or {})
    return env


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Served:
    """A fake (kube or platform) in its own process; it prints `URL <url>` once it serves."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", *argv],
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                env=child_env(),
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()  # EOF (an empty line) if it died
        if len(line) != 2 or line[0] != "URL":
            self.close()
            raise RuntimeError(f"the fake {name} did not start:\n{tail(log)}")
        self.url = line[1]
        self.http = httpx.Client(base_url=self.url, trust_env=False, timeout=30)

    def stats(self) -> dict[str, Any]:
        return self.http.get("/_sandbox/stats").json()

    def close(self) -> None:
        if getattr(self, "http", None) is not None:
            self.http.close()
        stop(self.proc, grace=10)


def stop(proc: subprocess.Popen[Any], *, grace: float) -> int:
    """SIGTERM, then SIGKILL after `grace` seconds; the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def memory_mib(pid: int) -> dict[str, float]:
    """VmHWM (peak resident set) and VmRSS of a process, in MiB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            found[key] = round(int(value.split()[0]) / 1024, 1)
    return found


def informer_count() -> int:
    """How many informers (so open watches) the agent runs with its default settings."""
    # Built only to count its informers: nothing is started, so no API or outbox is used.
    collector = Collector(
        cast(KubeApi, None), cast(StreamOutbox, None), settings=CollectorSettings()
    )
    return len(collector.informers)


@dataclass
class WarmUp:
    seconds: float
    delivered_seconds: float
    records: int
    received: int
    queued: int
    dropped: int
    watches: int
    peak_rss_mib: float
    rss_mib: float
    exit_code: int


def run_agent(
    kube: Served,
    platform: Served,
    kubeconfig: Path,
    scratch: Path,
    *,
    expected: int,
    informers: int,
    quiet: float,
    timeout: float,
) -> WarmUp:
    queue_dir = scratch / "queue"
    queue_dir.mkdir(exist_ok=True)  # a restart runs on the same volume
    log = scratch / "agent.log"
    env = child_env(
        {
            "PROJECT_ID": PROJECT_ID,
            "CLUSTER_ID": CLUSTER_ID,
            "CLUSTER_TOKEN": TOKEN,
            "API_URL": platform.url,
            "MOONIN_INSECURE_HTTP": "true",
            "QUEUE_DIR": str(queue_dir),
            "QUEUE_MAX_RECORDS": "2000000",
            "QUEUE_MAX_BYTES": str(2 * 1024**3),
            "LOG_LEVEL": "warning",
            "LEADER_ELECTION": "false",
            "HEALTH_ADDR": "127.0.0.1:0",
            "SHUTDOWN_SHIP_SECONDS": "5",
        }
    )
    argv = [sys.executable, "-m", "agent.cli", "run", "--role", "discovery"]
    argv += ["--kubeconfig", str(kubeconfig)]
    poll = 0.25
    with log.open("wb") as out:
        started = time.monotonic()
        agent = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    try:
        total = received = queued = dropped = watches = -1
        changed_at = started
        reported = started
        delivered: list[tuple[float, int]] = []  # (poll time, records received)
        while True:
            time.sleep(poll)
            now = time.monotonic()
            if agent.poll() is not None:
                raise RuntimeError(f"the agent exited with status {agent.returncode}:\n{tail(log)}")
            # The platform first, then the queue: see the module docstring.
            received = platform.stats()["unique_record_ids"]
            stream = inspect.stats(queue_dir, DISCOVERY)[DISCOVERY]
            watches = kube.stats()["watches"]
            queued, dropped = stream.records, stream.dropped
            delivered.append((now, received))
            if received + queued != total:
                total = received + queued
                changed_at = now
            if now - reported >= 2:
                reported = now
                rss = memory_mib(agent.pid)
                print(
                    f"  {now - started:5.1f} s: {total} records ({received} received, "
                    f"{queued} queued), watches {watches}/{informers}, "
                    f"agent RSS {rss['VmRSS']:.0f} MiB (peak {rss['VmHWM']:.0f})",
                    flush=True,
                )
            settled = now - changed_at >= quiet
            if watches >= informers and total >= expected and settled and not queued:
                break  # (an empty queue: everything was delivered, so delivered_seconds exists)
            if now - started > timeout:
                raise RuntimeError(
                    f"no warm-up within {timeout:.0f} s: {total} of at least {expected} "
                    f"records ({queued} still queued), watches {watches}/{informers}; "
                    f"agent log:\n{tail(log)}"
                )
        memory = memory_mib(agent.pid)
    finally:
        exit_code = stop(agent, grace=30)
    if dropped:
        raise RuntimeError(f"the outbox dropped {dropped} records: raise its bounds")
    return WarmUp(
        seconds=changed_at - started,
        delivered_seconds=next(t for t, n in delivered if n >= total) - started,
        records=total,
        received=received,
        queued=queued,
        dropped=dropped,
        watches=watches,
        peak_rss_mib=memory["VmHWM"],
        rss_mib=memory["VmRSS"],
        exit_code=exit_code,
    )


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    continue_: str | None = msgspec.field(default=None, name="continue")


class _PageMeta(msgspec.Struct):
    metadata: _ListMeta


def fetch_pages(kube: Served, path: str, pages: int) -> list[bytes]:
    """The first `pages` list pages of `path`, as the informer fetches them."""
    found: list[bytes] = []
    params = {"limit": str(PAGE_SIZE)}
    while len(found) < pages:
        response = kube.http.get(path, params=params)
        response.raise_for_status()
        found.append(response.content)
        meta = msgspec.json.decode(response.content, type=_PageMeta).metadata
        if not meta.continue_:
            break
        params["continue"] = meta.continue_
    return found


@dataclass
class Decoding:
    objects: int
    megabytes: float
    msgspec_seconds: float
    client_seconds: float
    refused_pages: int


def compare_decoding(pages: list[bytes], struct: type, model: str, rounds: int) -> Decoding:
    """Median seconds to decode `pages` with msgspec Structs and with the client's models."""
    from kubernetes.client import ApiClient

    client = ApiClient()
    page_type: Any = msgspec.defstruct(
        f"{struct.__name__}Page", [("metadata", _ListMeta), ("items", list[struct])]
    )
    decoder = msgspec.json.Decoder(page_type)

    def by_client(raw: bytes) -> Any:
        return client.deserialize(raw.decode("utf-8"), model, "application/json")

    accepted: list[bytes] = []
    refused = 0
    for raw in pages:
        try:
            by_client(raw)
        except Exception:  # pydantic's ValidationError, or whatever the models raise
            refused += 1
        else:
            accepted.append(raw)
    objects = sum(len(decoder.decode(raw).items) for raw in accepted)
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        for times, decode in ((ours, decoder.decode), (theirs, by_client)):
            gc.collect()
            started = time.perf_counter()
            for raw in accepted:
                decode(raw)  # the result is dropped at once, as a list page would be
            times.append(time.perf_counter() - started)
    return Decoding(
        objects=objects,
        megabytes=round(sum(map(len, accepted)) / 1e6, 1),
        msgspec_seconds=statistics.median(ours),
        client_seconds=statistics.median(theirs),
        refused_pages=refused,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--small", action="store_true", help=f"1/{SMALL_DIVISOR} of the sizes (a quick run)"
    )
    parser.add_argument(
        "--decode-pages", type=int, default=4, help="list pages per kind for the decode timing"
    )
    parser.add_argument("--rounds", type=int, default=5, help="decode rounds; the median counts")
    parser.add_argument(
        "--quiet-seconds",
        type=float,
        default=3.0,
        help="the record count must stay unchanged this long to end the warm-up",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after SECONDS")
    args = parser.parse_args()

    divisor = SMALL_DIVISOR if args.small else 1
    sizes = {name: value // divisor for name, value in FULL_SIZES.items()}
    spec = SyntheticSpec(**sizes)
    informers = informer_count()

    with tempfile.TemporaryDirectory(prefix="bench-collect-") as directory:
        scratch = Path(directory)
        kubeconfig = scratch / "kubeconfig"
        served: list[Served] = []
        try:
            print(f"generating the synthetic cluster: {sizes}", flush=True)
            argv = ["sandbox.kube", "--synthetic", "--kubeconfig", str(kubeconfig)]
            for name, value in sizes.items():
                argv += [f"--{name}", str(value)]
            kube = Served("kube", argv, scratch / "kube.log")
            served.append(kube)
            platform = Served(
                "platform",
                [
                    "sandbox.platform",
                    "--port",
                    "0",
                    "--token",
                    TOKEN,
                    "--project-id",
                    PROJECT_ID,
                    "--cluster-id",
                    CLUSTER_ID,
                ],
                scratch / "platform.log",
            )
            served.append(platform)

            counts: dict[str, int] = kube.stats()["objects"]
            helm_releases = spec.derived("helm_releases")
            expected = sum(counts.get(name, 0) for name in ONE_RECORD_EACH) + helm_releases
            listed = expected + sum(counts.get(name, 0) for name in LISTED_OTHERWISE)
            print(
                f"served: {sum(counts.values())} objects, {listed} of them of the kinds the "
                f"agent lists; at least {expected} records expected; {informers} informers",
                flush=True,
            )

            print("agent warm-up:", flush=True)
            warm = run_agent(
                kube,
                platform,
                kubeconfig,
                scratch,
                expected=expected,
                informers=informers,
                quiet=args.quiet_seconds,
                timeout=args.timeout,
            )
            print(
                f"warm-up: {warm.records} records in {warm.seconds:.1f} s "
                f"({warm.records / warm.seconds:.0f}/s; all delivered at "
                f"{warm.delivered_seconds:.1f} s), agent peak RSS "
                f"{warm.peak_rss_mib:.0f} MiB, exit status {warm.exit_code}",
                flush=True,
            )

            # A restart against the unchanged cluster, on the same queue volume.
            cold_bytes = platform.stats()["record_bytes_received"]
            print("agent restart:", flush=True)
            again = run_agent(
                kube,
                platform,
                kubeconfig,
                scratch,
                expected=expected,
                informers=informers,
                quiet=args.quiet_seconds,
                timeout=args.timeout,
            )
            restart_bytes = platform.stats()["record_bytes_received"] - cold_bytes
            print(
                f"restart: {again.records - warm.records} records, {restart_bytes} bytes of "
                f"records ({restart_bytes / cold_bytes:.4f} of the cold start's {cold_bytes}), "
                f"settled in {again.seconds:.1f} s, agent peak RSS {again.peak_rss_mib:.0f} MiB",
                flush=True,
            )

            decoding: dict[str, Decoding] = {}
            for name, path, struct, model in DECODED:
                pages = fetch_pages(kube, path, args.decode_pages)
                result = compare_decoding(pages, struct, model, args.rounds)
                decoding[name] = result
                print(
                    f"decode {name}: {result.objects} objects ({result.megabytes} MB) "
                    f"msgspec {result.msgspec_seconds * 1000:.1f} ms, client models "
                    f"{result.client_seconds * 1000:.0f} ms, refused pages "
                    f"{result.refused_pages}",
                    flush=True,
                )
        finally:
            for child in reversed(served):
                child.close()

    ours = sum(d.msgspec_seconds for d in decoding.values())
    theirs = sum(d.client_seconds for d in decoding.values())
    result: dict[str, Any] = {
        "objects": listed,
        "objects_in_cluster": sum(counts.values()),
        "records": warm.records,
        "records_expected_min": expected,
        "warmup_seconds": round(warm.seconds, 2),
        "delivered_seconds": round(warm.delivered_seconds, 2),
        "records_per_s": round(warm.records / warm.seconds),
        "peak_rss_mib": warm.peak_rss_mib,
        "rss_after_warmup_mib": warm.rss_mib,
        "restart_bytes_sent_ratio": round(restart_bytes / cold_bytes, 4),
        "restart_records": again.records - warm.records,
        "restart_seconds": round(again.seconds, 2),
        "restart_peak_rss_mib": again.peak_rss_mib,
        "decode_speedup_vs_client_models": round(theirs / ours, 1) if ours else None,
        **{
            f"decode_speedup_{name}": round(d.client_seconds / d.msgspec_seconds, 1)
            for name, d in decoding.items()
            if d.msgspec_seconds
        },
        "decode_objects": sum(d.objects for d in decoding.values()),
        "decode_megabytes": round(sum(d.megabytes for d in decoding.values()), 1),
        "decode_client_refused_pages": sum(d.refused_pages for d in decoding.values()),
        "informers": informers,
        "agent_exit_code": warm.exit_code,
        "sizes": sizes,
        "objects_by_resource": counts,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
