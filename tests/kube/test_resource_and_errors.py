"""Pure parts of the client: resource addressing, error classes, default projection."""

from __future__ import annotations

import pytest

from koordqueue.kube.client import Resource
from koordqueue.kube.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    error_from_status,
)
from koordqueue.kube.informer import LAST_APPLIED_ANNOTATION, key_of, trim


def test_resource_from_api_version() -> None:
    assert Resource.of("v1", "pods") == Resource("", "v1", "pods", True)
    assert Resource.of("kubeflow.org/v1", "pytorchjobs") == Resource("kubeflow.org", "v1", "pytorchjobs")
    assert Resource.of("scheduling.k8s.io/v1", "priorityclasses", namespaced=False).api_version == "scheduling.k8s.io/v1"


def test_resource_paths() -> None:
    pods = Resource("", "v1", "pods")
    jobs = Resource("kubeflow.org", "v1", "pytorchjobs")
    nodes = Resource("", "v1", "nodes", namespaced=False)
    assert pods.path() == "/api/v1/pods"
    assert pods.path("ns") == "/api/v1/namespaces/ns/pods"
    assert pods.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert jobs.path("team", "j") == "/apis/kubeflow.org/v1/namespaces/team/pytorchjobs/j"
    assert nodes.path(None, "n1", "status") == "/api/v1/nodes/n1/status"
    with pytest.raises(ValueError, match="cluster-scoped"):
        nodes.path("ns")
    with pytest.raises(ValueError, match="namespaced"):
        pods.path(None, "p")


@pytest.mark.parametrize(
    ("status", "reason", "cls"),
    [
        (404, "NotFound", NotFound),
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (410, "Expired", Gone),
        (401, "Unauthorized", Unauthorized),
        (403, "Forbidden", Forbidden),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (503, "ServiceUnavailable", ServerError),
        (418, "Teapot", ApiError),
    ],
)
def test_errors_by_status_and_reason(status: int, reason: str, cls: type[ApiError]) -> None:
    body = {"kind": "Status", "status": "Failure", "reason": reason, "message": "m", "code": status}
    err = error_from_status(status, body)
    assert type(err) is cls
    assert (err.status, err.reason, err.message, err.body) == (status, reason, "m", body)
    assert not isinstance(err, Conflict) or reason == "Conflict"


def test_error_without_a_status_body_and_retry_after_details() -> None:
    err = error_from_status(502, None, after_retry=True)
    assert isinstance(err, ServerError) and err.reason == "ServerError" and err.after_retry
    assert err.retry_after is None
    busy = error_from_status(429, {"reason": "TooManyRequests", "details": {"retryAfterSeconds": 3}})
    assert busy.retry_after == 3.0


def test_trim_drops_managed_fields_and_last_applied_only() -> None:
    obj = {
        "metadata": {
            "name": "a", "namespace": "ns", "managedFields": [{"manager": "kubectl"}],
            "annotations": {LAST_APPLIED_ANNOTATION: "{...}", "keep": "me"},
        },
        "spec": {"x": 1},
    }
    assert trim(obj) == {"metadata": {"name": "a", "namespace": "ns", "annotations": {"keep": "me"}}, "spec": {"x": 1}}


def test_keys_are_namespace_slash_name() -> None:
    assert key_of({"metadata": {"namespace": "ns", "name": "a"}}) == "ns/a"
    assert key_of({"metadata": {"name": "node-1"}}) == "node-1"
