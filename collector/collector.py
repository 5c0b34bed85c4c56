"""The collector: informers for every watched resource, one processor turning what they
report into records for the outbox.

    informer (a thread per resource: list, watch)
      -> `collector.deltas.DeltaQueue` (bounded: a full queue holds the informer back)
      -> `collector.processor.Processor` (one thread) -> `collector.sink.SourceSink`
         (filters, relation indexes, normalizers, memos) -> `collector.coalesce.Coalescer`
      -> the discovery outbox, once per flush window

Its parts, each with one job, called from here in one direction:

- `collector.sources`: what is watched, as data: each source's resource and normalizer,
  its warm-up order, what its sink keeps and which records its changes make stale;
- `collector.informer`: lists and watches one resource and puts deltas; nothing else;
- `collector.processor`: the one thread that owns every sink, the stale marks, snapshots,
  the resync's bookkeeping, the warm-up's order and the flush window; other threads (the
  Job log reader, the heartbeat, a resync asked for) hand it work on the same queue;
- `collector.sink`: a `SourceSink` per source keeps the relation indexes current, filters,
  normalizes and offers the records to the coalescer;
- `collector.warmup`: which resources have listed, and whose informer's turn it is;
- `collector.snapshots`: after full lists, each kind's complete key set;
- `collector.resync`: relisting everything at once (resync) or now and then
  (anti-entropy).

Records that depend on other kinds are rebuilt when those change: a Deployment's and its
revisions' records when a Service starts selecting it, an HPA targets it or its current
ReplicaSet changes; a Job execution's record when one of its pods changes (by the
processor at the end of each drain, once however many changes marked them). Until what
they mention has listed once, these records (and their kind's snapshot) are held back and
then sent once, complete: a restart then derives exactly the records it sent before,
which the persisted fingerprints drop. A held Deployment or ReplicaSet is kept encoded in
the state store and normalized once, when released. The sinks of Deployments and
ReplicaSets keep their last record's data in the state store, as the JSON the record
carried (`collector.state`, SQLite: tens of thousands of objects cost little heap there),
and the sinks of Jobs and Nodes
(few) keep their decoded objects. The store also knows which records each object
produced, so a relist that no longer finds an object deletes them.

`list_once()` is the one-shot form (`moonin-agent preview`): every resource listed once on
the caller's thread, in warm-up order, each delta processed as it is put, then one flush;
no watch, no thread. A resource RBAC forbids is skipped with a warning, as `run` would
skip it; any other failure raises, since the result would not be what `run` sends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import msgspec
import structlog

from collector import resources, sources
from collector.coalesce import Coalescer, Destination
from collector.deltas import Call, DeltaQueue, Listed
from collector.filters import Filters
from collector.informer import Informer
from collector.job_logs import JobLogs
from collector.metadata import MetadataProbe, NodeHint
from collector.model import ObjectMeta, upsert
from collector.normalize import job_execution
from collector.normalize.base import Context, LogRequest, ObjectTooLarge
from collector.normalize.node import Node
from collector.processor import Processor
from collector.relations import Relations
from collector.resources import Resource
from collector.resync import AfterRollback, AntiEntropy, Resync
from collector.settings import CollectorSettings
from collector.sink import SourceSink, Stale, Wiring
from collector.snapshots import Snapshots
from collector.sources import Source
from collector.state import StateStore
from collector.warmup import Listings, WarmUp, cannot_list
from kube.api import KubeApi
from kube.errors import AnswerTooLarge, Forbidden, KubeError, NotFound
from runtime.bounded import describe_size
from runtime.health import HealthReporter
from shipper.records import Record

log = structlog.get_logger("collector")


NODES = frozenset({resources.NODES})
# Stale keys rebuilt together: their held objects come out of the store in one statement
# (a warm-up releases every Deployment and ReplicaSet at once). A held Deployment is ~6 KB
# encoded, one of 100 containers ~120 KB: with its ReplicaSets, under 10 MiB in hand.
REBUILD_BATCH = 32

# A Secret holds at most 1 MiB of data, about 1.4 MB as the API's base64 in JSON.
SECRET_BYTES = 4 * 1024 * 1024


class _Version(msgspec.Struct, rename="camel", gc=False):
    git_version: str | None = None


class Collector:
    """One leadership term of discovery: start it, stop it, make a new one for the next term."""

    def __init__(self, api: KubeApi, outbox: Destination, *, settings: CollectorSettings) -> None:
        self.api = api
        self.settings = settings
        self.filters = Filters(
            settings.filters.ignore_namespaces,
            settings.filters.ignore_resources,
            settings.filters.ignore_node_labels,
        )
        self.reporter = HealthReporter("collector")
        self.state = StateStore(settings.state_file)
        if self.state.quarantined is not None:
            log.warning("collector_state_quarantined", moved_to=str(self.state.quarantined))
        self.relations = Relations(self.state)
        self.coalescer = Coalescer(
            outbox,
            state=self.state,
            max_pending=settings.flush_max_records,
            max_pending_bytes=settings.flush_max_bytes,
        )
        self.deltas = DeltaQueue()
        self._logs_denied: dict[str, str] = {}  # namespace -> the permission refused (logged)
        self.job_logs = JobLogs(
            self._read_log, self._log_read, settings=settings.job_logs, reporter=self.reporter
        )
        table = sources.table(
            state=self.state,
            job_pods=job_execution.JobPods(),
            filters=self.filters,
            collect_events=settings.collect_events,
            collect_helm_releases=settings.collect_helm_releases,
        )
        by_resource: dict[Resource, Informer[Any]] = {}
        self._listings = Listings(by_resource)
        self._stale = Stale(self._listings.all)
        self.sinks = self._sinks_and_informers(table, by_resource)
        self.informers = list(by_resource.values())
        by_plural = {informer.resource.plural: informer for informer in self.informers}
        self._snapshots = Snapshots(
            table,
            produced=self.state.produced,
            offer=self.offer,
            reporter=self.reporter,
            listed=self._listings.all,
            cannot_list=lambda plural: cannot_list(by_plural[plural]),
        )
        self._resync = Resync(
            self.informers,
            coalescer=self.coalescer,
            reporter=self.reporter,
            # Looked up when called: a collector built only to be inspected has no API.
            abort_streams=lambda: api.abort_streams(),
        )
        self._after_rollback = AfterRollback(self.state, self._resync, reporter=self.reporter)
        self._warm_up = WarmUp(
            table,
            by_resource,
            self._listings,
            timeout=settings.warm_up_timeout_seconds,
            one_cpu=settings.warm_up_on_one_cpu,
        )
        self._synced = threading.Event()
        self.processor = Processor(
            self.deltas,
            self.sinks,
            by_resource,
            coalescer=self.coalescer,
            listed=self._listed,
            settle=self._settle,
            resync=self._resync.start,
            flush_seconds=settings.flush_seconds,
        )
        self._version: str | None = None
        self._running = False
        self._stopped = threading.Event()
        self._anti_entropy = AntiEntropy(
            self.informers,
            kinds={s.resource.plural: s.normalizer.kind for s in table if not s.events_only},
            coalescer=self.coalescer,
            forget=lambda kind: self.deltas.put(Call(lambda: self.state.sent.clear(kind))),
            abort_streams=lambda path: api.abort_streams(path),
            reporter=self.reporter,
            stopped=self._stopped,
            every=settings.anti_entropy_seconds,
            list_timeout=settings.warm_up_timeout_seconds,
        )
        self._anti_entropy_thread = threading.Thread(
            target=self._anti_entropy.run, name="anti-entropy", daemon=True
        )

    def _sinks_and_informers(
        self, table: list[Source[Any]], informers: dict[Resource, Informer[Any]]
    ) -> dict[Resource, SourceSink[Any]]:
        """A sink (for the processor) and an informer (putting deltas, into `informers`)
        per source."""
        context = Context(
            lookups=self.relations,
            job_logs=self.job_logs,
            fetch_secret=self._fetch_secret,
            ignore_node_labels=frozenset(self.filters.ignored_node_labels),
            collect_job_logs=self.settings.collect_job_logs,
            collect_helm_releases=self.settings.collect_helm_releases,
        )
        wiring = Wiring(
            produced=self.state.produced,
            held=self.state.held,
            relations=self.relations,
            context=context,
            filters=self.filters,
            offer=self.offer,
            stale=self._stale,
        )
        sinks: dict[Resource, SourceSink[Any]] = {}
        pages = threading.BoundedSemaphore(self.settings.pages_in_memory)
        for source in table:
            sink = SourceSink(source, wiring)
            informer = Informer(
                self.api,
                source.resource,
                source.normalizer.struct,
                self.deltas.sink(source.resource),
                settings=self.settings.informer,
                page_gate=pages,
                list_budget_seconds=self.settings.warm_up_timeout_seconds,
            )
            sink.skips = informer.skips
            sinks[source.resource], informers[source.resource] = sink, informer
        return sinks

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start collecting (returns at once: the processor starts the informers in turn)."""
        self._running = True
        self._warm_up.begin()
        self.job_logs.start()
        self.processor.start()
        if self.settings.anti_entropy_seconds > 0:
            self._anti_entropy_thread.start()

    def list_once(self) -> list[str]:
        """List every resource once and flush (see the module docstring); returns the
        resources skipped as forbidden. Raises `KubeError` or `msgspec.DecodeError`."""
        self.deltas.run_inline(self.processor.process)
        forbidden = []
        for informer in self._warm_up.order():
            try:
                informer.list_once()
            except Forbidden as exc:
                log.warning(
                    "resource_forbidden",
                    resource=informer.resource.plural,
                    permission=exc.denied,
                    error=str(exc),
                )
                forbidden.append(informer.resource.plural)
                self._listings.add(informer.resource)  # nothing waits for it
        self.processor.settle()
        self.coalescer.flush()
        self.job_logs.read_pending()  # as `run` does: failed Jobs' records again, with logs
        self.processor.settle()
        self.coalescer.flush()
        return forbidden

    def wait_synced(self, timeout: float) -> bool:
        """True once every informer's first list has been taken in (tests)."""
        return self._synced.wait(timeout)

    def stop(self) -> None:
        """Stop at once (leadership lost, or shutting down), committing what is buffered."""
        self._stopped.set()
        self._warm_up.end()
        self.job_logs.stop()
        for informer in self.informers:
            informer.stop()
        self.deltas.close()
        self.api.abort_streams()
        for informer in self.informers:
            if informer.alive:
                informer.join(5)
        self.processor.stop(self.settings.flush_seconds * 4 + 5)
        self.state.close()

    def reporters(self) -> list[HealthReporter]:
        return [
            self.reporter,
            self.processor.reporter,
            self.coalescer.reporter,
            *(i.reporter for i in self.informers),
        ]

    def resync(self) -> None:
        """Forget what was sent and relist everything (idempotent while one is running)."""
        self._resync.ask()
        self.deltas.put(Call(self._resync.start))

    @property
    def resync_in_progress(self) -> bool:
        return self._resync.in_progress

    # -- on the processor's thread -------------------------------------------------------

    def offer(self, records: Iterable[Record]) -> None:
        for record in records:
            if not self._waits_for_its_log(record):
                self.coalescer.offer(record)

    def _waits_for_its_log(self, record: Record) -> bool:
        """A failed run's record whose log is being read waits for it, a bounded time; it
        is built again when the read settles or the wait ends (`collector.job_logs`)."""
        return (
            record.kind == job_execution.KIND
            and record.op == "upsert"
            and record.uid is not None
            and self.job_logs.holds(record.uid)
        )

    def _listed(self, listed: Listed) -> None:
        source = self.sinks[listed.resource].source
        self._snapshots.listed(source, listed.resource_version, listed.listed_at)
        self._resync.listed(source.resource.plural)
        self._listings.took(listed.resource)
        if self._listings.every_one():
            self._synced.set()

    def _settle(self) -> None:
        """The end of a drain: rebuild the stale dependent records (once each however
        many changes marked them) and the failed runs' records that waited long enough
        for their logs, release what was held back once its dependencies have listed,
        stop waiting (snapshots, a resync) for resources that cannot list, and start the
        informers whose turn in the warm-up came."""
        self._after_rollback.check()
        self._stale.mark(sources.JOB_RECORDS, self.job_logs.released())
        for dependents, keys in self._stale.due():
            for start in range(0, len(keys), REBUILD_BATCH):
                self._rebuild(dependents, keys[start : start + REBUILD_BATCH])
        self._snapshots.settle()
        self._resync.settle()
        if self._running and not self._stopped.is_set():  # a one-shot list has no informer
            self._warm_up.advance()

    def _rebuild(self, dependents: sources.Dependents, keys: list[str]) -> None:
        """Rebuild what those keys own, in order; the held objects among them are taken
        from the store together, one statement per resource."""
        targets = [target for key in keys for target in dependents.rebuilds(key, self.relations)]
        held: dict[Resource, list[str]] = {}
        for resource, object_key in targets:
            held.setdefault(resource, []).append(object_key)
        taken = {resource: self.sinks[resource].take_held(held[resource]) for resource in held}
        for resource, object_key in targets:
            self.sinks[resource].rebuild(object_key, taken[resource])

    # -- cluster metadata ----------------------------------------------------------------

    def _nodes(self) -> list[Node]:
        """The Nodes as their sink keeps them (metadata hints): a copy, taken at once, of
        what the processor changes one entry at a time."""
        sink: SourceSink[Node] = self.sinks[resources.NODES]
        return list(sink.objects.values())

    def nodes_known(self) -> bool:
        """Whether the Nodes have listed once, or cannot list now: what the metadata says of
        them is all there is to say (the heartbeat's first beat waits for it)."""
        return self._listings.all(NODES)

    def cluster_metadata(self, probe: MetadataProbe, *, leader: str | None) -> dict[str, Any]:
        """The heartbeat's metadata; also offered as the `cluster_metadata` record once the
        Nodes are known (through the processor). Before they have listed there is no
        count to give (null, not 0)."""
        known = self._listings.all(NODES)
        listed = self._listings.listed(resources.NODES)
        nodes = [
            NodeHint(name=n.metadata.name, labels=n.metadata.labels, provider_id=n.spec.provider_id)
            for n in self._nodes()
        ]
        found = probe.probe(nodes, kubernetes_version=self._kubernetes_version(), leader=leader)
        if not listed:
            found = msgspec.structs.replace(found, node_count=None)
        data = found.as_dict()
        if known:
            record = upsert("cluster_metadata", ObjectMeta(name="cluster"), data, key="cluster")
            self.deltas.put(Call(lambda: self.offer([record])))
        return data

    def _kubernetes_version(self) -> str | None:
        if self._version is None:
            try:
                self._version = msgspec.json.decode(
                    self.api.get("/version"), type=_Version
                ).git_version
            except (KubeError, msgspec.DecodeError) as exc:
                log.warning("kubernetes_version_unavailable", error=str(exc))
        return self._version

    def _fetch_secret(self, ns: str, name: str) -> bytes | bytearray | None:
        """A 403 is raised like any failed read: the Secrets informer's health and log line
        then name the `get` it was refused, and it retries."""
        path = resources.HELM_RELEASE_SECRETS.namespaced_path(ns, name)
        try:
            return self.api.get(path, max_bytes=SECRET_BYTES)
        except NotFound:
            return None
        except AnswerTooLarge as exc:
            raise ObjectTooLarge(f"over {describe_size(exc.limit)}") from None

    def _read_log(self, request: LogRequest) -> list[str] | None:
        """The log's last lines, cut to what a record holds (`collector.job_logs`); None when
        it cannot be read (the record ships without); raises `KubeError` when it may work
        later."""
        ns, lines = request.namespace, request.lines
        path = resources.PODS.namespaced_path(ns, request.pod) + "/log"
        params = {"container": request.container, "tailLines": str(lines)}
        try:
            text = self.api.get(path, params, within=self.settings.job_logs.read_seconds)
        except Forbidden as exc:
            self.reporter.count("job_logs_forbidden")
            first = self._logs_denied.get(ns) != exc.denied
            self._logs_denied[ns] = exc.denied
            if first:  # one line per namespace until it works, not one per failed Job
                log.warning("job_logs_forbidden", namespace=ns, permission=exc.denied)
            return None
        except NotFound:
            return None  # the pod is gone, and its log with it
        denied = self._logs_denied.pop(ns, None)
        if denied is not None:
            log.info("job_logs_allowed", namespace=ns)
        return job_execution.log_lines(text, lines)

    def _log_read(self, job_key: str) -> None:
        """A failed Job's log was read: its record is built again, with it (by the
        processor, at the end of its drain)."""
        self.deltas.put(Call(lambda: self._stale.mark(sources.JOB_RECORDS, [job_key])))
