"""The small cluster `moonin-agent demo` shows: a few namespaces and Deployments, an HPA, a
crash-looping Pod, a CronJob whose last run failed (with its log), and a Helm release.

The objects look like what a real API server returns for them (owner references, container
statuses, a release Secret encoded the way Helm encodes it), so the agent's collector treats
them exactly as it would in a cluster. `populate()` loads them into a `FakeKube`; the other
builders are what the demo changes while the platform is down.
"""

from __future__ import annotations

import base64
import gzip
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox.kube.fake import FakeKube

Obj = dict[str, Any]

SHOP = "shop"
PAYMENTS = "payments"
BATCH = "batch"
WEB = "web"
"""The Deployment (and its HPA) the demo's scaling window applies to."""
WEB_MIN, WEB_MAX = 2, 10
"""The HPA's bounds before any window."""


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def deployment(name: str, ns: str, *, replicas: int = 2, image: str | None = None) -> Obj:
    image = image or f"registry.example/{name}:1.4.2"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": name},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": image,
                            # The value stays in the cluster: only the name is shipped.
                            "env": [{"name": "DATABASE_PASSWORD", "value": "not-for-moonin"}],
                        }
                    ]
                },
            },
        },
        "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas},
    }


def _owner(api_version: str, kind: str, obj: Obj) -> list[Obj]:
    meta = obj["metadata"]
    return [
        {
            "apiVersion": api_version,
            "kind": kind,
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
        }
    ]


def replicaset(owner: Obj) -> Obj:
    meta, spec = owner["metadata"], owner["spec"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-5d8f7c9b6",
            "namespace": meta["namespace"],
            "labels": {**spec["selector"]["matchLabels"], "pod-template-hash": "5d8f7c9b6"},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
            "ownerReferences": _owner("apps/v1", "Deployment", owner),
        },
        "spec": {
            "replicas": spec["replicas"],
            "selector": spec["selector"],
            "template": spec["template"],
        },
        "status": {"replicas": spec["replicas"]},
    }


def crash_looping_pod(owner: Obj) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-x2x9k",
            "namespace": meta["namespace"],
            "labels": owner["spec"]["selector"]["matchLabels"],
            "ownerReferences": _owner("apps/v1", "ReplicaSet", owner),
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "web:1"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "app",
                    "image": "web:1",
                    "ready": False,
                    "restartCount": 4,
                    "containerID": "containerd://abc123",
                    "state": {
                        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m0s"}
                    },
                    "lastState": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "startedAt": "2026-12-02T10:00:00Z",
                            "finishedAt": "2026-12-02T10:00:05Z",
                            "containerID": "containerd://abc123",
                        }
                    },
                }
            ],
        },
    }


def service(name: str, ns: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }


def hpa(target: str, ns: str, *, low: int = WEB_MIN, high: int = WEB_MAX) -> Obj:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": target, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 70},
                    },
                }
            ],
        },
    }


def cronjob(name: str, ns: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedule": "0 3 * * *",
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


def failed_job(owner: Obj) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{meta['name']}-29012345",
            "namespace": meta["namespace"],
            "ownerReferences": _owner("batch/v1", "CronJob", owner),
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


def job_pod(job: Obj, container: str) -> Obj:
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-q7w2s",
            "namespace": meta["namespace"],
            "labels": {"job-name": meta["name"]},
            "ownerReferences": _owner("batch/v1", "Job", job),
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": container, "image": "report:2"}]},
        "status": {
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
    }


def node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": "eu-west-1a",
                "node.kubernetes.io/instance-type": "m6i.xlarge",
            },
        },
        "spec": {"providerID": f"aws:///eu-west-1a/i-0{name[-1]}"},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.30.2", "architecture": "amd64"},
        },
    }


def helm_release_secret(release: str, ns: str, manifest_objects: list[Obj]) -> Obj:
    """A release Secret as Helm stores it: JSON, gzip, base64, then the Secret's base64."""
    manifest = "".join(
        f"---\napiVersion: {o['apiVersion']}\nkind: {o['kind']}\n"
        f"metadata:\n  name: {o['metadata']['name']}\n"
        for o in manifest_objects
    )
    payload = {
        "name": release,
        "namespace": ns,
        "version": 1,
        "info": {
            "status": "deployed",
            "first_deployed": "2026-12-01T10:00:00Z",
            "last_deployed": "2026-12-01T10:00:00Z",
            "description": "Install complete",
        },
        "chart": {"metadata": {"name": release, "version": "1.2.3", "appVersion": "4.5"}},
        # Values never leave the cluster: the collector drops them.
        "config": {"database": {"password": "not-for-moonin"}},
        "manifest": manifest,
    }
    inner = base64.b64encode(gzip.compress(json.dumps(payload).encode())).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": f"sh.helm.release.v1.{release}.v1",
            "namespace": ns,
            "labels": {"owner": "helm", "name": release, "version": "1"},
        },
        "data": {"release": base64.b64encode(inner.encode()).decode()},
    }


def populate(kube: FakeKube) -> dict[str, int]:
    """Create the demo cluster; returns how many objects of each kind were created."""
    created: dict[str, int] = {}

    def create(obj: Obj) -> Obj:
        created[obj["kind"]] = created.get(obj["kind"], 0) + 1
        return kube.create(obj)

    for name in (SHOP, PAYMENTS, BATCH):
        create(namespace(name))
    create(node("node-1"))
    create(node("node-2"))
    web = create(deployment(WEB, SHOP, replicas=2))
    web_rs = create(replicaset(web))
    create(crash_looping_pod(web_rs))
    web_service = create(service(WEB, SHOP))
    web_hpa = create(hpa(WEB, SHOP))
    create(deployment("cart", SHOP, replicas=2))
    create(deployment("api", PAYMENTS, replicas=3))
    create(service("api", PAYMENTS))
    create(helm_release_secret(SHOP, SHOP, [web, web_service, web_hpa]))
    report = create(cronjob("report", BATCH))
    job = create(failed_job(report))
    pod = create(job_pod(job, "report"))
    kube.set_pod_log(
        BATCH,
        pod["metadata"]["name"],
        "report",
        'connecting to warehouse\nquery failed: relation "sales" does not exist\nexit 2\n',
    )
    return created


def failed_job_key() -> str:
    """The record key of the CronJob's failed run (`namespace/job`)."""
    return f"{BATCH}/report-29012345"
