"""The cluster token, read from the environment or from a file that may be rotated.

Kubernetes updates a Secret mounted as a file in place, so when the platform rejects the
credentials the shipper calls `reload()` and the next request carries the new token
without a restart. Every value ever held is remembered so the log redactor can hide old
tokens too (a log line about a rotation must not leak either side of it).

A usable token is visible ASCII (anything else cannot travel in an HTTP header) and at least
`MIN_TOKEN_CHARS` long: a shorter one is a mistake (a placeholder, a cut paste), and the
log redactor would have to hide every occurrence of a common string. `token_problem` is
that rule, for the configuration at start-up and for every rotation here.

How it fails: construction raises ValueError (without the token in the message) when no
usable token is configured. After that nothing raises: a file that disappears, is
unreadable, empty or holds a value that is not a usable token keeps the token already
held, and `reload()` answers False.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping

# Visible ASCII only: anything else cannot travel in an HTTP header, and letting httpx
# refuse it later would put the value into an exception message.
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")

MIN_TOKEN_CHARS = 16

_NOT_SET = "CLUSTER_TOKEN or CLUSTER_TOKEN_FILE must be set"


def token_problem(token: str) -> str | None:
    """Why `token` (stripped) cannot be the cluster token, without quoting it; None if it can."""
    if not _HEADER_SAFE.fullmatch(token):
        return (
            "holds whitespace, control or non-ASCII characters that cannot be sent in an HTTP "
            "header"
        )
    if len(token) < MIN_TOKEN_CHARS:
        return f"has length {len(token)}; a cluster token has at least {MIN_TOKEN_CHARS} characters"
    return None


class TokenSource:
    """Holds the cluster token; safe to share between threads.

    When both a value and a file are given the file wins: the file is the one that
    rotates (a mounted Secret), while an environment variable is fixed for the life of
    the process. The value is only a fallback while the file is missing or empty.
    """

    def __init__(self, value: str | None = None, file: str | None = None) -> None:
        self._lock = threading.Lock()
        self._file = file or None
        token = self._read_file()
        if token is None and value is not None:
            value = value.strip()
            if value and (problem := token_problem(value)) is not None:
                raise ValueError(f"CLUSTER_TOKEN {problem}")
            token = value or None
        if token is None:
            if self._file is not None and not value:
                raise ValueError(
                    f"{_NOT_SET} (CLUSTER_TOKEN_FILE {self._file} is missing, unreadable, "
                    "empty or holds no usable token)"
                )
            raise ValueError(_NOT_SET)
        self._token = token
        self._seen: list[str] = [token]

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TokenSource:
        """Read `CLUSTER_TOKEN` and `CLUSTER_TOKEN_FILE`; empty variables count as unset."""
        return cls(
            value=environ.get("CLUSTER_TOKEN") or None,
            file=(environ.get("CLUSTER_TOKEN_FILE") or "").strip() or None,
        )

    @property
    def file(self) -> str | None:
        return self._file

    def current(self) -> str:
        with self._lock:
            return self._token

    def reload(self) -> bool:
        """Re-read the file; True only when it now holds a different, usable token."""
        if self._file is None:
            return False
        token = self._read_file()
        with self._lock:
            if token is None or token == self._token:
                return False
            self._token = token
            if token not in self._seen:
                self._seen.append(token)
            return True

    def secrets(self) -> tuple[str, ...]:
        """Every token value held so far, oldest first (for redaction)."""
        with self._lock:
            return tuple(self._seen)

    def _read_file(self) -> str | None:
        if self._file is None:
            return None
        try:
            with open(self._file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not token or token_problem(token) is not None:
            return None  # a rotation to a token that cannot be one keeps the one held
        return token

    def __repr__(self) -> str:
        # Never the value: this object ends up in tracebacks and debug output.
        return f"TokenSource(file={self._file!r}, values_seen={len(self._seen)})"
