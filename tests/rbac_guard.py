"""Holding the requests a workload made against the RBAC its chart rendered for it.

Each rule of a rendered Role or ClusterRole is cut into grants, one verb on one resource of
one API group (with the rule's `resourceNames`, and the namespace a Role or RoleBinding
limits it to), so a report names the exact permission. `refused` finds the requests no
grant of the ServiceAccount allows; `unused` the grants no request needed; `redundant` the
grants another grant of the same account already covers; `failed` the requests answered
with an error the test did not provoke. Matching is the fake's RBAC
authorizer's own (`sandbox.kube.rbac.rule_allows`), which follows kube-apiserver's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from sandbox.kube.auth import service_account
from sandbox.kube.faults import RequestRecord
from sandbox.kube.rbac import rule_allows
from sandbox.kube.requestinfo import RequestInfo
from tests.chart_render import NAMESPACE, Rendered, bindings_of


@dataclass(frozen=True)
class Grant:
    """One verb on one resource of one group, as one rule of one role grants it."""

    role: str  # "ClusterRole/moonin-agent-scaling"
    verb: str
    group: str
    resource: str
    names: tuple[str, ...]
    namespace: str | None  # None: every namespace and the cluster scope

    def allows(self, info: RequestInfo) -> bool:
        if self.namespace is not None and info.namespace != self.namespace:
            return False
        rule = {
            "verbs": [self.verb],
            "apiGroups": [self.group],
            "resources": [self.resource],
            "resourceNames": list(self.names),
        }
        return rule_allows(rule, info)

    def covers(self, other: Grant) -> bool:
        """Whether every request `other` allows is allowed by this grant too."""
        return (
            (self.verb, self.group, self.resource) == (other.verb, other.group, other.resource)
            and (self.namespace is None or self.namespace == other.namespace)
            and (not self.names or (bool(other.names) and set(other.names) <= set(self.names)))
        )

    def __str__(self) -> str:
        names = f" named {', '.join(self.names)}" if self.names else ""
        scope = f" in namespace {self.namespace}" if self.namespace else ""
        return (
            f'{self.role}: {self.verb} "{self.resource}" in API group "{self.group}"{names}{scope}'
        )


def grants_of(rendered: Rendered, account: str) -> list[Grant]:
    """Every grant the chart gives the ServiceAccount `account`, through any binding."""
    grants: list[Grant] = []
    for binding, role in bindings_of(rendered, account):
        role_name = f"{role['kind']}/{role['metadata']['name']}"
        bound_in = (
            binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        )
        grants.extend(
            Grant(role_name, verb, group, resource, tuple(rule.get("resourceNames", ())), bound_in)
            for rule in role["rules"]
            for verb in rule["verbs"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
        )
    return grants


def requests_of(records: Iterable[RequestRecord], account: str) -> list[RequestRecord]:
    user = service_account(NAMESPACE, account)
    return [record for record in records if record.user == user]


def describe(record: RequestRecord) -> str:
    assert record.info is not None
    info = record.info
    if not info.resource_request:
        return f"{record.method} {record.path} ({info.verb} path)"
    where = f'namespace "{info.namespace}"' if info.namespace else "cluster scope"
    name = f' "{info.name}"' if info.name else ""
    return (
        f'{record.method} {record.path}: {info.verb} "{info.full_resource}"{name} '
        f'in API group "{info.api_group}", {where} -> {record.status}'
    )


def refused(records: Iterable[RequestRecord], grants: list[Grant]) -> list[str]:
    """The requests the API server refused, and the resource requests no grant allows
    (non-resource paths such as /version are every authenticated user's)."""
    found = []
    for record in records:
        assert record.info is not None
        allowed = not record.info.resource_request or any(g.allows(record.info) for g in grants)
        if record.status in (401, 403) or not allowed:
            found.append(describe(record))
    return found


Answer = tuple[str, str, int]
"""An answer a test provokes: (verb, resource with its subresource or "*" for any, HTTP
status)."""
# What leader election meets on its way, as client-go's does: no Lease yet (404), another
# replica creating it first (409) or writing it between a read and an update (409).
LEADER_ELECTION: frozenset[Answer] = frozenset(
    {("get", "leases", 404), ("create", "leases", 409), ("update", "leases", 409)}
)


def failed(records: Iterable[RequestRecord], provoked: Collection[Answer]) -> list[str]:
    """The requests answered with an error (4xx but the refusals `refused` reports, or
    5xx) that are not among the answers the test provoked."""
    found = []
    for record in records:
        assert record.info is not None
        info = record.info
        answers = {(info.verb, info.full_resource, record.status), (info.verb, "*", record.status)}
        if record.status >= 400 and record.status not in (401, 403) and not answers & set(provoked):
            found.append(describe(record))
    return found


def unused(records: Iterable[RequestRecord], grants: list[Grant]) -> list[Grant]:
    infos = [record.info for record in records if record.info is not None]
    return [grant for grant in grants if not any(grant.allows(info) for info in infos)]


def redundant(grants: list[Grant]) -> list[Grant]:
    return [
        grant
        for index, grant in enumerate(grants)
        if any(other.covers(grant) for other in grants[:index] + grants[index + 1 :])
    ]
