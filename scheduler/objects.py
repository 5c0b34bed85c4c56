"""What the scaling role reads of the objects it scales, in one place: an HPA's bounds and
target, a Deployment's replicas, whether either is being deleted, and which HPA scales a
Deployment. Objects arrive as the API server sent them (plain dicts); whatever is absent or
of the wrong type reads as the API's default, never as an exception.

How it fails: nothing here raises for an object's content.
"""

from __future__ import annotations

from scheduler import annotations as notes
from scheduler.kubeapi import Obj


def bounds(hpa: Obj) -> tuple[int, int | None]:
    """The HPA's (minReplicas, maxReplicas); an absent min is the API's default, 1."""
    spec = hpa.get("spec") or {}
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    return (low if isinstance(low, int) else 1, high if isinstance(high, int) else None)


def target_name(hpa: Obj) -> str | None:
    ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
    name = ref.get("name")
    return name if isinstance(name, str) else None


def terminating(obj: Obj) -> bool:
    """Whether the object is being deleted (held by a finalizer until it goes): a real
    server refuses nothing written to it, but the write is lost with it, and a spec change
    may fight whoever is finishing the deletion."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def replicas(deployment: Obj) -> int:
    """The Deployment's desired replicas; absent means 1 (the API's default)."""
    value = (deployment.get("spec") or {}).get("replicas")
    return value if isinstance(value, int) else 1


def find_hpa(hpas: list[Obj], deployment: str) -> Obj | None:
    """The HPA scaling `deployment`. Several (a misconfiguration the HPA controller itself
    refuses to act on) resolve to a managed one, else the first by name."""
    targets = [
        hpa
        for hpa in hpas
        if ((hpa.get("spec") or {}).get("scaleTargetRef") or {}).get("kind") == "Deployment"
        and target_name(hpa) == deployment
    ]
    targets.sort(key=lambda hpa: (notes.read_managed(hpa) is None, hpa["metadata"]["name"]))
    return targets[0] if targets else None
