"""Applying an action as a plan: once its Deployment and HPAs are read (and found neither
ignored, nor being deleted, nor released), what to write is decided by `plan_apply`, pure,
and carried out in order by `scheduler.apply`.

The plan, by what the HPA is:
- none: create a provisional HPA (named after the Deployment, see
  `scheduler.names.provisional_hpa_name`), keeping the Deployment's replicas (or those a
  half-done revert journalled) as its originals;
- not managed: keep its min, max, spec and the owners of min and max as originals, then
  apply min and max;
- managed by this template, action and window: nothing to write when the annotations match
  (only the Deployment's replicas raised to the new min when below it); bounds changed by
  someone else: nothing (the revert scan releases it), unless a GitOps tool synced them
  back and the policy re-asserts (`scheduler.gitops`): then the window again, at most once
  per interval, and a `gitops_conflict` error; else apply (a changed min:max, or only
  `run_until`, name or priority);
- managed by another owner whose window is still on: a `conflict` error, nothing written;
- managed by an owner whose window is over: its revert event first, then one patch taking
  it over (its originals kept, unless someone else changed min or max, whose values then
  become the originals), then the Kubernetes Event saying so.

The bounds go on by server-side apply as `moonin-agent`, forced: the HPA's own manager (a
`kubectl apply`, Argo CD, Flux, Helm) gives them up for the window, and `managedFields`
names us as their owner until the revert hands them back (`scheduler.ownership`). Every
write carries the resourceVersion that was read
(`kube.workloads.ObjectMeta.precondition`).

How it fails: nothing here raises for an object's content.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from kube.workloads import Deployment, Hpa
from scheduler import annotations as notes
from scheduler import events, gitops, names, ownership
from scheduler.annotations import Window
from scheduler.kubeapi import HPA_API_VERSION, HPA_KIND
from scheduler.steps import (
    Applied,
    ApplyHpa,
    CreateHpa,
    Enqueue,
    RaiseReplicas,
    Report,
    Skip,
    Step,
    TakenOver,
)

# Decides whether the window an HPA is managed for is over, and why (None: still on).
ReasonFor = Callable[[Window], events.RevertReason | None]

GITOPS_CONFLICT = "gitops_conflict"
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
    gitops: gitops.GitopsPolicy = gitops.YIELD


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
            return _overridden(view, hpa, managed, now)
        wanted = planned.annotations(managed.kept)
        current = hpa.metadata.annotations
        if all(current.get(key) == value for key, value in wanted.items()):
            return [RaiseReplicas(planned.min_replicas)]
        return [_patch(planned, hpa, managed.kept, current.get(notes.REASSERTED_AT))]
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


def _overridden(view: ApplyView, hpa: Hpa, managed: Window, now: datetime) -> list[Step]:
    """Our window, its bounds changed by someone else: left for the revert scan, which
    releases it; unless a GitOps tool synced them back and the policy re-asserts the
    window (`scheduler.gitops`): then applied again once its interval has passed."""
    synced = gitops.synced_back(hpa, managed) if view.gitops.reasserts else None
    if synced is None:
        return [Skip("overridden")]  # the revert scan of this cycle releases it
    if not view.gitops.reassert_due(hpa, now):
        return [Skip("reassert_later")]
    planned = view.planned
    message = (
        f"{synced.tool} ({', '.join(synced.managers)}) set hpa {hpa.metadata.key} back to "
        f"{hpa.spec.bounds[0]}:{hpa.spec.bounds[1]} during the window; applied again, at "
        f"most once every {view.gitops.reassert_seconds:g} s"
    )
    stamp = now.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return [_patch(planned, hpa, managed.kept, stamp), Report(GITOPS_CONFLICT, message)]


def _patch(
    planned: Window, hpa: Hpa, originals: notes.Originals, reasserted_at: str | None = None
) -> ApplyHpa:
    read = hpa.metadata
    annotations = {**planned.annotations(originals), notes.REASSERTED_AT: reasserted_at}
    config = {
        "apiVersion": HPA_API_VERSION,
        "kind": HPA_KIND,
        "metadata": {
            "name": read.name,
            "namespace": read.namespace,
            **read.precondition(),
            # Left out, a key applied before is removed (no one else owns our keys).
            "annotations": {key: value for key, value in annotations.items() if value is not None},
        },
        "spec": {"minReplicas": planned.min_replicas, "maxReplicas": planned.max_replicas},
    }
    resized = hpa.spec.bounds != (planned.min_replicas, planned.max_replicas)
    return ApplyHpa(read, config, Applied(originals, resized))


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
    """The HPA as it is now, as a window's originals. Owners of a bound only we own are
    those an earlier window noted (a takeover, or a revert's hand-back still to be made)."""
    noted = ownership.Owners.read(hpa.metadata.annotations.get(notes.ORIGINAL_MANAGERS))
    return notes.Originals(
        provisional=False,
        replicas=deployment.spec.replicas,
        min_replicas=hpa.spec.min_replicas,
        max_replicas=hpa.spec.max_replicas,
        spec=hpa.spec_json,
        owners=ownership.owners_of(hpa.metadata, noted),
    )
