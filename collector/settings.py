"""The collector's settings: one group of the agent's settings, handed to `Collector` as is.

The first fields are what a user configures (`agent.config` declares where each is read
from: environment variable, config.yaml key, bounds); their defaults here are the
documented ones. The rest tune the collector for tests and benchmarks and are not read
from the configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from collector.informer import InformerSettings
from collector.job_logs import JobLogSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectorSettings:
    ignore_namespaces: tuple[str, ...] = ("kube-system",)
    """Namespaces (exact names or globs) the collector does not watch."""
    ignore_resources: tuple[str, ...] = ()
    """Globs `<kind>/<name>` or `<kind>/<namespace>/<name>` of objects the collector skips
    (`collector.filters`)."""
    ignore_node_labels: tuple[str, ...] = ()
    """Node label keys (exact or globs) kept out of node records."""
    collect_helm_releases: bool = True
    """Read Helm release Secrets into release records."""
    collect_job_logs: bool = True
    """Read the last log lines of failed CronJob runs."""
    collect_events: bool = True
    """Watch Warning Events for the pod errors only they tell (`collector.normalize.pod_event`)."""
    anti_entropy_seconds: float = 86400.0
    """Every this long, everything is sent again with snapshots, one resource at a time
    (0: never)."""

    # Tuning, not configuration.
    flush_seconds: float = 1.0
    flush_max_records: int = 1000
    """A buffer this full is committed at once (bounds its memory during lists)."""
    warm_up_timeout_seconds: float = 120.0
    """How long the warm-up waits for one resource's first list; also how long a list may
    be wanted without completing before its informer reports not ready."""
    pages_in_memory: int = 1
    """List pages (up to a few MB each) held at once across all informers."""
    state_file: Path | None = None
    """Where the per-object state lives (`collector.state`); None: in memory."""
    informer: InformerSettings = field(default_factory=InformerSettings)
    job_logs: JobLogSettings = field(default_factory=JobLogSettings)
