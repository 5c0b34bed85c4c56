"""`moonin-agent preview`: every record the collector would send now, printed, nothing sent.

What a security reviewer runs to see what leaves the cluster. It builds the collector `run`
builds, from the same settings (the filters and switches of config.yaml and the
environment; no credentials, no Moonin URL), lists every resource once instead of watching
(`Collector.list_once`), and prints each record as one JSON line on stdout: exactly the
bytes the outbox would hold and the shipper would send. Nothing is queued, no file is
written, nothing is sent anywhere.

The output is what a first `run` against the same cluster sends, except that:
- `id` and `observed_at` are new on every run (as they are for `run`);
- the `cluster_metadata` record (which `run` sends with every heartbeat) is built from the
  nodes and the API server's version only: `leader` is null, and the cloud metadata
  endpoints are never asked (`run` asks them from inside a pod), so what only the cloud
  knows (account, cluster name) may be missing.

How it fails: bad configuration or no cluster to talk to is one line on stderr and exit 2.
A resource RBAC forbids is a warning on stderr and left out, the rest is printed (`run`
would skip it too). Any other failure to read the cluster is one line on stderr and exit 1
with nothing printed: a partial listing is not what `run` would send. So is a stdout that
refuses the lines. Logs go to stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import BinaryIO

import msgspec
import structlog

from agent import exits
from agent.config import PreviewSettings
from agent.logs import configure_logging
from collector.collector import Collector
from collector.metadata import MetadataProbe
from kube.api import KubeApi
from kube.cluster import KubeConfigError, load_target
from kube.errors import KubeError
from shipper.records import Entry

log = structlog.get_logger("agent.preview")


class PrintedRecords:
    """A coalescer destination that writes each record as one JSON line, as queued."""

    resync_needed = False  # nothing is ever lost on the way to the stream
    at_bound = False  # and nothing waits there
    fill = 0.0

    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def put_entries(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self._out.write(entry.body + b"\n")
        self._out.flush()

    def clear_resync_needed(self) -> None:
        """Nothing to clear: see `resync_needed`."""


def preview(
    settings: PreviewSettings,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    out: BinaryIO | None = None,
) -> int:
    """Print the records (to `out`, default stdout); returns the exit code."""
    configure_logging(settings.log_level, secrets=lambda: ())  # no Moonin token is read
    try:
        target = load_target(os.environ, kubeconfig=kubeconfig, context=context)
    except KubeConfigError as exc:
        return exits.Failure(str(exc), exits.CANNOT_START).report()
    api = KubeApi(target)
    collector = Collector(
        api,
        PrintedRecords(out or sys.stdout.buffer),
        settings=settings.collection,
    )
    try:
        forbidden = collector.list_once()
        # After the lists: the metadata is derived from the nodes just listed.
        collector.cluster_metadata(MetadataProbe(enabled=False), leader=None)
        collector.coalescer.flush()
    except (KubeError, msgspec.DecodeError) as exc:
        return exits.Failure(f"cannot read the cluster: {exc}", exits.FAILED).report()
    finally:
        api.close()
    written = collector.coalescer.reporter.snapshot()
    if not written.health.ok:  # stdout refused the lines (a closed pipe)
        return exits.Failure(
            written.health.reason or "cannot write the records", exits.FAILED
        ).report()
    records = written.counters.get("records_enqueued", 0)
    log.info("preview_done", records=records, forbidden=forbidden)
    return exits.OK
