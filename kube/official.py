"""The official `kubernetes` client, for the scaling role's writes, on the resolved cluster.

The scaling role writes few objects and reads few more, so it uses the official client (the
collector avoids it for memory; this role can afford it). `api_client(target)` builds its
`ApiClient` for the very cluster `kube.cluster` resolved, the one discovery reads, and
`call()` is where its errors become `kube.errors`, in one function (`_translate`). Two of
the client's defaults are wrong for a reconcile loop and are changed here, once, so every
call inherits the fix:

- urllib3's default retry policy silently repeats a request answered 429 or 503 with a
  `Retry-After`, sleeping inside the call; a cycle then stalls where it should give up
  and try again 30 s later. `retries = False` turns every such answer into an exception.
- calls have no timeout; `REQUEST_TIMEOUT` is passed on every call (`RAW`, `WRITE`), and
  the total deadline of `call()` (`runtime.deadline.within`) holds because the client's pool
  manager is guarded here (`guard_pool_manager`): connections cap their connect timeout at
  the deadline and put their socket under its guard from the moment it exists (a proxy's
  CONNECT answer comes before the connection is up), again on every request they carry.

Objects are read and written as dicts (`_preload_content=False`, decoded with msgspec), not
as the client's model classes.

How it fails: `api_client` raises `kube.cluster.KubeConfigError` (one line) when the
kubeconfig cannot be loaded; `call` raises `kube.errors.KubeError` and its kinds.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable
from typing import Any

import msgspec
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kube import cluster, errors
from kube.cluster import KubeTarget
from kube.permission import Permission
from runtime import backoff, deadline
from runtime.version import VERSION

# (connect, read) seconds for every API call: a cycle must end well before the next one.
REQUEST_TIMEOUT = (5.0, 20.0)
# Our writes under our own name in managedFields, so GitOps tools can tell them apart, and
# strictly validated: a field the server does not know (a typo in a body built here) is a
# 400 `BadRequest` naming it, not silently dropped.
FIELD_MANAGER = "moonin-agent"
RAW: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}
WRITE: dict[str, Any] = {**RAW, "field_manager": FIELD_MANAGER, "field_validation": "Strict"}

Obj = dict[str, Any]
_decode = msgspec.json.Decoder(dict[str, Any]).decode


def api_client(target: KubeTarget) -> client.ApiClient:
    """An ApiClient for `target`: the kubeconfig file and context it was read from, or
    the pod's service account it came from."""
    if target.kubeconfig:
        configuration = cluster.client_configuration(target.kubeconfig, target.context)
        if isinstance(target.token, cluster.TokenFile):
            # The library reads a `tokenFile` once: the rotating token comes from the target.
            _rotating_token(configuration, target)
        return from_configuration(configuration)
    configuration = client.Configuration()
    _service_account(configuration, target)
    return from_configuration(configuration)


def _service_account(configuration: client.Configuration, target: KubeTarget) -> None:
    """In a pod: the server, its CA and the rotating token that `target` holds."""
    configuration.host = target.server
    if target.service_account is not None:
        configuration.ssl_ca_cert = str(target.service_account / "ca.crt")
    _rotating_token(configuration, target)


def _rotating_token(configuration: client.Configuration, target: KubeTarget) -> None:
    """Every request's bearer token from `target`, which re-reads its file as it rotates."""

    def refresh(conf: client.Configuration) -> None:
        token = target.token()
        conf.api_key["BearerToken"] = f"Bearer {token}" if token else ""

    refresh(configuration)
    # Declared None in the client's annotations, though it is a hook it calls.
    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]


def from_configuration(configuration: client.Configuration) -> client.ApiClient:
    """An ApiClient for `configuration` with urllib3's hidden retries switched off."""
    configuration.retries = False
    api = client.ApiClient(configuration)
    api.user_agent = f"moonin-agent/{VERSION}"
    guard_pool_manager(api.rest_client.pool_manager)
    return api


def call(what: str, needs: Permission, request: Callable[[], Any], *, within: float) -> Obj:
    """`request` (a call of the client with `RAW` or `WRITE`) within `within` seconds, its
    answer decoded; `what` names it in errors, `needs` is the permission it takes (named by
    a 403)."""
    with deadline.within(within) as limit:
        try:
            response = request()
            data = response.data
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            if limit.expired:
                raise errors.KubeError(f"{what}: {limit.missed()}") from exc
            raise _translate(what, needs, exc) from exc
        if limit.interrupted:
            # The socket was shut down under the read: what it got may be cut short.
            raise errors.KubeError(f"{what}: {limit.missed()}")
    if not data:
        return {}
    try:
        return _decode(data)
    except msgspec.DecodeError as exc:
        raise errors.KubeError(f"{what}: the answer is not a JSON object") from exc


def _translate(what: str, needs: Permission, exc: Exception) -> errors.KubeError:
    """The one place where the official client's failures become KubeErrors."""
    if not isinstance(exc, ApiException):
        detail = _one_line(str(exc))[: errors.MESSAGE_LIMIT]
        return errors.KubeError(f"{what} failed: {type(exc).__name__}: {detail}")
    message, reason = errors.status_of(exc.body or b"")
    detail = _one_line(message or exc.reason or "no detail")[: errors.MESSAGE_LIMIT]
    if not exc.status:  # raised by the client itself, not an answer of the server
        return errors.KubeError(f"{what}: {detail}")
    headers = exc.headers or {}
    return errors.for_status(
        exc.status,
        what,
        detail,
        permission=needs,
        reason=reason,
        retry_after=backoff.parse_retry_after(headers.get("Retry-After")),
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- total deadlines (`runtime.deadline`) over urllib3 ----------------------------------


class _GuardedConnection:
    """What both connection classes add: a capped connect, and the socket under guard for
    every request sent on it (a kept-alive connection serves many calls)."""

    sock: socket.socket | None
    timeout: Any

    def connect(self) -> None:
        limit = deadline.current()
        if limit is not None:
            # urllib3's default-timeout sentinel is no number: then only the deadline counts.
            own = self.timeout if isinstance(self.timeout, int | float) else None
            self.timeout = limit.cap(own)
        super().connect()  # type: ignore[misc]
        self._guard()  # a TLS connection's socket is a new object

    def _new_conn(self) -> socket.socket:
        # Guarded from the start: a proxy's CONNECT answer is read before `connect()` ends.
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        limit = deadline.current()
        if limit is not None:
            limit.guard(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        self._guard()
        super().request(*args, **kwargs)  # type: ignore[misc]

    def _guard(self) -> None:
        limit = deadline.current()
        if limit is not None and self.sock is not None:
            limit.guard(self.sock)


def guard_pool_manager(manager: urllib3.PoolManager) -> urllib3.PoolManager:
    """Hold every request `manager` sends (a proxy manager's too) to `runtime.deadline`'s
    `within()`. Call it before the first request: pools made earlier keep their connection
    classes."""
    manager.pool_classes_by_scheme = {
        scheme: _guarded_pool(pool_class)
        for scheme, pool_class in manager.pool_classes_by_scheme.items()
    }
    return manager


@functools.cache
def _guarded_pool(pool_class: type[Any]) -> type[Any]:
    """`pool_class` whose connections are guarded (plain, TLS or SOCKS alike)."""
    if issubclass(pool_class.ConnectionCls, _GuardedConnection):
        return pool_class
    connection = type(
        f"Guarded{pool_class.ConnectionCls.__name__}",
        (_GuardedConnection, pool_class.ConnectionCls),
        {},
    )
    return type(f"Guarded{pool_class.__name__}", (pool_class,), {"ConnectionCls": connection})
