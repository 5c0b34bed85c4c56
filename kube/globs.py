"""`IGNORE_RESOURCES`: the grammar of the resource globs, read the same way by every role.

An entry is `<kind>/<glob>` (an object of that name in any namespace, or a cluster-scoped
one) or `<kind>/<namespace-glob>/<name-glob>`, with `fnmatch` globs matched
case-sensitively, as Kubernetes names are. The kind is a record kind of the contract or one
of the Kubernetes-style aliases users write (`ACCEPTED_KINDS` lists them all; `job/*`
skips the executions of every CronJob's Jobs); `*` matches every kind. Discovery applies
every entry; the scaling role only those of the kinds it touches (`deployment`, `hpa`).

How it fails: ValueError, naming what is wrong, for an entry that is not two or three
non-empty parts or whose kind nobody recognises: a filter that silently matches nothing
would ship, or scale, what the user asked to keep out.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable
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
# The kinds the scaling role touches: an action's Deployment and the HPA it would manage.
DEPLOYMENT = "deployment"
HPA = "hpa"
SCALED_KINDS = frozenset({DEPLOYMENT, HPA})


@dataclass(frozen=True, slots=True)
class ResourceGlob:
    """One entry, its kind made canonical (a record kind, or "*")."""

    kind: str
    namespace: re.Pattern[str] | None  # None: any namespace, and cluster-scoped objects
    name: re.Pattern[str]

    def matches(self, kind: str, namespace: str | None, name: str) -> bool:
        if self.kind not in ("*", kind) or not self.name.fullmatch(name):
            return False
        if self.namespace is None:
            return True
        return namespace is not None and bool(self.namespace.fullmatch(namespace))


class ResourceGlobs:
    """Built once from the configured entries; `kinds` keeps only the entries that can
    match one of them (those of other kinds are checked, then dropped)."""

    def __init__(self, entries: Iterable[str] = (), *, kinds: Collection[str] | None = None):
        parsed = (parse(entry) for entry in entries)
        self._globs = tuple(
            glob for glob in parsed if kinds is None or glob.kind == "*" or glob.kind in kinds
        )

    def matches(self, kind: str, namespace: str | None, name: str) -> bool:
        """Whether the object `name` of record kind `kind` in `namespace` is ignored."""
        return any(glob.matches(kind, namespace, name) for glob in self._globs)

    def __bool__(self) -> bool:
        return bool(self._globs)


def parse(entry: str) -> ResourceGlob:
    """One entry; ValueError naming what is wrong with it."""
    parts = entry.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError("expected <kind>/<glob> or <kind>/<namespace-glob>/<name-glob>")
    kind = canonical_kind(parts[0])
    namespace = compile_glob(parts[1]) if len(parts) == 3 else None
    return ResourceGlob(kind, namespace, compile_glob(parts[-1]))


def canonical_kind(kind: str) -> str:
    """The record kind a user-written kind stands for; ValueError when there is none."""
    if kind not in ACCEPTED_KINDS:
        raise ValueError(f"unknown kind {kind!r}; use one of {', '.join(sorted(ACCEPTED_KINDS))}")
    return KIND_ALIASES.get(kind, kind)


def compile_glob(glob: str) -> re.Pattern[str]:
    """A pattern for `fullmatch`: fnmatch.translate anchors the end, fullmatch the start."""
    return re.compile(fnmatch.translate(glob))
