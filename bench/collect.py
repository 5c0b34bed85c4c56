"""Discovery against a large synthetic cluster: warm-up, steady pod changes, restart, decoding.

Three processes, so that no CPU or memory of one is charged to another: the fake Kubernetes
API serving a synthetic cluster (`python -m sandbox.kube --synthetic`; by default 1,000
namespaces, 10,000 Deployments with their ReplicaSets, 50,000 Pods, 500 Nodes, 1,000
CronJobs, 2,000 Services, plus the HPAs, Jobs, Ingresses, RBAC objects and Helm release
Secrets the generator derives from them), the fake Moonin platform, and the agent itself,
started as `moonin-agent run --role discovery` (through `python -m agent.cli`, the same entry
point) with leader election off. Everything listens on and talks to 127.0.0.1 only.

Sizes: `--scale F` multiplies every size above by F (the derived ones follow), `--small` by
1/10; both given, they multiply (`--small --scale 2` is a fifth). `--heavy` adds the
generator's heavy objects (`SyntheticSpec(heavy=True)`): a `monitoring` namespace of 40
Helm releases of a kube-prometheus-stack-like chart with 10 revisions each, 400 release
Secrets of about 900 KiB (1.2 MB in the API's JSON); 1 Deployment pod in 100 with a ~200 KB
`last-applied-configuration` annotation; 5 Deployments of 100 containers. The Helm
releases are one namespace's worth and the wide Deployments a few, whatever the scale; the
heavy pods follow it. Every release revision must then arrive as a `helm_release` record.

Warm-up is the time from starting the agent process (imports included) until every record
its first full list produces is in the outbox. The shipper delivers while the collector
works, so "in the outbox" is counted as records still queued (read from the queue file
read-only, as `moonin-agent queue stats` does) plus records the platform received (unique
record ids, so retries are not counted twice). The platform is read first, then the queue,
so a record is missed only if it was both posted and acked between the two reads
(milliseconds apart), and counted twice while its batch is answered but not yet acked (the
ack can wait a moment for the outbox's lock). Warm-up is over when

- every informer has listed: the agent's metrics count a watch for each informer
  (`moonin_agent_informer_watches_total`), and an informer opens its watch only after its
  whole list went through the collector;
- the count reached the expected minimum: one record per object of every kind that always
  yields one (namespaces, Deployments, ReplicaSets, CronJobs, Jobs, Services, HPAs, Nodes,
  Ingresses, NetworkPolicies, RBAC objects, Helm release revisions); pods add `pod_error`
  events for the few in trouble, and every list adds its kind's snapshot, so the real count
  is a little higher;
- and the count has not changed for `--quiet-seconds` (longer than the collector's 1 s flush
  window plus the shipper's linger); the bench also waits for the queue to drain, for
  `delivered_seconds` below.

`warmup_seconds` runs to the last poll at which the count changed (polls are 0.25 s apart;
the quiet period is not included). A double-counted batch changes the count again when its
ack lands, so the figure lies between the moment the last record was committed and the
moment the last batch was delivered and acked: it errs on the long side, never the short
one. `delivered_seconds` is the first poll at which the platform had every record.
`records` is the final count and `records_per_s` is `records / warmup_seconds`.
`peak_rss_mib` is the agent process's VmHWM, read from /proc at the end of the warm-up.
`agent_cpu_seconds` is the agent process's user plus system CPU time (/proc/<pid>/stat) at
the end of the warm-up, its quiet period included (an idle agent uses next to none), and
`agent_cpu_ms_per_1k_objects` is that over the objects of the kinds the agent lists;
`agent_cpu_system_seconds` is the system part of it. `agent_written_mib` is what the
agent's write calls handed the kernel by then (/proc/<pid>/io `wchar`): its SQLite files
(the state store and the outbox, with their write-ahead logs) and its sockets. A one-shot
listing (`bench/instructions.py`) keeps its state in memory, so neither shows there.

Steady state, after the warm-up and before the agent stops (`--steady-seconds`, default 60;
0 skips it): threads of this process change `--steady-rate` Pods a second (default 200)
through the server's API, with JSON merge PATCHes on four keep-alive connections, so the
changes reach the agent over its watches as a kubelet's and a controller's would. The pods
are running, ready, never restarted ones from the first list pages, each changed about
every 10 s; one change in 10 is a container restart (a status patch: restart count up, the
last run terminated with exit code 1, a new container id: one `pod_error` record each),
the others set a label (no record: the collector drops what did not change its output).
`steady_changes` (and `steady_restarts` among them) were made in the window, at
`steady_change_rate` a second. `steady_cpu_cores` is the agent's CPU time over the window
divided by the window's length (1.0 is one core busy); `steady_kube_cpu_cores` the same of
the fake API's process, which shares the machine (it serves the patches and the watches).
The phase then waits, as the warm-up does, until the records of every restart have arrived
and the count has been quiet: `steady_settle_seconds` is how long after the window the
count last changed (a lagging agent shows here), and `steady_records` the records the
platform received from the window's start to then. `steady_rss_mib` is the agent's VmRSS
at the end, `steady_peak_rss_mib` its peak over the phase (VmHWM, reset through
/proc/<pid>/clear_refs as the phase starts).

Then the agent is stopped and started again on the same queue volume, against the cluster
as the steady phase left it, and run the same way until it is quiet.
`restart_bytes_sent_ratio` is the bytes of records the platform received from the restart
(each record as JSON, before gzip: snapshots and anything else), counted from just before
the restart, over the bytes the cold start sent by the end of its warm-up (the steady
phase's records count for neither); the target is at most 0.05.

Decoding, in this process once the agent has stopped: the same list pages the informers
fetch (`limit=500`) of Deployments and Pods are decoded (a) with msgspec into the
collector's own Structs wrapped in a list-page Struct, as the informer does, and (b) with
the kubernetes client's models (`ApiClient.deserialize(text, "V1DeploymentList", ...)`,
bytes to text included, as the client does). Each variant decodes every page once per round;
the medians of the rounds are compared: `decode_speedup_vs_client_models` is the client's
time over msgspec's, over the same bytes. Pages the client's models refuse (they reject
objects missing fields they declare required) are counted and left out of both times.

Event storm (`--event-storm`), after the steady state, same agent: a thread writes Warning
Events through the fake's API at `--storm-rate` a second (default 10,000 a minute) for
`--storm-seconds` (60) about `--storm-pods` (1,000) running pods: first one Event per pod for
each of two incidents (a FailedMount, a failing readiness probe), then their counts rising
(merge patches of `count` and `lastTimestamp`, as the kubelet's correlator writes them),
every tenth write a new Event (a new series) of an incident already reported. One record
per incident is right: `storm_records` (received from the storm's start until the count is
quiet) against `storm_incidents`; `storm_rss_mib` and `storm_peak_rss_mib` the agent's
memory at the end and over the storm, `storm_cpu_cores` its CPU over the writes.

The real server (`--real`): every phase runs first against a real control plane (etcd,
kube-apiserver and kube-controller-manager from the folder `sandbox.controlplane` finds)
loaded with the same synthetic cluster through its API (`real_cluster.py`: the real
controllers make the ReplicaSets and Pods, the bench binds each Pod and writes its status
as a scheduler and a kubelet would), then against the fake at the same size, and a table
puts the two side by side. Its default size is `--scale 0.4` (20,000 Pods, 4,000
Deployments). `steady_kube_cpu_cores` then counts all three processes of the control
plane, and the loading itself is reported (`loaded`), not measured against the agent.

The last line printed is one JSON object with the figures and the sizes used (with
`--real`, one object per server under `real` and `fake`).

    python bench/collect.py [--small] [--scale F] [--heavy] [--real] [--steady-seconds 60]
        [--steady-rate 200] [--decode-pages 4] [--rounds 5] [--event-storm]
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
import msgspec
from clusters import HELM_RELEASES, Cluster, FakeCluster, RealCluster, tail

from agent import queue_inspect
from collector.collector import Collector
from collector.normalize.deployment import Deployment
from collector.normalize.pod_error import Pod
from collector.settings import CollectorSettings
from kube.api import KubeApi
from sandbox.kube.synthetic import SyntheticSpec
from sandbox.serving import free_port
from shipper.outbox import StreamOutbox
from shipper.records import DISCOVERY

TOKEN = "bench-collect-token"
PROJECT_ID = "p-1"
CLUSTER_ID = "c-1"
PAGE_SIZE = 500
POLL_SECONDS = 0.25
WATCHES_METRIC = "moonin_agent_informer_watches_total{"

FULL_SIZES = {
    "namespaces": 1_000,
    "deployments": 10_000,
    "pods": 50_000,
    "nodes": 500,
    "cronjobs": 1_000,
    "services": 2_000,
}
SMALL_DIVISOR = 10
# The real control plane's default size: 20,000 Pods and 4,000 Deployments, the most its load
# (every object through the API, every Pod's binding and status) takes in minutes here.
REAL_SCALE = 0.4

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

# Steady phase: how long a pod waits between two of its changes, and which changes restart.
STEADY_POD_PERIOD_SECONDS = 10
RESTART_EVERY = 10
CHANGE_CONNECTIONS = 4
STEADY_LABEL = "bench.moonin.dev/change"
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}

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

T = TypeVar("T")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra or {})
    return env


class Served:
    """The fake platform in its own process; it prints `URL <url>` once it serves."""

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


def server_cpu_seconds(kube: Cluster) -> float:
    """CPU time of the processes serving the API (all three of a real control plane)."""
    return sum(cpu_seconds(pid) for pid in kube.pids())


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (its own threads, not its children)."""
    return sum(cpu_times(pid))


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU time of a process (its own threads, not its children)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the command name, which is in parentheses and may hold spaces: the
    # state is field 3, utime and stime are fields 14 and 15.
    fields = stat[stat.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def written_mib(pid: int) -> float:
    """What a process's write calls have handed the kernel (/proc/<pid>/io `wchar`: files
    and sockets, whether or not it reached a disk), in MiB."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "wchar":
            return int(value) / 2**20
    raise RuntimeError(f"/proc/{pid}/io has no wchar")


def informer_count() -> int:
    """How many informers (so open watches) the agent runs with its default settings."""
    # Built only to count its informers: nothing is started, so no API or outbox is used.
    collector = Collector(
        cast(KubeApi, None), cast(StreamOutbox, None), settings=CollectorSettings()
    )
    return len(collector.informers)


class Agent:
    """The agent process, on the queue volume in `scratch` (a restart reuses it)."""

    def __init__(
        self, platform: Served, kubeconfig: Path, scratch: Path, *, sources: Path | None = None
    ) -> None:
        """`sources`: a tree of the project (`checkouts.Sources.root`) the agent runs from,
        rather than the packages this bench imports."""
        self.queue_dir = scratch / "queue"
        self.queue_dir.mkdir(exist_ok=True)
        self.log = scratch / "agent.log"
        self.health_port = free_port()
        env = child_env(
            {
                "PROJECT_ID": PROJECT_ID,
                "CLUSTER_ID": CLUSTER_ID,
                "CLUSTER_TOKEN": TOKEN,
                "API_URL": platform.url,
                "MOONIN_INSECURE_HTTP": "true",
                "QUEUE_DIR": str(self.queue_dir),
                "QUEUE_MAX_RECORDS": "2000000",
                "QUEUE_MAX_BYTES": str(2 * 1024**3),
                "LOG_LEVEL": "warning",
                "LEADER_ELECTION": "false",
                "HEALTH_ADDR": f"127.0.0.1:{self.health_port}",
                "SHUTDOWN_SHIP_SECONDS": "5",
                **({} if sources is None else {"PYTHONPATH": str(sources)}),
            }
        )
        argv = [sys.executable, "-m", "agent.cli", "run", "--role", "discovery"]
        argv += ["--kubeconfig", str(kubeconfig)]
        with self.log.open("wb") as out:
            self.started = time.monotonic()
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=None if sources is None else scratch,  # not a checkout: see `checkouts`
            )

    def memory(self) -> dict[str, float]:
        return memory_mib(self.proc.pid)

    def watching(self) -> int:
        """How many informers have listed and watch now, from the agent's own metrics (an
        informer opens its watch only once its list went through the collector)."""
        try:
            metrics = httpx.get(f"http://127.0.0.1:{self.health_port}/metrics", timeout=5)
        except httpx.TransportError:
            return 0  # not serving yet
        return sum(
            float(line.rpartition(" ")[2]) >= 1
            for line in metrics.text.splitlines()
            if line.startswith(WATCHES_METRIC)
        )

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)

    def system_cpu_seconds(self) -> float:
        return cpu_times(self.proc.pid)[1]

    def written_mib(self) -> float:
        return written_mib(self.proc.pid)

    def reset_peak(self) -> None:
        """Start VmHWM over from the current resident set (Linux's clear_refs, value 5)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"the agent exited with status {self.proc.returncode}:\n{tail(self.log)}"
            )

    def progress(self, since: float, now: float, what: str) -> None:
        rss = self.memory()
        print(
            f"  {now - since:5.1f} s: {what}, agent RSS {rss['VmRSS']:.0f} MiB "
            f"(peak {rss['VmHWM']:.0f})",
            flush=True,
        )

    def stop(self) -> int:
        return stop(self.proc, grace=30)


@dataclass(frozen=True)
class Until:
    """When a run of the agent has settled (see `settle`)."""

    informers: int
    quiet: float
    timeout: float


@dataclass
class Settled:
    changed_at: float  # monotonic time of the last poll at which the count changed
    delivered_at: float  # the first poll at which the platform had every record
    records: int  # received + queued
    received: int


def settle(agent: Agent, platform: Served, *, since: float, expected: int, until: Until) -> Settled:
    """Poll until every informer watches, at least `expected` records are in the outbox or
    delivered, the count stayed unchanged `until.quiet` seconds and the queue is empty."""
    informers = until.informers
    total = -1
    changed_at = reported = since
    delivered: list[tuple[float, int]] = []  # (poll time, records received)
    while True:
        time.sleep(POLL_SECONDS)
        now = time.monotonic()
        agent.check()
        # The platform first, then the queue: see the module docstring.
        received = platform.stats()["unique_record_ids"]
        stream = queue_inspect.stats(agent.queue_dir, DISCOVERY)[DISCOVERY]
        watches = agent.watching()
        if stream.dropped:
            raise RuntimeError(f"the outbox dropped {stream.dropped} records: raise its bounds")
        queued = stream.records
        delivered.append((now, received))
        if received + queued != total:
            total = received + queued
            changed_at = now
        if now - reported >= 2:
            reported = now
            agent.progress(
                since,
                now,
                f"{total} records ({received} received, {queued} queued), "
                f"watches {watches}/{informers}",
            )
        settled = now - changed_at >= until.quiet
        if watches >= informers and total >= expected and settled and not queued:
            # (an empty queue: everything was delivered, so delivered_at exists)
            return Settled(
                changed_at=changed_at,
                delivered_at=next(t for t, n in delivered if n >= total),
                records=total,
                received=received,
            )
        if now - since > until.timeout:
            raise RuntimeError(
                f"not settled within {until.timeout:.0f} s: {total} of at least {expected} "
                f"records ({queued} still queued), watches {watches}/{informers}; "
                f"agent log:\n{tail(agent.log)}"
            )


@dataclass
class WarmUp:
    seconds: float
    delivered_seconds: float
    records: int
    peak_rss_mib: float
    rss_mib: float
    cpu_seconds: float
    system_cpu_seconds: float
    written_mib: float


def warm_up(agent: Agent, platform: Served, *, expected: int, until: Until) -> WarmUp:
    """Wait for the agent's first full list to be in the outbox (see the module docstring)."""
    done = settle(agent, platform, since=agent.started, expected=expected, until=until)
    memory = agent.memory()
    return WarmUp(
        seconds=done.changed_at - agent.started,
        delivered_seconds=done.delivered_at - agent.started,
        records=done.records,
        peak_rss_mib=memory["VmHWM"],
        rss_mib=memory["VmRSS"],
        cpu_seconds=agent.cpu_seconds(),
        system_cpu_seconds=agent.system_cpu_seconds(),
        written_mib=agent.written_mib(),
    )


class _Named(msgspec.Struct):
    name: str
    namespace: str = ""


class _PodStatus(msgspec.Struct, rename="camel"):
    phase: str = ""
    container_statuses: list[dict[str, Any]] = []


class _PodItem(msgspec.Struct):
    metadata: _Named
    status: _PodStatus


class _PodPage(msgspec.Struct):
    items: list[_PodItem]


def _fresh(container: dict[str, Any]) -> bool:
    """Running, ready and never restarted: a past termination could share its id with the
    one a restart reports (the generator's do), and the agent reports each only once."""
    running = "running" in (container.get("state") or {})
    return running and bool(container.get("ready")) and not container.get("restartCount")


def running_pods(kube: Cluster, count: int) -> list[_PodItem]:
    """Up to `count` pods, from the first list pages, whose containers are all fresh."""
    found: list[_PodItem] = []
    for raw in fetch_pages(kube, "/api/v1/pods", count // PAGE_SIZE + 2):
        for pod in msgspec.json.decode(raw, type=_PodPage).items:
            statuses = pod.status.container_statuses
            if pod.status.phase == "Running" and statuses and all(map(_fresh, statuses)):
                found.append(pod)
    return found[:count]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def restart_patch(pod: _PodItem, change: int) -> dict[str, Any]:
    """A status patch for the pod's first container's restart, as the kubelet reports one
    (the whole list: a merge patch replaces lists); `pod` keeps the new statuses."""
    statuses = pod.status.container_statuses
    first = statuses[0]
    now = _now()
    terminated = {
        "exitCode": 1,
        "reason": "Error",
        "startedAt": first["state"]["running"].get("startedAt", now),
        "finishedAt": now,
        "containerID": first.get("containerID", ""),
    }
    statuses[0] = first | {
        "restartCount": first.get("restartCount", 0) + 1,
        "containerID": f"containerd://{change:064x}",
        "state": {"running": {"startedAt": now}},
        "lastState": {"terminated": terminated},
    }
    return {"status": {"containerStatuses": statuses}}


@dataclass
class Changes:
    changes: int
    restarts: int
    seconds: float


def change_pods(kube: Cluster, pods: list[_PodItem], rate: float, seconds: float) -> Changes:
    """Change `rate` pods a second for `seconds`, spread over `CHANGE_CONNECTIONS` keep-alive
    connections (one alone cannot keep up with a real API server's latency), each with its
    own share of the pods; behind schedule, a connection's next changes go out at once until
    it is caught up."""
    lanes = min(CHANGE_CONNECTIONS, len(pods))
    with ThreadPoolExecutor(lanes) as pool:
        done = list(
            pool.map(
                lambda lane: _change_lane(kube, pods, lane, lanes, rate, seconds), range(lanes)
            )
        )
    return Changes(
        sum(d.changes for d in done), sum(d.restarts for d in done), max(d.seconds for d in done)
    )


def _change_lane(
    kube: Cluster, pods: list[_PodItem], lane: int, lanes: int, rate: float, seconds: float
) -> Changes:
    mine = pods[lane::lanes]
    changes = restarts = 0
    with kube.client() as http:
        started = time.monotonic()
        while (now := time.monotonic()) - started < seconds:
            due = started + changes * lanes / rate
            if due > now:
                time.sleep(due - now)
            pod = mine[changes % len(mine)]
            change = changes * lanes + lane  # unique across the lanes
            path = f"/api/v1/namespaces/{pod.metadata.namespace}/pods/{pod.metadata.name}"
            if change % RESTART_EVERY == 0:
                patch = restart_patch(pod, change)
                path += "/status"
                restarts += 1
            else:
                patch = {"metadata": {"labels": {STEADY_LABEL: str(change)}}}
            response = http.patch(path, content=msgspec.json.encode(patch), headers=MERGE_PATCH)
            response.raise_for_status()
            changes += 1
    return Changes(changes, restarts, time.monotonic() - started)


# Event storm: what the kubelets write about pods in trouble, many times over.
STORM_REASONS = (
    ("FailedMount", None, 'MountVolume.SetUp failed for volume "creds" : secret "creds" not found'),
    (
        "Unhealthy",
        "spec.containers{app}",
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
    ),
)
NEW_SERIES_EVERY = 10  # a new Event of the same incident, as the correlator opens one


def storm_event(pod: _Named, reason: int, series: int, count: int) -> dict[str, Any]:
    """A kubelet's Warning Event about `pod` (core/v1, the old form)."""
    name, field_path, message = STORM_REASONS[reason]
    involved: dict[str, Any] = {
        "kind": "Pod",
        "namespace": pod.namespace,
        "name": pod.name,
        "apiVersion": "v1",
    }
    if field_path is not None:
        involved["fieldPath"] = field_path
    now = _now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod.name}.storm{reason}x{series}", "namespace": pod.namespace},
        "involvedObject": involved,
        "reason": name,
        "message": message,
        "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": count,
        "reportingComponent": "kubelet",
        "reportingInstance": "node-1",
    }


@dataclass
class Storm:
    writes: int
    seconds: float
    incidents: int
    records: int
    settle_seconds: float
    rss_mib: float
    peak_rss_mib: float
    cpu_cores: float


def write_events(
    kube: Cluster, pods: list[_PodItem], rate: float, seconds: float
) -> tuple[int, float]:
    """Warning Events at `rate` a second for `seconds`: first one per (pod, reason), then
    their counts rising (merge patches), every NEW_SERIES_EVERY-th write a new series of an
    incident already reported."""
    incidents = [(pod, reason) for pod in pods for reason in range(len(STORM_REASONS))]
    series: dict[int, int] = {}
    counts: dict[int, int] = {}
    writes = 0
    with kube.client() as http:
        started = time.monotonic()
        while (now := time.monotonic()) - started < seconds:
            due = started + writes / rate
            if due > now:
                time.sleep(due - now)
            index = writes % len(incidents)
            pod, reason = incidents[index]
            events = f"/api/v1/namespaces/{pod.metadata.namespace}/events"
            if index not in series or writes % NEW_SERIES_EVERY == 0:
                series[index] = series.get(index, -1) + 1
                counts[index] = 1
                body = storm_event(pod.metadata, reason, series[index], 1)
                response = http.post(events, content=msgspec.json.encode(body))
            else:
                counts[index] += 1
                name = f"{pod.metadata.name}.storm{reason}x{series[index]}"
                patch = {"count": counts[index], "lastTimestamp": _now()}
                response = http.patch(
                    f"{events}/{name}", content=msgspec.json.encode(patch), headers=MERGE_PATCH
                )
            response.raise_for_status()
            writes += 1
    return writes, time.monotonic() - started


def event_storm(
    agent: Agent,
    kube: Cluster,
    platform: Served,
    *,
    seconds: float,
    rate: float,
    pods: int,
    until: Until,
) -> Storm:
    """A storm of Warning Events across `pods` pods (see the module docstring)."""
    chosen = running_pods(kube, pods)
    before = platform.stats()["unique_record_ids"]
    agent.reset_peak()
    cpu_before = agent.cpu_seconds()
    writes, took = while_reporting(
        agent, platform, before, lambda: write_events(kube, chosen, rate, seconds)
    )
    ended = time.monotonic()
    cpu = agent.cpu_seconds() - cpu_before
    # The writes go round the (pod, reason) pairs: a short storm reaches only some of them.
    incidents = min(writes, len(chosen) * len(STORM_REASONS))
    done = settle(agent, platform, since=ended, expected=before + incidents, until=until)
    memory = agent.memory()
    return Storm(
        writes=writes,
        seconds=took,
        incidents=incidents,
        records=done.received - before,
        settle_seconds=done.changed_at - ended,
        rss_mib=memory["VmRSS"],
        peak_rss_mib=memory["VmHWM"],
        cpu_cores=cpu / took,
    )


def while_reporting(agent: Agent, platform: Served, before: int, work: Callable[[], T]) -> T:
    """Run `work` on a thread, checking the agent is alive and printing how many records
    arrived meanwhile; returns what it returns (raises what it raises)."""
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        running = pool.submit(work)
        while True:
            try:
                return running.result(timeout=2)
            except TimeoutError:
                agent.check()
                received = platform.stats()["unique_record_ids"] - before
                agent.progress(started, time.monotonic(), f"{received} records received")


@dataclass
class Steady:
    seconds: float
    changes: int
    restarts: int
    cpu_cores: float
    kube_cpu_cores: float
    rss_mib: float
    peak_rss_mib: float
    records: int
    settle_seconds: float


def steady_state(
    agent: Agent,
    kube: Cluster,
    platform: Served,
    *,
    seconds: float,
    rate: float,
    until: Until,
) -> Steady:
    """Pod changes at a steady rate while the agent runs (see the module docstring)."""
    pods = running_pods(kube, max(1, round(rate * STEADY_POD_PERIOD_SECONDS)))
    if not pods:
        raise RuntimeError("no running pod to change")
    before = platform.stats()["unique_record_ids"]
    agent.reset_peak()
    cpu_before, kube_cpu_before = agent.cpu_seconds(), server_cpu_seconds(kube)
    made = while_reporting(agent, platform, before, lambda: change_pods(kube, pods, rate, seconds))
    ended = time.monotonic()
    cpu = agent.cpu_seconds() - cpu_before
    kube_cpu = server_cpu_seconds(kube) - kube_cpu_before
    done = settle(
        agent,
        platform,
        since=ended,
        expected=before + made.restarts,
        until=until,
    )
    memory = agent.memory()
    return Steady(
        seconds=made.seconds,
        changes=made.changes,
        restarts=made.restarts,
        cpu_cores=cpu / made.seconds,
        kube_cpu_cores=kube_cpu / made.seconds,
        rss_mib=memory["VmRSS"],
        peak_rss_mib=memory["VmHWM"],
        records=done.received - before,
        settle_seconds=done.changed_at - ended,
    )


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    continue_: str | None = msgspec.field(default=None, name="continue")


class _PageMeta(msgspec.Struct):
    metadata: _ListMeta


def fetch_pages(kube: Cluster, path: str, pages: int) -> list[bytes]:
    """The first `pages` list pages of `path`, as the informer fetches them."""
    params = {"limit": str(PAGE_SIZE)}
    with kube.client() as http:
        return _pages(http, path, params, pages)


def _pages(http: httpx.Client, path: str, params: dict[str, str], pages: int) -> list[bytes]:
    found: list[bytes] = []
    while len(found) < pages:
        response = http.get(path, params=params)
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
        f"{struct.__name__}Page",
        [("metadata", _ListMeta), ("items", list[struct])],  # type: ignore[valid-type]
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


def positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def add_size_arguments(parser: argparse.ArgumentParser, *, default_scale: str) -> None:
    """`--small` and `--scale F`: the synthetic cluster's size (`size_factor`)."""
    parser.add_argument(
        "--small", action="store_true", help=f"1/{SMALL_DIVISOR} of the sizes (a quick run)"
    )
    parser.add_argument(
        "--scale",
        type=positive,
        default=None,
        metavar="F",
        help=f"multiply every size by F (with --small too: they multiply; default {default_scale})",
    )


def size_factor(scale: float, *, small: bool) -> float:
    """What `--scale` and `--small` multiply the full sizes by."""
    return scale / (SMALL_DIVISOR if small else 1)


def synthetic_sizes(factor: float) -> dict[str, int]:
    """The generator's sizes (`SyntheticSpec`'s fields) at `factor` times the full ones."""
    return {name: max(1, round(value * factor)) for name, value in FULL_SIZES.items()}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_arguments(parser, default_scale=f"1, or {REAL_SCALE} with --real")
    parser.add_argument(
        "--real",
        action="store_true",
        help="also run every phase against a real control plane loaded with the same "
        "cluster (first), and print both side by side",
    )
    parser.add_argument(
        "--heavy",
        action="store_true",
        help="add heavy objects: Helm release Secrets near 1 MiB, pods with 200 KB "
        "annotations, Deployments of 100 containers",
    )
    parser.add_argument(
        "--steady-seconds",
        type=float,
        default=60.0,
        help="pod changes for this long after the warm-up (0: none)",
    )
    parser.add_argument("--steady-rate", type=positive, default=200.0, help="pod changes a second")
    parser.add_argument(
        "--decode-pages", type=int, default=4, help="list pages per kind for the decode timing"
    )
    parser.add_argument("--rounds", type=int, default=5, help="decode rounds; the median counts")
    parser.add_argument(
        "--event-storm",
        action="store_true",
        help="after the steady state, a storm of Warning Events (see --storm-*)",
    )
    parser.add_argument("--storm-seconds", type=positive, default=60.0, help="storm length")
    parser.add_argument(
        "--storm-rate", type=positive, default=10_000 / 60, help="Event writes a second"
    )
    parser.add_argument("--storm-pods", type=int, default=1000, help="pods the storm is about")
    add_settle_arguments(parser)
    return parser.parse_args()


def add_settle_arguments(parser: argparse.ArgumentParser) -> None:
    """When a warm-up is over (`Until`), and when the bench gives up on one."""
    parser.add_argument(
        "--quiet-seconds",
        type=float,
        default=3.0,
        help="the record count must stay unchanged this long to end the warm-up",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after SECONDS")


def expected_records(counts: dict[str, int]) -> int:
    """At least this many records from a first full list (`Cluster.counts`'s objects)."""
    return sum(counts.get(name, 0) for name in ONE_RECORD_EACH) + counts[HELM_RELEASES]


def listed_objects(counts: dict[str, int]) -> int:
    """The objects of the kinds the agent lists."""
    return expected_records(counts) + sum(counts.get(name, 0) for name in LISTED_OTHERWISE)


def start_platform(scratch: Path) -> Served:
    argv = ["sandbox.platform", "--port", "0", "--token", TOKEN]
    argv += ["--project-id", PROJECT_ID, "--cluster-id", CLUSTER_ID]
    return Served("platform", argv, scratch / "platform.log")


def measure(
    kube: Cluster, spec: SyntheticSpec, args: argparse.Namespace, until: Until, scratch: Path
) -> dict[str, Any]:
    """Every phase of the bench against one API server; the figures, as printed at the end."""
    platform = start_platform(scratch)
    try:
        counts = kube.counts()
        expected, listed = expected_records(counts), listed_objects(counts)
        print(
            f"{kube.name}: {listed} objects of the kinds the agent lists; at least {expected} "
            f"records expected; {until.informers} informers",
            flush=True,
        )
        print("agent warm-up:", flush=True)
        agent = Agent(platform, kube.kubeconfig, scratch)
        try:
            warm = warm_up(agent, platform, expected=expected, until=until)
            cold_bytes = platform.stats()["record_bytes_received"]
            print(
                f"warm-up: {warm.records} records in {warm.seconds:.1f} s "
                f"({warm.records / warm.seconds:.0f}/s; all delivered at "
                f"{warm.delivered_seconds:.1f} s), agent peak RSS "
                f"{warm.peak_rss_mib:.0f} MiB, CPU {warm.cpu_seconds:.1f} s "
                f"({warm.system_cpu_seconds:.1f} s in the kernel), "
                f"{warm.written_mib:.0f} MiB written",
                flush=True,
            )
            steady: Steady | None = None
            if args.steady_seconds > 0:
                print(
                    f"steady state: {args.steady_rate:.0f} pod changes a second for "
                    f"{args.steady_seconds:.0f} s:",
                    flush=True,
                )
                steady = steady_state(
                    agent,
                    kube,
                    platform,
                    seconds=args.steady_seconds,
                    rate=args.steady_rate,
                    until=until,
                )
                print(
                    f"steady state: {steady.changes} changes ({steady.restarts} restarts) "
                    f"in {steady.seconds:.1f} s, {steady.records} records, agent CPU "
                    f"{steady.cpu_cores:.2f} cores (the API server's "
                    f"{steady.kube_cpu_cores:.2f}), RSS {steady.rss_mib:.0f} MiB (peak "
                    f"{steady.peak_rss_mib:.0f}), settled {steady.settle_seconds:.1f} s "
                    "after the last change",
                    flush=True,
                )
            storm: Storm | None = None
            if args.event_storm:
                print(
                    f"event storm: {args.storm_rate:.0f} Warning Event writes a second "
                    f"about {args.storm_pods} pods for {args.storm_seconds:.0f} s:",
                    flush=True,
                )
                storm = event_storm(
                    agent,
                    kube,
                    platform,
                    seconds=args.storm_seconds,
                    rate=args.storm_rate,
                    pods=args.storm_pods,
                    until=until,
                )
                print(
                    f"event storm: {storm.writes} writes in {storm.seconds:.1f} s, "
                    f"{storm.records} records for {storm.incidents} incidents, agent CPU "
                    f"{storm.cpu_cores:.2f} cores, RSS {storm.rss_mib:.0f} MiB (peak "
                    f"{storm.peak_rss_mib:.0f}), settled {storm.settle_seconds:.1f} s "
                    "after the last write",
                    flush=True,
                )
        finally:
            exit_code = agent.stop()

        # A restart against the same cluster, on the same queue volume; what it sends
        # is counted from here, so that the steady phase's records are not.
        before_restart = platform.stats()
        print("agent restart:", flush=True)
        agent = Agent(platform, kube.kubeconfig, scratch)
        try:
            again = warm_up(agent, platform, expected=expected, until=until)
        finally:
            agent.stop()
        after_restart = platform.stats()
        restart_bytes = (
            after_restart["record_bytes_received"] - before_restart["record_bytes_received"]
        )
        restart_records = after_restart["unique_record_ids"] - before_restart["unique_record_ids"]
        print(
            f"restart: {restart_records} records, {restart_bytes} bytes of records "
            f"({restart_bytes / cold_bytes:.4f} of the cold start's {cold_bytes}), "
            f"settled in {again.seconds:.1f} s, agent peak RSS {again.peak_rss_mib:.0f} MiB",
            flush=True,
        )
    finally:
        platform.close()

    decoding: dict[str, Decoding] = {}
    for name, path, struct, model in DECODED:
        pages = fetch_pages(kube, path, args.decode_pages)
        decoded = compare_decoding(pages, struct, model, args.rounds)
        decoding[name] = decoded
        print(
            f"decode {name}: {decoded.objects} objects ({decoded.megabytes} MB) "
            f"msgspec {decoded.msgspec_seconds * 1000:.1f} ms, client models "
            f"{decoded.client_seconds * 1000:.0f} ms, refused pages "
            f"{decoded.refused_pages}",
            flush=True,
        )

    ours = sum(d.msgspec_seconds for d in decoding.values())
    theirs = sum(d.client_seconds for d in decoding.values())
    return {
        "server": kube.name,
        "objects": listed,
        "records": warm.records,
        "records_expected_min": expected,
        "warmup_seconds": round(warm.seconds, 2),
        "delivered_seconds": round(warm.delivered_seconds, 2),
        "records_per_s": round(warm.records / warm.seconds),
        "peak_rss_mib": warm.peak_rss_mib,
        "rss_after_warmup_mib": warm.rss_mib,
        "agent_cpu_seconds": round(warm.cpu_seconds, 2),
        "agent_cpu_ms_per_1k_objects": round(warm.cpu_seconds * 1e6 / listed, 1),
        "agent_cpu_system_seconds": round(warm.system_cpu_seconds, 2),
        "agent_written_mib": round(warm.written_mib, 1),
        **(
            {}
            if steady is None
            else {
                "steady_seconds": round(steady.seconds, 1),
                "steady_changes": steady.changes,
                "steady_restarts": steady.restarts,
                "steady_change_rate": round(steady.changes / steady.seconds, 1),
                "steady_cpu_cores": round(steady.cpu_cores, 3),
                "steady_kube_cpu_cores": round(steady.kube_cpu_cores, 3),
                "steady_rss_mib": steady.rss_mib,
                "steady_peak_rss_mib": steady.peak_rss_mib,
                "steady_records": steady.records,
                "steady_settle_seconds": round(steady.settle_seconds, 2),
            }
        ),
        **(
            {}
            if storm is None
            else {
                "storm_event_writes": storm.writes,
                "storm_seconds": round(storm.seconds, 1),
                "storm_incidents": storm.incidents,
                "storm_records": storm.records,
                "storm_settle_seconds": round(storm.settle_seconds, 2),
                "storm_cpu_cores": round(storm.cpu_cores, 3),
                "storm_rss_mib": storm.rss_mib,
                "storm_peak_rss_mib": storm.peak_rss_mib,
            }
        ),
        "restart_bytes_sent_ratio": round(restart_bytes / cold_bytes, 4),
        "restart_records": restart_records,
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
        "agent_exit_code": exit_code,
        "objects_by_resource": counts,
    }


# What the side-by-side table of `--real` shows, in this order.
COMPARED = (
    "objects",
    "records",
    "warmup_seconds",
    "delivered_seconds",
    "peak_rss_mib",
    "agent_cpu_seconds",
    "agent_cpu_ms_per_1k_objects",
    "agent_cpu_system_seconds",
    "agent_written_mib",
    "steady_cpu_cores",
    "steady_kube_cpu_cores",
    "steady_records",
    "restart_bytes_sent_ratio",
    "restart_seconds",
)


def main() -> None:
    args = parse_args()
    factor = size_factor(args.scale or (REAL_SCALE if args.real else 1.0), small=args.small)
    sizes = synthetic_sizes(factor)
    spec = SyntheticSpec(**sizes, heavy=args.heavy)
    informers = informer_count()
    until = Until(informers=informers, quiet=args.quiet_seconds, timeout=args.timeout)
    figures: dict[str, dict[str, Any]] = {}

    with tempfile.TemporaryDirectory(prefix="bench-collect-") as directory:
        scratch = Path(directory)
        kinds: list[Callable[[Path], Cluster]] = []
        if args.real:

            def real(where: Path) -> Cluster:
                print(f"loading a real control plane: {sizes}, heavy {args.heavy}", flush=True)
                cluster = RealCluster(spec, where, lambda line: print(f"  {line}", flush=True))
                print(f"loaded: {cluster.loaded}", flush=True)
                return cluster

            kinds.append(real)

        def fake(where: Path) -> Cluster:
            print(f"generating the synthetic cluster: {sizes}, heavy {args.heavy}", flush=True)
            return FakeCluster(spec, where, child_env())

        kinds.append(fake)
        for make in kinds:
            where = scratch / str(len(figures))
            where.mkdir()
            kube = make(where)
            try:
                result = measure(kube, spec, args, until, where)
            finally:
                kube.close()
            figures[result.pop("server")] = result

    if args.real:
        print(f"{'':32} {'real':>12} {'fake':>12}")
        for name in COMPARED:
            row = [figures[server].get(name) for server in ("real", "fake")]
            print(f"{name:32} " + " ".join(f"{value!s:>12}" for value in row))
    summary: dict[str, Any] = figures["fake"] if not args.real else figures
    print(
        json.dumps(
            {
                **summary,
                "informers": informers,
                "scale": round(factor, 4),
                "sizes": sizes,
                "heavy": (
                    {
                        "helm_releases": spec.derived("heavy_helm_releases"),
                        "helm_revisions": spec.heavy_helm_revisions,
                        "pods": spec.derived("heavy_pods"),
                        "wide_deployments": spec.derived("wide_deployments"),
                    }
                    if args.heavy
                    else None
                ),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
