"""Giving fields back after our writes, so that no managedFields entry of `moonin-agent` is
left where a window no longer needs one (`scheduler.ownership` builds the lists):

- `hpa_bounds`: after a revert's write, the HPA's bounds back to the owners its window
  noted, every entry of ours dropped, and the ORIGINAL_MANAGERS annotation removed;
- `deployment_replicas`: after we set a Deployment's replicas (raised to a window's new
  minimum, or restored when a provisional HPA goes), `spec.replicas` back to whoever owned
  it before that write, every entry of ours dropped (with them what else we wrote there:
  the restore journal label, a released marker).

Each is one patch carrying the resourceVersion of the object as our write left it. The HPA
and Deployment controllers write the status right after such a write, often more than once
(a raised Deployment's status follows its ReplicaSet's pods), so a 409 reads the object
again and builds the list afresh, after a pause that grows as client-go's
`retry.DefaultBackoff` (meant for a write to an object controllers are busy with) grows it:
four tries, 10, 50 and 250 ms apart. Tried at once, three tries could all meet the
controllers' writes on a busy machine, and leave our entry on a Deployment.

How it fails: raises `kube.errors.Conflict` when the object kept changing under it (an
HPA's hand-back is then finished by a later scan, which finds ORIGINAL_MANAGERS still
there), or another `kube.errors.KubeError` as the read or the write raised it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from kube.errors import Conflict
from kube.workloads import Deployment, Hpa
from scheduler import annotations as notes
from scheduler import ownership
from scheduler.cycle import Cycle
from scheduler.kubeapi import Obj

ATTEMPTS = 4
FIRST_PAUSE = 0.01  # seconds before the second try; each next pause is PAUSE_FACTOR longer
PAUSE_FACTOR = 5
REPLICAS = ("replicas",)

T = TypeVar("T", Hpa, Deployment)


def hpa_bounds(cycle: Cycle, hpa: Hpa | None, owners: ownership.Owners | None) -> None:
    """Nothing when `hpa` is no HPA a revert left to hand back (`hand_back_pending`)."""
    if hpa is None:
        return

    def patch(read: Hpa) -> Obj:
        meta = read.metadata
        given: dict[str, object] = {}
        if _ours(read):
            given["managedFields"] = ownership.hand_back(meta, owners, cycle.now)
        annotations = {notes.ORIGINAL_MANAGERS: None}
        return {"metadata": {**meta.precondition(), "annotations": annotations, **given}}

    _retried(
        hpa,
        due=notes.hand_back_pending,
        patch=patch,
        write=lambda read, body: cycle.kube.patch_hpa(
            read.metadata.namespace, read.metadata.name, body
        ),
        read_again=lambda read: cycle.kube.get_hpa(read.metadata.namespace, read.metadata.name),
    )


def deployment_replicas(cycle: Cycle, deployment: Deployment, before: ownership.Owners) -> None:
    """`deployment` as our replicas write left it; `before`: who owned its replicas before
    that write (`ownership.owners_of(..., fields=REPLICAS)` of the object read for it)."""

    def patch(read: Deployment) -> Obj:
        meta = read.metadata
        handed = ownership.hand_back(meta, before, cycle.now, fields=REPLICAS)
        return {"metadata": {**meta.precondition(), "managedFields": handed}}

    _retried(
        deployment,
        due=_ours,
        patch=patch,
        write=lambda read, body: cycle.kube.patch_deployment(
            read.metadata.namespace, read.metadata.name, body
        ),
        read_again=lambda read: cycle.kube.get_deployment(
            read.metadata.namespace, read.metadata.name
        ),
    )


def _ours(obj: Hpa | Deployment) -> bool:
    return ownership.holds_entry(obj.metadata)


def _retried(
    obj: T,
    *,
    due: Callable[[T], bool],
    patch: Callable[[T], Obj],
    write: Callable[[T, Obj], object],
    read_again: Callable[[T], T],
) -> None:
    for attempt in range(ATTEMPTS):
        if not due(obj):
            return
        try:
            write(obj, patch(obj))
            return
        except Conflict:
            if attempt + 1 == ATTEMPTS:
                raise
            time.sleep(FIRST_PAUSE * PAUSE_FACTOR**attempt * random.uniform(1.0, 1.1))
            obj = read_again(obj)
