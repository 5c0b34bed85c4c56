"""Authorization as kube-apiserver's RBAC authorizer does it, from the fake's own objects.

`Authorizer.check` allows a request (its `requestinfo.RequestInfo`) when a rule reached
through a binding that names the user, one of its groups or its ServiceAccount allows it:
ClusterRoleBindings everywhere, RoleBindings (to a Role or a ClusterRole) in their own
namespace only. Rules match verb, API group, resource (exact, `*`, or `*/subresource`),
`resourceNames` (which no list, watch or create without a name can meet) and
`nonResourceURLs` (exact, `*`, or a `prefix*`). A binding whose role does not exist grants
nothing and is named in the denial's reason, as upstream. Aggregated ClusterRoles are not
expanded.

With RBAC on, the fake also holds the bootstrap roles every cluster has (`BOOTSTRAP`:
`system:discovery`, `system:basic-user`, `system:public-info-viewer`), so any authenticated
user may read `/version`, `/api`, `/apis` and `/openapi` and ask what it may do
(SelfSubjectAccessReviews), and anybody the version and health checks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

from sandbox.kube import auth, status
from sandbox.kube.requestinfo import RequestInfo, forbidden
from sandbox.kube.resources import Resource, resolve
from sandbox.kube.store import Store

_CLUSTER_ROLES = resolve("clusterroles.rbac.authorization.k8s.io")
_CLUSTER_ROLE_BINDINGS = resolve("clusterrolebindings.rbac.authorization.k8s.io")
_ROLES = resolve("roles.rbac.authorization.k8s.io")
_ROLE_BINDINGS = resolve("rolebindings.rbac.authorization.k8s.io")
RBAC_RESOURCES = (_CLUSTER_ROLES, _CLUSTER_ROLE_BINDINGS, _ROLES, _ROLE_BINDINGS)

AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"


def groups_of(user: str) -> tuple[str, ...]:
    """The groups a token authenticator puts a user in: a ServiceAccount is in
    `system:serviceaccounts` and that of its namespace; everybody known is authenticated."""
    if user == auth.ANONYMOUS:
        return (UNAUTHENTICATED,)
    prefix = "system:serviceaccount:"
    if user.startswith(prefix):
        namespace = user.removeprefix(prefix).split(":", 1)[0]
        return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED)
    return (AUTHENTICATED,)


class Authorizer:
    """Allows or denies requests from the RBAC objects in `store`; off until enabled."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._enabled = threading.Event()

    @property
    def enabled(self) -> bool:
        return self._enabled.is_set()

    def enable(self) -> None:
        self._enabled.set()

    def disable(self) -> None:
        self._enabled.clear()

    def check(self, user: str, info: RequestInfo) -> None:
        """Raise the 403 the API server would answer, unless RBAC is off or allows it."""
        if info.path in auth.SANDBOX_PATHS:
            return
        allowed, reason = self.decide(user, info)
        if not allowed:
            raise forbidden(info, user, reason)

    def decide(self, user: str, info: RequestInfo) -> tuple[bool, str]:
        """Whether `user` may do what `info` asks, and the reason upstream's Authorize
        gives: the binding that allowed it, or the bindings that could not be followed on
        the way (their role is missing). With RBAC off everything is allowed, no reason."""
        if not self.enabled:
            return True, ""
        errors: list[str] = []
        for source, rules in self._rules_for(user, info.namespace, errors):
            if any(rule_allows(rule, info) for rule in rules):
                return True, f"RBAC: allowed by {source}"
        if not errors:
            return False, ""
        # Worded as Go's error aggregate: repeats dropped, one error as it is, several in
        # brackets.
        unique = list(dict.fromkeys(errors))
        return False, "RBAC: " + (unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]")

    def _rules_for(
        self, user: str, namespace: str, errors: list[str]
    ) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """(the binding as upstream describes it, its role's rules) for each binding that
        applies to `user` in `namespace`."""
        groups = groups_of(user)
        for binding in self._objects(_CLUSTER_ROLE_BINDINGS, None):
            subject = _bound_subject(binding, user, groups, "")
            if subject is not None:
                source = f'ClusterRoleBinding "{binding["metadata"]["name"]}"'
                yield _describe(source, binding, subject, ""), self._role_rules(binding, "", errors)
        if not namespace:
            return
        for binding in self._objects(_ROLE_BINDINGS, namespace):
            subject = _bound_subject(binding, user, groups, namespace)
            if subject is not None:
                source = f'RoleBinding "{binding["metadata"]["name"]}/{namespace}"'
                rules = self._role_rules(binding, namespace, errors)
                yield _describe(source, binding, subject, namespace), rules

    def _role_rules(
        self, binding: dict[str, Any], namespace: str, errors: list[str]
    ) -> list[dict[str, Any]]:
        ref = binding.get("roleRef") or {}
        kind, name = ref.get("kind"), str(ref.get("name", ""))
        if kind not in ("ClusterRole", "Role"):
            errors.append(f'unsupported role reference kind: "{kind or ""}"')
            return []
        resource = _CLUSTER_ROLES if kind == "ClusterRole" else _ROLES
        role = self._find(resource, namespace if kind == "Role" else "", name)
        if role is None:
            # The informer lister's NotFound: the singular resource, qualified by its group.
            errors.append(f'{resource.singular}.{resource.group} "{name}" not found')
            return []
        rules: list[dict[str, Any]] = role.get("rules") or []
        return rules

    def _objects(self, resource: Resource, namespace: str | None) -> list[dict[str, Any]]:
        _, entries = self._store.snapshot(resource, namespace)
        return [entry.decode() for entry in entries]

    def _find(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._store.get(resource, namespace or None, name).decode()
        except status.ApiError:
            return None


def _bound_subject(
    binding: dict[str, Any], user: str, groups: tuple[str, ...], namespace: str
) -> dict[str, Any] | None:
    """The first subject of `binding` that is `user`, as upstream's appliesToUser decides."""
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "User" and name == user:
            return subject
        if kind == "Group" and name in groups:
            return subject
        if kind == "ServiceAccount":
            account_namespace = subject.get("namespace") or namespace
            if account_namespace and auth.service_account(account_namespace, name) == user:
                return subject
    return None


def _describe(source: str, binding: dict[str, Any], subject: dict[str, Any], namespace: str) -> str:
    """`ClusterRoleBinding "b" of ClusterRole "r" to User "u"`, as upstream's describers word
    it; a ServiceAccount is `name/namespace`."""
    ref = binding.get("roleRef") or {}
    name = subject.get("name", "")
    if subject.get("kind") == "ServiceAccount":
        name = f"{name}/{subject.get('namespace') or namespace}"
    role = f'{ref.get("kind", "")} "{ref.get("name", "")}"'
    return f'{source} of {role} to {subject.get("kind")} "{name}"'


def rule_allows(rule: dict[str, Any], info: RequestInfo) -> bool:
    """Whether one PolicyRule covers the request, as upstream's RuleAllows decides."""
    if not _has(rule.get("verbs"), info.verb):
        return False
    if not info.resource_request:
        return any(_url_matches(url, info.path) for url in rule.get("nonResourceURLs") or [])
    if not _has(rule.get("apiGroups"), info.api_group):
        return False
    if not _resource_matches(rule.get("resources") or [], info):
        return False
    names = rule.get("resourceNames") or []
    return not names or info.name in names


def _has(values: Iterable[str] | None, wanted: str) -> bool:
    values = list(values or [])
    return "*" in values or wanted in values


def _resource_matches(resources: list[str], info: RequestInfo) -> bool:
    for resource in resources:
        if resource in ("*", info.full_resource):
            return True
        if info.subresource and resource == f"*/{info.subresource}":
            return True
    return False


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url in ("*", path):
        return True
    return rule_url.endswith("*") and path.startswith(rule_url.rstrip("*"))


def _bootstrap_role(
    name: str, rules: list[dict[str, Any]], groups: list[str]
) -> list[dict[str, Any]]:
    metadata = {
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata,
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
            for group in groups
        ],
    }
    return [role, binding]


def _get(*urls: str) -> dict[str, Any]:
    return {"nonResourceURLs": list(urls), "verbs": ["get"]}


def _create(group: str, *resources: str) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": list(resources), "verbs": ["create"]}


# Roles of kube-apiserver's bootstrap policy (plugin/pkg/auth/authorizer/rbac/
# bootstrappolicy/policy.go): discovery and asking about oneself for every authenticated
# user, version and health checks for anybody.
_HEALTH = ("/healthz", "/livez", "/readyz", "/version", "/version/")
BOOTSTRAP = (
    _bootstrap_role(
        "system:discovery",
        [_get(*_HEALTH, "/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*")],
        [AUTHENTICATED],
    )
    + _bootstrap_role(
        "system:basic-user",
        [
            _create("authorization.k8s.io", "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
            _create("authentication.k8s.io", "selfsubjectreviews"),
        ],
        [AUTHENTICATED],
    )
    + _bootstrap_role(
        "system:public-info-viewer", [_get(*_HEALTH)], [AUTHENTICATED, UNAUTHENTICATED]
    )
)
