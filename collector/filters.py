"""The user's filters: which objects are never recorded, which node labels never shipped.

`ignore_resources` entries are `<kind>/<glob>` (an object of that name in any namespace,
or a cluster-scoped one) or `<kind>/<namespace-glob>/<name-glob>`, with `fnmatch` globs
matched case-sensitively, as Kubernetes names are. The kind is a record kind of the
contract or one of the Kubernetes-style aliases users write (`ACCEPTED_KINDS` lists them
all; `job/*` skips the executions of every CronJob's Jobs). `*` matches every kind.

A kind nobody recognises raises ValueError at construction: a filter that silently
matches nothing would ship what the user asked to keep out.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

RECORD_KINDS = frozenset(
    {
        "namespace",
        "node",
        "deployment",
        "revision",
        "hpa",
        "service",
        "ingress",
        "network_policy",
        "rbac",
        "cronjob",
        "job_execution",
        "helm_release",
        "pod_error",
    }
)
KIND_ALIASES = {
    "job": "job_execution",
    "replicaset": "revision",
    "pod": "pod_error",
    "networkpolicy": "network_policy",
    "helmrelease": "helm_release",
    "helm": "helm_release",
    "horizontalpodautoscaler": "hpa",
}
ACCEPTED_KINDS = RECORD_KINDS | KIND_ALIASES.keys() | {"*"}


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str  # a record kind or "*"
    namespace: re.Pattern[str] | None  # None: any namespace, and cluster-scoped objects
    name: re.Pattern[str]

    def matches(self, kind: str, namespace: str | None, name: str) -> bool:
        if self.kind not in ("*", kind) or not self.name.fullmatch(name):
            return False
        if self.namespace is None:
            return True
        return namespace is not None and bool(self.namespace.fullmatch(namespace))


class Filters:
    """Built once from the settings; `skip` is asked for every object before normalizing."""

    def __init__(
        self,
        ignore_namespaces: Iterable[str] = (),
        ignore_resources: Iterable[str] = (),
        ignore_node_labels: Iterable[str] = (),
    ) -> None:
        self._namespaces = _patterns(ignore_namespaces)
        self._rules = tuple(_rule(entry) for entry in ignore_resources)
        self._node_labels = tuple(ignore_node_labels)

    @property
    def ignored_node_labels(self) -> tuple[str, ...]:
        return self._node_labels

    def skip(self, kind: str, namespace: str | None, name: str) -> bool:
        """Whether the object `name` of record kind `kind` is kept out of every record.

        A namespace record is skipped when its own name is an ignored namespace, so an
        ignored namespace disappears from the inventory as well as its contents.
        """
        scope = name if kind == "namespace" else namespace
        if scope is not None and any(p.fullmatch(scope) for p in self._namespaces):
            return True
        return any(rule.matches(kind, namespace, name) for rule in self._rules)

    def node_labels(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The node's labels without the ignored keys (exact keys or globs), sorted."""
        return without_keys(labels, self._node_labels)


def without_keys(labels: Mapping[str, str], ignored: Iterable[str]) -> dict[str, str]:
    """`labels` sorted, minus every key equal to or matching a glob in `ignored`."""
    patterns = _patterns(ignored)
    return {
        key: labels[key]
        for key in sorted(labels)
        if not any(pattern.fullmatch(key) for pattern in patterns)
    }


def canonical_kind(kind: str) -> str:
    """The record kind a user-written kind stands for; ValueError when there is none."""
    if kind not in ACCEPTED_KINDS:
        raise ValueError(f"unknown kind {kind!r}; use one of {', '.join(sorted(ACCEPTED_KINDS))}")
    return KIND_ALIASES.get(kind, kind)


def check_resource_glob(entry: str) -> None:
    """ValueError naming what is wrong with an `ignore_resources` entry (configuration)."""
    _rule(entry)


def _rule(entry: str) -> _Rule:
    parts = entry.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError("expected <kind>/<glob> or <kind>/<namespace-glob>/<name-glob>")
    kind = canonical_kind(parts[0])
    namespace = _compile(parts[1]) if len(parts) == 3 else None
    return _Rule(kind, namespace, _compile(parts[-1]))


def _patterns(globs: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(_compile(glob) for glob in globs)


def _compile(glob: str) -> re.Pattern[str]:
    # fnmatch.translate anchors at the end; fullmatch anchors the start as well.
    return re.compile(fnmatch.translate(glob))
