"""The user's filters: which objects are never recorded, which node labels never shipped.

`ignore_resources` entries follow the one grammar of `kube.globs` (`<kind>/<glob>` or
`<kind>/<namespace-glob>/<name-glob>`); `ignore_namespaces` and `ignore_node_labels` are
plain globs. An entry that grammar refuses raises ValueError at construction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kube import globs

# Namespaces whose judgement is remembered (Kubernetes supports 10,000 in a cluster).
_NAMESPACES_JUDGED = 16_384


class Filters:
    """Built once from the settings; `skip` is asked for every object before normalizing."""

    def __init__(
        self,
        ignore_namespaces: Iterable[str] = (),
        ignore_resources: Iterable[str] = (),
        ignore_node_labels: Iterable[str] = (),
    ) -> None:
        self._namespaces = _patterns(ignore_namespaces)
        self._rules = globs.ResourceGlobs(ignore_resources)
        self._node_labels = tuple(ignore_node_labels)
        # Namespace -> ignored: a cluster's objects live in a few namespaces, so the globs
        # are matched once per namespace, not once per object.
        self._judged: dict[str, bool] = {}

    @property
    def ignored_node_labels(self) -> tuple[str, ...]:
        return self._node_labels

    def skip(self, kind: str, namespace: str | None, name: str) -> bool:
        """Whether the object `name` of record kind `kind` is kept out of every record.

        A namespace record is skipped when its own name is an ignored namespace, so an
        ignored namespace disappears from the inventory as well as its contents.
        """
        scope = name if kind == "namespace" else namespace
        if scope is not None and self._ignored_namespace(scope):
            return True
        return bool(self._rules) and self._rules.matches(kind, namespace, name)

    def _ignored_namespace(self, namespace: str) -> bool:
        judged = self._judged.get(namespace)
        if judged is None:
            if len(self._judged) >= _NAMESPACES_JUDGED:
                self._judged.clear()  # more namespaces than any cluster has: start again
            judged = any(p.fullmatch(namespace) for p in self._namespaces)
            self._judged[namespace] = judged
        return judged


def without_keys(labels: Mapping[str, str], ignored: Iterable[str]) -> dict[str, str]:
    """`labels` sorted, minus every key equal to or matching a glob in `ignored`."""
    patterns = _patterns(ignored)
    return {
        key: labels[key]
        for key in sorted(labels)
        if not any(pattern.fullmatch(key) for pattern in patterns)
    }


def _patterns(entries: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(globs.compile_glob(glob) for glob in entries)
