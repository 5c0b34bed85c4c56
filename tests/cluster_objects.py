"""Realistic objects of every watched kind, as a cluster holds them, for collector tests.

`every_kind()` builds one small application (a Deployment with its ReplicaSet and a
crash-looping pod, a Service and an HPA on it, a CronJob whose last Job failed, a Helm
release, RBAC, networking) and the record (kind, key) each object should produce.
"""

from __future__ import annotations

import base64
import gzip
import json
from datetime import UTC, datetime, timedelta
from typing import Any

NS = "shop"


def namespace(name: str = NS) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def pod(name: str, **labels: str) -> dict[str, Any]:
    """A plain one-container Pod in NS."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
    }


def deployment(
    name: str = "web", image: str = "registry.example/web:1.4.2", ns: str = NS
) -> dict[str, Any]:
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
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": image,
                            "env": [{"name": "MODE", "value": "production"}],
                        }
                    ]
                },
            },
        },
        "status": {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1},
    }


def replicaset(deployment_uid: str, name: str = "web", ns: str = NS) -> dict[str, Any]:
    spec = deployment(name, ns=ns)["spec"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-5d8f7c9b6",
            "namespace": ns,
            "labels": {"app": name, "pod-template-hash": "5d8f7c9b6"},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": name,
                    "uid": deployment_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": 2, "selector": spec["selector"], "template": spec["template"]},
        "status": {"replicas": 2},
    }


def crashing_pod(rs_name: str, rs_uid: str, ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{rs_name}-x2x9k",
            "namespace": ns,
            "labels": {"app": "web"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": rs_name,
                    "uid": rs_uid,
                    "controller": True,
                }
            ],
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


def creating_pod(rs_name: str, rs_uid: str, ns: str = NS) -> dict[str, Any]:
    """A pod whose kubelet cannot start it: its container waits as ContainerCreating, and
    only a Warning Event says why (`warning_event`)."""
    pod = crashing_pod(rs_name, rs_uid, ns)
    pod["metadata"]["name"] = f"{rs_name}-c4k8n"
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {
                "name": "app",
                "image": "web:1",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
                "lastState": {},
            }
        ],
    }
    return pod


def warning_event(
    involved: dict[str, Any],
    reason: str,
    message: str,
    *,
    count: int = 1,
    series: str = "17e0c1f2a3b4c5d6",
    event_type: str = "Warning",
    field_path: str | None = None,
) -> dict[str, Any]:
    """An Event about `involved` as a kubelet records it (core/v1, the old form), its
    series begun five minutes ago and seen last now."""
    now = datetime.now(UTC).replace(microsecond=0)
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
        "firstTimestamp": (now - timedelta(minutes=5)).isoformat().replace("+00:00", "Z"),
        "lastTimestamp": now.isoformat().replace("+00:00", "Z"),
        "count": count,
        "type": event_type,
        "reportingComponent": "kubelet",
        "reportingInstance": "node-1",
    }


def service(name: str = "web", ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }


def hpa(ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2,
            "maxReplicas": 10,
        },
    }


def cronjob(ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "report", "namespace": ns},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "report", "image": "report:2"}],
                        }
                    }
                }
            },
        },
    }


def failed_job(cronjob_uid: str, ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "report-29012345",
            "namespace": ns,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "CronJob",
                    "name": "report",
                    "uid": cronjob_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"backoffLimit": 0, "template": cronjob()["spec"]["jobTemplate"]["spec"]},
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


def job_pod(job_name: str, job_uid: str, ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job_name}-q7w2s",
            "namespace": ns,
            "labels": {"job-name": job_name},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job_name,
                    "uid": job_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "report", "image": "report:2"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "report",
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


def node(name: str = "node-1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": "eu-west-1a",
            },
        },
        "spec": {"providerID": f"aws:///eu-west-1a/i-0{name[-1]}"},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.30.2", "architecture": "amd64"},
        },
    }


def ingress(ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "ingressClassName": "nginx",
            "rules": [
                {
                    "host": "shop.example.com",
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "web", "port": {"number": 80}}},
                            }
                        ]
                    },
                }
            ],
        },
    }


def network_policy(ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "deny-all", "namespace": ns},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }


def rbac(ns: str = NS) -> list[dict[str, Any]]:
    group = "rbac.authorization.k8s.io/v1"
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    subject = {"kind": "ServiceAccount", "name": "web", "namespace": ns}
    return [
        {
            "apiVersion": group,
            "kind": "Role",
            "metadata": {"name": "reader", "namespace": ns},
            "rules": [rule],
        },
        {
            "apiVersion": group,
            "kind": "RoleBinding",
            "metadata": {"name": "reader", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [subject],
        },
        {
            "apiVersion": group,
            "kind": "ClusterRole",
            "metadata": {"name": "viewer"},
            "rules": [rule],
        },
        {
            "apiVersion": group,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "viewer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "viewer",
            },
            "subjects": [subject],
        },
    ]


def helm_release_secret(release: str = "shop", revision: int = 1, ns: str = NS) -> dict[str, Any]:
    """A release Secret encoded as Helm stores it: JSON, gzip, base64, then Secret base64."""
    payload = {
        "name": release,
        "namespace": ns,
        "version": revision,
        "info": {
            "status": "deployed",
            "first_deployed": "2026-12-01T10:00:00Z",
            "last_deployed": "2026-12-01T10:00:00Z",
            "description": "Install complete",
        },
        "chart": {"metadata": {"name": "shop", "version": "1.2.3", "appVersion": "4.5"}},
        "config": {},
        "manifest": "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n",
    }
    inner = base64.b64encode(gzip.compress(json.dumps(payload).encode())).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": f"sh.helm.release.v1.{release}.v{revision}",
            "namespace": ns,
            "labels": {"owner": "helm", "name": release, "version": str(revision)},
        },
        "data": {"release": base64.b64encode(inner.encode()).decode()},
    }


def opaque_secret(ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": "db", "namespace": ns},
        "data": {"password": base64.b64encode(b"not-for-the-agent").decode()},
    }


def populate(kube: Any) -> set[tuple[str, str]]:
    """Create one of everything in a FakeKube; returns the (kind, key) of expected upserts."""
    kube.create(namespace())
    dep = kube.create(deployment())
    rs = kube.create(replicaset(dep["metadata"]["uid"]))
    kube.create(crashing_pod(rs["metadata"]["name"], rs["metadata"]["uid"]))
    kube.create(service())
    kube.create(hpa())
    cron = kube.create(cronjob())
    job = kube.create(failed_job(cron["metadata"]["uid"]))
    pod = kube.create(job_pod(job["metadata"]["name"], job["metadata"]["uid"]))
    kube.set_pod_log(NS, pod["metadata"]["name"], "report", "starting\nquery failed\nexit 2\n")
    kube.create(node())
    kube.create(ingress())
    kube.create(network_policy())
    for obj in rbac():
        kube.create(obj)
    kube.create(helm_release_secret())
    kube.create(opaque_secret())
    return {
        ("namespace", NS),
        ("deployment", f"{NS}/web"),
        ("revision", f"{NS}/{rs['metadata']['name']}"),
        ("service", f"{NS}/web"),
        ("hpa", f"{NS}/web"),
        ("cronjob", f"{NS}/report"),
        ("job_execution", f"{NS}/{job['metadata']['name']}"),
        ("node", "node-1"),
        ("ingress", f"{NS}/web"),
        ("network_policy", f"{NS}/deny-all"),
        ("rbac", f"Role/{NS}/reader"),
        ("rbac", f"RoleBinding/{NS}/reader"),
        ("rbac", "ClusterRole/viewer"),
        ("rbac", "ClusterRoleBinding/viewer"),
        ("helm_release", f"{NS}/shop/v1"),
    }
