"""The admission webhook suspends a job in the very request that creates it."""

from __future__ import annotations

import base64
import json

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.webhook import json_patch_for, review

from .conftest import System, pytorch_job, quota

pytestmark = pytest.mark.timeout(60)


def admission_review(obj: dict[str, object], group: str, version: str, kind: str,
                     operation: str = "CREATE") -> dict[str, object]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": group, "version": version, "kind": kind},
                        "operation": operation, "object": obj}}


def patch_of(answer: dict[str, object]) -> list[dict[str, object]]:
    response = answer["response"]
    assert isinstance(response, dict) and response["allowed"] is True and response["uid"] == "u-1"
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    return list(json.loads(base64.b64decode(response["patch"])))


@pytest.mark.parametrize(
    ("obj", "merge", "ops"),
    [
        ({"metadata": {}}, {"metadata": {"annotations": {"a/b": "true"}}},
         [{"op": "add", "path": "/metadata/annotations", "value": {"a/b": "true"}}]),
        ({"metadata": {"annotations": {"x": "1"}}}, {"metadata": {"annotations": {"a/b": "true"}}},
         [{"op": "add", "path": "/metadata/annotations/a~1b", "value": "true"}]),
        ({"spec": {"suspend": False}}, {"spec": {"suspend": True}},
         [{"op": "replace", "path": "/spec/suspend", "value": True}]),
        ({"spec": {"suspend": True}}, {"spec": {"suspend": True}}, []),
        ({"metadata": {"annotations": {"k": "v"}}}, {"metadata": {"annotations": {"k": None}}},
         [{"op": "remove", "path": "/metadata/annotations/k"}]),
        ({}, {"metadata": {"annotations": {"k": None, "j": "1"}}},
         [{"op": "add", "path": "/metadata", "value": {"annotations": {"j": "1"}}}]),
    ],
)
def test_a_merge_patch_becomes_the_json_patch_a_webhook_answers_with(obj, merge, ops) -> None:
    assert json_patch_for(obj, merge) == ops


def test_review_suspends_new_jobs_of_queued_kinds_and_leaves_the_rest() -> None:
    job = pytorch_job("j")
    ops = patch_of(review(admission_review(job, "kubeflow.org", "v1", "PyTorchJob"), frozenset({"PyTorchJob"})))
    assert {"op": "add", "path": "/metadata/annotations/scheduling.x-k8s.io~1suspend", "value": "true"} in ops
    assert {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}} in ops  # the seed has none
    # A kind we do not queue (extension off), an update, a ConfigMap: allowed unchanged.
    assert patch_of(review(admission_review(job, "kubeflow.org", "v1", "PyTorchJob"), frozenset({"TFJob"}))) == []
    assert patch_of(review(admission_review(job, "kubeflow.org", "v1", "PyTorchJob", "UPDATE"),
                           frozenset({"PyTorchJob"}))) == []
    assert patch_of(review(admission_review({"metadata": {}}, "", "v1", "ConfigMap"), frozenset({"Job"}))) == []
    # A job we cannot read is suspended all the same; the controller says why later.
    broken = {"metadata": {"name": "b"}, "spec": {"runPolicy": {"suspend": "yes please"}}}
    assert patch_of(review(admission_review(broken, "kubeflow.org", "v1", "PyTorchJob"),
                           frozenset({"PyTorchJob"}))) == [
        {"op": "add", "path": "/metadata/annotations", "value": {c.ANNOTATION_SUSPEND: c.TRUE}},
        {"op": "replace", "path": "/spec/runPolicy/suspend", "value": True},
    ]
    with pytest.raises(ValueError):
        review({"kind": "AdmissionReview"}, frozenset())


async def test_a_job_is_stored_suspended_before_any_controller_reconciles_it(system: System) -> None:
    await system.apply(quota("team-w", 0, 1))
    created = await system.akubectl("create", "-o", "json", "-f", "-",
                                    stdin=json.dumps(pytorch_job("hooked", gpus_per_pod=4)))
    job = json.loads(created)  # the object as the create request stored it
    assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert job["metadata"]["generation"] == 1  # suspended at creation, not patched afterwards
