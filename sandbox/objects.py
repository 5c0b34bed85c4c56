"""Kubernetes objects as an API server holds them, for the demo, the synthetic cluster and
the tests: one builder per kind, keyword-only arguments, plain dicts.

Each builder returns what a client would create (no uid, resourceVersion or timestamps:
the fake API server adds those) with the fields the agent reads filled in the way real
controllers fill them. Builders that relate objects take the created owner (with its
`uid`) and derive names, labels and owner references from it, so a test reads like the
cluster it sets up. Helm's release storage (JSON, gzip, base64, then the API's base64 of
the Secret value) is written here once: `helm_storage`, `api_encoded`, `helm_release_secret`.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

Obj = dict[str, Any]

RBAC_GROUP = "rbac.authorization.k8s.io"
HELM_RELEASE_TYPE = "helm.sh/release.v1"
TEMPLATE_HASH = "5d8f7c9b6"
"""The pod-template-hash of `replicaset` unless given."""


# -- relations ---------------------------------------------------------------------------------


def controller_reference(
    *, api_version: str, kind: str, name: str, uid: str, block_deletion: bool = False
) -> list[Obj]:
    """`ownerReferences` naming a controller; its controllers set `blockOwnerDeletion`."""
    reference: Obj = {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
    }
    if block_deletion:
        reference["blockOwnerDeletion"] = True
    return [reference]


def controlled_by(owner: Obj, *, block_deletion: bool = False) -> list[Obj]:
    """`ownerReferences` naming `owner` (as created, with its uid) as the controller."""
    meta = owner["metadata"]
    return controller_reference(
        api_version=owner["apiVersion"],
        kind=owner["kind"],
        name=meta["name"],
        uid=meta["uid"],
        block_deletion=block_deletion,
    )


def with_uid(obj: Obj, uid: str) -> Obj:
    """`obj` as if created with `uid`, to relate objects without an API server."""
    return {**obj, "metadata": {**obj["metadata"], "uid": uid}}


def _timestamp(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


# -- cluster-scoped ----------------------------------------------------------------------------


def namespace(*, name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def node(*, name: str, instance_type: str = "m6i.xlarge") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": "eu-west-1a",
                "node.kubernetes.io/instance-type": instance_type,
            },
        },
        "spec": {"providerID": f"aws:///eu-west-1a/i-0{name[-1]}"},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.30.2", "architecture": "amd64"},
        },
    }


# -- workloads ---------------------------------------------------------------------------------


def deployment(
    *,
    name: str,
    namespace: str,
    replicas: int | None = 2,
    ready: int | None = None,
    image: str | None = None,
    env: Mapping[str, str] | None = None,
    revision: int = 1,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A Deployment of one container `app`, rolled out at `revision`, `ready` of its
    replicas ready (all unless given). `replicas=None` leaves the field out, as a manifest
    may; the Deployment then has no status yet."""
    container: Obj = {"name": "app", "image": image or f"registry.example/{name}:1.4.2"}
    if env:
        container["env"] = [{"name": key, "value": value} for key, value in env.items()]
    spec: Obj = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "strategy": {"type": "RollingUpdate"},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
    }
    obj: Obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": name},
            "annotations": {
                "deployment.kubernetes.io/revision": str(revision),
                **(annotations or {}),
            },
        },
        "spec": spec,
    }
    if replicas is None:
        del spec["replicas"]
        return obj
    ready = replicas if ready is None else ready
    obj["status"] = {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready}
    return obj


def replicaset(*, owner: Obj, template_hash: str = TEMPLATE_HASH) -> Obj:
    """The ReplicaSet of Deployment `owner`'s current revision."""
    meta, spec = owner["metadata"], owner["spec"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{template_hash}",
            "namespace": meta["namespace"],
            "labels": {**spec["selector"]["matchLabels"], "pod-template-hash": template_hash},
            "annotations": {
                "deployment.kubernetes.io/revision": meta["annotations"][
                    "deployment.kubernetes.io/revision"
                ]
            },
            "ownerReferences": controlled_by(owner),
        },
        "spec": {
            "replicas": spec.get("replicas", 1),
            "selector": spec["selector"],
            "template": spec["template"],
        },
        "status": {"replicas": spec.get("replicas", 1)},
    }


def pod(
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str] | None = None,
    owner: Obj | None = None,
    container: str = "app",
    image: str = "app:1",
    node: str | None = None,
    status: Obj | None = None,
) -> Obj:
    """A one-container Pod; with `owner`, controlled by it; with `node`, scheduled there."""
    metadata: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if owner is not None:
        metadata["ownerReferences"] = controlled_by(owner)
    spec: Obj = {"containers": [{"name": container, "image": image}]}
    if node is not None:
        spec = {"nodeName": node, **spec}
    obj: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def crash_looping_pod(*, owner: Obj) -> Obj:
    """A pod of ReplicaSet `owner` whose container keeps exiting 1 (CrashLoopBackOff)."""
    return _web_pod(
        owner,
        "x2x9k",
        phase="Running",
        container_status={
            "restartCount": 4,
            "containerID": "containerd://abc123",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m0s"}},
            "lastState": {
                "terminated": {
                    "exitCode": 1,
                    "reason": "Error",
                    "startedAt": "2026-12-02T10:00:00Z",
                    "finishedAt": "2026-12-02T10:00:05Z",
                    "containerID": "containerd://abc123",
                }
            },
        },
    )


def creating_pod(*, owner: Obj) -> Obj:
    """A pod of ReplicaSet `owner` its kubelet cannot start: the container waits as
    ContainerCreating, and only a Warning Event says why (`event`)."""
    return _web_pod(
        owner,
        "c4k8n",
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "True"}],
        container_status={
            "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "lastState": {},
        },
    )


def _web_pod(
    owner: Obj,
    suffix: str,
    *,
    phase: str,
    container_status: Obj,
    conditions: list[Obj] | None = None,
) -> Obj:
    """A not-ready pod of ReplicaSet `owner` on node-1, its one container `app` of `web:1`."""
    meta = owner["metadata"]
    status: Obj = {"phase": phase}
    if conditions is not None:
        status["conditions"] = conditions
    status["containerStatuses"] = [
        {"name": "app", "image": "web:1", "ready": False, **container_status}
    ]
    return pod(
        name=f"{meta['name']}-{suffix}",
        namespace=meta["namespace"],
        labels={"app": meta["labels"]["app"]},
        owner=owner,
        image="web:1",
        node="node-1",
        status=status,
    )


def cronjob(*, name: str, namespace: str, schedule: str = "0 3 * * *") -> Obj:
    """A CronJob whose pods run one container named after it."""
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedule": schedule,
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": name, "image": f"{name}:2"}],
                        }
                    }
                }
            },
        },
    }


def failed_job(*, owner: Obj) -> Obj:
    """The last run of CronJob `owner`, failed past its backoff limit."""
    meta = owner["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{meta['name']}-29012345",
            "namespace": meta["namespace"],
            "ownerReferences": controlled_by(owner),
        },
        "spec": {"backoffLimit": 0, "template": owner["spec"]["jobTemplate"]["spec"]["template"]},
        "status": {
            "startTime": "2026-12-02T03:00:00Z",
            "failed": 1,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": "2026-12-02T03:00:40Z",
                }
            ],
        },
    }


def failed_job_pod(*, owner: Obj) -> Obj:
    """The pod of Job `owner`, its container terminated with exit code 2."""
    meta = owner["metadata"]
    container = owner["spec"]["template"]["spec"]["containers"][0]["name"]
    return pod(
        name=f"{meta['name']}-q7w2s",
        namespace=meta["namespace"],
        labels={"job-name": meta["name"]},
        owner=owner,
        container=container,
        image="report:2",
        node="node-1",
        status={
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": container,
                    "image": "report:2",
                    "ready": False,
                    "restartCount": 0,
                    "containerID": "containerd://def456",
                    "state": {
                        "terminated": {
                            "exitCode": 2,
                            "reason": "Error",
                            "startedAt": "2026-12-02T03:00:10Z",
                            "finishedAt": "2026-12-02T03:00:38Z",
                            "containerID": "containerd://def456",
                        }
                    },
                }
            ],
        },
    )


def hpa(
    *,
    name: str,
    namespace: str,
    target: str | None = None,
    low: int | None = 2,
    high: int = 10,
    metric: str = "cpu",
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """An HPA on Deployment `target` (default: its own name), scaling on `metric` at 70%
    utilisation; `low=None` leaves minReplicas to the API's default."""
    spec: Obj = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target or name},
        "minReplicas": low,
        "maxReplicas": high,
        "metrics": [
            {
                "type": "Resource",
                "resource": {
                    "name": metric,
                    "target": {"type": "Utilization", "averageUtilization": 70},
                },
            }
        ],
    }
    if low is None:
        del spec["minReplicas"]
    metadata: Obj = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata,
        "spec": spec,
    }


# -- networking --------------------------------------------------------------------------------


def service(*, name: str, namespace: str) -> Obj:
    """A ClusterIP Service on port 80 for the pods labelled `app: name`."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }


def ingress(*, name: str, namespace: str, host: str, service: str) -> Obj:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "ingressClassName": "nginx",
            "rules": [
                {
                    "host": host,
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": service, "port": {"number": 80}}},
                            }
                        ]
                    },
                }
            ],
        },
    }


def network_policy(*, name: str, namespace: str, allow_from: Iterable[Obj] = ()) -> Obj:
    """A policy on every pod of `namespace` denying ingress except from `allow_from` peers."""
    spec: Obj = {"podSelector": {}, "policyTypes": ["Ingress"]}
    peers = list(allow_from)
    if peers:
        spec["ingress"] = [{"from": peers}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


# -- RBAC --------------------------------------------------------------------------------------


def role(*, name: str, namespace: str | None, rules: list[Obj], labels: Obj | None = None) -> Obj:
    """A Role, or with `namespace=None` a ClusterRole."""
    metadata: Obj = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    kind = "ClusterRole" if namespace is None else "Role"
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": kind, "metadata": metadata, "rules": rules}


def role_binding(*, name: str, namespace: str | None, role: str, subjects: list[Obj]) -> Obj:
    """A RoleBinding of Role `role`, or with `namespace=None` a ClusterRoleBinding of
    ClusterRole `role`."""
    metadata: Obj = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    role_kind = "ClusterRole" if namespace is None else "Role"
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": f"{role_kind}Binding",
        "metadata": metadata,
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role},
        "subjects": subjects,
    }


def service_account_subject(*, name: str, namespace: str) -> Obj:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


# -- Secrets and Helm releases -----------------------------------------------------------------


def api_encoded(value: bytes) -> str:
    """A Secret value as the Kubernetes API carries it (base64)."""
    return base64.b64encode(value).decode()


def secret(*, name: str, namespace: str, data: Mapping[str, bytes], type: str = "Opaque") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": type,
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: api_encoded(value) for key, value in data.items()},
    }


def helm_storage(release: Mapping[str, Any] | bytes, *, gzipped: bool = True) -> bytes:
    """Helm's storage of a release: JSON, gzip, base64 (the Secret's value before the API
    encodes it again). `release` given as bytes is taken as the JSON (or gzip) already."""
    payload = release if isinstance(release, bytes) else json.dumps(release).encode()
    if gzipped:
        payload = gzip.compress(payload)
    return base64.b64encode(payload)


def manifest(objects: Iterable[Obj]) -> str:
    """A release manifest naming `objects` (kind and name only, as the collector reads it)."""
    return "".join(
        f"---\napiVersion: {o['apiVersion']}\nkind: {o['kind']}\n"
        f"metadata:\n  name: {o['metadata']['name']}\n"
        for o in objects
    )


def helm_release(
    *,
    name: str,
    namespace: str,
    revision: int = 1,
    chart_version: str = "1.2.3",
    config: Obj | None = None,
    manifest: str = "",
) -> Obj:
    """A deployed release as Helm marshals it (the fields the collector reads)."""
    return {
        "name": name,
        "namespace": namespace,
        "version": revision,
        "info": {
            "status": "deployed",
            "first_deployed": "2026-12-01T10:00:00Z",
            "last_deployed": "2026-12-01T10:00:00Z",
            "description": "Install complete",
        },
        "chart": {"metadata": {"name": name, "version": chart_version, "appVersion": "4.5"}},
        "config": config or {},
        "manifest": manifest,
    }


def helm_release_secret(
    *,
    name: str,
    namespace: str,
    revision: int,
    storage: bytes,
    status: str = "deployed",
    labels: Mapping[str, str] | None = None,
    created: str | None = None,
) -> Obj:
    """The Secret Helm 3 keeps revision `revision` of release `name` in, labelled as Helm
    labels it (`createdAt`, `name`, `owner`, `status`, `version`); `storage` is
    `helm_storage` of the release (or any bytes, to test what a reader does with them)."""
    metadata: Obj = {"name": f"sh.helm.release.v1.{name}.v{revision}", "namespace": namespace}
    if created is not None:
        metadata["creationTimestamp"] = created
    when = datetime.fromisoformat(created) if created is not None else datetime.now(UTC)
    helm_labels = {
        "createdAt": str(int(when.timestamp())),
        "name": name,
        "owner": "helm",
        "status": status,
        "version": str(revision),
    }
    metadata["labels"] = dict(labels or helm_labels)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": HELM_RELEASE_TYPE,
        "metadata": metadata,
        "data": {"release": api_encoded(storage)},
    }


# -- events ------------------------------------------------------------------------------------


def event(
    *,
    involved: Obj,
    reason: str,
    message: str,
    count: int = 1,
    series: str = "17e0c1f2a3b4c5d6",
    event_type: str = "Warning",
    field_path: str | None = None,
    now: datetime | None = None,
) -> Obj:
    """An Event about `involved` (as created, with its uid) as a kubelet records it
    (core/v1, the old form), its series begun five minutes before `now` and seen last then."""
    now = (now or datetime.now(UTC)).replace(microsecond=0)
    meta = involved["metadata"]
    reference = {
        "kind": involved["kind"],
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "apiVersion": involved["apiVersion"],
    }
    if field_path is not None:
        reference["fieldPath"] = field_path
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{series}", "namespace": meta["namespace"]},
        "involvedObject": reference,
        "reason": reason,
        "message": message,
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": _timestamp(now - timedelta(minutes=5)),
        "lastTimestamp": _timestamp(now),
        "count": count,
        "type": event_type,
        "reportingComponent": "kubelet",
        "reportingInstance": "node-1",
    }
