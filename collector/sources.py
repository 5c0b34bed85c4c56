"""What the collector watches, declared as data.

A `Source` is one resource and its normalizer, with what the generic parts need to know
about it: what its sink keeps to rebuild records later (`Keep`), which resources must have
listed before its informer starts (warm-up order: namespaces, Deployments and CronJobs;
then ReplicaSets, Services and HPAs, what Deployment records mention; then the rest, Events
once Pods have listed, since an Event's pod error takes the pod's workload from them),
which records a change to one of its objects makes stale, and whose records it holds back
until what they mention has listed (`Dependents`). Nothing else in the collector asks
which resource it has.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from collector import resources
from collector.filters import Filters
from collector.model import ObjectMeta
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
from collector.normalize.base import Lookups, Memory, Normalizer, Relinks
from collector.normalize.pod_error import Pod
from collector.relations import Relations
from collector.resources import Resource
from collector.state import StateStore

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Keep(enum.Enum):
    """What a sink remembers of its objects so their records can be rebuilt later."""

    NOTHING = "nothing"
    OBJECTS = "objects"  # the decoded object (few of them: Jobs, Nodes)
    RECORDS = "records"  # the last record's data, encoded; `Source.relink` redoes its links
    # The last record's data, sent again as it is while the object's resourceVersion stays
    # the same: its normalizer reads a costly body (a Helm release Secret) only for news.
    VERSIONED = "versioned"


@dataclass(frozen=True, slots=True)
class Dependents:
    """Records that mention other kinds: held back until `needs` have listed once (so a
    restart derives exactly what it sent before), then rebuilt, once per flush window,
    whenever what they mention changes. They are marked by the key of the object that owns
    them; `rebuilds` gives, for such a key, the objects whose records are built again."""

    name: str
    needs: frozenset[Resource]
    rebuilds: Callable[[str, Relations], list[tuple[Resource, str]]]


def _deployment_and_revisions(key: str, relations: Relations) -> list[tuple[Resource, str]]:
    namespace, _, name = key.partition("/")
    return [
        (resources.DEPLOYMENTS, key),
        *(
            (resources.REPLICASETS, f"{namespace}/{rs}")
            for rs in relations.replicasets_of(namespace, name)
        ),
    ]


DEPLOYMENT_RECORDS = Dependents(
    "deployments",
    needs=frozenset({resources.REPLICASETS, resources.SERVICES, resources.HPAS}),
    rebuilds=_deployment_and_revisions,
)
JOB_RECORDS = Dependents(
    "jobs", needs=frozenset({resources.PODS}), rebuilds=lambda key, _: [(resources.JOBS, key)]
)
DEPENDENTS = (DEPLOYMENT_RECORDS, JOB_RECORDS)  # rebuilt in this order
RELATION_DEPENDENTS = DEPLOYMENT_RECORDS
"""What the relation indexes answer for (`Relations.observe` gives Deployment keys)."""


def _own_key(meta: ObjectMeta, lookups: Lookups) -> str | None:
    return meta.key


def _revision_owner(meta: ObjectMeta, lookups: Lookups) -> str | None:
    """A ReplicaSet's revision record waits with its Deployment's; no Deployment, no wait.
    Its own controller reference says which (the relation index holds the same, a query
    away)."""
    owner = revision.owning_deployment(meta)
    return None if owner is None else f"{meta.namespace}/{owner}"


@dataclass(frozen=True, slots=True)
class Held:
    """The source's records belong to `dependents`, under the key `owner` gives."""

    dependents: Dependents
    owner: Callable[[ObjectMeta, Lookups], str | None] = _own_key


class Follower(Protocol[T_contra]):
    """Something beside the normalizer that follows a source's objects (a Job's pods)."""

    def observe(self, obj: T_contra) -> None: ...

    def forget(self, key: str) -> None: ...


def _job_of_pod(pod: Pod) -> str | None:
    owner = pod.metadata.controller()
    if owner is None or owner.kind != "Job":
        return None
    return f"{pod.metadata.namespace}/{owner.name}"


@dataclass(frozen=True, slots=True)
class Marks(Generic[T]):
    """A change to one of the source's objects makes these dependents' records stale."""

    dependents: Dependents
    owner: Callable[[T], str | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Source(Generic[T]):
    """One watched resource and everything the generic parts need to know about it."""

    resource: Resource
    normalizer: Normalizer[T]
    keep: Keep = Keep.NOTHING
    relink: Relinks | None = None
    """For `Keep.RECORDS`: how a kept record's relation fields are decided again."""
    memory: Memory | None = None
    """State the normalizer keeps per object beyond its records (pods, Events)."""
    followers: tuple[Follower[T], ...] = ()
    starts_after: frozenset[Resource] = frozenset()
    """Its informer starts once these have listed (or cannot list)."""
    held: Held | None = None
    """Its records wait for what they mention, and are rebuilt when that changes."""
    marks: Marks[T] | None = None
    """Other sources' records that a change to its objects makes stale."""
    events_only: bool = False
    """Its records are events (pod errors), not objects: no snapshot, nothing to delete."""

    @property
    def waits_for(self) -> frozenset[Resource]:
        """Resources its records depend on: until each has listed once, they are held back."""
        return frozenset() if self.held is None else self.held.dependents.needs


FIRST = frozenset({resources.NAMESPACES, resources.DEPLOYMENTS, resources.CRONJOBS})
SECOND = FIRST | DEPLOYMENT_RECORDS.needs


def table(
    *,
    state: StateStore,
    job_pods: job_execution.JobPods,
    filters: Filters,
    collect_events: bool,
    collect_helm_releases: bool,
) -> list[Source[Any]]:
    """Every source, in the order a one-shot listing takes them (`Collector.list_once`)."""
    pods = pod_error.PodErrorNormalizer(state.pods)
    sources: list[Source[Any]] = [
        Source(resource=resources.NAMESPACES, normalizer=namespace.NORMALIZER),
        Source(
            resource=resources.DEPLOYMENTS,
            normalizer=deployment.NORMALIZER,
            keep=Keep.RECORDS,
            relink=deployment.NORMALIZER,
            held=Held(DEPLOYMENT_RECORDS),
        ),
        Source(resource=resources.CRONJOBS, normalizer=cronjob.NORMALIZER),
        Source(
            resource=resources.REPLICASETS,
            normalizer=revision.NORMALIZER,
            keep=Keep.RECORDS,
            relink=revision.NORMALIZER,
            starts_after=FIRST,
            held=Held(DEPLOYMENT_RECORDS, _revision_owner),
        ),
        Source(resource=resources.SERVICES, normalizer=service.NORMALIZER, starts_after=FIRST),
        Source(resource=resources.HPAS, normalizer=hpa.NORMALIZER, starts_after=FIRST),
        Source(
            resource=resources.JOBS,
            normalizer=job_execution.JobExecutionNormalizer(job_pods),
            keep=Keep.OBJECTS,
            starts_after=SECOND,
            held=Held(JOB_RECORDS),
        ),
        Source(
            resource=resources.PODS,
            normalizer=pods,
            memory=pods,
            followers=(job_pods,),
            # After Jobs: a failing pod of a CronJob's Job names the CronJob, from the start.
            starts_after=SECOND | {resources.JOBS},
            marks=Marks(JOB_RECORDS, _job_of_pod),
            events_only=True,
        ),
        Source(
            resource=resources.NODES,
            normalizer=node.NORMALIZER,
            keep=Keep.OBJECTS,  # metadata hints
            starts_after=SECOND,
        ),
        Source(resource=resources.INGRESSES, normalizer=ingress.NORMALIZER, starts_after=SECOND),
        Source(
            resource=resources.NETWORK_POLICIES,
            normalizer=network_policy.NORMALIZER,
            starts_after=SECOND,
        ),
        *(
            Source(resource=resource, normalizer=normalizer, starts_after=SECOND)
            for resource, normalizer in (
                (resources.ROLES, rbac.ROLE),
                (resources.ROLE_BINDINGS, rbac.ROLE_BINDING),
                (resources.CLUSTER_ROLES, rbac.CLUSTER_ROLE),
                (resources.CLUSTER_ROLE_BINDINGS, rbac.CLUSTER_ROLE_BINDING),
            )
        ),
    ]
    if collect_events:
        events = pod_event.PodEventNormalizer(pods, state.events, filters)
        sources.append(
            Source(
                resource=resources.EVENTS,
                normalizer=events,
                memory=events,
                starts_after=SECOND | {resources.PODS},
                events_only=True,
            )
        )
    if collect_helm_releases:
        sources.append(
            Source(
                resource=resources.HELM_RELEASE_SECRETS,
                normalizer=helm_release.HelmReleaseNormalizer(),
                keep=Keep.VERSIONED,
                starts_after=SECOND,
            )
        )
    return sources
