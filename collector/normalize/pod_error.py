"""Pod error signals: `pod_error` events, emitted when a pod's error state changes.

The platform's error catalogue (restarts, CrashLoopBackOff, OOMKilled, image pull and
container start failures, terminations with a non-zero exit code, evictions, unschedulable
pods, readiness failures, phase Failed or Unknown) is fed by events, one per signal. Pods
change status all the time, so the normalizer remembers a few facts per pod (restart count
and already-reported signals per container, phase, scheduling and readiness) and emits an
event only for what is new. A pod seen for the first time yields the error states it is in
now, never a history: its last termination only adds detail to its current state.

Signals and how they are de-duplicated:
- a container termination (current state, or last state after a restart) is reported once,
  identified by its container id; a restart count increase reports the termination that
  caused it (`reason` = its reason, with exit code and signal);
- a waiting reason from the catalogue is reported once per run of the container (the image
  pull back-off flipping between ErrImagePull and ImagePullBackOff gives two events, not one
  per flip);
- CrashLoopBackOff is reported once per crash loop: the kubelet resets a container's restart
  back-off after 10 minutes of running, so a loop is new only when the run before it lasted
  that long; the crashes inside a loop are still reported one by one;
- pod-level signals (phase Failed or Unknown, Unschedulable, ContainersNotReady) on their
  transition. Not being ready is a failure once the pod had been ready, or after a grace
  period for one that never was (every new pod starts unready); it is reported only when
  no container error explains it, and a pod failure without a pod-level reason only when
  no container termination does (one failure, one event). Pods being deleted report
  nothing: their containers are killed on purpose.

Only container names and images are read from the pod spec side; a terminated container's
`message` (written by the application) is not even decoded. The per-pod state lives in the
collector's state store (`collector.state.PodMemos`), encoded, beside the pod's ReplicaSet
and whether it is failing, which give a revision's affected/total pod counts. Nothing here
raises on odd statuses: missing fields decode to defaults.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from collector import redact
from collector.model import Int64, ObjectMeta, event
from collector.normalize.base import Context
from collector.sanitize import Condition
from collector.state import PodMemos, StateStore
from shipper.records import Record, utc_timestamp

KIND = "pod_error"

CRASH_LOOP = "CrashLoopBackOff"
OOM_KILLED = "OOMKilled"
UNSCHEDULABLE = "Unschedulable"
EVICTED = "Evicted"
# The kubelet forgets a container's restart back-off once it has run this long.
BACKOFF_RESET_SECONDS = 600.0
# How long a pod that was never ready may stay so before that counts as a failure.
READINESS_GRACE_SECONDS = 300.0

# Waiting reasons that mean the container cannot start (kubelet and runtime names).
ERROR_WAITING_REASONS = frozenset(
    {
        CRASH_LOOP,
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "ImageInspectError",
        "RegistryUnavailable",
        "SignatureValidationFailed",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "ContainerCannotRun",
        "PreCreateHookError",
        "PreStartHookError",
        "PostStartHookError",
        "KillContainerError",
        "CreatePodSandboxError",
        "NetworkPluginNotReady",
    }
)
# Waiting on the way to running: not an error.
_BENIGN_WAITING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})


# -- decode shapes ----------------------------------------------------------------------


class Waiting(msgspec.Struct, frozen=True, gc=False):
    reason: str | None = None
    message: str | None = None


class Running(msgspec.Struct, rename="camel", frozen=True, gc=False):
    started_at: str | None = None


class Terminated(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """A finished container. Its `message` (application output) is deliberately not read."""

    exit_code: Int64 = 0
    signal: Int64 | None = None
    reason: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    container_id: str | None = msgspec.field(default=None, name="containerID")


class ContainerState(msgspec.Struct, frozen=True, gc=False):
    waiting: Waiting | None = None
    running: Running | None = None
    terminated: Terminated | None = None


class ContainerStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    name: str = ""
    image: str | None = None
    ready: bool = False
    restart_count: Int64 = 0
    state: ContainerState = msgspec.field(default_factory=ContainerState)
    last_state: ContainerState = msgspec.field(default_factory=ContainerState)


class PodSpec(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """Only the node: containers, env, args and commands are never decoded."""

    node_name: str | None = None


class PodStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    conditions: list[Condition] = msgspec.field(default_factory=list)
    container_statuses: list[ContainerStatus] = msgspec.field(default_factory=list)
    init_container_statuses: list[ContainerStatus] = msgspec.field(default_factory=list)


class Pod(msgspec.Struct, frozen=True, gc=False):
    """A pod as the error signals (and `JobPods`) need it."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


# -- helpers shared with the job execution normalizer -----------------------------------


def is_error_termination(term: Terminated) -> bool:
    """A termination that counts as a failure: non-zero exit, a signal, or OOMKilled."""
    return term.exit_code != 0 or bool(term.signal) or term.reason == OOM_KILLED


def termination_signal(term: Terminated) -> int | None:
    """The signal that ended the container: as reported, else read from a 128+n exit code."""
    if term.signal:
        return term.signal
    if 128 < term.exit_code <= 128 + 64:
        return term.exit_code - 128
    return None


def termination_reason(term: Terminated) -> str:
    return term.reason or ("Error" if is_error_termination(term) else "Completed")


def seconds_between(start: str | None, end: str | None) -> float | None:
    """Seconds from one RFC 3339 timestamp to another; None if either is missing or bad."""
    if not start or not end:
        return None
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None


# -- remembered state --------------------------------------------------------------------


class _ContainerMemo(msgspec.Struct, gc=False):
    restarts: int = 0
    # Waiting reasons reported since the container last ran or stopped.
    waiting: list[str] = msgspec.field(default_factory=list)
    crash_loop: bool = False
    # Ids of the terminations visible last time (current and last state): all handled.
    terminations: list[str] = msgspec.field(default_factory=list)


class EventNote(msgspec.Struct, gc=False):
    """A scheduler's or kubelet's Warning Event about a pod-level signal the status reports
    too (FailedScheduling, Evicted), kept until the status reports it: one record, enriched."""

    signal: str  # the status-derived reason it enriches: Unschedulable or Evicted
    event_reason: str
    message: str
    count: int
    occurred_at: str | None


class _PodMemo(msgspec.Struct, gc=False):
    uid: str = ""
    phase: str | None = None
    unschedulable: bool = False
    was_ready: bool = False
    not_ready: bool = False
    failing: bool = False
    replicaset: str | None = None
    containers: dict[str, _ContainerMemo] = msgspec.field(default_factory=dict)
    # The pod's controller (any kind), for signals read from Events, which name only the pod.
    owner_kind: str | None = None
    owner_name: str | None = None
    node: str | None = None
    events: list[EventNote] = msgspec.field(default_factory=list)


_pack_memo = msgspec.msgpack.Encoder().encode
_unpack_memo = msgspec.msgpack.Decoder(_PodMemo).decode
# What a pod seen for the first time is compared with: read only, never changed (shared,
# so that each of a list's pods does not make one, its dict and list included).
_NO_MEMO = _PodMemo()


@dataclass(slots=True)
class _Signal:
    reason: str
    message: str
    occurred_at: str | None
    container: str | None = None
    init: bool = False
    image: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    restart_count: int | None = None
    condition: str | None = None
    event: EventNote | None = None  # the Warning Event that says the same (see `EventNote`)


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the pod errors remember of a pod, for a signal read from one of its Events."""

    phase: str | None
    node: str | None
    failing: bool
    owner_kind: str | None
    owner_name: str | None


# -- the normalizer ---------------------------------------------------------------------


class PodErrorNormalizer:
    """Pods -> `pod_error` events on transitions; state keyed by `namespace/name`. Used by the
    collector's processor alone (`collector.processor`), so unlocked."""

    kind = KIND
    source = "Pod"
    struct = Pod

    def __init__(
        self,
        memos: PodMemos | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """`clock`: what "now" is (tests); None, the system's clock."""
        # A cluster has tens of thousands of pods, nearly all healthy: their memos live in
        # the collector's state store, encoded, not on the heap.
        self.memos = memos if memos is not None else StateStore().pods
        self._clock = clock

    def upserts(self, obj: Pod, ctx: Context) -> list[Record]:
        meta = obj.metadata
        key = meta.key
        now = utc_timestamp(None if self._clock is None else self._clock())
        stored = self.memos.get(key)
        previous = None if stored is None else _unpack_memo(stored)
        if previous is not None and previous.uid != meta.uid:
            previous = None  # same name, new pod: nothing carries over
        memo, found = _observe(obj, previous, now)
        if previous is not None and previous.events:
            memo.events = _enrich(found, previous.events)
        packed = _pack_memo(memo)
        if packed != stored:  # a relist finds most pods as they were: no write for them
            replicaset = f"{meta.namespace}/{memo.replicaset}" if memo.replicaset else None
            self.memos.set(key, packed, replicaset=replicaset, failing=memo.failing)
        if meta.deletion_timestamp is not None:
            return []
        workload = self._workload(obj, ctx) if found else None
        return [self._record(obj, signal, workload, now) for signal in found]

    def deletes(self, obj: Pod, ctx: Context) -> list[Record]:
        self.forget(obj.metadata.key)
        return []

    def forget(self, key: str) -> None:
        """Drop a pod's state (deleted, or found gone by a relist: `namespace/name`)."""
        self.memos.discard(key)

    def missing(self, present: Container[str]) -> set[str]:
        """Pods with state that are not in `present` (a relist forgets those)."""
        return self.memos.missing(present)

    # -- internals ----------------------------------------------------------------------

    # -- what signals read from Events ask (`collector.normalize.pod_event`) ------------

    def facts(self, key: str, uid: str | None) -> PodFacts | None:
        """What is remembered of the pod `namespace/name`, if it is the pod with `uid`."""
        stored = self.memos.get(key)
        memo = None if stored is None else _unpack_memo(stored)
        if memo is None or (uid and memo.uid and memo.uid != uid):
            return None
        return PodFacts(memo.phase, memo.node, memo.failing, memo.owner_kind, memo.owner_name)

    def note_event(self, key: str, uid: str, note: EventNote) -> None:
        """Keep a FailedScheduling or Evicted Event for the status signal it enriches, unless
        the status reported that signal already (then the incident has its one record)."""
        stored = self.memos.get(key)
        memo = None if stored is None else _unpack_memo(stored)
        if memo is None or (uid and memo.uid and memo.uid != uid):
            memo = _PodMemo(uid=uid)  # the Event came first: the pod's status follows
        reported = memo.unschedulable if note.signal == UNSCHEDULABLE else memo.phase == "Failed"
        if reported or any(kept.signal == note.signal for kept in memo.events):
            return
        memo.events.append(note)
        replicaset = f"{key.partition('/')[0]}/{memo.replicaset}" if memo.replicaset else None
        self.memos.set(key, _pack_memo(memo), replicaset=replicaset, failing=memo.failing)

    def workload(
        self,
        namespace: str,
        owner_kind: str | None,
        owner_name: str | None,
        ctx: Context,
        *,
        counted: bool = True,
    ) -> dict[str, Any] | None:
        """The workload scope of a signal of a pod (or of its owner) with this controller.
        `counted`: the pod is among the failing ones of its ReplicaSet's counts already
        (a pod failing only by its Events is not, and is added)."""
        if owner_kind is None or owner_name is None:
            return None
        if owner_kind == "ReplicaSet":
            deployment = ctx.lookups.deployment_of_replicaset(namespace, owner_name)
            if deployment is None:
                return {"kind": "ReplicaSet", "name": owner_name}
            current = ctx.lookups.current_revision(namespace, deployment)
            affected, total = self.memos.counts(f"{namespace}/{owner_name}")
            return {
                "kind": "Deployment",
                "name": deployment,
                "replicaset": owner_name,
                # The number is known when the pod runs the current revision.
                "revision": current.number
                if current and current.replicaset == owner_name
                else None,
                "current_revision": current.number if current else None,
                "affected_pods": affected if counted else min(affected + 1, max(total, 1)),
                "total_pods": total,
            }
        if owner_kind == "Job":
            cronjob = ctx.lookups.cronjob_of_job(namespace, owner_name)
            if cronjob is not None:
                return {"kind": "CronJob", "name": cronjob, "job": owner_name}
        return {"kind": owner_kind, "name": owner_name}

    # -- internals ----------------------------------------------------------------------

    def _workload(self, pod: Pod, ctx: Context) -> dict[str, Any] | None:
        owner = pod.metadata.controller()
        if owner is None:
            return None
        return self.workload(pod.metadata.namespace or "", owner.kind, owner.name, ctx)

    def _record(
        self, pod: Pod, signal: _Signal, workload: dict[str, Any] | None, now: str
    ) -> Record:
        meta = pod.metadata
        reason = f"Init:{signal.reason}" if signal.init else signal.reason
        if signal.container is not None:
            key = f"{meta.key}/{signal.container}/{reason}/{signal.restart_count or 0}"
        else:
            # Pod-level signals can recur; the transition time keeps their keys apart.
            key = f"{meta.key}/-/{reason}/{signal.occurred_at or now}"
        note = signal.event
        data = {
            "reason": reason,
            "message": redact.text(signal.message or (note.message if note else "")),
            "occurred_at": signal.occurred_at or now,
            "pod": meta.name,
            "pod_uid": meta.uid or None,
            "node": pod.spec.node_name,
            "details": {
                "container": signal.container,
                "init_container": signal.init,
                "image": signal.image,
                "exit_code": signal.exit_code,
                "signal": signal.signal,
                "restart_count": signal.restart_count,
                "phase": pod.status.phase,
                "condition": signal.condition,
                "source": "status",
                "event_reason": note.event_reason if note else None,
                "count": note.count if note else None,
            },
            "workload": workload,
        }
        return event(KIND, key, meta, data)


# -- the transitions (pure: previous memo + pod -> new memo + signals) ------------------


def _observe(pod: Pod, previous: _PodMemo | None, now: str) -> tuple[_PodMemo, list[_Signal]]:
    status = pod.status
    memo = _fresh_memo(pod)
    before = previous or _NO_MEMO
    found = _container_signals(status, previous, memo)
    terminated_error, container_error = _container_errors(status)
    scheduled, ready = _conditions(status)

    failed = _phase_signal(pod, before, terminated_error=terminated_error)
    if failed is not None:
        found.append(failed)
    unschedulable = _unschedulable_signal(scheduled, status.phase, before, memo)
    if unschedulable is not None:
        found.append(unschedulable)
    # A crash or a start failure already says why the pod is not ready.
    quiet = container_error or bool(found)
    not_ready = _not_ready_signal(pod, ready, before, memo, now, quiet=quiet)
    if not_ready is not None:
        found.append(not_ready)
    memo.failing = _failing(pod, memo, container_error=container_error)
    return memo, found


def _conditions(status: PodStatus) -> tuple[Condition | None, Condition | None]:
    """The PodScheduled and Ready conditions (the last of each, as a dict by type would
    have them): a loop, not a dict per pod, since only a failed pod needs the others."""
    scheduled = ready = None
    for condition in status.conditions:
        if condition.type == "PodScheduled":
            scheduled = condition
        elif condition.type == "Ready":
            ready = condition
    return scheduled, ready


def _failing(pod: Pod, memo: _PodMemo, *, container_error: bool) -> bool:
    """Whether the pod counts among its ReplicaSet's failing ones: in error and not being
    deleted (its containers are then killed on purpose)."""
    if pod.metadata.deletion_timestamp is not None:
        return False
    return (
        container_error
        or memo.unschedulable
        or memo.not_ready
        or pod.status.phase in ("Failed", "Unknown")
    )


def _container_errors(status: PodStatus) -> tuple[bool, bool]:
    """Whether a container terminated in error, and whether one is in error at all (that,
    or waiting in an error state)."""
    terminated_error = waiting_error = False
    # A plain loop: nearly every pod is healthy, and each of a list's is asked.
    for group in (status.init_container_statuses, status.container_statuses):
        for cs in group:
            terminated = cs.state.terminated
            if terminated is not None and is_error_termination(terminated):
                terminated_error = True
            elif cs.state.waiting is not None and _waiting_error(cs) is not None:
                waiting_error = True
    return terminated_error, terminated_error or waiting_error


def _fresh_memo(pod: Pod) -> _PodMemo:
    """The pod's memo before anything is observed of its containers and conditions."""
    owner = pod.metadata.controller()
    owner_kind, owner_name = (None, None) if owner is None else (owner.kind, owner.name)
    return _PodMemo(
        uid=pod.metadata.uid,
        phase=pod.status.phase,
        replicaset=owner_name if owner_kind == "ReplicaSet" else None,
        owner_kind=owner_kind,
        owner_name=owner_name,
        node=pod.spec.node_name,
    )


def _container_signals(
    status: PodStatus, previous: _PodMemo | None, memo: _PodMemo
) -> list[_Signal]:
    """Every container's signals, its memo kept in `memo`."""
    # A failed pod with a pod-level reason (Evicted, DeadlineExceeded): that reason is the
    # error, the containers it killed are not separate ones.
    pod_reason_explains = status.phase == "Failed" and bool(status.reason)
    found: list[_Signal] = []
    for init, group in ((True, status.init_container_statuses), (False, status.container_statuses)):
        for cs in group:
            before = previous.containers.get(cs.name) if previous is not None else None
            quiet = _quiet_memo(cs, before)
            memo.containers[cs.name] = (
                quiet
                if quiet is not None
                else _container(cs, before, init, pod_reason_explains, found)
            )
    return found


def _unschedulable_signal(
    scheduled: Condition | None, phase: str | None, before: _PodMemo, memo: _PodMemo
) -> _Signal | None:
    """A pending pod no node can take, the first time it is seen so (noted in `memo`)."""
    if (
        scheduled is None
        or phase != "Pending"
        or scheduled.status != "False"
        or scheduled.reason != "Unschedulable"
    ):
        return None
    memo.unschedulable = True
    if before.unschedulable:
        return None
    return _Signal(
        reason=UNSCHEDULABLE,
        message=scheduled.message or "The pod cannot be scheduled on any node",
        occurred_at=scheduled.last_transition_time,
        condition="PodScheduled",
    )


def _not_ready_signal(
    pod: Pod,
    ready: Condition | None,
    before: _PodMemo,
    memo: _PodMemo,
    now: str,
    *,
    quiet: bool,
) -> _Signal | None:
    """A running pod whose containers are not ready, once that is a failure (noted in
    `memo`); none while `quiet` (something else already says why)."""
    memo.was_ready = before.was_ready or (ready is not None and ready.status == "True")
    if ready is None or not _says_containers_not_ready(pod.status.phase, ready):
        return None
    # One that was ready has failed its probe.
    memo.not_ready = before.was_ready or _readiness_grace_over(ready, now)
    if not memo.not_ready or before.not_ready or quiet:
        return None
    return _containers_not_ready_signal(pod, ready)


def _says_containers_not_ready(phase: str | None, ready: Condition) -> bool:
    """Whether the Ready condition is False because a running pod's containers are not."""
    return phase == "Running" and ready.status == "False" and ready.reason == "ContainersNotReady"


def _readiness_grace_over(ready: Condition, now: str) -> bool:
    """A pod that was never ready may just be starting: only a grace period makes that a
    failure."""
    not_ready_for = seconds_between(ready.last_transition_time, now)
    return not_ready_for is not None and not_ready_for >= READINESS_GRACE_SECONDS


def _container(
    cs: ContainerStatus,
    before: _ContainerMemo | None,
    init: bool,
    pod_reason_explains: bool,
    found: list[_Signal],
) -> _ContainerMemo:
    """One container's new memo; its signals go to `found`: at most one termination (the
    current one, else the end of the run before or a bare restart), one waiting."""
    first_sight = before is None
    before = before or _ContainerMemo(restarts=cs.restart_count)
    memo = _ContainerMemo(restarts=cs.restart_count, crash_loop=before.crash_loop)
    # Waiting reasons are remembered until the container runs or stops again.
    if cs.state.waiting is not None:
        memo.waiting = list(before.waiting)
    current = _current_termination(cs, before, memo, init, pod_reason_explains)
    if current is not None:
        found.append(current)
    previous = _previous_run_end(
        cs, before, memo, init, first_sight=first_sight, reported=current is not None
    )
    if previous is not None:
        found.append(previous)
    waiting = _waiting_news(cs, before, memo, init)
    if waiting is not None:
        found.append(waiting)
    return memo


def _quiet_memo(cs: ContainerStatus, before: _ContainerMemo | None) -> _ContainerMemo | None:
    """The new memo of a container neither terminated (now or in its last state) nor
    waiting, that has not restarted since its memo: none of its signals can fire, and its
    memo keeps only its restarts (most containers, most times). None for any other, which
    `_container` works out in full."""
    if (
        cs.state.terminated is not None
        or cs.state.waiting is not None
        or cs.last_state.terminated is not None
        or (before is not None and cs.restart_count > before.restarts)
    ):
        return None
    return _ContainerMemo(
        restarts=cs.restart_count, crash_loop=before is not None and before.crash_loop
    )


def _current_termination(
    cs: ContainerStatus,
    before: _ContainerMemo,
    memo: _ContainerMemo,
    init: bool,
    pod_reason_explains: bool,
) -> _Signal | None:
    """The container's current state, if it is an error termination not handled before
    (noted in `memo`); none when the pod's own failure reason explains it."""
    current = cs.state.terminated
    if current is None:
        return None
    current_id = _termination_id(current)
    if current_id in before.terminations:
        memo.terminations.append(current_id)
        return None
    if not is_error_termination(current):
        return None  # a clean exit stays unhandled: the restart that may follow reports it
    memo.terminations.append(current_id)
    return None if pod_reason_explains else _termination_signal(cs, current, init)


def _previous_run_end(
    cs: ContainerStatus,
    before: _ContainerMemo,
    memo: _ContainerMemo,
    init: bool,
    *,
    first_sight: bool,
    reported: bool,
) -> _Signal | None:
    """How the run before the current one ended (its last state), if that is news (noted in
    `memo`): a restart, or an error. A restart without a last state still is one. Nothing
    once the current termination was `reported`: it is the newer news."""
    last = cs.last_state.terminated
    restarted = cs.restart_count > before.restarts
    if last is None:
        return _restart_signal(cs, init) if restarted and not reported else None
    last_id = _termination_id(last)
    # History on first sight, handled before, or older than the termination just seen.
    if first_sight or last_id in before.terminations or reported:
        memo.terminations.append(last_id)
        return None
    if not (restarted or is_error_termination(last)):
        return None
    memo.terminations.append(last_id)
    return _termination_signal(cs, last, init)


def _waiting_news(
    cs: ContainerStatus, before: _ContainerMemo, memo: _ContainerMemo, init: bool
) -> _Signal | None:
    """A waiting error not reported in this run of the container (noted in `memo`); a
    crash loop once per loop."""
    waiting = _waiting_error(cs)
    if waiting is None:
        return None
    if waiting == CRASH_LOOP:
        memo.crash_loop = True
        return _waiting_signal(cs, waiting, init) if _new_crash_loop(cs, before) else None
    if waiting in memo.waiting:
        return None
    memo.waiting.append(waiting)
    return _waiting_signal(cs, waiting, init)


def _new_crash_loop(cs: ContainerStatus, before: _ContainerMemo) -> bool:
    """A crash loop is new unless the container was in one already and the run that just
    ended was shorter than the kubelet's back-off reset."""
    if not before.crash_loop:
        return True
    last = cs.last_state.terminated
    ran = seconds_between(last.started_at, last.finished_at) if last else None
    return ran is not None and ran >= BACKOFF_RESET_SECONDS


def _enrich(found: list[_Signal], notes: list[EventNote]) -> list[EventNote]:
    """Give the status signals the Events kept for them; the notes still waiting."""
    waiting = []
    for note in notes:
        signal = next((s for s in found if s.container is None and s.reason == note.signal), None)
        if signal is None:
            waiting.append(note)
            continue
        signal.event = note
        signal.occurred_at = signal.occurred_at or note.occurred_at
    return waiting


def _waiting_error(cs: ContainerStatus) -> str | None:
    waiting = cs.state.waiting
    if waiting is None or not waiting.reason or waiting.reason in _BENIGN_WAITING_REASONS:
        return None
    reason = waiting.reason
    # Reasons newer than this list still look like errors by name.
    if reason in ERROR_WAITING_REASONS or reason.endswith(("Error", "BackOff")):
        return reason
    return None


def _termination_id(term: Terminated) -> str:
    return term.container_id or f"{term.started_at}|{term.finished_at}|{term.exit_code}"


def _containers_not_ready_signal(pod: Pod, ready: Condition) -> _Signal:
    not_ready = [cs.name for cs in pod.status.container_statuses if not cs.ready]
    return _Signal(
        reason="ContainersNotReady",
        message=ready.message or f"Containers not ready: {', '.join(not_ready)}",
        occurred_at=ready.last_transition_time,
        condition="Ready",
    )


def _termination_signal(cs: ContainerStatus, term: Terminated, init: bool) -> _Signal:
    reason = termination_reason(term)
    sig = termination_signal(term)
    how = f"exit code {term.exit_code}"
    if sig is not None:
        how += f", signal {_signal_name(sig)}"
    message = f'Container "{cs.name}" terminated with {how} ({reason})'
    if cs.restart_count:
        message += f"; restart count {cs.restart_count}"
    return _Signal(
        reason=reason,
        message=message,
        occurred_at=term.finished_at,
        container=cs.name,
        init=init,
        image=cs.image,
        exit_code=term.exit_code,
        signal=sig,
        restart_count=cs.restart_count,
    )


def _restart_signal(cs: ContainerStatus, init: bool) -> _Signal:
    return _Signal(
        reason="Restarted",
        message=f'Container "{cs.name}" restarted (restart count {cs.restart_count})',
        occurred_at=cs.state.running.started_at if cs.state.running else None,
        container=cs.name,
        init=init,
        image=cs.image,
        restart_count=cs.restart_count,
    )


def _waiting_signal(cs: ContainerStatus, reason: str, init: bool) -> _Signal:
    waiting = cs.state.waiting
    detail = waiting.message if waiting is not None and waiting.message else None
    message = f'Container "{cs.name}" is waiting: {reason}'
    if detail:
        message += f": {detail}"
    last = cs.last_state.terminated
    # A crash loop is about the last crash: its exit code and time say what happened.
    crash = last if reason == CRASH_LOOP else None
    return _Signal(
        reason=reason,
        message=message,
        occurred_at=crash.finished_at if crash else None,
        container=cs.name,
        init=init,
        image=cs.image,
        exit_code=crash.exit_code if crash else None,
        signal=termination_signal(crash) if crash else None,
        restart_count=cs.restart_count,
    )


def _phase_signal(pod: Pod, before: _PodMemo, *, terminated_error: bool) -> _Signal | None:
    """The pod's turn to phase Failed or Unknown; none when a failed container already is
    the failure (a Failed pod without a pod-level reason)."""
    status = pod.status
    if status.phase not in ("Failed", "Unknown") or before.phase == status.phase:
        return None
    if status.phase == "Failed" and not status.reason and terminated_error:
        return None
    phase = status.phase or "Unknown"
    message = status.message or f"The pod's phase is {phase}"
    conditions = {c.type: c for c in status.conditions}  # the last of each type
    return _Signal(
        reason=status.reason or phase,
        message=message,
        occurred_at=_phase_changed_at(status, conditions),
    )


def _phase_changed_at(status: PodStatus, conditions: Mapping[str, Condition]) -> str | None:
    """When the pod came to its phase, as near as the status tells: its latest condition
    transition or container termination."""
    return _latest(
        [c.last_transition_time for c in conditions.values()]
        + [
            cs.state.terminated.finished_at
            for cs in status.container_statuses
            if cs.state.terminated is not None
        ]
    )


def _latest(times: Iterable[str | None]) -> str | None:
    """The latest of some Kubernetes timestamps (all RFC 3339 UTC, so they sort as text)."""
    present = [t for t in times if t]
    return max(present) if present else None


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return str(number)
