"""Normalizers: raw API objects, as the API returns them, to exact records.

Every object below is written the way the API server returns it (managedFields, the
last-applied-configuration annotation, status blocks, env values) and carries planted
secrets; they must appear nowhere in the encoded records.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from collector.normalize import (
    cronjob,
    deployment,
    hpa,
    ingress,
    namespace,
    network_policy,
    node,
    rbac,
    revision,
    service,
)
from collector.normalize.base import Context, HpaRef, Normalizer, RevisionRef
from shipper.records import Record

SECRET = "pl4nted-s3cret"
SECRETS = [
    f"env-{SECRET}",
    f"init-env-{SECRET}",
    f"cron-env-{SECRET}",
    f"args-{SECRET}",
    f"command-{SECRET}",
    f"applied-{SECRET}",
    f"annotation-{SECRET}",
    f"managed-{SECRET}",
    f"probe-{SECRET}",
]
LAST_APPLIED = '{"spec":{"containers":[{"env":[{"value":"applied-' + SECRET + '"}]}]}}'
MANAGED_FIELDS = [
    {
        "manager": "kubectl-client-side-apply",
        "operation": "Update",
        "apiVersion": "apps/v1",
        "time": "2026-11-30T09:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {f"f:managed-{SECRET}": {}}}},
    }
]


class StubLookups:
    """Fixed answers, so each normalizer is tested on its own."""

    def __init__(
        self,
        *,
        services: Mapping[str, list[str]] | None = None,
        hpas: Mapping[str, HpaRef] | None = None,
        current: Mapping[str, RevisionRef] | None = None,
    ) -> None:
        self.services = services or {}
        self.hpas = hpas or {}
        self.current = current or {}

    def deployment_of_replicaset(self, namespace: str, replicaset: str) -> str | None:
        return None

    def current_revision(self, namespace: str, deployment: str) -> RevisionRef | None:
        return self.current.get(f"{namespace}/{deployment}")

    def cronjob_of_job(self, namespace: str, job: str) -> str | None:
        return None

    def services_selecting(self, namespace: str, labels: Mapping[str, str]) -> list[str]:
        # Unsorted on purpose: the normalizers sort.
        return list(self.services.get(labels.get("app", ""), []))

    def hpa_for(self, namespace: str, deployment: str) -> HpaRef | None:
        return self.hpas.get(f"{namespace}/{deployment}")


LOOKUPS = StubLookups(
    services={"web": ["web-metrics", "web"]},
    hpas={"shop/web": HpaRef(name="web", min_replicas=2, max_replicas=10)},
    current={
        "shop/web": RevisionRef(
            replicaset="web-7d9c8b6f5", number=3, created_at="2026-12-01T09:00:00Z"
        )
    },
)
CTX = Context(
    lookups=LOOKUPS,
    ignore_node_labels=frozenset({"kubernetes.io/hostname", "example.com/*"}),
)


def run(normalizer: Normalizer[Any], raw: dict[str, Any], ctx: Context = CTX) -> list[Record]:
    """Decode the raw JSON as the collector does, then normalize."""
    obj = msgspec.json.decode(msgspec.json.encode(raw), type=normalizer.struct)
    return normalizer.upserts(obj, ctx)


def only(records: list[Record]) -> Record:
    assert len(records) == 1
    return records[0]


def meta(name: str, ns: str | None = "shop", **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "4711",
        "generation": 7,
        "creationTimestamp": "2026-11-01T10:00:00Z",
        "managedFields": MANAGED_FIELDS,
        **extra,
    }
    if ns is not None:
        result["namespace"] = ns
    return result


POD_TEMPLATE = {
    "metadata": {
        "labels": {"app": "web", "tier": "front"},
        "annotations": {
            "prometheus.io/scrape": "true",
            "checksum/api-token": f"annotation-{SECRET}",
        },
    },
    "spec": {
        "serviceAccountName": "web",
        "initContainers": [
            {
                "name": "migrate",
                "image": "ghcr.io/acme/migrate:2.0.1",
                "command": ["migrate", f"--dsn=postgres://u:command-{SECRET}@db/app"],
                "env": [{"name": "DSN", "value": f"init-env-{SECRET}"}],
            }
        ],
        "containers": [
            {
                "name": "web",
                "image": "registry.example.com:5000/shop/web:1.4.2",
                "args": ["--token", f"args-{SECRET}"],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [
                    {"name": "API_KEY", "value": f"env-{SECRET}"},
                    {
                        "name": "DB_PASSWORD",
                        "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}},
                    },
                ],
                "envFrom": [{"configMapRef": {"name": "web-config"}}],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                "readinessProbe": {
                    "httpGet": {
                        "path": "/ready",
                        "port": 8080,
                        "httpHeaders": [{"name": "Authorization", "value": f"probe-{SECRET}"}],
                    },
                    "periodSeconds": 5,
                },
                "terminationMessagePolicy": "File",
            },
            {"name": "sidecar", "image": "envoyproxy/envoy:v1.31.0"},
        ],
        "volumes": [{"name": "cache", "emptyDir": {}}],
    },
}

WEB_CONTAINER = {
    "name": "web",
    "image": "registry.example.com:5000/shop/web:1.4.2",
    "image_ref": {
        "registry": "registry.example.com:5000",
        "repository": "shop/web",
        "tag": "1.4.2",
        "digest": None,
    },
    "ports": [{"name": "http", "container_port": 8080, "protocol": "TCP"}],
    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {}},
    "env": [
        {"name": "API_KEY", "from": None},
        {"name": "DB_PASSWORD", "from": "secretKeyRef", "secret": "db", "key": "password"},
    ],
    "env_from": [{"from": "configMapRef", "name": "web-config", "prefix": None}],
    "volume_mounts": [{"name": "cache", "mount_path": "/cache", "read_only": False}],
    "probes": {"liveness": None, "readiness": "httpGet", "startup": None},
}
SIDECAR_CONTAINER = {
    "name": "sidecar",
    "image": "envoyproxy/envoy:v1.31.0",
    "image_ref": {
        "registry": "docker.io",
        "repository": "envoyproxy/envoy",
        "tag": "v1.31.0",
        "digest": None,
    },
    "ports": [],
    "resources": {"requests": {}, "limits": {}},
    "env": [],
    "env_from": [],
    "volume_mounts": [],
    "probes": {"liveness": None, "readiness": None, "startup": None},
}
MIGRATE_CONTAINER = {
    "name": "migrate",
    "image": "ghcr.io/acme/migrate:2.0.1",
    "image_ref": {
        "registry": "ghcr.io",
        "repository": "acme/migrate",
        "tag": "2.0.1",
        "digest": None,
    },
    "ports": [],
    "resources": {"requests": {}, "limits": {}},
    "env": [{"name": "DSN", "from": None}],
    "env_from": [],
    "volume_mounts": [],
    "probes": {"liveness": None, "readiness": None, "startup": None},
}
IMAGES = [
    {
        "container": "web",
        "init": False,
        "image": "registry.example.com:5000/shop/web:1.4.2",
        "registry": "registry.example.com:5000",
        "repository": "shop/web",
        "tag": "1.4.2",
        "digest": None,
    },
    {
        "container": "sidecar",
        "init": False,
        "image": "envoyproxy/envoy:v1.31.0",
        "registry": "docker.io",
        "repository": "envoyproxy/envoy",
        "tag": "v1.31.0",
        "digest": None,
    },
    {
        "container": "migrate",
        "init": True,
        "image": "ghcr.io/acme/migrate:2.0.1",
        "registry": "ghcr.io",
        "repository": "acme/migrate",
        "tag": "2.0.1",
        "digest": None,
    },
]
TEMPLATE_DATA = {
    "labels": {"app": "web", "tier": "front"},
    "annotations": {"prometheus.io/scrape": "true"},
}
HELM = {
    "release": "shop",
    "release_namespace": "shop",
    "chart": "web-chart-1.4.2",
    "chart_name": "web-chart",
    "chart_version": "1.4.2",
}
HELM_LABELS = {
    "app": "web",
    "app.kubernetes.io/managed-by": "Helm",
    "helm.sh/chart": "web-chart-1.4.2",
}
HELM_ANNOTATIONS = {
    "meta.helm.sh/release-name": "shop",
    "meta.helm.sh/release-namespace": "shop",
}

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": meta(
        "web",
        labels=HELM_LABELS,
        annotations={
            "deployment.kubernetes.io/revision": "3",
            "kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED,
            "db-password": f"annotation-{SECRET}",
            **HELM_ANNOTATIONS,
        },
    ),
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": POD_TEMPLATE,
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
        },
        "revisionHistoryLimit": 10,
        "progressDeadlineSeconds": 600,
    },
    "status": {
        "observedGeneration": 7,
        "replicas": 3,
        "updatedReplicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "unavailableReplicas": 1,
        "conditions": [
            {
                "type": "Progressing",
                "status": "True",
                "lastUpdateTime": "2026-12-02T11:00:00Z",
                "lastTransitionTime": "2026-11-01T10:00:00Z",
                "reason": "NewReplicaSetAvailable",
                "message": 'ReplicaSet "web-7d9c8b6f5" has successfully progressed.',
            },
            {
                "type": "Available",
                "status": "False",
                "lastUpdateTime": "2026-12-02T11:00:00Z",
                "lastTransitionTime": "2026-12-02T10:59:00Z",
                "reason": "MinimumReplicasUnavailable",
                "message": "Deployment does not have minimum availability.",
            },
        ],
    },
}

DEPLOYMENT_DATA = {
    "desired_replicas": 3,
    "current_replicas": 3,
    "ready_replicas": 2,
    "available_replicas": 2,
    "updated_replicas": 3,
    "unavailable_replicas": 1,
    "strategy": {"type": "RollingUpdate", "max_surge": "25%", "max_unavailable": 0},
    "paused": False,
    "labels": HELM_LABELS,
    "annotations": {
        "deployment.kubernetes.io/revision": "3",
        **HELM_ANNOTATIONS,
    },
    "selector": {"match_labels": {"app": "web"}, "match_expressions": []},
    "template": TEMPLATE_DATA,
    "containers": [WEB_CONTAINER, SIDECAR_CONTAINER],
    "init_containers": [MIGRATE_CONTAINER],
    "images": IMAGES,
    "services": ["web", "web-metrics"],
    "hpa": {"name": "web", "min_replicas": 2, "max_replicas": 10},
    "has_hpa": True,
    "revision": 3,
    "current_replicaset": "web-7d9c8b6f5",
    "last_deployed_at": "2026-12-01T09:00:00Z",
    "conditions": [
        {
            "type": "Available",
            "status": "False",
            "reason": "MinimumReplicasUnavailable",
            "message": "Deployment does not have minimum availability.",
            "last_transition_time": "2026-12-02T10:59:00Z",
        },
        {
            "type": "Progressing",
            "status": "True",
            "reason": "NewReplicaSetAvailable",
            "message": 'ReplicaSet "web-7d9c8b6f5" has successfully progressed.',
            "last_transition_time": "2026-11-01T10:00:00Z",
        },
    ],
    "helm": HELM,
    "created_at": "2026-11-01T10:00:00Z",
}

REPLICASET = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "metadata": meta(
        "web-7d9c8b6f5",
        labels={"app": "web", "tier": "front", "pod-template-hash": "7d9c8b6f5"},
        annotations={
            "deployment.kubernetes.io/desired-replicas": "3",
            "deployment.kubernetes.io/max-replicas": "3",
            "deployment.kubernetes.io/revision": "3",
            "kubernetes.io/change-cause": "kubectl set image deployment/web web=shop/web:1.4.2",
            "moonin.app/actor": "ci@acme",
            "db-password": f"annotation-{SECRET}",
            **HELM_ANNOTATIONS,
        },
        ownerReferences=[
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "web",
                "uid": "uid-web",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    ),
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7d9c8b6f5"}},
        "template": copy.deepcopy(POD_TEMPLATE),
    },
    "status": {
        "replicas": 3,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "observedGeneration": 2,
    },
}
REPLICASET["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] = "7d9c8b6f5"

REVISION_DATA = {
    "deployment": "web",
    "number": 3,
    "type": "helm",
    "created_at": "2026-11-01T10:00:00Z",
    "status": "current",
    "desired_replicas": 3,
    "current_replicas": 3,
    "ready_replicas": 2,
    "available_replicas": 2,
    "change_cause": "kubectl set image deployment/web web=shop/web:1.4.2",
    "actor": "ci@acme",
    "notes": None,
    "annotations": {
        "deployment.kubernetes.io/desired-replicas": "3",
        "deployment.kubernetes.io/max-replicas": "3",
        "deployment.kubernetes.io/revision": "3",
        "kubernetes.io/change-cause": "kubectl set image deployment/web web=shop/web:1.4.2",
        **HELM_ANNOTATIONS,
        "moonin.app/actor": "ci@acme",
    },
    "template": {
        "labels": {"app": "web", "pod-template-hash": "7d9c8b6f5", "tier": "front"},
        "annotations": TEMPLATE_DATA["annotations"],
    },
    "containers": [WEB_CONTAINER, SIDECAR_CONTAINER],
    "init_containers": [MIGRATE_CONTAINER],
    "images": IMAGES,
    "services": ["web", "web-metrics"],
    "hpa": {"name": "web", "min_replicas": 2, "max_replicas": 10},
    "helm": {**HELM, "chart": None, "chart_name": None, "chart_version": None},
}

HPA = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": meta(
        "web",
        annotations={"kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED},
    ),
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": 2,
        "maxReplicas": 10,
        "metrics": [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 70},
                },
            },
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "requests_per_second"},
                    "target": {"type": "AverageValue", "averageValue": "100"},
                },
            },
            {
                "type": "External",
                "external": {
                    "metric": {
                        "name": "queue_depth",
                        "selector": {"matchLabels": {"queue": "orders"}},
                    },
                    "target": {"type": "Value", "value": "30"},
                },
            },
        ],
        "behavior": {
            "scaleDown": {
                "stabilizationWindowSeconds": 300,
                "selectPolicy": "Max",
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
            }
        },
    },
    "status": {
        "observedGeneration": 3,
        "lastScaleTime": "2026-12-02T10:58:00Z",
        "currentReplicas": 3,
        "desiredReplicas": 3,
        "currentMetrics": [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "current": {"averageValue": "180m", "averageUtilization": 72},
                },
            }
        ],
        "conditions": [
            {
                "type": "AbleToScale",
                "status": "True",
                "lastTransitionTime": "2026-11-01T10:01:00Z",
                "reason": "ReadyForNewScale",
                "message": "recommended size matches current size",
            }
        ],
    },
}
HPA_DATA = {
    "min_replicas": 2,
    "max_replicas": 10,
    "target": {"kind": "Deployment", "name": "web", "api_version": "apps/v1"},
    "metrics": [
        {
            "type": "Resource",
            "name": "cpu",
            "container": None,
            "selector": None,
            "described_object": None,
            "target": {
                "type": "Utilization",
                "value": None,
                "average_value": None,
                "average_utilization": 70,
            },
        },
        {
            "type": "Pods",
            "name": "requests_per_second",
            "container": None,
            "selector": None,
            "described_object": None,
            "target": {
                "type": "AverageValue",
                "value": None,
                "average_value": "100",
                "average_utilization": None,
            },
        },
        {
            "type": "External",
            "name": "queue_depth",
            "container": None,
            "selector": {"match_labels": {"queue": "orders"}, "match_expressions": []},
            "described_object": None,
            "target": {
                "type": "Value",
                "value": "30",
                "average_value": None,
                "average_utilization": None,
            },
        },
    ],
    "behavior": HPA["spec"]["behavior"],
    "status": {
        "current_replicas": 3,
        "desired_replicas": 3,
        "last_scale_time": "2026-12-02T10:58:00Z",
        "conditions": [
            {
                "type": "AbleToScale",
                "status": "True",
                "reason": "ReadyForNewScale",
                "message": "recommended size matches current size",
                "last_transition_time": "2026-11-01T10:01:00Z",
            }
        ],
    },
    "labels": {},
    "annotations": {},
    "created_at": "2026-11-01T10:00:00Z",
}

SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": meta("web", labels={"app": "web"}, annotations={"db-password": "x"}),
    "spec": {
        "type": "LoadBalancer",
        "selector": {"tier": "front", "app": "web"},
        "ports": [
            {
                "name": "http",
                "port": 80,
                "targetPort": "http",
                "protocol": "TCP",
                "nodePort": 31080,
            },
            {
                "name": "metrics",
                "port": 9090,
                "targetPort": 9090,
                "protocol": "TCP",
                "nodePort": 31090,
            },
        ],
        "clusterIP": "10.96.12.34",
        "clusterIPs": ["10.96.12.34"],
        "ipFamilies": ["IPv4"],
        "sessionAffinity": "None",
        "externalTrafficPolicy": "Cluster",
    },
    "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10", "ipMode": "VIP"}]}},
}
SERVICE_DATA = {
    "type": "LoadBalancer",
    "selector": {"app": "web", "tier": "front"},
    "ports": [
        {"name": "http", "port": 80, "target_port": "http", "protocol": "TCP", "node_port": 31080},
        {
            "name": "metrics",
            "port": 9090,
            "target_port": 9090,
            "protocol": "TCP",
            "node_port": 31090,
        },
    ],
    "cluster_ip": "10.96.12.34",
    "cluster_ips": ["10.96.12.34"],
    "external_ips": [],
    "external_name": None,
    "load_balancer": [{"ip": "203.0.113.10", "hostname": None}],
    "labels": {"app": "web"},
    "annotations": {},
    "created_at": "2026-11-01T10:00:00Z",
}

INGRESS = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "Ingress",
    "metadata": meta(
        "web",
        annotations={
            "kubernetes.io/ingress.class": "legacy",
            "nginx.ingress.kubernetes.io/rewrite-target": "/",
        },
    ),
    "spec": {
        "ingressClassName": "nginx",
        "tls": [{"hosts": ["www.example.com", "shop.example.com"], "secretName": "shop-tls"}],
        "rules": [
            {
                "host": "shop.example.com",
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": "web", "port": {"number": 80}}},
                        },
                        {
                            "path": "/api",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": "api", "port": {"name": "http"}}},
                        },
                        {
                            "path": "/static",
                            "pathType": "ImplementationSpecific",
                            "backend": {
                                "resource": {
                                    "apiGroup": "k8s.example.com",
                                    "kind": "StorageBucket",
                                    "name": "static",
                                }
                            },
                        },
                    ]
                },
            }
        ],
    },
    "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.net"}]}},
}
INGRESS_DATA = {
    "class": "nginx",
    "rules": [
        {
            "host": "shop.example.com",
            "paths": [
                {
                    "path": "/",
                    "path_type": "Prefix",
                    "service": "web",
                    "port": 80,
                    "resource": None,
                },
                {
                    "path": "/api",
                    "path_type": "Prefix",
                    "service": "api",
                    "port": "http",
                    "resource": None,
                },
                {
                    "path": "/static",
                    "path_type": "ImplementationSpecific",
                    "service": None,
                    "port": None,
                    "resource": {
                        "api_group": "k8s.example.com",
                        "kind": "StorageBucket",
                        "name": "static",
                    },
                },
            ],
        }
    ],
    "default_backend": None,
    "tls": [{"hosts": ["shop.example.com", "www.example.com"], "secret_name": "shop-tls"}],
    "load_balancer": [{"ip": None, "hostname": "lb.example.net"}],
    "labels": {},
    "annotations": {
        "kubernetes.io/ingress.class": "legacy",
        "nginx.ingress.kubernetes.io/rewrite-target": "/",
    },
    "created_at": "2026-11-01T10:00:00Z",
}

NETWORK_POLICY = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": meta("web-allow"),
    "spec": {
        "podSelector": {"matchLabels": {"app": "web"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {
                "from": [
                    {"namespaceSelector": {"matchLabels": {"team": "edge"}}, "podSelector": {}},
                    {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                ],
                "ports": [{"protocol": "TCP", "port": 8080}, {"port": 9000, "endPort": 9100}],
            },
            {},
        ],
        "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}]}],
    },
}
NETWORK_POLICY_DATA = {
    "pod_selector": {"match_labels": {"app": "web"}, "match_expressions": []},
    "policy_types": ["Egress", "Ingress"],
    "ingress": [
        {
            "from": [
                {
                    "pod_selector": {"match_labels": {}, "match_expressions": []},
                    "namespace_selector": {
                        "match_labels": {"team": "edge"},
                        "match_expressions": [],
                    },
                    "ip_block": None,
                },
                {
                    "pod_selector": None,
                    "namespace_selector": None,
                    "ip_block": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]},
                },
            ],
            "ports": [
                {"protocol": "TCP", "port": 8080, "end_port": None},
                {"protocol": "TCP", "port": 9000, "end_port": 9100},
            ],
        },
        {"from": None, "ports": None},
    ],
    "egress": [
        {
            "to": [
                {
                    "pod_selector": {"match_labels": {"app": "db"}, "match_expressions": []},
                    "namespace_selector": None,
                    "ip_block": None,
                }
            ],
            "ports": None,
        }
    ],
    "labels": {},
    "annotations": {},
    "created_at": "2026-11-01T10:00:00Z",
}

ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": meta("reader"),
    "rules": [
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["db"], "verbs": ["get"]},
    ],
}
ROLE_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "RoleBinding",
    "metadata": meta("reader"),
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
    "subjects": [
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "zoe@example.com"},
        {"kind": "ServiceAccount", "name": "web", "namespace": "shop"},
    ],
}
CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": meta(
        "monitoring", ns=None, annotations={"rbac.authorization.kubernetes.io/autoupdate": "true"}
    ),
    "aggregationRule": {
        "clusterRoleSelectors": [
            {"matchLabels": {"rbac.example.com/aggregate-to-monitoring": "true"}}
        ]
    },
    "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
}
CLUSTER_ROLE_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": meta("monitoring", ns=None),
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "monitoring",
    },
    "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "ops"}],
}

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": meta(
        "node-1",
        ns=None,
        labels={
            "kubernetes.io/hostname": "node-1",
            "kubernetes.io/arch": "amd64",
            "example.com/cost-center": "42",
            "beta.kubernetes.io/instance-type": "m5.large",
            "node.kubernetes.io/instance-type": "m5.xlarge",
            "failure-domain.beta.kubernetes.io/region": "eu-west-1",
            "failure-domain.beta.kubernetes.io/zone": "eu-west-1b",
        },
        annotations={"node.alpha.kubernetes.io/ttl": "0"},
    ),
    "spec": {
        "providerID": "aws:///eu-west-1b/i-0abc",
        "podCIDR": "10.244.1.0/24",
        "taints": [
            {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/unreachable",
                "effect": "NoExecute",
                "timeAdded": "2026-12-02T11:00:00Z",
            },
        ],
        "unschedulable": True,
    },
    "status": {
        "capacity": {
            "cpu": "4",
            "memory": "16005600Ki",
            "ephemeral-storage": "81106868Ki",
            "pods": "110",
            "hugepages-2Mi": "0",
        },
        "allocatable": {"cpu": "3920m", "memory": "15209952Ki", "pods": "110"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "lastHeartbeatTime": "2026-12-02T11:59:40Z",
                "lastTransitionTime": "2026-11-01T10:02:00Z",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
            },
            {
                "type": "DiskPressure",
                "status": "False",
                "lastHeartbeatTime": "2026-12-02T11:59:40Z",
                "lastTransitionTime": "2026-11-01T10:02:00Z",
                "reason": "KubeletHasNoDiskPressure",
                "message": "kubelet has no disk pressure",
            },
        ],
        "addresses": [{"type": "InternalIP", "address": "10.0.1.12"}],
        "nodeInfo": {
            "machineID": "ec2...",
            "bootID": "b-1",
            "kernelVersion": "6.1.0",
            "osImage": "Bottlerocket OS 1.20.0",
            "containerRuntimeVersion": "containerd://1.7.20",
            "kubeletVersion": "v1.30.2",
            "kubeProxyVersion": "v1.30.2",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": [{"names": ["nginx:1.25"], "sizeBytes": 70000000}],
    },
}
NODE_DATA = {
    "capacity": {
        "cpu": "4",
        "memory": "16005600Ki",
        "ephemeral_storage": "81106868Ki",
        "pods": "110",
    },
    "allocatable": {
        "cpu": "3920m",
        "memory": "15209952Ki",
        "ephemeral_storage": None,
        "pods": "110",
    },
    "conditions": [
        {
            "type": "DiskPressure",
            "status": "False",
            "reason": "KubeletHasNoDiskPressure",
            "last_transition_time": "2026-11-01T10:02:00Z",
        },
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "last_transition_time": "2026-11-01T10:02:00Z",
        },
    ],
    "node_info": {
        "kubelet_version": "v1.30.2",
        "container_runtime_version": "containerd://1.7.20",
        "os_image": "Bottlerocket OS 1.20.0",
        "architecture": "amd64",
        "operating_system": "linux",
    },
    "instance_type": "m5.xlarge",
    "region": "eu-west-1",
    "zone": "eu-west-1b",
    "provider_id": "aws:///eu-west-1b/i-0abc",
    "unschedulable": True,
    "taints": [
        {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "value": None, "effect": "NoExecute"},
    ],
    "labels": {
        "beta.kubernetes.io/instance-type": "m5.large",
        "failure-domain.beta.kubernetes.io/region": "eu-west-1",
        "failure-domain.beta.kubernetes.io/zone": "eu-west-1b",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "m5.xlarge",
    },
    "created_at": "2026-11-01T10:00:00Z",
}

CRONJOB = {
    "apiVersion": "batch/v1",
    "kind": "CronJob",
    "metadata": meta(
        "nightly",
        annotations={"kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED},
    ),
    "spec": {
        "schedule": "30 2 * * *",
        "timeZone": "Europe/Madrid",
        "concurrencyPolicy": "Forbid",
        "suspend": False,
        "successfulJobsHistoryLimit": 3,
        "jobTemplate": {
            "metadata": {"labels": {"app": "nightly"}},
            "spec": {
                "backoffLimit": 2,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "report",
                                "image": "acme/report@sha256:" + "d" * 64,
                                "command": ["report", f"--key=command-{SECRET}"],
                                "env": [{"name": "S3_KEY", "value": f"cron-env-{SECRET}"}],
                            }
                        ],
                    }
                },
            },
        },
    },
    "status": {
        "active": [{"kind": "Job", "namespace": "shop", "name": "nightly-28491230", "uid": "j-1"}],
        "lastScheduleTime": "2026-12-02T01:30:00Z",
        "lastSuccessfulTime": "2026-12-01T01:31:12Z",
    },
}
CRONJOB_DATA = {
    "schedule": "30 2 * * *",
    "time_zone": "Europe/Madrid",
    "concurrency_policy": "Forbid",
    "suspend": False,
    "last_schedule_time": "2026-12-02T01:30:00Z",
    "last_successful_time": "2026-12-01T01:31:12Z",
    "active_jobs": 1,
    "containers": [
        {
            "name": "report",
            "image": "acme/report@sha256:" + "d" * 64,
            "image_ref": {
                "registry": "docker.io",
                "repository": "acme/report",
                "tag": None,
                "digest": "sha256:" + "d" * 64,
            },
            "ports": [],
            "resources": {"requests": {}, "limits": {}},
            "env": [{"name": "S3_KEY", "from": None}],
            "env_from": [],
            "volume_mounts": [],
            "probes": {"liveness": None, "readiness": None, "startup": None},
        }
    ],
    "init_containers": [],
    "images": [
        {
            "container": "report",
            "init": False,
            "image": "acme/report@sha256:" + "d" * 64,
            "registry": "docker.io",
            "repository": "acme/report",
            "tag": None,
            "digest": "sha256:" + "d" * 64,
        }
    ],
    "labels": {},
    "annotations": {},
    "created_at": "2026-11-01T10:00:00Z",
}

NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": meta(
        "shop",
        ns=None,
        labels={"kubernetes.io/metadata.name": "shop", "team": "checkout"},
        annotations={"kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED},
    ),
    "spec": {"finalizers": ["kubernetes"]},
    "status": {"phase": "Active"},
}
NAMESPACE_DATA = {
    "phase": "Active",
    "labels": {"kubernetes.io/metadata.name": "shop", "team": "checkout"},
    "annotations": {},
    "created_at": "2026-11-01T10:00:00Z",
}

# (normalizer, raw object, record kind, key, namespace, exact data)
CASES = [
    (namespace.NORMALIZER, NAMESPACE, "namespace", "shop", None, NAMESPACE_DATA),
    (deployment.NORMALIZER, DEPLOYMENT, "deployment", "shop/web", "shop", DEPLOYMENT_DATA),
    (revision.NORMALIZER, REPLICASET, "revision", "shop/web-7d9c8b6f5", "shop", REVISION_DATA),
    (hpa.NORMALIZER, HPA, "hpa", "shop/web", "shop", HPA_DATA),
    (service.NORMALIZER, SERVICE, "service", "shop/web", "shop", SERVICE_DATA),
    (ingress.NORMALIZER, INGRESS, "ingress", "shop/web", "shop", INGRESS_DATA),
    (
        network_policy.NORMALIZER,
        NETWORK_POLICY,
        "network_policy",
        "shop/web-allow",
        "shop",
        NETWORK_POLICY_DATA,
    ),
    (node.NORMALIZER, NODE, "node", "node-1", None, NODE_DATA),
    (cronjob.NORMALIZER, CRONJOB, "cronjob", "shop/nightly", "shop", CRONJOB_DATA),
]
RBAC_CASES = [
    (rbac.ROLE, ROLE, "Role/shop/reader"),
    (rbac.ROLE_BINDING, ROLE_BINDING, "RoleBinding/shop/reader"),
    (rbac.CLUSTER_ROLE, CLUSTER_ROLE, "ClusterRole/monitoring"),
    (rbac.CLUSTER_ROLE_BINDING, CLUSTER_ROLE_BINDING, "ClusterRoleBinding/monitoring"),
]
ALL = [(case[0], case[1]) for case in CASES] + [(case[0], case[1]) for case in RBAC_CASES]


@pytest.mark.parametrize(("normalizer", "raw", "kind", "key", "ns", "data"), CASES)
def test_exact_records(
    normalizer: Normalizer[Any], raw: dict, kind: str, key: str, ns: str | None, data: dict
) -> None:
    record = only(run(normalizer, raw))
    assert (record.kind, record.op, record.key, record.namespace) == (kind, "upsert", key, ns)
    assert record.name == raw["metadata"]["name"]
    assert record.uid == raw["metadata"]["uid"]
    assert record.resource_version == "4711"  # on the envelope, never in data
    assert record.data == data
    assert normalizer.kind == kind

    obj = msgspec.json.decode(msgspec.json.encode(raw), type=normalizer.struct)
    gone = only(normalizer.deletes(obj, CTX))
    assert (gone.kind, gone.op, gone.key, gone.data) == (kind, "delete", key, {})


def test_rbac_records() -> None:
    records = {key: only(run(n, raw)) for n, raw, key in RBAC_CASES}
    assert {(r.kind, r.op) for r in records.values()} == {("rbac", "upsert")}
    assert records["Role/shop/reader"].data == {
        "kind": "Role",
        "labels": {},
        "annotations": {},
        "rule_count": 2,
        "rules": [
            {
                "api_groups": [""],
                "resources": ["pods", "pods/log"],
                "verbs": ["get", "list"],
                "resource_names": [],
                "non_resource_urls": [],
            },
            {
                "api_groups": [""],
                "resources": ["secrets"],
                "verbs": ["get"],
                "resource_names": ["db"],
                "non_resource_urls": [],
            },
        ],
        "aggregation_selectors": None,
        "created_at": "2026-11-01T10:00:00Z",
    }
    assert records["RoleBinding/shop/reader"].data == {
        "kind": "RoleBinding",
        "labels": {},
        "annotations": {},
        "role_ref": {"kind": "Role", "name": "reader", "api_group": "rbac.authorization.k8s.io"},
        "subjects": [
            {"kind": "ServiceAccount", "name": "web", "namespace": "shop"},
            {"kind": "User", "name": "zoe@example.com", "namespace": None},
        ],
        "created_at": "2026-11-01T10:00:00Z",
    }
    cluster_role = records["ClusterRole/monitoring"]
    assert cluster_role.namespace is None
    assert cluster_role.data == {
        "kind": "ClusterRole",
        "labels": {},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        "rule_count": 1,
        "rules": [
            {
                "api_groups": [],
                "resources": [],
                "verbs": ["get"],
                "resource_names": [],
                "non_resource_urls": ["/metrics"],
            }
        ],
        "aggregation_selectors": [
            {
                "match_labels": {"rbac.example.com/aggregate-to-monitoring": "true"},
                "match_expressions": [],
            }
        ],
        "created_at": "2026-11-01T10:00:00Z",
    }
    assert records["ClusterRoleBinding/monitoring"].data["subjects"] == [
        {"kind": "Group", "name": "ops", "namespace": None}
    ]
    assert {n.source for n in rbac.NORMALIZERS} == {
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    obj = msgspec.json.decode(msgspec.json.encode(CLUSTER_ROLE), type=rbac.Role)
    gone = only(rbac.CLUSTER_ROLE.deletes(obj, CTX))
    assert (gone.kind, gone.op, gone.key) == ("rbac", "delete", "ClusterRole/monitoring")


def test_no_planted_secret_reaches_any_record() -> None:
    records = [record for n, raw in ALL for record in run(n, raw)]
    encoded = msgspec.json.encode(records)
    assert SECRET.encode() not in encoded
    for planted in SECRETS:
        assert planted.encode() not in encoded
    assert b"last-applied-configuration" not in encoded
    assert b"managedFields" not in encoded and b"kubectl-client-side-apply" not in encoded
    # The planted values were really there to be found.
    raw = msgspec.json.encode([raw for _, raw in ALL])
    assert all(planted.encode() in raw for planted in SECRETS)


def _noisy(raw: dict) -> dict:
    """The same object after changes that mean nothing to the platform."""
    changed = copy.deepcopy(raw)
    changed["metadata"]["resourceVersion"] = "9999"
    changed["metadata"]["managedFields"] = [{**MANAGED_FIELDS[0], "time": "2026-12-24T00:00:00Z"}]
    status = changed.get("status")
    if isinstance(status, dict):
        status["observedGeneration"] = 99
        for cond in status.get("conditions", []):
            cond["lastUpdateTime"] = "2026-12-24T00:00:00Z"
            cond["lastHeartbeatTime"] = "2026-12-24T00:00:00Z"
            cond["lastProbeTime"] = "2026-12-24T00:00:00Z"
    return changed


@pytest.mark.parametrize(("normalizer", "raw"), ALL)
def test_noise_gives_identical_data(normalizer: Normalizer[Any], raw: dict) -> None:
    first = only(run(normalizer, raw))
    again = only(run(normalizer, raw))
    noisy = only(run(normalizer, _noisy(raw)))
    assert msgspec.json.encode(first.data) == msgspec.json.encode(again.data)
    assert msgspec.json.encode(first.data) == msgspec.json.encode(noisy.data)
    assert noisy.resource_version == "9999"


def test_minimal_objects_decode_and_normalize() -> None:
    for normalizer, raw in ALL:
        bare = {"metadata": {"name": "x", "namespace": raw["metadata"].get("namespace")}}
        records = run(normalizer, bare)
        if normalizer is revision.NORMALIZER:
            assert records == []  # without a Deployment owner it is no revision
        else:
            assert only(records).key.endswith("x")


def test_deployment_without_relations() -> None:
    bare = StubLookups()
    ctx = Context(lookups=bare)
    raw = copy.deepcopy(DEPLOYMENT)
    del raw["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
    raw["metadata"]["labels"] = {"app": "web"}
    raw["metadata"]["annotations"] = {}
    raw["spec"]["paused"] = True
    data = only(run(deployment.NORMALIZER, raw, ctx)).data
    assert data["services"] == []
    assert (data["hpa"], data["has_hpa"]) == (None, False)
    assert (data["revision"], data["current_replicaset"]) == (None, None)
    assert data["helm"] is None
    assert data["paused"] is True


def test_deployment_revision_falls_back_to_the_current_replicaset() -> None:
    raw = copy.deepcopy(DEPLOYMENT)
    del raw["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
    data = only(run(deployment.NORMALIZER, raw)).data
    assert (data["revision"], data["current_replicaset"]) == (3, "web-7d9c8b6f5")


def _replicaset(**changes: Any) -> dict:
    raw = copy.deepcopy(REPLICASET)
    raw["metadata"].update(changes)
    return raw


def test_revision_status_and_type() -> None:
    old = _replicaset(name="web-5f4d3c2b1")
    assert only(run(revision.NORMALIZER, old)).data["status"] == "old"
    unknown = Context(lookups=StubLookups())
    assert only(run(revision.NORMALIZER, REPLICASET, unknown)).data["status"] == "unknown"

    plain = _replicaset(annotations={"deployment.kubernetes.io/revision": "4"})
    data = only(run(revision.NORMALIZER, plain)).data
    assert (data["type"], data["helm"], data["change_cause"], data["actor"]) == (
        "rollout",
        None,
        None,
        None,
    )
    argo = _replicaset(
        annotations={
            **REPLICASET["metadata"]["annotations"],
            "argocd.argoproj.io/tracking-id": "shop:apps/Deployment:shop/web",
        }
    )
    assert only(run(revision.NORMALIZER, argo)).data["type"] == "gitops"
    flux = _replicaset(labels={"app": "web", "kustomize.toolkit.fluxcd.io/name": "apps"})
    assert only(run(revision.NORMALIZER, flux)).data["type"] == "gitops"


def test_replicasets_without_a_deployment_give_no_records() -> None:
    raw = _replicaset(ownerReferences=[])
    assert run(revision.NORMALIZER, raw) == []
    obj = msgspec.json.decode(msgspec.json.encode(raw), type=revision.ReplicaSet)
    assert revision.NORMALIZER.deletes(obj, CTX) == []


def test_node_labels_are_filtered_but_location_still_read() -> None:
    raw = copy.deepcopy(NODE)
    raw["metadata"]["labels"] = {
        "topology.kubernetes.io/zone": "eu-west-1c",
        "topology.kubernetes.io/region": "eu-west-1",
        "failure-domain.beta.kubernetes.io/zone": "eu-west-1b",
    }
    ctx = Context(
        lookups=LOOKUPS,
        ignore_node_labels=frozenset({"topology.kubernetes.io/*"}),
    )
    data = only(run(node.NORMALIZER, raw, ctx)).data
    assert (data["region"], data["zone"], data["instance_type"]) == (
        "eu-west-1",
        "eu-west-1c",
        None,
    )
    assert data["labels"] == {"failure-domain.beta.kubernetes.io/zone": "eu-west-1b"}


def test_ingress_class_falls_back_to_the_annotation() -> None:
    raw = copy.deepcopy(INGRESS)
    del raw["spec"]["ingressClassName"]
    raw["spec"]["defaultBackend"] = {"service": {"name": "fallback", "port": {"number": 8080}}}
    data = only(run(ingress.NORMALIZER, raw)).data
    assert data["class"] == "legacy"
    assert data["default_backend"] == {"service": "fallback", "port": 8080, "resource": None}


@pytest.mark.parametrize(
    ("normalizer", "raw"),
    [(deployment.NORMALIZER, DEPLOYMENT), (revision.NORMALIZER, REPLICASET)],
    ids=["deployment", "revision"],
)
def test_relinking_a_kept_record_equals_normalizing_the_object_again(
    normalizer: Any, raw: dict[str, Any]
) -> None:
    # The collector keeps only a record's data; when Services, HPAs or the current revision
    # change it relinks that data instead of normalizing an object it no longer holds.
    alone = Context(lookups=StubLookups())
    before = only(run(normalizer, raw, alone))
    obj = msgspec.json.decode(msgspec.json.encode(raw), type=normalizer.struct)
    relinked = normalizer.relink(dict(before.data), obj.metadata, LOOKUPS)
    assert relinked == only(run(normalizer, raw)).data
    assert relinked != before.data  # the relations did change something


def test_each_template_renders_its_own_containers_whatever_was_rendered_before() -> None:
    """A Deployment's current ReplicaSet has its containers, and is built right after it;
    an older ReplicaSet, or the next Deployment, has others."""
    older = _replicaset(name="web-5f4d3c2b1")
    older["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/web:0.9"
    older["spec"]["template"]["spec"]["initContainers"] = []

    def rendered(raw: dict, normalizer: Normalizer[Any]) -> tuple[Any, ...]:
        data = only(run(normalizer, raw)).data
        return data["containers"], data["init_containers"], data["images"]

    first = rendered(DEPLOYMENT, deployment.NORMALIZER)
    current = rendered(REPLICASET, revision.NORMALIZER)
    old = rendered(older, revision.NORMALIZER)
    again = rendered(DEPLOYMENT, deployment.NORMALIZER)
    assert current == first == again
    assert old[0][0]["image"] == "registry.example/web:0.9"
    assert old[1] == [] and first[1] != []
    listed = [c["image"] for c in older["spec"]["template"]["spec"]["containers"]]
    assert [entry["image"] for entry in old[2]] == listed
    assert old[0][1:] == first[0][1:]  # the sidecar is the same in both


def test_a_container_named_and_imaged_as_one_rendered_before_is_rendered_anew() -> None:
    """Containers rendered before are given again by name and image only while they are
    equal: one that changed elsewhere (its resources, an env var) renders its own, and an
    init container its own `images` entry, past as many others as the renderer keeps."""
    first = only(run(deployment.NORMALIZER, DEPLOYMENT)).data
    changed = copy.deepcopy(DEPLOYMENT)
    web = changed["spec"]["template"]["spec"]["containers"][0]
    web["resources"] = {"requests": {"cpu": "1"}}
    web["env"].append({"name": "REGION", "valueFrom": {"fieldRef": {"fieldPath": "x"}}})
    # The web container again as an init container: the same name and image, other entry.
    changed["spec"]["template"]["spec"]["initContainers"].append(copy.deepcopy(web))
    data = only(run(deployment.NORMALIZER, changed)).data
    assert data["containers"][0]["resources"]["requests"] == {"cpu": "1"}
    assert data["containers"][0]["env"][-1]["from"] == "fieldRef"
    assert data["containers"][1] == first["containers"][1]
    assert data["init_containers"][-1] == data["containers"][0]
    assert [(entry["container"], entry["init"]) for entry in data["images"]] == [
        ("web", False),
        ("sidecar", False),
        ("migrate", True),
        ("web", True),
    ]
    many = copy.deepcopy(DEPLOYMENT)
    many["spec"]["template"]["spec"]["containers"] = [
        {"name": f"c{number}", "image": f"example/c:{number}"} for number in range(40)
    ]
    run(deployment.NORMALIZER, many)
    assert only(run(deployment.NORMALIZER, DEPLOYMENT)).data == first
