"""Who sent a request: bearer tokens mapped to users, as a token authenticator does.

kube-apiserver authenticates every request before anything else: a bearer token it does
not know is 401 `Unauthorized` whatever the path. A request with no credentials at all is
`system:anonymous` (kube-apiserver's default `--anonymous-auth=true`) when an authorizer
judges it (RBAC on: 403 but for the paths `system:public-info-viewer` opens); with no
authorizer it would be allowed everything, so then it is 401 but for `/version` and the
health checks. ServiceAccount tokens name
`system:serviceaccount:NAMESPACE:NAME`; which token maps to whom is the test's choice, and
a rotated token works as soon as the fake is told (`FakeKube.add_token`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from sandbox.kube import status

DEFAULT_TOKEN = "fake-token"
DEFAULT_USER = "system:serviceaccount:moonin:moonin-agent"
ANONYMOUS = "system:anonymous"
# The fake's own paths: outside any cluster's authentication and authorization.
SANDBOX_PATHS = frozenset({"/_sandbox/stats"})
# Served without credentials.
ANONYMOUS_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"}) | SANDBOX_PATHS


def service_account(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


class Tokens:
    """The bearer tokens the fake accepts and the user each one authenticates as."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._lock = threading.Lock()
        self._users = dict(tokens)

    def add(self, token: str, user: str) -> None:
        if not token:
            raise ValueError("a token cannot be empty")
        with self._lock:
            self._users[token] = user

    def remove(self, token: str) -> None:
        with self._lock:
            self._users.pop(token, None)

    def reset(self, tokens: Mapping[str, str]) -> None:
        with self._lock:
            self._users = dict(tokens)

    def authenticate(self, path: str, authorization: str | None, *, authorized: bool) -> str:
        """The user a request comes from; `ApiError` 401 when it cannot be told.
        `authorized`: whether an authorizer will judge what the user may do."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if not scheme:
            if authorized or (path.rstrip("/") or "/") in ANONYMOUS_PATHS:
                return ANONYMOUS
            raise status.unauthorized()
        with self._lock:
            user = self._users.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise status.unauthorized()
        return user
