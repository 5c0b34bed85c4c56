"""Kubernetes `Status` answers and the one exception that carries them.

Every refusal in the fake (not found, conflict, expired, forbidden, injected faults) is an
`ApiError`; the HTTP layer writes `error.body()` with `error.code`, exactly the shape the
real API server uses (`kind: Status`, `status: Failure`, `reason`, `details`, `code`), so
clients' error handling is exercised for real. The Python API raises the same exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from sandbox.kube.resources import Resource


class ApiError(Exception):
    """A request the fake answers with a Status instead of an object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: tuple[tuple[str, str], ...] = (),
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers
        self.metadata = metadata or {}

    def status(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": self.metadata,
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # an error the server could not classify has no reason (Unknown)
            doc["reason"] = self.reason
        if self.details is not None:
            doc["details"] = self.details
        doc["code"] = self.code
        return doc

    def body(self) -> bytes:
        return msgspec.json.encode(self.status())


def _details(resource: Resource, name: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name is not None:
        details["name"] = name
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    return details


def not_found(resource: Resource, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{resource.qualified} "{name}" not found',
        details=_details(resource, name),
    )


def already_exists(resource: Resource, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{resource.qualified} "{name}" already exists',
        details=_details(resource, name),
    )


def conflict(resource: Resource, name: str, why: str | None = None) -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource.qualified} "{name}": {why}',
        details=_details(resource, name),
    )


def uid_precondition_failed(
    resource: Resource, namespace: str | None, name: str, given: str, stored: str
) -> ApiError:
    """409 for a PUT whose body's uid is not the object's: the storage layer's error, which
    names the object's etcd key."""
    where = "/".join(part for part in (resource.plural, namespace, name) if part)
    return conflict(
        resource,
        name,
        f"StorageError: invalid object, Code: 4, Key: /registry/{where}, ResourceVersion: 0, "
        f"AdditionalErrorMsg: Precondition failed: UID in precondition: {given}, "
        f"UID in object meta: {stored}",
    )


def delete_precondition_failed(
    resource: Resource, name: str, field: str, given: str, stored: str
) -> ApiError:
    """409 for a delete whose `uid` or `resourceVersion` precondition does not hold: named
    by kind, as the registry's precondition check words it."""
    after = {
        "UID": "The object might have been deleted and then recreated",
        "ResourceVersion": "The object might have been modified",
    }[field]
    qualified = f"{resource.kind}.{resource.group}" if resource.group else resource.kind
    details: dict[str, Any] = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.kind
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": the {field} in the '
        f"precondition ({given}) does not match the {field} in record ({stored}). {after}",
        details=details,
    )


def resource_version_on_create() -> ApiError:
    """What the real server answers a create carrying `metadata.resourceVersion`: the
    storage layer's error, unclassified, so a 500 without a reason."""
    return ApiError(500, "", "resourceVersion should not be set on objects to be created")


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unrecognized_object(kind: str, parse_error: str, raw: bytes) -> ApiError:
    """400 for a body the server cannot read as JSON: the message names the expected kind,
    the parse error and the body's start (as text when it opens like an object, else hex),
    as k8s.io/apiserver/pkg/endpoints/handlers/rest.go's transformDecodeError words it."""
    head = raw[:30]
    if raw[:1] == b"{":
        summary = head.decode("utf-8", "replace")
    else:
        summary = head.hex() if raw else "<empty>"
    if len(raw) > 30:
        summary += " ..."
    return bad_request(
        f"the object provided is unrecognized (must be of type {kind}): couldn't get "
        f"version/kind; json parse error: {parse_error} ({summary})"
    )


def invalid(resource: Resource, name: str, message: str) -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f'{resource.kind} "{name}" is invalid: {message}',
        details=_details(resource, name),
    )


@dataclass(frozen=True, slots=True)
class FieldError:
    """One field's complaint in a 422 Invalid, worded as the real server words it."""

    field: str
    reason: str  # the cause's machine-readable type: FieldValueForbidden, ...
    body: str  # the message without the field: "Forbidden: ...", "Unsupported value: ..."

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


def forbidden_field(field: str, detail: str) -> FieldError:
    return FieldError(field, "FieldValueForbidden", f"Forbidden: {detail}")


def invalid_field(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(field, "FieldValueInvalid", f"Invalid value: {go_value(value)}: {detail}")


def required_field(field: str, detail: str = "") -> FieldError:
    return FieldError(
        field, "FieldValueRequired", "Required value" + (f": {detail}" if detail else "")
    )


def too_long_field(field: str, limit: int) -> FieldError:
    return FieldError(field, "FieldValueTooLong", f"Too long: must have at most {limit} bytes")


def go_value(value: Any) -> str:
    """A value as Go's `%#v` prints it in field errors: "text", 5, map[string]string{...}."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return msgspec.json.encode(value).decode()
    if isinstance(value, dict):
        pairs = ", ".join(f"{go_value(k)}:{go_value(v)}" for k, v in value.items())
        return f"map[string]string{{{pairs}}}"
    return str(value)


def unsupported_field(field: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    quoted = ", ".join(msgspec.json.encode(v).decode() for v in supported)
    body = f"Unsupported value: {msgspec.json.encode(value).decode()}: supported values: {quoted}"
    return FieldError(field, "FieldValueNotSupported", body)


def invalid_list_options(errors: list[FieldError]) -> ApiError:
    """422 for query parameters a list or watch may not carry together."""
    return invalid_options("ListOptions", errors)


def invalid_options(kind: str, errors: list[FieldError]) -> ApiError:
    """422 for a request's options (`ListOptions`, `CreateOptions`, ...) that do not hold."""
    details = {"group": "meta.k8s.io", "kind": kind}
    return _invalid(f'{kind}.meta.k8s.io ""', details, errors)


def invalid_object(resource: Resource, name: str, errors: list[FieldError]) -> ApiError:
    """422 for an object that fails validation, one cause per field error. Unlike the other
    errors about an object, errors.NewInvalid names it by its group and kind
    (`HorizontalPodAutoscaler.autoscaling`, details.kind `HorizontalPodAutoscaler`), which
    kubectl prints as `The HorizontalPodAutoscaler "x" is invalid`."""
    return invalid_of_kind(resource.group, resource.kind, name, errors)


def invalid_of_kind(group: str, kind: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 for an object of `group` and `kind`, stored or not (a subresource's `Scale`)."""
    details = {"name": name, **({"group": group} if group else {}), "kind": kind}
    qualified = f"{kind}.{group}" if group else kind
    return _invalid(f'{qualified} "{name}"', details, errors)


def _invalid(subject: str, details: dict[str, Any], errors: list[FieldError]) -> ApiError:
    # Identical messages are said once; more than one is bracketed, as Go's aggregate prints.
    messages = list(dict.fromkeys(str(error) for error in errors))
    summary = messages[0] if len(messages) == 1 else f"[{', '.join(messages)}]"
    causes = [{"reason": e.reason, "message": e.body, "field": e.field} for e in errors]
    return ApiError(
        422, "Invalid", f"{subject} is invalid: {summary}", details={**details, "causes": causes}
    )


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """504 for a list or streaming list whose resourceVersion the server has not reached."""
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
        headers=(("Retry-After", "1"),),
    )


def unprocessable() -> ApiError:
    """What the real server answers for a patch it cannot apply (a failed JSON patch `test`,
    a missing path): 422 Invalid, the patch's own complaint withheld."""
    return ApiError(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
        details={},
    )


def list_expired() -> ApiError:
    """410 for a list at an exact resourceVersion whose history is compacted away."""
    return ApiError(410, "Expired", "The resourceVersion for the provided list is too old.")


def invalid_resource_version(value: str, *, watch: bool) -> ApiError:
    """A resourceVersion that is not a number: a list's options are checked first (400), a
    watch meets the storage layer's invalid-value error, which the API layer does not
    classify (500 without a reason)."""
    quoted = msgspec.json.encode(value).decode()
    error = f"resourceVersion: Invalid value: {quoted}: strconv.ParseUint: parsing {quoted}: "
    error += "invalid syntax"
    if watch:
        return ApiError(500, "", error)
    return bad_request(f"invalid resource version: {error}")


def resource_version_with_continue() -> ApiError:
    return bad_request("specifying resource version is not allowed when using continue")


def watch_expired(since: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {since} ({oldest})")


def watch_compacted() -> ApiError:
    """410 as an ERROR event on an open watch that etcd's compaction passed
    (`interpretWatchError`, staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go)."""
    return ApiError(410, "Expired", "The resourceVersion for the provided watch is too old.")


def continue_expired(fresh_token: str | None) -> ApiError:
    message = (
        "The provided continue parameter is too old to display a consistent list result. "
        "You can start a new list without the continue parameter, or use the continue token "
        "in this response to retrieve the remainder of the results. Continuing with the "
        "provided token results in an inconsistent list - objects that were created, "
        "modified, or deleted between the time the first chunk was returned and now may "
        "show up in the list."
    )
    metadata = {"continue": fresh_token} if fresh_token else None
    return ApiError(410, "Expired", message, metadata=metadata)


def unauthorized() -> ApiError:
    # Upstream's Status for a failed authentication carries no details.
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden_object(resource: Resource, name: str, why: str) -> ApiError:
    """403 from an admission rule about one object (`namespaces "default" is forbidden:
    this namespace may not be deleted`), as apierrors.NewForbidden words it."""
    subject = f'{resource.qualified} "{name}"' if name else resource.qualified
    return ApiError(
        403, "Forbidden", f"{subject} is forbidden: {why}", details=_details(resource, name)
    )


def too_many_requests(retry_after: int) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        details={"retryAfterSeconds": retry_after},
        headers=(("Retry-After", str(retry_after)),),
    )


def internal_error(message: str = "an injected fault") -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        details={"causes": [{"message": message}]},
    )


def unsupported_media_type(accepted: tuple[str, ...]) -> ApiError:
    """415 for a body in a media type the endpoint does not decode (negotiation/errors.go)."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def unsupported_patch_type() -> ApiError:
    """415 for a PATCH whose Content-Type is no patch type: the patch handler's terse words."""
    return ApiError(415, "UnsupportedMediaType", "415: Unsupported Media Type", details={})


def method_not_allowed() -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        details={},
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", details={})


def injected(code: int, resource: Resource | None, retry_after: int = 1) -> ApiError:
    """The Status a scripted fault answers with, shaped like the real one for that code
    (a 403 is `requestinfo.forbidden`'s, which needs the request)."""
    if code == 409 and resource is not None:
        # What a write with a stale resourceVersion meets; the name is not known here.
        return ApiError(
            409,
            "Conflict",
            f"Operation cannot be fulfilled on {resource.qualified}: the object has been "
            "modified; please apply your changes to the latest version and try again",
            details=_details(resource, None),
        )
    if code == 429:
        return too_many_requests(retry_after)
    if code >= 500:
        error = internal_error()
        if code != 500:
            error.code = code
            error.reason = {503: "ServiceUnavailable", 504: "Timeout"}.get(code, "InternalError")
        return error
    return ApiError(code, "Unknown", f"an injected {code}")


def success(resource: Resource, name: str, uid: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details |= {"kind": resource.plural, "uid": uid}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }
