"""Namespaces -> `namespace` records (key `name`): labels, annotations and phase."""

from __future__ import annotations

from typing import Any

import msgspec

from collector import sanitize
from collector.model import ObjectMeta
from collector.normalize.base import Context, PerObject


class NamespaceStatus(msgspec.Struct, frozen=True, gc=False):
    phase: str | None = None


class Namespace(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    status: NamespaceStatus = msgspec.field(default_factory=NamespaceStatus)


def namespace_data(obj: Namespace, ctx: Context) -> dict[str, Any]:
    meta = obj.metadata
    return {
        "phase": obj.status.phase,
        "labels": sanitize.labels(meta.labels),
        "annotations": sanitize.safe_annotations(meta.annotations),
        "created_at": meta.creation_timestamp,
    }


NORMALIZER = PerObject(kind="namespace", source="Namespace", struct=Namespace, data=namespace_data)
