"""What a request asks for, in the terms authorization uses, and the 403 that refuses it.

`request_info` parses a request as the API server's request-info factory does, from the
path and query alone and without knowing whether the resource exists: a non-resource path
(`/version`, `/apis`) keeps its path and the lowercased HTTP method; a resource path gets a
verb (GET on a collection is `list`, or `watch` with `?watch=true` or the legacy `/watch/`
prefix; DELETE on a collection is `deletecollection`), an API group, a resource and
subresource (`pods/log`), a namespace and a name (for a list or watch narrowed by
`fieldSelector=metadata.name=...`, that name). `forbidden` words the 403 Status as the
API server's authorization filter does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from sandbox.kube import status
from sandbox.kube.options import flag
from sandbox.kube.selectors import required_value

_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
# A namespace's own subresources: /api/v1/namespaces/NAME/status is about the namespace.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
# What the forbidden message escapes so that it never reads as HTML (quotes are kept).
_SANITIZED = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """A request's authorization attributes, as the API server's RequestInfo holds them."""

    verb: str
    path: str
    resource_request: bool
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def full_resource(self) -> str:
        """`pods/log`: the resource with its subresource, as rules and messages spell it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def describe(self, user: str) -> str:
        """The sentence upstream's forbidden message makes of a denied request."""
        if not self.resource_request:
            return f'User "{user}" cannot {self.verb} path "{self.path}"'
        where = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return (
            f'User "{user}" cannot {self.verb} resource "{self.full_resource}" '
            f'in API group "{self.api_group}" {where}'
        )


def request_info(method: str, path: str, query: dict[str, str]) -> RequestInfo:
    """The attributes of one request, parsed as the API server's request-info factory does:
    from the path alone, without knowing whether the resource exists."""
    path = unquote(path)  # Go's URL.Path: decoded before it is split
    parts = [part for part in path.strip("/").split("/") if part]
    non_resource = RequestInfo(verb=method.lower(), path=path, resource_request=False)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    rest = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(rest) < 3:
            return non_resource
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    verb = _METHOD_VERBS.get(method, "")
    if rest and rest[0] == "watch" and len(rest) > 1:
        verb, rest = "watch", rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name and verb == "get":
        # Any value but "false" or "0", even an empty one, asks for a watch.
        verb = "watch" if flag(query, "watch") else "list"
        name = _path_segment(required_value(query.get("fieldSelector", ""), "metadata.name"))
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(
        verb=verb,
        path=path,
        resource_request=True,
        api_group=group,
        api_version=version,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
    )


def _path_segment(name: str | None) -> str:
    """`name` when it could stand in a path as an object's name, else ""."""
    if name and "/" not in name and name not in (".", ".."):
        return name
    return ""


def forbidden(info: RequestInfo, user: str, reason: str = "") -> status.ApiError:
    """The 403 the API server's authorization filter answers a denied request with."""
    why = info.describe(user).translate(_SANITIZED) + (f": {reason}" if reason else "")
    if not info.resource_request:
        # No resource: a Status whose details are there but empty.
        return status.ApiError(403, "Forbidden", f"forbidden: {why}", details={})
    qualified = f"{info.resource}.{info.api_group}" if info.api_group else info.resource
    subject = f'{qualified} "{info.name}"' if info.name else qualified
    details: dict[str, Any] = {}
    if info.name:
        details["name"] = info.name
    if info.api_group:
        details["group"] = info.api_group
    details["kind"] = info.resource
    return status.ApiError(403, "Forbidden", f"{subject} is forbidden: {why}", details=details)
