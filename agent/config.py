"""Settings of `moonin-agent run`, read once at start-up from the environment and config.yaml.

The agent accepts the environment Moonin's chart already sets (`PROJECT_ID`, `CLUSTER_ID`,
`CLUSTER_TOKEN`, `API_URL`, ...), a few variables of ours, and the `config.yaml` filters
mounted from a ConfigMap. Everything is parsed and checked here, once, so the rest of the
agent receives a frozen `Settings` and never reads `os.environ` itself. `moonin-agent
preview` reads only the collector's part (`CollectionSettings`: filters, switches, log
level), parsed by the same code, so it needs neither credentials nor an API URL.

Precedence: environment, then config.yaml, then the default. An environment variable that is
set but blank counts as unset (charts often render `value: ""`), and so does a config.yaml key
whose value is null. Lists in the environment are comma-separated; a list the user gives,
in either place, replaces the default (`ignore_namespaces: []` watches kube-system too).

How it fails: the first bad setting raises `ConfigError`, whose message is one line,
`<SETTING>: <what is wrong>`, printed by the CLI before it exits with status 2. The token
never appears in a message or in `repr(Settings)`: neither `CLUSTER_TOKEN` nor the content
or path of `CLUSTER_TOKEN_FILE` is echoed, and any message that would contain the token
anyway (say, pasted into the wrong variable) has it replaced.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import yaml

from kube import globs as resource_globs

Role = Literal["discovery", "scaling", "all"]
Stream = Literal["discovery", "scaling"]

ROLES: tuple[Role, ...] = ("discovery", "scaling", "all")
ROLE_STREAMS: dict[str, tuple[Stream, ...]] = {
    "discovery": ("discovery",),
    "scaling": ("scaling",),
    "all": ("discovery", "scaling"),
}
DEFAULT_API_URLS: dict[Stream, str] = {
    "discovery": "https://api-discover.moonin.app",
    "scaling": "https://api-scaling-rules.moonin.app",
}
LOG_LEVELS = ("debug", "info", "warning", "error")

# What messages call the file, whatever its path: the chart mounts it as config.yaml.
FILE_LABEL = "config.yaml"
FILE_KEYS = frozenset(
    {
        "log_level",
        "ignore_namespaces",
        "ignore_resources",
        "ignore_node_labels",
        "queue_dir",
        "queue_max_records",
        "queue_max_bytes",
        "batch_max_records",
        "batch_max_bytes",
        "linger_seconds",
        "shutdown_ship_seconds",
        "reconcile_interval_seconds",
        "heartbeat_seconds",
        "anti_entropy_seconds",
        "cloud_metadata",
        "collect_helm_releases",
        "collect_job_logs",
        "collect_events",
        "ca_bundle",
        "leader_election",
        "api_deadline_seconds",
        "api_max_answer_bytes",
        "kube_deadline_seconds",
    }
)
# Settings people may try to put into config.yaml that only the environment carries.
_ENVIRONMENT_ONLY = {
    "project_id": "PROJECT_ID",
    "cluster_id": "CLUSTER_ID",
    "cluster_token": "CLUSTER_TOKEN",
    "token": "CLUSTER_TOKEN",
    "cluster_token_file": "CLUSTER_TOKEN_FILE",
    "api_url": "API_URL",
    "discovery_api_url": "DISCOVERY_API_URL",
    "scaling_api_url": "SCALING_API_URL",
    "insecure_http": "MOONIN_INSECURE_HTTP",
    "health_addr": "HEALTH_ADDR",
    "pod_name": "POD_NAME",
    "pod_namespace": "POD_NAMESPACE",
}

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})
# Visible ASCII only: anything else cannot travel in an HTTP header.
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")
# Project and cluster ids go into URL paths and request bodies.
_IDENTIFIER = re.compile(r"[\x21-\x7e]{1,256}")
_IDENTIFIER_FORBIDDEN = frozenset("/?#%")
_TOKEN_FILE_LIMIT = 64 * 1024
_SHOWN_CHARS = 60
_REDACTED = "[REDACTED]"


class ConfigError(Exception):
    """Bad configuration. `str()` is one line: `<SETTING>: <what is wrong>`."""

    def __init__(self, message: str) -> None:
        # One line whatever went in: the CLI prints it as is.
        super().__init__(" ".join(message.splitlines()))


@dataclass(frozen=True, kw_only=True, repr=False)
class Settings:
    """Everything `moonin-agent run` is configured with; built by `load_settings`."""

    # The process.
    role: Role
    """Which workload this process is: `discovery`, `scaling` or `all` (both streams)."""
    config_file: str | None = None
    """The config.yaml that was read, if any."""
    log_level: str = "info"
    """One of debug, info, warning, error (`LOG_LEVEL` / `log_level`)."""
    health_addr: str = "0.0.0.0:8080"
    """`host:port` of /healthz, /readyz and /metrics (`HEALTH_ADDR`); see `split_host_port`."""
    pod_name: str | None = None
    """This pod's name (`POD_NAME`, from the downward API); the Lease holder identity."""
    pod_namespace: str | None = None
    """This pod's namespace (`POD_NAMESPACE`); where the Lease lives."""

    # Who we are to the platform.
    project_id: str
    """Moonin project id (`PROJECT_ID`)."""
    cluster_id: str
    """Moonin cluster id (`CLUSTER_ID`); part of every API path."""
    token: str | None = None
    """The cluster token from `CLUSTER_TOKEN`, stripped. Never printed."""
    token_file: str | None = None
    """Path of a file holding the token (`CLUSTER_TOKEN_FILE`); wins over `token` (it rotates)."""

    # Where records go.
    discovery_api_url: str | None = DEFAULT_API_URLS["discovery"]
    """Discovery API base URL without a trailing slash; None when the role does not ship there."""
    scaling_api_url: str | None = DEFAULT_API_URLS["scaling"]
    """Scaling API base URL without a trailing slash; None when the role does not ship there."""
    insecure_http: bool = False
    """Allow plain http:// API URLs (`MOONIN_INSECURE_HTTP`); tests and demos only."""
    ca_bundle: str | None = None
    """PEM file of CAs to trust instead of the system's (`MOONIN_CA_BUNDLE` / `ca_bundle`)."""
    api_deadline_seconds: float = 30.0
    """Total time of one Moonin API call: connecting, sending and the whole answer."""
    api_max_answer_bytes: int = 8 * 1024 * 1024
    """Bytes a templates or actions answer may have, counted after decompression."""

    # The outbox.
    queue_dir: str = "/var/lib/moonin-agent/queue"
    """Directory of the outbox files, owned by this process alone (`QUEUE_DIR` / `queue_dir`)."""
    queue_max_records: int = 1_000_000
    """Records held per stream before the oldest upserts are dropped."""
    queue_max_bytes: int = 400 * 1024 * 1024
    """Encoded bytes held per stream; keep it below the volume's size limit."""

    # Delivery.
    batch_max_records: int = 500
    """Records per POST (and per queue chunk)."""
    batch_max_bytes: int = 1024 * 1024
    """Encoded bytes per POST before gzip (and per queue chunk)."""
    linger_seconds: float = 0.2
    """How long a shipper waits for a batch to fill before sending what it has."""
    shutdown_ship_seconds: float = 10.0
    """On SIGTERM, how long the shippers keep draining before the process exits."""

    # Collection and scaling.
    ignore_namespaces: tuple[str, ...] = ("kube-system",)
    """Namespaces the collector does not watch."""
    ignore_resources: tuple[str, ...] = ()
    """Globs `<kind>/<name>` or `<kind>/<namespace>/<name>` of objects the collector skips."""
    ignore_node_labels: tuple[str, ...] = ()
    """Node label keys kept out of node records."""
    collect_helm_releases: bool = True
    """Read Helm release Secrets into release records."""
    collect_job_logs: bool = True
    """Read the last log lines of failed CronJob runs."""
    collect_events: bool = True
    """Watch Warning Events for the pod errors only they tell (sandbox, volume, probe,
    admission failures)."""
    leader_election: bool | None = None
    """Elect a leader through a Lease; None decides automatically (on when in-cluster)."""
    reconcile_interval_seconds: float = 30.0
    """Seconds between scaling reconcile cycles."""
    heartbeat_seconds: float = 60.0
    """Seconds between discovery heartbeats (each also refreshes cluster metadata)."""
    anti_entropy_seconds: float = 86400.0
    """Seconds between full re-sends with snapshots, one resource at a time (0: never)."""
    cloud_metadata: bool | None = None
    """Ask the cloud's metadata endpoints; None decides automatically (only in a pod)."""
    kube_deadline_seconds: float = 60.0
    """Total time of one Kubernetes call other than a watch (a list page, a get, a write)."""

    @property
    def streams(self) -> tuple[Stream, ...]:
        """The outbox streams this role produces and ships."""
        return ROLE_STREAMS[self.role]

    def __repr__(self) -> str:
        # Settings end up in logs and tracebacks; the token must not.
        shown = []
        for item in fields(self):
            value = getattr(self, item.name)
            text = repr(_REDACTED) if item.name == "token" and value is not None else repr(value)
            shown.append(f"{item.name}={text}")
        return f"Settings({', '.join(shown)})"


@dataclass(frozen=True, kw_only=True)
class CollectionSettings:
    """The collector's settings alone (see `Settings` for each): all `preview` reads."""

    log_level: str
    ignore_namespaces: tuple[str, ...]
    ignore_resources: tuple[str, ...]
    ignore_node_labels: tuple[str, ...]
    collect_helm_releases: bool
    collect_job_logs: bool
    collect_events: bool


def load_settings(
    role: str, environ: Mapping[str, str], *, config_file: str | None = None
) -> Settings:
    """Read and check every setting; `config_file` (from `--config`) wins over `CONFIG_FILE`."""
    with _token_scrubbed(environ):
        return _load(role, environ, config_file)


def load_collection_settings(
    environ: Mapping[str, str], *, config_file: str | None = None
) -> CollectionSettings:
    """Read and check the collector's settings only; the others are not looked at."""
    with _token_scrubbed(environ):
        _, file_values = _config_file(config_file, environ)
        return _collection(_Sources(environ, file_values))


@contextmanager
def _token_scrubbed(environ: Mapping[str, str]) -> Iterator[None]:
    """A `ConfigError` leaves with every form of the token removed from its message."""
    try:
        yield
    except ConfigError as e:
        # `from None`: the chained exception could hold a value the message leaves out.
        raise ConfigError(_scrub(str(e), _token_values(environ))) from None


def api_url_for(settings: Settings, stream: Stream) -> str:
    """Base URL of `stream`'s API. ValueError if this role does not ship that stream."""
    if stream not in ROLE_STREAMS["all"]:
        raise ValueError(f"unknown stream {stream!r}")
    url = settings.discovery_api_url if stream == "discovery" else settings.scaling_api_url
    if stream not in settings.streams or url is None:
        raise ValueError(f"role {settings.role} does not ship the {stream} stream")
    return url


def split_host_port(addr: str) -> tuple[str, int]:
    """`"0.0.0.0:8080"` -> `("0.0.0.0", 8080)`; `"[::]:8080"` -> `("::", 8080)`.

    An empty host (`":8080"`) means every interface. Raises ValueError naming the problem.
    """
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit():
        raise ValueError("expected host:port, like 0.0.0.0:8080")
    if int(port) > 65535:
        raise ValueError(f"port must be between 0 and 65535, got {port}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host or "[" in host or "]" in host:
        raise ValueError("an IPv6 host needs brackets, like [::]:8080")
    if any(char.isspace() for char in host):
        raise ValueError("the host contains whitespace")
    return host, int(port)


# --- assembling ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Raw:
    """A value the user gave, and the name a message about it uses."""

    value: object
    label: str


class _Sources:
    """Looks a setting up in the environment first, then in config.yaml."""

    def __init__(self, environ: Mapping[str, str], file_values: Mapping[str, object]) -> None:
        self._environ = environ
        self._file = file_values

    def get(self, env: str | None, key: str | None = None) -> _Raw | None:
        if env is not None:
            value = _env(self._environ, env)
            if value is not None:
                return _Raw(value, env)
        if key is not None and self._file.get(key) is not None:
            return _Raw(self._file[key], f"{FILE_LABEL}: {key}")
        return None

    def env(self, name: str) -> str | None:
        return _env(self._environ, name)


def _load(role: str, environ: Mapping[str, str], config_file: str | None) -> Settings:
    checked_role = _role(role)
    path, file_values = _config_file(config_file, environ)
    src = _Sources(environ, file_values)
    token, token_file = _token(src)
    insecure = _flag(src.get("MOONIN_INSECURE_HTTP"), False)
    discovery_url, scaling_url = _api_urls(checked_role, src, insecure=insecure)
    collection = _collection(src)
    return Settings(
        role=checked_role,
        config_file=path,
        log_level=collection.log_level,
        health_addr=_health_addr(src.get("HEALTH_ADDR")),
        pod_name=src.env("POD_NAME"),
        pod_namespace=src.env("POD_NAMESPACE"),
        project_id=_identifier(src, "PROJECT_ID"),
        cluster_id=_identifier(src, "CLUSTER_ID"),
        token=token,
        token_file=token_file,
        discovery_api_url=discovery_url,
        scaling_api_url=scaling_url,
        insecure_http=insecure,
        ca_bundle=_ca_bundle(src.get("MOONIN_CA_BUNDLE", "ca_bundle")),
        api_deadline_seconds=_seconds(
            src.get("API_DEADLINE_SECONDS", "api_deadline_seconds"),
            Settings.api_deadline_seconds,
            maximum=600,
            positive=True,
        ),
        api_max_answer_bytes=_integer(
            src.get("API_MAX_ANSWER_BYTES", "api_max_answer_bytes"),
            Settings.api_max_answer_bytes,
            minimum=64 * 1024,
            # The answer is held whole while it is decoded: it must fit the pod's memory.
            maximum=64 * 1024 * 1024,
        ),
        queue_dir=_path(src.get("QUEUE_DIR", "queue_dir"), Settings.queue_dir),
        queue_max_records=_integer(
            src.get("QUEUE_MAX_RECORDS", "queue_max_records"), Settings.queue_max_records
        ),
        queue_max_bytes=_integer(
            src.get("QUEUE_MAX_BYTES", "queue_max_bytes"), Settings.queue_max_bytes
        ),
        batch_max_records=_integer(
            src.get("BATCH_MAX_RECORDS", "batch_max_records"), Settings.batch_max_records
        ),
        batch_max_bytes=_integer(
            src.get("BATCH_MAX_BYTES", "batch_max_bytes"), Settings.batch_max_bytes
        ),
        linger_seconds=_seconds(
            src.get("LINGER_SECONDS", "linger_seconds"), Settings.linger_seconds, maximum=60
        ),
        shutdown_ship_seconds=_seconds(
            src.get("SHUTDOWN_SHIP_SECONDS", "shutdown_ship_seconds"),
            Settings.shutdown_ship_seconds,
            maximum=3600,
        ),
        ignore_namespaces=collection.ignore_namespaces,
        ignore_resources=collection.ignore_resources,
        ignore_node_labels=collection.ignore_node_labels,
        collect_helm_releases=collection.collect_helm_releases,
        collect_job_logs=collection.collect_job_logs,
        collect_events=collection.collect_events,
        leader_election=_optional_flag(src.get("LEADER_ELECTION", "leader_election")),
        reconcile_interval_seconds=_seconds(
            src.get("RECONCILE_INTERVAL_SECONDS", "reconcile_interval_seconds"),
            Settings.reconcile_interval_seconds,
            maximum=3600,
            positive=True,
        ),
        cloud_metadata=_optional_flag(src.get("CLOUD_METADATA", "cloud_metadata")),
        heartbeat_seconds=_seconds(
            src.get("HEARTBEAT_SECONDS", "heartbeat_seconds"),
            Settings.heartbeat_seconds,
            maximum=3600,
            positive=True,
        ),
        anti_entropy_seconds=_seconds(
            src.get("ANTI_ENTROPY_SECONDS", "anti_entropy_seconds"),
            Settings.anti_entropy_seconds,
            maximum=30 * 86400,
        ),
        kube_deadline_seconds=_seconds(
            src.get("KUBE_DEADLINE_SECONDS", "kube_deadline_seconds"),
            Settings.kube_deadline_seconds,
            maximum=600,
            positive=True,
        ),
    )


def _collection(src: _Sources) -> CollectionSettings:
    return CollectionSettings(
        log_level=_log_level(src.get("LOG_LEVEL", "log_level")),
        ignore_namespaces=_names(src.get(None, "ignore_namespaces"), Settings.ignore_namespaces),
        ignore_resources=_resource_globs(src.get("IGNORE_RESOURCES", "ignore_resources")),
        ignore_node_labels=_names(src.get(None, "ignore_node_labels"), Settings.ignore_node_labels),
        collect_helm_releases=_flag(src.get(None, "collect_helm_releases"), True),
        collect_job_logs=_flag(src.get(None, "collect_job_logs"), True),
        collect_events=_flag(src.get("COLLECT_EVENTS", "collect_events"), True),
    )


def _env(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _role(role: str) -> Role:
    for known in ROLES:
        if role == known:
            return known
    raise ConfigError(f"--role: expected one of {', '.join(ROLES)}, got {_describe(role)}")


# --- config.yaml -----------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: the second one would silently win."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # type: ignore[override]
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key; SafeLoader reports it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def _config_file(
    argument: str | None, environ: Mapping[str, str]
) -> tuple[str | None, dict[str, object]]:
    if argument:
        path, label = argument, "--config"
    elif (from_env := _env(environ, "CONFIG_FILE")) is not None:
        path, label = from_env, "CONFIG_FILE"
    else:
        return None, {}
    return path, _read_config_file(path, label)


def _read_config_file(path: str, label: str) -> dict[str, object]:
    try:
        content = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{label}: {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{label}: {path} is a directory, not a file") from None
    except OSError as e:
        raise ConfigError(f"{label}: cannot read {path} ({e.strerror or e})") from None
    try:
        data = yaml.load(content, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(f"{label}: {path} is not valid YAML ({_yaml_problem(e)})") from None
    if data is None:  # empty, or only comments
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: {path} must hold a mapping of settings, got {_describe(data)}")
    for key in data:
        _check_file_key(key)
    return data


def _check_file_key(key: object) -> None:
    if not isinstance(key, str):
        raise ConfigError(f"{FILE_LABEL}: setting names are strings, got {_describe(key)}")
    if key in FILE_KEYS:
        return
    if key in _ENVIRONMENT_ONLY:
        raise ConfigError(
            f"{FILE_LABEL}: {key}: not read from {FILE_LABEL}; "
            f"set {_ENVIRONMENT_ONLY[key]} in the environment"
        )
    close = difflib.get_close_matches(key, sorted(FILE_KEYS), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ConfigError(f"{FILE_LABEL}: unknown setting {_describe(key)}{hint}")


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError):
        problem = error.problem or error.context or "cannot parse"
        mark = error.problem_mark or error.context_mark
        if mark is not None:
            return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
        return problem
    return str(error)


# --- identity and credentials ----------------------------------------------------------------


def _identifier(src: _Sources, name: str) -> str:
    value = src.env(name)
    if value is None:
        raise ConfigError(f"{name}: not set")
    if not _IDENTIFIER.fullmatch(value) or _IDENTIFIER_FORBIDDEN & set(value):
        raise ConfigError(
            f"{name}: expected up to 256 visible ASCII characters without '/', '?', '#' "
            f"or '%', got {_describe(value)}"
        )
    return value


def _token(src: _Sources) -> tuple[str | None, str | None]:
    # Neither the value nor the file's path or content goes into a message.
    token = src.env("CLUSTER_TOKEN")
    if token is not None and not _HEADER_SAFE.fullmatch(token):
        raise ConfigError(
            "CLUSTER_TOKEN: holds whitespace, control or non-ASCII characters that cannot be "
            "sent in an HTTP header (value not shown)"
        )
    token_file = src.env("CLUSTER_TOKEN_FILE")
    if token_file is not None:
        _check_token_file(token_file)
    if token is None and token_file is None:
        raise ConfigError("CLUSTER_TOKEN: not set; set CLUSTER_TOKEN or CLUSTER_TOKEN_FILE")
    return token, token_file


def _check_token_file(path: str) -> None:
    try:
        with open(path, "rb") as handle:
            content = handle.read(_TOKEN_FILE_LIMIT + 1)
    except FileNotFoundError:
        raise ConfigError("CLUSTER_TOKEN_FILE: the file does not exist") from None
    except IsADirectoryError:
        raise ConfigError("CLUSTER_TOKEN_FILE: is a directory, not a file") from None
    except OSError as e:
        raise ConfigError(f"CLUSTER_TOKEN_FILE: cannot be read ({e.strerror or 'error'})") from None
    if len(content) > _TOKEN_FILE_LIMIT:
        raise ConfigError("CLUSTER_TOKEN_FILE: larger than 64 KiB; expected only the token")
    try:
        token = content.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError("CLUSTER_TOKEN_FILE: is not UTF-8 text") from None
    if not token:
        raise ConfigError("CLUSTER_TOKEN_FILE: the file is empty")
    if not _HEADER_SAFE.fullmatch(token):
        raise ConfigError(
            "CLUSTER_TOKEN_FILE: holds whitespace, control or non-ASCII characters that "
            "cannot be sent in an HTTP header (content not shown)"
        )


def _token_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    """Every form of the token a message could carry; best effort, never raises."""
    values = []
    raw = environ.get("CLUSTER_TOKEN")
    if raw:
        values += [raw, raw.strip()]
    path = (environ.get("CLUSTER_TOKEN_FILE") or "").strip()
    if path:
        try:
            with open(path, "rb") as handle:
                content = handle.read(_TOKEN_FILE_LIMIT).decode("utf-8", "replace")
        except OSError:
            content = ""
        values += [content, content.strip()]
    return tuple(value for value in values if value)


def _scrub(message: str, secrets: tuple[str, ...]) -> str:
    for secret in sorted(set(secrets), key=len, reverse=True):
        message = message.replace(secret, _REDACTED)
    return message


# --- the APIs --------------------------------------------------------------------------------


def _api_urls(role: Role, src: _Sources, *, insecure: bool) -> tuple[str | None, str | None]:
    if role == "all":
        if src.env("API_URL") is not None:
            raise ConfigError(
                "API_URL: ambiguous with --role all; set DISCOVERY_API_URL and SCALING_API_URL"
            )
        return (
            _api_url(src, "DISCOVERY_API_URL", "discovery", insecure=insecure),
            _api_url(src, "SCALING_API_URL", "scaling", insecure=insecure),
        )
    own_name = f"{role.upper()}_API_URL"
    general, own = src.env("API_URL"), src.env(own_name)
    if general is not None and own is not None and general.rstrip("/") != own.rstrip("/"):
        raise ConfigError(f"API_URL: conflicts with {own_name}; set only API_URL")
    name = "API_URL" if general is not None or own is None else own_name
    url = _api_url(src, name, role, insecure=insecure)
    return (url, None) if role == "discovery" else (None, url)


def _api_url(src: _Sources, name: str, stream: Stream, *, insecure: bool) -> str:
    value = src.env(name)
    if value is None:
        return DEFAULT_API_URLS[stream]
    try:
        return _checked_url(value, insecure=insecure)
    except ValueError as e:
        raise ConfigError(f"{name}: {e}") from None


def _checked_url(value: str, *, insecure: bool) -> str:
    """The URL without a trailing slash; ValueError with a message fit for the user."""
    # A value with "@" may carry credentials: it is never echoed.
    shown = "a value with '@' (not shown)" if "@" in value else _describe(value)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError:
        raise ValueError(f"not a valid URL, got {shown}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an https:// URL with a host, got {shown}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not contain credentials (user:password@); the token is separate")
    if any(char.isspace() for char in value):
        raise ValueError(f"contains whitespace, got {shown}")
    if parts.query or parts.fragment:
        raise ValueError(f"must not have a query or fragment, got {shown}")
    if scheme == "http" and not insecure:
        raise ValueError(
            "plain http:// is refused; set MOONIN_INSECURE_HTTP=true to allow it "
            "(never in production)"
        )
    return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def _ca_bundle(raw: _Raw | None) -> str | None:
    if raw is None:
        return None
    path = _path(raw, "")
    if not os.path.exists(path):
        raise _error(raw, f"{path} does not exist")
    if not os.path.isfile(path):
        raise _error(raw, f"{path} is not a file")
    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError as e:  # before OSError: it is one
        raise _error(raw, f"{path} holds no usable PEM certificate ({e.reason or e})") from None
    except OSError as e:
        raise _error(raw, f"cannot read {path} ({e.strerror or e})") from None
    return path


# --- plain values ----------------------------------------------------------------------------


def _error(raw: _Raw, problem: str) -> ConfigError:
    return ConfigError(f"{raw.label}: {problem}")


def _describe(value: object) -> str:
    """A short, one-line rendering of what the user gave, for messages."""
    if isinstance(value, str):
        text = value if len(value) <= _SHOWN_CHARS else value[: _SHOWN_CHARS - 3] + "..."
        return json.dumps(text)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _integer(
    raw: _Raw | None, default: int, *, minimum: int = 1, maximum: int | None = None
) -> int:
    if raw is None:
        return default
    value = raw.value
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if number is None:
        raise _error(raw, f"expected an integer, got {_describe(value)}")
    if number < minimum:
        raise _error(raw, f"must be at least {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise _error(raw, f"must be at most {maximum}, got {number}")
    return number


def _seconds(raw: _Raw | None, default: float, *, maximum: float, positive: bool = False) -> float:
    if raw is None:
        return default
    value = raw.value
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number):
        raise _error(raw, f"expected a number of seconds, got {_describe(value)}")
    if positive and number <= 0:
        raise _error(raw, f"must be greater than 0, got {_describe(value)}")
    if number < 0:
        raise _error(raw, f"must not be negative, got {_describe(value)}")
    if number > maximum:
        raise _error(raw, f"must be at most {maximum:g}, got {_describe(value)}")
    return number


def _flag(raw: _Raw | None, default: bool) -> bool:
    if raw is None:
        return default
    parsed = _parse_flag(raw.value)
    if parsed is None:
        raise _error(raw, f"expected true or false, got {_describe(raw.value)}")
    return parsed


def _optional_flag(raw: _Raw | None) -> bool | None:
    """A flag where unset (or "auto") leaves the decision to the agent."""
    if raw is None or (isinstance(raw.value, str) and raw.value.strip().lower() == "auto"):
        return None
    parsed = _parse_flag(raw.value)
    if parsed is None:
        raise _error(raw, f"expected true, false or auto, got {_describe(raw.value)}")
    return parsed


def _parse_flag(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    return None


def _log_level(raw: _Raw | None) -> str:
    if raw is None:
        return "info"
    level = raw.value.strip().lower() if isinstance(raw.value, str) else None
    level = "warning" if level == "warn" else level
    if level not in LOG_LEVELS:
        raise _error(raw, f"expected one of {', '.join(LOG_LEVELS)}, got {_describe(raw.value)}")
    return level


def _health_addr(raw: _Raw | None) -> str:
    if raw is None:
        return Settings.health_addr
    addr = str(raw.value)  # only the environment carries it
    try:
        split_host_port(addr)
    except ValueError as e:
        raise _error(raw, f"{e}, got {_describe(addr)}") from None
    return addr


def _path(raw: _Raw | None, default: str) -> str:
    if raw is None:
        return default
    if not isinstance(raw.value, str) or not raw.value.strip():
        raise _error(raw, f"expected a path, got {_describe(raw.value)}")
    if "\0" in raw.value:
        raise _error(raw, "a path cannot contain a NUL character")
    return raw.value.strip()


def _names(raw: _Raw | None, default: tuple[str, ...]) -> tuple[str, ...]:
    """A list from the file, or comma-separated from the environment; replaces the default."""
    if raw is None:
        return default
    value = raw.value
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, list):
        items = [_list_item(raw, index, item) for index, item in enumerate(value, start=1)]
    else:
        raise _error(raw, f"expected a list of strings, got {_describe(value)}")
    for item in items:
        if any(char.isspace() for char in item):
            raise _error(raw, f"entry {_describe(item)} contains whitespace")
    return tuple(dict.fromkeys(items))  # drop repeats, keep the order


def _list_item(raw: _Raw, index: int, item: object) -> str:
    if not isinstance(item, str) or not item.strip():
        raise _error(raw, f"entry {index}: expected a non-empty string, got {_describe(item)}")
    return item.strip()


def _resource_globs(raw: _Raw | None) -> tuple[str, ...]:
    if raw is None:
        return Settings.ignore_resources
    globs = _names(raw, Settings.ignore_resources)
    for entry in globs:
        try:
            resource_globs.parse(entry)  # the one reading of a glob, every role's
        except ValueError as exc:
            raise _error(raw, f"entry {_describe(entry)}: {exc}") from None
    return globs
