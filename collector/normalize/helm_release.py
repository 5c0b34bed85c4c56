"""Helm releases: one `helm_release` record per release revision, read from Helm's Secrets.

Helm 3 stores each revision of a release in a Secret of type `helm.sh/release.v1` named
`sh.helm.release.v1.<release>.v<revision>`: `data.release` is the API's base64 of Helm's
own base64 of gzipped JSON (older or hand-made ones skip the gzip; the gzip magic says
which). That JSON holds everything Helm knows, including the values the user installed
with (`config`), the chart's default values, templates and files, the rendered notes, and
a rendered manifest whose Secrets carry their data in clear text.

So the decoding is narrow by construction: the JSON is decoded into shapes that name only
the release identity, its status and timestamps, and the chart's name, version and
appVersion; everything else is skipped by the decoder. The manifest is read as a stream of
YAML parser events (safe YAML; nothing is constructed but the four scalars kept), reduced
to each resource's identity (apiVersion, kind, namespace, name), a Secret included.

Memory: a release Secret weighs up to 1 MiB, so these Secrets are listed and watched as
metadata only (`resources.HELM_RELEASE_SECRETS`); a body is read through
`Context.fetch_secret`, one at a time, only for a revision whose resourceVersion has no
record yet (the collector keeps the last record of each, `Keep.VERSIONED`). Decompression
stops at MAX_RELEASE_BYTES; the decompressed JSON and the manifest taken from it are the
largest things held, so a release costs at most twice that, for as long as it is decoded.

How it fails: never out of the normalizer, except when the body could not be read for now
(the API's error passes through, and the informer tries the object again after its
backoff). A payload that is not base64, not gzip, not JSON of the expected shape, too large
once decompressed, or has a manifest that is not YAML gives no record and one warning
naming the Secret, the decoding stage and the error type only: error messages can quote the
bytes they choked on, and those may be secrets.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import msgspec
import structlog
import yaml

from collector.model import Int64, ObjectMeta, delete, upsert
from collector.normalize.base import Context, Drop, ObjectTooLarge
from shipper.records import Record, utc_timestamp

log = structlog.get_logger("collector.helm_release")

KIND = "helm_release"
SECRET_TYPE = "helm.sh/release.v1"
# A release Secret holds at most 1 MiB, gzipped JSON that inflates 4-8 times for the largest
# charts; decoding holds the inflated JSON and its manifest at once, so this is also half
# of the most one release can cost (see docs/collector.md, "Memory").
MAX_RELEASE_BYTES = 12 * 1024 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
_SECRET_NAME = re.compile(r"sh\.helm\.release\.v1\.(?P<release>.+)\.v(?P<revision>[0-9]+)")
# The C parser when PyYAML has it: the same safe YAML, much faster.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class _ManifestResolver(yaml.resolver.Resolver):
    """How the safe loader types a plain scalar, without timestamps: Helm's Go YAML keeps an
    unquoted date as a string, so `2024-02-30` is fine in a manifest."""

    # Replaces the base class's table for this class alone (PyYAML reads it per class).
    yaml_implicit_resolvers = {  # noqa: RUF012 (PyYAML reads it from the class)
        first: [(tag, pattern) for tag, pattern in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
    }


_RESOLVER = _ManifestResolver()


class Secret(msgspec.Struct, frozen=True, gc=False):
    """A Secret as far as Helm's storage goes: only `data.release` is ever read.

    As listed and watched (PartialObjectMetadata) it has no `type` (the list's field
    selector chose it) and no `data` (None: read with `Context.fetch_secret`)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    type: str = ""
    data: dict[str, str] | None = None


class _SecretData(msgspec.Struct, frozen=True, gc=False):
    data: dict[str, str] = msgspec.field(default_factory=dict)


_SECRET_DATA = msgspec.json.Decoder(_SecretData)


class _ChartMetadata(msgspec.Struct, rename="camel", frozen=True, gc=False):
    name: str | None = None
    version: str | None = None
    app_version: str | None = None


class _Chart(msgspec.Struct, frozen=True, gc=False):
    metadata: _ChartMetadata = msgspec.field(default_factory=_ChartMetadata)


class _Info(msgspec.Struct, frozen=True, gc=False):
    status: str | None = None
    first_deployed: str | None = None
    last_deployed: str | None = None
    deleted: str | None = None


class _Release(msgspec.Struct, frozen=True, gc=False):
    """The fields shipped; `config`, `chart.values/templates/files`, notes and hooks are not."""

    name: str = ""
    namespace: str | None = None
    version: Int64 = 0
    info: _Info = msgspec.field(default_factory=_Info)
    chart: _Chart = msgspec.field(default_factory=_Chart)
    manifest: str = ""


_RELEASE = msgspec.json.Decoder(_Release)


class UndecodableRelease(Drop):
    """The release cannot be read; `stage` says where it went wrong (secret, data, ...)."""

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
        payload = base64.b64decode(encoded, validate=True)  # the API's Secret encoding
        payload = base64.b64decode(payload, validate=True)  # Helm's own
    except (binascii.Error, ValueError):
        raise UndecodableRelease("base64", "not valid base64") from None
    if payload[:2] == _GZIP_MAGIC:
        payload = _gunzip(payload)
    elif len(payload) > MAX_RELEASE_BYTES:
        raise UndecodableRelease("json", f"larger than {MAX_RELEASE_BYTES} bytes")
    try:
        release = _RELEASE.decode(payload)
    except msgspec.DecodeError as e:
        raise UndecodableRelease("json", type(e).__name__) from None
    del payload  # only the manifest is needed from here on
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
    source = "Secret"
    struct = Secret

    def upserts(self, obj: Secret, ctx: Context) -> list[Record]:
        if not ctx.collect_helm_releases or obj.type not in ("", SECRET_TYPE):
            return []
        meta = obj.metadata
        try:
            stored = obj.data if obj.data is not None else self._fetch(meta, ctx)
            encoded = stored.get("release")
            if encoded is None:
                raise UndecodableRelease("data", "no release key")
            del stored  # the release is decoded from `encoded` alone
            data = decode_release(encoded)
        except UndecodableRelease as e:
            self._warn(meta, e.stage, e.error)
            return []
        except Drop:
            return []  # the Secret is gone: its delete follows
        namespace = meta.namespace or data["namespace"] or ""
        key = release_key(namespace, meta.name) or (
            f"{namespace}/{data['name']}/v{data['revision']}"
        )
        return [upsert(KIND, meta, data, key=key)]

    def _fetch(self, meta: ObjectMeta, ctx: Context) -> dict[str, str]:
        """The Secret's data as the API serves it now. Raises `Drop` when it is gone,
        `UndecodableRelease` when it cannot be used."""
        try:
            body = ctx.fetch_secret(meta.namespace or "", meta.name)
        except ObjectTooLarge as e:
            raise UndecodableRelease("secret", str(e)) from None
        if body is None:
            raise Drop
        try:
            return _SECRET_DATA.decode(body).data
        except msgspec.DecodeError as e:
            raise UndecodableRelease("secret", type(e).__name__) from None

    def deletes(self, obj: Secret, ctx: Context) -> list[Record]:
        if not ctx.collect_helm_releases or obj.type not in ("", SECRET_TYPE):
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


_IDENTITY = {"apiVersion": "api_version", "kind": "kind"}
_METADATA_IDENTITY = {"namespace": "namespace", "name": "name"}
_STR_TAG = "tag:yaml.org,2002:str"


def _resources(manifest: str) -> list[dict[str, str | None]]:
    """Each manifest document's identity; nothing else of it survives this function."""
    try:
        return list(_identities(yaml.parse(manifest, Loader=_SAFE_LOADER)))
    except Exception as e:
        # Not only YAMLError: deep nesting can raise RecursionError or MemoryError in C.
        raise UndecodableRelease("manifest", type(e).__name__) from None


def _identities(events: Iterator[yaml.Event]) -> Iterator[dict[str, str | None]]:
    """From parser events: each mapping document's apiVersion, kind and metadata's namespace
    and name, read off the top two levels; every other node is skipped without being built."""
    for event in events:
        if not isinstance(event, yaml.DocumentStartEvent):
            continue
        root = next(events)
        found: dict[str, str | None] = dict.fromkeys(("api_version", "kind", "namespace", "name"))
        if isinstance(root, yaml.MappingStartEvent):
            for key, value in _pairs(events):
                if key in _IDENTITY:
                    found[_IDENTITY[key]] = _scalar_text(value, events)
                elif key == "metadata" and isinstance(value, yaml.MappingStartEvent):
                    for meta_key, meta_value in _pairs(events):
                        if meta_key in _METADATA_IDENTITY:
                            found[_METADATA_IDENTITY[meta_key]] = _scalar_text(meta_value, events)
                        else:
                            _skip(meta_value, events)
                else:
                    _skip(value, events)
            yield found
        else:
            _skip(root, events)  # a scalar or list document names no resource


def _pairs(events: Iterator[yaml.Event]) -> Iterator[tuple[str | None, yaml.Event]]:
    """(key, value's first event) of the mapping just opened, until it ends; a key that is
    not a plain string is None (its node skipped). The caller consumes each value."""
    for event in events:
        if isinstance(event, yaml.MappingEndEvent):
            return
        key = event.value if isinstance(event, yaml.ScalarEvent) else None
        if key is None:
            _skip(event, events)
        yield key, next(events)


def _scalar_text(event: yaml.Event, events: Iterator[yaml.Event]) -> str | None:
    """A non-empty string scalar's value; anything else (a number, null, a list) is None,
    as the manifest's own loader would have typed it."""
    if not isinstance(event, yaml.ScalarEvent):
        _skip(event, events)
        return None
    tag = event.tag
    if tag is None or tag == "!":
        # PyYAML's stubs leave `resolve` unannotated; it returns the tag, a str.
        tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
    return event.value if tag == _STR_TAG and event.value else None


def _skip(event: yaml.Event, events: Iterator[yaml.Event]) -> None:
    """Pass over the node that `event` opens (nothing to do for a scalar or an alias)."""
    if not isinstance(event, yaml.CollectionStartEvent):
        return
    depth = 1
    for inner in events:
        if isinstance(inner, yaml.CollectionStartEvent):
            depth += 1
        elif isinstance(inner, yaml.CollectionEndEvent):
            depth -= 1
            if depth == 0:
                return


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
