"""Prometheus metrics, read at scrape time from what the components already expose.

Components know nothing of Prometheus: each keeps a `HealthReporter` (health and counters),
the outboxes answer `stats()`, the API clients report each request to an observer. This
module turns them into metrics when `/metrics` is scraped:

- every counter of every reporter: `moonin_agent_<component>_<counter>_total`, where an
  informer's resource, a shipper's or an outbox's stream become a label
  (`moonin_agent_informer_relists_total{resource="pods"}`,
  `moonin_agent_shipper_records_shipped_total{stream="discovery"}`); a counter named
  `<counter>/<reason>` is `moonin_agent_<counter>_total` with a `reason` label too, whatever
  its component (`moonin_agent_objects_skipped_total{resource="pods",reason="unstorable"}`);
- `moonin_agent_component_healthy{component}` (1 or 0), and the queue of each stream:
  `moonin_agent_queue_records`, `_queue_bytes`, `_queue_oldest_age_seconds`,
  `_queue_dead_letters`, `_queue_resync_needed`;
- `moonin_agent_leader` (1 while this replica collects; discovery only);
- `moonin_agent_http_request_duration_seconds{endpoint,status_class}`, a histogram.

Counters of a component that is replaced (a collector per leadership term) start again
from zero with it, which Prometheus' `rate()` reads as a counter reset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runtime.health import HealthReporter
from shipper.queuefile import StreamStats

PREFIX = "moonin_agent"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Components named "<kind>.<name>": the name becomes this label.
_LABEL_OF_KIND = {"informer": "resource", "shipper": "stream", "outbox": "stream"}

# Request durations: from a local round trip to a slow platform's 30 s timeout.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class AgentMetrics:
    """Request timings are observed from the start; `read_from` adds the components once
    the process has built them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = Histogram(
            f"{PREFIX}_http_request_duration_seconds",
            "Requests to the Moonin API by endpoint and status class (error: no answer).",
            ["endpoint", "status_class"],
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )

    def read_from(
        self,
        reporters: Callable[[], Iterable[HealthReporter]],
        *,
        queues: Callable[[], Mapping[str, StreamStats]],
        leader: Callable[[], bool | None],
    ) -> None:
        self.registry.register(_Snapshots(reporters, queues, leader))

    def observe_request(self, endpoint: str, status_class: str, seconds: float) -> None:
        """A `shipper.client.RequestObserver`."""
        self._requests.labels(endpoint, status_class).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@dataclass(frozen=True, eq=False)  # the registry keys collectors by identity
class _Snapshots(Collector):
    """Reads the components through the callables `AgentMetrics.read_from` was given."""

    reporters: Callable[[], Iterable[HealthReporter]]
    queues: Callable[[], Mapping[str, StreamStats]]
    leader: Callable[[], bool | None]

    def collect(self) -> Iterator[Metric]:
        counters: dict[str, CounterMetricFamily] = {}
        healthy = GaugeMetricFamily(
            f"{PREFIX}_component_healthy",
            "1 while the component works normally, 0 while degraded or failed.",
            labels=["component"],
        )
        for snapshot in (reporter.snapshot() for reporter in self.reporters()):
            healthy.add_metric([snapshot.component], 1 if snapshot.health.ok else 0)
            kind, _, name = snapshot.component.partition(".")
            label = _LABEL_OF_KIND.get(kind)
            stem = kind if label else snapshot.component.replace(".", "_")
            for counter, value in sorted(snapshot.counters.items()):
                counter, _, reason = counter.partition("/")
                metric_name = f"{PREFIX}_{counter}" if reason else f"{PREFIX}_{stem}_{counter}"
                labels = ([label] if label else []) + (["reason"] if reason else [])
                family = counters.get(metric_name)
                if family is None:
                    family = counters[metric_name] = CounterMetricFamily(
                        metric_name,
                        f"{counter.replace('_', ' ')} ({stem} components)",
                        labels=labels,
                    )
                family.add_metric(([name] if label else []) + ([reason] if reason else []), value)
        yield healthy
        yield from counters.values()
        yield from self._queue_gauges()
        leading = self.leader()
        if leading is not None:
            leader = GaugeMetricFamily(
                f"{PREFIX}_leader", "1 while this discovery replica holds the Lease and collects."
            )
            leader.add_metric([], 1 if leading else 0)
            yield leader

    def _queue_gauges(self) -> Iterator[Metric]:
        gauges = {
            field: GaugeMetricFamily(f"{PREFIX}_queue_{field}", text, labels=["stream"])
            for field, text in (
                ("records", "Records waiting in the outbox."),
                ("bytes", "Encoded size of the records waiting in the outbox."),
                ("oldest_age_seconds", "Age of the oldest waiting record (0 when empty)."),
                ("dead_letters", "Records the platform refused, kept for inspection."),
                ("resync_needed", "1 while dropped records must be sent again in full."),
            )
        }
        for stream, stats in self.queues().items():
            gauges["records"].add_metric([stream], stats.records)
            gauges["bytes"].add_metric([stream], stats.bytes)
            gauges["oldest_age_seconds"].add_metric([stream], stats.oldest_age_seconds or 0.0)
            gauges["dead_letters"].add_metric([stream], stats.dead_letters)
            gauges["resync_needed"].add_metric([stream], 1 if stats.resync_needed else 0)
        yield from gauges.values()
