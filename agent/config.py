"""Settings of `moonin-agent run`, read once at start-up from the environment and config.yaml.

The agent accepts the environment Moonin's chart already sets (`PROJECT_ID`, `CLUSTER_ID`,
`CLUSTER_TOKEN`, `API_URL`, ...), a few variables of ours, and the `config.yaml` filters
mounted from a ConfigMap. Everything is parsed and checked here, once, so the rest of the
agent receives a frozen `Settings` and never reads `os.environ` itself.

The settings are a tree whose branches mirror the process: `process` (logs, health
server), `identity` (who we are to the platform and to the other replicas), `api` (the
Moonin APIs), `kube` (the Kubernetes client), `outbox` (the queue and its shipping),
`discovery` (the collector, its Lease and heartbeat), `scaling` and `filters` (what both
roles leave alone). Each component receives its branch as it is, never the tree.

Each setting is declared once, in `SETTINGS`, one row under a comment saying what it does:
the field it fills (its path through the branches), its environment variable, its
config.yaml key, its parser with the bounds. Its default is that field's default, written
where the field is: on the branches below for the process's own settings, or in the
dataclass a component defines for itself (the collector's `DiscoverySettings`, the API
client's `ApiSettings`, the shipper's `ShipperSettings`, the outbox's `Bounds`, the
informer's `InformerSettings`, the Lease's `LeaseSettings`). The README's settings table and
the chart's `config.extra` keys are checked against `SETTINGS` by the tests. What depends on
several settings (the token, the API URLs of a role, the Lease's timing order) is read by
the functions below the table. `moonin-agent preview` reads only the log level, the filters
and the collector's branch, with the same declarations, so it needs neither credentials nor
an API URL.

Precedence: environment, then config.yaml, then the default. An environment variable that is
set but blank counts as unset (charts often render `value: ""`), and so does a config.yaml key
whose value is null. Lists in the environment are comma-separated; a list the user gives,
in either place, replaces the default (`ignore_namespaces: []` watches kube-system too).

How it fails: the first bad setting raises `ConfigError`, whose message is one line,
`<SETTING>: <what is wrong>`, printed by the CLI before it exits with status 2. The token
never appears in a message or in a `repr` of the settings: neither `CLUSTER_TOKEN` nor the content
or path of `CLUSTER_TOKEN_FILE` is echoed, and any message that would contain the token
anyway (say, pasted into the wrong variable) has it replaced.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar, get_type_hints

import yaml

from agent import values
from agent.values import ConfigError as ConfigError  # the loaders raise it
from agent.values import Raw, describe
from collector.leader import LeaseSettings
from collector.settings import CollectorSettings, DiscoverySettings, FilterSettings
from kube.api import DEADLINE_SECONDS as KUBE_DEADLINE_SECONDS
from scheduler.gitops import CONFLICTS, Conflicts
from shipper.client import ApiSettings, checked_base_url, shown_url
from shipper.outbox import Bounds
from shipper.shipper import ShipperSettings
from shipper.token import MIN_TOKEN_CHARS, token_problem

T = TypeVar("T")
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

# What messages call the file, whatever its path: the chart mounts it as config.yaml.
FILE_LABEL = "config.yaml"
# Project and cluster ids go into URL paths and request bodies.
_IDENTIFIER = re.compile(r"[\x21-\x7e]{1,256}")
_IDENTIFIER_FORBIDDEN = frozenset("/?#%")
# What a setting's name in config.yaml looks like.
_SETTING_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_TOKEN_FILE_LIMIT = 64 * 1024
_REDACTED = "[REDACTED]"


# --- the branches ------------------------------------------------------------------------------
# One dataclass per branch, each field's default and docstring written once: here for the
# branches of the process itself, in the component's own module for the others (the API
# client's `ApiSettings`, the outbox's `Bounds`, the shipper's `ShipperSettings`, the
# collector's `DiscoverySettings` and `FilterSettings`).


@dataclass(frozen=True, kw_only=True)
class ProcessSettings:
    log_level: str = "info"
    """debug, info, warning or error."""
    health_addr: str = "0.0.0.0:8080"
    """Where `/healthz`, `/readyz` and `/metrics` listen."""


@dataclass(frozen=True, kw_only=True, repr=False)
class IdentitySettings:
    """Who this process is, to the platform and to the other replicas."""

    project_id: str
    cluster_id: str
    token: str | None = None
    """The cluster token from `CLUSTER_TOKEN`, stripped. Never printed."""
    token_file: str | None = None
    """Path of a file holding the token (`CLUSTER_TOKEN_FILE`); wins over `token` (it rotates)."""
    pod_name: str | None = None
    """From the downward API: the Lease holder's identity."""
    pod_namespace: str | None = None
    """From the downward API: where the Lease lives."""

    def __repr__(self) -> str:
        # Settings end up in logs and tracebacks; the token must not.
        return _repr(self, lambda name, value: repr(_REDACTED) if name == "token" else None)


@dataclass(frozen=True, kw_only=True, repr=False)
class MooninApiSettings:
    """Where records and events go, and how the Moonin API client reaches them."""

    discovery_url: str | None = DEFAULT_API_URLS["discovery"]
    """Discovery API base URL without a trailing slash; None when the role does not ship there."""
    scaling_url: str | None = DEFAULT_API_URLS["scaling"]
    """Scaling API base URL without a trailing slash; None when the role does not ship there."""
    client: ApiSettings = field(default_factory=ApiSettings)

    def __repr__(self) -> str:
        # A URL's path prefix may be a tenant's secret; logs show scheme, host and port.
        return _repr(
            self,
            lambda name, value: repr(shown_url(str(value))) if name.endswith("_url") else None,
        )


@dataclass(frozen=True, kw_only=True)
class KubeSettings:
    deadline_seconds: float = KUBE_DEADLINE_SECONDS
    """Total time of one Kubernetes call other than a watch."""
    scaling_connect_timeout_seconds: float = 5.0
    """How long connecting to the API server may take, for the scaling role's calls."""
    scaling_read_timeout_seconds: float = 20.0
    """Silence in an API server's answer that ends a scaling role's call: shorter than
    discovery's, so a cycle ends well before the next one."""


@dataclass(frozen=True, kw_only=True)
class OutboxSettings:
    queue_dir: str = "/var/lib/moonin-agent/queue"
    """The outbox directory (one process per directory); the role's stores sit beside it."""
    bounds: Bounds = field(default_factory=Bounds)
    shipping: ShipperSettings = field(default_factory=ShipperSettings)
    shutdown_ship_seconds: float = 10.0
    """How long SIGTERM keeps shipping before the process exits."""


@dataclass(frozen=True, kw_only=True)
class ScalingSettings:
    reconcile_interval_seconds: float = 30.0
    """The scaling reconcile period."""
    gitops_conflicts: Conflicts = "yield"
    """What a GitOps tool syncing a window's bounds back does: `yield` (the window is over,
    reverted as overridden) or `reassert` (the window is applied again)."""
    reassert_seconds: float = 300.0
    """`reassert`: the least time between two re-asserts of one window."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything `moonin-agent run` is configured with, one branch per part of the process;
    built by `load_settings`. Each component receives its branch, not the tree."""

    role: Role
    """Which workload this process is: `discovery`, `scaling` or `all` (both streams)."""
    config_file: str | None = None
    """The config.yaml that was read, if any."""
    process: ProcessSettings = field(default_factory=ProcessSettings)
    identity: IdentitySettings
    api: MooninApiSettings = field(default_factory=MooninApiSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    outbox: OutboxSettings = field(default_factory=OutboxSettings)
    discovery: DiscoverySettings = field(default_factory=DiscoverySettings)
    scaling: ScalingSettings = field(default_factory=ScalingSettings)
    filters: FilterSettings = field(default_factory=FilterSettings)

    @property
    def streams(self) -> tuple[Stream, ...]:
        """The outbox streams this role produces and ships."""
        return ROLE_STREAMS[self.role]


def _repr(item: Any, shown: Callable[[str, object], str | None]) -> str:
    """`Name(field=value, ...)`, with what `shown` gives in place of a field's own repr."""
    parts = []
    for each in fields(item):
        value = getattr(item, each.name)
        text = None if value is None else shown(each.name, value)
        parts.append(f"{each.name}={repr(value) if text is None else text}")
    return f"{type(item).__name__}({', '.join(parts)})"


@dataclass(frozen=True, kw_only=True)
class PreviewSettings:
    """What `moonin-agent preview` reads: no credentials, no API URL."""

    log_level: str
    collection: CollectorSettings


@dataclass(frozen=True)
class Setting:
    """One setting, declared once: what it fills, where it is read, how it is checked.

    `SETTINGS` gives them positionally, one a row, under a comment that says what it does.
    """

    field: str
    """The field it fills: its path from `Settings` through the branches, dot-separated."""
    env: str | None
    """The environment variable, if the environment carries it."""
    key: str | None
    """The config.yaml key, if config.yaml carries it."""
    parse: values.Parser
    """Checks what the user gave (with the bounds) and returns the value."""

    @property
    def branch(self) -> str:
        return self.field.partition(".")[0]

    @property
    def name(self) -> str:
        return self.field.rpartition(".")[2]

    @property
    def default(self) -> object:
        """The default of the field it fills; `dataclasses.MISSING` when it is required."""
        owner: type[Any] = Settings
        *branches, name = self.field.split(".")
        for branch in branches:
            owner = get_type_hints(owner)[branch]
        found = next(item for item in fields(owner) if item.name == name)
        if found.default_factory is not dataclasses.MISSING:
            return found.default_factory()
        return found.default


def _identifier(raw: Raw) -> str:
    value = str(raw.value)
    if not _IDENTIFIER.fullmatch(value) or _IDENTIFIER_FORBIDDEN & set(value):
        raise values.error(
            raw,
            "expected up to 256 visible ASCII characters without '/', '?', '#' "
            f"or '%', got {describe(value)}",
        )
    return value


def _health_addr(raw: Raw) -> str:
    addr = str(raw.value)  # only the environment carries it
    try:
        split_host_port(addr)
    except ValueError as e:
        raise values.error(raw, f"{e}, got {describe(addr)}") from None
    return addr


# Bounds: every number has a floor and a ceiling a real deployment could want; named once
# where several settings share them. A period's floor keeps its loop from spinning.
# One call to an API, Moonin's or Kubernetes', other than a watch.
_CALL_DEADLINE = values.seconds(minimum=1, maximum=600)
_HOUR = values.seconds(minimum=0, maximum=3600)
# An API answer is held whole while it is decoded: it must fit the pod's memory.
_ANSWER_BYTES = values.integer(minimum=64 * 1024, maximum=64 * 1024 * 1024)
# A batch is one POST body and one queue chunk: at least a large object, at most what a
# proxy in front of the platform lets through.
_BATCH_RECORDS = values.integer(minimum=10, maximum=10_000)
_BATCH_BYTES = values.integer(minimum=64 * 1024, maximum=16 * 1024 * 1024)
# The outbox: below the floor it drops at once, past the ceiling no volume holds it.
_QUEUE_RECORDS = values.integer(minimum=1000, maximum=10_000_000)
_QUEUE_BYTES = values.integer(minimum=1024 * 1024, maximum=64 * 1024**3)
# Tests and demos reconcile every fraction of a second; a cluster every few seconds.
_RECONCILE_PERIOD = values.seconds(minimum=0.1, maximum=3600)
_REASSERT_PERIOD = values.seconds(minimum=1, maximum=86400)
_HEARTBEAT_PERIOD = values.seconds(minimum=1, maximum=3600)
# Each round lists every resource again.
_ANTI_ENTROPY_PERIOD = values.seconds(minimum=600, maximum=30 * 86400, zero_is_off=True)

# Informers: a watch the server ends sooner reconnects more often; a read timeout shorter
# than a bookmark's period (about a minute) would cut quiet, healthy watches.
_WATCH_TIMEOUT = values.doubled_range(minimum=60, maximum=3600)
_WATCH_READ_TIMEOUT = values.seconds(minimum=30, maximum=3600)
_LIST_PAGE_SIZE = values.integer(minimum=50, maximum=5000)
# The Lease: a duration below a few retry periods flaps; past the ceiling a dead leader's
# cluster goes uncollected for too long. `_lease_order` checks retry < renew < duration.
_LEASE_DURATION = values.seconds(minimum=2, maximum=600)
_LEASE_RENEW_DEADLINE = values.seconds(minimum=1, maximum=600)
_LEASE_RETRY = values.seconds(minimum=0.2, maximum=60)
# Connecting to the Moonin API; reading one answer's next bytes.
_CONNECT_TIMEOUT = values.seconds(minimum=1, maximum=120)
_READ_TIMEOUT = values.seconds(minimum=1, maximum=600)

# Checked in this order; the first bad one stops start-up.
SETTINGS: tuple[Setting, ...] = (
    # debug, info, warning, error
    Setting("process.log_level", "LOG_LEVEL", "log_level", values.log_level),
    # namespaces the collector skips
    Setting("filters.ignore_namespaces", None, "ignore_namespaces", values.names),
    # globs such as `job/*`, `deployment/shop/*`
    Setting(
        "filters.ignore_resources", "IGNORE_RESOURCES", "ignore_resources", values.resource_globs
    ),
    # node labels kept out of node records
    Setting("filters.ignore_node_labels", None, "ignore_node_labels", values.names),
    # off reads no Helm release Secret at all
    Setting(
        "discovery.collector.collect_helm_releases", None, "collect_helm_releases", values.flag
    ),
    # off reads no Job log at all
    Setting("discovery.collector.collect_job_logs", None, "collect_job_logs", values.flag),
    # watch Warning Events for the pod errors only they tell; off reads no Event at all
    Setting("discovery.collector.collect_events", "COLLECT_EVENTS", "collect_events", values.flag),
    # one CPU for the process until every resource has listed: less CPU for the burst
    Setting(
        "discovery.collector.warm_up_on_one_cpu",
        "WARM_UP_ON_ONE_CPU",
        "warm_up_on_one_cpu",
        values.switch(),
    ),
    # `/healthz`, `/readyz` and `/metrics`; a taken port stops start-up
    Setting("process.health_addr", "HEALTH_ADDR", None, _health_addr),
    # from the downward API; the Lease holder's identity
    Setting("identity.pod_name", "POD_NAME", None, values.text),
    # from the downward API; where the Lease lives
    Setting("identity.pod_namespace", "POD_NAMESPACE", None, values.text),
    # the cluster's project at Moonin
    Setting("identity.project_id", "PROJECT_ID", None, _identifier),
    # the cluster's id at Moonin; part of every API path
    Setting("identity.cluster_id", "CLUSTER_ID", None, _identifier),
    # allow plain `http://` API URLs (tests and demos only)
    Setting("api.client.insecure_http", "MOONIN_INSECURE_HTTP", None, values.flag),
    # PEM file of CAs to trust for the Moonin APIs
    Setting("api.client.ca_bundle", "MOONIN_CA_BUNDLE", "ca_bundle", values.ca_bundle),
    # total time of one Moonin API call: connecting, sending and the whole answer
    Setting(
        "api.client.deadline_seconds",
        "API_DEADLINE_SECONDS",
        "api_deadline_seconds",
        _CALL_DEADLINE,
    ),
    # how long connecting to a Moonin API may take
    Setting(
        "api.client.connect_timeout_seconds",
        "API_CONNECT_TIMEOUT_SECONDS",
        "api_connect_timeout_seconds",
        _CONNECT_TIMEOUT,
    ),
    # silence within a Moonin API answer (or before it) that ends the call
    Setting(
        "api.client.read_timeout_seconds",
        "API_READ_TIMEOUT_SECONDS",
        "api_read_timeout_seconds",
        _READ_TIMEOUT,
    ),
    # bytes a templates or actions answer may have, after decompression
    Setting(
        "api.client.max_answer_bytes",
        "API_MAX_ANSWER_BYTES",
        "api_max_answer_bytes",
        _ANSWER_BYTES,
    ),
    # the outbox directory (one process per directory)
    Setting("outbox.queue_dir", "QUEUE_DIR", "queue_dir", values.path),
    # outbox bound per stream, in records
    Setting("outbox.bounds.max_records", "QUEUE_MAX_RECORDS", "queue_max_records", _QUEUE_RECORDS),
    # outbox bound per stream, in bytes; keep it below the volume's size limit
    Setting("outbox.bounds.max_bytes", "QUEUE_MAX_BYTES", "queue_max_bytes", _QUEUE_BYTES),
    # records per POST (and per queue chunk)
    Setting(
        "outbox.shipping.batch_max_records",
        "BATCH_MAX_RECORDS",
        "batch_max_records",
        _BATCH_RECORDS,
    ),
    # bytes per POST before gzip (and per queue chunk)
    Setting("outbox.shipping.batch_max_bytes", "BATCH_MAX_BYTES", "batch_max_bytes", _BATCH_BYTES),
    # how long a part-full batch waits for more
    Setting(
        "outbox.shipping.linger_seconds",
        "LINGER_SECONDS",
        "linger_seconds",
        values.seconds(minimum=0, maximum=60),
    ),
    # how long SIGTERM keeps shipping before exit
    Setting(
        "outbox.shutdown_ship_seconds", "SHUTDOWN_SHIP_SECONDS", "shutdown_ship_seconds", _HOUR
    ),
    # only the holder of a Lease in `POD_NAMESPACE` collects (unset or auto: in a pod)
    Setting("discovery.leader_election", "LEADER_ELECTION", "leader_election", values.auto_flag),
    # how long a Lease not renewed keeps others from taking it
    Setting(
        "discovery.lease.lease_seconds",
        "LEASE_DURATION_SECONDS",
        "lease_duration_seconds",
        _LEASE_DURATION,
    ),
    # the leader stops collecting when it could not renew for this long
    Setting(
        "discovery.lease.renew_deadline_seconds",
        "LEASE_RENEW_DEADLINE_SECONDS",
        "lease_renew_deadline_seconds",
        _LEASE_RENEW_DEADLINE,
    ),
    # how often each replica reads (and the leader renews) the Lease
    Setting(
        "discovery.lease.retry_seconds", "LEASE_RETRY_SECONDS", "lease_retry_seconds", _LEASE_RETRY
    ),
    # scaling reconcile period
    Setting(
        "scaling.reconcile_interval_seconds",
        "RECONCILE_INTERVAL_SECONDS",
        "reconcile_interval_seconds",
        _RECONCILE_PERIOD,
    ),
    # a GitOps tool syncing a window's bounds back: the window yields, or is applied again
    Setting(
        "scaling.gitops_conflicts",
        "GITOPS_CONFLICTS",
        "gitops_conflicts",
        values.choice(*CONFLICTS),
    ),
    # reassert: the least time between two re-asserts of one window
    Setting("scaling.reassert_seconds", "REASSERT_SECONDS", "reassert_seconds", _REASSERT_PERIOD),
    # ask the cloud's metadata endpoints (unset or auto: in a pod)
    Setting("discovery.cloud_metadata", "CLOUD_METADATA", "cloud_metadata", values.auto_flag),
    # discovery heartbeat (and cluster metadata) period
    Setting(
        "discovery.heartbeat_seconds", "HEARTBEAT_SECONDS", "heartbeat_seconds", _HEARTBEAT_PERIOD
    ),
    # discovery re-sends everything with snapshots this often (0: never)
    Setting(
        "discovery.collector.anti_entropy_seconds",
        "ANTI_ENTROPY_SECONDS",
        "anti_entropy_seconds",
        _ANTI_ENTROPY_PERIOD,
    ),
    # the server ends each watch after a random time from this to twice this
    Setting(
        "discovery.collector.informer.watch_timeout_seconds",
        "WATCH_TIMEOUT_SECONDS",
        "watch_timeout_seconds",
        _WATCH_TIMEOUT,
    ),
    # a watch silent this long (no event, no bookmark) is taken as stalled and reopened
    Setting(
        "discovery.collector.informer.read_timeout_seconds",
        "WATCH_READ_TIMEOUT_SECONDS",
        "watch_read_timeout_seconds",
        _WATCH_READ_TIMEOUT,
    ),
    # the most objects one list page asks for
    Setting(
        "discovery.collector.informer.page_size",
        "LIST_PAGE_SIZE",
        "list_page_size",
        _LIST_PAGE_SIZE,
    ),
    # total time of one Kubernetes call other than a watch
    Setting(
        "kube.deadline_seconds", "KUBE_DEADLINE_SECONDS", "kube_deadline_seconds", _CALL_DEADLINE
    ),
    # how long connecting to the API server may take, for the scaling role's calls
    Setting(
        "kube.scaling_connect_timeout_seconds",
        "KUBE_SCALING_CONNECT_TIMEOUT_SECONDS",
        "kube_scaling_connect_timeout_seconds",
        _CONNECT_TIMEOUT,
    ),
    # silence in an API server's answer that ends a scaling role's call
    Setting(
        "kube.scaling_read_timeout_seconds",
        "KUBE_SCALING_READ_TIMEOUT_SECONDS",
        "kube_scaling_read_timeout_seconds",
        _READ_TIMEOUT,
    ),
)
FILE_KEYS = frozenset(setting.key for setting in SETTINGS if setting.key is not None)
# Names people may put into config.yaml that only the environment carries: the declared
# settings without a file key, and those read by the rules below.
_ENVIRONMENT_ONLY = {
    **{s.name: s.env for s in SETTINGS if s.key is None and s.env is not None},
    "cluster_token": "CLUSTER_TOKEN",
    "token": "CLUSTER_TOKEN",
    "cluster_token_file": "CLUSTER_TOKEN_FILE",
    "api_url": "API_URL",
    "discovery_api_url": "DISCOVERY_API_URL",
    "scaling_api_url": "SCALING_API_URL",
}
# Variables Kubernetes gives every pod: the API server's address and each Service's links
# (`<SERVICE>_SERVICE_HOST`, `<SERVICE>_PORT_8080_TCP_ADDR`, ...).
_FOREIGN_VARIABLE = re.compile(r"KUBERNETES_\w*|\w+_SERVICE_(HOST|PORT)\w*|\w+_PORT(_\w+)?")
# Every environment variable the configuration reads (what the demo's agent must not inherit).
ENVIRONMENT = frozenset(
    {s.env for s in SETTINGS if s.env is not None} | {*_ENVIRONMENT_ONLY.values(), "CONFIG_FILE"}
)


def load_settings(
    role: str, environ: Mapping[str, str], *, config_file: str | None = None
) -> Settings:
    """Read and check every setting; `config_file` (from `--config`) wins over `CONFIG_FILE`."""
    with _token_scrubbed(environ):
        return _load(role, environ, config_file)


def load_collection_settings(
    environ: Mapping[str, str], *, config_file: str | None = None
) -> PreviewSettings:
    """Read and check the log level, the filters and the collector's branch only; the rest
    is not looked at."""
    with _token_scrubbed(environ):
        _, file_values = _config_file(config_file, environ)
        read = _read(
            _Sources(environ, file_values),
            (
                s
                for s in SETTINGS
                if s.branch == "filters"
                or s.field.startswith("discovery.collector.")
                or s.name == "log_level"
            ),
        )
        _collector_filters(read)
        return PreviewSettings(
            log_level=_build(ProcessSettings, read.get("process", {})).log_level,
            collection=_build(DiscoverySettings, read.get("discovery", {})).collector,
        )


@contextmanager
def _token_scrubbed(environ: Mapping[str, str]) -> Iterator[None]:
    """A `ConfigError` leaves with every form of the token removed from its message."""
    try:
        yield
    except ConfigError as e:
        # `from None`: the chained exception could hold a value the message leaves out.
        raise ConfigError(_scrub(str(e), _token_values(environ))) from None


def misspelt_variables(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(variable, the setting it likely meant) for each variable a typo away from one of
    ours, which would otherwise be ignored without a word. The values are not looked at.

    A letter swap counts as one edit. Names other software puts into every pod (the API
    server's address, a Service's links) are not ours to judge."""
    found = []
    for name in sorted(environ):
        if name in ENVIRONMENT or _FOREIGN_VARIABLE.fullmatch(name):
            continue
        meant = _likely_meant(name, ENVIRONMENT)
        if meant is not None:
            found.append((name, meant))
    return found


def _likely_meant(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` is a typo of: one edit away (two from 12 characters on)."""
    for candidate in sorted(known):
        allowed = 1 if len(candidate) < 12 else 2
        if (
            abs(len(name) - len(candidate)) <= allowed
            and _edits(name, candidate, allowed) <= allowed
        ):
            return candidate
    return None


def _edits(a: str, b: str, limit: int) -> int:
    """Insertions, deletions, substitutions and swaps of neighbours turning `a` into `b`,
    or `limit + 1` for any number above `limit`: once two rows in a row are all above it,
    no later row comes back under it, and the rest is not computed (a pod's environment
    holds dozens of names, nearly all far from every setting's)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, start=1):
        current = [i]
        for j, other in enumerate(b, start=1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char != other))
            if i > 1 and j > 1 and char == b[j - 2] and a[i - 2] == other:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        if min(current) > limit and min(previous) > limit:
            return limit + 1
        previous2, previous = previous, current
    return min(previous[-1], limit + 1)


def api_url_for(settings: Settings, stream: Stream) -> str:
    """Base URL of `stream`'s API. ValueError if this role does not ship that stream."""
    if stream not in ROLE_STREAMS["all"]:
        raise ValueError(f"unknown stream {stream!r}")
    url = settings.api.discovery_url if stream == "discovery" else settings.api.scaling_url
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
        raise ValueError("port must be between 0 and 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host or "[" in host or "]" in host:
        raise ValueError("an IPv6 host needs brackets, like [::]:8080")
    if any(char.isspace() for char in host):
        raise ValueError("the host contains whitespace")
    return host, int(port)


# --- assembling ------------------------------------------------------------------------------


class _Sources:
    """Looks a setting up in the environment first, then in config.yaml."""

    def __init__(self, environ: Mapping[str, str], file_values: Mapping[str, object]) -> None:
        self._environ = environ
        self._file = file_values

    def get(self, env: str | None, key: str | None = None) -> Raw | None:
        if env is not None:
            value = _env(self._environ, env)
            if value is not None:
                return Raw(value, env)
        if key is not None and self._file.get(key) is not None:
            return Raw(self._file[key], f"{FILE_LABEL}: {key}")
        return None

    def env(self, name: str) -> str | None:
        return _env(self._environ, name)


Given = dict[str, Any]
"""What the user gave, by path: a field's value, or a branch's own `Given`."""


def _read(src: _Sources, declared: Iterable[Setting]) -> Given:
    """The values the user gave, nested as the branches are; the fields left out keep their
    defaults."""
    found: Given = {}
    for setting in declared:
        raw = src.get(setting.env, setting.key)
        if raw is not None:
            *branches, name = setting.field.split(".")
            into = found
            for branch in branches:
                into = into.setdefault(branch, {})
            into[name] = setting.parse(raw)
        elif setting.default is dataclasses.MISSING:
            raise ConfigError(f"{setting.env or setting.key}: not set")
    return found


def _build(branch: type[T], given: Given) -> T:
    """`branch` with the values given, its own branches built the same way (a branch given
    already built is taken as it is)."""
    hints = get_type_hints(branch)
    return branch(
        **{
            name: _build(hints[name], value) if isinstance(value, dict) else value
            for name, value in given.items()
        }
    )


def _load(role: str, environ: Mapping[str, str], config_file: str | None) -> Settings:
    checked_role = _role(role)
    path, file_values = _config_file(config_file, environ)
    src = _Sources(environ, file_values)
    token, token_file = _token(src)
    read = _read(src, SETTINGS)
    _lease_order(read.get("discovery", {}).get("lease", {}))
    # Rules beyond one setting each: the identity's token, the roles' API URLs, and the
    # queue chunks cut to the batch limits, so a chunk always fits one batch.
    identity = read.setdefault("identity", {})
    identity.update(token=token, token_file=token_file)
    insecure = read.get("api", {}).get("client", {}).get("insecure_http", False)
    discovery_url, scaling_url = _api_urls(checked_role, src, insecure=insecure)
    read.setdefault("api", {}).update(discovery_url=discovery_url, scaling_url=scaling_url)
    _collector_filters(read)
    outbox = read.setdefault("outbox", {})
    shipping = _build(ShipperSettings, outbox.get("shipping", {}))
    outbox.setdefault("bounds", {}).update(
        chunk_records=shipping.batch_max_records, chunk_bytes=shipping.batch_max_bytes
    )
    return _build(Settings, {"role": checked_role, "config_file": path, **read})


def _collector_filters(read: Given) -> None:
    """The collector's settings hold the filters branch as it is."""
    filters = read["filters"] = _build(FilterSettings, read.get("filters", {}))
    read.setdefault("discovery", {}).setdefault("collector", {})["filters"] = filters


def _lease_order(lease: Given) -> None:
    """Retry period < renew deadline < Lease duration, as client-go requires: a leader must
    try to renew more than once before it gives up, and give up before anyone may take over."""
    timing = _build(LeaseSettings, lease)
    if timing.renew_deadline_seconds >= timing.lease_seconds:
        raise ConfigError("LEASE_RENEW_DEADLINE_SECONDS: must be less than LEASE_DURATION_SECONDS")
    if timing.retry_seconds >= timing.renew_deadline_seconds:
        raise ConfigError("LEASE_RETRY_SECONDS: must be less than LEASE_RENEW_DEADLINE_SECONDS")


def _env(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _role(role: str) -> Role:
    for known in ROLES:
        if role == known:
            return known
    raise ConfigError(f"--role: expected one of {', '.join(ROLES)}, got {describe(role)}")


# --- config.yaml -----------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: the second one would silently win."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
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
        raise ConfigError(f"{label}: {path} must hold a mapping of settings, got {describe(data)}")
    for key in data:
        _check_file_key(key)
    return data


def _check_file_key(key: object) -> None:
    if not isinstance(key, str):
        raise ConfigError(f"{FILE_LABEL}: setting names are strings, got {describe(key)}")
    if key in FILE_KEYS:
        return
    if key in _ENVIRONMENT_ONLY:
        raise ConfigError(
            f"{FILE_LABEL}: {key}: not read from {FILE_LABEL}; "
            f"set {_ENVIRONMENT_ONLY[key]} in the environment"
        )
    meant = _likely_meant(key, FILE_KEYS)
    hint = f" (did you mean {meant}?)" if meant else ""
    # A name is shown when it looks like one; anything else could be a value pasted there.
    shown = f'"{key}"' if _SETTING_NAME.fullmatch(key) else describe(key)
    raise ConfigError(f"{FILE_LABEL}: unknown setting {shown}{hint}")


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError):
        problem = error.problem or error.context or "cannot parse"
        mark = error.problem_mark or error.context_mark
        if mark is not None:
            return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
        return problem
    return str(error)


# --- identity and credentials ----------------------------------------------------------------


def _token(src: _Sources) -> tuple[str | None, str | None]:
    # Neither the value nor the file's path or content goes into a message.
    token = src.env("CLUSTER_TOKEN")
    if token is not None and (problem := token_problem(token)) is not None:
        raise ConfigError(f"CLUSTER_TOKEN: {problem} (value not shown)")
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
    if (problem := token_problem(token)) is not None:
        raise ConfigError(f"CLUSTER_TOKEN_FILE: {problem} (content not shown)")


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
    # As the log redactor: a shorter value is refused anyway, and would blank ordinary words.
    return tuple(value for value in values if len(value) >= MIN_TOKEN_CHARS)


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
        return checked_base_url(value, insecure_http=insecure)
    except ValueError as e:
        raise ConfigError(f"{name}: {e}") from None
