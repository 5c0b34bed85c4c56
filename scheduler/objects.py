"""What the scaling role reads of the objects it scales, in one place: an HPA's bounds and
target, a Deployment's replicas, whether either is being deleted, and which HPA scales a
Deployment. Objects arrive as the API server sent them (plain dicts); whatever is absent or
of the wrong type reads as the API's default, never as an exception.

How it fails: nothing here raises for an object's content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler import annotations as notes
from scheduler.kubeapi import Obj


@dataclass(frozen=True, slots=True)
class Ref:
    """Which object was read, and which version of it."""

    namespace: str
    name: str
    uid: str | None
    resource_version: str | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def precondition(self) -> dict[str, Any]:
        """The patch metadata that makes a write a 409 once the object changed since this
        read. An object read from the API server always has a resourceVersion."""
        if self.resource_version is None:
            raise KeyError("resourceVersion")
        return {"resourceVersion": self.resource_version}

    def identity(self) -> tuple[str, str]:
        """uid and resourceVersion: the delete preconditions for this very object."""
        if self.uid is None or self.resource_version is None:
            raise KeyError("uid" if self.uid is None else "resourceVersion")
        return self.uid, self.resource_version


def ref(obj: Obj) -> Ref:
    """The object's identity as read (an object from the API server always has one)."""
    metadata = obj["metadata"]
    return Ref(
        namespace=metadata["namespace"],
        name=metadata["name"],
        uid=metadata.get("uid"),
        resource_version=metadata.get("resourceVersion"),
    )


def spec_of(obj: Obj) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def stated_bounds(hpa: Obj) -> tuple[int | None, int | None]:
    """The HPA's minReplicas and maxReplicas as written (None: absent or not a number)."""
    spec = spec_of(hpa)
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    return (low if isinstance(low, int) else None, high if isinstance(high, int) else None)


def bounds(hpa: Obj) -> tuple[int, int | None]:
    """The HPA's (minReplicas, maxReplicas); an absent min is the API's default, 1."""
    low, high = stated_bounds(hpa)
    return (1 if low is None else low, high)


def target_name(hpa: Obj) -> str | None:
    target = spec_of(hpa).get("scaleTargetRef") or {}
    name = target.get("name")
    return name if isinstance(name, str) else None


def terminating(obj: Obj) -> bool:
    """Whether the object is being deleted (held by a finalizer until it goes): a real
    server refuses nothing written to it, but the write is lost with it, and a spec change
    may fight whoever is finishing the deletion."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def replicas(deployment: Obj) -> int:
    """The Deployment's desired replicas; absent means 1 (the API's default)."""
    value = spec_of(deployment).get("replicas")
    return value if isinstance(value, int) else 1


def find_hpa(hpas: list[Obj], deployment: str) -> Obj | None:
    """The HPA scaling `deployment`. Several (a misconfiguration the HPA controller itself
    refuses to act on) resolve to a managed one, else the first by name."""
    targets = [
        hpa
        for hpa in hpas
        if (spec_of(hpa).get("scaleTargetRef") or {}).get("kind") == "Deployment"
        and target_name(hpa) == deployment
    ]
    targets.sort(key=lambda hpa: (notes.read_managed(hpa) is None, ref(hpa).name))
    return targets[0] if targets else None
