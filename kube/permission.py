"""The Kubernetes permission a request needs, named the way kube-apiserver names it.

A 403 from the API server means some rule (RBAC, an admission policy) refused one
permission: a verb on a resource of an API group, in a namespace or at the cluster scope.
The client (`kube.api`) derives it from every request's method and URL and attaches it to
its `Forbidden` (`kube.errors`), so a log line, a health reason or a scaling error event
can say exactly which rule is missing. It is built from the request, never parsed from the server's
message (whose wording an admission webhook chooses freely).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Path segments after `namespaces/<name>` that are subresources of the Namespace itself
# (kube-apiserver's `namespaceSubresources`), not a namespaced resource.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Permission:
    """One verb on one resource: `resource` is the plural, with its subresource after a
    slash (`pods/log`); `group` is "" for the core group; `namespace` None means the
    cluster scope."""

    verb: str
    group: str
    resource: str
    namespace: str | None = None

    def __str__(self) -> str:
        scope = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return f'cannot {self.verb} resource "{self.resource}" in API group "{self.group}" {scope}'

    @property
    def denied(self) -> str:
        """As a health reason or an error message: `forbidden: cannot list resource ...`."""
        return f"forbidden: {self}"


def refused(what: str, permission: Permission | None, detail: str) -> str:
    """The message of a 403: the call, the permission it
    needed first (what to fix), then the server's own words, which say which policy
    refused it when it was not RBAC."""
    if permission is None:
        return f"{what}: 403 {detail}"
    return f"{what}: {permission.denied} (403 {detail})"


def of_request(
    method: str, path: str, params: Mapping[str, str] | None = None
) -> Permission | None:
    """The permission a request to `path` needs, derived as kube-apiserver's
    `RequestInfoFactory` does; None for a path that is not an API resource (`/version`)."""
    parts = [part for part in path.split("?", 1)[0].split("/") if part]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) > 1 and rest[0] == "namespaces":
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    if not rest:
        return None
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    named = len(rest) > 1
    return Permission(
        verb=_verb(method.upper(), named=named, watch=_watches((params or {}).get("watch"))),
        group=group,
        resource=resource,
        namespace=namespace,
    )


def _watches(value: str | None) -> bool:
    """How the server reads `?watch=` (metav1's string-to-bool conversion): present and
    neither "0" nor "false" in any case is true, an empty value included."""
    return value is not None and value != "0" and value.lower() != "false"


def _verb(method: str, *, named: bool, watch: bool) -> str:
    if method == "GET":
        if named:
            return "get"  # `?watch=` only makes a collection's GET a watch
        return "watch" if watch else "list"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
