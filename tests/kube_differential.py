"""Playing one corpus case (`tests.kube_corpus`) against a Kubernetes API server over HTTP,
and the answers in a form two servers can be compared in.

A `Server` is what the runner needs of either side: a base URL, an HTTP client trusting
it, the tokens a case may act with, and how to compact its history. `play` makes the
case's setup requests (each must succeed), then its compared requests, and returns one
`Answer` per compared request, normalised: uids, timestamps, generated names and continue
tokens become placeholders, and every resourceVersion becomes its ordinal in order of
appearance in this case's answers (`rv1`, `rv2`, ...), so two servers whose counters
started apart still give equal answers. `differences` lists the paths where two
normalised answers differ, one line each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.kube_corpus import COMPACT, Case, Request

# What a token name in the corpus stands for on a server (None: no Authorization header).
Tokens = Mapping[str, str | None]
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
_AGE = re.compile(r"^\d+(s|m)$")
_PLACEHOLDER = re.compile(r"\{(ns|rv|first_rv|future_rv|uid|continue)\}")


@dataclass
class Server:
    """One side of the comparison: `client` reaches it (no Authorization of its own),
    `tokens` say who each corpus token is, `compact` drops its history up to now."""

    name: str
    client: httpx.Client
    tokens: Tokens
    compact: Callable[[], object]


@dataclass
class Answer:
    """One request's answer: status code, `Warning` headers, and the body normalised (a
    JSON value, the text of a text answer, or the events a watch sent)."""

    status: int
    warnings: list[str]
    body: Any


@dataclass
class _Context:
    """What a case's later requests may name: `{ns}`, `{rv}` (the last resourceVersion an
    answer gave), `{first_rv}`, `{future_rv}`, `{uid}`; and the resourceVersion ordinals."""

    values: dict[str, str]
    ordinals: dict[str, str] = field(default_factory=dict)

    def fill(self, value: Any) -> Any:
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda match: self.values[match.group(1)], value)
        if isinstance(value, dict):
            return {self.fill(key): self.fill(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.fill(item) for item in value]
        return value

    def remember(self, body: Any) -> None:
        meta = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(meta, dict) or not meta.get("resourceVersion"):
            return
        rv = str(meta["resourceVersion"])
        self.values.setdefault("first_rv", rv)
        self.values["rv"] = rv
        self.values["future_rv"] = str(int(rv) + 1_000_000)
        if meta.get("continue"):
            self.values["continue"] = str(meta["continue"])
        if meta.get("uid"):
            self.values["uid"] = str(meta["uid"])

    def ordinal(self, rv: str) -> str:
        if not rv:
            return rv
        return self.ordinals.setdefault(rv, f"rv{len(self.ordinals) + 1}")


def play(server: Server, case: Case, namespace: str) -> list[Answer]:
    context = _Context({"ns": namespace})
    for step in case.setup:
        if step is COMPACT:
            server.compact()
            continue
        status, _, body = _send(server, step, context)
        if status >= 300:
            raise AssertionError(f"{server.name}: setup {step.method} {step.path}: {status} {body}")
        context.remember(body)
        _normal(body, context, ())  # its resourceVersions take the first ordinals
    answers = []
    for request in case.requests:
        if request is COMPACT:
            server.compact()
            continue
        status, warnings, body = _send(server, request, context)
        context.remember(body)
        if request.keys_only and isinstance(body, dict):
            body = sorted(body)
        answers.append(Answer(status, warnings, _normal(body, context, request.ignore)))
    return answers


def cleanup(server: Server, case: Case, namespace: str) -> None:
    """Delete what a cluster-scoped case made (whatever is already gone stays gone)."""
    context = _Context({"ns": namespace})
    for path in case.cleanup:
        server.client.delete(context.fill(path), headers=_auth(server, "admin"))


def _auth(server: Server, token: str) -> dict[str, str]:
    value = server.tokens[token]
    return {"Authorization": f"Bearer {value}"} if value is not None else {}


def _send(server: Server, request: Request, context: _Context) -> tuple[int, list[str], Any]:
    headers = _auth(server, request.token)
    if request.content_type:
        headers["Content-Type"] = request.content_type
    if request.accept:
        headers["Accept"] = request.accept
    body = request.body
    content: bytes | None = None
    if isinstance(body, str):
        content = context.fill(body).encode()
    elif body is not None:
        content = json.dumps(context.fill(body)).encode()
    path = context.fill(request.path)
    params = context.fill(dict(request.query))
    if request.watch_events is not None:
        return _watch(server, request, path, params, headers)
    answer = server.client.request(
        request.method, path, params=params, content=content, headers=headers
    )
    return answer.status_code, _warnings(answer), _decoded(answer)


def _watch(
    server: Server, request: Request, path: str, params: dict[str, str], headers: dict[str, str]
) -> tuple[int, list[str], Any]:
    """A bounded read of a watch: its events until `watch_events` of them that are compared
    (every event but periodic bookmarks) came, or the stream ended."""
    with server.client.stream("GET", path, params=params, headers=headers) as answer:
        if answer.status_code != 200:
            answer.read()
            return answer.status_code, _warnings(answer), _decoded(answer)
        events: list[Any] = []
        for line in answer.iter_lines():
            if not line.strip():
                continue
            event = json.loads(line)
            if _compared(event):
                events.append(event)
            if len(events) >= (request.watch_events or 0) > 0:
                break
        return 200, _warnings(answer), {"events": events}


def _compared(event: Mapping[str, Any]) -> bool:
    """Bookmarks come on a timer, at moments no two servers share; only the one that ends
    the initial events of a streaming list is part of what a watch answers."""
    if event.get("type") != "BOOKMARK":
        return True
    annotations = (event.get("object") or {}).get("metadata", {}).get("annotations") or {}
    return annotations.get(INITIAL_EVENTS_END) == "true"


def _warnings(answer: httpx.Response) -> list[str]:
    return answer.headers.get_list("Warning")


def _decoded(answer: httpx.Response) -> Any:
    try:
        return answer.json()
    except ValueError:
        return answer.text


# -- normalising ----------------------------------------------------------------------------


def _normal(body: Any, context: _Context, ignore: tuple[str, ...]) -> Any:
    if isinstance(body, dict) and body.get("kind") == "Status" and "code" in body:
        return _status(body, context)
    if isinstance(body, dict) and isinstance(body.get("events"), list):
        return {"events": [_event(event, context, ignore) for event in body["events"]]}
    if isinstance(body, dict) and ("items" in body or "rows" in body):
        return _collection(body, context, ignore)
    return _values(body, context, (), frozenset(ignore))


def _event(event: dict[str, Any], context: _Context, ignore: tuple[str, ...]) -> Any:
    if event.get("type") == "BOOKMARK":
        return {"type": "BOOKMARK", "object": _collection(event["object"], context, ignore)}
    return {"type": event.get("type"), "object": _normal(event.get("object"), context, ignore)}


def _collection(body: dict[str, Any], context: _Context, ignore: tuple[str, ...]) -> Any:
    """A list, table or bookmark: its resourceVersion is the server's at that moment, which
    is `<latest>` when no object of the case is newer (on a real server other writes move
    it on; the fake's is often the last object's own)."""
    meta = dict(body.get("metadata") or {})
    rv = str(meta.pop("resourceVersion", "") or "")
    normal = _values({**body, "metadata": meta}, context, (), frozenset(ignore))
    if rv:
        latest = int(rv) >= _newest(context)
        normal["metadata"]["resourceVersion"] = "<latest>" if latest else context.ordinal(rv)
    return normal


def _newest(context: _Context) -> int:
    return max((int(seen) for seen in context.ordinals), default=0)


def _status(body: Mapping[str, Any], context: _Context) -> dict[str, Any]:
    kept = {key: body.get(key) for key in ("status", "reason", "code", "details")}
    kept["message"] = _message(str(body.get("message", "")), context)
    details = kept["details"]
    if isinstance(details, dict) and "uid" in details:
        details = dict(details, uid="<uid>")
    kept["details"] = details
    return kept


def _message(message: str, context: _Context) -> str:
    """Resource versions named in a message become their ordinals, or `<latest>` when no
    object of the case is newer (a server's current version); other numbers past 99 (a
    revision the case never saw, a year) become `<number>`."""
    message = message.replace(context.values.get("uid", "\0"), "<uid>")
    newest = _newest(context)

    def version(match: re.Match[str]) -> str:
        number = match.group(0)
        if newest and int(number) >= newest:
            return "<latest>"
        return context.ordinals.get(number) or ("<number>" if int(number) > 99 else number)

    return re.sub(r"\d+", version, message)


def _values(value: Any, context: _Context, path: tuple[str, ...], ignore: frozenset[str]) -> Any:
    if isinstance(value, dict):
        kept = {}
        prefix = value.get("generateName")
        if isinstance(prefix, str) and str(value.get("name", "")).startswith(prefix):
            value = {**value, "name": f"{prefix}<generated>"}
        for key, item in value.items():
            at = (*path, key)
            if ".".join(step for step in at if step != "[]") in ignore:
                continue
            kept[key] = _value(key, item, context, at, ignore)
        return kept
    if isinstance(value, list):
        return [_values(item, context, (*path, "[]"), ignore) for item in value]
    if isinstance(value, str) and _TIME.match(value):
        return "<time>"
    if isinstance(value, str) and path and path[-1] == "cells[]" and _AGE.match(value):
        return "<age>"
    return value


def _value(
    key: str, item: Any, context: _Context, at: tuple[str, ...], ignore: frozenset[str]
) -> Any:
    if key == "resourceVersion" and isinstance(item, str):
        return context.ordinal(item)
    if key == "uid" and isinstance(item, str):
        return "<uid>"
    if key == "continue" and isinstance(item, str) and item:
        return "<continue>"
    if key == "fieldsV1":
        return "<fields>"
    return _values(item, context, at, ignore)


# -- comparing ------------------------------------------------------------------------------


def differences(real: Any, fake: Any, path: str = "") -> list[str]:
    """Where two normalised values differ, one readable line per path."""
    if isinstance(real, dict) and isinstance(fake, dict):
        found: list[str] = []
        for key in [*real, *(key for key in fake if key not in real)]:
            at = f"{path}.{key}" if path else str(key)
            if key not in fake:
                found.append(f"{at}: real {_short(real[key])}, fake has none")
            elif key not in real:
                found.append(f"{at}: fake {_short(fake[key])}, real has none")
            else:
                found += differences(real[key], fake[key], at)
        return found
    if isinstance(real, list) and isinstance(fake, list) and len(real) == len(fake):
        return [
            line
            for i, pair in enumerate(zip(real, fake, strict=True))
            for line in differences(*pair, f"{path}[{i}]")
        ]
    if real != fake:
        return [f"{path or '.'}: real {_short(real)}, fake {_short(fake)}"]
    return []


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 300 else text[:300] + "..."
