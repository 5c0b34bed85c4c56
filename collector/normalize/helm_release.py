"""Helm releases: one `helm_release` record per release revision, read from Helm's Secrets.

Helm 3 stores each revision of a release in a Secret of type `helm.sh/release.v1` named
`sh.helm.release.v1.<release>.v<revision>`: `data.release` is the API's base64 of Helm's
own base64 of gzipped JSON (older or hand-made ones skip the gzip; the gzip magic says
which). That JSON holds everything Helm knows, including the values the user installed
with (`config`), the chart's default values, templates and files, the rendered notes, and
a rendered manifest whose Secrets carry their data in clear text.

So the decoding is narrow by construction: the JSON is decoded into shapes that name only
the release identity, its status and timestamps, and the chart's name, version and
appVersion; everything else is skipped by the decoder. The manifest is parsed with the safe
YAML loader and reduced at once to each resource's identity (apiVersion, kind, namespace,
name), a Secret included.

How it fails: never out of the normalizer. A payload that is not base64, not gzip, not
JSON of the expected shape, too large once decompressed, or has a manifest that is not
YAML gives no record and one warning naming the Secret, the decoding stage and the error
type only: error messages can quote the bytes they choked on, and those may be secrets.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from datetime import datetime
from typing import Any, ClassVar

import msgspec
import structlog
import yaml

from collector.model import ObjectMeta, delete, upsert
from collector.normalize.base import Context
from shipper.records import Record, utc_timestamp

log = structlog.get_logger("collector.helm_release")

KIND = "helm_release"
SECRET_TYPE = "helm.sh/release.v1"
# Far above any real release (a Secret holds at most 1 MiB compressed), far below harm.
MAX_RELEASE_BYTES = 64 * 1024 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
_SECRET_NAME = re.compile(r"sh\.helm\.release\.v1\.(?P<release>.+)\.v(?P<revision>[0-9]+)")
# The C loader when PyYAML has it: the same safe subset of YAML, much faster.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class _ManifestLoader(_SAFE_LOADER):  # type: ignore[misc]
    """The safe loader without timestamps: Helm's Go YAML keeps an unquoted date as a
    string, so `2024-02-30` is fine in a manifest and must not fail the whole release."""

    yaml_implicit_resolvers: ClassVar[dict[str, list[tuple[str, Any]]]] = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in _SAFE_LOADER.yaml_implicit_resolvers.items()
    }


class Secret(msgspec.Struct, frozen=True):
    """A Secret as far as Helm's storage goes: only `data.release` is ever read."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    type: str = ""
    data: dict[str, str] = msgspec.field(default_factory=dict)


class _ChartMetadata(msgspec.Struct, rename="camel", frozen=True):
    name: str | None = None
    version: str | None = None
    app_version: str | None = None


class _Chart(msgspec.Struct, frozen=True):
    metadata: _ChartMetadata = msgspec.field(default_factory=_ChartMetadata)


class _Info(msgspec.Struct, frozen=True):
    status: str | None = None
    first_deployed: str | None = None
    last_deployed: str | None = None
    deleted: str | None = None


class _Release(msgspec.Struct, frozen=True):
    """The fields shipped; `config`, `chart.values/templates/files`, notes and hooks are not."""

    name: str = ""
    namespace: str | None = None
    version: int = 0
    info: _Info = msgspec.field(default_factory=_Info)
    chart: _Chart = msgspec.field(default_factory=_Chart)
    manifest: str = ""


_RELEASE = msgspec.json.Decoder(_Release)


class UndecodableRelease(Exception):
    """`data.release` cannot be read; `stage` says where it went wrong."""

    def __init__(self, stage: str, error: str) -> None:
        super().__init__(f"{stage}: {error}")
        self.stage = stage
        self.error = error


def release_key(namespace: str, secret_name: str) -> str | None:
    """The record key of a release Secret, from its name alone (deletes need no payload)."""
    match = _SECRET_NAME.fullmatch(secret_name)
    if match is None:
        return None
    return f"{namespace}/{match['release']}/v{int(match['revision'])}"


def decode_release(encoded: str) -> dict[str, Any]:
    """A release Secret's `data.release`, as the record's data. Raises UndecodableRelease."""
    try:
        helm_text = base64.b64decode(encoded, validate=True)  # the API's Secret encoding
        payload = base64.b64decode(helm_text, validate=True)  # Helm's own
    except (binascii.Error, ValueError):
        raise UndecodableRelease("base64", "not valid base64") from None
    if payload[:2] == _GZIP_MAGIC:
        payload = _gunzip(payload)
    try:
        release = _RELEASE.decode(payload)
    except msgspec.DecodeError as e:
        raise UndecodableRelease("json", type(e).__name__) from None
    if not release.name or release.version < 1:
        raise UndecodableRelease("json", "release without name or revision")
    chart, info = release.chart.metadata, release.info
    return {
        "name": release.name,
        "namespace": release.namespace,
        "revision": release.version,
        "status": info.status,
        "first_deployed": _timestamp(info.first_deployed),
        "last_deployed": _timestamp(info.last_deployed),
        "deleted": _timestamp(info.deleted),
        "chart": chart.name,
        "chart_version": chart.version,
        "app_version": chart.app_version,
        "resources": _resources(release.manifest),
    }


class HelmReleaseNormalizer:
    """Helm release Secrets -> `helm_release` upserts and deletes."""

    kind = KIND
    struct = Secret

    def upserts(self, obj: Secret, ctx: Context) -> list[Record]:
        if not ctx.collect_helm_releases or obj.type != SECRET_TYPE:
            return []
        meta = obj.metadata
        encoded = obj.data.get("release")
        if encoded is None:
            self._warn(meta, "data", "no release key")
            return []
        try:
            data = decode_release(encoded)
        except UndecodableRelease as e:
            self._warn(meta, e.stage, e.error)
            return []
        namespace = meta.namespace or data["namespace"] or ""
        key = release_key(namespace, meta.name) or (
            f"{namespace}/{data['name']}/v{data['revision']}"
        )
        return [upsert(KIND, meta, data, key=key)]

    def deletes(self, obj: Secret, ctx: Context) -> list[Record]:
        if not ctx.collect_helm_releases or obj.type != SECRET_TYPE:
            return []
        key = release_key(obj.metadata.namespace or "", obj.metadata.name)
        return [] if key is None else [delete(KIND, obj.metadata, key=key)]

    @staticmethod
    def _warn(meta: ObjectMeta, stage: str, error: str) -> None:
        log.warning(
            "helm_release_undecodable",
            namespace=meta.namespace,
            secret=meta.name,
            stage=stage,
            error=error,
        )


def _gunzip(payload: bytes) -> bytes:
    inflater = zlib.decompressobj(wbits=31)  # gzip framing only
    try:
        data = inflater.decompress(payload, MAX_RELEASE_BYTES + 1)
    except zlib.error as e:
        raise UndecodableRelease("gzip", type(e).__name__) from None
    if len(data) > MAX_RELEASE_BYTES:
        raise UndecodableRelease("gzip", f"larger than {MAX_RELEASE_BYTES} bytes")
    if not inflater.eof:
        raise UndecodableRelease("gzip", "truncated")
    return data


def _resources(manifest: str) -> list[dict[str, str | None]]:
    """Each manifest document's identity; nothing else of it survives this function."""
    try:
        documents = list(yaml.load_all(manifest, Loader=_ManifestLoader))
    except Exception as e:
        # Not only YAMLError: a constructor can raise ValueError, deep nesting RecursionError.
        raise UndecodableRelease("manifest", type(e).__name__) from None
    resources = []
    for doc in documents:
        if not isinstance(doc, dict):
            continue  # empty documents between separators
        metadata = doc.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        resources.append(
            {
                "api_version": _text(doc.get("apiVersion")),
                "kind": _text(doc.get("kind")),
                "namespace": _text(metadata.get("namespace")),
                "name": _text(metadata.get("name")),
            }
        )
    return resources


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _timestamp(value: str | None) -> str | None:
    """Helm's Go timestamps (local offset, nanoseconds) as the contract's UTC `Z` form."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.year <= 1:  # Go's zero time: never happened
        return None
    return utc_timestamp(moment)
