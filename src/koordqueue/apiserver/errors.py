"""API errors as the `Status` objects a real API server returns.

Every failure a client can cause is raised as `APIError` and turned into a `Status`
body with the same code, reason and message wording kube-apiserver uses, because
clients (kubectl, client-go, kubernetes_asyncio) branch on `reason` and `code`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from koordqueue.apiserver.registry import ResourceType
from koordqueue.apiserver.validation import FieldError


class APIError(Exception):
    """A request failure with its HTTP code and `Status` reason."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.reason, self.message, self.details)


def status_object(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if not reason:  # (omitempty in metav1.Status)
        del out["reason"]
    if details is not None:
        out["details"] = details
    return out


def qualified_resource(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def qualified_kind(rt: ResourceType) -> str:
    return f"{rt.kind}.{rt.group}" if rt.group else rt.kind


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if rt.group:
        out["group"] = rt.group
    out["kind"] = rt.plural
    return out


def not_found(rt: ResourceType, name: str) -> APIError:
    return APIError(404, "NotFound", f'{qualified_resource(rt)} "{name}" not found', _details(rt, name))


def namespace_not_found(name: str) -> APIError:
    return APIError(404, "NotFound", f'namespaces "{name}" not found', {"name": name, "kind": "namespaces"})


def resource_not_found() -> APIError:
    return APIError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(rt: ResourceType, name: str) -> APIError:
    return APIError(409, "AlreadyExists", f'{qualified_resource(rt)} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> APIError:
    return APIError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified_resource(rt)} "{name}": {why}',
        _details(rt, name),
    )


STALE_OBJECT = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(rt: ResourceType, name: str, causes: Sequence[tuple[str, str] | FieldError]) -> APIError:
    """422 Invalid; `causes` are FieldErrors or (field, message) pairs such as ("metadata.name",
    "Invalid value: ..."). The message is Go's NewInvalid: the causes aggregated, duplicates dropped."""
    pairs = [(c.field, c.message, c.type) if isinstance(c, FieldError) else (c[0], c[1], _cause_reason(c[1]))
             for c in causes]
    texts = list(dict.fromkeys(f"{f}: {m}" for f, m, _ in pairs))
    text = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = [{"reason": reason, "message": m, "field": f} for f, m, reason in pairs]
    return APIError(422, "Invalid", f'{qualified_kind(rt)} "{name}" is invalid: {text}', details)


def _cause_reason(message: str) -> str:
    for prefix, reason in (
        ("Required value", "FieldValueRequired"),
        ("Forbidden", "FieldValueForbidden"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
    ):
        if message.startswith(prefix):
            return reason
    return "FieldValueInvalid"


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def unprocessable(message: str) -> APIError:
    """422 without field causes, as a failed JSON patch gets."""
    return APIError(422, "Invalid", message)


def forbidden(rt: ResourceType, name: str, why: str) -> APIError:
    return APIError(
        403, "Forbidden", f'{qualified_resource(rt)} "{name}" is forbidden: {why}', _details(rt, name)
    )


def method_not_allowed() -> APIError:
    return APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def unsupported_media_type(content_type: str, accepted: list[str]) -> APIError:
    return APIError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}",
        {},
    )


def not_acceptable(accepted: list[str]) -> APIError:
    return APIError(
        406, "NotAcceptable", f"only the following media types are accepted: {', '.join(accepted)}", {}
    )


def expired(message: str) -> APIError:
    return APIError(410, "Expired", message)


def too_old_resource_version(requested: int, oldest: int) -> APIError:
    return expired(f"too old resource version: {requested} ({oldest})")


def unauthorized() -> APIError:
    return APIError(401, "Unauthorized", "Unauthorized")


def too_many_requests(retry_after: int) -> APIError:
    return APIError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        {"retryAfterSeconds": retry_after},
        {"Retry-After": str(retry_after)},
    )


def internal(message: str) -> APIError:
    return APIError(
        500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
    )


# kube-apiserver's words for a 422 from a JSON patch it could not apply (NewGenericServerResponse):
# the patch library's own message is not passed on.
GENERIC_UNPROCESSABLE = "the server rejected our request due to an error in our request"


def request_entity_too_large(message: str) -> APIError:
    """413, as kube-apiserver words it (a body over 3 MiB, a JSON patch of too many operations)."""
    return APIError(413, "RequestEntityTooLarge", f"Request entity too large: {message}")


def etcd_request_too_large() -> APIError:
    """An object etcd would refuse to store (over its 1.5 MiB request limit): kube-apiserver passes
    etcd's error on as a 500 with etcd's words and no reason (kubernetes#112152, still open)."""
    return APIError(500, "", "etcdserver: request is too large")
