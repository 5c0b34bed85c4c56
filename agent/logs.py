"""Logging for the whole process: structlog events rendered as JSON lines or console text.

Every component logs an event name with key/value fields
(`log.info("stream_paused", stream="discovery", reason="credentials_rejected")`) through
`structlog.get_logger(<component>)`; this module decides what those lines look like and
makes sure no secret reaches them. JSON lines when the output is not a terminal (a
container), readable console text on a terminal. Each line carries `timestamp` (ISO 8601,
UTC), `level`, `logger` and `event`.

Secrets: `configure_logging` takes a callable returning the secret strings (every token
value held so far). It is called for every event, so a rotated token is hidden from its
first use. Each occurrence in a field value, in nested dicts and lists, and in the rendered
traceback becomes `[REDACTED]`; so does the whole value of any key whose name mentions a
token, secret, password, credential or authorization. A value shorter than a cluster token
may be (`MIN_TOKEN_CHARS`) is not searched for: it cannot be told from ordinary text, and
hiding it would blank every word that contains it (the configuration refuses such a token
anyway). Records of the standard `logging`
module (persist-queue, httpx, the Kubernetes client) at WARNING and above are forwarded
into the same pipeline, so they are redacted and rendered the same way; httpx and httpcore
are held at WARNING since they log request URLs at INFO.

How it fails: never into the caller. If `secrets()` raises, the values it last returned are
used. A stdlib record that cannot be formatted is dropped rather than printed with its
arguments (the default handler error path would echo them). Lines from many threads share
one lock per stream and never interleave.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from shipper.token import MIN_TOKEN_CHARS

REDACTED = "[REDACTED]"

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

# Libraries only reach the output from this level up; httpx logs every request URL at INFO.
LIBRARY_LEVEL = logging.WARNING
_QUIET_LIBRARIES = ("httpx", "httpcore")

_SENSITIVE_KEY = re.compile(r"token|secret|password|credential|authorization", re.IGNORECASE)
# Deeper than this a value is checked as one rendered string; guards against cycles.
_MAX_DEPTH = 16


def configure_logging(
    level: str,
    *,
    secrets: Callable[[], Iterable[str]],
    stream: TextIO = sys.stderr,
    json: bool | None = None,
) -> None:
    """Send structlog and stdlib logging to `stream`, redacted; safe to call again.

    `level` is one of debug, info, warning, error (ValueError otherwise). `json` None
    chooses JSON lines unless `stream` is a terminal.
    """
    try:
        threshold = LEVELS[level.strip().lower()]
    except KeyError:
        raise ValueError(
            f"unknown log level {level!r}; expected one of {', '.join(LEVELS)}"
        ) from None
    tty = _is_tty(stream)
    as_json = not tty if json is None else json
    factory = _LoggerFactory(stream)
    factory()  # creates the stream's write lock now, before any thread races to
    structlog.configure(
        processors=_processors(SecretRedactor(secrets), as_json=as_json, colors=tty),
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=factory,
        context_class=dict,
        # Module-level loggers must follow a later reconfiguration (tests, `run`).
        cache_logger_on_first_use=False,
    )
    _route_stdlib_logging()


def _processors(redactor: SecretRedactor, *, as_json: bool, colors: bool) -> list[Processor]:
    renderer: Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=colors)
    )
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        # Tracebacks become text before redaction, so exception messages are covered.
        structlog.processors.format_exc_info,
        redactor,
        renderer,
    ]


class SecretRedactor:
    """A structlog processor replacing secrets and sensitive fields with `[REDACTED]`."""

    def __init__(self, secrets: Callable[[], Iterable[str]]) -> None:
        self._secrets = secrets
        self._last: tuple[str, ...] = ()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        secrets = self._current()
        return {key: self._field(key, value, secrets, depth=0) for key, value in event_dict.items()}

    def _current(self) -> tuple[str, ...]:
        try:
            values = {
                value
                for value in self._secrets()
                if isinstance(value, str) and len(value) >= MIN_TOKEN_CHARS
            }
        except Exception:
            return self._last  # a failing source must not stop logging, nor unhide the old token
        # Longest first, so a secret that contains another one goes as a whole.
        self._last = tuple(sorted(values, key=len, reverse=True))
        return self._last

    def _field(self, key: object, value: Any, secrets: tuple[str, ...], depth: int) -> Any:
        if isinstance(key, str) and _SENSITIVE_KEY.search(key) and _can_hold_secret(value):
            return REDACTED
        return self._value(value, secrets, depth)

    def _value(self, value: Any, secrets: tuple[str, ...], depth: int) -> Any:
        if isinstance(value, str):
            return _replace(value, secrets)
        if value is None or isinstance(value, bool | int | float):
            return value
        if depth < _MAX_DEPTH:
            if isinstance(value, dict):
                return {
                    self._value(key, secrets, depth + 1): self._field(key, item, secrets, depth + 1)
                    for key, item in value.items()
                }
            if isinstance(value, list | tuple):
                return type(value)(self._value(item, secrets, depth + 1) for item in value)
        # Anything else is rendered by repr (both renderers do); check what it would print.
        try:
            rendered, text = repr(value), str(value)
        except Exception:
            return "<unrenderable>"  # the renderer would fail on it too
        if any(secret in rendered or secret in text for secret in secrets):
            return _replace(rendered, secrets)
        return value


def _can_hold_secret(value: Any) -> bool:
    # `token=None` or `token_rotated=True` says something useful and cannot leak a value.
    return value is not None and not isinstance(value, bool)


def _replace(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _add_logger_name(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    name = getattr(logger, "name", None)
    if name and "logger" not in event_dict:
        event_dict["logger"] = name
    return event_dict


class _NamedWriteLogger(structlog.WriteLogger):
    """structlog's WriteLogger (a lock per file) that remembers the name it was asked for."""

    def __init__(self, file: TextIO, name: str | None) -> None:
        super().__init__(file)
        self.name = name


class _LoggerFactory:
    """`structlog.get_logger("shipper")` -> a logger named "shipper" writing to `stream`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, *args: Any) -> _NamedWriteLogger:
        name = args[0] if args and isinstance(args[0], str) else None
        return _NamedWriteLogger(self._stream, name)


# --- the standard library's logging ----------------------------------------------------------


class _ForwardingHandler(logging.Handler):
    """Hands stdlib records to structlog, so they share its redaction and its output."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = record.getMessage()
            fields: dict[str, Any] = {}
            if record.exc_info and record.exc_info[0] is not None:
                fields["exc_info"] = record.exc_info
            logger = structlog.get_logger(record.name)
            getattr(logger, _method_for(record.levelno))(event, **fields)
        except Exception:
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        # The default prints the record's message and arguments to stderr, unredacted.
        return


def _method_for(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warning"
    return "info" if levelno >= logging.INFO else "debug"


def _route_stdlib_logging() -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _ForwardingHandler):
            root.removeHandler(handler)
    root.addHandler(_ForwardingHandler(level=LIBRARY_LEVEL))
    root.setLevel(LIBRARY_LEVEL)
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(LIBRARY_LEVEL)
    # `warnings.warn` output goes through logging too, instead of straight to stderr.
    logging.captureWarnings(True)


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
