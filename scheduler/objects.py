"""Which object a write is about and the preconditions it carries from the read (`Ref`),
an HPA's effective bounds, and which HPA scales a Deployment. The objects are the typed
views of `kube.workloads`, where an absent field already reads as the API's default.

How it fails: nothing here raises for an object's content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kube.workloads import Deployment, Hpa
from scheduler import annotations as notes


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


def ref(obj: Hpa | Deployment) -> Ref:
    """The object's identity as read (an object from the API server always has one)."""
    metadata = obj.metadata
    return Ref(
        namespace=metadata.namespace,
        name=metadata.name,
        uid=metadata.uid,
        resource_version=metadata.resource_version,
    )


def bounds(hpa: Hpa) -> tuple[int, int | None]:
    """The HPA's (minReplicas, maxReplicas); an absent min is the API's default, 1."""
    low = hpa.spec.min_replicas
    return (1 if low is None else low, hpa.spec.max_replicas)


def find_hpa(hpas: list[Hpa], deployment: str) -> Hpa | None:
    """The HPA scaling `deployment`. Several (a misconfiguration the HPA controller itself
    refuses to act on) resolve to a managed one, else the first by name."""
    targets = [
        hpa
        for hpa in hpas
        if hpa.spec.scale_target_ref.kind == "Deployment"
        and hpa.spec.scale_target_ref.name == deployment
    ]
    targets.sort(key=lambda hpa: (notes.read_window(hpa) is None, ref(hpa).name))
    return targets[0] if targets else None
