"""Snapshots: after a full list, the complete key set of a record kind, in parts, so the
platform learns of deletions made while no agent watched.

A kind with several sources (rbac: four) waits until each has listed since its last
snapshot; `listed_at` is then the earliest list's start, so nothing created during the
lists is forgotten by the platform. A source that cannot list (rbac: ClusterRoles
forbidden) is not waited for, its keys in the snapshot being the ones it produced before;
since it may fail only after the others listed, `settle` checks again before each flush.
A kind whose records are held back until what they mention has listed
(`collector.sources.Dependents`) holds its snapshot back too, and sends it after them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from collector.model import ObjectMeta, event
from collector.resources import Resource
from collector.sources import Source
from collector.state import ProducedRecords
from runtime.health import HealthReporter
from shipper.records import Record, new_id

SNAPSHOT = "snapshot"
SNAPSHOT_PART_BYTES = 256 * 1024  # keys per part: well inside a batch's byte limit


def snapshot_parts(keys: list[str]) -> list[list[str]]:
    """Split sorted keys into parts of about SNAPSHOT_PART_BYTES; no keys is one empty part
    (the kind has no objects left)."""
    parts: list[list[str]] = [[]]
    size = 0
    for key in keys:
        cost = len(key.encode()) + 3  # quotes and comma in the JSON list
        if parts[-1] and size + cost > SNAPSHOT_PART_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(key)
        size += cost
    return parts


class Snapshots:
    """Decides when each kind's snapshot is complete, and sends it. Called on the processor's
    thread only, so it takes no lock."""

    def __init__(
        self,
        sources: Sequence[Source[Any]],
        *,
        produced: ProducedRecords,
        offer: Callable[[Iterable[Record]], None],
        reporter: HealthReporter,
        listed: Callable[[frozenset[Resource]], bool],
        cannot_list: Callable[[str], bool],
    ) -> None:
        self._produced = produced
        self._offer = offer
        self._reporter = reporter
        self._listed = listed
        self._cannot_list = cannot_list
        # Record kind -> the sources (plural) whose lists a snapshot of it waits for.
        self._sources: dict[str, set[str]] = {}
        for source in sources:
            if not source.events_only:
                plurals = self._sources.setdefault(source.normalizer.kind, set())
                plurals.add(source.resource.plural)
        self._waits_for = {source.resource.plural: source.waits_for for source in sources}
        # kind -> source -> (resourceVersion, start) of its list since the kind's last one
        self._lists: dict[str, dict[str, tuple[str, str]]] = {}
        # kind -> (what it waits for, resourceVersion, listed_at) of a snapshot held back
        self._held: dict[str, tuple[frozenset[Resource], str, str]] = {}

    def listed(self, source: Source[Any], resource_version: str, listed_at: str) -> None:
        """The source has listed in full."""
        kind = source.normalizer.kind
        if kind not in self._sources:
            return
        lists = self._lists.setdefault(kind, {})
        lists.pop(source.resource.plural, None)  # the latest list goes last
        lists[source.resource.plural] = (resource_version, listed_at)
        self._send_if_complete(kind)

    def settle(self) -> None:
        """Before each flush: send what was held back once what it waits for has listed,
        and stop waiting for sources that turned out unable to list."""
        for kind, (waits_for, *taken) in list(self._held.items()):
            if self._listed(waits_for):
                del self._held[kind]
                self._send(kind, *taken)
        for kind in list(self._lists):
            self._send_if_complete(kind)

    def _send_if_complete(self, kind: str) -> None:
        lists = self._lists[kind]
        unlisted = self._sources[kind].difference(lists)
        if any(not self._cannot_list(plural) for plural in unlisted):
            return
        del self._lists[kind]
        last = next(reversed(lists))
        taken = (lists[last][0], min(started for _, started in lists.values()))
        waits_for = self._waits_for[last]
        if self._listed(waits_for):
            self._send(kind, *taken)
        else:  # after the records held back, once they are released (`settle`)
            self._held[kind] = (waits_for, *taken)

    def _send(self, kind: str, resource_version: str, listed_at: str) -> None:
        keys = self._produced.keys_of_kind(kind)
        snapshot_id = new_id()
        parts = snapshot_parts(keys)
        for number, part in enumerate(parts, start=1):
            data = {
                "of": kind,
                "snapshot_id": snapshot_id,
                "part": number,
                "parts": len(parts),
                "keys": part,
                "resource_version": resource_version,
                "listed_at": listed_at,
            }
            key = f"{kind}/{snapshot_id}/{number}"
            self._offer([event(SNAPSHOT, key, ObjectMeta(name=kind), data)])
        self._reporter.count("snapshots")
