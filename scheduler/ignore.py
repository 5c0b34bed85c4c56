"""`IGNORE_RESOURCES` as the scaling role reads it: which Deployments and HPAs it never touches.

Entries have the collector's shape, `<kind>/<name-glob>` (any namespace) or
`<kind>/<namespace-glob>/<name-glob>`, with `fnmatch` globs matched case-sensitively, as
Kubernetes names are. Kinds that matter here: `deployment` (the action's target),
`hpa` or `horizontalpodautoscaler` (the HPA that would be managed) and `*` (both).
Entries of other kinds (`pod/...`, `namespace/...`) are for the collector and match
nothing here. The configuration checks entries when it loads them; this module re-checks
only their shape.

How it fails: `IgnoreRules(...)` raises ValueError for an entry that is not two or three
non-empty parts, naming the entry.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

DEPLOYMENT = "deployment"
HPA = "hpa"
_KINDS = {"deployment": DEPLOYMENT, "hpa": HPA, "horizontalpodautoscaler": HPA, "*": "*"}


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    namespace: re.Pattern[str] | None  # None: any namespace
    name: re.Pattern[str]

    def matches(self, kind: str, namespace: str, name: str) -> bool:
        if self.kind not in ("*", kind) or not self.name.fullmatch(name):
            return False
        return self.namespace is None or bool(self.namespace.fullmatch(namespace))


class IgnoreRules:
    """Built once from the configured globs; asked once per action."""

    def __init__(self, globs: Iterable[str] = ()) -> None:
        rules: list[_Rule] = []
        for entry in globs:
            rule = _rule(entry)
            if rule is not None:
                rules.append(rule)
        self._rules = tuple(rules)

    def matches(self, kind: str, namespace: str, name: str) -> bool:
        """Whether the `kind` (`deployment` or `hpa`) object `namespace/name` is ignored."""
        return any(rule.matches(kind, namespace, name) for rule in self._rules)

    def __bool__(self) -> bool:
        return bool(self._rules)


def _rule(entry: str) -> _Rule | None:
    parts = entry.strip().split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(
            f"ignore_resources entry {entry!r}: expected <kind>/<glob> or "
            "<kind>/<namespace-glob>/<name-glob>"
        )
    kind = _KINDS.get(parts[0].lower())
    if kind is None:
        return None
    namespace = _compile(parts[1]) if len(parts) == 3 else None
    return _Rule(kind, namespace, _compile(parts[-1]))


def _compile(glob: str) -> re.Pattern[str]:
    # fnmatch.translate anchors at the end only; fullmatch anchors the start too.
    return re.compile(fnmatch.translate(glob))
