"""The collector: informers for every watched resource, feeding normalizers into the outbox.

Each source (a Kubernetes resource and its normalizer) gets an informer and a `SourceSink`.
A sink keeps the relation indexes current, filters, normalizes and offers the records to the
coalescer, which commits them to the discovery outbox once per flush window. Records that
depend on other kinds are rebuilt when those change: a Deployment's and its revisions'
records when a Service starts selecting it, an HPA targets it or its current ReplicaSet
changes (once per flush window); a Job execution's record when one of its pods finishes.
Until what they mention has listed once, these records (and their kind's snapshot) are
held back and then sent once, complete: a restart then derives exactly the records it sent
before, which the persisted fingerprints drop. For that the sinks of Deployments and
ReplicaSets keep their last record's data in the state store (`collector.state`, SQLite:
tens of thousands of objects cost little heap there), and the sinks of Jobs and Nodes (few)
keep their decoded objects. The store also knows which records each object produced, so a
relist that no longer finds an object deletes them.

Warm-up lists namespaces, Deployments and CronJobs first, then ReplicaSets, Services and
HPAs (what Deployment records wait for), then starts the rest. All sink work runs under
one lock: informers decode on their own threads, but indexes and normalizer state change
one object at a time.

`list_once()` is the one-shot form (`moonin-agent preview`): every resource listed once on
the caller's thread, in warm-up order, through the same sinks, then one flush; no watch,
no thread. A resource RBAC forbids is skipped with a warning, as `run` would skip it; any
other failure raises, since the result would not be what `run` sends.

A resync (the outbox marked `resync_needed`, or the platform asked through the heartbeat)
forgets what was sent and relists every resource; the outbox mark is cleared once every
informer has listed again.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog

from collector import resources, sanitize
from collector.coalesce import Coalescer, Destination
from collector.filters import Filters
from collector.informer import Informer
from collector.metadata import MetadataProbe, NodeHint
from collector.model import ObjectMeta, delete, event, upsert
from collector.normalize import (
    cronjob,
    deployment,
    helm_release,
    hpa,
    ingress,
    job_execution,
    namespace,
    network_policy,
    node,
    pod_error,
    pod_event,
    rbac,
    revision,
    service,
)
from collector.normalize.base import Context, ObjectTooLarge
from collector.relations import Relations
from collector.resources import Resource
from collector.settings import CollectorSettings
from collector.state import StateStore
from kube.api import KubeApi
from kube.errors import AnswerTooLarge, Forbidden, KubeError, NotFound
from runtime.bounded import describe_size
from runtime.health import HealthReporter
from shipper.records import Record, new_id

log = structlog.get_logger("collector")


# Listed first, in this order, each group once the one before has listed; then the rest.
WARM_UP: tuple[frozenset[Resource], ...] = (
    frozenset({resources.NAMESPACES, resources.DEPLOYMENTS, resources.CRONJOBS}),
    frozenset({resources.REPLICASETS, resources.SERVICES, resources.HPAS}),
)
# Started once Pods have listed: an Event's pod error takes the pod's workload from them.
AFTER_PODS = frozenset({resources.EVENTS})
# What a Deployment's and its revisions' records mention of other kinds.
DEPLOYMENT_RELATIONS = frozenset({resources.REPLICASETS, resources.SERVICES, resources.HPAS})

SNAPSHOT = "snapshot"
NOT_SNAPSHOTTED = frozenset({pod_error.KIND})  # events, not objects
SNAPSHOT_PART_BYTES = 256 * 1024  # keys per part: well inside a batch's byte limit
# A Secret holds at most 1 MiB of data, about 1.4 MB as the API's base64 in JSON.
SECRET_BYTES = 4 * 1024 * 1024


def _cannot_list(informer: Informer[Any]) -> bool:
    """Forbidden or failing now; it retries on its own and its health says why."""
    return not informer.reporter.snapshot().health.ok


def snapshot_parts(keys: list[str]) -> list[list[str]]:
    """Split sorted keys into parts of about SNAPSHOT_PART_BYTES; no keys is one empty part
    (the kind has no objects left)."""
    parts: list[list[str]] = [[]]
    size = 0
    for key in keys:
        cost = len(key.encode()) + 3  # quotes and comma in the JSON list
        if parts[-1] and size + cost > SNAPSHOT_PART_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(key)
        size += cost
    return parts


class Keep(enum.Enum):
    """What a sink remembers of its objects so their records can be rebuilt later."""

    NOTHING = "nothing"
    OBJECTS = "objects"  # the decoded object (few of them: Jobs, Nodes)
    RECORDS = "records"  # the last record's data, encoded; its normalizer can `relink` it
    # The last record's data, sent again as it is while the object's resourceVersion stays
    # the same: its normalizer reads a costly body (a Helm release Secret) only for news.
    VERSIONED = "versioned"


@dataclass(frozen=True, slots=True)
class Source:
    resource: Resource
    normalizer: Any
    keep: Keep = Keep.NOTHING
    waits_for: frozenset[Resource] = frozenset()
    """Resources its records depend on: until each has listed once, its records are held
    back and sent once, complete (so a restart finds them equal to what it sent before)."""


class _Kept(msgspec.Struct, array_like=True):
    """A rebuildable record as the state store keeps it (msgpack: a decoded data dict would
    cost several times the memory)."""

    meta: ObjectMeta  # identity only: what the record envelope needs
    data: dict[str, Any]


_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(_Kept).decode


class SourceSink:
    """What one informer's objects become. Every method runs under the collector's lock."""

    def __init__(self, source: Source, collector: Collector) -> None:
        self.source = source
        self.normalizer = source.normalizer
        self._collector = collector
        self._name = source.resource.plural
        self._produced = collector.state.produced
        self.objects: dict[str, Any] = {}

    def apply(self, obj: Any) -> None:
        with self._collector.lock:
            meta: ObjectMeta = obj.metadata
            if self._collector.ignored(self.normalizer.kind, meta):
                return
            affected = self._collector.relations.observe(self._source_kind, obj)
            if self.source.keep is Keep.OBJECTS:
                slim = sanitize.without_dropped_annotations(meta)
                self.objects[meta.key] = (
                    obj if slim is meta else msgspec.structs.replace(obj, metadata=slim)
                )
            self.emit(obj)
            self._collector.after_apply(self, obj, affected)

    def emit(self, obj: Any) -> None:
        meta: ObjectMeta = obj.metadata
        if self.source.keep is Keep.VERSIONED:
            unchanged = self._unchanged(meta)
            if unchanged:
                self._collector.offer(unchanged)
                return
        try:
            records = self.normalizer.upserts(obj, self._collector.context)
        except KubeError:
            raise  # a read it needed failed for now: its informer tries the object again
        except Exception as exc:
            # One object the normalizer cannot handle must not stop its informer. The
            # message could quote the object's contents, so only its type is logged.
            log.error(
                "normalize_failed",
                kind=self.normalizer.kind,
                namespace=meta.namespace,
                name=meta.name,
                error=type(exc).__name__,
            )
            return
        if self.normalizer.kind not in NOT_SNAPSHOTTED and not any(
            record.op == "upsert" for record in records
        ):
            # It no longer yields its kind's record (a ReplicaSet orphaned from its
            # Deployment, a release Secret that stopped decoding): what it produced goes.
            records = records + [
                delete(kind, meta, key=record_key)
                for kind, record_key in self._produced.pop(self._name, meta.key)
            ]
        identity = None
        if self.source.keep in (Keep.RECORDS, Keep.VERSIONED):
            identity = msgspec.structs.replace(meta, labels={}, annotations={}, owner_references=[])
        for record in records:
            if record.op == "upsert":
                self._remember(meta.key, record.kind, record.key, identity, record.data)
        if not self._collector.holds(self, obj):
            self._collector.offer(records)

    def _unchanged(self, meta: ObjectMeta) -> list[Record]:
        """The object's records as last built, if built from this very resourceVersion."""
        records = []
        for kind, record_key, encoded in self._produced.kept(self._name, meta.key):
            kept = _unpack(encoded)
            if kept.meta.resource_version != meta.resource_version:
                return []
            records.append(upsert(kind, kept.meta, kept.data, key=record_key))
        return records

    def rebuild(self, key: str) -> None:
        """Send the object's record again, its relation fields decided anew."""
        if self.source.keep is Keep.OBJECTS:
            obj = self.objects.get(key)
            if obj is not None:
                self.emit(obj)
            return
        for kind, record_key, encoded in self._produced.kept(self._name, key):
            kept = _unpack(encoded)
            data = self.normalizer.relink(kept.data, kept.meta, self._collector.relations)
            self._remember(key, kind, record_key, kept.meta, data)
            self._collector.offer([upsert(kind, kept.meta, data, key=record_key)])

    def _remember(
        self, key: str, kind: str, record_key: str, identity: ObjectMeta | None, data: Any
    ) -> None:
        kept = None if identity is None else _pack(_Kept(identity, data))
        self._produced.add(self._name, key, (kind, record_key), kept)

    def remove(self, obj: Any) -> None:
        with self._collector.lock:
            meta: ObjectMeta = obj.metadata
            if self._collector.ignored(self.normalizer.kind, meta):
                return  # never collected (see `apply`), so nothing to delete
            affected = self._collector.relations.forget(self._source_kind, obj)
            self.objects.pop(meta.key, None)
            produced = self._produced.pop(self._name, meta.key)
            records = self.normalizer.deletes(obj, self._collector.context)
            # Whatever it produced goes too, even where the normalizer no longer sees it as
            # its kind's (a ReplicaSet orphaned from its Deployment still has a revision).
            named = {(record.kind, record.key) for record in records}
            records += [
                delete(kind, meta, key=record_key)
                for kind, record_key in produced
                if (kind, record_key) not in named
            ]
            self._collector.offer(records)
            self._collector.after_remove(self, meta.key, affected)

    def listed(self, *, resource_version: str, listed_at: str, keys: AbstractSet[str]) -> None:
        """A full list: whatever is remembered but was not listed was deleted meanwhile."""
        with self._collector.lock:
            gone = self._produced.missing(self._name, keys)
            gone.update(key for key in self.objects if key not in keys)
            missing = getattr(self.normalizer, "missing", None)  # state of its own (pods)
            if missing is not None:
                gone.update(missing(keys))
            for key in sorted(gone):
                self._vanished(key)
            self._collector.listed(self, resource_version, listed_at)

    def _vanished(self, key: str) -> None:
        namespace, _, name = key.rpartition("/")
        meta = ObjectMeta(name=name, namespace=namespace or None)
        gone = self.objects.pop(key, None) or _MetadataOnly(meta)
        affected = self._collector.relations.forget(self._source_kind, gone)
        self._collector.offer(
            [
                delete(kind, meta, key=record_key)
                for kind, record_key in self._produced.pop(self._name, key)
            ]
        )
        self._collector.after_remove(self, key, affected)

    @property
    def _source_kind(self) -> str:
        return getattr(self.normalizer, "source", "")


class _Version(msgspec.Struct, rename="camel"):
    git_version: str | None = None


@dataclass(frozen=True, slots=True)
class _MetadataOnly:
    """What a vanished object is known as when its sink kept no copy of it."""

    metadata: ObjectMeta


class Collector:
    """One leadership term of discovery: start it, stop it, make a new one for the next term."""

    def __init__(self, api: KubeApi, outbox: Destination, *, settings: CollectorSettings) -> None:
        self.api = api
        self.settings = settings
        self.filters = Filters(
            settings.ignore_namespaces, settings.ignore_resources, settings.ignore_node_labels
        )
        self.lock = threading.RLock()
        self.reporter = HealthReporter("collector")
        self.state = StateStore(settings.state_file)
        if self.state.quarantined is not None:
            log.warning("collector_state_quarantined", moved_to=str(self.state.quarantined))
        self.relations = Relations(self.state)
        self.coalescer = Coalescer(
            outbox,
            state=self.state,
            flush_seconds=settings.flush_seconds,
            max_pending=settings.flush_max_records,
            before_flush=self._rebuild_stale,
            on_resync_needed=self.resync,
            producers=self.lock,
        )
        self.job_pods = job_execution.JobPods()
        # Namespace -> the permission its Job logs were refused for (logged once).
        self._logs_denied: dict[str, str] = {}
        self._logs_lock = threading.Lock()
        self.context = Context(
            lookups=self.relations,
            fetch_logs=self._fetch_logs,
            fetch_secret=self._fetch_secret,
            ignore_node_labels=frozenset(self.filters.ignored_node_labels),
            collect_job_logs=settings.collect_job_logs,
            collect_helm_releases=settings.collect_helm_releases,
        )
        self.sinks: dict[str, SourceSink] = {}
        self.informers: list[Informer[Any]] = []
        # Listed in this order, each phase once the one before has listed (see WARM_UP).
        self._phases: list[list[Informer[Any]]] = [[] for _ in range(len(WARM_UP) + 1)]
        pages = threading.BoundedSemaphore(settings.pages_in_memory)
        for source in self._sources():
            sink = SourceSink(source, self)
            self.sinks[source.resource.plural] = sink
            informer = Informer(
                api,
                source.resource,
                source.normalizer.struct,
                sink,
                settings=settings.informer,
                page_gate=pages,
            )
            self.informers.append(informer)
            phase = next(
                (n for n, group in enumerate(WARM_UP) if source.resource in group), len(WARM_UP)
            )
            self._phases[phase].append(informer)
        self._listed_resources: set[Resource] = set()
        # Records held back or to rebuild once their dependencies are known (namespace/name).
        self._stale_deployments: set[str] = set()
        self._stale_jobs: set[str] = set()
        self._rebuilding = False
        self._resync_pending: set[str] = set()
        # Record kind -> the sources whose lists a snapshot of it waits for.
        self._snapshot_sources: dict[str, set[str]] = {}
        for sink in self.sinks.values():
            if sink.normalizer.kind not in NOT_SNAPSHOTTED:
                kind_sources = self._snapshot_sources.setdefault(sink.normalizer.kind, set())
                kind_sources.add(sink.source.resource.plural)
        # kind -> source -> (resourceVersion, start) of its list since the kind's last snapshot
        self._lists_since_snapshot: dict[str, dict[str, tuple[str, str]]] = {}
        # Kind -> (what it waits for, resourceVersion, listed_at) of a snapshot held back.
        self._held_snapshots: dict[str, tuple[frozenset[Resource], str, str]] = {}
        self._version: str | None = None
        self._stopped = threading.Event()
        self._starter = threading.Thread(
            target=self._start_all, name="collector-start", daemon=True
        )
        self._anti_entropy_thread = threading.Thread(
            target=self._anti_entropy, name="anti-entropy", daemon=True
        )

    def _sources(self) -> list[Source]:
        pods = pod_error.PodErrorNormalizer(self.state.pods)
        table = [
            Source(resources.NAMESPACES, namespace.NORMALIZER),
            Source(
                resources.DEPLOYMENTS,
                deployment.NORMALIZER,
                keep=Keep.RECORDS,
                waits_for=DEPLOYMENT_RELATIONS,
            ),
            Source(resources.CRONJOBS, cronjob.NORMALIZER),
            Source(
                resources.REPLICASETS,
                revision.NORMALIZER,
                keep=Keep.RECORDS,
                waits_for=DEPLOYMENT_RELATIONS,
            ),
            Source(resources.SERVICES, service.NORMALIZER),
            Source(resources.HPAS, hpa.NORMALIZER),
            Source(
                resources.JOBS,
                job_execution.JobExecutionNormalizer(self.job_pods),
                keep=Keep.OBJECTS,
                waits_for=frozenset({resources.PODS}),
            ),
            Source(resources.PODS, pods),
            Source(resources.NODES, node.NORMALIZER, keep=Keep.OBJECTS),  # metadata hints
            Source(resources.INGRESSES, ingress.NORMALIZER),
            Source(resources.NETWORK_POLICIES, network_policy.NORMALIZER),
            Source(resources.ROLES, rbac.ROLE),
            Source(resources.ROLE_BINDINGS, rbac.ROLE_BINDING),
            Source(resources.CLUSTER_ROLES, rbac.CLUSTER_ROLE),
            Source(resources.CLUSTER_ROLE_BINDINGS, rbac.CLUSTER_ROLE_BINDING),
        ]
        if self.settings.collect_events:
            table.append(
                Source(
                    resources.EVENTS,
                    pod_event.PodEventNormalizer(pods, self.state.events, self.filters),
                )
            )
        if self.settings.collect_helm_releases:
            table.append(
                Source(
                    resources.HELM_RELEASE_SECRETS,
                    helm_release.HelmReleaseNormalizer(),
                    keep=Keep.VERSIONED,
                )
            )
        return table

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start collecting (returns at once; warm-up runs on its own thread)."""
        self.coalescer.start()
        self._starter.start()
        if self.settings.anti_entropy_seconds > 0:
            self._anti_entropy_thread.start()

    def _start_all(self) -> None:
        *waited, rest = self._phases
        for phase in waited:
            for informer in phase:
                informer.start()
            for informer in phase:
                if not self._wait_listed(informer, self.settings.warm_up_timeout_seconds):
                    log.warning("warm_up_slow", resource=informer.resource.plural)
                if self._stopped.is_set():
                    return
            log.info("warm_up_phase_done", resources=[i.resource.plural for i in phase])
        later = [informer for informer in rest if informer.resource in AFTER_PODS]
        for informer in rest:
            if informer not in later and not self._stopped.is_set():
                informer.start()
        for informer in self.informers:
            if later and informer.resource is resources.PODS:
                self._wait_listed(informer, self.settings.warm_up_timeout_seconds)
        for informer in later:
            if not self._stopped.is_set():
                informer.start()

    def _wait_listed(self, informer: Informer[Any], timeout: float) -> bool:
        """Until the informer has listed once or cannot list now (forbidden, failing: its
        health says so and it retries on its own); False when `timeout` passed first."""
        deadline = time.monotonic() + timeout
        while not informer.wait_synced(0.1):
            if _cannot_list(informer):
                return True
            if self._stopped.is_set() or time.monotonic() > deadline:
                return False
        return True

    def list_once(self) -> list[str]:
        """List every resource once and flush (see the module docstring); returns the
        resources skipped as forbidden. Raises `KubeError` or `msgspec.DecodeError`."""
        forbidden = []
        for informer in (informer for phase in self._phases for informer in phase):
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
                with self.lock:  # nothing waits for a list that cannot happen
                    self._listed_resources.add(informer.resource)
        self.coalescer.flush()
        return forbidden

    def wait_synced(self, timeout: float) -> bool:
        """True once every informer has listed once (tests)."""
        self._starter.join(timeout)
        return all(informer.wait_synced(timeout) for informer in self.informers)

    def stop(self) -> None:
        """Stop at once (leadership lost, or shutting down), committing what is buffered."""
        self._stopped.set()
        for informer in self.informers:
            informer.stop()
        self.api.abort_streams()
        for informer in self.informers:
            if informer.alive:
                informer.join(5)
        self.coalescer.stop()
        with self.lock:
            self.state.close()

    def reporters(self) -> list[HealthReporter]:
        return [self.reporter, self.coalescer.reporter, *(i.reporter for i in self.informers)]

    # -- resync ------------------------------------------------------------------------

    def resync(self) -> None:
        """Forget what was sent and relist everything (idempotent while one is running)."""
        with self.lock:
            if self._resync_pending:
                self._settle_resync()
            if self._resync_pending:
                return
            log.info("resync_started")
            self.reporter.count("resyncs")
            self.coalescer.forget_all()
            # What cannot list now relists when it recovers, with its fingerprints gone;
            # waiting for it would keep every later resync from starting.
            self._resync_pending = {
                i.resource.plural for i in self.informers if i.alive and not _cannot_list(i)
            }
        for informer in self.informers:
            informer.request_relist()
        self.api.abort_streams()

    def _anti_entropy(self) -> None:
        """Now and then send everything again with snapshots, in case the platform lost
        something nobody noticed. One resource at a time: forget its kind's fingerprints,
        relist it, wait for that list and for room in the outbox, then the next."""
        while not self._stopped.wait(self.settings.anti_entropy_seconds):
            log.info("anti_entropy_started")
            for informer in self.informers:
                kind = self.sinks[informer.resource.plural].normalizer.kind
                if kind in NOT_SNAPSHOTTED:
                    continue
                while self.coalescer.outbox.at_bound:
                    if self._stopped.wait(1.0):
                        return
                lists = informer.reporter.snapshot().counters.get("lists", 0)
                with self.lock:
                    self.state.sent.clear(kind)
                informer.request_relist()
                self.api.abort_streams(informer.resource.path)  # only its own watch
                deadline = time.monotonic() + self.settings.warm_up_timeout_seconds
                while informer.reporter.snapshot().counters.get("lists", 0) == lists:
                    if self._stopped.wait(0.2):
                        return
                    if time.monotonic() > deadline:
                        break  # failing (forbidden?): its informer says so; go on
            log.info("anti_entropy_done")
            self.reporter.count("anti_entropy_rounds")

    @property
    def resync_in_progress(self) -> bool:
        with self.lock:
            return bool(self._resync_pending)

    def listed(self, sink: SourceSink, resource_version: str, listed_at: str) -> None:
        self._snapshot(sink, resource_version, listed_at)
        if self._resync_pending:
            self._resync_pending.discard(sink.source.resource.plural)
            self._settle_resync()

    def _settle_resync(self) -> None:
        """(Lock held, a resync running.) Stop waiting for what cannot list now; once
        nothing is left, commit what the resync produced, and only then clear the outbox's
        mark: a crash before that finds the mark and resyncs again."""
        self._resync_pending = {
            i.resource.plural
            for i in self.informers
            if i.resource.plural in self._resync_pending and not _cannot_list(i)
        }
        if self._resync_pending:
            return
        self.coalescer.flush()
        committed = self.coalescer.empty  # else the outbox refused them: the mark stays
        if committed:
            self.coalescer.outbox.clear_resync_needed()
        log.info("resync_done", committed=committed)

    # -- snapshots -----------------------------------------------------------------------

    def _snapshot(self, sink: SourceSink, resource_version: str, listed_at: str) -> None:
        """After a full list, the complete key set of the sink's record kind, in parts.

        A kind with several sources (rbac: four) waits until each has listed since the
        last snapshot; `listed_at` is then the earliest list's start, so nothing created
        during the lists is forgotten by the platform."""
        kind = sink.normalizer.kind
        if kind not in self._snapshot_sources:
            return
        lists = self._lists_since_snapshot.setdefault(kind, {})
        lists.pop(sink.source.resource.plural, None)  # the latest list goes last
        lists[sink.source.resource.plural] = (resource_version, listed_at)
        self._snapshot_if_complete(kind)

    def _snapshot_if_complete(self, kind: str) -> None:
        """Send the kind's snapshot once every source has listed since the last one. A
        source that cannot list (rbac: ClusterRoles forbidden) is not waited for, its keys
        in the snapshot being the ones it produced before; since it may fail only after the
        others listed, this is checked again before each flush too."""
        lists = self._lists_since_snapshot[kind]
        unlisted = self._snapshot_sources[kind].difference(lists)
        if any(i.resource.plural in unlisted and not _cannot_list(i) for i in self.informers):
            return
        del self._lists_since_snapshot[kind]
        last = next(reversed(lists))
        taken = (lists[last][0], min(started for _, started in lists.values()))
        waits_for = self.sinks[last].source.waits_for
        if self._listed(waits_for):
            self._send_snapshot(kind, *taken)
        else:  # after the records held back, once they are released (`_rebuild_stale`)
            self._held_snapshots[kind] = (waits_for, *taken)

    def _send_snapshot(self, kind: str, resource_version: str, listed_at: str) -> None:
        keys = self.state.produced.keys_of_kind(kind)
        snapshot_id = new_id()
        parts = snapshot_parts(keys)
        for number, part in enumerate(parts, start=1):
            data = {
                "of": kind,
                "snapshot_id": snapshot_id,
                "part": number,
                "parts": len(parts),
                "keys": part,
                "resource_version": resource_version,
                "listed_at": listed_at,
            }
            key = f"{kind}/{snapshot_id}/{number}"
            self.offer([event(SNAPSHOT, key, ObjectMeta(name=kind), data)])
        self.reporter.count("snapshots")

    # -- what sinks call (lock held) -----------------------------------------------------

    def ignored(self, kind: str, meta: ObjectMeta) -> bool:
        return self.filters.skip(kind, meta.namespace, meta.name)

    def offer(self, records: Iterable[Record]) -> None:
        for record in records:
            self.coalescer.offer(record)

    def after_apply(self, sink: SourceSink, obj: Any, affected: set[str]) -> None:
        if sink.source.resource is resources.PODS:
            self.job_pods.observe(obj)
            owner = obj.metadata.controller()
            if owner is not None and owner.kind == "Job":
                self._rebuild_job(f"{obj.metadata.namespace}/{owner.name}")
        self._stale_deployments.update(affected)

    def after_remove(self, sink: SourceSink, key: str, affected: set[str]) -> None:
        if sink.source.resource is resources.PODS:
            sink.normalizer.forget(key)
            self.job_pods.forget(key)
        elif sink.source.resource is resources.EVENTS:
            sink.normalizer.forget(key)
        self._stale_deployments.update(affected)

    def holds(self, sink: SourceSink, obj: Any) -> bool:
        """Whether to hold the object's records back until what they depend on has listed
        (they are rebuilt then, see `_rebuild_stale`); marks it for that rebuild."""
        if self._listed(sink.source.waits_for):
            return False
        meta: ObjectMeta = obj.metadata
        resource = sink.source.resource
        if resource is resources.JOBS:
            self._stale_jobs.add(meta.key)
        elif resource is resources.DEPLOYMENTS:
            self._stale_deployments.add(meta.key)
        else:  # a ReplicaSet: its revision record waits with its Deployment's
            owner = self.relations.deployment_of_replicaset(meta.namespace or "", meta.name)
            if owner is None:
                return False  # no Deployment's revision: nothing to wait for
            self._stale_deployments.add(f"{meta.namespace}/{owner}")
        return True

    def _listed(self, needed: frozenset[Resource]) -> bool:
        """Whether each of these resources has listed once (or failed to: not forever)."""
        waiting = needed - self._listed_resources
        if not waiting:
            return True  # asked for every object a sink holds back: the common answer first
        for informer in self.informers:
            if informer.resource in waiting and (informer.wait_synced(0) or _cannot_list(informer)):
                self._listed_resources.add(informer.resource)
        return needed <= self._listed_resources

    def _rebuild_stale(self) -> None:
        """Before each flush: rebuild the records of Deployments whose relations changed and
        of Jobs whose pods did (once per window however many changes), release what was held
        back once its dependencies have listed, and stop waiting (snapshots, a resync) for
        resources that cannot list."""
        with self.lock:
            if self._rebuilding:
                return  # a flush that the rebuild's own records set off: it only commits
            self._rebuilding = True
            try:
                self._rebuild_stale_now()
            finally:
                self._rebuilding = False

    def _rebuild_stale_now(self) -> None:
        if self._stale_deployments and self._listed(DEPLOYMENT_RELATIONS):
            stale, self._stale_deployments = self._stale_deployments, set()
            self._rebuild_deployments(stale)
        if self._stale_jobs and self._listed(frozenset({resources.PODS})):
            jobs, self._stale_jobs = self._stale_jobs, set()
            for key in sorted(jobs):
                self._rebuild_job(key)
        for kind, (waits_for, *taken) in list(self._held_snapshots.items()):
            if self._listed(waits_for):
                del self._held_snapshots[kind]
                self._send_snapshot(kind, *taken)
        # What waits for a resource that has since turned out unable to list.
        for kind in list(self._lists_since_snapshot):
            self._snapshot_if_complete(kind)
        if self._resync_pending:
            self._settle_resync()

    def _rebuild_deployments(self, keys: set[str]) -> None:
        deployments = self.sinks[resources.DEPLOYMENTS.plural]
        replicasets = self.sinks[resources.REPLICASETS.plural]
        for key in sorted(keys):
            deployments.rebuild(key)
            ns, _, name = key.partition("/")
            for rs in self.relations.replicasets_of(ns, name):
                replicasets.rebuild(f"{ns}/{rs}")

    def _rebuild_job(self, job_key: str) -> None:
        self.sinks[resources.JOBS.plural].rebuild(job_key)

    # -- cluster metadata ----------------------------------------------------------------

    def cluster_metadata(self, probe: MetadataProbe, *, leader: str | None) -> dict[str, Any]:
        """The heartbeat's metadata; also offered as the `cluster_metadata` record."""
        with self.lock:
            nodes = [
                NodeHint(
                    name=n.metadata.name, labels=n.metadata.labels, provider_id=n.spec.provider_id
                )
                for n in self.sinks[resources.NODES.plural].objects.values()
            ]
        found = probe.probe(nodes, kubernetes_version=self._kubernetes_version(), leader=leader)
        data = found.as_dict()
        with self.lock:
            self.offer(
                [upsert("cluster_metadata", ObjectMeta(name="cluster"), data, key="cluster")]
            )
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

    def _fetch_logs(self, ns: str, pod: str, container: str, lines: int) -> list[str] | None:
        """The log's last lines; None when it cannot be read (the record ships without)."""
        path = resources.PODS.namespaced_path(ns, pod) + "/log"
        try:
            text = self.api.get(path, {"container": container, "tailLines": str(lines)})
        except Forbidden as exc:
            self.reporter.count("job_logs_forbidden")
            with self._logs_lock:
                first = self._logs_denied.get(ns) != exc.denied
                self._logs_denied[ns] = exc.denied
            if first:  # one line per namespace until it works, not one per failed Job
                log.warning("job_logs_forbidden", namespace=ns, permission=exc.denied)
            return None
        except KubeError as exc:
            log.warning("job_log_unavailable", namespace=ns, pod=pod, error=str(exc))
            return None
        with self._logs_lock:
            denied = self._logs_denied.pop(ns, None)
        if denied is not None:
            log.info("job_logs_allowed", namespace=ns)
        return text.decode("utf-8", errors="replace").splitlines()[-lines:]
