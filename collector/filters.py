"""The user's filters: which objects are never recorded, which node labels never shipped.

`ignore_resources` entries follow the one grammar of `kube.globs` (`<kind>/<glob>` or
`<kind>/<namespace-glob>/<name-glob>`); `ignore_namespaces` and `ignore_node_labels` are
plain globs. An entry that grammar refuses raises ValueError at construction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kube import globs


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
        return self._rules.matches(kind, namespace, name)


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
