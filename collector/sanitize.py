"""The allowlist: what of an object's metadata and pod template may leave the cluster.

Two layers keep secrets in. First, the decode shapes below name only the fields a record
may carry: a container has no `args` or `command`, an env var no `value`, a probe no
handler contents, so those bytes are skipped by the decoder and never exist in memory as
Python objects. Second, the helpers copy from those shapes into plain dicts, dropping the
annotations that hold whole manifests (`last-applied-configuration`, `kapp.k14s.io/original`)
or proxy configuration (`...-snippet`), masking the values of annotations whose key names a
credential, keeping only the known-safe words of the command line recorded in
`kubernetes.io/change-cause`, and passing every value through the free-text redactor
(`collector.redact`), which also cuts it to 2 KiB.

The label selector and condition shapes live here too: several kinds share them, and the
condition shape is where heartbeat-like times (which would defeat coalescing) are left out.

Everything here is pure and total: any input that decodes gives a result, and the same
input gives the same output (maps sorted by key), so records fingerprint stably.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import msgspec

from collector import redact
from collector.model import Int64, ObjectMeta
from collector.redact import REDACTED, names_credential

CHANGE_CAUSE = "kubernetes.io/change-cause"

# Whole manifests, env values included; there is nothing safe to keep from them.
_MANIFEST_ANNOTATIONS = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        "kapp.k14s.io/original",
        "kapp.k14s.io/original-diff",
        "objectset.rio.cattle.io/applied",
    }
)
# Proxy configuration pasted as text (nginx's `configuration-snippet`, `server-snippet`,
# `auth-snippet`, nginx.org's `server-snippets`, HAProxy's `backend-config-snippet`):
# headers with credentials live there, in any syntax.
_SNIPPET = re.compile(r"snippets?$", re.IGNORECASE)

# Change causes (see `change_cause`). A word with no quote, brace, `=` or `$` in it.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+,-]*")
# A safe flag's value: a plain word, a selector (`app=web,tier!=db`), or empty. No `?`, so
# a URL with a query string (where tokens travel) is not one.
_SAFE_FLAG_VALUE = re.compile(r"[A-Za-z0-9._:/@+,=!*-]*")
_SET_IMAGE = re.compile(r"\bset\s+image\b")
# `container=registry/image:tag` as `kubectl set image` takes it.
_IMAGE_ASSIGNMENT = re.compile(r"[A-Za-z0-9*][A-Za-z0-9._-]*=[A-Za-z0-9][A-Za-z0-9._:/@-]*")
# The start of a value that assigns a name: `NAME=`.
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*=")
# kubectl flags whose values say what changed and never hold a secret.
_SAFE_VALUE_FLAGS = frozenset(
    {
        *("--all", "--cascade", "--containers", "-c", "--context", "--current-replicas"),
        *("--dry-run", "--field-manager", "--filename", "-f", "--force", "--grace-period"),
        *("--image", "--kustomize", "-k", "--local", "--namespace", "-n", "--output", "-o"),
        *("--overwrite", "--record", "--recursive", "-R", "--replicas", "--revision"),
        *("--selector", "-l", "--server-side", "--timeout", "--to-revision", "--type"),
        "--wait",
    }
)
_WHITESPACE = re.compile(r"(\s+)")
_REDACTED_RUN = re.compile(rf"{re.escape(REDACTED)}(?:\s+{re.escape(REDACTED)})+")

DOCKER_HUB = "docker.io"
_LEGACY_DOCKER_HUBS = frozenset({"index.docker.io", "registry-1.docker.io"})


# -- decode shapes ----------------------------------------------------------------------


class KeyRef(msgspec.Struct, rename="camel", frozen=True, gc=False):
    name: str = ""
    key: str = ""


class FieldRef(msgspec.Struct, rename="camel", frozen=True, gc=False):
    field_path: str = ""


class ResourceFieldRef(msgspec.Struct, rename="camel", frozen=True, gc=False):
    resource: str = ""
    container_name: str | None = None


class EnvVarSource(msgspec.Struct, rename="camel", frozen=True, gc=False):
    secret_key_ref: KeyRef | None = None
    config_map_key_ref: KeyRef | None = None
    field_ref: FieldRef | None = None
    resource_field_ref: ResourceFieldRef | None = None


class EnvVar(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """An env var without its `value`: the field is not declared, so it is never read."""

    name: str = ""
    value_from: EnvVarSource | None = None


class NameRef(msgspec.Struct, frozen=True, gc=False):
    name: str = ""


class EnvFromSource(msgspec.Struct, rename="camel", frozen=True, gc=False):
    prefix: str | None = None
    config_map_ref: NameRef | None = None
    secret_ref: NameRef | None = None


class ContainerPort(msgspec.Struct, rename="camel", frozen=True, gc=False):
    name: str | None = None
    container_port: Int64 | None = None
    protocol: str = "TCP"


Quantity = str | int | float


class ResourceRequirements(msgspec.Struct, frozen=True, gc=False):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class VolumeMount(msgspec.Struct, rename="camel", frozen=True, gc=False):
    name: str = ""
    mount_path: str = ""
    read_only: bool | None = None


class Present(msgspec.Struct, frozen=True, gc=False):
    """Decodes any JSON object and keeps none of it: the probe handler's contents stay out."""


class Probe(msgspec.Struct, rename="camel", frozen=True, gc=False):
    http_get: Present | None = None
    tcp_socket: Present | None = None
    grpc: Present | None = None
    exec: Present | None = None


class Container(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """A container without `args`, `command` or env values."""

    name: str = ""
    image: str | None = None
    ports: list[ContainerPort] | None = None
    resources: ResourceRequirements | None = None
    env: list[EnvVar] | None = None
    env_from: list[EnvFromSource] | None = None
    volume_mounts: list[VolumeMount] | None = None
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    startup_probe: Probe | None = None


class PodSpec(msgspec.Struct, rename="camel", frozen=True, gc=False):
    containers: list[Container] | None = None
    init_containers: list[Container] | None = None


class PodTemplate(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class LabelSelectorRequirement(msgspec.Struct, frozen=True, gc=False):
    key: str = ""
    operator: str = ""
    values: list[str] | None = None


class LabelSelector(msgspec.Struct, rename="camel", frozen=True, gc=False):
    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class Condition(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """A status condition without its heartbeat-like times (lastUpdate/Heartbeat/Probe)."""

    type: str = ""
    status: str = ""
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


# -- metadata ---------------------------------------------------------------------------


def safe_annotations(meta_annotations: Mapping[str, str] | None) -> dict[str, str]:
    """Annotations safe to ship, sorted by key: manifests, snippets and credential-named
    ones dropped, the others redacted and cut."""
    source = meta_annotations or {}
    return {
        key: value
        for key in sorted(source)
        if (value := annotation_value(key, source[key])) is not None
    }


@functools.lru_cache(maxsize=4096)
def kept(annotation: str) -> bool:
    """Whether an annotation (its key) is shipped at all. Remembered per key: a cluster
    has a few dozen annotation keys, each on thousands of objects."""
    # The name, not the prefix: `rbac.authorization.kubernetes.io/autoupdate` names none.
    name = annotation.rpartition("/")[2]
    return not (
        annotation in _MANIFEST_ANNOTATIONS
        or _SNIPPET.search(name) is not None
        or names_credential(name)
    )


def without_dropped_values(meta: ObjectMeta) -> ObjectMeta:
    """The metadata with the values of annotations no record carries emptied (for objects
    kept until their records are built: a last-applied-configuration is often the largest
    part of a Deployment). Their keys stay: which keys an object has can decide a record
    (`collector.normalize.revision.rollout_type`)."""
    if all(kept(key) for key in meta.annotations):
        return meta
    slim = {key: value if kept(key) else "" for key, value in meta.annotations.items()}
    return msgspec.structs.replace(meta, annotations=slim)


def annotation_value(key: str, value: str) -> str | None:
    """One annotation's value as it may be shipped (see `safe_annotations`); None when the
    annotation is not shipped at all."""
    if len(value) <= _REMEMBERED_VALUE_LENGTH:
        return _remembered_value(key, value)
    return _shipped_value(key, value)


# Annotation values repeat across a cluster's objects (revision numbers, replica counts,
# `true`, change causes): a short one is judged once per key and remembered (of the 11,300
# a listing of the `--small` bench cluster ships, 480 differ). Short ones only, so the
# cache stays under a megabyte.
_REMEMBERED_VALUE_LENGTH = 128


@functools.lru_cache(maxsize=1024)
def _remembered_value(key: str, value: str) -> str | None:
    return _shipped_value(key, value)


def _shipped_value(key: str, value: str) -> str | None:
    if not kept(key):
        return None
    return redact.text(change_cause(value) if key == CHANGE_CAUSE else value)


def change_cause(value: str) -> str:
    """A recorded command line with only the words known to be safe kept.

    `kubectl ... --record` stores the command line without its quotes, so any argument
    may hold a secret (env values, a patch body, `--from-literal`, a program's flags after
    `--`) and a value may run over several words. Kept: plain words (`kubectl`, `set`,
    `image`, `deployment/web`, `v1.2.3`), flag names, the values of the flags in
    `_SAFE_VALUE_FLAGS` (unless they name a secret), and the images of `kubectl set
    image`; never a URL with credentials. Any other value becomes `[REDACTED]` (an
    assignment keeps its name: `DB_HOST=[REDACTED]`), and so does every following word up
    to the next flag, since it may be the rest of that value. Everything after `--` goes.
    """
    words = _RecordedCommand(set_image=_SET_IMAGE.search(value) is not None)
    out = [words.shown(word) for word in _WHITESPACE.split(value)]
    # One `[REDACTED]` for a run of them: how many words a value had is nobody's business.
    return _REDACTED_RUN.sub(REDACTED, "".join(out))


class _RecordedCommand:
    """The words of a recorded command line, one after another, as `change_cause` ships
    them: what becomes of a word depends on the words before it."""

    def __init__(self, *, set_image: bool) -> None:
        self._set_image = set_image
        self._redacting = False  # inside a value that went: its later words go too
        self._value_next = False  # the previous word was a flag whose value is the next word
        self._after_dashes = False

    def shown(self, word: str) -> str:
        """The next word as shipped."""
        if not word or word.isspace():
            return word  # the separators, kept as they were
        if self._after_dashes:
            return REDACTED
        if word == "--":
            self._after_dashes = True
            return word
        if word.startswith("-"):
            return self._flag(word)
        return self._argument(word)

    def _flag(self, word: str) -> str:
        name, assigns, flag_value = word.partition("=")
        safe = name in _SAFE_VALUE_FLAGS
        keep = not assigns or (safe and _safe_flag_value(flag_value))
        self._redacting = not keep
        self._value_next = not assigns and not safe
        return word if keep else f"{name}={_redact(flag_value)}"

    def _argument(self, word: str) -> str:
        if self._redacting or self._value_next:
            self._redacting, self._value_next = True, False
            return _redact(word)
        if _plain(word) or (self._set_image and _IMAGE_ASSIGNMENT.fullmatch(word)):
            return word
        self._redacting = True
        return _redact(word)


def _plain(word: str) -> bool:
    """A name or a version, not a URL with credentials (`https://user:pass@host`)."""
    return _PLAIN_WORD.fullmatch(word) is not None and not _has_credentials(word)


def _safe_flag_value(value: str) -> bool:
    """A known-safe flag's value that names no secret either (`--selector=token=x`)."""
    return (
        _SAFE_FLAG_VALUE.fullmatch(value) is not None
        and not names_credential(value)
        and not _has_credentials(value)
    )


def _has_credentials(word: str) -> bool:
    """Whether the redactor finds a credential in the word: then it goes whole."""
    return redact.redact(word) != word


def _redact(value: str) -> str:
    """`[REDACTED]`, after the name when the value assigns one (`NAME=[REDACTED]`)."""
    assignment = _ASSIGNMENT.match(value)
    return REDACTED if assignment is None else f"{assignment.group()}{REDACTED}"


def labels(meta_labels: Mapping[str, str] | None) -> dict[str, str]:
    """Labels, sorted. Label values are at most 63 characters and never redacted."""
    return dict(sorted((meta_labels or {}).items()))


def selector(sel: LabelSelector | None) -> dict[str, Any] | None:
    """A label selector; None when absent (an empty selector, `{}`, selects everything)."""
    if sel is None:
        return None
    return {
        "match_labels": labels(sel.match_labels),
        "match_expressions": [
            {"key": req.key, "operator": req.operator, "values": sorted(req.values or [])}
            for req in sel.match_expressions or []
        ],
    }


def conditions(items: Iterable[Condition] | None, *, message: bool = True) -> list[dict[str, Any]]:
    """Conditions sorted by type, with their last transition (never a heartbeat time)."""
    summary = []
    for cond in sorted(items or [], key=lambda c: c.type):
        entry: dict[str, Any] = {"type": cond.type, "status": cond.status, "reason": cond.reason}
        if message:
            entry["message"] = redact.text(cond.message) if cond.message else None
        entry["last_transition_time"] = cond.last_transition_time
        summary.append(entry)
    return summary


# -- containers -------------------------------------------------------------------------


def pod_containers(spec: PodSpec) -> dict[str, Any]:
    """A pod spec's containers and init containers as shipped, in spec order (the order is
    the spec's, and meaningful), and one `images` entry for each: the reference as written
    and parsed."""
    containers = [_rendered(c, init=False) for c in spec.containers or []]
    init_containers = [_rendered(c, init=True) for c in spec.init_containers or []]
    return {
        "containers": [rendered.shipped for rendered in containers],
        "init_containers": [rendered.shipped for rendered in init_containers],
        "images": [rendered.image for rendered in (*containers, *init_containers)],
    }


class _Rendered(NamedTuple):
    """A container as records ship it, and its entry in `images`."""

    container: Container
    shipped: dict[str, Any]
    image: dict[str, Any]


# A Deployment's record is built right before its ReplicaSets' (`collector.sources`): its
# current ReplicaSet's pod template has the very same containers, an older one's differ in
# a container or two, and sidecars repeat across Deployments. The containers rendered last
# are given again while they stay equal (the records share the dicts, which nobody changes
# once built), by container name, image and whether it is an init container, the last
# `_RENDERED_KEPT` of them: a few records' worth, rendered anyway. Only the collector's
# processor thread renders.
_RENDERED_KEPT = 16
_renderings: dict[tuple[bool, str, str | None], _Rendered] = {}


def _rendered(c: Container, *, init: bool) -> _Rendered:
    key = (init, c.name, c.image)
    known = _renderings.get(key)
    if known is not None and known.container == c:  # the Structs compare field by field
        return known
    shipped = _container(c)
    # The image is parsed once, for both: the container's `image_ref` is its entry's too.
    image = {"container": c.name, "init": init, "image": c.image, **shipped["image_ref"]}
    rendered = _Rendered(c, shipped, image)
    _renderings.pop(key, None)  # one that changed is kept as the newest
    _renderings[key] = rendered
    if len(_renderings) > _RENDERED_KEPT:
        _renderings.pop(next(iter(_renderings)), None)
    return rendered


def _container(c: Container) -> dict[str, Any]:
    """One container as shipped (see `pod_containers`)."""
    resources = c.resources or ResourceRequirements()
    return {
        "name": c.name,
        "image": c.image,
        "image_ref": image_ref(c.image),
        "ports": [
            {"name": p.name, "container_port": p.container_port, "protocol": p.protocol}
            for p in c.ports or []
        ],
        "resources": {
            "requests": _quantities(resources.requests),
            "limits": _quantities(resources.limits),
        },
        "env": [_env(var) for var in c.env or []],
        "env_from": [_env_from(src) for src in c.env_from or []],
        "volume_mounts": [
            {"name": m.name, "mount_path": m.mount_path, "read_only": bool(m.read_only)}
            for m in c.volume_mounts or []
        ],
        "probes": {
            "liveness": _probe_type(c.liveness_probe),
            "readiness": _probe_type(c.readiness_probe),
            "startup": _probe_type(c.startup_probe),
        },
    }


def _quantities(values: Mapping[str, Quantity] | None) -> dict[str, str]:
    given = values or {}
    return {name: str(given[name]) for name in sorted(given)}


def _env(var: EnvVar) -> dict[str, Any]:
    """The name, and where a `valueFrom` points (an identity); a literal value is `from: None`."""
    source = var.value_from
    if source is None:
        return {"name": var.name, "from": None}
    if source.secret_key_ref is not None:
        ref = source.secret_key_ref
        return {"name": var.name, "from": "secretKeyRef", "secret": ref.name, "key": ref.key}
    if source.config_map_key_ref is not None:
        ref = source.config_map_key_ref
        return {"name": var.name, "from": "configMapKeyRef", "config_map": ref.name, "key": ref.key}
    if source.field_ref is not None:
        return {"name": var.name, "from": "fieldRef", "field_path": source.field_ref.field_path}
    if source.resource_field_ref is not None:
        field = source.resource_field_ref
        return {
            "name": var.name,
            "from": "resourceFieldRef",
            "resource": field.resource,
            "container": field.container_name,
        }
    return {"name": var.name, "from": "unknown"}


def _env_from(src: EnvFromSource) -> dict[str, Any]:
    if src.secret_ref is not None:
        return {"from": "secretRef", "name": src.secret_ref.name, "prefix": src.prefix}
    if src.config_map_ref is not None:
        return {"from": "configMapRef", "name": src.config_map_ref.name, "prefix": src.prefix}
    return {"from": "unknown", "name": None, "prefix": src.prefix}


def _probe_type(probe: Probe | None) -> str | None:
    if probe is None:
        return None
    for name, handler in (
        ("httpGet", probe.http_get),
        ("tcpSocket", probe.tcp_socket),
        ("grpc", probe.grpc),
        ("exec", probe.exec),
    ):
        if handler is not None:
            return name
    return "unknown"


# -- image references -------------------------------------------------------------------


def image_ref(image: str | None) -> dict[str, str | None]:
    """Parse a container image reference the way the container runtime resolves it.

    `nginx` -> docker.io / library/nginx / latest; `ghcr.io/o/app:1.2@sha256:...` keeps
    both tag and digest; `localhost:5000/app` has a registry with a port and the default
    tag. The first path component names a registry only when it has a `.` or a `:`, is
    `localhost`, or has upper-case letters (which repository paths cannot). Nothing is
    validated: a malformed reference is split as well as it can be, never rejected.
    """
    if not image:
        return {"registry": None, "repository": None, "tag": None, "digest": None}
    name, _, digest = image.partition("@")
    tag = None
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        name, tag = name[:colon], name[colon + 1 :]
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
    if registry in _LEGACY_DOCKER_HUBS:
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    if tag is None and not digest:
        tag = "latest"
    return {"registry": registry, "repository": repository, "tag": tag, "digest": digest or None}
