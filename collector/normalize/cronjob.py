"""CronJobs -> `cronjob` records (key `namespace/name`).

Schedule, time zone, concurrency policy, suspend flag, last schedule and last success
times, how many Jobs are active, and the job template's containers as the sanitizer
allows them. Executions are the Job normalizer's records; the platform derives the
latest execution status and counts from them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from collector import sanitize
from collector.model import ObjectMeta
from collector.normalize.base import Context, PerObject
from collector.sanitize import PodTemplate, Present


class JobSpec(msgspec.Struct, frozen=True, gc=False):
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class JobTemplate(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: JobSpec = msgspec.field(default_factory=JobSpec)


class CronJobSpec(msgspec.Struct, rename="camel", frozen=True, gc=False):
    schedule: str = ""
    time_zone: str | None = None
    concurrency_policy: str = "Allow"
    suspend: bool | None = None
    job_template: JobTemplate = msgspec.field(default_factory=JobTemplate)


class CronJobStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    active: list[Present] | None = None  # only counted
    last_schedule_time: str | None = None
    last_successful_time: str | None = None


class CronJob(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CronJobSpec = msgspec.field(default_factory=CronJobSpec)
    status: CronJobStatus = msgspec.field(default_factory=CronJobStatus)


def cronjob_data(obj: CronJob, ctx: Context) -> dict[str, Any]:
    meta, spec, status = obj.metadata, obj.spec, obj.status
    pod = spec.job_template.spec.template.spec
    return {
        "schedule": spec.schedule,
        "time_zone": spec.time_zone,
        "concurrency_policy": spec.concurrency_policy,
        "suspend": bool(spec.suspend),
        "last_schedule_time": status.last_schedule_time,
        "last_successful_time": status.last_successful_time,
        "active_jobs": len(status.active or []),
        **sanitize.pod_containers(pod),
        "labels": sanitize.labels(meta.labels),
        "annotations": sanitize.safe_annotations(meta.annotations),
        "created_at": meta.creation_timestamp,
    }


NORMALIZER = PerObject(kind="cronjob", source="CronJob", struct=CronJob, data=cronjob_data)
