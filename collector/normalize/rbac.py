"""Roles, RoleBindings, ClusterRoles, ClusterRoleBindings -> `rbac` records.

Four sources, one record kind, keyed `Kind/namespace/name` (Role, RoleBinding) or
`Kind/name` (ClusterRole, ClusterRoleBinding) so the four never collide. Roles carry their
rules (verbs, resources, API groups and resource names are policy, not secrets) and, for
aggregated ClusterRoles, the selectors they aggregate; bindings carry the role they grant
and the kind, name and namespace of each subject.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec

from collector import sanitize
from collector.model import ObjectMeta
from collector.normalize.base import Obj, PerObject
from collector.sanitize import LabelSelector

KIND = "rbac"


class PolicyRule(msgspec.Struct, rename="camel", frozen=True, gc=False):
    api_groups: list[str] | None = None
    resources: list[str] | None = None
    verbs: list[str] | None = None
    resource_names: list[str] | None = None
    non_resource_urls: list[str] | None = msgspec.field(default=None, name="nonResourceURLs")


class AggregationRule(msgspec.Struct, rename="camel", frozen=True, gc=False):
    cluster_role_selectors: list[LabelSelector] | None = None


class Role(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """A Role or a ClusterRole."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    rules: list[PolicyRule] | None = None
    aggregation_rule: AggregationRule | None = None


class RoleRef(msgspec.Struct, rename="camel", frozen=True, gc=False):
    api_group: str | None = None
    kind: str = ""
    name: str = ""


class Subject(msgspec.Struct, frozen=True, gc=False):
    kind: str = ""
    name: str = ""
    namespace: str | None = None


class RoleBinding(msgspec.Struct, rename="camel", frozen=True, gc=False):
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
        "annotations": sanitize.safe_annotations(obj.metadata.annotations),
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
        "annotations": sanitize.safe_annotations(obj.metadata.annotations),
        "role_ref": {"kind": ref.kind, "name": ref.name, "api_group": ref.api_group},
        "subjects": [{"kind": s.kind, "name": s.name, "namespace": s.namespace} for s in subjects],
        "created_at": obj.metadata.creation_timestamp,
    }


def _normalizer(
    source: str, struct: type[Obj], data: Callable[[str, Obj], dict[str, Any]]
) -> PerObject[Obj]:
    """Role, ClusterRole, RoleBinding or ClusterRoleBinding: told apart by `source`."""
    return PerObject(
        kind=KIND,
        source=source,
        struct=struct,
        data=lambda obj, ctx: data(source, obj),
        key=functools.partial(rbac_key, source),
    )


ROLE = _normalizer("Role", Role, role_data)
CLUSTER_ROLE = _normalizer("ClusterRole", Role, role_data)
ROLE_BINDING = _normalizer("RoleBinding", RoleBinding, binding_data)
CLUSTER_ROLE_BINDING = _normalizer("ClusterRoleBinding", RoleBinding, binding_data)
NORMALIZERS = (ROLE, ROLE_BINDING, CLUSTER_ROLE, CLUSTER_ROLE_BINDING)
