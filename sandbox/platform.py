"""A fake Moonin platform: a real HTTP server on 127.0.0.1 that serves the cluster-facing API
exactly as docs/protocol.md describes it.

The agent's delivery guarantees (retries, backoff, idempotency, bisecting rejected batches,
snapshots that repair missed deletions) only mean something against a server that behaves
like the real one on the wire, including its failures. This one keeps the platform view the
contract defines, records every request, and can be scripted to fail per route: a status,
a delay, a dropped connection, an outage of one route or of the whole listener.

It can also answer with hostility, as a broken platform or a proxy in front of it might: a
body that drips one byte at a time and may never end (`Drip`), a gzip bomb (`GzipBomb`), an
oversized plain body (`HugeBody`) and a redirect (`Redirect`). Streamed answers stop quietly
when the client goes away, and at once on `reset()` or `down()`; `bytes_sent(route)` says
how many body bytes actually left, and `open_streams()` how many are still being written.

In-process use (tests):

    with FakePlatform() as platform:
        platform.script("records", Status(503), Drop())
        platform.fail_all("templates", Drip(every=0.5))  # a 200 that never finishes
        ...  # point the agent at platform.url
        assert platform.view()[("deployment", "shop/web")]["data"] == ...

Out of process (benchmarks, demo): `python -m sandbox.platform --port 0` prints one line
`URL <url>` once listening, serves `GET /_sandbox/stats` without credentials, and runs until
SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import itertools
import signal
import socket
import ssl
import sys
import threading
import time
import traceback
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from sandbox.serving import HOST, InvalidLength, LoopbackServer, read_request_body

if TYPE_CHECKING:
    from sandbox.tls import TLSAuthority

ROUTES = ("records", "events", "heartbeat", "templates", "actions")
_OPS = frozenset({"upsert", "delete", "event"})
_EVENT_TYPES = frozenset({"apply", "revert", "error"})
# "absent values are null, never an empty string"
_NULLABLE_RECORD_FIELDS = ("uid", "namespace", "name", "resource_version")

_encode = msgspec.json.encode


# --- faults -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    """Answer `code` (with `Retry-After` and `body` if given) and apply nothing."""

    code: int
    retry_after: str | int | float | None = None
    body: bytes | str | None = None


@dataclass(frozen=True)
class Delay:
    """Sleep, then handle the request normally (a slow platform; client timeouts)."""

    seconds: float


@dataclass(frozen=True)
class Drop:
    """Close the connection without any response.

    With `apply=True` the request is handled first, so the platform has the body but the
    client cannot know: the retry that follows must be answered 409 and change nothing.
    """

    apply: bool = False


@dataclass(frozen=True)
class Drip:
    """A 200 whose body bytes arrive one at a time, each after a pause of `every` seconds.

    With `body=None` the body never ends: `{"templates": [` then spaces forever, with no
    Content-Length and `Connection: close` (not chunked, so every byte on the wire is a body
    byte). With a `body`, it carries that Content-Length and ends once all of it was sent.
    With `headers=True` the status line and header block are dripped too, so the answer
    itself is late. The drip ends when a write fails (the client left), or on `reset()` or
    `down()`.
    """

    every: float
    body: bytes | None = None
    headers: bool = False


@dataclass(frozen=True)
class GzipBomb:
    """A 200 with `Content-Encoding: gzip` whose small body inflates to `inflated` bytes.

    The compressed bytes are built once per size and cached; `script` and `fail_all` build
    them, so the answer itself starts at once (2 GiB takes ~10 s to build, ~2 MB to send).
    """

    inflated: int


@dataclass(frozen=True)
class HugeBody:
    """A plain 200 JSON body of `size` bytes, generated while it is sent.

    `{"templates": [`, spaces, `]}`: valid JSON if read whole (from 17 bytes up).
    """

    size: int


@dataclass(frozen=True)
class Redirect:
    """Answer `code` with `Location: location` and a small JSON body."""

    location: str
    code: int = 307


Fault = Status | Delay | Drop | Drip | GzipBomb | HugeBody | Redirect
# Faults whose body is written while it is generated, by the connection's thread.
_Streamed = Drip | GzipBomb | HugeBody


# --- recording --------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One request as it reached the server. `status` is None when the connection was dropped;
    `time` is `time.monotonic()` on arrival, before any scripted delay."""

    method: str
    path: str
    route: str | None
    headers: dict[str, str]
    raw_body: bytes
    body: bytes
    status: int | None
    time: float

    def json(self) -> Any:
        return msgspec.json.decode(self.body)


# --- internals --------------------------------------------------------------------------


class _Refusal(Exception):
    """A request the platform answers with a 4xx before touching any state."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _bad(message: str) -> _Refusal:
    return _Refusal(400, message)


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes = b"{}"
    headers: tuple[tuple[str, str], ...] = ()
    # A streamed answer: written by the handler, until done or until `cancelled` is set.
    stream: _Streamed | None = None
    cancelled: threading.Event | None = None


def _json_reply(status: int, payload: Any, *headers: tuple[str, str]) -> _Reply:
    return _Reply(status, _encode(payload), headers)


def _error_reply(status: int, message: str, *headers: tuple[str, str]) -> _Reply:
    return _json_reply(status, {"error": message}, *headers)


_DROPPED = _Reply(0)  # sentinel: close the connection, answer nothing


@dataclass(frozen=True, slots=True)
class _Incoming:
    """A request as read off the connection; `body_error` says why the body is unusable."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: bytes
    body_error: _Refusal | None
    arrived: float

    @classmethod
    def read(
        cls,
        method: str,
        path: str,
        headers: dict[str, str],
        raw: bytes,
        arrived: float,
        limit: int | None,
    ) -> _Incoming:
        try:
            body = _decode_body(raw, headers.get("content-encoding", ""), limit)
        except _Refusal as refusal:
            return cls(method, path, headers, raw, b"", refusal, arrived)
        return cls(method, path, headers, raw, body, None, arrived)


@dataclass(frozen=True, slots=True)
class _SnapshotPart:
    of: str
    snapshot_id: str
    part: int
    parts: int
    keys: tuple[str, ...]
    listed_at: datetime


@dataclass(slots=True)
class _SnapshotProgress:
    of: str
    parts: int
    listed_at: datetime
    seen: set[int] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _CheckedRecord:
    record: dict[str, Any]
    observed_at: datetime
    snapshot: _SnapshotPart | None


def _parse_time(value: Any) -> datetime | None:
    """RFC 3339 in UTC with a `Z`; parsed, because text order breaks on fractional seconds."""
    if not isinstance(value, str) or not value.endswith("Z") or "T" not in value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _require_text(doc: dict[str, Any], name: str, where: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        raise _bad(f"{where}.{name} must be a non-empty string")
    return value


def _check_snapshot(data: Any, where: str) -> _SnapshotPart:
    if not isinstance(data, dict):
        raise _bad(f"{where}.data must be an object for a snapshot")
    of = _require_text(data, "of", f"{where}.data")
    snapshot_id = _require_text(data, "snapshot_id", f"{where}.data")
    part, parts, keys = data.get("part"), data.get("parts"), data.get("keys")
    if not (_is_count(part) and _is_count(parts) and part <= parts):
        raise _bad(f"{where}.data needs 1 <= part <= parts")
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise _bad(f"{where}.data.keys must be a list of strings")
    listed_at = _parse_time(data.get("listed_at"))
    if listed_at is None:
        raise _bad(f"{where}.data.listed_at must be an RFC 3339 UTC timestamp")
    return _SnapshotPart(of, snapshot_id, part, parts, tuple(keys), listed_at)


def _check_record(index: int, record: Any) -> _CheckedRecord:
    where = f"records[{index}]"
    if not isinstance(record, dict):
        raise _bad(f"{where} must be an object")
    for name in ("id", "kind", "key"):
        _require_text(record, name, where)
    if record.get("op") not in _OPS:
        raise _bad(f"{where}.op must be one of upsert, delete, event")
    observed_at = _parse_time(record.get("observed_at"))
    if observed_at is None:
        raise _bad(f"{where}.observed_at must be an RFC 3339 UTC timestamp")
    for name in _NULLABLE_RECORD_FIELDS:
        value = record.get(name)
        if value is not None and (not isinstance(value, str) or not value):
            raise _bad(f"{where}.{name} must be a non-empty string or null")
    if "data" in record and not isinstance(record["data"], dict):
        raise _bad(f"{where}.data must be an object")
    snapshot = None
    if record["kind"] == "snapshot":
        if record["op"] != "event":
            raise _bad(f"{where}: a snapshot is an event")
        snapshot = _check_snapshot(record.get("data"), where)
    return _CheckedRecord(record, observed_at, snapshot)


def _check_event(index: int, event: Any) -> dict[str, Any]:
    where = f"events[{index}]"
    if not isinstance(event, dict):
        raise _bad(f"{where} must be an object")
    for name in ("id", "template_id"):
        _require_text(event, name, where)
    if event.get("type") not in _EVENT_TYPES:
        raise _bad(f"{where}.type must be one of apply, revert, error")
    if _parse_time(event.get("occurred_at")) is None:
        raise _bad(f"{where}.occurred_at must be an RFC 3339 UTC timestamp")
    return event


def _gunzip(raw: bytes) -> bytes:
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise _bad(f"body is not valid gzip: {exc}") from None


# --- hostile bodies ---------------------------------------------------------------------

# What an agent expecting templates starts to parse; the rest is whitespace, so a client
# that stops early has read a prefix of valid JSON.
_JSON_PREFIX = b'{"templates": ['
_JSON_SUFFIX = b"]}"
_CHUNK = 64 * 1024
_SPACES = b" " * _CHUNK

_bombs: dict[int, bytes] = {}
_bombs_lock = threading.Lock()


def _padded_json(size: int) -> Iterator[bytes]:
    """`size` bytes of `{"templates": [   ...   ]}` in chunks, never all in memory."""
    if size < len(_JSON_PREFIX) + len(_JSON_SUFFIX):
        yield (_JSON_PREFIX + _JSON_SUFFIX)[:size]
        return
    yield _JSON_PREFIX
    spaces = size - len(_JSON_PREFIX) - len(_JSON_SUFFIX)
    while spaces > 0:
        chunk = _SPACES[: min(spaces, _CHUNK)]
        spaces -= len(chunk)
        yield chunk
    yield _JSON_SUFFIX


def _gzip_bomb(inflated: int) -> bytes:
    """The gzip of `inflated` bytes of a JSON prefix and spaces, built once per size."""
    with _bombs_lock:  # two racing requests build it once
        bomb = _bombs.get(inflated)
        if bomb is None:
            # Compressed piece by piece: the inflated bytes never exist in memory.
            compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
            left = inflated
            pieces = [compressor.compress(_JSON_PREFIX[:left])]
            left -= len(_JSON_PREFIX[:left])
            block = b" " * (1 << 20)
            while left > 0:
                pieces.append(compressor.compress(block[: min(left, len(block))]))
                left -= min(left, len(block))
            pieces.append(compressor.flush())
            bomb = _bombs[inflated] = b"".join(pieces)
        return bomb


def _prepare(fault: Fault | None) -> None:
    if isinstance(fault, GzipBomb):
        _gzip_bomb(fault.inflated)


def _decode_body(raw: bytes, encoding: str, limit: int | None) -> bytes:
    encoding = encoding.strip().lower()
    if encoding == "gzip":
        body = _gunzip(raw)
    elif encoding in ("", "identity"):
        body = raw
    else:
        raise _Refusal(415, f"unsupported Content-Encoding {encoding!r}")
    if limit is not None and len(body) > limit:
        raise _Refusal(413, f"body is {len(body)} bytes, the limit is {limit}")
    return body


def _match(method: str, path: str) -> tuple[str | None, str | None, str | None]:
    """(route, cluster id, template id); route None means 404, "method" means 405."""
    parts = urlsplit(path).path.strip("/").split("/")
    wanted: str | None = None
    route: str | None = None
    cluster_id = template_id = None
    if parts[:1] == ["_sandbox"] and len(parts) == 2 and parts[1] in ("stats", "view"):
        wanted, route = "GET", f"_sandbox/{parts[1]}"
    elif len(parts) >= 4 and parts[:2] == ["v1", "clusters"]:
        cluster_id, tail = parts[2], parts[3:]
        if tail in (["records"], ["events"], ["heartbeat"]):
            wanted, route = "POST", tail[0]
        elif tail == ["templates"]:
            wanted, route = "GET", "templates"
        elif len(tail) == 3 and tail[0] == "templates" and tail[2] == "actions":
            wanted, route, template_id = "GET", "actions", tail[1]
    if route is not None and method != wanted:
        return "method", cluster_id, template_id
    return route, cluster_id, template_id


# --- the platform -----------------------------------------------------------------------


class FakePlatform:
    """The fake Moonin API for one project and cluster, served on 127.0.0.1.

    Settable at any time: `token` (rotation), `heartbeat_answer`, `reject_record` (a predicate
    over one record or event; a match makes the whole body 422), `max_body_bytes` (413 past
    it, measured decompressed). `reset()` puts all of them back to the constructor's values.

    With `history=False` only counters and the set of record ids are kept (no request log,
    no received lists, no view): cheap enough for benchmarks that push 10^5 records.
    """

    def __init__(
        self,
        *,
        token: str = "test-token",
        project_id: str = "p-1",
        cluster_id: str = "c-1",
        tls: TLSAuthority | None = None,
        port: int = 0,
        history: bool = True,
    ) -> None:
        self.project_id = project_id
        self.cluster_id = cluster_id
        self.history = history
        self._initial_token = token
        self._ssl_context = tls.server_context() if tls is not None else None
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lifecycle = threading.Lock()
        self._lock = threading.Lock()
        # Set by reset() and down() (then replaced): ends the streamed answers under way.
        self._cancel_streams = threading.Event()
        self._open_streams = 0  # not reset: it counts threads still writing
        self._clear()

    # lifecycle -------------------------------------------------------------------------

    def start(self) -> FakePlatform:
        self.up()
        return self

    def stop(self) -> None:
        self.down()

    def __enter__(self) -> FakePlatform:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def up(self) -> None:
        """Listen again, on the same port as before (the first call picks one if port=0)."""
        with self._lifecycle:
            if self._server is not None:
                return
            server = _Server(self._port, self, self._ssl_context)
            self._port = server.server_address[1]
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"fake-moonin-{self._port}",
                daemon=True,
            )
            thread.start()
            self._server, self._thread = server, thread

    def down(self) -> None:
        """Close the listener and every open connection: clients get connection refused."""
        with self._lifecycle:
            server, thread = self._server, self._thread
            if server is None or thread is None:
                return
            server.shutdown()
            server.server_close()
            with self._lock:
                self._end_streams()
            server.cut_connections()
            thread.join()
            self._server = self._thread = None

    @property
    def is_up(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("the platform has not been started")
        return self._port

    @property
    def url(self) -> str:
        if self._ssl_context is not None:
            return f"https://localhost:{self.port}"
        return f"http://{HOST}:{self.port}"

    # configuration ---------------------------------------------------------------------

    def script(self, route: str, *faults: Fault) -> None:
        """Queue faults for `route`, consumed one per request, before any fail_all fault."""
        _check_route(route)
        for fault in faults:
            _prepare(fault)
        with self._lock:
            self._scripts[route].extend(faults)

    def fail_all(self, route: str, fault: Fault | None) -> None:
        """Apply `fault` to every request on `route` (after its script) until set to None."""
        _check_route(route)
        _prepare(fault)
        with self._lock:
            if fault is None:
                self._persistent.pop(route, None)
            else:
                self._persistent[route] = fault

    def set_templates(self, templates: list[dict[str, Any]]) -> None:
        with self._lock:
            self._templates = list(templates)

    def set_actions(self, template_id: str, actions: list[dict[str, Any]]) -> None:
        with self._lock:
            self._actions[template_id] = list(actions)

    def reset(self) -> None:
        """Forget everything received and configured; the listener is left as it is."""
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._end_streams()
        self._bytes_sent: Counter[str] = Counter()
        self.token = self._initial_token
        self.heartbeat_answer: dict[str, Any] = {}
        self.reject_record: Callable[[dict[str, Any]], bool] | None = None
        self.max_body_bytes: int | None = None
        self._scripts: dict[str, deque[Fault]] = {route: deque() for route in ROUTES}
        self._persistent: dict[str, Fault] = {}
        self._requests: list[RecordedRequest] = []
        self._request_count = 0
        self._accepted_keys: set[tuple[str, str]] = set()
        self._templates: list[dict[str, Any]] = []
        self._actions: dict[str, list[dict[str, Any]]] = {}
        self._last_heartbeat: dict[str, Any] | None = None
        self._received_records: list[dict[str, Any]] = []
        self._record_count = 0
        self._record_bytes = 0
        self._record_ids: set[str] = set()
        self._view: dict[tuple[str, str], tuple[datetime, dict[str, Any]]] = {}
        self._deleted_at: dict[tuple[str, str], datetime] = {}
        self._snapshots: dict[str, _SnapshotProgress] = {}
        self._events: dict[str, dict[str, Any]] = {}
        self._received_events: list[dict[str, Any]] = []
        self._event_count = 0

    # introspection ---------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def view(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The platform's current objects: (kind, key) -> the upsert record it kept."""
        with self._lock:
            return {slot: record for slot, (_, record) in self._view.items()}

    def received_records(self) -> list[dict[str, Any]]:
        """Every record of every accepted body, in arrival order, duplicates included."""
        with self._lock:
            return list(self._received_records)

    def events(self) -> dict[str, dict[str, Any]]:
        """Scaling events de-duplicated by id (the first one received is kept)."""
        with self._lock:
            return dict(self._events)

    def received_events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._received_events)

    def bytes_sent(self, route: str) -> int:
        """Body bytes written to the socket for the requests of `route` since reset(): what
        left the platform, not what the client read. A write counts as it starts (a client
        that has read a body always finds it counted) and is taken back if it fails."""
        _check_route(route)
        with self._lock:
            return self._bytes_sent[route]

    def open_streams(self) -> int:
        """Streamed (Drip, GzipBomb, HugeBody) answers still being written."""
        with self._lock:
            return self._open_streams

    @property
    def last_heartbeat(self) -> dict[str, Any] | None:
        with self._lock:
            return self._last_heartbeat

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "requests": self._request_count,
                "records_received": self._record_count,
                # Each record as JSON, as the agent encoded it (before the batch's gzip).
                "record_bytes_received": self._record_bytes,
                "unique_record_ids": len(self._record_ids),
                "events_received": self._event_count,
            }

    # serving (called from the connection threads) --------------------------------------

    def _serve(self, incoming: _Incoming) -> tuple[str | None, _Reply]:
        """The route (for counting bytes sent) and the reply."""
        route, cluster_id, template_id = _match(incoming.method, incoming.path)
        if route is not None and route.startswith("_sandbox/"):
            return route, self._sandbox_reply(route)
        try:
            reply = self._answer(incoming, route, cluster_id, template_id)
        except _Refusal as refusal:
            reply = _error_reply(refusal.status, refusal.message)
        except Exception:
            # A bug in the fake must be loud, but the client still deserves an answer.
            traceback.print_exc()
            reply = _error_reply(500, "the fake platform failed; see its stderr")
        self._record(incoming, route, reply)
        return route, reply

    def _answer(
        self,
        incoming: _Incoming,
        route: str | None,
        cluster_id: str | None,
        template_id: str | None,
    ) -> _Reply:
        if route is None:
            raise _Refusal(404, "no such endpoint")
        if route == "method":
            raise _Refusal(405, f"{incoming.method} is not allowed here")
        fault, cancelled = self._next_fault(route)
        if isinstance(fault, Delay):
            time.sleep(fault.seconds)
        elif isinstance(fault, Status):
            return _fault_reply(fault)
        elif isinstance(fault, Redirect):
            body = _encode({"error": f"moved to {fault.location}"})
            return _Reply(fault.code, body, (("Location", fault.location),))
        elif isinstance(fault, _Streamed):
            return _Reply(200, b"", stream=fault, cancelled=cancelled)
        elif isinstance(fault, Drop):
            if fault.apply:
                with contextlib.suppress(_Refusal):
                    self._authorized_answer(incoming, route, cluster_id, template_id)
            return _DROPPED
        return self._authorized_answer(incoming, route, cluster_id, template_id)

    def _next_fault(self, route: str) -> tuple[Fault | None, threading.Event]:
        """The fault for this request, and the event that a reset() after it will set."""
        with self._lock:
            script = self._scripts[route]
            fault = script.popleft() if script else self._persistent.get(route)
            return fault, self._cancel_streams

    def _authorized_answer(
        self,
        incoming: _Incoming,
        route: str,
        cluster_id: str | None,
        template_id: str | None,
    ) -> _Reply:
        token, headers = self.token, incoming.headers
        if (
            headers.get("x-cluster-token") != token
            or headers.get("authorization") != f"Bearer {token}"
        ):
            return _error_reply(
                401, "missing or wrong cluster token", ("WWW-Authenticate", "Bearer")
            )
        if cluster_id != self.cluster_id:
            raise _Refusal(404, f"unknown cluster {cluster_id!r}")
        if route == "templates":
            with self._lock:
                return _json_reply(200, {"templates": self._templates})
        if route == "actions":
            with self._lock:
                return _json_reply(200, {"actions": self._actions.get(template_id or "", [])})
        if incoming.body_error is not None:
            raise incoming.body_error
        return self._accept_post(route, headers.get("idempotency-key"), incoming.body)

    def _accept_post(self, route: str, idempotency_key: str | None, body: bytes) -> _Reply:
        doc = self._decode_document(body)
        if route == "records":
            if not isinstance(doc.get("batch_id"), str) or not doc["batch_id"]:
                raise _bad("batch_id must be a non-empty string")
            checked = [_check_record(i, r) for i, r in enumerate(_list_field(doc, "records"))]
            self._refuse_rejected([item.record for item in checked], "record")
            apply: Callable[[Any], _Reply] = self._apply_records
            payload: Any = checked
        elif route == "events":
            payload = [_check_event(i, e) for i, e in enumerate(_list_field(doc, "events"))]
            self._refuse_rejected(payload, "event")
            apply = self._apply_events
        else:
            payload = doc
            apply = self._apply_heartbeat
        with self._lock:
            # Check, apply and remember under one lock, so two racing retries of a batch
            # cannot both be applied.
            if idempotency_key is not None and (route, idempotency_key) in self._accepted_keys:
                return _error_reply(409, "this Idempotency-Key was already accepted")
            reply = apply(payload)
            if idempotency_key is not None:
                self._accepted_keys.add((route, idempotency_key))
            return reply

    def _decode_document(self, body: bytes) -> dict[str, Any]:
        try:
            doc = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise _bad(f"body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise _bad("body must be a JSON object")
        for name, expected in (("project_id", self.project_id), ("cluster_id", self.cluster_id)):
            if doc.get(name) != expected:
                raise _bad(f"{name} must be {expected!r}, got {doc.get(name)!r}")
        return doc

    def _refuse_rejected(self, items: list[dict[str, Any]], what: str) -> None:
        reject = self.reject_record
        if reject is None:
            return
        for index, item in enumerate(items):
            if reject(item):
                raise _Refusal(422, f"{what} {index} ({item.get('id')!r}) was rejected")

    # applying (always under self._lock) ------------------------------------------------

    def _apply_records(self, checked: list[_CheckedRecord]) -> _Reply:
        self._record_count += len(checked)
        self._record_bytes += sum(len(_encode(item.record)) for item in checked)
        self._record_ids.update(item.record["id"] for item in checked)
        if self.history:
            for item in checked:
                self._received_records.append(item.record)
                self._apply_record(item)
        return _json_reply(200, {"accepted": len(checked)})

    def _apply_record(self, item: _CheckedRecord) -> None:
        record = item.record
        slot = (record["kind"], record["key"])
        if record["op"] == "upsert":
            self._upsert(slot, record, item.observed_at)
        elif record["op"] == "delete":
            self._delete(slot, item.observed_at)
        elif item.snapshot is not None:
            self._snapshot_part(item.snapshot)

    # Equal observed_at (timestamps have whole seconds) goes to the later arrival, so an
    # object created and deleted within one second ends up deleted, and vice versa.
    def _upsert(self, slot: tuple[str, str], record: dict[str, Any], observed: datetime) -> None:
        deleted_at = self._deleted_at.get(slot)
        if deleted_at is not None and observed < deleted_at:
            return
        kept = self._view.get(slot)
        if kept is not None and observed < kept[0]:
            return
        self._deleted_at.pop(slot, None)
        self._view[slot] = (observed, record)

    def _delete(self, slot: tuple[str, str], observed: datetime) -> None:
        kept = self._view.get(slot)
        if kept is not None and observed >= kept[0]:
            del self._view[slot]
        self._remember_deletion(slot, observed)

    def _remember_deletion(self, slot: tuple[str, str], at: datetime) -> None:
        # Remembered so that an older upsert arriving late cannot bring the object back.
        previous = self._deleted_at.get(slot)
        if previous is None or at > previous:
            self._deleted_at[slot] = at

    def _snapshot_part(self, part: _SnapshotPart) -> None:
        progress = self._snapshots.get(part.snapshot_id)
        if progress is None:
            progress = _SnapshotProgress(part.of, part.parts, part.listed_at)
            self._snapshots[part.snapshot_id] = progress
        progress.seen.add(part.part)
        progress.keys.update(part.keys)
        if len(progress.seen) < progress.parts:
            return
        for slot, (observed, _) in list(self._view.items()):
            kind, key = slot
            if kind == progress.of and key not in progress.keys and observed < progress.listed_at:
                del self._view[slot]
                self._remember_deletion(slot, progress.listed_at)

    def _apply_events(self, events: list[dict[str, Any]]) -> _Reply:
        self._event_count += len(events)
        if self.history:
            self._received_events.extend(events)
            for event in events:
                self._events.setdefault(event["id"], event)
        return _json_reply(200, {"accepted": len(events)})

    def _apply_heartbeat(self, doc: dict[str, Any]) -> _Reply:
        self._last_heartbeat = doc
        return _json_reply(200, self.heartbeat_answer)

    # bookkeeping -----------------------------------------------------------------------

    def _end_streams(self) -> None:
        # Under self._lock (or in __init__).
        self._cancel_streams.set()
        self._cancel_streams = threading.Event()

    def _count_sent(self, route: str, size: int, cancelled: threading.Event | None) -> None:
        """Add `size` (negative: take back a failed write) to the body bytes of `route`."""
        with self._lock:
            # A stream cut by reset() must not count into the next test's numbers.
            if route in ROUTES and not (cancelled is not None and cancelled.is_set()):
                self._bytes_sent[route] += size

    def _stream_opened(self, change: int) -> None:
        with self._lock:
            self._open_streams += change

    def _record(self, incoming: _Incoming, route: str | None, reply: _Reply) -> None:
        status = None if reply is _DROPPED else reply.status
        with self._lock:
            self._request_count += 1
            if self.history:
                self._requests.append(
                    RecordedRequest(
                        method=incoming.method,
                        path=incoming.path,
                        route=route if route in ROUTES else None,
                        headers=incoming.headers,
                        raw_body=incoming.raw,
                        body=incoming.body,
                        status=status,
                        time=incoming.arrived,
                    )
                )

    def _sandbox_reply(self, route: str) -> _Reply:
        if route == "_sandbox/stats":
            return _json_reply(200, self.stats())
        return _json_reply(200, {"objects": list(self.view().values())})


def _check_route(route: str) -> None:
    if route not in ROUTES:
        raise ValueError(f"unknown route {route!r}; one of {', '.join(ROUTES)}")


def _list_field(doc: dict[str, Any], name: str) -> list[Any]:
    value = doc.get(name)
    if not isinstance(value, list):
        raise _bad(f"{name} must be a list")
    return value


def _fault_reply(fault: Status) -> _Reply:
    headers: tuple[tuple[str, str], ...] = ()
    if fault.retry_after is not None:
        headers = (("Retry-After", str(fault.retry_after)),)
    if fault.body is None:
        body = _encode({"error": f"scripted {fault.code}"})
    elif isinstance(fault.body, str):
        body = fault.body.encode()
    else:
        body = fault.body
    return _Reply(fault.code, body, headers)


# --- HTTP plumbing ----------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the agent's connection pool expects
    server_version = "fake-moonin/1"
    sys_version = ""
    disable_nagle_algorithm = True
    wbufsize = -1  # buffered: status line, headers and body leave in one write
    server: _Server

    def setup(self) -> None:
        # The TLS handshake runs here, in the connection's thread, not in the accept loop.
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        super().setup()

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _dispatch(self) -> None:
        arrived = time.monotonic()
        raw = self._read_body()
        if raw is None:
            return
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            name = name.lower()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        platform = self.server.platform
        incoming = _Incoming.read(
            self.command, self.path, headers, raw, arrived, platform.max_body_bytes
        )
        route, reply = platform._serve(incoming)
        if reply is _DROPPED:
            self._drop()
        elif reply.stream is not None:
            self._stream(route or "", reply.stream, reply.cancelled or threading.Event())
        else:
            self._write(reply, route or "")

    def _read_body(self) -> bytes | None:
        try:
            return read_request_body(self)
        except InvalidLength:
            self.close_connection = True
            self._write(_error_reply(400, "invalid Content-Length"), "")
            return None

    def _write(self, reply: _Reply, route: str) -> None:
        self.send_response(reply.status)
        for name, value in reply.headers:
            self.send_header(name, value)
        has_body = reply.status >= 200 and reply.status not in (204, 304)
        body = reply.body if has_body else b""
        if has_body:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        platform = self.server.platform
        platform._count_sent(route, len(body), None)
        try:
            self.wfile.write(body)
            self.wfile.flush()  # here, so that a failed write is known and not counted
        except OSError:
            platform._count_sent(route, -len(body), None)
            raise

    # Streamed answers go straight to the socket, unbuffered, so a byte written is a byte
    # sent, and a client that left surfaces as an OSError at the write that follows.

    def _stream(self, route: str, fault: _Streamed, cancelled: threading.Event) -> None:
        platform = self.server.platform
        platform._stream_opened(1)
        try:
            if isinstance(fault, Drip):
                self._drip(route, fault, cancelled)
            elif isinstance(fault, GzipBomb):
                bomb = _gzip_bomb(fault.inflated)
                head = self._head(("Content-Encoding", "gzip"), ("Content-Length", str(len(bomb))))
                self._send(head, "", cancelled)
                view = memoryview(bomb)
                for start in range(0, len(bomb), _CHUNK):
                    self._send(view[start : start + _CHUNK], route, cancelled)
            else:
                self._send(self._head(("Content-Length", str(fault.size))), "", cancelled)
                for chunk in _padded_json(fault.size):
                    self._send(chunk, route, cancelled)
        except (OSError, _StreamEnded):
            # The client went away, or reset()/down() ended the answer: neither is an error
            # of the fake, and the half-sent answer leaves the connection unusable.
            self.close_connection = True
        finally:
            platform._stream_opened(-1)

    def _drip(self, route: str, fault: Drip, cancelled: threading.Event) -> None:
        if fault.body is None:
            self.close_connection = True  # the body ends only with the connection
            head = self._head(("Connection", "close"))
            body: Iterator[int] = itertools.chain(_JSON_PREFIX, itertools.repeat(ord(" ")))
        else:
            head = self._head(("Content-Length", str(len(fault.body))))
            body = iter(fault.body)
        if fault.headers:
            for byte in head:
                self._pause(fault.every, cancelled)
                self._send(bytes((byte,)), "", cancelled)
        else:
            self._send(head, "", cancelled)
        for byte in body:
            self._pause(fault.every, cancelled)
            self._send(bytes((byte,)), route, cancelled)

    def _head(self, *headers: tuple[str, str]) -> bytes:
        """A 200's status line and headers, as bytes to send (or drip) by hand."""
        lines = [
            f"{self.protocol_version} 200 OK",
            f"Server: {self.server_version}",
            f"Date: {self.date_time_string()}",
            "Content-Type: application/json",
            *(f"{name}: {value}" for name, value in headers),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send(self, data: bytes | memoryview, route: str, cancelled: threading.Event) -> None:
        """Write `data`, counted as body bytes of `route` (not when route is "")."""
        if cancelled.is_set():
            raise _StreamEnded
        count = self.server.platform._count_sent
        count(route, len(data), cancelled)
        try:
            self.connection.sendall(data)
        except OSError:
            count(route, -len(data), cancelled)
            raise

    @staticmethod
    def _pause(seconds: float, cancelled: threading.Event) -> None:
        if cancelled.wait(seconds):
            raise _StreamEnded

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # benchmarks push 10^5 requests; a line each would be the bottleneck


class _StreamEnded(Exception):
    """reset() or down() ended a streamed answer part way."""


class _Server(LoopbackServer):
    def __init__(
        self, port: int, platform: FakePlatform, ssl_context: ssl.SSLContext | None
    ) -> None:
        self.platform = platform
        self.ssl_context = ssl_context
        super().__init__(port, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = self.socket.accept()
        if self.ssl_context is not None:
            connection = self.ssl_context.wrap_socket(
                connection, server_side=True, do_handshake_on_connect=False
            )
        return connection, address


# --- subprocess mode --------------------------------------------------------------------


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox.platform",
        description="Serve the fake Moonin API on 127.0.0.1 until SIGTERM or SIGINT.",
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token", default="test-token")
    parser.add_argument("--cluster-id", default="c-1")
    parser.add_argument("--project-id", default="p-1")
    parser.add_argument(
        "--ca-bundle", help="serve HTTPS with a throw-away CA and write its PEM to this file"
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help="keep every request and the platform view (GET /_sandbox/view), not only counts",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    tls = None
    if args.ca_bundle:
        from sandbox.tls import TLSAuthority  # trustme is only needed for HTTPS

        tls = TLSAuthority()
        tls.write_ca_bundle(args.ca_bundle)
    platform = FakePlatform(
        token=args.token,
        project_id=args.project_id,
        cluster_id=args.cluster_id,
        tls=tls,
        port=args.port,
        history=args.history,
    )
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    # Blocked before any thread starts, so every thread inherits the mask and sigwait below
    # is the only place these signals land.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    platform.start()
    print(f"URL {platform.url}", flush=True)
    signal.sigwait(stop_signals)
    platform.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
