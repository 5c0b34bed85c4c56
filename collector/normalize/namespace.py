"""Namespaces -> `namespace` records (key `name`): labels, annotations and phase."""

from __future__ import annotations

from typing import Any

import msgspec

from collector import sanitize
from collector.model import ObjectMeta, delete, upsert
from collector.normalize.base import Context
from shipper.records import Record


class NamespaceStatus(msgspec.Struct, frozen=True):
    phase: str | None = None


class Namespace(msgspec.Struct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    status: NamespaceStatus = msgspec.field(default_factory=NamespaceStatus)


def namespace_data(obj: Namespace) -> dict[str, Any]:
    meta = obj.metadata
    return {
        "phase": obj.status.phase,
        "labels": sanitize.labels(meta.labels),
        "annotations": sanitize.annotations(meta.annotations),
        "created_at": meta.creation_timestamp,
    }


class NamespaceNormalizer:
    kind = "namespace"
    source = "Namespace"
    struct = Namespace

    def upserts(self, obj: Namespace, ctx: Context) -> list[Record]:
        return [upsert(self.kind, obj.metadata, namespace_data(obj))]

    def deletes(self, obj: Namespace, ctx: Context) -> list[Record]:
        return [delete(self.kind, obj.metadata)]


NORMALIZER = NamespaceNormalizer()
