"""`/openapi/v3`: the fake's API described from the same bundled schemas it validates with.

kubectl reads these documents before `apply`, `create -f` and `edit`: the index
(`/openapi/v3`, one entry per group/version), then the document of the group/version it
writes. Finding that the write operations take a `fieldValidation` parameter, it leaves
validation to the server and sends `fieldValidation=Strict`; the schemas' patch metadata
(`x-kubernetes-patch-merge-key`) shapes the strategic merge patches `apply` computes.
Source: https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3.

The schemas come as JSON Schema 2020-12; OpenAPI 3.0 wants one `type` per schema and
references under `#/components/schemas/`, so each definition is converted once.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import msgspec

from sandbox.kube import resources, schemas
from sandbox.kube.resources import Resource

_WRITE_PARAMETERS = [
    {"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
    for name in ("dryRun", "fieldManager", "fieldValidation")
]


def _path_of(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def index(git_version: str) -> dict[str, Any]:
    paths = {}
    for group, version in resources.group_versions():
        body = document(git_version, group, version)
        digest = hashlib.sha512(body).hexdigest().upper()[:128]
        key = _path_of(group, version)
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


def find(git_version: str, path: str) -> bytes | None:
    """The document served at `/openapi/v3/{path}`, or None for a group/version not served."""
    for group, version in resources.group_versions():
        if path == _path_of(group, version):
            return document(git_version, group, version)
    return None


@functools.cache
def document(git_version: str, group: str, version: str) -> bytes:
    release = schemas.for_version(git_version)
    served = [r for r in resources.RESOURCES if (r.group, r.version) == (group, version)]
    paths: dict[str, Any] = {}
    wanted: list[str] = []
    for resource in served:
        definition = release.for_kind(group, version, resource.kind)
        if definition is None:
            continue
        wanted.append(definition)
        paths.update(_paths(resource, definition))
    components = {name: _convert(release.definition(name)) for name in _closure(release, wanted)}
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": git_version},
        "paths": paths,
        "components": {"schemas": components},
    }
    return msgspec.json.encode(doc)


def _paths(resource: Resource, definition: str) -> dict[str, Any]:
    gvk = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    ref = {"$ref": f"#/components/schemas/{definition}"}
    body = {"content": {"application/json": {"schema": ref}}, "required": True}
    answer = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}

    def operation(action: str, writes: bool) -> dict[str, Any]:
        op: dict[str, Any] = {
            "operationId": f"{action}{resource.kind}",
            "responses": answer,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        }
        if writes:
            op["parameters"] = _WRITE_PARAMETERS
            op["requestBody"] = body
        return op

    scope = "/namespaces/{namespace}" if resource.namespaced else ""
    base = f"/{_path_of(resource.group, resource.version)}{scope}/{resource.plural}"
    return {
        base: {"get": operation("list", False), "post": operation("post", True)},
        base + "/{name}": {
            "get": operation("get", False),
            "put": operation("put", True),
            "patch": operation("patch", True),
            "delete": operation("delete", False),
        },
    }


def _closure(release: schemas.Schemas, roots: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen[name] = None
        pending.extend(_refs(release.definition(name)))
    return list(seen)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [schemas.ref_name(node["$ref"])] if isinstance(node.get("$ref"), str) else []
        for value in node.values():
            found.extend(_refs(value))
        return found
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    return []


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(item) for item in node]
    if not isinstance(node, dict):
        return node
    if "oneOf" in node:  # IntOrString and Quantity: a string that may hold a number
        kinds = {t for option in node["oneOf"] for t in _type_list(option)}
        out = {k: v for k, v in node.items() if k != "oneOf"}
        out["type"] = "string"
        if "integer" in kinds:
            out["format"] = "int-or-string"
            out["x-kubernetes-int-or-string"] = True
        return out
    out = {}
    for key, value in node.items():
        if key == "$ref":
            out[key] = "#/components/schemas/" + schemas.ref_name(value)
        elif key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            if kinds:
                out[key] = kinds[0]
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _convert(schema) for name, schema in value.items()}
        else:
            out[key] = _convert(value)
    if "$ref" in out and len(out) > 1:  # OpenAPI 3.0 ignores siblings of a $ref
        return {"allOf": [{"$ref": out.pop("$ref")}], **out}
    return out


def _type_list(node: dict[str, Any]) -> list[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        return [declared]
    return [t for t in declared or () if t != "null"]
