"""A `kubernetes` client for the scaling role: in-cluster config, or a kubeconfig file.

The scaling role writes few objects and reads few more, so it uses the official client (the
collector avoids it for memory; this role can afford it). Two of its defaults are wrong for
a reconcile loop and are changed here, once, so every call inherits the fix:

- urllib3's default retry policy silently repeats a request answered 429 or 503 with a
  `Retry-After`, sleeping inside the call; a cycle then stalls where it should give up
  and try again 30 s later. `retries = False` turns every such answer into an exception.
- calls have no timeout; `REQUEST_TIMEOUT` is passed on every call by `scheduler.kubeapi`,
  and its total deadline (`runtime.deadline.within`) holds because the client's pool
  manager is guarded here (`guard_pool_manager`): connections cap their connect timeout at
  the deadline and put their socket under its guard from the moment it exists (a proxy's
  CONNECT answer comes before the connection is up), again on every request they carry.

How it fails: `KubeConnectError` with one line naming what is missing or wrong.
"""

from __future__ import annotations

import functools
import os
import socket
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from runtime.deadline import current
from runtime.version import VERSION

# (connect, read) seconds for every API call: a cycle must end well before the next one.
REQUEST_TIMEOUT = (5.0, 20.0)


class KubeConnectError(Exception):
    """The cluster cannot be reached with the given settings; the message is one line."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient: `kubeconfig`/`context` when given, else in-cluster config inside a pod,
    else `$KUBECONFIG` or `~/.kube/config`."""
    configuration = client.Configuration()
    try:
        if kubeconfig is None and context is None and _in_cluster():
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        detail = " ".join(str(exc).splitlines()) or type(exc).__name__
        message = f"cannot load the cluster configuration ({where}): {detail}"
        raise KubeConnectError(message) from None
    return from_configuration(configuration)


def from_configuration(configuration: client.Configuration) -> client.ApiClient:
    """An ApiClient for `configuration` with urllib3's hidden retries switched off."""
    configuration.retries = False
    api = client.ApiClient(configuration)
    api.user_agent = f"moonin-agent/{VERSION}"
    guard_pool_manager(api.rest_client.pool_manager)
    return api


def _in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ


# -- total deadlines (`runtime.deadline`) over urllib3 ----------------------------------


class _GuardedConnection:
    """What both connection classes add: a capped connect, and the socket under guard for
    every request sent on it (a kept-alive connection serves many calls)."""

    sock: socket.socket | None
    timeout: Any

    def connect(self) -> None:
        deadline = current()
        if deadline is not None:
            # urllib3's default-timeout sentinel is no number: then only the deadline counts.
            own = self.timeout if isinstance(self.timeout, int | float) else None
            self.timeout = deadline.cap(own)
        super().connect()  # type: ignore[misc]
        self._guard()  # a TLS connection's socket is a new object

    def _new_conn(self) -> socket.socket:
        # Guarded from the start: a proxy's CONNECT answer is read before `connect()` ends.
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        deadline = current()
        if deadline is not None:
            deadline.guard(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        self._guard()
        super().request(*args, **kwargs)  # type: ignore[misc]

    def _guard(self) -> None:
        deadline = current()
        if deadline is not None and self.sock is not None:
            deadline.guard(self.sock)


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
