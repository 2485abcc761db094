"""Errors of the API server, one class per case a caller handles differently."""

from __future__ import annotations

from typing import Any


class KubeError(Exception):
    """Base of everything the client raises."""


class ConnectionFailed(KubeError):
    """The server could not be reached, or the connection broke, after all retries."""


class ApiError(KubeError):
    """The server answered with an error `Status`.

    `after_retry` is True when an earlier attempt of the same request may already
    have taken effect (its answer was lost to a 5xx or a broken connection): an
    AlreadyExists after a retried create, a NotFound after a retried delete or a
    Conflict after a retried update may then mean that our own request succeeded.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        body: dict[str, Any] | None = None,
        *,
        after_retry: bool = False,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        self.after_retry = after_retry

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked us to wait (Status details.retryAfterSeconds)."""
        details = (self.body or {}).get("details") or {}
        value = details.get("retryAfterSeconds")
        return float(value) if isinstance(value, int | float) and value > 0 else None


class BadRequest(ApiError):
    """400."""


class Unauthorized(ApiError):
    """401: no or bad credentials."""


class Forbidden(ApiError):
    """403: authenticated but not allowed (RBAC)."""


class NotFound(ApiError):
    """404."""


class Conflict(ApiError):
    """409 Conflict: the resourceVersion we sent is stale; reread and try again."""


class AlreadyExists(ApiError):
    """409 AlreadyExists: a create found an object of that name."""


class Gone(ApiError):
    """410: the resourceVersion (or continue token) is too old; list again."""


class Invalid(ApiError):
    """422: the object failed validation."""


class TooManyRequests(ApiError):
    """429 after all retries."""


class ServerError(ApiError):
    """5xx after all retries."""


def error_from_status(status: int, body: dict[str, Any] | None, *, after_retry: bool = False) -> ApiError:
    """The ApiError for an HTTP status and its (possibly absent) Status body."""
    body = body if isinstance(body, dict) else None
    reason = str((body or {}).get("reason") or "")
    message = str((body or {}).get("message") or "")
    cls: type[ApiError]
    if status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, ApiError)
    return cls(status, reason or cls.__name__, message, body, after_retry=after_retry)


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}
