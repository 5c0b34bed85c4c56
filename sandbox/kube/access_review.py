"""SelfSubjectAccessReviews: a user asks the server whether it may do something.

`POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews` (what `kubectl auth can-i`
sends) is answered as upstream's pkg/registry/authorization/selfsubjectaccessreview/rest.go
does: the review comes back, 201, with `status.allowed` and `status.reason` from the same
`rbac.Authorizer` that guards every request, for the user who sent it; nothing is stored.
kubectl sends the review as protobuf (and accepts JSON back), so the few string fields a
review carries are read from protobuf as well as from JSON. The kind is not in discovery.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from sandbox.kube import negotiation, status
from sandbox.kube.rbac import Authorizer
from sandbox.kube.requestinfo import RequestInfo

GROUP = "authorization.k8s.io"
KIND = "SelfSubjectAccessReview"
PATH = f"/apis/{GROUP}/v1/selfsubjectaccessreviews"
_PROTOBUF = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"  # what starts every Kubernetes protobuf body
# Field numbers of k8s.io/api/authorization/v1 generated.proto: a string field N is the
# N-th name here; the selectors (8, 9) are not read.
_RESOURCE_ATTRIBUTES = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
_NON_RESOURCE_ATTRIBUTES = ("path", "verb")


def review(authorizer: Authorizer, user: str, method: str, content_type: str, raw: bytes) -> bytes:
    """The answer to one review request (its JSON body, status 201), or `ApiError`."""
    if method != "POST":
        raise status.method_not_allowed()
    spec = _spec(content_type, raw)
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    _validate(resource, non_resource)
    allowed, reason = authorizer.decide(user, _attributes(resource, non_resource))
    answer = {"allowed": allowed, **({"reason": reason} if reason else {})}
    doc = {
        "kind": KIND,
        "apiVersion": f"{GROUP}/v1",
        "metadata": {},
        "spec": spec,
        "status": answer,
    }
    return msgspec.json.encode(doc)


def _validate(resource: dict[str, str] | None, non_resource: dict[str, str] | None) -> None:
    """Exactly one kind of attributes, as ValidateSelfSubjectAccessReviewSpec requires; the
    bad value is printed as Go's field errors print it (a nil pointer as "null")."""
    if resource is not None and non_resource is not None:
        fields = ", ".join(
            f"{name.capitalize()}:{status.go_value(non_resource.get(name, ''))}"
            for name in _NON_RESOURCE_ATTRIBUTES
        )
        value = f"authorization.NonResourceAttributes{{{fields}}}"
        detail = "cannot be specified in combination with resourceAttributes"
        error = status.FieldError(
            "spec.nonResourceAttributes", "FieldValueInvalid", f"Invalid value: {value}: {detail}"
        )
    elif resource is None and non_resource is None:
        error = status.invalid_field(
            "spec.resourceAttributes",
            "null",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    else:
        return
    raise status.invalid_of_kind(GROUP, KIND, "", [error])


def _attributes(
    resource: dict[str, str] | None, non_resource: dict[str, str] | None
) -> RequestInfo:
    """What the review asks about as request attributes (upstream's ResourceAttributesFrom
    and NonResourceAttributesFrom): taken as given, not parsed from a path."""
    if non_resource is not None:
        return RequestInfo(
            verb=non_resource.get("verb", ""),
            path=non_resource.get("path", ""),
            resource_request=False,
        )
    assert resource is not None
    return RequestInfo(
        verb=resource.get("verb", ""),
        path="",
        resource_request=True,
        api_group=resource.get("group", ""),
        api_version=resource.get("version", ""),
        resource=resource.get("resource", ""),
        subresource=resource.get("subresource", ""),
        namespace=resource.get("namespace", ""),
        name=resource.get("name", ""),
    )


def _spec(content_type: str, raw: bytes) -> dict[str, Any]:
    if content_type.split(";")[0].strip().lower() == _PROTOBUF:
        return _spec_from_protobuf(raw)
    try:
        doc = msgspec.json.decode(negotiation.body_as_json(content_type, raw))
    except msgspec.DecodeError as error:
        raise status.bad_request(
            f"the body of the request was in an unknown format: {error}"
        ) from None
    spec = (doc.get("spec") if isinstance(doc, dict) else None) or {}
    if not isinstance(spec, dict) or not all(
        isinstance(spec.get(key) or {}, dict)
        for key in ("resourceAttributes", "nonResourceAttributes")
    ):
        raise status.bad_request(f"the body is not a {KIND}")
    return spec


def _spec_from_protobuf(raw: bytes) -> dict[str, Any]:
    """The spec of a protobuf review: the envelope (runtime.Unknown, field 2 the object),
    the review (field 2 its spec), the spec (1 resourceAttributes, 2 nonResourceAttributes)."""
    if not raw.startswith(_MAGIC):
        raise status.bad_request("the body is not a Kubernetes protobuf object")
    try:
        obj = _message(raw[len(_MAGIC) :], 2)
        spec_bytes = _message(obj, 2)
        spec: dict[str, Any] = {}
        for number, value in _fields(spec_bytes):
            if number == 1:
                spec["resourceAttributes"] = _strings(value, _RESOURCE_ATTRIBUTES)
            elif number == 2:
                spec["nonResourceAttributes"] = _strings(value, _NON_RESOURCE_ATTRIBUTES)
    except (IndexError, ValueError, UnicodeDecodeError):
        raise status.bad_request("the protobuf body could not be decoded") from None
    return spec


def _message(data: bytes, number: int) -> bytes:
    """The last length-delimited field `number` of a message (empty when absent)."""
    found = b""
    for field, value in _fields(data):
        if field == number:
            found = value
    return found


def _strings(data: bytes, names: tuple[str, ...]) -> dict[str, str]:
    return {
        names[number - 1]: value.decode()
        for number, value in _fields(data)
        if 1 <= number <= len(names) and value
    }


def _fields(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, bytes) of each length-delimited field; other wire types skipped."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        wire = key & 7
        if wire == 0:
            _, at = _varint(data, at)
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise ValueError("truncated field")
            yield key >> 3, data[at : at + length]
            at += length
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
