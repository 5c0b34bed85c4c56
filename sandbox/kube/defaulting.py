"""Defaults the API server writes into objects, for the kinds the agent reads or writes.

Each function mirrors the `SetDefaults_*` functions of the kind's versioned API package
(pkg/apis/autoscaling/v2/defaults.go, pkg/apis/apps/v1/defaults.go,
pkg/apis/core/v1/defaults.go), which run on every decoded create and update body, so a
field left out reads back with its default. Kinds without an entry get no defaults (a
Lease has none the agent could notice); a core Event reads back with `eventTime: null`, the
zero MicroTime Go writes for a field without `omitempty`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Object = dict[str, Any]

_CPU_80 = {
    "type": "Resource",
    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
}
_SCALE_UP = {
    "stabilizationWindowSeconds": 0,
    "selectPolicy": "Max",
    "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15},
    ],
}
_SCALE_DOWN = {
    "stabilizationWindowSeconds": 300,
    "selectPolicy": "Max",
    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
}


def apply(api_version: str, kind: str, obj: Object) -> Object:
    """Fill `obj`'s unset fields with the API's defaults, in place; returns it."""
    defaults = _BY_KIND.get((api_version, kind))
    if defaults is not None:
        defaults(obj)
    return obj


def _section(parent: Object, key: str) -> Object:
    """`parent[key]`, made an empty object when unset; a value of another type is left to
    the decoder's checks (a detached dict takes the defaults)."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    return value if isinstance(value, dict) else {}


def _hpa(obj: Object) -> None:
    spec = _section(obj, "spec")
    if spec.get("minReplicas") is None:
        spec["minReplicas"] = 1
    if not spec.get("metrics"):
        spec["metrics"] = [copy.deepcopy(_CPU_80)]
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):  # only a behavior that is there gets its gaps filled
        for direction, rules in (("scaleUp", _SCALE_UP), ("scaleDown", _SCALE_DOWN)):
            given = behavior.get(direction)
            if not isinstance(given, dict):
                behavior[direction] = copy.deepcopy(rules)
                continue
            for key, value in rules.items():
                if given.get(key) is None:
                    given[key] = copy.deepcopy(value)


def _image_pull_policy(image: str) -> str:
    if "@" in image:
        return "IfNotPresent"
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _containers(containers: Any) -> None:
    for container in containers if isinstance(containers, list) else ():
        if not isinstance(container, dict):
            continue
        # A struct Go's encoder writes even when empty, `omitempty` notwithstanding.
        container.setdefault("resources", {})
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        if isinstance(container.get("image"), str):
            container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
        for port in container.get("ports") or ():
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")


def _pod_spec(spec: Object) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for key in ("initContainers", "containers"):
        _containers(spec.get(key))


def _pod_template(spec: Object) -> None:
    template = spec.get("template")
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    if isinstance(pod_spec, dict):  # a missing template is validation's to refuse
        _pod_spec(pod_spec)


def _pod(obj: Object) -> None:
    spec = _section(obj, "spec")
    _pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)


def _deployment(obj: Object) -> None:
    spec = _section(obj, "spec")
    if spec.get("replicas") is None:
        spec["replicas"] = 1
    strategy = _section(spec, "strategy")
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = _section(strategy, "rollingUpdate")
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _pod_template(spec)


def _replica_set(obj: Object) -> None:
    spec = _section(obj, "spec")
    if spec.get("replicas") is None:
        spec["replicas"] = 1
    _pod_template(spec)


def _service(obj: Object) -> None:
    spec = _section(obj, "spec")
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])


def _namespace(obj: Object) -> None:
    metadata = _section(obj, "metadata")
    name = metadata.get("name")
    if isinstance(name, str) and name:
        _section(metadata, "labels")["kubernetes.io/metadata.name"] = name


def _secret(obj: Object) -> None:
    obj.setdefault("type", "Opaque")  # SetDefaults_Secret: an unset type is Opaque


def _event(obj: Object) -> None:
    obj.setdefault("eventTime", None)


_BY_KIND: dict[tuple[str, str], Callable[[Object], None]] = {
    ("autoscaling/v2", "HorizontalPodAutoscaler"): _hpa,
    ("apps/v1", "Deployment"): _deployment,
    ("apps/v1", "ReplicaSet"): _replica_set,
    ("v1", "Pod"): _pod,
    ("v1", "Service"): _service,
    ("v1", "Namespace"): _namespace,
    ("v1", "Secret"): _secret,
    ("v1", "Event"): _event,
}
