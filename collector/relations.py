"""Relationships across kinds, kept as small in-memory indexes (the `Lookups` protocol).

Deployment and revision records mention objects of other kinds: the Services selecting
their pods, the HPA targeting them, the current ReplicaSet; pod errors and Job executions
need a ReplicaSet's Deployment and a Job's CronJob. The collector tells `Relations` what
arrives (`observe`) and leaves (`forget`); only selectors, targets, owners, revision
numbers and template labels are kept, never whole objects.

Both calls answer which Deployments (`namespace/name`) may now have different deployment
or revision records, so the collector can rebuild those and nothing else: a Service whose
selector changed, an HPA whose target or bounds changed, a ReplicaSet that changed which
one is current. A Deployment's own change is not reported (its record is being rebuilt
anyway, and it changes nothing in the others').

Where they live: the two indexes that grow with the cluster (each Deployment's pod template
labels, each ReplicaSet's Deployment, revision and creation) are tables of the state store
(`collector.state`), emptied when a `Relations` is made: a leadership term rebuilds them
from its lists. At the largest cluster Kubernetes supports (30,000 Deployments, 40,000
ReplicaSets) they held ~31 MiB on the heap. Service selectors, HPA links and Jobs' CronJobs
(a few thousand at most) stay in dicts.

Source kinds tracked: Service, HorizontalPodAutoscaler, ReplicaSet, Deployment, Job (the
objects as their normalizers' Structs decode them; a Job needs only `metadata`). Any other
kind is accepted and ignored, so the collector may report every object. `forget` reads
only the object's namespace and name, so an object that vanished during a relist can be
forgotten from a Struct holding just its metadata.

Not locked: only the collector's processor thread observes and looks up (`collector.processor`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from collector.model import ObjectMeta
from collector.normalize.base import HpaRef, RevisionRef
from collector.normalize.deployment import revision_number
from collector.normalize.hpa import min_replicas
from collector.normalize.revision import owning_deployment
from collector.state import RELATION_TABLES, StateStore

# The Deployment's ReplicaSet with the highest revision (one without a number sorts below
# every numbered one), then by name: asked for every ReplicaSet a list page brings, and
# served by the index `replicasets_by_revision` (`collector.state`) without a sort.
CURRENT_REVISION = (
    "SELECT name, revision, created FROM replicasets"
    " WHERE namespace = ? AND deployment = ?"
    " ORDER BY COALESCE(revision, 0) DESC, name DESC LIMIT 1"
)

Labels = frozenset[tuple[str, str]]
_Key = tuple[str, str]  # (namespace, name)
_HpaLink = tuple[str | None, int | None, int | None]  # (target Deployment, min, max)
_RsEntry = tuple[str, int | None, str | None]  # (Deployment, revision number, created)

# Current revisions remembered (each asked for a Deployment's record and again for each of
# its revision records, one after the other): a few, the most recent.
_CURRENT_MEMO = 64

_encode_labels = msgspec.msgpack.Encoder().encode
_decode_labels = msgspec.msgpack.Decoder(dict[str, str]).decode


class Relations:
    def __init__(self, store: StateStore | None = None) -> None:
        """`store`: where the large indexes live (None: a store in memory of its own)."""
        self._store = store or StateStore()
        with self._store.lock:
            for table in RELATION_TABLES:
                self._store.execute(f"DELETE FROM {table}")
        # Service selectors (non-empty ones only).
        self._selectors: dict[str, dict[str, Labels]] = defaultdict(dict)
        # HPA -> (target, bounds), and the reverse: Deployment -> HPA names.
        self._hpas: dict[_Key, _HpaLink] = {}
        self._hpas_of: dict[_Key, set[str]] = defaultdict(set)
        self._cronjob_of: dict[_Key, str] = {}
        # Deployment -> its current revision, as the table says now (see `_current`).
        self._currents: dict[_Key, RevisionRef | None] = {}
        self._currents_rollbacks = self._store.rollbacks
        self._observers: dict[str, Callable[[Any], set[str]]] = {
            "Service": self._observe_service,
            "HorizontalPodAutoscaler": self._observe_hpa,
            "ReplicaSet": self._observe_replicaset,
            "Deployment": self._observe_deployment,
            "Job": self._observe_job,
        }

    # -- updates ------------------------------------------------------------------------

    def observe(self, kind: str, obj: Any) -> set[str]:
        """The object of source kind `kind` exists as given; the Deployments it affects."""
        observer = self._observers.get(kind)
        if observer is None:
            return set()
        return observer(obj)

    def forget(self, kind: str, obj: Any) -> set[str]:
        """The object is gone; the Deployments whose records its absence changes."""
        if kind not in self._observers:
            return set()
        meta: ObjectMeta = obj.metadata
        namespace, name = meta.namespace or "", meta.name
        if kind == "Service":
            return self._set_selector(namespace, name, frozenset())
        if kind == "HorizontalPodAutoscaler":
            return self._set_hpa((namespace, name), None)
        if kind == "ReplicaSet":
            return self._set_replicaset((namespace, name), None)
        if kind == "Deployment":
            self._store.execute(
                "DELETE FROM deployment_templates WHERE namespace = ? AND name = ?",
                (namespace, name),
            )
        else:
            self._cronjob_of.pop((namespace, name), None)
        return set()

    def _observe_service(self, obj: Any) -> set[str]:
        meta: ObjectMeta = obj.metadata
        selector = frozenset((obj.spec.selector or {}).items())
        return self._set_selector(meta.namespace or "", meta.name, selector)

    def _observe_hpa(self, obj: Any) -> set[str]:
        meta: ObjectMeta = obj.metadata
        spec = obj.spec
        target = spec.scale_target_ref
        deployment = target.name if target.kind == "Deployment" and target.name else None
        link = (deployment, min_replicas(spec), spec.max_replicas)
        return self._set_hpa((meta.namespace or "", meta.name), link)

    def _observe_replicaset(self, obj: Any) -> set[str]:
        meta: ObjectMeta = obj.metadata
        deployment = owning_deployment(meta)
        entry = (
            None
            if deployment is None
            else (deployment, revision_number(meta.annotations), meta.creation_timestamp)
        )
        return self._set_replicaset((meta.namespace or "", meta.name), entry)

    def _observe_deployment(self, obj: Any) -> set[str]:
        meta: ObjectMeta = obj.metadata
        self._store.execute(
            "INSERT OR REPLACE INTO deployment_templates VALUES (?, ?, ?)",
            (meta.namespace or "", meta.name, _encode_labels(obj.spec.template.metadata.labels)),
        )
        return set()

    def _observe_job(self, obj: Any) -> set[str]:
        meta: ObjectMeta = obj.metadata
        owner = meta.controller()
        key = (meta.namespace or "", meta.name)
        if owner is not None and owner.kind == "CronJob":
            self._cronjob_of[key] = owner.name
        else:
            self._cronjob_of.pop(key, None)
        return set()

    def _set_selector(self, namespace: str, service: str, selector: Labels) -> set[str]:
        """Store a Service's selector (empty: selects nothing); Deployments it (de)selects."""
        before = self._selectors.get(namespace, {}).get(service, frozenset())
        if selector == before:
            return set()
        if selector:
            self._selectors[namespace][service] = selector
        else:
            self._drop(self._selectors, namespace, service)
        templates = self._store.rows(
            "SELECT name, labels FROM deployment_templates WHERE namespace = ?", (namespace,)
        )
        affected = set()
        for deployment, encoded in templates:
            labels = frozenset(_decode_labels(encoded).items())  # type: ignore[arg-type]
            if any(sel and sel <= labels for sel in (before, selector)):
                affected.add(f"{namespace}/{deployment}")
        return affected

    def _set_hpa(self, hpa: _Key, link: _HpaLink | None) -> set[str]:
        namespace, name = hpa
        before = self._hpas.pop(hpa, None)
        if link is not None:
            self._hpas[hpa] = link
        if link == before:
            return set()
        affected = set()
        for entry in (before, link):
            if entry is not None and entry[0] is not None:
                affected.add(entry[0])
        if before is not None and before[0] is not None:
            self._discard(self._hpas_of, (namespace, before[0]), name)
        if link is not None and link[0] is not None:
            self._hpas_of[(namespace, link[0])].add(name)
        return {f"{namespace}/{deployment}" for deployment in affected}

    def _set_replicaset(self, replicaset: _Key, entry: _RsEntry | None) -> set[str]:
        """Index a ReplicaSet (None: not a Deployment's); Deployments whose current changed."""
        namespace = replicaset[0]
        if entry is not None:
            # A new ReplicaSet (all of them, in a first list) goes in with one statement, no
            # query of what was there; a known one is left as it is, for the query below.
            inserted = self._store.execute(
                "INSERT OR IGNORE INTO replicasets VALUES (?, ?, ?, ?, ?)", (*replicaset, *entry)
            )
            if inserted.rowcount == 1:
                return self._added_replicaset(replicaset, entry)
        found = self._store.rows(
            "SELECT deployment, revision, created FROM replicasets"
            " WHERE namespace = ? AND name = ?",
            replicaset,
        )
        before: _RsEntry | None = found[0] if found else None  # type: ignore[assignment]
        if entry == before:
            return set()
        deployments = {e[0] for e in (before, entry) if e is not None}
        was = {d: self._current((namespace, d)) for d in deployments}
        for deployment in deployments:
            self._currents.pop((namespace, deployment), None)
        if entry is None:
            self._store.execute(
                "DELETE FROM replicasets WHERE namespace = ? AND name = ?", replicaset
            )
        else:
            self._store.execute(
                "INSERT OR REPLACE INTO replicasets VALUES (?, ?, ?, ?, ?)", (*replicaset, *entry)
            )
        return {f"{namespace}/{d}" for d in deployments if self._current((namespace, d)) != was[d]}

    def _added_replicaset(self, replicaset: _Key, entry: _RsEntry) -> set[str]:
        """(Just inserted.) Its Deployment, if it is that Deployment's current one now."""
        namespace, name = replicaset
        owner = (namespace, entry[0])
        added = RevisionRef(replicaset=name, number=entry[1] or 0, created_at=entry[2])
        if self._remembered(owner):
            # What was current before it went in (nothing else changed since): it is
            # current now if it sorts above that one, as `_current` sorts.
            before = self._currents[owner]
            if before is not None and (added.number, name) <= (before.number, before.replicaset):
                return set()
            self._remember_current(owner, added)
        else:
            current = self._current(owner)  # asked with it in the table
            if current is None or current.replicaset != name:
                return set()
        return {f"{namespace}/{entry[0]}"}

    # -- lookups ------------------------------------------------------------------------

    def deployment_of_replicaset(self, namespace: str, replicaset: str) -> str | None:
        found = self._store.rows(
            "SELECT deployment FROM replicasets WHERE namespace = ? AND name = ?",
            (namespace, replicaset),
        )
        return str(found[0][0]) if found else None

    def current_revision(self, namespace: str, deployment: str) -> RevisionRef | None:
        """The Deployment's ReplicaSet with the highest revision number (ties: by name)."""
        return self._current((namespace, deployment))

    def cronjob_of_job(self, namespace: str, job: str) -> str | None:
        return self._cronjob_of.get((namespace, job))

    def services_selecting(self, namespace: str, labels: Mapping[str, str]) -> list[str]:
        """Services in `namespace` whose non-empty selector is a subset of `labels`, sorted."""
        items = frozenset(labels.items())
        selectors = self._selectors.get(namespace, {})
        return sorted(name for name, sel in selectors.items() if sel <= items)

    def hpa_for(self, namespace: str, deployment: str) -> HpaRef | None:
        """The HPA targeting the Deployment; with several (a misconfiguration), the first."""
        names = self._hpas_of.get((namespace, deployment))
        if not names:
            return None
        name = min(names)
        _, low, high = self._hpas[(namespace, name)]
        return HpaRef(name=name, min_replicas=low, max_replicas=high)

    def replicasets_of(self, namespace: str, deployment: str) -> list[str]:
        """The Deployment's ReplicaSets, sorted: whose revision records to rebuild. Its
        current one, found among them as `_current` would find it, is remembered: the
        records rebuilt next ask for it."""
        found = self._store.rows(
            "SELECT name, revision, created FROM replicasets"
            " WHERE namespace = ? AND deployment = ? ORDER BY name",
            (namespace, deployment),
        )
        current = max(found, key=lambda row: (row[1] or 0, row[0])) if found else None
        self._remembered((namespace, deployment))  # forgets what a rollback made stale
        self._remember_current((namespace, deployment), _revision_ref(current))
        return [str(row[0]) for row in found]

    # -- helpers (lock held) ------------------------------------------------------------

    def _current(self, deployment: _Key) -> RevisionRef | None:
        """Remembered for the few Deployments asked last; every write to the table that
        may change a Deployment's answer forgets or replaces it (`_set_replicaset`), and a
        rollback of the store's writes forgets them all."""
        if self._remembered(deployment):
            return self._currents[deployment]
        found = self._store.rows(CURRENT_REVISION, deployment)
        current = _revision_ref(found[0] if found else None)
        self._remember_current(deployment, current)
        return current

    def _remembered(self, deployment: _Key) -> bool:
        """Whether the Deployment's current revision is remembered (none is after a
        rollback of the store's writes)."""
        if self._currents_rollbacks != self._store.rollbacks:
            self._currents.clear()
            self._currents_rollbacks = self._store.rollbacks
        return deployment in self._currents

    def _remember_current(self, deployment: _Key, current: RevisionRef | None) -> None:
        currents = self._currents
        currents.pop(deployment, None)
        if len(currents) >= _CURRENT_MEMO:
            del currents[next(iter(currents))]  # the one remembered longest ago
        currents[deployment] = current

    @staticmethod
    def _drop(index: dict[Any, dict[str, Any]], outer: Any, inner: str) -> None:
        """Remove one entry and an emptied bucket, so indexes do not grow with churn."""
        bucket = index.get(outer)
        if bucket is None:
            return
        bucket.pop(inner, None)
        if not bucket:
            del index[outer]

    @staticmethod
    def _discard(index: dict[_Key, set[str]], outer: _Key, inner: str) -> None:
        bucket = index.get(outer)
        if bucket is None:
            return
        bucket.discard(inner)
        if not bucket:
            del index[outer]


def _revision_ref(row: tuple[object, ...] | None) -> RevisionRef | None:
    """A `replicasets` row's (name, revision, created) as a current revision."""
    if row is None:
        return None
    name, number, created = row
    return RevisionRef(
        replicaset=str(name),
        number=int(number or 0),  # type: ignore[call-overload]
        created_at=None if created is None else str(created),
    )
