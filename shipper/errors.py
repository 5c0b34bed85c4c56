"""The Moonin API error tree. httpx errors are translated in one place (`shipper.client`).

    MooninAPIError
    ├── RejectedBody        400, 413, 422: this body will never be accepted; split it
    ├── StreamPaused        the agent cannot fix this by retrying soon; pause and re-read the token
    │   ├── CredentialsRejected   401, 403
    │   └── Misconfigured         404, 405 and every other 4xx
    └── RetryLater          408, 429, 5xx, connection errors, timeouts (may carry Retry-After)
        ├── AnswerOverLimit      a 2xx whose body passed its byte bound (after decompression)
        ├── MalformedAnswer      a 2xx whose body is not what the contract says
        ├── DeadlineExceeded     no complete answer within the call's total deadline
        └── CallCancelled        given up in flight: the agent is stopping

These four carry a short `summary` (`answer over 8 MiB`, `malformed answer`, `deadline
exceeded`, `cancelled`) that health reasons repeat, so an operator sees which part fails.

InsecureURLError is a configuration error raised before any request is made.
"""

from __future__ import annotations


class MooninAPIError(Exception):
    """A request to Moonin did not succeed. `status` is None for transport failures."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body  # already cut short: safe to log and to store with a dead letter
        # A 401/403 made the client re-read the token file and find a new token: the next
        # request carries it, so it is worth trying at once.
        self.token_rotated = False


class RejectedBody(MooninAPIError):
    pass


class StreamPaused(MooninAPIError):
    pass


class CredentialsRejected(StreamPaused):
    pass


class Misconfigured(StreamPaused):
    pass


class RetryLater(MooninAPIError):
    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, body=body)
        self.retry_after = retry_after


class InsecureURLError(ValueError):
    """A plain http:// URL without MOONIN_INSECURE_HTTP=true."""


class AnswerOverLimit(RetryLater):
    """The platform answered with more than the call may read; nothing of it was used."""

    def __init__(self, message: str, *, summary: str) -> None:
        super().__init__(message)
        self.summary = summary


class MalformedAnswer(RetryLater):
    """A 2xx we cannot use: nothing is lost by asking again later, so it is retried."""

    summary = "malformed answer"


class DeadlineExceeded(RetryLater):
    """Connecting, sending and reading the whole answer took longer than the call's deadline."""

    summary = "deadline exceeded"


class CallCancelled(RetryLater):
    """A call given up in flight because the agent is stopping; nothing is wrong with the
    platform."""

    summary = "cancelled"
