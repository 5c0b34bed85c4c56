"""Job executions of CronJobs: status, timing, and for failed runs what failed, with logs."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from collector.normalize.base import Context, LogRequest
from collector.normalize.job_execution import Job, JobExecutionNormalizer, JobPods
from collector.normalize.pod_error import Pod
from collector.relations import Relations

JOB_UID = "3d0f5a8e-2b7c-4f4e-8a51-6e0b9c1d2f30"
SECRET_ENV = "s3-secret-key-77aa01"


class FetchLogs:
    """Job logs as read already (`answer`, or None: not yet); records what was asked and
    which Jobs were forgotten."""

    def __init__(self, answer: list[str] | None) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str, str, int]] = []
        self.asked_by: set[tuple[str, str]] = set()
        self.forgotten: list[str] = []

    def lines(self, request: LogRequest) -> list[str] | None:
        self.calls.append((request.namespace, request.pod, request.container, request.lines))
        self.asked_by.add((request.job_uid, request.job_key))
        return self.answer

    def forget(self, job_uid: str) -> None:
        self.forgotten.append(job_uid)


LOG_LINES = [
    "2026-12-02T02:00:03Z starting backup of db shop",
    "2026-12-02T02:01:58Z ERROR pg_dump: connection refused",
]


def context(logs: FetchLogs, *, collect: bool = True) -> Context:
    return Context(lookups=Relations(), job_logs=logs, collect_job_logs=collect)


def cond(kind: str, reason: str | None = None, message: str | None = None, at: str = "") -> dict:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": at or "2026-12-02T02:03:30Z",
        "lastTransitionTime": at or "2026-12-02T02:03:30Z",
    }


def job(
    *,
    conditions: list[dict[str, Any]] | None = None,
    cronjob: str | None = "backup",
    **status: Any,
) -> Job:
    doc = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "backup-28930140",
            "namespace": "shop",
            "uid": JOB_UID,
            "resourceVersion": "77120",
            "generation": 1,
            "creationTimestamp": "2026-12-02T02:00:00Z",
            "labels": {
                "batch.kubernetes.io/controller-uid": JOB_UID,
                "batch.kubernetes.io/job-name": "backup-28930140",
            },
            "annotations": {
                "batch.kubernetes.io/cronjob-scheduled-timestamp": "2026-12-02T02:00:00Z"
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "CronJob",
                    "name": cronjob,
                    "uid": "a0e1b2c3-d4e5-4f60-8172-839405a6b7c8",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
            if cronjob
            else [],
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 2,
            "activeDeadlineSeconds": 600,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "backup",
                            "image": "ghcr.io/acme/backup:2.1.0",
                            "env": [{"name": "S3_SECRET_KEY", "value": SECRET_ENV}],
                        }
                    ],
                }
            },
        },
        "status": {
            "startTime": "2026-12-02T02:00:00Z",
            "conditions": conditions or [],
            "uncountedTerminatedPods": {},
            "ready": 0,
            "terminating": 0,
            **status,
        },
    }
    return msgspec.json.decode(msgspec.json.encode(doc), type=Job)


def job_pod(
    name: str,
    state: dict[str, Any],
    *,
    created: str = "2026-12-02T02:00:01Z",
    owner_kind: str = "Job",
) -> Pod:
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "labels": {"batch.kubernetes.io/job-name": "backup-28930140"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": owner_kind,
                    "name": "backup-28930140",
                    "uid": JOB_UID,
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "backup", "image": "ghcr.io/acme/backup:2.1.0"}]},
        "status": {
            "phase": "Failed" if "terminated" in state else "Running",
            "containerStatuses": [
                {
                    "name": "backup",
                    "state": state,
                    "lastState": {},
                    "ready": False,
                    "restartCount": 0,
                    "image": "ghcr.io/acme/backup:2.1.0",
                }
            ],
        },
    }
    return msgspec.json.decode(msgspec.json.encode(doc), type=Pod)


def exited(code: int, reason: str, finished: str) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": code,
            "reason": reason,
            "message": "pg_dump: password authentication failed",
            "startedAt": "2026-12-02T02:00:02Z",
            "finishedAt": finished,
            "containerID": f"containerd://{finished}",
        }
    }


BACKOFF_FAILED = [
    cond("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
    cond("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
]


def test_a_succeeded_run() -> None:
    logs = FetchLogs(LOG_LINES)
    done = job(
        conditions=[cond("SuccessCriteriaMet"), cond("Complete")],
        completionTime="2026-12-02T02:03:30Z",
        succeeded=1,
    )
    [record] = JobExecutionNormalizer(JobPods()).upserts(done, context(logs))
    assert (record.kind, record.op, record.key) == (
        "job_execution",
        "upsert",
        "shop/backup-28930140",
    )
    assert record.data == {
        "job": "backup-28930140",
        "job_uid": JOB_UID,
        "cronjob": "backup",
        "status": "succeeded",
        "started_at": "2026-12-02T02:00:00Z",
        "completed_at": "2026-12-02T02:03:30Z",
        "duration_seconds": 210.0,
        "active_pods": 0,
        "succeeded_pods": 1,
        "failed_pods": 0,
        "failure_reason": None,
        "failure_message": None,
        "pod": None,
        "container": None,
        "exit_code": None,
        "signal": None,
        "termination_reason": None,
        "logs": None,
    }
    assert logs.calls == []
    assert SECRET_ENV.encode() not in msgspec.json.encode(record)


def test_a_running_run() -> None:
    [record] = JobExecutionNormalizer(JobPods()).upserts(job(active=1), context(FetchLogs([])))
    assert record.data["status"] == "running"
    assert record.data["completed_at"] is None
    assert record.data["duration_seconds"] is None
    assert record.data["active_pods"] == 1


def test_a_failed_run_names_the_failing_pod_and_ships_the_log_read_for_it() -> None:
    pods = JobPods()
    pods.observe(job_pod("backup-28930140-aaaaa", exited(1, "Error", "2026-12-02T02:01:00Z")))
    pods.observe(
        job_pod(
            "backup-28930140-bbbbb",
            exited(3, "Error", "2026-12-02T02:03:10Z"),
            created="2026-12-02T02:01:20Z",
        )
    )
    logs = FetchLogs(LOG_LINES)
    normalizer = JobExecutionNormalizer(pods)
    failed = job(conditions=BACKOFF_FAILED, failed=2)
    [record] = normalizer.upserts(failed, context(logs))
    data = record.data
    assert data["status"] == "failed"
    assert data["completed_at"] == "2026-12-02T02:03:30Z"
    assert data["duration_seconds"] == 210.0
    assert data["failure_reason"] == "BackoffLimitExceeded"
    assert data["failure_message"] == "Job has reached the specified backoff limit"
    assert (data["pod"], data["container"]) == ("backup-28930140-bbbbb", "backup")
    assert (data["exit_code"], data["signal"], data["termination_reason"]) == (3, None, "Error")
    assert data["logs"] == LOG_LINES
    assert logs.calls == [("shop", "backup-28930140-bbbbb", "backup", 200)]
    # The container's own termination message is not part of the record.
    assert b"password authentication" not in msgspec.json.encode(record)

    assert logs.asked_by == {(JOB_UID, "shop/backup-28930140")}

    [gone] = normalizer.deletes(failed, context(logs))
    assert (gone.op, gone.key, gone.data) == ("delete", "shop/backup-28930140", {})
    assert logs.forgotten == [JOB_UID]


def test_a_failed_run_whose_log_is_not_read_yet_ships_at_once_without_it() -> None:
    pods = JobPods()
    pods.observe(job_pod("backup-28930140-aaaaa", exited(1, "Error", "2026-12-02T02:01:00Z")))
    logs = FetchLogs(None)
    [record] = JobExecutionNormalizer(pods).upserts(job(conditions=BACKOFF_FAILED), context(logs))
    assert (record.data["status"], record.data["exit_code"]) == ("failed", 1)
    assert record.data["logs"] is None
    assert logs.calls == [("shop", "backup-28930140-aaaaa", "backup", 200)]


def test_no_log_is_read_when_the_switch_is_off() -> None:
    pods = JobPods()
    pods.observe(job_pod("backup-28930140-aaaaa", exited(1, "Error", "2026-12-02T02:01:00Z")))
    logs = FetchLogs(LOG_LINES)
    [record] = JobExecutionNormalizer(pods).upserts(
        job(conditions=BACKOFF_FAILED, failed=1), context(logs, collect=False)
    )
    assert record.data["pod"] == "backup-28930140-aaaaa"
    assert record.data["logs"] is None
    assert logs.calls == []


def test_deadline_exceeded_points_at_the_pod_that_was_still_running() -> None:
    pods = JobPods()
    pods.observe(
        job_pod("backup-28930140-ccccc", {"running": {"startedAt": "2026-12-02T02:00:02Z"}})
    )
    logs = FetchLogs(LOG_LINES)
    deadline = [
        cond("Failed", "DeadlineExceeded", "Job was active longer than specified deadline"),
    ]
    [record] = JobExecutionNormalizer(pods).upserts(
        job(conditions=deadline, failed=1), context(logs)
    )
    data = record.data
    assert data["status"] == "failed"
    assert data["failure_reason"] == "DeadlineExceeded"
    assert data["failure_message"] == "Job was active longer than specified deadline"
    assert (data["pod"], data["container"], data["exit_code"]) == (
        "backup-28930140-ccccc",
        "backup",
        None,
    )
    assert logs.calls == [("shop", "backup-28930140-ccccc", "backup", 200)]


def test_a_failed_run_whose_pods_are_gone_has_no_pod_and_reads_no_log() -> None:
    pods = JobPods()
    pods.observe(job_pod("backup-28930140-ccccc", {"running": {}}))
    pods.forget("shop/backup-28930140-ccccc")
    logs = FetchLogs(LOG_LINES)
    deadline = [cond("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")]
    [record] = JobExecutionNormalizer(pods).upserts(job(conditions=deadline), context(logs))
    assert record.data["failure_reason"] == "DeadlineExceeded"
    assert record.data["pod"] is None
    assert record.data["logs"] is None
    assert logs.calls == []


def test_an_oomkilled_run() -> None:
    pods = JobPods()
    pods.observe(job_pod("backup-28930140-ddddd", exited(137, "OOMKilled", "2026-12-02T02:02:00Z")))
    [record] = JobExecutionNormalizer(pods).upserts(
        job(conditions=BACKOFF_FAILED, failed=1), context(FetchLogs(LOG_LINES))
    )
    data = record.data
    assert data["failure_reason"] == "BackoffLimitExceeded"
    assert data["termination_reason"] == "OOMKilled"
    assert (data["exit_code"], data["signal"]) == (137, 9)


@pytest.mark.parametrize("conditions", [[], BACKOFF_FAILED])
def test_a_job_without_a_cronjob_gives_nothing(conditions: list[dict[str, Any]]) -> None:
    logs = FetchLogs(LOG_LINES)
    normalizer = JobExecutionNormalizer(JobPods())
    plain = job(conditions=conditions, cronjob=None)
    assert normalizer.upserts(plain, context(logs)) == []
    assert normalizer.deletes(plain, context(logs)) == []
    assert logs.calls == []


def test_the_pod_index_keeps_only_pods_of_jobs() -> None:
    pods = JobPods()
    pods.observe(job_pod("backup-28930140-aaaaa", exited(1, "Error", "2026-12-02T02:01:00Z")))
    pods.observe(job_pod("web-1", {"running": {}}, owner_kind="ReplicaSet"))
    [kept] = pods.pods_of(JOB_UID)
    assert kept.name == "backup-28930140-aaaaa"
    assert kept.exits[0].exit_code == 1
    # Orphaned (owner reference removed): no longer a pod of the Job.
    orphan = job_pod("backup-28930140-aaaaa", {"running": {}})
    orphan = msgspec.structs.replace(
        orphan, metadata=msgspec.structs.replace(orphan.metadata, owner_references=[])
    )
    pods.observe(orphan)
    assert pods.pods_of(JOB_UID) == []
