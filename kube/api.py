"""The one Kubernetes client of every role, command and hook: httpx, raw bytes in and out.

Discovery's informers decode list pages and watch events themselves with msgspec, the
scaling role decodes the few objects it reads the same way (`kube.pages` lists, its own
typed reads), so all this layer does is build requests, stream watch lines and turn
failures into `kube.errors`, translated in exactly one place (`_translate`, with
`_status_error` for an answer's status). A caller may name a call (`what`: "patch
horizontalpodautoscaler shop/web"); errors then say that instead of the method and path.

Writes are strictly validated and may carry a field manager or a dry run
(`kube.writes.WriteOptions`); a patch is a JSON merge patch, a delete may carry uid and
resourceVersion preconditions (`kube.writes.Preconditions`).
Nothing is retried here: a 429 or a 503 is an error at once, so a loop gives up and tries
again on its own schedule instead of stalling inside a call.

Plain requests (lists, gets, writes) have a total deadline (`deadline_seconds`, or one given
per call; `runtime.deadline`), so a hung API server or a proxy that answers one byte at a time
ends them as a `KubeError`. Watches are long-lived by design and keep their own rule: a read
timeout between two chunks.

Memory: no answer is held past a byte bound, counted after decompression (`runtime.bounded`):
`max_bytes` per call (an informer's list page), else `ANSWER_LIMIT`; a watch event likewise.
Watches are asked for without compression, so their lines are split from the bytes as sent.
Every event the server sends ends with a newline, so a stream that ends inside a line (the
body ended cleanly, but mid-event) was cut short: a `KubeError` without a status, as for a
dropped connection, never a half line handed on to be decoded as an object.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import httpx
import msgspec

from kube import errors
from kube.cluster import KubeTarget
from kube.errors import AnswerTooLarge, KubeError, TimedOut
from kube.permission import of_request
from kube.writes import APPLY_PATCH, MERGE_PATCH, STRICT, Preconditions, WriteOptions
from runtime import backoff, deadline
from runtime.bounded import ACCEPT_ENCODING, UndecodableAnswer, describe_size, read_bounded
from runtime.bounded import AnswerTooLarge as _OverLimit
from runtime.version import VERSION

_ERROR_BODY_BYTES = 64 * 1024  # an error's Status is a few hundred bytes
# kube-apiserver ends a request its handler has not answered within a minute
# (`--request-timeout`); waiting longer than that only means something in between hangs.
DEADLINE_SECONDS = 60.0
# etcd refuses values over 1.5 MiB unless configured otherwise, so one object (an answer to a
# GET, a watch event, a list page of one) stays far below this; past it something is wrong.
ANSWER_LIMIT = 16 * 1024 * 1024

T = TypeVar("T")
Encoded = TypeVar("Encoded", bound=bytes | bytearray | msgspec.Raw)


class KubeApi:
    """One keep-alive connection pool to the API server; thread-safe."""

    def __init__(
        self,
        target: KubeTarget,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        deadline_seconds: float = DEADLINE_SECONDS,
    ) -> None:
        if deadline_seconds <= 0:
            raise ValueError("the deadline must be positive")
        self.target = target
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self.deadline_seconds = deadline_seconds
        self._client = httpx.Client(
            base_url=target.server,
            verify=target.verify,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            headers={
                "User-Agent": f"moonin-agent/{VERSION}",
                "Accept": "application/json",
                "Accept-Encoding": ACCEPT_ENCODING,
            },
            # The API server is reached directly; a proxy meant for Moonin must not apply.
            trust_env=False,
        )
        deadline.guard_client(self._client)
        self._open_streams: set[httpx.Response] = set()
        self._aborted_streams: set[httpx.Response] = set()  # marked before their socket goes
        self._streams_lock = threading.Lock()

    def close(self) -> None:
        self.abort_streams()
        self._client.close()

    # -- plain requests ----------------------------------------------------------------

    # `within`: this call's deadline in seconds, instead of `deadline_seconds`.
    # `max_bytes`: the most the answer may hold once decompressed, instead of ANSWER_LIMIT.
    # `accept`: the media type asked for (metadata only, for instance).

    def get(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        within: float | None = None,
        max_bytes: int = ANSWER_LIMIT,
        accept: str | None = None,
        what: str | None = None,
    ) -> bytes | bytearray:
        return self._send(
            "GET",
            path,
            params=params,
            within=within,
            max_bytes=max_bytes,
            accept=accept,
            what=what,
        )

    def post(
        self,
        path: str,
        body: Any,
        *,
        options: WriteOptions = STRICT,
        within: float | None = None,
        what: str | None = None,
    ) -> bytes | bytearray:
        return self._send(
            "POST", path, params=options.params(), json_body=body, within=within, what=what
        )

    def put(
        self,
        path: str,
        body: Any,
        *,
        options: WriteOptions = STRICT,
        within: float | None = None,
        what: str | None = None,
    ) -> bytes | bytearray:
        return self._send(
            "PUT", path, params=options.params(), json_body=body, within=within, what=what
        )

    def patch(
        self,
        path: str,
        patch: Any,
        *,
        options: WriteOptions = STRICT,
        within: float | None = None,
        what: str | None = None,
    ) -> bytes | bytearray:
        """A JSON merge patch (RFC 7386: the keys given replace, a null removes). A
        resourceVersion in the patch's metadata is a precondition: a change since it was read
        is a `Conflict`."""
        return self._patch(path, patch, MERGE_PATCH, options, within, what)

    def apply(
        self,
        path: str,
        config: Any,
        *,
        options: WriteOptions,
        within: float | None = None,
        what: str | None = None,
    ) -> bytes | bytearray:
        """A server-side apply of `config` (apiVersion, kind, metadata and the fields the
        manager wants to own) under `options.field_manager`, which it requires. The fields it
        applied before and leaves out now are removed unless another manager owns them; a
        resourceVersion in the config's metadata is a precondition, as in `patch`."""
        if not options.field_manager:
            raise ValueError("a server-side apply needs a field manager")
        return self._patch(path, config, APPLY_PATCH, options, within, what)

    def delete(
        self,
        path: str,
        *,
        preconditions: Preconditions | None = None,
        options: WriteOptions = STRICT,
        within: float | None = None,
        what: str | None = None,
    ) -> bytes | bytearray:
        """Delete the object at `path`; with `preconditions`, only if it is still the very
        object that was read (else a `Conflict`)."""
        body = options.delete_body(preconditions)
        return self._send(
            "DELETE", path, params=options.delete_params(), json_body=body, within=within, what=what
        )

    # -- watch streams -----------------------------------------------------------------

    @contextmanager
    def stream_lines(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        read_timeout: float,
        cancelled: Callable[[], bool] = lambda: False,
        accept: str | None = None,
    ) -> Iterator[Iterator[bytes]]:
        """A watch: yields an iterator of newline-delimited JSON events.

        `read_timeout` bounds the silence between two chunks, so a stalled watch ends with
        a `KubeError` instead of hanging. `abort_streams()` ends it from another thread;
        `cancelled` closes the gap where an abort arrives while the stream is being opened.
        An event longer than ANSWER_LIMIT ends it with `AnswerTooLarge`.
        """
        headers = self._auth()
        headers["Accept-Encoding"] = "identity"
        if accept is not None:
            headers["Accept"] = accept
        request = self._client.build_request(
            "GET",
            path,
            params=dict(params),
            headers=headers,
            timeout=httpx.Timeout(self._timeout, connect=self._connect_timeout, read=read_timeout),
        )
        try:
            response = self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _translate(exc, f"GET {path}") from exc
        with self._streams_lock:
            self._open_streams.add(response)
        try:
            if cancelled():
                raise errors.Aborted(f"GET {path}: cancelled")
            if response.status_code >= 300:
                raise self._error(response, path, f"GET {path}")
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise KubeError(f"GET {path}: a watch sent with Content-Encoding {encoding[:40]!r}")
            yield _lines(response, path, aborted=lambda: response in self._aborted_streams)
        finally:
            with self._streams_lock:
                self._open_streams.discard(response)
                self._aborted_streams.discard(response)
            response.close()

    def abort_streams(self, path: str | None = None) -> None:
        """End every open watch, or those of one `path` (stop, leadership lost, a relist
        wanted): their readers raise `Aborted` at once. Closing the response alone would
        leave a reader blocked in `recv` until the next byte or its read timeout, and
        closing it from here could hand the reader another connection's descriptor;
        shutting the socket down wakes it."""
        with self._streams_lock:
            streams = [
                response
                for response in self._open_streams
                if path is None or response.request.url.path == path
            ]
            self._aborted_streams.update(streams)
        for response in streams:
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                # The reader wakes and closes the response on its own thread.
                deadline.shut_down(sock)
            else:
                response.close()

    # -- internals ---------------------------------------------------------------------

    def _patch(
        self,
        path: str,
        body: Any,
        content_type: str,
        options: WriteOptions,
        within: float | None,
        what: str | None,
    ) -> bytes | bytearray:
        return self._send(
            "PATCH",
            path,
            params=options.params(),
            json_body=body,
            content_type=content_type,
            within=within,
            what=what,
        )

    def _error(self, response: httpx.Response, path: str, what: str) -> KubeError:
        if response.status_code == 401:
            # A revoked token: a rotated one may be in its file already.
            self.target.token_rejected()
        return _status_error(response, _error_body(response), path, what)

    def _auth(self) -> dict[str, str]:
        token = self.target.token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        within: float | None = None,
        max_bytes: int = ANSWER_LIMIT,
        accept: str | None = None,
        content_type: str = "application/json",
        what: str | None = None,
    ) -> bytes | bytearray:
        # `what` names the call in errors (and so in the events that carry them).
        what = what or f"{method} {path}"
        headers = self._auth()
        if accept is not None:
            headers["Accept"] = accept
        content = None
        if json_body is not None:
            content = msgspec.json.encode(json_body)
            headers["Content-Type"] = content_type
        request = self._client.build_request(
            method, path, params=params, content=content, headers=headers
        )
        with deadline.within(self.deadline_seconds if within is None else within) as limit:
            try:
                response = self._client.send(request, stream=True)
                try:
                    if response.status_code >= 300:
                        raise self._error(response, path, what)
                    body = read_bounded(response, max_bytes)
                finally:
                    limit.release()  # back to the pool: the deadline must not follow it
                    response.close()
                if limit.interrupted:
                    raise KubeError(f"{what}: {limit.missed()}")
                return body
            except _OverLimit as exc:
                raise AnswerTooLarge(
                    f"{what}: the answer is over {describe_size(exc.limit)}",
                    limit=exc.limit,
                ) from None
            except UndecodableAnswer as exc:
                raise KubeError(f"{what}: {exc}") from None
            except httpx.HTTPError as exc:
                if limit.expired:
                    raise KubeError(f"{what}: {limit.missed()}") from exc
                raise _translate(exc, what) from exc


def decoded(decode: Callable[[Encoded], T], answer: Encoded, what: str) -> T:
    """`answer` decoded with msgspec's `decode`; an answer that is not what the call returns
    (a proxy's HTML page, a cut body) is a `KubeError` naming the call."""
    try:
        return decode(answer)
    except msgspec.DecodeError as exc:  # a ValidationError too
        raise KubeError(f"{what}: an answer that cannot be read: {exc}") from None


def _lines(response: httpx.Response, path: str, *, aborted: Callable[[], bool]) -> Iterator[bytes]:
    try:
        yield from _split_lines(response.iter_raw(), path)
    except AnswerTooLarge:
        raise
    except Exception as exc:
        if aborted():
            # Ended under the reader by abort_streams(): whatever the transport raised
            # then, it only means "this watch is over".
            raise errors.Aborted(f"GET {path}: aborted") from exc
        if isinstance(exc, httpx.HTTPError | httpx.StreamError):
            raise _translate(exc, f"GET {path}") from exc
        raise


def _split_lines(chunks: Iterator[bytes], path: str) -> Iterator[bytes]:
    """Non-empty lines of a newline-delimited stream; a line is never held past
    ANSWER_LIMIT (one event is one object, so only a broken server gets there), nor handed
    on before its newline (the stream's end inside one is a cut: `KubeError`)."""
    pending = bytearray()
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if pending:
                pending += chunk[start:end]
                line: bytes = bytes(pending)
                pending.clear()
            else:
                line = chunk[start:end]
            if line and not line.isspace():  # no copy of the line to ask
                yield line
            start = end + 1
        pending += chunk[start:]
        if len(pending) > ANSWER_LIMIT:
            raise AnswerTooLarge(
                f"GET {path}: a watch event over {describe_size(ANSWER_LIMIT)}",
                limit=ANSWER_LIMIT,
            )
    if pending and not pending.isspace():
        raise KubeError(f"GET {path}: the stream ended inside an event ({len(pending)} bytes)")


def _translate(exc: Exception, what: str) -> KubeError:
    """The one place where transport failures become KubeErrors."""
    if isinstance(exc, httpx.TimeoutException):
        return TimedOut(f"{what}: timed out ({type(exc).__name__})")
    return KubeError(f"{what}: {type(exc).__name__}: {str(exc)[: errors.MESSAGE_LIMIT]}")


def _error_body(response: httpx.Response) -> bytes:
    """The start of an error answer (its Status), without reading a huge or endless rest."""
    try:
        return bytes(read_bounded(response, _ERROR_BODY_BYTES, cut=True))
    except (httpx.HTTPError, UndecodableAnswer):
        return b""  # the status code is the answer; a garbled body must not hide it


def _status_error(response: httpx.Response, body: bytes, path: str, what: str) -> KubeError:
    """The one place where an answer's status becomes a KubeError."""
    message, reason = errors.status_of(body)
    return errors.for_status(
        response.status_code,
        what,
        f"{reason or response.reason_phrase}: {message}",
        # Named from the request itself: the query says whether a GET was a watch.
        permission=of_request(response.request.method, path, dict(response.request.url.params)),
        reason=reason,
        retry_after=backoff.parse_retry_after(response.headers.get("Retry-After")),
    )
