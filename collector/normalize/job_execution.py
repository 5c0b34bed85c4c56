"""Job executions: one `job_execution` record per Job of a CronJob (other Jobs: none).

The platform derives a CronJob's latest status and execution counts from these records, and
shows a failed run with what failed: the Job's own failure condition (BackoffLimitExceeded,
DeadlineExceeded, ...), the pod and container most relevant to it (the latest one that
exited non-zero or was OOMKilled), its exit code, and the last 200 lines of that container's
log. A run failed when the Job says so (condition `Failed`, or `FailureTarget` while its pods
are still terminating); that happens when a container exited non-zero past the back-off
limit, was OOMKilled, or the Job hit its deadline.

A Job does not name its pods, so the collector feeds `JobPods` from its pod informer:
`observe(pod)` for every pod it applies and `forget(key)` when a pod is deleted or vanished.
The index keeps only pods owned by a Job, reduced to names and terminated container states.
Pods usually reach their final state before the Job does, so the failing pod is known when
the Job turns failed; if not, the record says so (nulls) until the Job's next update.

Logs are asked for only for failed runs and only when `Context.collect_job_logs` is on,
through `Context.job_logs`, which never blocks (`collector.job_logs` reads them on a worker
of its own): until the log has been read the record says `logs: null`, and once it has,
the collector builds the record again, now with the lines. A Job deleted meanwhile is
forgotten there. The lines are redacted as they are read (`log_lines`), before they are
kept or cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from collector import redact
from collector.model import Int64, ObjectMeta, delete, upsert
from collector.normalize.base import Context, LogRequest
from collector.normalize.pod_error import (
    Pod,
    is_error_termination,
    seconds_between,
    termination_reason,
    termination_signal,
)
from collector.sanitize import Condition
from shipper.records import Record

KIND = "job_execution"
LOG_LINES = 200
MAX_LOG_LINE_BYTES = 2048  # a record must fit a batch even when a log is one huge line


class JobStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    start_time: str | None = None
    completion_time: str | None = None
    active: Int64 = 0
    succeeded: Int64 = 0
    failed: Int64 = 0
    conditions: list[Condition] = msgspec.field(default_factory=list)


class Job(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    status: JobStatus = msgspec.field(default_factory=JobStatus)


@dataclass(frozen=True, slots=True)
class ContainerExit:
    """One terminated container of a Job's pod (current or previous run)."""

    container: str
    init: bool
    exit_code: int
    signal: int | None
    reason: str
    finished_at: str | None
    failed: bool


@dataclass(frozen=True, slots=True)
class JobPod:
    name: str
    created: str | None
    containers: tuple[str, ...]
    exits: tuple[ContainerExit, ...]


class JobPods:
    """The pods of Jobs, as far as a failed run needs them (the processor's alone: unlocked).

    The collector calls `observe(pod)` from its pod informer for every pod it applies (pods
    not owned by a Job are ignored, or dropped if they were owned before) and
    `forget("namespace/name")` for every pod deleted or found vanished.
    """

    def __init__(self) -> None:
        self._by_job: dict[str, dict[str, JobPod]] = {}  # job uid -> pod key -> pod
        self._job_of: dict[str, str] = {}  # pod key -> job uid

    def observe(self, pod: Pod) -> None:
        meta = pod.metadata
        owner = meta.controller()
        if owner is None or owner.kind != "Job" or not owner.uid:
            self.forget(meta.key)
            return
        exits = []
        for init, group in (
            (True, pod.status.init_container_statuses),
            (False, pod.status.container_statuses),
        ):
            for cs in group:
                for term in (cs.state.terminated, cs.last_state.terminated):
                    if term is not None:
                        exits.append(
                            ContainerExit(
                                container=cs.name,
                                init=init,
                                exit_code=term.exit_code,
                                signal=termination_signal(term),
                                reason=termination_reason(term),
                                finished_at=term.finished_at,
                                failed=is_error_termination(term),
                            )
                        )
        entry = JobPod(
            name=meta.name,
            created=meta.creation_timestamp,
            containers=tuple(cs.name for cs in pod.status.container_statuses),
            exits=tuple(exits),
        )
        self._drop(meta.key)
        self._by_job.setdefault(owner.uid, {})[meta.key] = entry
        self._job_of[meta.key] = owner.uid

    def forget(self, key: str) -> None:
        self._drop(key)

    def pods_of(self, job_uid: str) -> list[JobPod]:
        return list(self._by_job.get(job_uid, {}).values())

    def _drop(self, key: str) -> None:
        job_uid = self._job_of.pop(key, None)
        if job_uid is None:
            return
        pods = self._by_job.get(job_uid)
        if pods is not None:
            pods.pop(key, None)
            if not pods:
                del self._by_job[job_uid]


@dataclass(frozen=True, slots=True)
class _Culprit:
    pod: str
    container: str | None
    exit: ContainerExit | None


class JobExecutionNormalizer:
    """Jobs owned by a CronJob -> `job_execution` upserts and deletes."""

    kind = KIND
    source = "Job"
    struct = Job

    def __init__(self, pods: JobPods) -> None:
        self._pods = pods

    def upserts(self, obj: Job, ctx: Context) -> list[Record]:
        cronjob = _cronjob_of(obj.metadata)
        if cronjob is None:
            return []
        meta, status = obj.metadata, obj.status
        failed = _failure(status)
        complete = _completion(status)
        completed_at = _completed_at(status, failed, complete)
        data: dict[str, Any] = {
            "job": meta.name,
            "job_uid": meta.uid or None,
            "cronjob": cronjob,
            "status": "failed" if failed else "succeeded" if complete else "running",
            "started_at": status.start_time,
            "completed_at": completed_at,
            "duration_seconds": seconds_between(status.start_time, completed_at),
            "active_pods": status.active,
            "succeeded_pods": status.succeeded,
            "failed_pods": status.failed,
            # What failed: filled in by `_describe_failure` for a failed run.
            "failure_reason": None,
            "failure_message": None,
            "pod": None,
            "container": None,
            "exit_code": None,
            "signal": None,
            "termination_reason": None,
            "logs": None,
        }
        if failed is not None:
            self._describe_failure(data, obj, failed, ctx)
        return [upsert(KIND, meta, data)]

    def deletes(self, obj: Job, ctx: Context) -> list[Record]:
        ctx.job_logs.forget(obj.metadata.uid)
        if _cronjob_of(obj.metadata) is None:
            return []
        return [delete(KIND, obj.metadata)]

    def _describe_failure(
        self, data: dict[str, Any], job: Job, failed: Condition, ctx: Context
    ) -> None:
        """Fill in what failed in a failed run: the Job's own reason and message, and the
        container most relevant to it (`_culprit`) with its exit and log."""
        culprit = _culprit(self._pods.pods_of(job.metadata.uid))
        exit_ = culprit.exit if culprit else None
        data["failure_reason"] = failed.reason or (exit_.reason if exit_ else "Failed")
        data["failure_message"] = redact.text(failed.message) if failed.message else None
        if culprit is not None:
            data["pod"] = culprit.pod
            data["container"] = culprit.container
        if exit_ is not None:
            data["exit_code"] = exit_.exit_code
            data["signal"] = exit_.signal
            data["termination_reason"] = exit_.reason
        data["logs"] = self._logs_of(job, culprit, ctx)

    def _logs_of(self, job: Job, culprit: _Culprit | None, ctx: Context) -> list[str] | None:
        if not ctx.collect_job_logs or culprit is None or culprit.container is None:
            return None
        meta = job.metadata
        request = LogRequest(
            job_uid=meta.uid,
            job_key=meta.key,
            namespace=meta.namespace or "",
            pod=culprit.pod,
            container=culprit.container,
            lines=LOG_LINES,
        )
        return ctx.job_logs.lines(request)


def log_lines(log: bytes | bytearray, count: int) -> list[str]:
    """A log's last `count` lines as a record carries them: the text redacted as a whole
    (a PEM block spans lines), then split, then each line cut to `MAX_LOG_LINE_BYTES`."""
    text = redact.redact(log.decode("utf-8", errors="replace"))
    return [redact.truncate(line, MAX_LOG_LINE_BYTES) for line in text.splitlines()[-count:]]


def _cronjob_of(meta: ObjectMeta) -> str | None:
    for owner in meta.owner_references:
        if owner.kind == "CronJob":
            return owner.name
    return None


def _failure(status: JobStatus) -> Condition | None:
    """The condition saying the run failed: `Failed`, or `FailureTarget` while its pods
    are still terminating."""
    return _condition(status, "Failed") or _condition(status, "FailureTarget")


def _completion(status: JobStatus) -> Condition | None:
    """The condition saying the run succeeded: `Complete`, or `SuccessCriteriaMet`, which
    says so before it while the pods are still terminating."""
    return _condition(status, "Complete") or _condition(status, "SuccessCriteriaMet")


def _completed_at(
    status: JobStatus, failed: Condition | None, complete: Condition | None
) -> str | None:
    """When the run ended: when it failed, else when it completed; None while it runs."""
    if failed is not None:
        return failed.last_transition_time
    if complete is not None:
        return status.completion_time or complete.last_transition_time
    return None


def _condition(status: JobStatus, kind: str) -> Condition | None:
    for cond in status.conditions:
        if cond.type == kind and cond.status == "True":
            return cond
    return None


def _culprit(pods: list[JobPod]) -> _Culprit | None:
    """The latest container that failed; else the newest pod (e.g. killed at the deadline)."""
    failures = [(e.finished_at or "", p, e) for p in pods for e in p.exits if e.failed]
    if failures:
        _, pod, exit_ = max(failures, key=lambda f: (f[0], f[2].reason == "OOMKilled"))
        return _Culprit(pod.name, exit_.container, exit_)
    if not pods:
        return None
    newest = max(pods, key=lambda p: (p.created or "", p.name))
    return _Culprit(newest.name, newest.containers[0] if newest.containers else None, None)
