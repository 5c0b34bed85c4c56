"""Warning Events -> `pod_error` events: the failures only Events tell.

A kubelet that cannot create a pod's sandbox or mount its volumes leaves the containers
waiting as `ContainerCreating` and says what is wrong only in a Warning Event; failing
probes show as `Unhealthy` Events long before a restart; a ReplicaSet or Job that cannot
create Pods at all (quota, an admission webhook) records `FailedCreate` on itself. These
become `pod_error` records of the same shape as the status-derived ones, with the same
workload scope, `details.source: "event"`, the Event's reason and count, and `occurred_at`
when the series began:

| Event reason (involved object) | record reason |
|---|---|
| FailedCreatePodSandBox (Pod) | CreatePodSandboxError |
| NetworkNotReady (Pod) | NetworkPluginNotReady |
| FailedMount, FailedAttachVolume, FailedMapVolume (Pod) | the same |
| Unhealthy (Pod, a container) | LivenessProbeFailed, ReadinessProbeFailed, StartupProbeFailed |
| FailedPostStartHook, FailedPreStopHook (Pod, a container) | the same |
| FailedCreate (ReplicaSet, Job) | FailedCreate, on the Deployment's revision / CronJob's run |
| FailedScheduling, Evicted (Pod) | none: they enrich the pod's Unschedulable / Evicted |

A FailedScheduling or Evicted Event is kept with the pod's memo for the status-derived
record of the same incident (one record, not two), unless that record went out already.

Every other reason gives nothing; those the status reports (`BackOff`, an image pull's
`Failed`) would only repeat it. Messages go through `collector.event_messages.redact`.

De-duplication: one Event object is one series (its count rises in place), remembered in
the state store (`collector.state.EventSeries`) with its incident (object, reason,
container); an incident gives one record while any of its series is remembered. A series
is forgotten when its Event is deleted (an hour after its last update), so nothing about
Events lives on the heap, and a restart re-sends nothing. A series whose last activity is
more than `STALE_SECONDS` old when it is first seen is history, not a current state (the
rule for pods seen the first time): it gives no record and opens no incident, so a live
series of the same incident beside it (a correlator's merged Event, say) is reported; it is
not remembered either, and is judged again when its count rises.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from datetime import datetime
from typing import Any

import msgspec

from collector import event_messages, redact
from collector.filters import Filters
from collector.model import Int64, ObjectMeta, event
from collector.normalize.base import Context
from collector.normalize.pod_error import (
    EVICTED,
    KIND,
    UNSCHEDULABLE,
    EventNote,
    PodErrorNormalizer,
    seconds_between,
)
from collector.state import EventSeries
from shipper.records import Record, utc_timestamp

WARNING = "Warning"
# Reasons of Events about Pods, and the record reason each gives.
POD_REASONS = {
    "FailedCreatePodSandBox": "CreatePodSandboxError",
    "NetworkNotReady": "NetworkPluginNotReady",
    "FailedMount": "FailedMount",
    "FailedAttachVolume": "FailedAttachVolume",
    "FailedMapVolume": "FailedMapVolume",
    "FailedPostStartHook": "FailedPostStartHook",
    "FailedPreStopHook": "FailedPreStopHook",
}
UNHEALTHY = "Unhealthy"
FAILED_CREATE = "FailedCreate"
# Events that only enrich the status-derived signal named.
ENRICHING = {"FailedScheduling": UNSCHEDULABLE, "Evicted": EVICTED}
STALE_SECONDS = 1800.0


class InvolvedObject(msgspec.Struct, rename="camel", frozen=True, gc=False):
    kind: str = ""
    namespace: str | None = None
    name: str = ""
    uid: str = ""
    field_path: str | None = None


class EventSource(msgspec.Struct, frozen=True, gc=False):
    component: str | None = None
    host: str | None = None


class Series(msgspec.Struct, rename="camel", frozen=True, gc=False):
    count: Int64 = 0
    last_observed_time: str | None = None


class Event(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """A core/v1 Event, in either of the forms writers use: the old one (`count`,
    `firstTimestamp`, `lastTimestamp`, `source`) or the events.k8s.io one as the core API
    shows it (`eventTime`, `series`, `reportingComponent`)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    involved_object: InvolvedObject = msgspec.field(default_factory=InvolvedObject)
    type: str | None = None
    reason: str | None = None
    message: str | None = None
    count: Int64 | None = None
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    event_time: str | None = None
    series: Series | None = None
    source: EventSource = msgspec.field(default_factory=EventSource)
    reporting_component: str | None = None
    reporting_instance: str | None = None

    @property
    def started(self) -> str | None:
        """When the series began."""
        return _seconds(self.first_timestamp or self.event_time or self.metadata.creation_timestamp)

    @property
    def last_seen(self) -> str | None:
        last = self.series.last_observed_time if self.series else None
        return _seconds(last or self.last_timestamp or self.event_time or self.first_timestamp)

    @property
    def times(self) -> int:
        if self.series is not None and self.series.count:
            return self.series.count
        return max(self.count or 1, 1)


class PodEventNormalizer:
    """Warning Events -> `pod_error` events; its memory is the state store's. Used by the
    collector's processor alone, so unlocked."""

    kind = KIND
    source = "Event"
    struct = Event

    def __init__(
        self,
        pods: PodErrorNormalizer,
        series: EventSeries,
        filters: Filters,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._pods = pods
        self._series = series
        self._filters = filters
        self._clock = clock

    def upserts(self, obj: Event, ctx: Context) -> list[Record]:
        namespace = _warning_namespace(obj)
        if namespace is None:
            return []
        now = self._clock() if self._clock is not None else None
        target = obj.involved_object
        if target.kind == "Pod" and obj.reason in ENRICHING:
            self._keep_for_status(obj, namespace)
            return []
        signal = _signal(obj)
        if signal is None or self._skipped(namespace, target):
            return []
        container, init = _container(target.field_path)
        reason = f"Init:{signal}" if init else signal
        incident = f"{namespace}/{target.kind}/{target.name}/{container or '-'}/{reason}"
        if not self._opens(incident, obj, now):
            return []
        return [self._record(obj, namespace, reason, container, init, ctx, now)]

    def deletes(self, obj: Event, ctx: Context) -> list[Record]:
        self.forget(obj.metadata.key)
        return []

    def forget(self, key: str) -> None:
        """The Event `namespace/name` is gone: its series ends."""
        self._series.discard(key)

    def missing(self, present: Container[str]) -> set[str]:
        return self._series.missing(present)

    def _keep_for_status(self, obj: Event, namespace: str) -> None:
        """A FailedScheduling or Evicted Event waits with the pod's memo for the status
        signal it enriches, unless the user's filters skip the pod."""
        target = obj.involved_object
        if not self._filters.skip(KIND, namespace, target.name):
            self._pods.note_event(f"{namespace}/{target.name}", target.uid, _note(obj))

    def _opens(self, incident: str, obj: Event, now: datetime | None) -> bool:
        """Whether the Event opens its incident, which then gives its one record. Its series
        is remembered either way; a series counting up opens nothing again."""
        if _stale(obj, now):
            # History, not a current state: it neither reports nor opens the incident (a
            # live series of the same incident beside it is reported). Not remembered, so it
            # counts again if it comes back to life.
            return False
        key = obj.metadata.key
        if self._series.known(key):
            return False  # the same series counting up
        opens = not self._series.open(incident)
        self._series.add(key, incident)
        return opens

    def _skipped(self, namespace: str, target: InvolvedObject) -> bool:
        """The user's filters, applied to the object the Event is about."""
        kinds = {"ReplicaSet": ("revision",), "Job": ("job_execution",)}.get(target.kind, ())
        return any(self._filters.skip(kind, namespace, target.name) for kind in (KIND, *kinds))

    def _record(
        self,
        obj: Event,
        namespace: str,
        reason: str,
        container: str | None,
        init: bool,
        ctx: Context,
        now: datetime | None,
    ) -> Record:
        target = obj.involved_object
        started = obj.started or utc_timestamp(now)
        pod = target.kind == "Pod"
        if pod:
            facts = self._pods.facts(f"{namespace}/{target.name}", target.uid)
            workload = (
                self._pods.workload(
                    namespace, facts.owner_kind, facts.owner_name, ctx, counted=facts.failing
                )
                if facts is not None
                else None
            )
        else:  # what a controller could not create: its own scope
            facts = None
            workload = self._pods.workload(namespace, target.kind, target.name, ctx)
        data: dict[str, Any] = {
            "reason": reason,
            "message": event_messages.redact(obj.message),
            "occurred_at": started,
            "pod": target.name if pod else None,
            "pod_uid": (target.uid or None) if pod else None,
            "node": obj.source.host or (facts.node if facts else None),
            "details": {
                "container": container,
                "init_container": init,
                "image": None,
                "exit_code": None,
                "signal": None,
                "restart_count": None,
                "phase": facts.phase if facts else None,
                "condition": None,
                "source": "event",
                "event_reason": obj.reason,
                "count": obj.times,
            },
            "workload": workload,
        }
        key = f"{namespace}/{target.name}/{container or '-'}/{reason}/{started}"
        meta = ObjectMeta(name=target.name, namespace=namespace, uid=target.uid)
        return event(KIND, key, meta, data)


def _warning_namespace(obj: Event) -> str | None:
    """The namespace of a Warning Event about a named, namespaced object; None for any other
    Event (the list asks for Warnings only, but a server may not filter)."""
    target = obj.involved_object
    namespace = target.namespace or obj.metadata.namespace or ""
    if obj.type != WARNING or not namespace or not target.name:
        return None
    return namespace


def _signal(obj: Event) -> str | None:
    """The record reason an Event gives, or None."""
    reason, kind = obj.reason or "", obj.involved_object.kind
    if kind == "Pod":
        if reason == UNHEALTHY:
            probe = event_messages.probe_kind(obj.message)
            return f"{probe}ProbeFailed" if probe else None
        return POD_REASONS.get(reason)
    if kind in ("ReplicaSet", "Job") and reason == FAILED_CREATE:
        return FAILED_CREATE
    return None


def _note(obj: Event) -> EventNote:
    return EventNote(
        signal=ENRICHING[obj.reason or ""],
        event_reason=obj.reason or "",
        # The scheduler's and eviction manager's own sentences, as the pod's status
        # carries them too (node counts, taints, resource names and amounts).
        message=redact.text(obj.message or ""),
        count=obj.times,
        occurred_at=obj.started,
    )


def _container(field_path: str | None) -> tuple[str | None, bool]:
    """`spec.containers{app}` -> ("app", False); `spec.initContainers{init}` -> ("init", True)."""
    if not field_path or not field_path.endswith("}") or "{" not in field_path:
        return None, False
    where, _, name = field_path[:-1].partition("{")
    return name, where == "spec.initContainers"


def _stale(obj: Event, now: datetime | None) -> bool:
    quiet = seconds_between(obj.last_seen, utc_timestamp(now))
    return quiet is not None and quiet > STALE_SECONDS


def _seconds(timestamp: str | None) -> str | None:
    """A Time or MicroTime as whole seconds (`2026-12-02T11:40:00Z`)."""
    if not timestamp:
        return None
    head, dot, _ = timestamp.partition(".")
    return f"{head}Z" if dot else timestamp
