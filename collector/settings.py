"""The discovery branch of the agent's settings, and the filters branch both roles share.

`DiscoverySettings` is what the discovery role receives: its collector's settings (handed
to `Collector` as they are), its Lease's timing and its heartbeat's period. `FilterSettings`
is what a user excludes from collection; the scaling role reads its `ignore_resources` too,
so it is a branch of its own and the collector's settings hold it as given.

The first fields of each are what a user configures (`agent.config` declares where each is
read from: environment variable, config.yaml key, bounds); their defaults here are the
documented ones. The rest tune the collector for tests and benchmarks and are not read
from the configuration.

How it fails: it does not; the values are checked where they are read (`agent.config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from collector.heartbeat import INTERVAL_SECONDS as HEARTBEAT_SECONDS
from collector.informer import InformerSettings
from collector.job_logs import JobLogSettings
from collector.leader import LeaseSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterSettings:
    ignore_namespaces: tuple[str, ...] = ("kube-system",)
    """Namespaces (exact names or globs) the collector does not watch."""
    ignore_resources: tuple[str, ...] = ()
    """Globs `<kind>/<name>` or `<kind>/<namespace>/<name>` of objects the collector skips
    (`collector.filters`) and the scaling role leaves alone."""
    ignore_node_labels: tuple[str, ...] = ()
    """Node label keys (exact or globs) kept out of node records."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectorSettings:
    filters: FilterSettings = field(default_factory=FilterSettings)
    """What is not collected: the process's filters branch, as it is."""
    collect_helm_releases: bool = True
    """Read Helm release Secrets into release records."""
    collect_job_logs: bool = True
    """Read the last log lines of failed CronJob runs."""
    collect_events: bool = True
    """Watch Warning Events for the pod errors only they tell (`collector.normalize.pod_event`)."""
    anti_entropy_seconds: float = 86400.0
    """Every this long, everything is sent again with snapshots, one resource at a time
    (0: never)."""
    warm_up_on_one_cpu: bool = True
    """Keep the process on one CPU until every resource has listed (`runtime.cpu_affinity`)."""
    informer: InformerSettings = field(default_factory=InformerSettings)
    """How each resource is listed and watched; its page size and watch timeouts are
    configured, the rest is tuning."""

    # Tuning, not configuration.
    flush_seconds: float = 1.0
    flush_max_records: int = 1000
    """A buffer this full is committed at once (bounds its memory during lists)."""
    flush_max_bytes: int = 512 * 1024
    """So is a buffer holding this much data already encoded (kept records' JSON)."""
    warm_up_timeout_seconds: float = 120.0
    """How long the warm-up waits for one resource's first list; also how long a list may
    be wanted without completing before its informer reports not ready."""
    pages_in_memory: int = 1
    """List pages (up to a few MB each) held at once across all informers."""
    state_file: Path | None = None
    """Where the per-object state lives (`collector.state`); None: in memory."""
    job_logs: JobLogSettings = field(default_factory=JobLogSettings)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoverySettings:
    collector: CollectorSettings = field(default_factory=CollectorSettings)
    """The collector's settings, handed to each term's `Collector`."""
    leader_election: bool | None = None
    """Only the holder of the Lease collects; None: on when the process runs in a pod."""
    lease: LeaseSettings = field(default_factory=LeaseSettings)
    """The Lease's timing; the role fills in its namespace and this replica's identity."""
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    """Period of the heartbeat, which also carries the cluster's metadata."""
    cloud_metadata: bool | None = None
    """Ask the cloud's metadata endpoints; None: only when the process runs in a pod."""
