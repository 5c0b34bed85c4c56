"""Roles, RoleBindings, ClusterRoles, ClusterRoleBindings -> `rbac` records.

Four sources, one record kind, keyed `Kind/namespace/name` (Role, RoleBinding) or
`Kind/name` (ClusterRole, ClusterRoleBinding) so the four never collide. Roles carry their
rules (verbs, resources, API groups and resource names are policy, not secrets) and, for
aggregated ClusterRoles, the selectors they aggregate; bindings carry the role they grant
and the kind, name and namespace of each subject.
"""

from __future__ import annotations

from typing import Any

import msgspec

from collector import sanitize
from collector.model import ObjectMeta, delete, upsert
from collector.normalize.base import Context
from collector.sanitize import LabelSelector
from shipper.records import Record

KIND = "rbac"


class PolicyRule(msgspec.Struct, rename="camel", frozen=True):
    api_groups: list[str] | None = None
    resources: list[str] | None = None
    verbs: list[str] | None = None
    resource_names: list[str] | None = None
    non_resource_urls: list[str] | None = msgspec.field(default=None, name="nonResourceURLs")


class AggregationRule(msgspec.Struct, rename="camel", frozen=True):
    cluster_role_selectors: list[LabelSelector] | None = None


class Role(msgspec.Struct, rename="camel", frozen=True):
    """A Role or a ClusterRole."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    rules: list[PolicyRule] | None = None
    aggregation_rule: AggregationRule | None = None


class RoleRef(msgspec.Struct, rename="camel", frozen=True):
    api_group: str | None = None
    kind: str = ""
    name: str = ""


class Subject(msgspec.Struct, frozen=True):
    kind: str = ""
    name: str = ""
    namespace: str | None = None


class RoleBinding(msgspec.Struct, rename="camel", frozen=True):
    """A RoleBinding or a ClusterRoleBinding."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    role_ref: RoleRef = msgspec.field(default_factory=RoleRef)
    subjects: list[Subject] | None = None


def rbac_key(source: str, meta: ObjectMeta) -> str:
    return f"{source}/{meta.key}"


def role_data(source: str, obj: Role) -> dict[str, Any]:
    rules = obj.rules or []
    aggregation = obj.aggregation_rule
    return {
        "kind": source,
        "labels": sanitize.labels(obj.metadata.labels),
        "annotations": sanitize.annotations(obj.metadata.annotations),
        "rule_count": len(rules),
        "rules": [
            {
                "api_groups": rule.api_groups or [],
                "resources": rule.resources or [],
                "verbs": rule.verbs or [],
                "resource_names": rule.resource_names or [],
                "non_resource_urls": rule.non_resource_urls or [],
            }
            for rule in rules
        ],
        "aggregation_selectors": (
            [sanitize.selector(sel) for sel in aggregation.cluster_role_selectors or []]
            if aggregation
            else None
        ),
        "created_at": obj.metadata.creation_timestamp,
    }


def binding_data(source: str, obj: RoleBinding) -> dict[str, Any]:
    ref = obj.role_ref
    subjects = sorted(obj.subjects or [], key=lambda s: (s.kind, s.namespace or "", s.name))
    return {
        "kind": source,
        "labels": sanitize.labels(obj.metadata.labels),
        "annotations": sanitize.annotations(obj.metadata.annotations),
        "role_ref": {"kind": ref.kind, "name": ref.name, "api_group": ref.api_group},
        "subjects": [{"kind": s.kind, "name": s.name, "namespace": s.namespace} for s in subjects],
        "created_at": obj.metadata.creation_timestamp,
    }


class RoleNormalizer:
    """Role or ClusterRole, told apart by `source`."""

    kind = KIND
    struct = Role

    def __init__(self, source: str) -> None:
        self.source = source

    def upserts(self, obj: Role, ctx: Context) -> list[Record]:
        key = rbac_key(self.source, obj.metadata)
        return [upsert(self.kind, obj.metadata, role_data(self.source, obj), key=key)]

    def deletes(self, obj: Role, ctx: Context) -> list[Record]:
        return [delete(self.kind, obj.metadata, key=rbac_key(self.source, obj.metadata))]


class RoleBindingNormalizer:
    """RoleBinding or ClusterRoleBinding, told apart by `source`."""

    kind = KIND
    struct = RoleBinding

    def __init__(self, source: str) -> None:
        self.source = source

    def upserts(self, obj: RoleBinding, ctx: Context) -> list[Record]:
        key = rbac_key(self.source, obj.metadata)
        return [upsert(self.kind, obj.metadata, binding_data(self.source, obj), key=key)]

    def deletes(self, obj: RoleBinding, ctx: Context) -> list[Record]:
        return [delete(self.kind, obj.metadata, key=rbac_key(self.source, obj.metadata))]


ROLE = RoleNormalizer("Role")
CLUSTER_ROLE = RoleNormalizer("ClusterRole")
ROLE_BINDING = RoleBindingNormalizer("RoleBinding")
CLUSTER_ROLE_BINDING = RoleBindingNormalizer("ClusterRoleBinding")
NORMALIZERS = (ROLE, ROLE_BINDING, CLUSTER_ROLE, CLUSTER_ROLE_BINDING)
