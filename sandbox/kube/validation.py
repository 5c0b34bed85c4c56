"""The API server's validation of an object about to be stored: 422 Invalid, one cause per
field, worded as upstream words it.

What is checked is what the agent or a test could get wrong: object names by kind
(DNS-1123 subdomain, DNS-1123 label, or path segment for RBAC and core Events; a
generateName as a prefix), label and annotation keys and values, HorizontalPodAutoscalers
(min and max, the scale target, Resource metrics), Deployments and ReplicaSets (selector
against template labels, containers named and with an image), Lease durations, and a core
Event's namespace. Sources: staging/src/k8s.io/apimachinery/pkg/api/
validation (objectmeta.go, generic.go), staging/src/k8s.io/apimachinery/pkg/util/validation/
validation.go (the regexes and messages), pkg/apis/autoscaling/validation/validation.go,
pkg/apis/apps/validation/validation.go, pkg/apis/coordination/validation/validation.go and
pkg/apis/core/validation/events.go.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sandbox.kube.status import (
    FieldError,
    forbidden_field,
    invalid_field,
    required_field,
    too_long_field,
    unsupported_field,
)

Object = dict[str, Any]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(_LABEL)
_DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_ANNOTATIONS_LIMIT = 256 * 1024

_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
    "[a-z0-9])?)*')"
)
_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_QUALIFIED_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?"
    "[A-Za-z0-9])?')"
)


def dns_subdomain(value: str) -> list[str]:
    return _dns_name(value, 253, _DNS_SUBDOMAIN, _SUBDOMAIN_MESSAGE)


def dns_label(value: str) -> list[str]:
    return _dns_name(value, 63, _DNS_LABEL, _LABEL_MESSAGE)


def _dns_name(value: str, limit: int, pattern: re.Pattern[str], message: str) -> list[str]:
    problems = []
    if len(value) > limit:
        problems.append(f"must be no more than {limit} characters")
    if not pattern.fullmatch(value):
        problems.append(message)
    return problems


def path_segment(value: str) -> list[str]:
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


def qualified_name(value: str) -> list[str]:
    prefix, slash, name = value.rpartition("/")
    problems = []
    if slash:
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            problems += [f"prefix part {p}" for p in dns_subdomain(prefix)]
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED.fullmatch(name):
        problems.append(_QUALIFIED_MESSAGE)
    return problems


# Kinds named by a DNS-1123 label; RBAC kinds take any path segment (`system:controller:x`),
# and so do core/v1 Events, whose names upstream leaves unchecked for old clients' sake
# (pkg/apis/core/validation/events.go) beyond what a storage key needs.
_LABEL_NAMED = {("", "Namespace"), ("", "Service")}
_SEGMENT_NAMED = {
    ("rbac.authorization.k8s.io", k)
    for k in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
} | {("", "Event")}


def validate(group: str, kind: str, obj: Object) -> list[FieldError]:
    """Every rule `obj` breaks; empty when the server would store it."""
    errors = _metadata(group, kind, obj.get("metadata") or {})
    rules = _BY_KIND.get((group, kind))
    if rules is not None:
        errors += rules(obj)
    return errors


def _metadata(group: str, kind: str, metadata: Object) -> list[FieldError]:
    errors: list[FieldError] = []
    if (group, kind) in _LABEL_NAMED:
        rule = dns_label
    elif (group, kind) in _SEGMENT_NAMED:
        rule = path_segment
    else:
        rule = dns_subdomain
    name = metadata.get("name")
    prefix = metadata.get("generateName")
    if prefix:
        # The server adds five letters and digits to it: a trailing dash is fine.
        masked = prefix[:-2] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix
        errors += [invalid_field("metadata.generateName", prefix, p) for p in rule(masked)]
    if not name and not prefix:
        errors.append(required_field("metadata.name", "name or generateName is required"))
    elif name:
        errors += [invalid_field("metadata.name", name, p) for p in rule(name)]
    for key, value in (metadata.get("labels") or {}).items():
        errors += [invalid_field("metadata.labels", key, p) for p in qualified_name(key)]
        if len(value) > 63:
            errors.append(
                invalid_field("metadata.labels", value, "must be no more than 63 characters")
            )
        if not _LABEL_VALUE.fullmatch(value):
            errors.append(invalid_field("metadata.labels", value, _LABEL_VALUE_MESSAGE))
    annotations = metadata.get("annotations") or {}
    size = 0
    for key, value in annotations.items():
        errors += [
            invalid_field("metadata.annotations", key, p) for p in qualified_name(key.lower())
        ]
        size += len(key) + len(value)
    if size > _ANNOTATIONS_LIMIT:
        errors.append(too_long_field("metadata.annotations", _ANNOTATIONS_LIMIT))
    return errors


def _hpa(obj: Object) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    target = spec.get("scaleTargetRef") or {}
    if not target.get("kind"):
        errors.append(required_field("spec.scaleTargetRef.kind"))
    else:
        errors += [
            invalid_field("spec.scaleTargetRef.kind", target["kind"], p)
            for p in path_segment(target["kind"])
        ]
    if not target.get("name"):
        errors.append(required_field("spec.scaleTargetRef.name"))
    else:
        errors += [
            invalid_field("spec.scaleTargetRef.name", target["name"], p)
            for p in path_segment(target["name"])
        ]
    low = spec.get("minReplicas")
    high = spec.get("maxReplicas") or 0
    if low is not None and low < 1:
        errors.append(invalid_field("spec.minReplicas", low, "must be greater than or equal to 1"))
    if high == 0:
        errors.append(required_field("spec.maxReplicas", "must be set and greater than 0"))
    elif high < 1:
        errors.append(invalid_field("spec.maxReplicas", high, "must be greater than or equal to 1"))
    if low is not None and high < low:
        errors.append(
            invalid_field(
                "spec.maxReplicas", high, "must be greater than or equal to `minReplicas`"
            )
        )
    metrics = spec.get("metrics") or ()
    for index, metric in enumerate(metrics):
        errors += _metric(metric, f"spec.metrics[{index}]")
    if low == 0 and not any(
        isinstance(m, dict) and m.get("type") in ("Object", "External") for m in metrics
    ):
        errors.append(
            forbidden_field(
                "spec.metrics",
                "must specify at least one Object or External metric to support scaling to "
                "zero replicas",
            )
        )
    return errors


# A metric's type and the member that must carry its source, in the order upstream looks.
_SOURCES = {
    "Object": "object",
    "External": "external",
    "Pods": "pods",
    "Resource": "resource",
    "ContainerResource": "containerResource",
}


def _metric(metric: Object, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    kind = metric.get("type") or ""
    supported = tuple(sorted(_SOURCES))
    if not kind:
        errors.append(required_field(f"{path}.type", "must specify a metric source type"))
    if kind not in _SOURCES:
        errors.append(unsupported_field(f"{path}.type", kind, supported))
    present = [member for member in _SOURCES.values() if metric.get(member) is not None]
    if present and present[0] == "resource":  # upstream checks only the first one present
        errors += _resource_source(metric["resource"], f"{path}.resource")
    expected = _SOURCES.get(kind)
    if expected is None:  # upstream's switch says it a second time
        errors.append(unsupported_field(f"{path}.type", kind, supported))
    elif metric.get(expected) is None:
        errors.append(
            required_field(
                f"{path}.{expected}", "must populate information for the given metric source"
            )
        )
    if len(present) != 1:
        errors += [
            forbidden_field(f"{path}.{member}", "must populate the given metric source only")
            for member in present
            if member != expected
        ]
    return errors


def _resource_source(source: Object, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not source.get("name"):
        errors.append(required_field(f"{path}.name", "must specify a resource name"))
    target = source.get("target") or {}
    kind = target.get("type") or ""
    if not kind:
        errors.append(required_field(f"{path}.target.type", "must specify a metric target type"))
    if kind not in ("Utilization", "Value", "AverageValue"):
        errors.append(
            invalid_field(
                f"{path}.target.type", kind, "must be either Utilization, Value, or AverageValue"
            )
        )
    utilization = target.get("averageUtilization")
    if utilization is not None and utilization < 1:
        errors.append(
            invalid_field(
                f"{path}.target.averageUtilization", utilization, "must be greater than 0"
            )
        )
    if utilization is None and target.get("averageValue") is None:
        errors.append(
            required_field(
                f"{path}.target.averageUtilization",
                "must set either a target raw value or a target utilization",
            )
        )
    if utilization is not None and target.get("averageValue") is not None:
        errors.append(
            forbidden_field(
                f"{path}.target.averageValue",
                "may not set both a target raw value and a target utilization",
            )
        )
    return errors


def _selector_matches(selector: Object, labels: dict[str, str]) -> bool:
    wanted = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    for requirement in selector.get("matchExpressions") or ():
        key, values = requirement.get("key"), requirement.get("values") or []
        operator = requirement.get("operator")
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _workload(obj: Object) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    replicas = spec.get("replicas")
    if replicas is not None and replicas < 0:
        errors.append(
            invalid_field("spec.replicas", replicas, "must be greater than or equal to 0")
        )
    selector = spec.get("selector")
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errors.append(required_field("spec.selector"))
    elif not _selector_matches(selector, labels):
        errors.append(
            invalid_field(
                "spec.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            )
        )
    containers = (template.get("spec") or {}).get("containers")
    if not containers:
        errors.append(required_field("spec.template.spec.containers"))
    for index, container in enumerate(containers or ()):
        path = f"spec.template.spec.containers[{index}]"
        if not container.get("name"):
            errors.append(required_field(f"{path}.name"))
        else:
            errors += [
                invalid_field(f"{path}.name", container["name"], p)
                for p in dns_label(container["name"])
            ]
        if not container.get("image"):
            errors.append(required_field(f"{path}.image"))
    return errors


def _lease(obj: Object) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        errors.append(
            invalid_field("spec.leaseDurationSeconds", duration, "must be greater than 0")
        )
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        errors.append(
            invalid_field(
                "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
            )
        )
    if spec.get("preferredHolder") and not spec.get("strategy"):
        errors.append(
            forbidden_field(
                "spec.preferredHolder", "may only be specified if `strategy` is defined"
            )
        )
    return errors


def _core_event(obj: Object) -> list[FieldError]:
    namespace = (obj.get("metadata") or {}).get("namespace")
    involved = (obj.get("involvedObject") or {}).get("namespace")
    if involved and involved != namespace:
        return [
            invalid_field("involvedObject.namespace", involved, "does not match event.namespace")
        ]
    return []


_BY_KIND: dict[tuple[str, str], Callable[[Object], list[FieldError]]] = {
    ("autoscaling", "HorizontalPodAutoscaler"): _hpa,
    ("apps", "Deployment"): _workload,
    ("apps", "ReplicaSet"): _workload,
    ("coordination.k8s.io", "Lease"): _lease,
    ("", "Event"): _core_event,
}
