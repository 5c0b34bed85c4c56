"""What one reconcile cycle shares: the clients, the instant, and the "report once" rule.

`Cycle.emit` is the only way an event reaches the outbox: it puts the event unless the
local store already holds its id, and notes the id after the put has committed. Puts are
one event at a time on purpose: a revert event must be durable before the revert write
that follows it, and a steady cycle puts nothing at all.

`Cycle.record` writes a Kubernetes Event; failing to (no RBAC for events, an API hiccup) is
logged and counted, never a reason to undo or skip the scaling write it describes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import structlog
from structlog.typing import FilteringBoundLogger

from kube.errors import Forbidden, KubeError
from kube.workloads import Deployment, Hpa
from runtime.health import HealthReporter
from scheduler.kubeapi import ScalingKube
from scheduler.store import Store
from shipper.records import ScalingEvent

log = structlog.get_logger("scheduler")


class EventSink(Protocol):
    """Where a cycle's events go: the scaling outbox stream (`StreamOutbox`), or the
    dry run's log (`scheduler.dryrun.DryRunEvents`)."""

    @property
    def resync_needed(self) -> bool: ...

    @property
    def at_bound(self) -> bool: ...

    @property
    def epoch(self) -> str:
        """The identity of the file events go into: a new file has a new one."""
        ...

    def put(self, events: Iterable[ScalingEvent]) -> None: ...

    def clear_resync_needed(self) -> None: ...


APPLIED = "MooninScalingApplied"
REVERTED = "MooninScalingReverted"


@dataclass
class Cycle:
    kube: ScalingKube
    outbox: EventSink
    store: Store
    cluster_id: str
    now: datetime
    reporter: HealthReporter
    tally: Counter[str] = field(default_factory=Counter)
    # Targets a GitOps tool deploys that were advised on (the process's, across cycles).
    advised: set[str] = field(default_factory=set)

    def emit(self, event: ScalingEvent) -> bool:
        """Put `event` into the outbox unless its id was put before; True when put."""
        if self.store.enqueued(event.id):
            return False
        self.outbox.put([event])
        self.store.note_enqueued([event])
        self.count(f"{event.type}_events")
        return True

    def emit_error(
        self, event: ScalingEvent, logger: FilteringBoundLogger, name: str, **fields: object
    ) -> bool:
        """Emit an error event; the first time, count it and log `name` at warning with the
        template, `fields`, the reason and the message. True when it was new."""
        if not self.emit(event):
            return False
        self.count("errors")
        logger.warning(
            name, template=event.template_id, **fields, reason=event.reason, message=event.message
        )
        return True

    def count(self, name: str, amount: int = 1) -> None:
        self.tally[name] += amount
        self.reporter.count(name, amount)

    def record(self, involved: Hpa | Deployment, *, reason: str, message: str) -> None:
        try:
            self.kube.record_event(involved, reason=reason, message=message)
        except Forbidden as exc:
            # No RBAC for Events (or a policy against them): the write it describes stands.
            self.count("kube_events_failed")
            self.count("kube_events_forbidden")
            log.warning("kube_event_forbidden", reason=reason, permission=exc.denied)
        except KubeError as exc:
            self.count("kube_events_failed")
            log.warning("kube_event_failed", reason=reason, status=exc.status, error=str(exc))
