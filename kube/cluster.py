"""Which cluster, and how to authenticate: the pod's service account or a kubeconfig.

`load_target` applies the one rule every role and command follows (the package docstring,
`kube/__init__.py`, states it): an explicit `--kubeconfig` or `--context` wins over the
service account of the pod, which wins over `KUBECONFIG` and `~/.kube/config`. The caller
passes the environment in, so every role of one process reads the same one.

Every role talks to the API server through the agent's own HTTP client (`kube.api`), so it
needs only the server URL, the TLS trust and a bearer token or client certificate. This
module reads those from the service account, or from the common kubeconfig shapes (token,
token file, client certificate, CA file or data, insecure-skip-tls-verify). It does not
import the kubernetes package for that: its import alone costs ~45 MiB, most of the agent's
budget. Only a kubeconfig whose user authenticates through an `exec` plugin or an
`auth-provider` (cloud CLIs on a laptop) is handed to `kubernetes.config`, imported then:
the package builds the connection (and refreshes such a token), never carries a request.

How it fails: `KubeConfigError`, one line naming what is missing or wrong.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Bound service-account tokens rotate (the kubelet swaps the file in): re-read it as soon as
# it changes, and at least this often (a rewrite within the file system's timestamp
# granularity leaves the same size and mtime).
TOKEN_FILE_RELOAD_SECONDS = 60.0


class KubeConfigError(Exception):
    """The cluster connection cannot be configured; the message is one line."""


@dataclass(frozen=True, slots=True)
class KubeTarget:
    """Everything needed to reach one API server."""

    server: str
    verify: ssl.SSLContext | bool
    token: Callable[[], str | None]
    in_cluster: bool = False
    context: str | None = None
    kubeconfig: tuple[Path, ...] = ()
    """The kubeconfig files the target was read from, merged in this order; none in a pod."""
    service_account: Path | None = None
    """In a pod: the service account's directory (`token`, `ca.crt`, `namespace`)."""
    token_rejected: Callable[[], None] = lambda: None
    """Called when the API server answers 401: a token read from a file is read again."""


class TokenFile:
    """A bearer token kept in a file, re-read when the file changes (a new inode, size or
    mtime: one stat a call) and every TOKEN_FILE_RELOAD_SECONDS. A token the kubelet
    rotated is used from the next request on, so the old one may be revoked at once."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._token: str | None = None
        self._read_at = float("-inf")
        self._seen: tuple[int, int, int] | None = None

    def __call__(self) -> str | None:
        with self._lock:
            seen = self._seen
            with contextlib.suppress(OSError):
                found = self._path.stat()
                seen = (found.st_ino, found.st_size, found.st_mtime_ns)
            stale = time.monotonic() - self._read_at >= TOKEN_FILE_RELOAD_SECONDS
            if stale or seen != self._seen:
                # On a read error keep the token we have; the API server says if it expired.
                with contextlib.suppress(OSError):
                    self._token = self._path.read_text().strip() or self._token
                self._read_at = time.monotonic()
                self._seen = seen
            return self._token

    def rejected(self) -> None:
        """The API server refused the token: read the file again at the next call. The
        kubelet may have rotated it since, and the old token may be revoked already."""
        with self._lock:
            self._read_at = float("-inf")


def load_target(
    environ: Mapping[str, str],
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    service_account: Path | None = None,
) -> KubeTarget:
    """The cluster for the one rule: `--kubeconfig`, else `--context` in the kubeconfig of
    `KUBECONFIG` or ~/.kube/config, else the pod's service account (`service_account`,
    default SERVICE_ACCOUNT_DIR) when `KUBERNETES_SERVICE_HOST` is set, else that kubeconfig's
    current context. `environ` is the process environment, passed in."""
    if kubeconfig is None and context is None and environ.get("KUBERNETES_SERVICE_HOST"):
        return _in_cluster(environ, service_account or SERVICE_ACCOUNT_DIR)
    paths = [kubeconfig] if kubeconfig else _kubeconfig_paths(environ)
    found = tuple(Path(path) for path in paths if Path(path).is_file())
    if found:
        return _from_kubeconfig(found, context)
    if kubeconfig:
        raise KubeConfigError(f"--kubeconfig: {kubeconfig} does not exist")
    if context is not None:
        raise KubeConfigError(
            f"--context {context}: no kubeconfig to find it in (set KUBECONFIG or pass "
            "--kubeconfig)"
        )
    raise KubeConfigError(
        "no cluster to talk to: not running in a pod, and no kubeconfig "
        "(set KUBECONFIG or pass --kubeconfig)"
    )


def _kubeconfig_paths(environ: Mapping[str, str]) -> list[str]:
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [str(Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config")]


def _in_cluster(environ: Mapping[str, str], account: Path) -> KubeTarget:
    host = environ["KUBERNETES_SERVICE_HOST"]
    port = environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"  # an IPv6 service address
    ca = account / "ca.crt"
    token = account / "token"
    if not token.is_file():
        raise KubeConfigError(f"in-cluster: service account token {token} is missing")
    try:
        verify = ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as exc:
        raise KubeConfigError(f"in-cluster: cannot load the cluster CA {ca}: {exc}") from exc
    token_file = TokenFile(token)
    return KubeTarget(
        server=f"https://{host}:{port}",
        verify=verify,
        token=token_file,
        token_rejected=token_file.rejected,
        in_cluster=True,
        service_account=account,
    )


def _from_kubeconfig(paths: tuple[Path, ...], context_name: str | None) -> KubeTarget:
    """The context of the kubeconfig files merged as kubectl merges a `KUBECONFIG` list: the
    first file that names a context, cluster or user wins it, the first current-context
    counts, and a relative path is read from the folder of the file that holds it."""
    documents = [(path, _document(path)) for path in paths]
    shown = os.pathsep.join(str(path) for path in paths)
    name = context_name or next(
        (doc["current-context"] for _, doc in documents if doc.get("current-context")), None
    )
    if not name:
        raise KubeConfigError(f"kubeconfig {shown}: no current-context; pass --context")
    context, _ = _named(documents, "contexts", "context", name, shown)
    cluster, cluster_dir = _named(documents, "clusters", "cluster", context.get("cluster"), shown)
    user, user_dir = (
        _named(documents, "users", "user", context.get("user"), shown)
        if context.get("user")
        else ({}, cluster_dir)
    )
    if "exec" in user or "auth-provider" in user:
        return _through_client_library(paths, name)
    server = cluster.get("server")
    if not server:
        raise KubeConfigError(f"kubeconfig {shown}: cluster of context {name} has no server")
    token, token_rejected = _token(user, user_dir)
    return KubeTarget(
        server=str(server).rstrip("/"),
        verify=_tls(cluster, cluster_dir, user, user_dir),
        token=token,
        token_rejected=token_rejected,
        context=name,
        kubeconfig=paths,
    )


def _document(path: Path) -> Mapping[str, Any]:
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).splitlines())
        raise KubeConfigError(f"cannot load the cluster configuration ({path}): {detail}") from exc
    if not isinstance(document, dict):
        raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig (expected a mapping)")
    return document


def _named(
    documents: list[tuple[Path, Mapping[str, Any]]],
    section: str,
    field: str,
    name: object,
    shown: str,
) -> tuple[dict[str, Any], Path]:
    """The first entry so named, and the folder of the file it came from."""
    for path, document in documents:
        for entry in document.get(section) or []:
            if entry.get("name") == name:
                return entry.get(field) or {}, path.parent
    raise KubeConfigError(f"kubeconfig {shown}: no {field} named {name!r}")


def _resolve(value: str, base: Path) -> str:
    candidate = Path(value).expanduser()
    return str(candidate if candidate.is_absolute() else base / candidate)


def _tls(
    cluster: Mapping[str, Any], base: Path, user: Mapping[str, Any], user_base: Path
) -> ssl.SSLContext | bool:
    if not str(cluster.get("server", "")).startswith("https://"):
        return False  # plain http (a local test server): there is no TLS to configure
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
        context = ssl.create_default_context(cadata=pem)
    elif cluster.get("certificate-authority"):
        context = ssl.create_default_context(
            cafile=_resolve(cluster["certificate-authority"], base)
        )
    else:
        context = ssl.create_default_context()
    _client_certificate(context, user, user_base)
    return context


def _client_certificate(context: ssl.SSLContext, user: Mapping[str, Any], base: Path) -> None:
    if user.get("client-certificate-data") and user.get("client-key-data"):
        # ssl loads certificates only from files: write them privately, load, delete.
        with tempfile.TemporaryDirectory() as scratch:
            cert, key = Path(scratch) / "cert.pem", Path(scratch) / "key.pem"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.touch(0o600)
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            context.load_cert_chain(str(cert), str(key))
    elif user.get("client-certificate") and user.get("client-key"):
        context.load_cert_chain(
            _resolve(user["client-certificate"], base), _resolve(user["client-key"], base)
        )


def _token(
    user: Mapping[str, Any], base: Path
) -> tuple[Callable[[], str | None], Callable[[], None]]:
    """The user's token, and what to do when the server refuses it."""
    if user.get("tokenFile"):
        token_file = TokenFile(Path(_resolve(user["tokenFile"], base)))
        return token_file, token_file.rejected
    fixed = user.get("token")
    return (lambda: fixed), (lambda: None)


def client_configuration(paths: tuple[Path, ...], context: str | None) -> Any:
    """The kubernetes package's `Configuration` for one context of the kubeconfig files
    (which the library merges as kubectl does): how an `exec` or `auth-provider` user is
    loaded. Imports the package (~45 MiB), so it is called only for such a user."""
    from kubernetes import client, config

    configuration = client.Configuration()
    shown = os.pathsep.join(str(path) for path in paths)
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]  # the library is untyped
            config_file=shown,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except Exception as exc:  # the library raises plain exceptions for every problem
        detail = " ".join(str(exc).splitlines()) or type(exc).__name__
        raise KubeConfigError(f"cannot load the cluster configuration ({shown}): {detail}") from exc
    return configuration


def _through_client_library(paths: tuple[Path, ...], context: str) -> KubeTarget:
    configuration = client_configuration(paths, context)

    def token() -> str | None:
        value = configuration.get_api_key_with_prefix("BearerToken")
        return value.removeprefix("Bearer ").strip() if value else None

    verify: ssl.SSLContext | bool = False
    if configuration.host.startswith("https://"):
        verify = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if not configuration.verify_ssl:
            verify.check_hostname = False
            verify.verify_mode = ssl.CERT_NONE
        if configuration.cert_file and configuration.key_file:
            verify.load_cert_chain(configuration.cert_file, configuration.key_file)
    return KubeTarget(
        server=configuration.host, verify=verify, token=token, context=context, kubeconfig=paths
    )
