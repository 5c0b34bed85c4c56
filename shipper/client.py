"""The Moonin API client: the one module that builds Moonin URLs and request bodies.

Everything that talks to the platform (the shipper's delivery loop, the collector's
heartbeat, the scheduler's template reads) goes through `ApiClient`, so the wire contract
(docs/protocol.md) lives in one place: headers, gzip above 1 KiB, body envelopes and what
each status code means.

Record and event bodies are spliced from the bytes already stored in the outbox; they are
never decoded and encoded again. Only the small envelope around them is encoded here.

Every call is bounded twice, so a platform (or a proxy in front of it) that answers badly
cannot hold a thread or the process's memory: by a total deadline (`deadline_seconds`:
connecting, sending and the whole answer; `runtime.deadline`), and by the bytes it reads,
counted after decompression (`runtime.bounded`): `max_answer_bytes` for templates and
actions, `SMALL_ANSWER_BYTES` for the heartbeat's answer and error bodies. A batch of
records or events is delivered once the status line says 2xx: its answer is read only so
the connection can be used again, and a bad one is ignored.

How it fails: construction raises ValueError (`InsecureURLError` for a URL scheme that is
not allowed) for bad settings, before any request; the URL rules are `checked_base_url`,
which the agent's configuration applies at start-up too. A request either returns or raises one
of the `shipper.errors` classes; httpx's own exceptions are translated in one function
(`ApiClient._request`) and chained. Error messages name the method and URL, never the
token, and carry at most a short, redacted piece of the response body.

URLs in messages: an API URL is a scheme, a host, a port and a path prefix; credentials
(user:password@), a query and a fragment are refused (`checked_base_url`). The path prefix
stays out of every message and log line all the same (`shown_url`): some gateways put a
key there, and a retry line is written every few seconds for as long as the API is down.
"""

from __future__ import annotations

import contextlib
import re
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import httpx
import msgspec
from isal import isal_zlib

from runtime import backoff, deadline
from runtime.bounded import (
    ACCEPT_ENCODING,
    AnswerTooLarge,
    UndecodableAnswer,
    describe_size,
    read_bounded,
)
from runtime.version import VERSION
from shipper.errors import (
    AnswerOverLimit,
    CallCancelled,
    CredentialsRejected,
    DeadlineExceeded,
    InsecureURLError,
    MalformedAnswer,
    Misconfigured,
    MooninAPIError,
    RejectedBody,
    RetryLater,
)
from shipper.records import new_id, utc_timestamp
from shipper.token import TokenSource

GZIP_THRESHOLD = 1024  # bytes; the contract gzips every POST body larger than 1 KiB
# The heartbeat's answer is `{}` or `{"resync": true}`; batch answers are not used.
SMALL_ANSWER_BYTES = 64 << 10
# How long an unused answer (after a 2xx on a batch) is read, so the connection can serve
# the next batch; one that takes longer is left, with its connection.
IGNORED_ANSWER_SECONDS = 2.0
BODY_SNIPPET = 500  # characters of an error response kept on the exception

# Enough raw bytes to fill the snippet even with multi-byte characters, and no more:
# an error page can be large, and only its beginning is ever kept.
_SNIPPET_BYTES = BODY_SNIPPET * 4
REDACTED = "[redacted]"
# A body cut inside a token loses the token's start from this many characters on; a
# shorter ending cannot be told from ordinary text, and gives nothing away.
_SHORTEST_TOKEN_PART = 4

# httpx would percent-encode these into a host name that can never resolve.
_BAD_HOST = re.compile(r"[\s\x00-\x1f%]")
_HIDDEN_PATH = "/***"  # a URL's path, in messages
_json = msgspec.json.Encoder()
_T = TypeVar("_T")


class _Templates(msgspec.Struct, gc=False):
    # Elements stay untyped: the scheduler reads each on its own, so one bad element
    # does not hide the others.
    templates: list[Any]


class _Actions(msgspec.Struct, gc=False):
    actions: list[Any]


_TEMPLATES = msgspec.json.Decoder(_Templates)
_ACTIONS = msgspec.json.Decoder(_Actions)
_OBJECT = msgspec.json.Decoder(dict[str, Any])

# Told of every request: (endpoint, status class such as "2xx" or "error", seconds).
RequestObserver = Callable[[str, str, float], None]


@dataclass(frozen=True, kw_only=True)
class ApiSettings:
    """How a client reaches the Moonin APIs; the agent's settings hold one as they are."""

    insecure_http: bool = False
    """Allow plain http:// base URLs (tests and demos only)."""
    ca_bundle: str | None = None
    """PEM file of the CAs to trust instead of the system's."""
    deadline_seconds: float = 30.0
    """Total time of one call: connecting, sending and the whole answer."""
    connect_timeout_seconds: float = 10.0
    """How long connecting (TCP and TLS) may take."""
    read_timeout_seconds: float = 30.0
    """Silence this long while waiting for the answer's next bytes ends the call."""
    max_answer_bytes: int = 8 << 20
    """Bytes a templates or actions answer may have, counted after decompression (a few
    thousand templates fit in a few MiB)."""


DEFAULT_SETTINGS = ApiSettings()


class ApiClient:
    """A keep-alive HTTPS client for one Moonin API (discovery or scaling) and one cluster."""

    def __init__(
        self,
        *,
        base_url: str,
        project_id: str,
        cluster_id: str,
        token: TokenSource,
        settings: ApiSettings = DEFAULT_SETTINGS,
        transport: httpx.BaseTransport | None = None,
        observe: RequestObserver | None = None,
    ) -> None:
        if settings.deadline_seconds <= 0 or settings.max_answer_bytes <= 0:
            raise ValueError("the deadline and the answer limit must be positive")
        try:
            self._base = checked_base_url(base_url, insecure_http=settings.insecure_http)
        except ValueError as e:
            raise type(e)(f"API_URL {shown_url(base_url)}: {e}") from None
        self._shown_base = shown_url(self._base)
        self._deadline_seconds = settings.deadline_seconds
        self._max_answer_bytes = settings.max_answer_bytes
        self._observe = observe
        self._token = token
        self._cluster_path = f"/v1/clusters/{_segment(cluster_id)}"
        # The key a path prefix may hold, as an error can quote it: in the whole URL, or
        # in the path of a request (the prefix alone is too short to be told from text).
        path_prefix = urlsplit(self._base).path
        self._hidden = (
            {
                self._base: self._shown_base,
                path_prefix + self._cluster_path: _HIDDEN_PATH + self._cluster_path,
            }
            if path_prefix
            else {}
        )
        # The envelope's fixed start, encoded once; msgspec escapes the strings.
        self._envelope_start = (
            b'{"project_id":'
            + _json.encode(project_id)
            + b',"cluster_id":'
            + _json.encode(cluster_id)
        )
        ca_bundle = settings.ca_bundle
        verify: ssl.SSLContext | bool = _ssl_context(ca_bundle) if ca_bundle else True
        # trust_env stays on so HTTPS_PROXY/HTTP_PROXY/NO_PROXY apply (and, without a CA
        # bundle, SSL_CERT_FILE/SSL_CERT_DIR); httpx ignores the environment's proxies only
        # when a transport is passed in (tests).
        self._http = httpx.Client(
            verify=verify,
            timeout=httpx.Timeout(
                settings.read_timeout_seconds, connect=settings.connect_timeout_seconds
            ),
            transport=transport,
            trust_env=True,
            follow_redirects=False,  # a redirect would carry the token elsewhere
            headers={
                "User-Agent": f"moonin-agent/{VERSION}",
                "Accept": "application/json",
                "Accept-Encoding": ACCEPT_ENCODING,
            },
        )
        deadline.guard_client(self._http)

    @property
    def base_url(self) -> str:
        return self._base

    # -- the contract's calls -------------------------------------------------------------

    def post_records(self, batch_id: str, records: Sequence[bytes]) -> None:
        """Deliver encoded discovery records; returns once the platform has all of them."""
        body = b"".join(
            (
                self._envelope_start,
                b',"batch_id":',
                _json.encode(batch_id),
                b',"sent_at":',
                _json.encode(utc_timestamp()),
                b',"agent_version":',
                _json.encode(VERSION),
                b',"records":[',
                b",".join(records),
                b"]}",
            )
        )
        self._request("POST", "/records", "records", body=body, idempotency_key=batch_id)

    def post_events(self, batch_id: str, events: Sequence[bytes]) -> None:
        """Deliver encoded scaling events; the platform de-duplicates them by id."""
        body = b"".join((self._envelope_start, b',"events":[', b",".join(events), b"]}"))
        self._request("POST", "/events", "events", body=body, idempotency_key=batch_id)

    def heartbeat(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Send a heartbeat; the decoded answer (`{}` when empty), e.g. `{"resync": true}`."""
        body = b"".join(
            (
                self._envelope_start,
                b',"sent_at":',
                _json.encode(utc_timestamp()),
                b',"agent_version":',
                _json.encode(VERSION),
                b',"metadata":',
                _json.encode(dict(metadata)),
                b"}",
            )
        )
        # Heartbeats are never replayed, so each one is its own idempotent request.
        content = self._request(
            "POST",
            "/heartbeat",
            "heartbeat",
            body=body,
            idempotency_key=new_id(),
            answer_limit=SMALL_ANSWER_BYTES,
        )
        if not content.strip():
            return {}
        return self._decode(_OBJECT, content, "/heartbeat")

    def get_templates(self) -> list[Any]:
        """The cluster's scaling templates, as the platform sent them."""
        content = self._request(
            "GET", "/templates", "templates", answer_limit=self._max_answer_bytes
        )
        return self._decode(_TEMPLATES, content, "/templates").templates

    def get_actions(self, template_id: str) -> list[Any]:
        """The actions of one template, as the platform sent them."""
        path = f"/templates/{_segment(template_id)}/actions"
        content = self._request("GET", path, "actions", answer_limit=self._max_answer_bytes)
        return self._decode(_ACTIONS, content, path).actions

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one request, and the one place httpx errors are translated ------------------------

    def _request(
        self,
        method: str,
        path: str,
        endpoint: str,
        *,
        body: bytes | None = None,
        idempotency_key: str | None = None,
        answer_limit: int | None = None,
    ) -> bytes | bytearray:
        """Send one request; the body of a successful answer (read within `answer_limit`
        bytes; None: not needed, b"" is returned), or a `shipper.errors` raise.

        `endpoint` names the call for the observer (paths carry ids)."""
        url, shown = self._url(path), self._shown(path)
        headers, content = self._outgoing(body, idempotency_key)
        request = self._http.build_request(method, url, content=content, headers=headers)
        started = time.perf_counter()
        outcome = "error"  # no answer at all
        with deadline.within(self._deadline_seconds) as limit:
            try:
                response = self._http.send(request, stream=True)
                outcome = f"{response.status_code // 100}xx"
                try:
                    if response.is_success:
                        return self._whole_answer(response, method, shown, answer_limit, limit)
                    if response.status_code == 409 and method == "POST":
                        return b""  # delivered before; its body is no answer to decode
                    snippet = _read_prefix(response)
                finally:
                    # Back to the pool: the deadline must not reach the next call on it.
                    limit.release()
                    response.close()
            except (httpx.RequestError, MalformedAnswer) as e:
                given_up = _given_up(limit, method, shown)
                if given_up is not None:
                    outcome, stop = given_up
                    raise stop from e
                if isinstance(e, MalformedAnswer):
                    raise
                raise self._transport_error(e, method, shown) from e
            except AnswerOverLimit:
                outcome = "over_limit"
                raise
            finally:
                if self._observe is not None:
                    self._observe(endpoint, outcome, time.perf_counter() - started)
        raise self._refused(response, method, shown, snippet)

    def _outgoing(
        self, body: bytes | None, idempotency_key: str | None
    ) -> tuple[dict[str, str], bytes | None]:
        """The headers of a request and its body as sent (gzipped above `GZIP_THRESHOLD`)."""
        token = self._token.current()
        headers = {"X-Cluster-Token": token, "Authorization": f"Bearer {token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
            if idempotency_key is not None:
                headers["Idempotency-Key"] = idempotency_key
            if len(body) > GZIP_THRESHOLD:
                # Level 1, the measured sweet spot; wbits=31 writes the gzip wrapper in the
                # same call, with no timestamp in its header.
                body = isal_zlib.compress(body, level=1, wbits=31)
                headers["Content-Encoding"] = "gzip"
        return headers, body

    def _whole_answer(
        self,
        response: httpx.Response,
        method: str,
        shown: str,
        answer_limit: int | None,
        limit: deadline.Deadline,
    ) -> bytes | bytearray:
        """The body of a 2xx answer (`_answer`), unless the deadline cut it short."""
        content = self._answer(response, method, shown, answer_limit)
        if answer_limit is not None and limit.interrupted:
            # Shut down under it, a body that ends with the connection looks complete:
            # it was cut short.
            raise MalformedAnswer("cut short")
        return content

    def _refused(
        self, response: httpx.Response, method: str, shown: str, snippet: str
    ) -> MooninAPIError:
        """The error a non-2xx answer means (`_status_error`)."""
        error = _status_error(
            method,
            shown,
            response.status_code,
            response.headers,
            self._redact(snippet, limit=BODY_SNIPPET),
        )
        if response.status_code in (401, 403):
            # A rotated Secret: the next call, whichever it is, carries the new token.
            error.token_rotated = self._token.reload()
        return error

    def _answer(
        self, response: httpx.Response, method: str, url: str, limit: int | None
    ) -> bytes | bytearray:
        """The body of a 2xx answer, within `limit` bytes after decompression."""
        if limit is None:
            # The status is the whole answer. Reading a short body lets the connection be
            # used again; a long, slow or broken one is left unread (the connection closes).
            with (
                deadline.within(IGNORED_ANSWER_SECONDS),
                contextlib.suppress(httpx.HTTPError, UndecodableAnswer),
            ):
                read_bounded(response, SMALL_ANSWER_BYTES, cut=True)
            return b""
        try:
            return read_bounded(response, limit)
        except AnswerTooLarge as exc:
            summary = f"answer over {describe_size(exc.limit)}"
            raise AnswerOverLimit(
                f"{method} {url}: the {summary} that a call may read; nothing of it was used",
                summary=summary,
            ) from None
        except UndecodableAnswer as exc:
            raise MalformedAnswer(f"malformed answer from {url}: {exc}") from None

    def _transport_error(self, error: httpx.RequestError, method: str, url: str) -> MooninAPIError:
        failure = _certificate_failure(error)
        if failure is not None:
            # Retrying cannot make an untrusted certificate trusted: the trust store is a
            # setting, so this pauses the stream as a configuration error, and says which.
            return Misconfigured(
                f"{method} {url}: the server's TLS certificate could not be verified "
                f"({failure}); if the API uses a private or corporate certificate authority, "
                "configure a CA bundle (MOONIN_CA_BUNDLE: a PEM file with that authority's "
                "certificate)"
            )
        detail = self._redact(str(error)) or "no detail"
        return RetryLater(f"{method} {url} failed: {type(error).__name__}: {detail}")

    def _decode(
        self, decoder: msgspec.json.Decoder[_T], content: bytes | bytearray, path: str
    ) -> _T:
        try:
            return decoder.decode(content)
        except msgspec.DecodeError as e:
            # A 2xx with a body we cannot use is the platform's problem, not ours, and
            # nothing is lost by asking again later, so it is retried rather than paused.
            raise MalformedAnswer(
                f"malformed answer from {self._shown(path)}: {self._redact(str(e))}",
                body=self._redact(
                    content[:_SNIPPET_BYTES].decode("utf-8", "replace"), limit=BODY_SNIPPET
                ),
            ) from e

    def _url(self, path: str) -> str:
        return f"{self._base}{self._cluster_path}{path}"

    def _shown(self, path: str) -> str:
        """`_url(path)` as messages show it (`shown_url`)."""
        return f"{self._shown_base}{self._cluster_path}{path}"

    def _redact(self, text: str, *, limit: int | None = None) -> str:
        """`text` without any token held so far, nor the base URL's path prefix (an httpx
        error can quote the URL). With `limit`, the text is the start of a longer body: it
        is cut to `limit` characters only after redacting, and an ending that begins a
        token (the read stopped inside it) goes too."""
        for found, shown in self._hidden.items():
            text = text.replace(found, shown)
        secrets = self._token.secrets()
        for secret in secrets:
            text = text.replace(secret, REDACTED)
        if limit is None:
            return text
        for secret in secrets:
            for size in range(len(secret) - 1, _SHORTEST_TOKEN_PART - 1, -1):
                if text.endswith(secret[:size]):
                    text = text[:-size] + REDACTED
                    break
        return text[:limit]


# -- helpers ------------------------------------------------------------------------------


def _given_up(limit: deadline.Deadline, method: str, url: str) -> tuple[str, MooninAPIError] | None:
    """What a call the deadline ended is (the agent stopping, or the time spent), with the
    outcome it is observed as; None for a call that failed on its own."""
    if limit.cancelled:
        return "cancelled", CallCancelled(f"{method} {url}: given up, the agent is stopping")
    if limit.expired:
        return "deadline", DeadlineExceeded(f"{method} {url}: {limit.missed()}")
    return None


def _status_error(
    method: str, url: str, status: int, headers: httpx.Headers, body: str
) -> MooninAPIError:
    where = f"{method} {url} answered {status}"
    if status in (400, 413, 422):
        return RejectedBody(f"{where}: the platform refused this body", status=status, body=body)
    if status in (401, 403):
        return CredentialsRejected(
            f"{where}: the cluster token was rejected (check CLUSTER_TOKEN / CLUSTER_TOKEN_FILE)",
            status=status,
            body=body,
        )
    if status in (408, 429) or status >= 500:
        return RetryLater(
            f"{where}: try again later",
            status=status,
            body=body,
            retry_after=backoff.parse_retry_after(headers.get("Retry-After")),
        )
    if 300 <= status < 400:
        location = headers.get("Location")
        return Misconfigured(
            f"{where} (a redirect to {shown_url(location) if location else 'nowhere'}); "
            "the API URL must point at the API itself",
            status=status,
            body=body,
        )
    return Misconfigured(
        f"{where}: the agent is pointed at the wrong place "
        "(check the API URL and CLUSTER_ID for this role)",
        status=status,
        body=body,
    )


def _read_prefix(response: httpx.Response) -> str:
    """The start of an error response as text, without reading (or inflating) the rest."""
    try:
        start = read_bounded(response, _SNIPPET_BYTES, cut=True)
    except (httpx.HTTPError, UndecodableAnswer):
        # The status is the answer; a garbled or stalled error body must not hide it.
        return "(unreadable body)"
    # Cut to BODY_SNIPPET characters only after redaction (see ApiClient._redact).
    return start.decode(response.encoding or "utf-8", "replace")


def _certificate_failure(error: BaseException) -> str | None:
    """Why certificate verification failed, if that is what `error` is about."""
    # httpx wraps httpcore's error, which wraps the ssl module's: walk the chain.
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return getattr(current, "verify_message", None) or "certificate verify failed"
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    if "CERTIFICATE_VERIFY_FAILED" in str(error):
        return "certificate verify failed"
    return None


def _segment(value: str) -> str:
    """One URL path segment; '.' and '..' are escaped so they cannot climb the path."""
    if value in (".", ".."):
        return value.replace(".", "%2E")
    return quote(value, safe="")


def checked_base_url(value: str, *, insecure_http: bool) -> str:
    """The rules of a Moonin API base URL, for the client and the configuration alike.

    A base URL is a scheme, a host, an optional port and an optional path prefix. Returns
    it without a trailing slash. Raises ValueError (`InsecureURLError` when the scheme is
    the problem) with a message fit to follow the setting's name, which never repeats the
    value: it may hold a key.
    """
    value = value.strip()
    given = _unshown(value)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (parsing the port is part of the check)
    except ValueError:
        raise ValueError(f"not a valid URL, got {given}") from None
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not contain credentials (user:password@); the token is separate")
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise InsecureURLError(f"expected an https:// URL with a host, got {given}")
    if not parts.hostname:
        raise ValueError(f"expected an https:// URL with a host, got {given}")
    if any(char.isspace() for char in value):
        raise ValueError(f"contains whitespace, got {given}")
    if _BAD_HOST.search(parts.hostname):
        raise ValueError(f"has an invalid host name, got {given}")
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ValueError(
            "must be a scheme, a host, a port and a path prefix, without a query or "
            f"fragment; got {given}"
        )
    if scheme == "http" and not insecure_http:
        raise InsecureURLError(
            "plain http:// is refused; set MOONIN_INSECURE_HTTP=true to allow it "
            "(never in production)"
        )
    normalized = f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}"
    try:
        httpx.URL(normalized)
    except httpx.InvalidURL:
        raise ValueError(f"not a valid URL, got {given}") from None
    return normalized


def shown_url(value: str) -> str:
    """A URL as messages and logs show it: scheme, host and port, and `/***` for a path.

    What else a URL holds (credentials, a query, a path that may carry a key) stays out;
    a value that is not an http(s) URL with a host is not shown at all."""
    try:
        parts = urlsplit(value.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return _unshown(value)
    scheme = parts.scheme.lower()
    if not host or scheme not in ("http", "https"):
        return _unshown(value)
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    return f"{scheme}://{netloc}{_HIDDEN_PATH if parts.path.strip('/') else ''}"


def _unshown(value: str) -> str:
    return f"a value of {len(value)} characters (not shown)"


def _ssl_context(ca_bundle: str) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=ca_bundle)
    except FileNotFoundError:
        raise ValueError(f"CA bundle {ca_bundle} does not exist") from None
    except ssl.SSLError as e:  # before OSError: it is one
        raise ValueError(
            f"CA bundle {ca_bundle} holds no usable PEM certificate ({e.reason or e})"
        ) from None
    except OSError as e:
        raise ValueError(f"CA bundle {ca_bundle} cannot be read: {e.strerror or e}") from None
