"""The replicas a provisional HPA's revert puts back, journalled so that no crash loses them.

Before a provisional HPA is deleted, the Deployment's original replicas are journalled in the
local store and on the Deployment itself (the `restore-replicas` label, with the RELEASED
marker when there is one); the HPA is deleted (uid and resourceVersion preconditions); then
the replicas are restored and both journal entries cleared (`delete_provisional`). A crash
or a failed request in between leaves the entries, and `finish_restores` (every revert scan,
and `revert-all`) ends them. A store that was lost (damaged, emptied, deleted) forgets its
entries; `read_restore_journal`, once per process, takes them back from the labels. The
restore itself meets the Deployment controller's own writes: a 409 is read afresh and tried
again a few times (`RESTORE_ATTEMPTS`). After it, the replicas (and the journal label and
marker written with them) are handed back (`scheduler.handback.deployment_replicas`): no
managedFields entry of ours stays on the Deployment.

How it fails: `delete_provisional` raises `kube.errors.KubeError` when the journal or the
delete fails (the entries stay for `finish_restores`); `read_restore_journal` raises it when
the Deployments cannot be listed; `finish_restores` never raises for Kubernetes (it logs,
counts, and leaves the entry for the next scan).
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

import structlog

from kube.errors import Conflict, KubeError, NotFound
from kube.workloads import Deployment
from scheduler import annotations as notes
from scheduler import handback, ownership
from scheduler.cycle import REVERTED, Cycle
from scheduler.steps import DeleteProvisional
from scheduler.store import PendingRestore

log = structlog.get_logger("scheduler.revert")


def read_restore_journal(cycle: Cycle) -> None:
    """Take into the store the restores journalled on Deployments that it does not hold (it
    was lost, or this is another process: `revert-all`). Raises `kube.errors.KubeError`
    when the Deployments cannot be listed."""
    journalled = cycle.kube.list_deployments(label_selector=notes.RESTORE_REPLICAS)
    known = {(entry.namespace, entry.deployment) for entry in cycle.store.restores()}
    for deployment in journalled:
        namespace, name = deployment.metadata.namespace, deployment.metadata.name
        replicas = notes.journalled_replicas(deployment.metadata.labels)
        if (namespace, name) in known or replicas is None:
            continue
        cycle.store.add_restore(PendingRestore(namespace, name, replicas, None))
        cycle.count("restores_recovered")
        log.warning(
            "replicas_restore_recovered",
            namespace=namespace,
            deployment=name,
            replicas=replicas,
            source="the Deployment's journal label (the local store did not hold it)",
        )


def finish_restores(cycle: Cycle) -> None:
    """Restore the Deployments whose provisional HPA is gone but whose replicas are not
    back yet (a crash, a 409 or a failed request in the middle of a revert).

    An entry whose Deployment is again (or still) the target of an HPA is dropped instead:
    a managed one carries the same original replicas (the delete did not happen, or a new
    window's provisional HPA took them from this entry) and its revert journals them
    again; one we do not manage owns the replicas now. Restoring under either would fight
    it. The HPAs are listed afresh, after this cycle's reverts."""
    pending = cycle.store.restores()
    if not pending:
        return
    try:
        targeted = {
            (hpa.metadata.namespace, hpa.spec.scale_target_ref.name)
            for hpa in cycle.kube.list_hpas()
        }
    except KubeError as exc:
        log.warning("replicas_restore_deferred", error=str(exc))  # the next cycle tries
        return
    for entry in pending:
        if (entry.namespace, entry.deployment) in targeted:
            _clear_journal(cycle, entry)
            cycle.store.drop_restore(entry.namespace, entry.deployment)
            continue
        try:
            deployment = _restore_replicas(cycle, entry)
        except NotFound:
            cycle.store.drop_restore(entry.namespace, entry.deployment)
            continue
        except Exception as exc:
            cycle.count("revert_failures")
            log.warning(
                "replicas_restore_failed",
                namespace=entry.namespace,
                deployment=entry.deployment,
                error=str(exc),
            )
            continue
        cycle.store.drop_restore(entry.namespace, entry.deployment)
        cycle.record(
            deployment,
            reason=REVERTED,
            message=f"replicas restored to {entry.replicas} (provisional HPA removed)",
        )


def delete_provisional(cycle: Cycle, step: DeleteProvisional) -> None:
    """Journal the replicas to restore, delete the provisional HPA, then restore them."""
    read, pending = step.hpa, step.restore
    if pending is not None:
        # Journalled before the delete: once the HPA is gone, nothing else remembers it.
        cycle.store.add_restore(pending)
        try:
            _journal(cycle, pending)
        except NotFound:  # no Deployment left to restore
            cycle.store.drop_restore(pending.namespace, pending.deployment)
            pending = None
    # A failed delete raises and keeps the entry: a timeout or a 5xx may come after the
    # delete went through, and then the entry is all that remembers the replicas.
    # `finish_restores` sees whether the HPA is gone.
    # NotFound: deleted by someone else, or by us just before a crash; the restore runs.
    uid, version = read.identity()
    with suppress(NotFound):
        cycle.kube.delete_hpa(read.namespace, read.name, uid=uid, resource_version=version)
    if pending is None:
        return
    try:
        written = _restore_replicas(cycle, pending)
    except NotFound:
        cycle.store.drop_restore(pending.namespace, pending.deployment)
        return
    cycle.store.drop_restore(pending.namespace, pending.deployment)
    cycle.record(written, reason=REVERTED, message=step.said)


def _journal(cycle: Cycle, pending: PendingRestore) -> None:
    """Write the restore on the Deployment: the replicas label, and the RELEASED marker.

    Without a resourceVersion: it adds a label and a marker and changes nothing anyone else
    could have changed meanwhile (the replicas are written later, with one)."""
    metadata: dict[str, Any] = {"labels": {notes.RESTORE_REPLICAS: str(pending.replicas)}}
    if pending.released is not None:
        current = cycle.kube.get_deployment(pending.namespace, pending.deployment)
        released = notes.with_released(current.metadata.annotations, pending.released)
        metadata["annotations"] = {notes.RELEASED: released}
    cycle.kube.patch_deployment(pending.namespace, pending.deployment, {"metadata": metadata})


def _clear_journal(cycle: Cycle, pending: PendingRestore) -> None:
    """Remove the journal label of a restore that is not needed. Failing to is logged only: a
    label left behind is read at the next start and dropped again."""
    patch = {"metadata": {"labels": {notes.RESTORE_REPLICAS: None}}}
    try:
        cycle.kube.patch_deployment(pending.namespace, pending.deployment, patch)
    except NotFound:
        pass
    except KubeError as exc:
        log.info(
            "restore_journal_left",
            namespace=pending.namespace,
            deployment=pending.deployment,
            error=str(exc),
        )


# The Deployment controller answers the journal label with a status write of its own, so the
# restore that follows it often meets a 409 that says nothing about the replicas.
RESTORE_ATTEMPTS = 3


def _restore_replicas(cycle: Cycle, pending: PendingRestore) -> Deployment:
    """Put the Deployment back to its replicas from before the window (whatever the HPA
    made of them since: its scaling and anyone else's cannot be told apart), and clear the
    journal label in the same write, read afresh after a 409 (a few times, then raised)."""
    for _ in range(RESTORE_ATTEMPTS - 1):
        with suppress(Conflict):
            return _write_restore(cycle, pending)
    return _write_restore(cycle, pending)


def _write_restore(cycle: Cycle, pending: PendingRestore) -> Deployment:
    current = cycle.kube.get_deployment(pending.namespace, pending.deployment)
    before = ownership.owners_of(current.metadata, fields=handback.REPLICAS)
    metadata: dict[str, Any] = {
        **current.metadata.precondition(),
        "labels": {notes.RESTORE_REPLICAS: None},
    }
    if pending.released is not None:
        released = notes.with_released(current.metadata.annotations, pending.released)
        metadata["annotations"] = {notes.RELEASED: released}
    patch = {"metadata": metadata, "spec": {"replicas": pending.replicas}}
    restored = cycle.kube.patch_deployment(pending.namespace, pending.deployment, patch)
    try:
        handback.deployment_replicas(cycle, restored, before)
    except Conflict:
        # Restored all the same; our entry stays until the next write of ours hands it back.
        cycle.count("conflicts")
        log.info(
            "replicas_hand_back_conflict", namespace=pending.namespace, name=pending.deployment
        )
    return restored
