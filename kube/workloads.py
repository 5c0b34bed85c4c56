"""Deployments and autoscaling/v2 HPAs as the scaling role reads them: frozen msgspec
Structs decoded straight from the API server's bytes, holding only the fields scaling uses.

This is the one module that knows where those fields sit in an object (`metadata`, `spec`,
`scaleTargetRef`); everything else reads attributes. A field is added by adding it here.
Nothing is ever written back from these Structs: a write sends only the patch its caller
built, so a field the agent did not read is never dropped. Two exceptions to "only what is
used": an HPA's whole `spec`, kept as the JSON text the server sent (`Hpa.spec_json`),
because a window keeps it as its original for an operator to read; and every field of each
`metadata.managedFields` entry, because handing fields back (`scheduler.ownership`)
rewrites that list.

An absent field reads as the API's default (no `minReplicas`: None, which the API takes as
1, as `HpaSpec.bounds` does; no `replicas`: 1; no annotations: none). The metadata read is
also what a write carries back as its precondition (`ObjectMeta.precondition`, and
`ObjectMeta.identity` for a delete), so a change made since the read is a 409.

How it fails: an answer that is not such an object (a proxy's page, a field of the wrong
type, which no API server sends) is a `kube.errors.KubeError` naming the call, raised by
`kube.api.decoded` around these decoders. `precondition` and `identity` raise KeyError for
metadata without a resourceVersion (or uid), which no object read from a server lacks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from kube.resources import DEPLOYMENTS, HPAS, Resource


class ManagedFieldsEntry(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True, gc=False
):
    """One entry of `metadata.managedFields`: the fields one manager set by one operation.

    Every field the API defines is kept, so an entry written back (`scheduler.ownership`
    hands fields back by rewriting the list) is the entry that was read."""

    manager: str = ""
    operation: str = ""  # "Apply" (server-side apply) or "Update" (any other write)
    api_version: str = ""
    time: str | None = None
    fields_type: str = ""
    fields_v1: dict[str, Any] = msgspec.field(default_factory=dict, name="fieldsV1")
    subresource: str = ""


class ObjectMeta(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """What scaling reads of any object's metadata: also which object a write is about, and
    the preconditions that write carries from the read."""

    name: str
    namespace: str
    uid: str | None = None
    resource_version: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    annotations: dict[str, str] = msgspec.field(default_factory=dict)
    managed_fields: list[ManagedFieldsEntry] = msgspec.field(default_factory=list)

    @property
    def terminating(self) -> bool:
        """Being deleted, held by a finalizer until it goes."""
        return bool(self.deletion_timestamp)

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


class ScaleTargetRef(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    kind: str = ""
    name: str = ""


class HpaSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    scale_target_ref: ScaleTargetRef = msgspec.field(default_factory=ScaleTargetRef)
    min_replicas: int | None = None  # absent: the API's default, 1
    max_replicas: int | None = None

    @property
    def bounds(self) -> tuple[int, int | None]:
        """(minReplicas, maxReplicas) as the HPA controller takes them: an absent min is 1."""
        low = self.min_replicas
        return (1 if low is None else low, self.max_replicas)


class Hpa(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An autoscaling/v2 HorizontalPodAutoscaler."""

    resource: ClassVar[Resource] = HPAS
    metadata: ObjectMeta
    spec: HpaSpec
    spec_json: str  # the whole spec, as the server sent it (compact JSON, keys in its order)


class DeploymentSpec(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    replicas: int = 1  # absent: the API's default


class Deployment(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An apps/v1 Deployment."""

    resource: ClassVar[Resource] = DEPLOYMENTS
    metadata: ObjectMeta
    spec: DeploymentSpec = msgspec.field(default_factory=DeploymentSpec)


class _HpaWire(msgspec.Struct, gc=False):
    metadata: ObjectMeta
    spec: msgspec.Raw = msgspec.Raw(b"{}")


_hpa_wire = msgspec.json.Decoder(_HpaWire).decode
_hpa_spec = msgspec.json.Decoder(HpaSpec).decode
_any = msgspec.json.Decoder().decode
decode_deployment = msgspec.json.Decoder(Deployment).decode


def decode_hpa(data: bytes | bytearray | msgspec.Raw) -> Hpa:
    """An HPA from its JSON; raises `msgspec.DecodeError` (or its `ValidationError`)."""
    wire = _hpa_wire(data)
    spec = bytes(wire.spec)
    # Compact, in the server's key order: the text a window keeps as its original spec.
    spec_json = msgspec.json.encode(_any(spec)).decode()
    return Hpa(metadata=wire.metadata, spec=_hpa_spec(spec), spec_json=spec_json)
