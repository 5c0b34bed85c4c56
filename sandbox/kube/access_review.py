"""SelfSubjectAccessReviews: a user asks the server whether it may do something.

`POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews` (what `kubectl auth can-i`
sends) is answered as upstream's pkg/registry/authorization/selfsubjectaccessreview/rest.go
does: the review comes back, 201, with `status.allowed` and `status.reason` from the same
`rbac.Authorizer` that guards every request, for the user who sent it; nothing is stored.
kubectl sends the review as protobuf (and accepts JSON back), so the few string fields a
review carries are read from protobuf as well as from JSON. The kind is not in discovery.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sandbox.kube import negotiation, protobuf, status
from sandbox.kube.rbac import Authorizer
from sandbox.kube.requestinfo import RequestInfo

GROUP = "authorization.k8s.io"
KIND = "SelfSubjectAccessReview"
PATH = f"/apis/{GROUP}/v1/selfsubjectaccessreviews"
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
    if content_type.split(";")[0].strip().lower() == protobuf.MEDIA_TYPE:
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
    """The spec of a protobuf review: the envelope's object (the review), the review (field
    2 its spec), the spec (1 resourceAttributes, 2 nonResourceAttributes)."""
    try:
        _, obj = protobuf.unwrap(raw)
    except ValueError:
        raise status.bad_request("the body is not a Kubernetes protobuf object") from None
    try:
        spec_bytes = protobuf.message(obj, 2)
        spec: dict[str, Any] = {}
        for number, value in protobuf.fields(spec_bytes):
            if number == 1 and isinstance(value, bytes):
                spec["resourceAttributes"] = _strings(value, _RESOURCE_ATTRIBUTES)
            elif number == 2 and isinstance(value, bytes):
                spec["nonResourceAttributes"] = _strings(value, _NON_RESOURCE_ATTRIBUTES)
    except (ValueError, UnicodeDecodeError):
        raise status.bad_request("the protobuf body could not be decoded") from None
    return spec


def _strings(data: bytes, names: tuple[str, ...]) -> dict[str, str]:
    return {
        names[number - 1]: value.decode()
        for number, value in protobuf.fields(data)
        if 1 <= number <= len(names) and isinstance(value, bytes) and value
    }
