"""The HTTP face of the fake API server: routing, the verbs, and the wire details.

Speaks HTTP/1.1 with keep-alive on 127.0.0.1, with the real server's paths:
`/api/v1/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]`, the same under
`/apis/{group}/{version}`, the legacy `/api/v1/watch/...` prefix, `/version`, discovery
documents (`/api`, `/apis`, `/api/v1`, `/apis/{group}[/{version}]`) and health paths.
Collections: GET lists (paged by `limit`/`continue`) or watches (`watch` true as upstream
reads booleans, chunked newline-delimited JSON; streaming lists with `sendInitialEvents`,
as `Settings.streaming_lists` has it), POST creates. Objects: GET, PUT (409 on a stale
resourceVersion), PATCH (merge, strategic merge, JSON patch; 409 when the patch carries a
stale resourceVersion), DELETE (`deletion.DeleteOptions`; what has finalizers waits for
them, a namespace for the namespace controller). `status` subresources write only
`.status`, and writes to the main resource keep `.status`, as upstream. `scale`
subresources read and write replicas as a `Scale` (`scale`). `pods/{name}/log` answers
text/plain. The Accept header of every other resource request is negotiated
(`negotiation`): objects as stored, their metadata alone (PartialObjectMetadata), or a
Table (`tables`); so is the Content-Type of a body (JSON or YAML, else 415).

A list reads `resourceVersion` and `resourceVersionMatch` as upstream: unset is the most
recent state, "0" any state (whole: the watch cache ignores `limit`), N not older than N,
or exactly N when asked (`Exact`, or legacy: N with a `limit`), rebuilt from the history.
A resourceVersion the fake has not reached yet is waited for up to
`Settings.too_large_rv_wait` seconds, then refused 504, as the real server's watch cache
does; for a streaming list (`sendInitialEvents=true`) that refusal is the one ERROR event
of a 200 stream. A streaming list starts from the current objects whatever its
resourceVersion (NotOlderThan: an old one is no 410). `sendInitialEvents=false` watches
from the resourceVersion given, or from now when it is "" or "0". A watch without
`timeoutSeconds` ends after 1-2x `Settings.min_request_timeout`, as upstream.

How it fails: every refusal is a Kubernetes Status body with the matching code; a bug in
the fake answers 500 and prints its traceback to stderr; clients that vanish mid-request
are routine and stay quiet. `GET /_sandbox/stats` is the one path the real server lacks.
A dripped answer (`FakeKube.drip_next`) is composed whole, then written a byte at a time
by the request's own thread, which shuts the connection down if the drip is cut short.
"""

from __future__ import annotations

import contextlib
import copy
import io
import random
import select
import socket
import ssl
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import msgspec

from sandbox.kube import (
    access_review,
    admission,
    applying,
    decoding,
    managed_fields,
    namespaces,
    negotiation,
    openapi,
    resources,
    scale,
    status,
)
from sandbox.kube.admission import WriteOptions
from sandbox.kube.auth import Tokens
from sandbox.kube.deletion import DeleteOptions
from sandbox.kube.faults import Drip, Faults, RequestLog
from sandbox.kube.lists import Pager, matcher
from sandbox.kube.negotiation import Choice, negotiate
from sandbox.kube.options import EXACT, ListOptions, flag
from sandbox.kube.patching import PatchError, json_patch, merge_patch, strategic_merge_patch
from sandbox.kube.podlogs import PodLogs, tail
from sandbox.kube.rbac import Authorizer
from sandbox.kube.requestinfo import request_info
from sandbox.kube.resources import Resource
from sandbox.kube.selectors import FieldSelector, LabelSelector
from sandbox.kube.status import ApiError
from sandbox.kube.store import Entry, Store
from sandbox.kube.watch import WatchSpec, WatchStream, event_line
from sandbox.serving import HOST, InvalidLength, LoopbackServer, read_request_body

WATCH_EXPIRED_MODES = ("event", "http")

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_PATCHERS: dict[str, Callable[[Any, Any], Any]] = {
    "application/json-patch+json": json_patch,
    "application/merge-patch+json": merge_patch,
    "application/strategic-merge-patch+json": strategic_merge_patch,
}
_TLS_HANDSHAKE = b"\x16"  # the content type of a TLS handshake record, its first byte


@dataclass(slots=True)
class Settings:
    """What tests may change on a running fake; `FakeKube.reset()` restores the defaults."""

    bookmark_interval: float
    watch_expired: str  # "event": a 200 stream with one ERROR event; "http": a 410 answer
    git_version: str
    streaming_lists: str = "serve"  # one of options.STREAMING_LIST_MODES
    too_large_rv_wait: float = 3.0  # what the real watch cache waits for a resourceVersion
    min_request_timeout: float = 1800.0  # a watch without timeoutSeconds lasts 1-2x this
    bookmark_before_timeout: float = 2.0  # the last bookmark comes this long before a timeout
    watch_expired_for: dict[Resource, str] = field(default_factory=dict)
    streaming_lists_for: dict[Resource, str] = field(default_factory=dict)

    def expired_mode(self, resource: Resource) -> str:
        return self.watch_expired_for.get(resource, self.watch_expired)

    def streaming_mode(self, resource: Resource) -> str:
        return self.streaming_lists_for.get(resource, self.streaming_lists)


@dataclass(slots=True)
class Backend:
    store: Store
    pager: Pager
    faults: Faults
    log: RequestLog
    pod_logs: PodLogs
    settings: Settings
    tokens: Tokens
    authorizer: Authorizer


@dataclass(frozen=True, slots=True)
class Route:
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool  # the legacy /watch/ prefix


def parse_route(path: str) -> Route | None:
    parts = [unquote(part) for part in path.strip("/").split("/")]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch_path = rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = resources.lookup(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3 or not all(rest):
        return None
    resource = resources.lookup(group, version, rest[0])
    if resource is None:
        return None
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if resource.namespaced and name is not None and namespace is None:
        return None  # /api/v1/pods/x does not exist upstream either
    return Route(resource, namespace, name, subresource, watch_path)


def _served_group_version(parts: list[str]) -> bool:
    """Whether a path is under a group version the server serves (/api/v1/..., /apis/g/v/...),
    where an unknown resource is a NotFound Status."""
    if parts[0] == "api" and len(parts) >= 2:
        return resources.api_resource_list("", parts[1]) is not None
    if parts[0] == "apis" and len(parts) >= 3:
        return resources.api_resource_list(parts[1], parts[2]) is not None
    return False


def version_info(git_version: str) -> dict[str, str]:
    major, minor = git_version.lstrip("v").split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        # The version it emulates (its own) and the oldest it stays compatible with.
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": str(int(minor) - 1),
        "gitVersion": git_version,
        "gitCommit": "39683505b630ff2121012f3c5b16215a1449d5ed",
        "gitTreeState": "clean",
        "buildDate": "2024-06-11T20:20:00Z",
        "goVersion": "go1.22.4",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _json_body(raw: bytes) -> Any:
    if not raw:
        raise status.bad_request("the request has no body")
    try:
        return _decode(raw)
    except msgspec.DecodeError as exc:
        raise status.bad_request(f"the body is not valid JSON: {exc}") from None


# What the serializer's first look at a body (its apiVersion and kind) says of a JSON value
# that is not an object (k8s.io/apimachinery/pkg/runtime/serializer/json/meta.go).
_FIND_KIND_ERROR = (
    "json: cannot unmarshal %s into Go value of type struct { APIVersion string "
    '"json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'
)


def _object_body(raw: bytes, resource: Resource) -> dict[str, Any]:
    try:
        body = _decode(raw)
    except msgspec.DecodeError:
        raise status.unrecognized_object(resource.kind, decoding.syntax_error(raw), raw) from None
    if not isinstance(body, dict):
        found = decoding.go_json_kind(body)
        raise status.unrecognized_object(resource.kind, _FIND_KIND_ERROR % found, raw)
    kind = body.get("kind")
    if kind not in (None, "", resource.kind):
        raise status.bad_request(f"the kind of the body ({kind}) is not {resource.kind}")
    metadata = body.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        found = decoding.go_json_kind(metadata)
        raise status.bad_request(
            f'{resource.kind} in version "{resource.version}" cannot be handled as a '
            f"{resource.kind}: json: cannot unmarshal {found} into Go struct field "
            f"{resource.kind}.metadata of type v1.ObjectMeta"
        )
    return body


def _patch_body(raw: bytes, patcher: Callable[[Any, Any], Any]) -> Any:
    """The patch document, or Go's decoding error as the patch handler words it
    (k8s.io/apiserver/pkg/endpoints/handlers/patch.go: a merge patch's is "error decoding
    patch: ...", a JSON patch is a jsonpatch.Patch, the others maps)."""
    prefix = "error decoding patch: " if patcher is merge_patch else ""
    try:
        patch = _decode(raw)
    except msgspec.DecodeError:
        raise status.bad_request(prefix + decoding.syntax_error(raw)) from None
    wanted, go_type = (
        (list, "jsonpatch.Patch") if patcher is json_patch else (dict, "map[string]interface {}")
    )
    if not isinstance(patch, wanted):
        found = decoding.go_json_kind(patch)
        raise status.bad_request(
            f"{prefix}json: cannot unmarshal {found} into Go value of type {go_type}"
        )
    return patch


def _duplicates(raw: bytes, options: WriteOptions) -> list[str]:
    """Keys the body gives twice; not looked for when the request ignores them anyway."""
    return [] if options.field_validation == "Ignore" else decoding.duplicate_fields(raw)


def _patch_problems(
    raw: bytes, patch: Any, patcher: Callable[[Any, Any], Any], options: WriteOptions
) -> list[decoding.FieldProblem]:
    if options.field_validation == "Ignore":
        return []
    if patcher is json_patch:
        return decoding.json_patch_problems(patch, decoding.duplicate_fields(raw))
    return [decoding.FieldProblem("duplicate", path) for path in decoding.duplicate_fields(raw)]


def _int_param(query: dict[str, str], name: str) -> int | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    return _integer(name, value)


def _integer(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise status.bad_request(f"{name}: invalid integer {value!r}") from None


# --- the request handling ------------------------------------------------------------------


class Router:
    """Answers one request on a handler; long-lived state lives in the Backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def handle(self, handler: _Handler, raw: bytes, arrived: float) -> None:
        split = urlsplit(handler.path)
        path = split.path
        query = dict(parse_qsl(split.query, keep_blank_values=True)[::-1])  # first one wins
        route = parse_route(path)
        resource = route.resource if route else None
        watch = self._is_watch(handler.command, route, query)

        info = request_info(handler.command, path, query)
        accept = handler.headers.get("Accept", "")
        user = ""

        # Logged when the status line goes out, so a watch is in the log while it streams.
        def record(code: int) -> None:
            self.backend.log.add(
                handler.command, path, query, code, resource, watch, arrived, accept, user, info
            )

        handler.record = record
        handler.drip = None
        try:
            user = self.backend.tokens.authenticate(
                path,
                handler.headers.get("Authorization"),
                authorized=self.backend.authorizer.enabled,
            )
            self.backend.authorizer.check(user, info)
            fault = self.backend.faults.check(resource, info, user)
            if fault is not None:
                raise fault
            if not watch:  # watches have stall faults of their own
                handler.drip = self.backend.faults.drip(path, resource, info.verb)
            if path == access_review.PATH:
                content_type = handler.headers.get("Content-Type") or ""
                body = access_review.review(
                    self.backend.authorizer, user, handler.command, content_type, raw
                )
                handler.reply(201, body)
            elif route is None:
                self._non_resource(handler, path)
            else:
                self._resource(handler, route, query, raw, watch)
        except ApiError as error:
            handler.reply(error.code, error.body(), headers=error.headers)
        except PatchError:
            failure = status.unprocessable()
            handler.reply(failure.code, failure.body())
        except OSError:
            raise
        except Exception:
            # A bug in the fake must be loud, but the client still deserves an answer.
            traceback.print_exc()
            failure = status.internal_error("the fake API server failed; see its stderr")
            handler.reply(failure.code, failure.body())

    @staticmethod
    def _is_watch(method: str, route: Route | None, query: dict[str, str]) -> bool:
        if method != "GET" or route is None or route.name is not None:
            return False
        return route.watch_path or bool(flag(query, "watch"))

    # non-resource paths -------------------------------------------------------------------

    def _non_resource(self, handler: _Handler, path: str) -> None:
        if handler.command != "GET":
            raise status.method_not_allowed()
        settings = self.backend.settings
        doc: Any
        stripped = path.rstrip("/") or "/"
        if stripped == "/version":
            doc = version_info(settings.git_version)
        elif stripped == "/api":
            doc = resources.api_versions(f"{HOST}:{handler.server.server_address[1]}")
        elif stripped == "/apis":
            doc = resources.api_group_list()
        elif stripped in ("/healthz", "/livez", "/readyz"):
            handler.reply(200, b"ok", content_type="text/plain")
            return
        elif stripped == "/_sandbox/stats":
            doc = self.stats()
        elif stripped == "/openapi/v3":
            doc = openapi.index(settings.git_version)
        elif stripped.startswith("/openapi/v3/"):
            found = openapi.find(settings.git_version, stripped.removeprefix("/openapi/v3/"))
            if found is None:
                raise status.path_not_found()
            handler.reply(200, found)
            return
        else:
            parts = stripped.strip("/").split("/")
            doc = None
            if parts[0] == "api" and len(parts) == 2:
                doc = resources.api_resource_list("", parts[1])
            elif parts[0] == "apis" and len(parts) == 2:
                doc = resources.api_group(parts[1])
            elif parts[0] == "apis" and len(parts) == 3:
                doc = resources.api_resource_list(parts[1], parts[2])
            if doc is None and _served_group_version(parts):
                raise status.path_not_found()
            if doc is None:
                # Outside every API group version the server serves: its mux's plain 404.
                plain = "text/plain; charset=utf-8"
                handler.reply(404, b"404 page not found\n", content_type=plain)
                return
        handler.reply(200, _encode(doc))

    def stats(self) -> dict[str, Any]:
        backend = self.backend
        return {
            "resource_version": backend.store.current_rv,
            "objects": {k: v for k, v in backend.store.counts().items() if v},
            "watches": backend.store.watch_count(),
            "requests": backend.log.count,
            "continue_snapshots": backend.pager.outstanding(),
            "waiting_for_resource_version": backend.store.waiting,
        }

    # resources ----------------------------------------------------------------------------

    def _resource(
        self, handler: _Handler, route: Route, query: dict[str, str], raw: bytes, watch: bool
    ) -> None:
        method, resource = handler.command, route.resource
        if method in ("POST", "PUT") or (method == "DELETE" and raw):
            raw = negotiation.body_as_json(handler.headers.get("Content-Type") or "", raw)
        if route.subresource is not None:
            return self._subresource(handler, route, query, raw)
        choice = _choice(handler, query)
        if route.name is None:
            if watch:
                return self._watch(handler, route, query, choice)
            if method == "GET":
                return self._list(handler, route, query, choice)
            if method == "POST":
                return self._create(handler, route, query, raw, choice)
            raise status.method_not_allowed()
        store = self.backend.store
        warnings: list[str] = []
        if method == "GET":
            entry = store.get(resource, route.namespace, route.name)
        elif method == "PUT":
            entry, warnings = self._put(handler, route, query, raw, status_only=False)
        elif method == "PATCH" and _media_type(handler) == applying.MEDIA_TYPE:
            return self._apply(handler, route, query, raw, choice)
        elif method == "PATCH":
            entry, warnings = self._patch(handler, route, query, raw, status_only=False)
        elif method == "DELETE":
            return self._delete(handler, route, query, raw, choice)
        else:
            raise status.method_not_allowed()
        body = choice.for_object(resource).entry(resource, entry)
        handler.reply(200, body, headers=admission.warning_headers(warnings))

    def _subresource(
        self, handler: _Handler, route: Route, query: dict[str, str], raw: bytes
    ) -> None:
        method, resource = handler.command, route.resource
        assert route.name is not None
        if route.subresource == "log" and resource.plural == "pods" and not resource.group:
            if method != "GET":
                raise status.method_not_allowed()
            return self._log(handler, route, query)
        if route.subresource == "scale" and resource.scale:
            return self._scale(handler, route, query, raw)
        if route.subresource != "status" or not resource.status:
            raise status.path_not_found()
        choice = _choice(handler, query)
        warnings: list[str] = []
        if method == "GET":
            entry = self.backend.store.get(resource, route.namespace, route.name)
        elif method == "PUT":
            entry, warnings = self._put(handler, route, query, raw, status_only=True)
        elif method == "PATCH":
            entry, warnings = self._patch(handler, route, query, raw, status_only=True)
        else:
            raise status.method_not_allowed()
        body = choice.for_object(resource).entry(resource, entry)
        handler.reply(200, body, headers=admission.warning_headers(warnings))

    def _scale(self, handler: _Handler, route: Route, query: dict[str, str], raw: bytes) -> None:
        method, resource, name = handler.command, route.resource, str(route.name)
        store = self.backend.store
        if method == "GET":
            entry = store.get(resource, route.namespace, name)
            handler.reply(200, _encode(scale.of(entry.decode())))
            return
        if method == "PUT":
            body = _json_body(raw)
            _check_name(body, name)
            options = WriteOptions.parse(query, "UpdateOptions")

            def change(_: dict[str, Any]) -> Any:
                return body
        elif method == "PATCH":
            patcher = _patcher(handler)
            patch = _json_body(raw)
            options = WriteOptions.parse(query, "PatchOptions")

            def change(current: dict[str, Any]) -> Any:
                return patcher(current, patch)
        else:
            raise status.method_not_allowed()

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            return scale.written(name, current, change(scale.of(current)))

        entry = store.modify(resource, route.namespace, name, mutate, dry_run=options.dry_run)
        handler.reply(200, _encode(scale.of(entry.decode())))

    def _list(self, handler: _Handler, route: Route, query: dict[str, str], choice: Choice) -> None:
        """A list at the resourceVersion the request asks for, as in
        https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list:
        unset, the most recent; "0", any (served whole from the watch cache, `limit` ignored);
        N, not older than N (waited for a while when ahead) or exactly N (`Exact`, and for
        a paginated list without `resourceVersionMatch`, the legacy meaning)."""
        backend, resource = self.backend, route.resource
        options = ListOptions.parse(query, watch=False).as_served(
            backend.settings.streaming_mode(resource)
        )
        labels = LabelSelector.parse(query.get("labelSelector"))
        fields = FieldSelector.parse(query.get("fieldSelector"), resource)
        limit = _int_param(query, "limit")
        token = options.continue_token or None
        rv = options.resource_version_number
        if token and rv:
            raise status.resource_version_with_continue()
        at = None
        match = options.resource_version_match
        if match == EXACT or (rv and not match and limit is not None and limit > 0):
            at = rv
        elif rv:
            self._wait_for_rv(rv)
        elif options.resource_version == "0":
            limit = None  # the watch cache serves the rest whole, a continue token or not
        page = backend.pager.page(
            resource,
            route.namespace,
            matcher(labels, fields),
            limit,
            token,
            at,
            endless=backend.faults.endless_list_mode(resource),
        )
        handler.reply(200, choice.list_body(resource, page))

    def _wait_for_rv(self, rv: int) -> None:
        """What the watch cache does for a resourceVersion it has not seen: wait a while
        for it, then 504 (staging/src/k8s.io/apiserver/pkg/storage/cacher)."""
        store = self.backend.store
        if rv > store.current_rv and not store.wait_for_rv(
            rv, self.backend.settings.too_large_rv_wait
        ):
            raise status.too_large_resource_version(rv, store.current_rv)

    def _create(
        self, handler: _Handler, route: Route, query: dict[str, str], raw: bytes, choice: Choice
    ) -> None:
        resource = route.resource
        body = _object_body(raw, resource)
        options = WriteOptions.parse(query, "CreateOptions")
        if str(body["metadata"].get("resourceVersion") or "0") != "0":
            raise status.resource_version_on_create()
        warnings = self._admit_new(route, body, options, _duplicates(raw, options))
        managed_fields.on_create(resource, body, _manager(handler, query))
        tracked = "managedFields" in body["metadata"]
        store = self.backend.store
        entry = store.create(resource, body, dry_run=options.dry_run)
        if not options.dry_run and not tracked:
            store.untracked.add(entry.uid)  # created with no field: upstream tracks it not
        answer = choice.for_object(resource).entry(resource, entry)
        handler.reply(201, answer, headers=admission.warning_headers(warnings))

    def _admit_new(
        self, route: Route, body: dict[str, Any], options: WriteOptions, duplicates: list[str]
    ) -> list[str]:
        """A new object as the create strategy and admission leave it; its warnings."""
        resource = route.resource
        metadata = body["metadata"]
        if resource.namespaced:
            namespace = route.namespace or "default"
            if metadata.get("namespace") not in (None, "", namespace):
                raise status.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            metadata["namespace"] = namespace
        for server_owned in (
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            metadata.pop(server_owned, None)
        if resource.status:  # a status subresource's kind starts with an empty status
            body["status"] = _initial_status(resource)
        namespaces.check_create(self.backend.store, resource, body)
        return self._admit(resource, body, None, options, duplicates=duplicates)

    def _apply(
        self, handler: _Handler, route: Route, query: dict[str, str], raw: bytes, choice: Choice
    ) -> None:
        """Server-side apply (`applying`): creates the object (201) or merges into it."""
        resource = route.resource
        assert route.name is not None
        manager = applying.manager(query)
        options = WriteOptions.parse(query, "PatchOptions")
        config = _object_body(negotiation.body_as_json("application/yaml", raw), resource)
        force = bool(flag(query, "force"))
        store = self.backend.store
        warnings: list[str] = []
        if not _exists(store, resource, route.namespace, route.name):
            body = applying.apply(resource, config, None, manager, force=force)
            body["metadata"]["name"] = route.name
            warnings = self._admit_new(route, body, options, [])
            entry = store.create(resource, body, dry_run=options.dry_run)
            code = 201
        else:

            def merge(current: dict[str, Any]) -> dict[str, Any]:
                untracked = current["metadata"].get("uid") in store.untracked
                new = applying.apply(
                    resource, config, current, manager, force=force, untracked=untracked
                )
                if resource.status:  # an apply to the object leaves its status alone
                    _set_status(new, current.get("status"))
                warnings.extend(self._admit(resource, new, current, options))
                return new

            entry = store.modify(
                resource, route.namespace, route.name, merge, dry_run=options.dry_run
            )
            code = 200
        if not options.dry_run:  # an apply tracks the object again, unless it left no entry
            if entry.decode()["metadata"].get("managedFields"):
                store.untracked.discard(entry.uid)
            else:
                store.untracked.add(entry.uid)
        answer = choice.for_object(resource).entry(resource, entry)
        handler.reply(code, answer, headers=admission.warning_headers(warnings))

    def _admit(
        self,
        resource: Resource,
        obj: dict[str, Any],
        stored: dict[str, Any] | None,
        options: WriteOptions,
        *,
        duplicates: list[str] | None = None,
        patch_problems: list[decoding.FieldProblem] | None = None,
    ) -> list[str]:
        return admission.admit(
            self.backend.settings.git_version,
            resource,
            obj,
            stored,
            options,
            duplicates=duplicates or (),
            patch_problems=patch_problems,
        )

    def _put(
        self,
        handler: _Handler,
        route: Route,
        query: dict[str, str],
        raw: bytes,
        *,
        status_only: bool,
    ) -> tuple[Any, list[str]]:
        resource = route.resource
        body = _object_body(raw, resource)
        _check_name(body, str(route.name))
        options = WriteOptions.parse(query, "UpdateOptions")
        duplicates = _duplicates(raw, options)
        keep_status = resource.status and not status_only
        warnings: list[str] = []

        def replace(current: dict[str, Any]) -> dict[str, Any]:
            uid, stored_uid = body["metadata"].get("uid"), current["metadata"].get("uid")
            if uid and uid != stored_uid:
                raise status.uid_precondition_failed(
                    resource, route.namespace, str(route.name), uid, stored_uid
                )
            new = body
            if status_only:
                new = _with_status(current, body.get("status"), body["metadata"])
            elif keep_status:
                _set_status(new, current.get("status"))
            warnings.extend(self._admit(resource, new, current, options, duplicates=duplicates))
            return new

        assert route.name is not None
        return self._tracked(handler, route, query, status_only, replace, options), warnings

    def _patch(
        self,
        handler: _Handler,
        route: Route,
        query: dict[str, str],
        raw: bytes,
        *,
        status_only: bool,
    ) -> tuple[Any, list[str]]:
        resource = route.resource
        patcher = _patcher(handler)
        patch = _patch_body(raw, patcher)
        options = WriteOptions.parse(query, "PatchOptions")
        problems = _patch_problems(raw, patch, patcher, options)
        keep_status = resource.status and not status_only
        warnings: list[str] = []

        def apply(current: dict[str, Any]) -> dict[str, Any]:
            # JSON patch works in place; the current status must survive it.
            patched = patcher(copy.deepcopy(current), patch)
            if not isinstance(patched, dict):
                raise PatchError("the patch does not leave an object")
            uid = (patched.get("metadata") or {}).get("uid")
            if uid != current["metadata"].get("uid"):
                raise status.invalid_object(
                    resource,
                    str(route.name),
                    [status.invalid_field("metadata.uid", uid, "field is immutable")],
                )
            if status_only:
                patched = _with_status(current, patched.get("status"), patched.get("metadata"))
            elif keep_status:
                _set_status(patched, current.get("status"))
            warnings.extend(
                self._admit(resource, patched, current, options, patch_problems=problems)
            )
            return patched

        assert route.name is not None
        return self._tracked(handler, route, query, status_only, apply, options), warnings

    def _tracked(
        self,
        handler: _Handler,
        route: Route,
        query: dict[str, str],
        status_only: bool,
        mutate: Callable[[dict[str, Any]], dict[str, Any]],
        options: WriteOptions,
    ) -> Entry:
        """An update or patch stored with its managedFields (`managed_fields.Tracking`)."""
        store = self.backend.store
        manager = _manager(handler, query)
        tracking = managed_fields.Tracking(
            route.resource, manager, status_only, mutate, store.untracked
        )
        assert route.name is not None
        entry = store.modify(
            route.resource, route.namespace, route.name, tracking, dry_run=options.dry_run
        )
        if not options.dry_run:
            tracking.record()
        return entry

    def _delete(
        self, handler: _Handler, route: Route, query: dict[str, str], raw: bytes, choice: Choice
    ) -> None:
        resource = route.resource
        options = DeleteOptions.parse(query, _json_body(raw) if raw.strip() else None)
        assert route.name is not None
        namespaces.check_delete(resource, route.name)
        entry, deleted = self.backend.store.delete(resource, route.namespace, route.name, options)
        # Upstream answers 202 only to a delete that is not done yet and said
        # orphanDependents=false (handlers/delete.go); a waiting object is always answered.
        code = 202 if not deleted and options.orphan_dependents is False else 200
        if resource.returns_deleted or not deleted:
            handler.reply(code, choice.for_object(resource).entry(resource, entry))
        else:  # a Status is never transformed
            handler.reply(code, _encode(status.success(resource, route.name, entry.uid)))

    def _log(self, handler: _Handler, route: Route, query: dict[str, str]) -> None:
        assert route.name is not None
        namespace = route.namespace or "default"
        pod = self.backend.store.get(route.resource, namespace, route.name).decode()
        spec = pod.get("spec") or {}
        names = [c.get("name") for c in spec.get("containers") or ()]
        others = [
            c.get("name")
            for k in ("initContainers", "ephemeralContainers")
            for c in spec.get(k) or ()
        ]
        container = query.get("container") or ""
        if not container:
            if len(names) != 1:
                raise status.bad_request(
                    f"a container name must be specified for pod {route.name}, choose one of: "
                    f"[{' '.join(str(n) for n in names)}]"
                )
            container = names[0]
        elif container not in names and container not in others:
            raise status.bad_request(f"container {container} is not valid for pod {route.name}")
        if not spec.get("nodeName"):
            # Upstream's LogLocation: no node, no kubelet to ask; the answer is empty.
            handler.reply(204, b"", content_type="")
            return
        previous = query.get("previous", "").lower() == "true"
        text = self.backend.pod_logs.get(namespace, route.name, container, previous)
        if text is None:
            if previous:
                raise status.bad_request(
                    f'previous terminated container "{container}" in pod "{route.name}" not found'
                )
            text = ""
        body = tail(text, _int_param(query, "tailLines")).encode()
        limit = _int_param(query, "limitBytes")
        if limit is not None and limit >= 0:
            body = body[:limit]
        handler.reply(200, body, content_type="text/plain")

    def _watch(
        self, handler: _Handler, route: Route, query: dict[str, str], choice: Choice
    ) -> None:
        backend, resource = self.backend, route.resource
        settings = backend.settings
        mode = settings.streaming_mode(resource)
        options = ListOptions.parse(query, watch=True).as_served(mode)
        labels = LabelSelector.parse(query.get("labelSelector"))
        fields = FieldSelector.parse(query.get("fieldSelector"), resource)
        timeout = _int_param(query, "timeoutSeconds")
        namespace = route.namespace if resource.namespaced else None
        try:
            start = self._watch_start(options)
            if start is not None and backend.faults.watches_expired(resource):
                raise status.watch_expired(start, backend.store.current_rv + 1)
            subscription, backlog, initial, rv = backend.store.subscribe(
                resource, namespace, start, options.allow_bookmarks
            )
        except ApiError as error:
            # Upstream answers a too old resourceVersion (as configured here) and a streaming
            # list's too large one with a watch that carries one ERROR event.
            if error.code == 504 or (
                error.code == 410 and settings.expired_mode(resource) != "http"
            ):
                choice.for_watch()  # the stream's encoding is settled before its one event
                writer = handler.start_stream()
                writer.write(event_line("ERROR", error.body()))
                writer.end()
                return
            raise
        try:
            view = choice.for_watch()  # upstream picks the stream encoding once watching
            writer = handler.start_stream()
        except BaseException:
            backend.store.unsubscribe(subscription)
            raise
        cut = backend.faults.initial_events_cut(resource) if options.ends_initial_events else None
        if not timeout or timeout <= 0:
            # The server's own limit: --min-request-timeout, spread over 1-2x of it.
            timeout_seconds = settings.min_request_timeout * (1 + random.random())
        else:
            timeout_seconds = float(timeout)
        spec = WatchSpec(
            resource,
            namespace,
            matcher(labels, fields),
            timeout_seconds,
            settings.bookmark_interval,
            settings.bookmark_before_timeout,
            bool(options.send_initial_events),
            view,
            cut,
            backend.faults.stream_line_cut(resource),
        )
        stream = WatchStream(backend.store, spec, subscription, writer)
        stream.run(backlog, initial, rv if start is None else start)

    def _watch_start(self, options: ListOptions) -> int | None:
        """The resourceVersion a watch replays the changes after; None: it starts with the
        current objects (initial events). A streaming list waits for a resourceVersion
        not reached yet, then is refused (504); a plain watch from one simply sends nothing
        until the server passes it, as the watch cache filters what it sends."""
        wanted = options.resource_version_number
        if options.send_initial_events:
            if wanted:
                self._wait_for_rv(wanted)
            return None
        if not wanted:
            # Unset is the legacy watch (the current objects first); false starts from now.
            return None if options.send_initial_events is None else self.backend.store.current_rv
        return wanted


def _initial_status(resource: Resource) -> dict[str, Any]:
    """The status a create starts with: Go's zero status as JSON (only fields without
    `omitempty` show), or what the kind's strategy sets in PrepareForCreate."""
    if resource.kind == "HorizontalPodAutoscaler":
        return {"currentMetrics": None, "desiredReplicas": 0}
    if resource.kind == "Pod":
        return {"phase": "Pending"}
    return {}  # a Namespace's phase is the store's strategy's (Active, Python-side too)


def _check_name(body: Any, name: str) -> None:
    """What an update's handler checks first, before any precondition: the body names the
    object of the URL (checkName in staging/src/k8s.io/apiserver/pkg/endpoints/handlers)."""
    metadata = body.get("metadata") if isinstance(body, dict) else None
    given = metadata.get("name") if isinstance(metadata, dict) else None
    if not given:
        raise status.bad_request(
            f"the name of the object ({name} based on URL) was undeterminable: "
            "name must be provided"
        )
    if given != name:
        raise status.bad_request(
            f"the name of the object ({given}) does not match the name on the URL ({name})"
        )


def _manager(handler: _Handler, query: dict[str, str]) -> str:
    return managed_fields.manager(query, handler.headers.get("User-Agent"))


def _exists(store: Store, resource: Resource, namespace: str | None, name: str) -> bool:
    try:
        store.get(resource, namespace, name)
    except ApiError as error:
        if error.code == 404:
            return False
        raise
    return True


def _media_type(handler: _Handler) -> str:
    return (handler.headers.get("Content-Type") or "").split(";")[0].strip().lower()


def _patcher(handler: _Handler) -> Callable[[Any, Any], Any]:
    patcher = _PATCHERS.get(_media_type(handler))
    if patcher is None:
        raise status.unsupported_patch_type()
    return patcher


def _choice(handler: _Handler, query: dict[str, str]) -> Choice:
    return negotiate(handler.headers.get("Accept", ""), query.get("includeObject", ""))


def _set_status(obj: dict[str, Any], value: Any) -> None:
    if value is None:
        obj.pop("status", None)
    else:
        obj["status"] = value


def _with_status(current: dict[str, Any], value: Any, metadata: Any) -> dict[str, Any]:
    """The current object with only its status replaced (a status subresource write)."""
    _set_status(current, value)
    given = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    if given:
        current["metadata"]["resourceVersion"] = given
    return current


# --- HTTP plumbing -------------------------------------------------------------------------


class _ChunkWriter:
    """Chunked transfer encoding on the handler's connection, flushed per write."""

    def __init__(self, handler: _Handler) -> None:
        self._handler = handler

    def write(self, data: bytes) -> None:
        if data:
            wfile = self._handler.wfile
            wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            wfile.flush()

    def end(self) -> None:
        self._handler.wfile.write(b"0\r\n\r\n")
        self._handler.wfile.flush()

    def abort(self) -> None:
        self._handler.close_connection = True
        with contextlib.suppress(OSError):
            self._handler.connection.shutdown(socket.SHUT_RDWR)

    def client_gone(self) -> bool:
        # Nothing is sent by an HTTP/1.1 client while it reads a response, so a readable
        # socket means end of file (or a reset): the client has closed the connection.
        connection = self._handler.connection
        try:
            readable, _, _ = select.select([connection], [], [], 0)
            return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked watch streams
    server_version = "fake-kube-apiserver/1"
    sys_version = ""
    disable_nagle_algorithm = True
    wbufsize = -1  # buffered: status line, headers and body leave in one write
    server: KubeServer
    record: Callable[[int], None] | None = None  # logs the request once its status is known
    drip: Drip | None = None  # how to trickle out this request's answer, if it is dripped

    def setup(self) -> None:
        # One port speaks both: a connection that opens with a TLS handshake record gets
        # TLS (kubectl sends bearer tokens only over TLS), any other plain HTTP. The
        # handshake runs in the connection's own thread, never in the accept loop.
        connection: socket.socket = self.request
        with contextlib.suppress(OSError):
            if connection.recv(1, socket.MSG_PEEK) == _TLS_HANDSHAKE:
                tls = self.server.tls_context().wrap_socket(connection, server_side=True)
                self.request = tls
        super().setup()

    def send_response(self, code: int, message: str | None = None) -> None:
        super().send_response(code, message)
        record, self.record = self.record, None
        if record is not None:
            record(code)

    def do_GET(self) -> None:
        arrived = time.monotonic()
        raw = self._read_body()
        if raw is not None:
            self.server.router.handle(self, raw, arrived)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def reply(
        self,
        code: int,
        body: bytes,
        *,
        content_type: str = "application/json",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        drip, self.drip = self.drip, None
        if drip is None:
            self._write_reply(code, body, content_type, headers)
            return
        # Compose the answer exactly as it would go out, then trickle it.
        wfile, self.wfile = self.wfile, io.BytesIO()
        try:
            self._write_reply(code, body, content_type, headers)
            answer = self.wfile.getvalue()
        finally:
            self.wfile = wfile
        self._drip(answer, len(answer) - len(body), drip)

    def _write_reply(
        self,
        code: int,
        body: bytes,
        content_type: str,
        headers: tuple[tuple[str, str], ...],
    ) -> None:
        self.send_response(code)
        for name, value in headers:
            self.send_header(name, value)
        if content_type:
            self.send_header("Content-Type", content_type)
        if code != 204:  # no content, and so no length (RFC 9110)
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _drip(self, answer: bytes, head_length: int, drip: Drip) -> None:
        """Write `answer` a byte every `drip.every` seconds (after its head, unless the head
        drips too); a cancelled drip or a vanished client ends it and the connection."""
        start = 0 if drip.headers else head_length
        try:
            if start:
                self.wfile.write(answer[:start])
                self.wfile.flush()
            for index in range(start, len(answer)):
                if drip.cancelled.wait(drip.every):
                    break
                self.wfile.write(answer[index : index + 1])
                self.wfile.flush()
            else:
                return
        except OSError:
            pass  # the client went away: routine
        # Cut short, the answer leaves the connection unusable: the client must see it end.
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def start_stream(self) -> _ChunkWriter:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()
        return _ChunkWriter(self)

    def _read_body(self) -> bytes | None:
        try:
            return read_request_body(self)
        except InvalidLength:
            self.close_connection = True
            self.reply(400, status.bad_request("invalid Content-Length").body())
            return None

    def log_message(self, format: str, *args: Any) -> None:
        pass  # benchmarks page through 10^5 objects; a line per request would be noise


class KubeServer(LoopbackServer):
    def __init__(
        self, port: int, router: Router, tls_context: Callable[[], ssl.SSLContext]
    ) -> None:
        self.router = router
        self.tls_context = tls_context
        super().__init__(port, _Handler)
