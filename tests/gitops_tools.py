"""Argo CD, Flux and Helm 4 as they write to an HPA, for the real API server.

None of the tools runs here, so each is reproduced by what it sends: the same field
manager, operation, force and payload, decided by the rules its documentation gives
(docs/scaling.md, "GitOps", quotes the configuration each reads, and `snippet` reads it
from there, so the tests exercise what the docs say):

- `ArgoCd.sync`: server-side apply as `argocd-controller`, forced (`ServerSideApply=true`
  applies with `--force-conflicts`); with `ignoreDifferences` and `managedFieldsManagers`,
  the fields those managers own are left out of the diff, and with
  `RespectIgnoreDifferences=true` their live values go into what it applies.
- `Flux.reconcile`: server-side apply as `kustomize-controller`, forced, as its
  `kustomize.toolkit.fluxcd.io/ssa` annotation allows; an `ignore` rule's path owned by
  another applier is left out of the payload, one only Flux applies keeps its live value.
- `Helm4.upgrade`: the chart rendered by Helm's own engine, applied whole as `helm`, forced
  only with `--force-conflicts`, with the release labels and annotations Helm adds.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from sandbox.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parent.parent
SCALING_DOC = ROOT / "docs" / "scaling.md"
Path_ = tuple[str, ...]


def snippet(name: str) -> str:
    """The fenced block after `<!-- snippet: name -->` in docs/scaling.md."""
    text = SCALING_DOC.read_text()
    found = re.search(rf"<!-- snippet: {re.escape(name)} -->\n```\w*\n(.*?)```", text, re.S)
    assert found is not None, f"docs/scaling.md has no snippet {name!r}"
    return found.group(1)


def entries(obj: dict[str, Any]) -> dict[str, list[str]]:
    """Each managedFields entry (manager, operation, subresource) and the spec fields it
    owns."""
    found = {}
    for entry in obj["metadata"].get("managedFields") or []:
        name = f"{entry['manager']}/{entry['operation']}"
        if entry.get("subresource"):
            name += f"/{entry['subresource']}"
        found[name] = sorted((entry.get("fieldsV1") or {}).get("f:spec") or {})
    return found


def owned_paths(fields: dict[str, Any], at: Path_ = ()) -> Iterator[Path_]:
    """The leaf fields of a FieldsV1 set, as paths (list items and `.` markers end a
    path)."""
    for key, below in fields.items():
        if not key.startswith("f:"):
            continue
        path = (*at, key[2:])
        if below and any(inner.startswith("f:") for inner in below):
            yield from owned_paths(below, path)
        else:
            yield path


def appliers_of(obj: dict[str, Any], path: Path_) -> set[str]:
    """The server-side appliers that own `path` of `obj`."""
    return {
        entry["manager"]
        for entry in obj["metadata"].get("managedFields") or []
        if entry.get("operation") == "Apply"
        and not entry.get("subresource")
        and path in set(owned_paths(entry.get("fieldsV1") or {}))
    }


def owners_of(obj: dict[str, Any], path: Path_) -> set[str]:
    return {
        entry["manager"]
        for entry in obj["metadata"].get("managedFields") or []
        if not entry.get("subresource") and path in set(owned_paths(entry.get("fieldsV1") or {}))
    }


def get_path(obj: dict[str, Any], path: Path_) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def set_path(obj: dict[str, Any], path: Path_, value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    if value is None:
        obj.pop(path[-1], None)
    else:
        obj[path[-1]] = value


def _identity(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]


@dataclass
class ArgoCd:
    plane: ControlPlane
    application: dict[str, Any] | None = None  # None: no ignore rules, no sync options

    MANAGER = "argocd-controller"

    def _rules(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        if self.application is None:
            return []
        group = obj["apiVersion"].rpartition("/")[0]
        return [
            rule
            for rule in self.application["spec"].get("ignoreDifferences") or []
            if rule.get("group", "") == group and rule.get("kind") == obj["kind"]
        ]

    def ignored(self, live: dict[str, Any]) -> set[Path_]:
        """The fields `managedFieldsManagers` leaves out of the diff: those they own."""
        managers = {m for rule in self._rules(live) for m in rule.get("managedFieldsManagers", [])}
        return {
            path
            for entry in live["metadata"].get("managedFields") or []
            if entry["manager"] in managers and not entry.get("subresource")
            for path in owned_paths(entry.get("fieldsV1") or {})
        }

    def out_of_sync(self, declared: dict[str, Any]) -> bool:
        """Whether a declared field differs from the live one, ignored fields aside."""
        live = self.plane.get(*_identity(declared))
        ignored = self.ignored(live)
        wanted = {path: get_path(declared, path) for path in _leaves(declared["spec"], ("spec",))}
        return any(
            get_path(live, path) != value for path, value in wanted.items() if path not in ignored
        )

    def sync(self, declared: dict[str, Any]) -> dict[str, Any]:
        """One sync of the declared object (a self-heal, or a commit)."""
        desired = copy.deepcopy(declared)
        options = (self.application or {}).get("spec", {}).get("syncPolicy", {})
        respect = "RespectIgnoreDifferences=true" in (options.get("syncOptions") or [])
        if respect and self.plane.exists(*_identity(declared)):  # no effect on a creation
            live = self.plane.get(*_identity(declared))
            for path in self.ignored(live):
                set_path(desired, path, get_path(live, path))
        return self.plane.apply(desired, manager=self.MANAGER, force=True)

    def self_heal(self, declared: dict[str, Any]) -> bool:
        """What `selfHeal` does on a refresh: a sync when out of sync; True when it synced."""
        if not self.out_of_sync(declared):
            return False
        self.sync(declared)
        return True


def _leaves(obj: dict[str, Any], at: Path_) -> Iterator[Path_]:
    for key, value in obj.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*at, key))
        else:
            yield (*at, key)


SSA_ANNOTATION = "kustomize.toolkit.fluxcd.io/ssa"


@dataclass
class Flux:
    plane: ControlPlane
    kustomization: dict[str, Any] | None = None

    MANAGER = "kustomize-controller"

    def reconcile(self, declared: dict[str, Any]) -> bool:
        """One reconcile of the declared object; True when it applied."""
        policy = declared["metadata"].get("annotations", {}).get(SSA_ANNOTATION, "Override")
        if policy == "Ignore":
            return False
        exists = self.plane.exists(*_identity(declared))
        if policy == "IfNotPresent" and exists:
            return False
        payload = copy.deepcopy(declared)
        live = self.plane.get(*_identity(declared)) if exists else None
        for pointer in self._ignored_pointers(declared):
            path = tuple(
                part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")
            )
            if live is None:
                continue
            appliers = appliers_of(live, path)
            if appliers - {self.MANAGER}:
                set_path(payload, path, None)  # strip: another applier keeps it
            elif appliers == {self.MANAGER}:
                set_path(payload, path, get_path(live, path))  # adopt the live value
        self.plane.apply(payload, manager=self.MANAGER, force=True)
        return True

    def _ignored_pointers(self, obj: dict[str, Any]) -> list[str]:
        if self.kustomization is None:
            return []
        group = obj["apiVersion"].rpartition("/")[0]
        pointers = []
        for rule in self.kustomization["spec"].get("ignore") or []:
            target = rule.get("target") or {}
            if "group" in target and not re.fullmatch(target["group"], group):
                continue
            if "kind" in target and not re.fullmatch(target["kind"], obj["kind"]):
                continue
            pointers += rule["paths"]
        return pointers


CHART_YAML = "apiVersion: v2\nname: web\nversion: 1.0.0\n"
HPA_TEMPLATE = """\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ .Values.name }}
  namespace: {{ .Release.Namespace }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ .Values.name }}
  minReplicas: {{ .Values.minReplicas }}
  maxReplicas: {{ .Values.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: memory
        target:
          type: Utilization
          averageUtilization: 80
"""


@dataclass
class Helm4:
    plane: ControlPlane
    chart_dir: Path
    release: str
    namespace: str

    MANAGER = "helm"

    @classmethod
    def chart(cls, plane: ControlPlane, folder: Path, release: str, namespace: str) -> Helm4:
        (folder / "templates").mkdir(parents=True, exist_ok=True)
        (folder / "Chart.yaml").write_text(CHART_YAML)
        (folder / "templates" / "hpa.yaml").write_text(HPA_TEMPLATE)
        return cls(plane, folder, release, namespace)

    def rendered(self, values: dict[str, Any]) -> list[dict[str, Any]]:
        """The chart's objects as Helm's engine renders them, with what Helm adds to each
        object of a release."""
        with helm.Chart.load(self.chart_dir) as chart:
            files = chart.render(values, name=self.release, namespace=self.namespace)
        objects = [
            doc
            for text in files.values()
            for doc in yaml.safe_load_all(text)
            if isinstance(doc, dict)
        ]
        for obj in objects:
            meta = obj["metadata"]
            meta.setdefault("labels", {})["app.kubernetes.io/managed-by"] = "Helm"
            meta.setdefault("annotations", {}).update(
                {
                    "meta.helm.sh/release-name": self.release,
                    "meta.helm.sh/release-namespace": self.namespace,
                }
            )
        return objects

    def upgrade(self, values: dict[str, Any], *, force_conflicts: bool = False) -> None:
        """`helm upgrade` (or install) of the release: each object applied whole as `helm`;
        a conflict raises the server's 409 (`ControlPlaneError`)."""
        for obj in self.rendered(values):
            self.plane.apply(obj, manager=self.MANAGER, force=force_conflicts)
