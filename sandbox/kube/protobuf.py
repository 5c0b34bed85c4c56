"""Kubernetes protobuf bodies read as the JSON a client would have sent instead.

kube-apiserver decodes protobuf for every built-in kind, and kubectl's typed commands
(`create configmap`, `create secret generic`, `create deployment`, `create namespace`,
`autoscale`, `auth can-i`) send nothing else: client-go does not fall back to JSON on a
415. A body is the magic `k8s\\x00`, then a `runtime.Unknown` (1: the TypeMeta, apiVersion
and kind; 2: the object's bytes). The object is read by the wire format alone against a
table of field numbers (those of k8s.io/api's generated.proto) for the kinds those
commands create: ConfigMap, Secret, Namespace, Deployment and autoscaling/v2
HorizontalPodAutoscaler, and the messages in them a typed command fills.

The JSON is what encoding/json makes of the Go object decoded: a string, number or bool
left at its zero value is omitted (`omitempty`), except for the pointers and required
fields marked `keep` (`replicas: 0` stays); a message on the wire is written even when
empty (`resources: {}`), as a struct is; empty lists and maps are omitted; a zero time is
omitted. Bytes that are no protobuf object (no magic, no kind) are 400, as upstream; a kind
outside the table is 415, as a kind without protobuf is upstream, and so is a field the
table lacks when it carries a value (a zero value of an unknown field is what gogo-protobuf
writes for every non-pointer field, so it is skipped).
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from sandbox.kube import status

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"  # what starts every Kubernetes protobuf body
Value = int | bytes


def fields(data: bytes) -> Iterator[tuple[int, Value]]:
    """(field number, value) of each field of a message: an int for a varint or a fixed
    number, bytes for a length-delimited field. ValueError when the bytes are not a
    message."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        wire = key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield key >> 3, value
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if at + size > len(data):
                raise ValueError("truncated field")
            yield key >> 3, int.from_bytes(data[at : at + size], "little")
            at += size
        elif wire == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise ValueError("truncated field")
            yield key >> 3, data[at : at + length]
            at += length
        else:
            raise ValueError(f"unsupported wire type {wire}")


def message(data: bytes, number: int) -> bytes:
    """The last length-delimited field `number` of a message (empty when absent)."""
    found = b""
    for field, value in fields(data):
        if field == number and isinstance(value, bytes):
            found = value
    return found


def unwrap(raw: bytes) -> tuple[bytes, bytes]:
    """The TypeMeta and the object's bytes of a body; ValueError when it is no envelope."""
    if not raw.startswith(MAGIC):
        # kube-apiserver's words
        raise ValueError(
            "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
        )
    envelope = raw[len(MAGIC) :]
    return message(envelope, 1), message(envelope, 2)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


# The table -------------------------------------------------------------------------------
# A field's kind: "string", "int", "bool", "bytes" (base64 in JSON), "time" (metav1.Time),
# "quantity" (resource.Quantity), "intorstring", "map" (string to string), "map:bytes",
# "map:quantity", or a message (a dict of its fields).


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    kind: str | dict[int, Field]
    repeated: bool = False
    keep: bool = False  # written at its zero value: a pointer set on the wire, or required


Message = dict[int, Field]


def _strings(*names: str) -> Message:
    return {number: Field(name, "string") for number, name in enumerate(names, 1) if name}


OWNER_REFERENCE: Message = {
    1: Field("kind", "string"),
    3: Field("name", "string"),
    4: Field("uid", "string"),
    5: Field("apiVersion", "string"),
    6: Field("controller", "bool", keep=True),
    7: Field("blockOwnerDeletion", "bool", keep=True),
}
OBJECT_META: Message = {
    **_strings("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion"),
    7: Field("generation", "int"),
    8: Field("creationTimestamp", "time"),
    9: Field("deletionTimestamp", "time"),
    10: Field("deletionGracePeriodSeconds", "int", keep=True),
    11: Field("labels", "map"),
    12: Field("annotations", "map"),
    13: Field("ownerReferences", OWNER_REFERENCE, repeated=True),
    14: Field("finalizers", "string", repeated=True),
}
LABEL_SELECTOR: Message = {
    1: Field("matchLabels", "map"),
    2: Field(
        "matchExpressions",
        {**_strings("key", "operator"), 3: Field("values", "string", repeated=True)},
        repeated=True,
    ),
}
CONTAINER: Message = {
    **_strings("name", "image"),
    3: Field("command", "string", repeated=True),
    4: Field("args", "string", repeated=True),
    5: Field("workingDir", "string"),
    6: Field(
        "ports",
        {
            1: Field("name", "string"),
            2: Field("hostPort", "int"),
            3: Field("containerPort", "int", keep=True),
            4: Field("protocol", "string"),
            5: Field("hostIP", "string"),
        },
        repeated=True,
    ),
    7: Field("env", _strings("name", "value"), repeated=True),
    8: Field(
        "resources", {1: Field("limits", "map:quantity"), 2: Field("requests", "map:quantity")}
    ),
    13: Field("terminationMessagePath", "string"),
    14: Field("imagePullPolicy", "string"),
    16: Field("stdin", "bool"),
    17: Field("stdinOnce", "bool"),
    18: Field("tty", "bool"),
    20: Field("terminationMessagePolicy", "string"),
}
POD_SPEC: Message = {
    2: Field("containers", CONTAINER, repeated=True),
    3: Field("restartPolicy", "string"),
    4: Field("terminationGracePeriodSeconds", "int", keep=True),
    6: Field("dnsPolicy", "string"),
    7: Field("nodeSelector", "map"),
    8: Field("serviceAccountName", "string"),
    9: Field("serviceAccount", "string"),
    10: Field("nodeName", "string"),
    11: Field("hostNetwork", "bool"),
    16: Field("hostname", "string"),
    17: Field("subdomain", "string"),
    19: Field("schedulerName", "string"),
    20: Field("initContainers", CONTAINER, repeated=True),
    24: Field("priorityClassName", "string"),
}
DEPLOYMENT_SPEC: Message = {
    1: Field("replicas", "int", keep=True),
    2: Field("selector", LABEL_SELECTOR),
    3: Field("template", {1: Field("metadata", OBJECT_META), 2: Field("spec", POD_SPEC)}),
    4: Field(
        "strategy",
        {
            1: Field("type", "string"),
            2: Field(
                "rollingUpdate",
                {1: Field("maxUnavailable", "intorstring"), 2: Field("maxSurge", "intorstring")},
            ),
        },
    ),
    5: Field("minReadySeconds", "int"),
    6: Field("revisionHistoryLimit", "int", keep=True),
    7: Field("paused", "bool"),
    9: Field("progressDeadlineSeconds", "int", keep=True),
}
DEPLOYMENT_STATUS: Message = {
    1: Field("observedGeneration", "int"),
    2: Field("replicas", "int"),
    3: Field("updatedReplicas", "int"),
    4: Field("availableReplicas", "int"),
    5: Field("unavailableReplicas", "int"),
    7: Field("readyReplicas", "int"),
    8: Field("collisionCount", "int", keep=True),
    9: Field("terminatingReplicas", "int", keep=True),
}
METRIC_TARGET: Message = {
    1: Field("type", "string"),
    2: Field("value", "quantity"),
    3: Field("averageValue", "quantity"),
    4: Field("averageUtilization", "int", keep=True),
}
HPA_SPEC: Message = {
    1: Field("scaleTargetRef", _strings("kind", "name", "apiVersion")),
    2: Field("minReplicas", "int", keep=True),
    3: Field("maxReplicas", "int", keep=True),
    4: Field(
        "metrics",
        {
            1: Field("type", "string"),
            4: Field("resource", {1: Field("name", "string"), 2: Field("target", METRIC_TARGET)}),
        },
        repeated=True,
    ),
}
HPA_STATUS: Message = {
    1: Field("observedGeneration", "int", keep=True),
    2: Field("lastScaleTime", "time"),
    3: Field("currentReplicas", "int"),
    4: Field("desiredReplicas", "int", keep=True),
}
KINDS: dict[tuple[str, str], Message] = {
    ("v1", "ConfigMap"): {
        1: Field("metadata", OBJECT_META),
        2: Field("data", "map"),
        3: Field("binaryData", "map:bytes"),
        4: Field("immutable", "bool", keep=True),
    },
    ("v1", "Secret"): {
        1: Field("metadata", OBJECT_META),
        2: Field("data", "map:bytes"),
        3: Field("type", "string"),
        4: Field("stringData", "map"),
        5: Field("immutable", "bool", keep=True),
    },
    ("v1", "Namespace"): {
        1: Field("metadata", OBJECT_META),
        2: Field("spec", {1: Field("finalizers", "string", repeated=True)}),
        3: Field("status", {1: Field("phase", "string")}),
    },
    ("apps/v1", "Deployment"): {
        1: Field("metadata", OBJECT_META),
        2: Field("spec", DEPLOYMENT_SPEC),
        3: Field("status", DEPLOYMENT_STATUS),
    },
    ("autoscaling/v2", "HorizontalPodAutoscaler"): {
        1: Field("metadata", OBJECT_META),
        2: Field("spec", HPA_SPEC),
        3: Field("status", HPA_STATUS),
    },
}


class Undecodable(Exception):
    """A body whose kind or one of whose fields the table does not have."""


def as_json(raw: bytes, accepted: tuple[str, ...]) -> bytes:
    """A protobuf create or update body as JSON; ApiError 415 (listing `accepted`) for a
    kind or a field the fake does not read, 400 for bytes that are no protobuf object."""
    try:
        type_meta, obj = unwrap(raw)
        names = {number: value for number, value in fields(type_meta)}
        api_version, kind = (_text(names.get(n, b"")) for n in (1, 2))
        if not kind:
            raise ValueError("no kind")
        table = KINDS.get((api_version, kind))
        if table is None:
            raise Undecodable
        decoded = {"kind": kind, "apiVersion": api_version, **_message(obj, table)}
    except Undecodable:
        raise status.unsupported_media_type(accepted) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise status.bad_request(f"the protobuf body could not be decoded: {error}") from None
    return msgspec.json.encode(decoded)


def _message(data: bytes, table: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in fields(data):
        field = table.get(number)
        if field is None:
            if value:
                raise Undecodable
            continue
        decoded = _value(field, value)
        if field.kind in ("map", "map:bytes", "map:quantity"):
            out.setdefault(field.name, {}).update(decoded)
        elif field.repeated:
            out.setdefault(field.name, []).append(decoded)
        elif decoded is not _OMIT:
            out[field.name] = decoded
    return out


_OMIT = object()


def _value(field: Field, value: Value) -> Any:
    kind = field.kind
    if isinstance(kind, dict):
        return _message(_bytes(value), kind)
    if kind == "int":
        number = _int(value)
        number = number - (1 << 64) if number >= 1 << 63 else number  # negative int32/int64
        return number if number or field.keep or field.repeated else _OMIT
    if kind == "bool":
        return bool(_int(value)) if _int(value) or field.keep else _OMIT
    raw = _bytes(value)
    if kind == "string":
        return _text(raw) if raw or field.keep or field.repeated else _OMIT
    if kind == "bytes":
        return base64.b64encode(raw).decode("ascii")
    if kind == "quantity":
        return _text(message(raw, 1))
    if kind == "intorstring":
        parts = dict(fields(raw))
        return _text(_bytes(parts.get(3, b""))) if parts.get(1) == 1 else _int(parts.get(2, 0))
    if kind == "time":
        parts = dict(fields(raw))
        if not parts.get(1):
            return _OMIT
        moment = datetime.datetime.fromtimestamp(_int(parts[1]), datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    # A map is a repeated entry message: 1 the key, 2 the value.
    entry = dict(fields(raw))
    key, item = _text(_bytes(entry.get(1, b""))), _bytes(entry.get(2, b""))
    if kind == "map:bytes":
        return {key: base64.b64encode(item).decode("ascii")}
    return {key: _text(message(item, 1)) if kind == "map:quantity" else _text(item)}


def _int(value: Value) -> int:
    if not isinstance(value, int):
        raise ValueError("a number was expected")
    return value


def _bytes(value: Value) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("a length-delimited field was expected")
    return value


def _text(value: Value) -> str:
    return _bytes(value).decode()
