"""Content negotiation for resource requests: the media type a body comes in, and the
Accept header's choice of answer (objects, their metadata alone, or a Table).

A create, update or delete body is decoded by its Content-Type as upstream's
NegotiateInputSerializer does: JSON (also when no type is given), YAML or protobuf; any
other type is 415 UnsupportedMediaType, `the body of the request was in an unknown format -
accepted media types include: application/json, application/yaml,
application/vnd.kubernetes.protobuf`. Protobuf is read for the kinds kubectl's typed
commands create (`protobuf`); for any other kind it is the same 415.

The real server reads the clauses of the Accept header in goautoneg's order (a higher q
first, a concrete type before a wildcard, ties as written) and answers by the first one
that names a media type it serves (JSON, YAML, protobuf) and whose parameters it honours.
A transformation (`as=...;g=...;v=...`) is honoured for `PartialObjectMetadata`,
`PartialObjectMetadataList` and `Table` of `meta.k8s.io` `v1` or `v1beta1`; any other
passes the clause over, so a later clause may still be taken. No clause honoured: 406. No
header: objects as stored. A Table's rows carry what the request's `includeObject` asks
(`Metadata` by default: the PartialObjectMetadata; `Object`; `None`: `"object":null`;
anything else is 400), and their cells are the kind's printer's (`tables`).

The transformation chosen applies to what was read, so a kind that does not fit it is a
406 even where a later clause would have fitted: PartialObjectMetadata of a list,
PartialObjectMetadataList of one object. On a watch every event's object is transformed,
bookmarks included; a watch that chose PartialObjectMetadataList starts (200) and ends,
cleanly and empty, at its first event, which the real server fails to encode. A watch whose
clause names YAML (which has no stream encoding) is a 406.

The fake writes JSON only: a clause naming protobuf or YAML is chosen where the real server
would choose it, and answered in JSON, labelled `application/json` as any transformed JSON
answer is upstream. A metadata-only object is `{"kind":"PartialObjectMetadata",
"apiVersion":"meta.k8s.io/v1","metadata":{...}}` with the object's whole metadata, cut from
its stored bytes once per stored version; a metadata-only list without items carries
`"items":null`, as upstream encodes it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import msgspec
import yaml

from sandbox.kube import protobuf, status, tables
from sandbox.kube.lists import Page
from sandbox.kube.resources import Resource
from sandbox.kube.store import Entry

PARTIAL = "PartialObjectMetadata"
PARTIAL_LIST = "PartialObjectMetadataList"
TABLE = "Table"
INCLUDE_OBJECT = ("Metadata", "None", "Object")  # Metadata when not given
_META_GROUP = "meta.k8s.io"
_META_VERSIONS = ("v1", "v1beta1")
# What the real server serves built-in kinds as, in its order: (type, subtype, streams).
_SERVED = (
    ("application", "json", True),
    ("application", "yaml", False),
    ("application", "vnd.kubernetes.protobuf", True),
)
# What a create, update or delete body may come in.
BODY_TYPES = ("application/json", "application/yaml", protobuf.MEDIA_TYPE)
_encode = msgspec.json.encode


class _YamlLoader(yaml.SafeLoader):
    """YAML as sigs.k8s.io/yaml turns it into JSON: a timestamp stays a string."""


_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class Unencodable(Exception):
    """An object the watch's chosen representation cannot be written in."""


class View:
    """How the objects of one answer are written: as stored."""

    __slots__ = ()

    def entry(self, resource: Resource, entry: Entry) -> bytes:
        return entry.full(resource)

    def decoded(self, resource: Resource, obj: dict[str, Any]) -> bytes:
        return resource.prefix + _encode(obj)[1:]


class _Metadata(View):
    __slots__ = ("_head",)

    def __init__(self, api_version: str) -> None:
        self._head = f'{{"kind":"{PARTIAL}","apiVersion":"{api_version}","metadata":'.encode()

    def entry(self, resource: Resource, entry: Entry) -> bytes:
        return b"".join((self._head, entry.metadata(), b"}"))

    def decoded(self, resource: Resource, obj: dict[str, Any]) -> bytes:
        return b"".join((self._head, _encode(obj.get("metadata") or {}), b"}"))


class _Refused(View):
    __slots__ = ()

    def entry(self, resource: Resource, entry: Entry) -> bytes:
        raise Unencodable

    def decoded(self, resource: Resource, obj: dict[str, Any]) -> bytes:
        raise Unencodable


class _Table(View):
    """Objects as Table rows. On a watch (`once`) only the first event's table carries the
    column definitions (`columnDefinitions: null` after it), as upstream's watch encoder
    prints headers once; a bookmark is transformed like any object, as upstream: one row
    printed from an object that has nothing but its metadata."""

    __slots__ = ("_api_version", "_columns_sent", "_include", "_metadata", "_once")

    def __init__(self, api_version: str, include: str, once: bool) -> None:
        self._api_version = api_version
        self._include = include
        self._metadata = _Metadata(api_version)
        self._once = once
        self._columns_sent = False

    def entry(self, resource: Resource, entry: Entry) -> bytes:
        row = self._row(resource, entry.decode(), lambda: self._object(resource, entry))
        return self._table(resource, f'"resourceVersion":"{entry.rv}"', [row])

    def decoded(self, resource: Resource, obj: dict[str, Any]) -> bytes:
        rv = (obj.get("metadata") or {}).get("resourceVersion", "")
        row = self._row(resource, obj, lambda: self._decoded_object(resource, obj))
        return self._table(resource, f'"resourceVersion":"{rv}"', [row])

    def page(self, resource: Resource, page: Page) -> bytes:
        rows = [
            self._row(resource, e.decode(), lambda e=e: self._object(resource, e))
            for e in page.entries
        ]
        return self._table(resource, page.metadata(), rows)

    def _object(self, resource: Resource, entry: Entry) -> bytes:
        if self._include == "Object":
            return entry.full(resource)
        return self._metadata.entry(resource, entry)

    def _decoded_object(self, resource: Resource, obj: dict[str, Any]) -> bytes:
        if self._include == "Object":
            return _AS_STORED.decoded(resource, obj)
        return self._metadata.decoded(resource, obj)

    def _row(self, resource: Resource, obj: dict[str, Any], content: Any) -> bytes:
        included = b"null" if self._include == "None" else content()
        return b'{"cells":%s,"object":%s}' % (_encode(tables.cells(resource, obj)), included)

    def _table(self, resource: Resource, metadata: str, rows: list[bytes]) -> bytes:
        columns = b"null"
        if not (self._once and self._columns_sent):
            columns = _encode(tables.columns(resource))
            self._columns_sent = True
        # A printer makes an empty slice of rows; the default convertor leaves them nil.
        as_slice = bool(rows) or tables.printed(resource)
        listed = b"[%s]" % b",".join(rows) if as_slice else b"null"
        head = f'{{"kind":"{TABLE}","apiVersion":"{self._api_version}","metadata":{{{metadata}}},'
        return b'%s"columnDefinitions":%s,"rows":%s}' % (head.encode(), columns, listed)


_AS_STORED = View()
_REFUSED = _Refused()


@dataclass(frozen=True, slots=True)
class Choice:
    """The clause a request's Accept header is answered by."""

    target: str | None  # PARTIAL, PARTIAL_LIST, TABLE, or None: objects as stored
    api_version: str  # the target's: meta.k8s.io/v1 or meta.k8s.io/v1beta1
    streams: bool  # its media type has a watch encoding
    include: str = ""  # the request's includeObject: what a Table's rows carry

    def for_object(self, resource: Resource) -> View:
        if self.target == PARTIAL_LIST:
            raise status.not_acceptable(
                f"you requested {PARTIAL_LIST}, but the requested object is not a list "
                f"({resource.internal_type})"
            )
        return self._view()

    def for_watch(self) -> View:
        if not self.streams:
            raise status.not_acceptable(
                _only(
                    "application/json;stream=watch",
                    "application/vnd.kubernetes.protobuf;stream=watch",
                )
            )
        if self.target == TABLE:
            return self._table(once=True)
        return _REFUSED if self.target == PARTIAL_LIST else self._view()

    def list_body(self, resource: Resource, page: Page) -> bytes:
        if self.target is None:
            items = b",".join(entry.item for entry in page.entries)
            return page.body(resource.list_kind, resource.api_version, items)
        if self.target == TABLE:
            return self._table(once=False).page(resource, page)
        if self.target == PARTIAL:
            raise status.not_acceptable(
                f"you requested {PARTIAL}, but the requested object is a list "
                f"({resource.internal_type}List)"
            )
        view = _Metadata(self.api_version)
        joined = b",".join(view.entry(resource, entry) for entry in page.entries)
        return page.body(PARTIAL_LIST, self.api_version, joined if page.entries else None)

    def _table(self, once: bool) -> _Table:
        # Checked once the object is read, as upstream's optionsForTransform is.
        if self.include and self.include not in INCLUDE_OBJECT:
            error = status.unsupported_field("includeObject", self.include, INCLUDE_OBJECT)
            raise status.bad_request(f"Unable to convert to Table as requested: {error}")
        return _Table(self.api_version, self.include or "Metadata", once)

    def _view(self) -> View:
        if self.target == TABLE:
            return self._table(once=False)
        return _AS_STORED if self.target is None else _Metadata(self.api_version)


_PLAIN = Choice(None, "", True)


def negotiate(accept: str, include_object: str = "") -> Choice:
    """The clause the real server would answer `accept` by; ApiError 406 when none fits.
    `include_object` is the request's `includeObject` (what Table rows carry)."""
    if not accept:
        return _PLAIN
    for clause in _clauses(accept):
        for main, sub, streams in _SERVED:
            wildcard = clause.type == "*" and clause.subtype == "*"
            if wildcard or (clause.type == main and clause.subtype in (sub, "*")):
                choice = _honoured(clause.params, streams)
                if choice is not None:
                    return replace(choice, include=include_object)
    raise status.not_acceptable(_only(*(f"{main}/{sub}" for main, sub, _ in _SERVED)))


def _only(*media_types: str) -> str:
    return f"only the following media types are accepted: {', '.join(media_types)}"


def _honoured(params: dict[str, str], streams: bool) -> Choice | None:
    convert: dict[str, str] = {}
    for name, value in params.items():
        if name in ("as", "g", "v"):
            convert[name] = value
        elif value and (
            (name == "stream" and (value != "watch" or not streams))
            or (name == "sv" and value != "v1")
        ):
            return None  # a stream encoding or a server version the endpoint lacks
    if not convert:
        return Choice(None, "", streams)
    kind, group, version = (convert.get(key, "") for key in ("as", "g", "v"))
    if (
        kind in (PARTIAL, PARTIAL_LIST, TABLE)
        and group == _META_GROUP
        and version in _META_VERSIONS
    ):
        return Choice(kind, f"{group}/{version}", streams)
    return None


@dataclass(slots=True)
class _Clause:
    type: str
    subtype: str
    q: float
    params: dict[str, str]


def _clauses(header: str) -> list[_Clause]:
    """The clauses as goautoneg parses and orders them (only spaces are trimmed; a clause
    without a subtype other than `*`, or with two slashes, is skipped; so is a parameter
    without exactly one `=`; a q that does not parse is 0)."""
    clauses: list[_Clause] = []
    for part in header.split(","):
        media_range, *raw_params = part.strip(" ").split(";")
        main, _, rest = media_range.partition("/")
        main = main.strip(" ")
        if not rest and main == "*":
            sub = "*"
        elif not rest or "/" in rest:
            continue
        else:
            sub = rest.strip(" ")
        q, params = 1.0, {}
        for raw in raw_params:
            name, value = raw.partition("=")[::2]
            if not value or "=" in value:
                continue
            name = name.strip(" ")
            if name == "q":
                q = _quality(value)
            else:
                params[name] = value.strip(" ")
        clauses.append(_Clause(main, sub, q, params))
    # goautoneg's comparison is not a strict order, so its outcome depends on the sort that
    # runs it: Go sorts short slices by insertion, which this repeats.
    for index in range(1, len(clauses)):
        position = index
        while position > 0 and _before(clauses[position], clauses[position - 1]):
            clauses[position - 1], clauses[position] = clauses[position], clauses[position - 1]
            position -= 1
    return clauses


def _quality(text: str) -> float:
    # Go's ParseFloat takes no surrounding blanks; what it cannot parse counts as 0.
    try:
        return float(text) if text == text.strip() else 0.0
    except ValueError:
        return 0.0


def _before(a: _Clause, b: _Clause) -> bool:
    return a.q > b.q or (a.type != "*" and b.type == "*") or (a.subtype != "*" and b.subtype == "*")


def body_as_json(content_type: str, raw: bytes) -> bytes:
    """A create, update or delete body as JSON, whatever media type it came in; 415 for one
    the fake does not decode (as NegotiateInputSerializer refuses it upstream)."""
    media_type = content_type.split(";")[0].strip(" ").lower() or BODY_TYPES[0]
    if media_type == "application/json":
        return raw
    if media_type == protobuf.MEDIA_TYPE:
        return protobuf.as_json(raw, BODY_TYPES)
    if media_type != "application/yaml":
        raise status.unsupported_media_type(BODY_TYPES)
    try:
        return _encode(yaml.load(raw, Loader=_YamlLoader))
    except (yaml.YAMLError, TypeError) as error:
        raise status.bad_request(f"error converting YAML to JSON: {error}") from None
