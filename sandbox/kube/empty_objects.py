"""The empty object of each kind as kube-apiserver encodes it: Go writes the fields without
`omitempty` even when they hold nothing (`null`, `""`, `0`, `{}`), so the body of a
BOOKMARK event, an empty object but for its metadata, is not just its metadata. Copied
from a v1.36 server; kinds not listed encode as their metadata alone (Secrets,
ConfigMaps, ServiceAccounts, ...)."""

from __future__ import annotations

import copy
from typing import Any

from sandbox.kube.resources import Resource

_POD_TEMPLATE: dict[str, Any] = {"metadata": {}, "spec": {"containers": None}}
_RBAC_REF = {"roleRef": {"apiGroup": "", "kind": "", "name": ""}}
_EMPTY: dict[tuple[str, str], dict[str, Any]] = {
    ("", "namespaces"): {"spec": {}, "status": {}},
    ("", "nodes"): {
        "spec": {},
        "status": {
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeletVersion": "",
                "kubeProxyVersion": "",
                "operatingSystem": "",
                "architecture": "",
            },
        },
    },
    ("", "pods"): {"spec": {"containers": None}, "status": {}},
    ("", "services"): {"spec": {}, "status": {"loadBalancer": {}}},
    ("", "events"): {
        "involvedObject": {},
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "eventTime": None,
        "reportingComponent": "",
        "reportingInstance": "",
    },
    ("apps", "deployments"): {
        "spec": {"replicas": 0, "selector": None, "template": _POD_TEMPLATE, "strategy": {}},
        "status": {},
    },
    ("apps", "replicasets"): {
        "spec": {"replicas": 0, "selector": None, "template": _POD_TEMPLATE},
        "status": {"replicas": 0},
    },
    ("autoscaling", "horizontalpodautoscalers"): {
        "spec": {"scaleTargetRef": {"kind": "", "name": ""}, "maxReplicas": 0},
        "status": {"desiredReplicas": 0, "currentMetrics": None},
    },
    ("batch", "jobs"): {"spec": {"template": _POD_TEMPLATE}, "status": {}},
    ("batch", "cronjobs"): {
        "spec": {
            "schedule": "",
            "jobTemplate": {"metadata": {}, "spec": {"template": _POD_TEMPLATE}},
        },
        "status": {},
    },
    ("networking.k8s.io", "ingresses"): {"spec": {}, "status": {"loadBalancer": {}}},
    ("networking.k8s.io", "networkpolicies"): {"spec": {"podSelector": {}}},
    ("rbac.authorization.k8s.io", "roles"): {"rules": None},
    ("rbac.authorization.k8s.io", "clusterroles"): {"rules": None},
    ("rbac.authorization.k8s.io", "rolebindings"): _RBAC_REF,
    ("rbac.authorization.k8s.io", "clusterrolebindings"): _RBAC_REF,
    ("coordination.k8s.io", "leases"): {"spec": {}},
}


def empty(resource: Resource) -> dict[str, Any]:
    """The kind's empty object, without its kind, apiVersion and metadata."""
    return copy.deepcopy(_EMPTY.get((resource.group, resource.plural), {}))
