"""The one error tree of Kubernetes calls.

The client (`kube.api`) translates httpx's failures and the server's answers in one place,
chained `from` the original, into:

    KubeError                 status None for transport failures (connect, deadline)
    ├── BadRequest            400: a body the server could not take as sent (an unknown
    │                         field under fieldValidation=Strict): a bug in what we wrote
    ├── Forbidden             403: RBAC (or an admission policy) does not allow it; its
    │                         `permission` is what the request needed (`kube.permission`)
    ├── NotFound              404
    ├── Conflict              409: exists already, or a stale resourceVersion
    ├── Gone                  410: the resourceVersion or continue token expired
    ├── Invalid               422: the server refused the object
    ├── TooManyRequests       429 (`retry_after` from Retry-After)
    ├── TimedOut              no byte within the read timeout (a stalled watch, a silent server)
    ├── Aborted               a watch ended on purpose (`KubeApi.abort_streams()`)
    └── AnswerTooLarge        an answer (or one watch event) past the bytes it may hold

Every other status is a plain `KubeError` carrying it. Messages carry the call and at most
`MESSAGE_LIMIT` characters of the server's answer, never a token.
"""

from __future__ import annotations

import msgspec

from kube.permission import Permission, refused

MESSAGE_LIMIT = 300  # characters of an API message kept in an error


class KubeError(Exception):
    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class BadRequest(KubeError):
    pass


class Forbidden(KubeError):
    def __init__(self, message: str, *, permission: Permission | None) -> None:
        super().__init__(message, status=403, reason="Forbidden")
        self.permission = permission
        """What the request needed; None for a path that is not an API resource
        (`/version`)."""

    @property
    def denied(self) -> str:
        """The missing permission as a health reason or log field."""
        return self.permission.denied if self.permission else f"forbidden: {self}"


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Gone(KubeError):
    pass


class Invalid(KubeError):
    pass


class TooManyRequests(KubeError):
    pass


class TimedOut(KubeError):
    pass


class Aborted(KubeError):
    """A watch ended by `abort_streams()` on purpose, not a failure of the API server."""


class AnswerTooLarge(KubeError):
    """The answer went past the bytes the call may hold; nothing of it was kept."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


_BY_STATUS: dict[int, type[KubeError]] = {  # 403 is built apart: it names a permission
    400: BadRequest,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


class _Status(msgspec.Struct, gc=False):
    message: str = ""
    reason: str = ""


def for_status(
    status: int,
    what: str,
    detail: str,
    *,
    permission: Permission | None,
    reason: str = "",
    retry_after: float | None = None,
) -> KubeError:
    """The error for an answer with `status`: `what` names the call, `detail` is the
    server's word on it (already cut short), `permission` what the call needed."""
    if status == 403:
        return Forbidden(refused(what, permission, detail), permission=permission)
    cls = _BY_STATUS.get(status, KubeError)
    return cls(f"{what}: {status} {detail}", status=status, reason=reason, retry_after=retry_after)


def status_of(body: bytes | str) -> tuple[str, str]:
    """The `message` and `reason` of a Kubernetes Status body, the message cut to
    MESSAGE_LIMIT; a body that is no Status gives its own start as the message."""
    try:
        status = msgspec.json.decode(body, type=_Status)
    except msgspec.DecodeError:
        text = body if isinstance(body, str) else body.decode("utf-8", "replace")
        return text[:MESSAGE_LIMIT], ""
    return status.message[:MESSAGE_LIMIT], status.reason
