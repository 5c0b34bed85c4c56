"""Applying an action as a plan: once its Deployment and HPAs are read (and found neither
ignored, nor being deleted, nor released), what to write is decided by `plan_apply`, pure,
and carried out in order by `scheduler.apply`.

The plan, by what the HPA is:
- none: create a provisional HPA (named after the Deployment, see
  `scheduler.names.provisional_hpa_name`), keeping the Deployment's replicas (or those a
  half-done revert journalled) as its originals;
- not managed: keep its min, max and spec as originals, then patch min and max;
- managed by this template, action and window: nothing to write when the annotations match
  (only the Deployment's replicas raised to the new min when below it); bounds changed by
  someone else: nothing (the revert scan releases it); else patch (a changed min:max, or
  only `run_until`, name or priority);
- managed by another owner whose window is still on: a `conflict` error, nothing written;
- managed by an owner whose window is over: its revert event first, then one patch taking
  it over (its originals kept, unless someone else changed min or max, whose values then
  become the originals), then the Kubernetes Event saying so.

Every patch carries the resourceVersion that was read (`kube.workloads.ObjectMeta.precondition`).

How it fails: nothing here raises for an object's content.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from kube.workloads import Deployment, Hpa
from scheduler import annotations as notes
from scheduler import events, names
from scheduler.annotations import Window
from scheduler.kubeapi import HPA_API_VERSION, HPA_KIND
from scheduler.steps import (
    Applied,
    CreateHpa,
    Enqueue,
    PatchHpa,
    RaiseReplicas,
    Report,
    Skip,
    Step,
    TakenOver,
)

# Decides whether the window an HPA is managed for is over, and why (None: still on).
ReasonFor = Callable[[Window], events.RevertReason | None]

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "moonin-agent"
# A provisional HPA scales on CPU like an HPA created with no metrics would by default,
# written out so it does not depend on the API server's defaulting.
PROVISIONAL_METRICS = (
    {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    },
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyView:
    """What an apply is decided on: the action's window and the objects read for it."""

    planned: Window
    deployment: Deployment
    hpas: list[Hpa]  # of the action's namespace (the names a provisional HPA must avoid)
    hpa: Hpa | None  # the one scaling the Deployment
    journalled_replicas: int | None  # replicas a half-done revert journalled for it
    cluster_id: str
    reason_for: ReasonFor


def plan_apply(view: ApplyView, now: datetime) -> list[Step]:
    """The writes that put `view.planned` on its HPA, in the order they must be made."""
    planned, hpa = view.planned, view.hpa
    if hpa is None:
        return [_provisional(view)]
    managed = notes.read_window(hpa)
    if managed is None:
        return [_patch(planned, hpa, originals_of(view.deployment, hpa))]
    if managed.same_window(planned):
        if managed.overridden:
            return [Skip("overridden")]  # the revert scan of this cycle releases it
        wanted = planned.annotations(managed.kept)
        current = hpa.metadata.annotations
        if all(current.get(key) == value for key, value in wanted.items()):
            return [RaiseReplicas(planned.min_replicas)]
        return [_patch(planned, hpa, managed.kept)]
    reason = view.reason_for(managed)
    if reason is None:
        message = (
            f"hpa {hpa.metadata.key} is managed by template "
            f"{managed.template_id} action {managed.action_id} until {managed.run_until}"
        )
        return [Report("conflict", message)]
    originals = originals_of(view.deployment, hpa) if reason == "overridden" else managed.kept
    said = (
        f"template {managed.template_name or managed.template_id} action "
        f"{managed.action_id}: window from {managed.window_start} ended ({reason}); taken over"
    )
    # The old window is over: its revert event is durable before the takeover write.
    return [
        Enqueue(
            events.revert_event(cluster_id=view.cluster_id, window=managed, reason=reason, now=now)
        ),
        _patch(planned, hpa, originals),
        TakenOver(hpa, said),
    ]


def _patch(planned: Window, hpa: Hpa, originals: notes.Originals) -> PatchHpa:
    patch = {
        "metadata": {**hpa.metadata.precondition(), "annotations": planned.annotations(originals)},
        "spec": {"minReplicas": planned.min_replicas, "maxReplicas": planned.max_replicas},
    }
    resized = hpa.spec.bounds != (planned.min_replicas, planned.max_replicas)
    return PatchHpa(hpa.metadata, patch, Applied(originals, resized))


def _provisional(view: ApplyView) -> CreateHpa:
    planned = view.planned
    journalled = view.journalled_replicas
    originals = notes.Originals(
        provisional=True,
        replicas=journalled if journalled is not None else view.deployment.spec.replicas,
        min_replicas=None,
        max_replicas=None,
        spec=None,
    )
    name = names.provisional_hpa_name(planned.deployment, {hpa.metadata.name for hpa in view.hpas})
    written = {k: v for k, v in planned.annotations(originals).items() if v is not None}
    body = {
        "apiVersion": HPA_API_VERSION,
        "kind": HPA_KIND,
        "metadata": {
            "name": name,
            "namespace": planned.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": written,
        },
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": planned.deployment,
            },
            "minReplicas": planned.min_replicas,
            "maxReplicas": planned.max_replicas,
            "metrics": [dict(metric) for metric in PROVISIONAL_METRICS],
        },
    }
    return CreateHpa(planned.namespace, name, body, Applied(originals, resized=True))


def originals_of(deployment: Deployment, hpa: Hpa) -> notes.Originals:
    return notes.Originals(
        provisional=False,
        replicas=deployment.spec.replicas,
        min_replicas=hpa.spec.min_replicas,
        max_replicas=hpa.spec.max_replicas,
        spec=hpa.spec_json,
    )
