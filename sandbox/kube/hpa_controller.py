"""The horizontal-pod-autoscaler controller, without metrics: it keeps each HPA's target
within the HPA's bounds and reports what it saw and wants.

The real controller (https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/,
pkg/controller/podautoscaler/horizontal.go) computes a desired replica count from metrics
and clamps it to `[minReplicas (default 1), maxReplicas]`. The fake cluster has no metrics,
so the count it starts from is the target's own `spec.replicas`: the controller only clamps.
As upstream (reconcileAutoscaler), a target scaled to 0 while `minReplicas` is not 0 has
autoscaling disabled (left at 0, desired 0); one outside the bounds is brought to the
nearest; one within them is for metrics to move, and with none to read the real controller
reports the replicas it found and leaves `desiredReplicas` as it was (0 on a new HPA), as a
cluster without a metrics server shows. A sync writes the target's `spec.replicas` (a
Deployment or a ReplicaSet: `scaleTargetRef`), then the HPA's status as it settles:
`currentReplicas` as the target now has it (upstream's first sync reports the count it
found, the next one, 15 seconds later, the new count), `desiredReplicas`, and
`lastScaleTime` when it rescaled; the HPA's conditions are kept (`setStatus`). It syncs
when an HPA is written and when a target is, at once rather than every 15 seconds.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import resources
from sandbox.kube.controllers import register
from sandbox.kube.resources import Resource
from sandbox.kube.store import Change, Store, timestamp

NAME = "horizontal-pod-autoscaler"
HPA = resources.resolve("horizontalpodautoscalers.autoscaling")
_TARGETS = {(r.group, r.kind): r for r in resources.RESOURCES if r.scale}


@register(NAME)
class HorizontalPodAutoscaler:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._syncing = False  # its own writes come back to it: they need no sync

    def react(self, resource: Resource, change: Change) -> None:
        if self._syncing or change.type == "DELETED":
            return
        entry = change.entry
        if resource == HPA:
            hpas = [entry.decode()]
        elif resource in _TARGETS.values():
            _, entries = self._store.snapshot(HPA, entry.namespace)
            hpas = [e.decode() for e in entries]
            hpas = [hpa for hpa in hpas if _target(hpa) == (resource, entry.name)]
        else:
            return
        self._syncing = True
        try:
            for hpa in hpas:
                self._sync(hpa)
        finally:
            self._syncing = False

    def _sync(self, hpa: dict[str, Any]) -> None:
        target = _target(hpa)
        if target is None:
            return
        resource, name = target
        namespace = hpa["metadata"]["namespace"]
        found = self._store.snapshot(resource, namespace)[1]
        workload = next((e.decode() for e in found if e.name == name), None)
        if workload is None:
            return
        spec = hpa.get("spec") or {}
        current = (workload.get("spec") or {}).get("replicas", 1)
        low, high = spec.get("minReplicas", 1), spec.get("maxReplicas", current)
        desired: int | None = None  # within bounds: metrics decide, and there are none
        rescaled = False
        if current == 0 and low != 0:
            desired = 0
        elif not low <= current <= high:
            desired = min(max(current, low), high)
            self._store.modify(resource, namespace, name, _replicas(desired))
            current, rescaled = desired, True  # as the next sync finds it
        status = _status(current, desired, rescaled)
        self._store.modify(HPA, namespace, hpa["metadata"]["name"], status)


def _target(hpa: dict[str, Any]) -> tuple[Resource, str] | None:
    ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
    group = str(ref.get("apiVersion", "")).rpartition("/")[0]
    resource = _TARGETS.get((group, ref.get("kind")))
    return (resource, ref["name"]) if resource is not None and ref.get("name") else None


def _replicas(desired: int) -> Any:
    def scaled(workload: dict[str, Any]) -> dict[str, Any]:
        workload.setdefault("spec", {})["replicas"] = desired
        return workload

    return scaled


def _status(current: int, desired: int | None, rescaled: bool) -> Any:
    def reported(hpa: dict[str, Any]) -> dict[str, Any]:
        before = hpa.get("status") or {}
        wanted = before.get("desiredReplicas", 0) if desired is None else desired
        after: dict[str, Any] = {"currentReplicas": current, "desiredReplicas": wanted}
        last_scale = timestamp() if rescaled else before.get("lastScaleTime")
        if last_scale:
            after["lastScaleTime"] = last_scale
        if before.get("conditions"):
            after["conditions"] = before["conditions"]
        hpa["status"] = after
        return hpa

    return reported
