"""What every normalizer is given and what it must provide.

A normalizer turns one decoded Kubernetes object into the records the contract defines
for it. It copies only allow-listed fields (see `collector.sanitize`), never the object as
a whole, and never performs I/O of its own: relationships come from `Lookups` (indexes
the collector keeps from other kinds) and the few reads it needs come through the `Context`:
`fetch_secret` (Helm releases) and `job_logs` (failed Job logs, read on a worker of their
own: asking never blocks).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from collector.model import ObjectMeta, delete, upsert
from shipper.records import Record

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class RevisionRef:
    """A Deployment's ReplicaSet and the revision number it carries."""

    replicaset: str
    number: int
    created_at: str | None = None


@dataclass(frozen=True, slots=True)
class HpaRef:
    """The HPA that targets a Deployment, as deployment and revision records mention it."""

    name: str
    min_replicas: int | None
    max_replicas: int | None


class Lookups(Protocol):
    """Relationships across kinds, answered from the collector's in-memory indexes."""

    def deployment_of_replicaset(self, namespace: str, replicaset: str) -> str | None: ...

    def current_revision(self, namespace: str, deployment: str) -> RevisionRef | None: ...

    def cronjob_of_job(self, namespace: str, job: str) -> str | None: ...

    def services_selecting(self, namespace: str, labels: Mapping[str, str]) -> list[str]: ...

    def hpa_for(self, namespace: str, deployment: str) -> HpaRef | None: ...


@dataclass(frozen=True, slots=True)
class LogRequest:
    """The log a failed Job's record wants: the last `lines` lines of one pod's container."""

    job_uid: str
    job_key: str
    namespace: str
    pod: str
    container: str
    lines: int


class JobLogs(Protocol):
    """Failed Jobs' logs, read off the informers' threads (`collector.job_logs`)."""

    def lines(self, request: LogRequest) -> list[str] | None:
        """The lines read for this log; None while they are not (a read is then asked for).
        Never blocks."""
        ...

    def forget(self, job_uid: str) -> None:
        """The Job is gone: its pending read is dropped and its lines forgotten."""


class _NoJobLogs:
    """Where no log is ever read (a context built for one normalizer)."""

    def lines(self, request: LogRequest) -> None:
        return None

    def forget(self, job_uid: str) -> None:
        return None


NO_JOB_LOGS = _NoJobLogs()

FetchSecret = Callable[[str, str], bytes | bytearray | None]
"""(namespace, name) -> the Secret as the API serves it now (JSON), or None when it is gone.
Raises `ObjectTooLarge` past the bytes one Secret may hold, and the API's error when it
cannot be read for now (the informer then tries the object again after its backoff)."""


class Drop(Exception):
    """Raised by a step of a normalizer: the object gives no record now (as structlog's
    `DropEvent` ends an event's processing). The normalizer answers with no records."""


class ObjectTooLarge(Exception):
    """An object read for a record is larger than it may be; nothing of it was kept."""


def _no_secrets(namespace: str, name: str) -> None:
    raise LookupError(f"no Secret reader given: {namespace}/{name}")


@dataclass(frozen=True, slots=True)
class Context:
    lookups: Lookups
    job_logs: JobLogs = NO_JOB_LOGS
    fetch_secret: FetchSecret = _no_secrets
    ignore_node_labels: frozenset[str] = frozenset()
    collect_job_logs: bool = True
    collect_helm_releases: bool = True


class Normalizer(Protocol[T]):
    """One source kind. `kind` is the record kind it gives, `source` the Kubernetes kind it
    reads (what `collector.relations` indexes by) and `struct` what a raw list item or watch
    object decodes into."""

    @property
    def kind(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def struct(self) -> type[T]: ...

    def upserts(self, obj: T, ctx: Context) -> list[Record]:
        """Records for the object as it is now (upserts; pod errors give events)."""
        ...

    def deletes(self, obj: T, ctx: Context) -> list[Record]:
        """Records for the object having gone (deletes; nothing for event-only kinds)."""
        ...


class Relinks(Protocol):
    """A normalizer whose kept records mention other kinds (Deployments, revisions)."""

    def relink(self, data: dict[str, Any], meta: ObjectMeta, lookups: Lookups) -> dict[str, Any]:
        """A record's data with the relation fields decided again (no object needed)."""
        ...


class Memory(Protocol):
    """State a normalizer keeps per object beyond its records (pods, Events)."""

    def forget(self, key: str) -> None:
        """The object `namespace/name` is gone."""

    def missing(self, present: Container[str]) -> set[str]:
        """Keys with state that are not in `present` (a relist forgets those)."""
        ...


Extract = Callable[[T_contra, Context], dict[str, Any]]
"""A kind's fields of its one record: the object's allow-listed data."""


class Object(Protocol):
    """What every decoded object has."""

    @property
    def metadata(self) -> ObjectMeta: ...


Obj = TypeVar("Obj", bound=Object)


class PerObject(Generic[Obj]):
    """A kind that gives one record per object: its own field extraction, the record
    envelope shared (an upsert while the object exists, a delete once it is gone). Keyed
    `namespace/name` unless `key` says otherwise."""

    def __init__(
        self,
        *,
        kind: str,
        source: str,
        struct: type[Obj],
        data: Extract[Obj],
        key: Callable[[ObjectMeta], str] | None = None,
    ) -> None:
        self.kind = kind
        self.source = source
        self.struct = struct
        self._data = data
        self._key = key

    def upserts(self, obj: Obj, ctx: Context) -> list[Record]:
        meta = obj.metadata
        return [upsert(self.kind, meta, self._data(obj, ctx), key=self._record_key(meta))]

    def deletes(self, obj: Obj, ctx: Context) -> list[Record]:
        meta = obj.metadata
        return [delete(self.kind, meta, key=self._record_key(meta))]

    def _record_key(self, meta: ObjectMeta) -> str | None:
        return None if self._key is None else self._key(meta)
