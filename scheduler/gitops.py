"""A GitOps tool writing an HPA's bounds back during a window: a sync, not a decision.

Argo CD with self-heal, Flux on every interval and a `helm upgrade` apply the HPA as
declared, so during a window they put min and max back to the values the window started
from. `synced_back` tells that apart from a person's change: every bound that is no longer
the window's holds its original value again and is owned by a GitOps tool's field manager
(`scheduler.ownership`). Any other change (other values, another manager) is an override.

What a sync does to the window is the operator's choice (`GitopsPolicy`, the setting
`scaling.gitopsConflicts`, `GITOPS_CONFLICTS`):
- `yield` (the default): the window is over for that HPA, reverted as `overridden` and
  released, as any change someone makes;
- `reassert`: the window is applied again, at most once per `reassert_seconds` (the last
  time is kept in the `reasserted-at` annotation, so a restart does not shorten it), and
  one `error` event with reason `gitops_conflict` says so, once per window.

How it fails: never; an HPA it cannot read the time of is due for a re-assert.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from kube.workloads import Hpa
from scheduler import ownership
from scheduler.annotations import REASSERTED_AT, Window, instant

Conflicts = Literal["yield", "reassert"]
CONFLICTS: tuple[Conflicts, ...] = ("yield", "reassert")
TOOLS = frozenset({"argocd", "flux", "helm"})


@dataclass(frozen=True, slots=True)
class GitopsPolicy:
    """What a GitOps sync during a window does (the settings `GITOPS_CONFLICTS` and
    `REASSERT_SECONDS`)."""

    conflicts: Conflicts = "yield"
    reassert_seconds: float = 300.0

    @property
    def reasserts(self) -> bool:
        return self.conflicts == "reassert"

    def reassert_due(self, hpa: Hpa, now: datetime) -> bool:
        """Whether `reassert_seconds` have passed since the window was last applied again."""
        last = instant(hpa.metadata.annotations.get(REASSERTED_AT) or "")
        return last is None or now - last >= timedelta(seconds=self.reassert_seconds)


YIELD = GitopsPolicy()


def synced_back(hpa: Hpa, window: Window) -> ownership.ManagedBy | None:
    """The tool that wrote the HPA's bounds back to their originals during `window` (every
    manager owning a bound besides us is a GitOps tool's), or None when they are still the
    window's, hold other values, or someone else wrote them."""
    if not window.overridden or window.originals is None or window.kept.provisional:
        return None
    kept = window.kept
    original = (1 if kept.min_replicas is None else kept.min_replicas, kept.max_replicas)
    if hpa.spec.bounds != original:
        return None
    writers = set(ownership.owners_of(hpa.metadata).managers)
    if not writers or any(ownership.tool_of(writer) not in TOOLS for writer in writers):
        return None
    return ownership.classify([hpa.metadata], writers)
