"""Pod documents for the pod-error normalizer's tests: container states and statuses,
conditions, and observing a pod through the normalizer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from collector.normalize.base import Context, HpaRef, RevisionRef
from collector.normalize.pod_error import Pod, PodErrorNormalizer
from shipper.records import Record

SECRET_ENV = "pg-pass-1b9e77c0"
SECRET_ARG = "api-key-5c3d1f00"
APP_MESSAGE = "panic: cannot connect to postgres://admin:hunter2-db@db:5432"


class Lookups:
    def __init__(self) -> None:
        self.deployments = {("shop", "web-7d4b9c6f5"): "web"}
        self.revisions = {("shop", "web"): RevisionRef("web-7d4b9c6f5", 4)}
        self.cronjobs = {("shop", "backup-28930140"): "backup"}

    def deployment_of_replicaset(self, namespace: str, replicaset: str) -> str | None:
        return self.deployments.get((namespace, replicaset))

    def current_revision(self, namespace: str, deployment: str) -> RevisionRef | None:
        return self.revisions.get((namespace, deployment))

    def cronjob_of_job(self, namespace: str, job: str) -> str | None:
        return self.cronjobs.get((namespace, job))

    def services_selecting(self, namespace: str, labels: Mapping[str, str]) -> list[str]:
        return []

    def hpa_for(self, namespace: str, deployment: str) -> HpaRef | None:
        return None


CTX = Context(lookups=Lookups())


# -- objects as the API returns them ------------------------------------------------------


def terminated(
    exit_code: int,
    reason: str,
    *,
    started: str = "2026-12-02T11:50:00Z",
    finished: str = "2026-12-02T11:55:00Z",
    cid: str = "containerd://4f1e",
) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason,
            "message": APP_MESSAGE,
            "startedAt": started,
            "finishedAt": finished,
            "containerID": cid,
        }
    }


def running(started: str = "2026-12-02T11:56:00Z") -> dict[str, Any]:
    return {"running": {"startedAt": started}}


def waiting(reason: str, message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message is not None:
        state["message"] = message
    return {"waiting": state}


def container(
    state: dict[str, Any],
    *,
    name: str = "app",
    restarts: int = 0,
    ready: bool = False,
    last: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "state": state,
        "lastState": last or {},
        "ready": ready,
        "restartCount": restarts,
        "image": f"ghcr.io/acme/{name}:1.4.2",
        "imageID": f"ghcr.io/acme/{name}@sha256:9f86d081884c7d659a2feaa0c55ad015",
        "containerID": "containerd://8a7b",
        "started": "running" in state,
    }


def condition(kind: str, status: str, reason: str | None = None, **extra: str) -> dict[str, Any]:
    cond = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": extra.pop("at", "2026-12-02T11:40:00Z"),
    }
    if reason is not None:
        cond["reason"] = reason
    cond.update(extra)
    return cond


def ready_conditions(ready: bool, at: str = "2026-12-02T11:57:00Z") -> list[dict[str, Any]]:
    status = "True" if ready else "False"
    reason = None if ready else "ContainersNotReady"
    extra = {} if ready else {"message": "containers with unready status: [app]"}
    return [
        condition("PodReadyToStartContainers", "True"),
        condition("Initialized", "True"),
        condition("Ready", status, reason, at=at, **extra),
        condition("ContainersReady", status, reason, at=at, **extra),
        condition("PodScheduled", "True"),
    ]


def pod(
    *,
    name: str = "web-7d4b9c6f5-x2x9k",
    uid: str = "b6f0c2a4-1e0d-4b7e-9a39-4f3c2e1d0a11",
    owner: tuple[str, str] | None = ("ReplicaSet", "web-7d4b9c6f5"),
    phase: str = "Running",
    statuses: list[dict[str, Any]] | None = None,
    init_statuses: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    reason: str | None = None,
    message: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "generateName": name.rsplit("-", 1)[0] + "-",
        "namespace": "shop",
        "uid": uid,
        "resourceVersion": "981245",
        "creationTimestamp": "2026-12-02T11:30:00Z",
        "labels": {"app": "web", "pod-template-hash": "7d4b9c6f5"},
        "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-01T09:00:00Z"},
        "ownerReferences": [],
        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}],
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1" if owner[0] == "ReplicaSet" else "batch/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T12:00:00Z"
        metadata["deletionGracePeriodSeconds"] = 30
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions if conditions is not None else ready_conditions(True),
        "hostIP": "10.128.0.12",
        "podIP": "10.8.2.17",
        "startTime": "2026-12-02T11:30:00Z",
        "qosClass": "Burstable",
        "containerStatuses": statuses if statuses is not None else [],
    }
    if init_statuses is not None:
        status["initContainerStatuses"] = init_statuses
    if reason is not None:
        status["reason"] = reason
    if message is not None:
        status["message"] = message
    spec_container = {
        "name": "app",
        "image": "ghcr.io/acme/app:1.4.2",
        "command": ["/bin/server"],
        "args": ["--api-key", SECRET_ARG],
        "env": [
            {"name": "DB_PASSWORD", "value": SECRET_ENV},
            {"name": "DB_HOST", "valueFrom": {"configMapKeyRef": {"name": "db", "key": "host"}}},
        ],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [spec_container],
            "initContainers": [dict(spec_container, name="migrate")],
            "restartPolicy": "Always",
            "nodeName": "gke-prod-pool-1-8c2f-x7k2",
            "serviceAccountName": "web",
        },
        "status": status,
    }


def decode(doc: dict[str, Any]) -> Pod:
    return msgspec.json.decode(msgspec.json.encode(doc), type=Pod)


def observe(normalizer: PodErrorNormalizer, doc: dict[str, Any]) -> list[Record]:
    return normalizer.upserts(decode(doc), CTX)


def crash_looping(restarts: int = 5, finished: str = "2026-12-02T11:55:00Z") -> dict[str, Any]:
    return pod(
        statuses=[
            container(
                waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container=app"),
                restarts=restarts,
                last=terminated(1, "Error", finished=finished, cid=f"containerd://r{restarts}"),
            )
        ],
        conditions=ready_conditions(False),
    )


def healthy(restarts: int = 0, last: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return pod(statuses=[container(running(), restarts=restarts, ready=True, last=last)], **kwargs)


# -- first sight --------------------------------------------------------------------------


def unschedulable(message: str) -> dict[str, Any]:
    """A pod the scheduler cannot place: Pending, PodScheduled False (Unschedulable)."""
    return pod(
        phase="Pending",
        conditions=[
            condition(
                "PodScheduled", "False", "Unschedulable", message=message, at="2026-12-02T11:31:00Z"
            )
        ],
    )
