"""What a DELETE asks for: its `DeleteOptions`, from the body and the query, as upstream
reads them, and the garbage-collection finalizers they put on the object.

`propagationPolicy` Background (the default of every kind served here), Foreground (the
object waits, with the `foregroundDeletion` finalizer, until its blocking dependents are
gone) or Orphan (the `orphan` finalizer: its dependents lose their ownerReference to it
first); the legacy `orphanDependents` boolean may not be set with it. `dryRun=All` (query
or body) deletes nothing. Sources:
https://kubernetes.io/docs/concepts/architecture/garbage-collection/#cascading-deletion,
staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go
(ValidateDeleteOptions) and staging/src/k8s.io/apiserver/pkg/registry/generic/registry/
store.go (deletionFinalizersForGarbageCollection).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.kube import status

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
POLICIES = ("Foreground", "Background", "Orphan")


@dataclass(frozen=True, slots=True)
class DeleteOptions:
    propagation: str | None = None
    orphan_dependents: bool | None = None
    dry_run: bool = False
    uid: str | None = None  # preconditions
    resource_version: str | None = None

    @classmethod
    def parse(cls, query: dict[str, str], body: Any | None) -> DeleteOptions:
        """From the body when the request has one (`{}` too), else from the query: upstream
        reads one or the other, never both (handlers/delete.go); 422 when they do not hold,
        as `DeleteOptions.meta.k8s.io` errors read upstream."""
        if body is not None:
            source = body if isinstance(body, dict) else {}
            policy = source.get("propagationPolicy")
            orphan = source.get("orphanDependents")
            dry_run = source.get("dryRun") or []
        else:
            source = {}
            policy = query.get("propagationPolicy")
            orphan = None
            if "orphanDependents" in query:
                orphan = query["orphanDependents"].lower() == "true"
            dry_run = [query["dryRun"]] if "dryRun" in query else []
        errors = []
        if orphan is not None and policy is not None:
            errors.append(
                status.invalid_field(
                    "propagationPolicy",
                    policy,
                    "orphanDependents and deletionPropagation cannot be both set",
                )
            )
        if policy is not None and policy not in POLICIES:
            errors.append(status.unsupported_field("propagationPolicy", policy, (*POLICIES, "nil")))
        if any(value not in ("All", "") for value in dry_run):
            errors.append(status.unsupported_field("dryRun", dry_run, ("All",)))
        if errors:
            raise status.invalid_options("DeleteOptions", errors)
        preconditions = source.get("preconditions")
        preconditions = preconditions if isinstance(preconditions, dict) else {}
        return cls(
            propagation=policy,
            orphan_dependents=orphan,
            dry_run="All" in dry_run,
            uid=preconditions.get("uid"),
            resource_version=preconditions.get("resourceVersion"),
        )

    def finalizers(self, current: list[str]) -> list[str]:
        """The object's finalizers once this delete has added or dropped `orphan` and
        `foregroundDeletion` (an explicit option wins, else those already there stay)."""
        if self.orphan_dependents is not None:
            orphan, foreground = self.orphan_dependents, False
        elif self.propagation is not None:
            orphan, foreground = self.propagation == "Orphan", self.propagation == "Foreground"
        else:
            orphan, foreground = ORPHAN in current, FOREGROUND in current
        kept = [name for name in current if name not in (ORPHAN, FOREGROUND)]
        wanted = kept + [ORPHAN] * orphan + [FOREGROUND] * foreground
        return current if set(wanted) == set(current) else wanted
