"""The steps a plan is made of, for both loops: what `scheduler.apply_plan.plan_apply` and
`scheduler.revert_plan.plan_revert` decide, and what `scheduler.executor.perform` carries
out, in order. Data only: each step says one write (or one event) and what follows it.

How it fails: nothing here fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kube.workloads import Hpa, ObjectMeta
from scheduler.annotations import Originals
from scheduler.kubeapi import Obj
from scheduler.ownership import Owners
from scheduler.store import PendingRestore
from shipper.records import ScalingEvent


@dataclass(frozen=True, slots=True)
class Applied:
    """After an apply's HPA write: the apply event, a Kubernetes Event when min:max changed
    (or the event is new), and the Deployment's replicas raised to the new min."""

    originals: Originals
    resized: bool  # min or max changed


@dataclass(frozen=True, slots=True)
class Reverted:
    """After a revert's HPA write: a Kubernetes Event saying so."""

    said: str


@dataclass(frozen=True, slots=True)
class Enqueue:
    """Put the event into the outbox (and note it in the store) before what follows."""

    event: ScalingEvent


@dataclass(frozen=True, slots=True)
class Report:
    """An action error about the planned window, reported once per window."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Skip:
    """Nothing to write, for a reason the cycle counts."""

    outcome: Literal["overridden", "reassert_later"]


@dataclass(frozen=True, slots=True)
class CreateHpa:
    namespace: str
    name: str
    body: Obj
    then: Applied


@dataclass(frozen=True, slots=True)
class ApplyHpa:
    """A server-side apply of a window's bounds and annotations to the HPA read, as
    `moonin-agent`, taking the bounds from whoever owns them; the config carries the read's
    resourceVersion."""

    hpa: ObjectMeta
    config: Obj
    then: Applied


@dataclass(frozen=True, slots=True)
class HandBack:
    """After a revert's write (or, with `hpa`, on an HPA a revert left half done): every
    managedFields entry of ours dropped, the bounds returned to `owners`, and the
    ORIGINAL_MANAGERS annotation removed, in one patch carrying the resourceVersion of the
    HPA as that write left it."""

    owners: Owners | None
    hpa: Hpa | None = None


@dataclass(frozen=True, slots=True)
class PatchHpa:
    """A merge patch of the HPA read, carrying its resourceVersion."""

    hpa: ObjectMeta
    patch: Obj
    then: Applied | Reverted
    unusable: tuple[int | None, int | None] | None = None
    """The original min and max no valid HPA could take: the patch only releases."""


@dataclass(frozen=True, slots=True)
class DeleteProvisional:
    """Delete the provisional HPA read; `restore` (journalled before the delete) puts its
    Deployment's replicas back after it."""

    hpa: ObjectMeta
    restore: PendingRestore | None
    said: str


@dataclass(frozen=True, slots=True)
class RaiseReplicas:
    """The Deployment read, raised to `minimum` when below it."""

    minimum: int


@dataclass(frozen=True, slots=True)
class TakenOver:
    """The old window's end, said on the HPA as it was read."""

    hpa: Hpa
    said: str


Step = (
    Enqueue
    | Report
    | Skip
    | CreateHpa
    | ApplyHpa
    | PatchHpa
    | HandBack
    | DeleteProvisional
    | RaiseReplicas
    | TakenOver
)
