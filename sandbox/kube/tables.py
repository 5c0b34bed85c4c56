"""The columns and cells of a `Table` answer, as the real server's printers write them.

`kubectl get` asks for `application/json;as=Table;g=meta.k8s.io;v=v1` and prints what it
gets. kube-apiserver fills the table with the printer of each built-in kind
(pkg/printers/internalversion/printers.go); the fake has those of the kinds tests look at:
Deployments (NAME READY UP-TO-DATE AVAILABLE AGE, then wide CONTAINERS IMAGES SELECTOR),
ReplicaSets (NAME DESIRED CURRENT READY AGE, wide the same three), Pods (NAME READY STATUS
RESTARTS AGE, wide IP NODE NOMINATED NODE READINESS GATES), Namespaces (NAME STATUS AGE),
HorizontalPodAutoscalers (NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE),
ConfigMaps (NAME DATA AGE), Secrets (NAME TYPE DATA AGE), Leases (NAME HOLDER AGE) and
Services (NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE, wide SELECTOR). Every other kind
gets the default table convertor's columns
(staging/src/k8s.io/apiserver/pkg/registry/rest/table.go): Name and `Created At`, an RFC
3339 date. Wide columns have priority 1, as upstream, and are always sent (kubectl hides
them unless `-o wide`). Ages are printed as duration.HumanDuration prints them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sandbox.kube import table_columns
from sandbox.kube.resources import Resource
from sandbox.kube.scale import selector_string

Cells = Callable[[dict[str, Any], datetime], list[Any]]


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m" if whole % 60 == 0 else f"{minutes}m{whole % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, (hours // 24) % 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def _created(obj: dict[str, Any]) -> datetime | None:
    return _time((obj.get("metadata") or {}).get("creationTimestamp"))


def _age(obj: dict[str, Any], now: datetime) -> str:
    created = _created(obj)
    return "<unknown>" if created is None else human_duration((now - created).total_seconds())


def _template_cells(obj: dict[str, Any]) -> list[str]:
    spec = obj.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    names = ",".join(str(c.get("name", "")) for c in containers)
    images = ",".join(str(c.get("image", "")) for c in containers)
    return [names, images, selector_string(spec.get("selector"))]


def _deployment(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, state = obj.get("spec") or {}, obj.get("status") or {}
    ready = f"{state.get('readyReplicas', 0)}/{spec.get('replicas', 0)}"
    updated, available = state.get("updatedReplicas", 0), state.get("availableReplicas", 0)
    return [ready, updated, available, _age(obj, now), *_template_cells(obj)]


def _replica_set(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, state = obj.get("spec") or {}, obj.get("status") or {}
    counts = [spec.get("replicas", 0), state.get("replicas", 0), state.get("readyReplicas", 0)]
    return [*counts, _age(obj, now), *_template_cells(obj)]


def _pod_reason(obj: dict[str, Any]) -> str:
    """The STATUS column: the phase, overridden by what the containers are going through."""
    state = obj.get("status") or {}
    reason = state.get("reason") or state.get("phase") or ""
    running = False
    for container in reversed(state.get("containerStatuses") or []):
        current = container.get("state") or {}
        waiting, terminated = current.get("waiting"), current.get("terminated")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated:
            reason = terminated.get("reason") or (
                f"Signal:{terminated['signal']}"
                if terminated.get("signal")
                else f"ExitCode:{terminated.get('exitCode', 0)}"
            )
        elif "running" in current and container.get("ready"):
            running = True
    if reason == "Completed" and running:
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in state.get("conditions") or []
        )
        reason = "Running" if ready else "NotReady"
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if state.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, state = obj.get("spec") or {}, obj.get("status") or {}
    statuses = state.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready") and "running" in (c.get("state") or {}))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    finished = [
        moment
        for c in statuses
        if (moment := _time(((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt")))
    ]
    restart_cell = str(restarts)
    if restarts and finished:  # "3 (5m ago)": when the last container restarted
        restart_cell += f" ({human_duration((now - max(finished)).total_seconds())} ago)"
    gates = spec.get("readinessGates") or []
    gate_cell = "<none>"
    if gates:
        met = {c.get("type") for c in state.get("conditions") or [] if c.get("status") == "True"}
        done = sum(1 for gate in gates if gate.get("conditionType") in met)
        gate_cell = f"{done}/{len(gates)}"
    return [
        f"{ready}/{len(spec.get('containers') or [])}",
        _pod_reason(obj),
        restart_cell,
        _age(obj, now),
        state.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        state.get("nominatedNodeName") or "<none>",
        gate_cell,
    ]


def _namespace(obj: dict[str, Any], now: datetime) -> list[Any]:
    return [(obj.get("status") or {}).get("phase", ""), _age(obj, now)]


def _config_map(obj: dict[str, Any], now: datetime) -> list[Any]:
    data = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [data, _age(obj, now)]


def _hpa_metric(metric: dict[str, Any]) -> str:
    kind = metric.get("type", "")
    source = metric.get({"ContainerResource": "containerResource"}.get(kind, kind.lower())) or {}
    target = source.get("target") or {}
    if target.get("averageUtilization") is not None:
        wanted = f"{target['averageUtilization']}%"
    else:
        wanted = str(target.get("averageValue") or target.get("value") or "<unset>")
    prefix = f"{source['name']}: " if kind in ("Resource", "ContainerResource") else ""
    return f"{prefix}<unknown>/{wanted}"  # no metrics in the fake: nothing is ever current


def _hpa(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, state = obj.get("spec") or {}, obj.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    metrics = [_hpa_metric(m) for m in spec.get("metrics") or []]
    targets = ", ".join(metrics[:3]) or "<none>"
    if len(metrics) > 3:
        targets += f" + {len(metrics) - 3} more..."
    low = spec.get("minReplicas")
    return [
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        targets,
        "<unset>" if low is None else str(low),
        spec.get("maxReplicas", 0),
        state.get("currentReplicas", 0),
        _age(obj, now),
    ]


def _secret(obj: dict[str, Any], now: datetime) -> list[Any]:
    return [obj.get("type", ""), len(obj.get("data") or {}), _age(obj, now)]


def _lease(obj: dict[str, Any], now: datetime) -> list[Any]:
    return [(obj.get("spec") or {}).get("holderIdentity") or "", _age(obj, now)]


def _external_ip(spec: dict[str, Any], state: dict[str, Any]) -> str:
    kind, external = spec.get("type", "ClusterIP"), list(spec.get("externalIPs") or [])
    if kind == "ExternalName":
        return str(spec.get("externalName", ""))
    if kind == "LoadBalancer":
        ingress = (state.get("loadBalancer") or {}).get("ingress") or []
        found = [
            i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")
        ]
        return ",".join([*found, *external]) or "<pending>"
    return ",".join(external) or "<none>"


def _port(port: dict[str, Any]) -> str:
    node_port = f":{port['nodePort']}" if port.get("nodePort") else ""
    return f"{port.get('port')}{node_port}/{port.get('protocol', 'TCP')}"


def _service(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, state = obj.get("spec") or {}, obj.get("status") or {}
    selector = spec.get("selector") or {}
    return [
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or "<none>",
        _external_ip(spec, state),
        ",".join(_port(port) for port in spec.get("ports") or []) or "<none>",
        _age(obj, now),
        ",".join(f"{key}={selector[key]}" for key in sorted(selector)) or "<none>",
    ]


# The cells of each kind with a printer of its own (its columns: `table_columns`).
_PRINTERS: dict[tuple[str, str], Cells] = {
    ("apps", "deployments"): _deployment,
    ("apps", "replicasets"): _replica_set,
    ("", "pods"): _pod,
    ("", "namespaces"): _namespace,
    ("", "configmaps"): _config_map,
    ("", "secrets"): _secret,
    ("coordination.k8s.io", "leases"): _lease,
    ("", "services"): _service,
    ("autoscaling", "horizontalpodautoscalers"): _hpa,
}


def _default(obj: dict[str, Any], now: datetime) -> list[Any]:
    created = _created(obj)
    return [created.strftime("%Y-%m-%dT%H:%M:%SZ") if created else None]


def printed(resource: Resource) -> bool:
    """Whether the kind has a printer of its own (not the default convertor)."""
    return (resource.group, resource.plural) in _PRINTERS


def columns(resource: Resource) -> list[dict[str, Any]]:
    return [
        table_columns.NAME,
        *table_columns.COLUMNS.get((resource.group, resource.plural), table_columns.DEFAULT),
    ]


def cells(resource: Resource, obj: dict[str, Any], now: datetime | None = None) -> list[Any]:
    """One row's cells for `obj` (decoded), its name first."""
    printer = _PRINTERS.get((resource.group, resource.plural), _default)
    name = (obj.get("metadata") or {}).get("name", "")
    return [name, *printer(obj, now or datetime.now(UTC))]
