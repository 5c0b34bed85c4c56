"""The Kubernetes API schemas of the version the fake reports, from `kubernetes-validate`.

That package ships the OpenAPI definitions of every Kubernetes release it knows as one JSON
Schema document per release (`_definitions.json`, each definition named as upstream:
`io.k8s.api.apps.v1.DeploymentSpec`, top-level kinds tagged with
`x-kubernetes-group-version-kind`). The fake decodes, prunes and validates request bodies
against them (`decoding`) and serves them as `/openapi/v3` (`openapi`). A reported version
newer than the newest bundled one uses the newest; older than the oldest, the oldest.

Loading a release costs about 0.1 s and a few MiB, once per process and release.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from dataclasses import dataclass
from typing import Any

import msgspec

_PACKAGE = "kubernetes_validate"
_FOLDER = re.compile(r"^v1\.(\d+)\.0-local$")
_REF_PREFIX = "#/$defs/"


@dataclass(frozen=True, slots=True)
class Schemas:
    """One release's definitions, and which definition describes each group/version/kind."""

    minor: int
    definitions: dict[str, Any]
    by_kind: dict[tuple[str, str, str], str]  # (group, version, kind) -> definition name

    def definition(self, name: str) -> dict[str, Any]:
        return self.definitions[name]

    def for_kind(self, group: str, version: str, kind: str) -> str | None:
        return self.by_kind.get((group, version, kind))


def ref_name(ref: str) -> str:
    """`#/$defs/io.k8s.api.apps.v1.Deployment` -> the definition's name."""
    return ref.removeprefix(_REF_PREFIX)


def go_type(definition: str) -> str:
    """`io.k8s.api.apps.v1.DeploymentSpec` -> `DeploymentSpec`, as Go messages name it."""
    return definition.rsplit(".", 1)[-1]


def minor_of(git_version: str) -> int:
    match = re.match(r"^v?1\.(\d+)", git_version)
    if match is None:
        raise ValueError(f"not a Kubernetes 1.x version: {git_version!r}")
    return int(match.group(1))


def bundled_minors() -> list[int]:
    root = importlib.resources.files(_PACKAGE).joinpath("kubernetes-json-schema")
    return sorted(int(m.group(1)) for e in root.iterdir() if (m := _FOLDER.match(e.name)))


def for_version(git_version: str) -> Schemas:
    """The schemas of the bundled release closest to `git_version` (see the module doc)."""
    minors = bundled_minors()
    wanted = minor_of(git_version)
    chosen = max((m for m in minors if m <= wanted), default=minors[0])
    return _load(chosen)


@functools.cache
def _load(minor: int) -> Schemas:
    path = importlib.resources.files(_PACKAGE).joinpath(
        f"kubernetes-json-schema/v1.{minor}.0-local/_definitions.json"
    )
    definitions: dict[str, Any] = msgspec.json.decode(path.read_bytes())["$defs"]
    by_kind: dict[tuple[str, str, str], str] = {}
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind") or ():
            key = (gvk.get("group", ""), gvk["version"], gvk["kind"])
            # The same kind appears under several packages (meta/v1 DeleteOptions, ...);
            # the API group's own package is the one to serve.
            if key not in by_kind or "apimachinery" in by_kind[key]:
                by_kind[key] = name
    return Schemas(minor, definitions, by_kind)
