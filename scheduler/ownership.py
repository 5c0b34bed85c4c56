"""Who owns an HPA's bounds, what tool that says deploys it, and handing the bounds back.

The API server records in `metadata.managedFields` which field manager set each field and
by which operation (`Apply` for server-side apply, `Update` for any other write). A window
takes `spec.minReplicas` and `spec.maxReplicas` by server-side apply as `moonin-agent`,
which moves them out of their owners' entries. So before the first window touches an HPA,
their owners are noted (`Owners`, kept in the `original-managers` annotation), and after
its revert restored the values, the list is written back with every entry of ours dropped
and the bounds returned to those owners (`hand_back`): the next `kubectl apply`, Argo CD
sync, Flux reconcile or `helm upgrade` finds the fields as it left them and owns them
again, with no conflict naming `moonin-agent`.

The same owners, with the well-known labels and annotations of Argo CD, Flux and Helm,
say which tool deploys a target (`classify`), for the apply event and the dry run.

How it fails: never for what it reads. An unreadable note reads as none (the bounds then
stay unowned after a revert, which no later apply conflicts with).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from kube.workloads import ManagedFieldsEntry, ObjectMeta
from scheduler.kubeapi import FIELD_MANAGER

BOUNDS = ("minReplicas", "maxReplicas")
_APPLY = "Apply"

Tool = Literal["unmanaged", "argocd", "flux", "helm", "other"]

# Markers each tool leaves on what it deploys, and the field managers it writes as.
_ARGOCD_ANNOTATIONS = ("argocd.argoproj.io/tracking-id",)
_ARGOCD_PREFIXES = ("argocd.argoproj.io/",)
_FLUX_PREFIXES = ("kustomize.toolkit.fluxcd.io/", "helm.toolkit.fluxcd.io/")
_HELM_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")
_TOOL_MANAGERS: dict[str, Tool] = {
    "argocd-controller": "argocd",
    "argocd-application-controller": "argocd",
    "kustomize-controller": "flux",
    "helm-controller": "flux",
    "helm": "helm",  # Helm 4's server-side apply, and Helm 3's updates
}
# What a person types: their writes are decisions, not a tool's declared state.
_PERSON_PREFIX = "kubectl"


@dataclass(frozen=True, slots=True)
class FieldOwner:
    """An entry of managedFields, as the server tells entries apart: an applier by name
    (and subresource), an updater also by the apiVersion it wrote."""

    manager: str
    operation: str
    api_version: str

    def matches(self, entry: ManagedFieldsEntry) -> bool:
        if entry.subresource or (entry.manager, entry.operation) != (
            self.manager,
            self.operation,
        ):
            return False
        return self.operation == _APPLY or entry.api_version == self.api_version


@dataclass(frozen=True, slots=True)
class Owners:
    """Who owned each bound before a window took it (a bound no one owned has none)."""

    by_field: Mapping[str, tuple[FieldOwner, ...]] = field(default_factory=dict)

    @property
    def managers(self) -> list[str]:
        return sorted({owner.manager for owners in self.by_field.values() for owner in owners})

    def note(self) -> str:
        """The annotation's text: compact JSON, `{"minReplicas": [[manager, operation,
        apiVersion], ...], ...}`, a bound no one owned left out."""
        return msgspec.json.encode(
            {
                name: [[o.manager, o.operation, o.api_version] for o in owners]
                for name, owners in sorted(self.by_field.items())
                if owners
            }
        ).decode()

    @classmethod
    def read(cls, note: str | None) -> Owners | None:
        """The owners a note says; None for no note or one that cannot be read."""
        if not note:
            return None
        try:
            found = msgspec.json.decode(note, type=dict[str, list[tuple[str, str, str]]])
        except msgspec.DecodeError:
            return None
        return cls(
            {
                name: tuple(FieldOwner(*owner) for owner in owners)
                for name, owners in found.items()
                if name in BOUNDS
            }
        )


def owns(entry: ManagedFieldsEntry, name: str) -> bool:
    """Whether the entry owns `spec.<name>` (subresource entries, such as the HPA
    controller's writes to a Deployment's scale, never count)."""
    spec = entry.fields_v1.get("f:spec")
    return not entry.subresource and isinstance(spec, dict) and f"f:{name}" in spec


def holds_entry(meta: ObjectMeta) -> bool:
    """Whether any managedFields entry of the object is ours."""
    return any(entry.manager == FIELD_MANAGER for entry in meta.managed_fields)


def owners_of(
    meta: ObjectMeta, noted: Owners | None = None, *, fields: tuple[str, ...] = BOUNDS
) -> Owners:
    """Who owns each of `spec.<fields>` (by default the bounds) now, ours left out; a field
    that only ours owns has the owners `noted` before a window took it (a window taking
    over from another keeps them)."""
    found: dict[str, tuple[FieldOwner, ...]] = {}
    for name in fields:
        found[name] = tuple(
            FieldOwner(entry.manager, entry.operation, entry.api_version)
            for entry in meta.managed_fields
            if entry.manager != FIELD_MANAGER and owns(entry, name)
        )
        if not found[name] and noted is not None:
            found[name] = noted.by_field.get(name, ())
    return Owners(found)


# -- which tool ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManagedBy:
    """The tool that deploys a target, and the field managers that owned its bounds."""

    tool: Tool
    managers: tuple[str, ...] = ()

    def details(self) -> dict[str, Any]:
        return {"tool": self.tool, "managers": list(self.managers)}


def tool_of(manager: str) -> Tool | None:
    """The GitOps tool a field manager's name says, if any."""
    return _TOOL_MANAGERS.get(manager)


def classify(metas: Iterable[ObjectMeta], writers: Iterable[str]) -> ManagedBy:
    """The tool deploying a target, from the markers on `metas` (the HPA first, then its
    Deployment) and the field managers that own what a window changes. Argo CD and Flux
    first: both deploy Helm charts, whose markers their objects then carry too."""
    managers = tuple(sorted(set(writers)))
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for meta in metas:
        labels = {**meta.labels, **labels}
        annotations = {**meta.annotations, **annotations}
    keys = [*labels, *annotations]

    def marked(prefixes: tuple[str, ...]) -> bool:
        return any(key.startswith(prefixes) for key in keys)

    def writes_as(tool: Tool) -> bool:
        return any(tool_of(manager) == tool for manager in managers)

    if marked(_ARGOCD_PREFIXES) or writes_as("argocd"):
        return ManagedBy("argocd", managers)
    if marked(_FLUX_PREFIXES) or writes_as("flux"):
        return ManagedBy("flux", managers)
    helm = labels.get("app.kubernetes.io/managed-by", "").lower() == "helm"
    if helm or any(key in annotations for key in _HELM_ANNOTATIONS) or writes_as("helm"):
        return ManagedBy("helm", managers)
    if any(not manager.startswith(_PERSON_PREFIX) for manager in managers):
        return ManagedBy("other", managers)
    return ManagedBy("unmanaged", managers)


def target_managed_by(
    hpa: ObjectMeta, deployment: ObjectMeta | None, *, provisional: bool, noted: Owners | None
) -> ManagedBy:
    """What deploys a window's target: the markers of its HPA and Deployment, and the owners
    of what the window changes (the bounds its originals noted, else those of the HPA as it
    is; a provisional HPA's: its Deployment's replicas)."""
    metas = [hpa] if deployment is None else [hpa, deployment]
    if provisional:
        replicas = None if deployment is None else owners_of(deployment, fields=("replicas",))
        managers = [] if replicas is None else replicas.managers
    else:
        managers = (noted or owners_of(hpa)).managers
    return classify(metas, managers)


# -- handing back --------------------------------------------------------------------------


def hand_back(
    meta: ObjectMeta,
    owners: Owners | None,
    now: datetime,
    *,
    fields: tuple[str, ...] = BOUNDS,
) -> list[dict[str, Any]]:
    """The managedFields list with every entry of ours dropped and each of `spec.<fields>`
    ours owned returned to the owners `owners` noted (an owner whose entry is gone gets a
    new one, at `now`). What else ours owned (our annotations, which the revert removed) is
    owned by no one."""
    entries = list(meta.managed_fields)
    ours = [entry for entry in entries if entry.manager == FIELD_MANAGER]
    taken = [name for name in fields if any(owns(entry, name) for entry in ours)]
    noted = owners.by_field if owners is not None else {}
    kept: list[ManagedFieldsEntry] = []
    for entry in entries:
        if entry.manager == FIELD_MANAGER:
            continue
        given = [name for name in taken if any(o.matches(entry) for o in noted.get(name, ()))]
        kept.append(_with_bounds(entry, given))
    for name in taken:
        for owner in noted.get(name, ()):
            if not any(owner.matches(entry) for entry in kept):
                fresh = ManagedFieldsEntry(
                    manager=owner.manager,
                    operation=owner.operation,
                    api_version=owner.api_version,
                    time=now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    fields_type="FieldsV1",
                )
                given = [other for other in taken if owner in noted.get(other, ())]
                kept.append(_with_bounds(fresh, given))
    return [msgspec.to_builtins(entry) for entry in kept]


def _with_bounds(entry: ManagedFieldsEntry, names: list[str]) -> ManagedFieldsEntry:
    if not names:
        return entry
    spec = dict(entry.fields_v1.get("f:spec") or {})
    spec.update({f"f:{name}": {} for name in names})
    fields = {**entry.fields_v1, "f:spec": spec}
    return msgspec.structs.replace(entry, fields_v1=fields)
