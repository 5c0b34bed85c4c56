"""A `kubernetes` client for the scaling role: in-cluster config, or a kubeconfig file.

The scaling role writes few objects and reads few more, so it uses the official client (the
collector avoids it for memory; this role can afford it). Two of its defaults are wrong for
a reconcile loop and are changed here, once, so every call inherits the fix:

- urllib3's default retry policy silently repeats a request answered 429 or 503 with a
  `Retry-After`, sleeping inside the call; a cycle then stalls where it should give up
  and try again 30 s later. `retries = False` turns every such answer into an exception.
- calls have no timeout; `REQUEST_TIMEOUT` is passed on every call by `scheduler.kubeapi`,
  and its total deadline (`shipper.deadline.within`) holds because the client's pool
  manager is guarded here.

How it fails: `KubeConnectError` with one line naming what is missing or wrong.
"""

from __future__ import annotations

import os

import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from shipper import deadline
from shipper.version import VERSION

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
    deadline.guard_pool_manager(api.rest_client.pool_manager)
    return api


def _in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ
