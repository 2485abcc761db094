"""The admission webhook suspends a job in the very request that creates it."""

from __future__ import annotations

import base64
import json
import ssl

import aiohttp
import pytest

from koordqueue.api import constants as c
from koordqueue.controller.webhook import MUTATING_WEBHOOKS, json_patch_for, review, webhook_configuration
from koordqueue.jobs.parents import Parent

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
    assert {"op": "add", "path": "/metadata/annotations/koord-queue~1job-has-enqueued", "value": "true"} in ops
    # A kind we do not queue (extension off), an update, a ConfigMap: allowed unchanged.
    assert patch_of(review(admission_review(job, "kubeflow.org", "v1", "PyTorchJob"), frozenset({"TFJob"}))) == []
    assert patch_of(review(admission_review(job, "kubeflow.org", "v1", "PyTorchJob", "UPDATE"),
                           frozenset({"PyTorchJob"}))) == []
    assert patch_of(review(admission_review({"metadata": {}}, "", "v1", "ConfigMap"), frozenset({"Job"}))) == []
    # A job we cannot read is suspended all the same; the controller says why later.
    broken = {"metadata": {"name": "b"}, "spec": {"runPolicy": {"suspend": "yes please"}}}
    ops = patch_of(review(admission_review(broken, "kubeflow.org", "v1", "PyTorchJob"), frozenset({"PyTorchJob"})))
    queued = ops[0]["value"].pop(c.ANNOTATION_JOB_ENQUEUE_TIMESTAMP)  # Koord-Queue's: queued from now, in Go's layout
    assert queued.endswith(" +0000 UTC") and queued[:4].isdigit(), queued
    assert ops == [
        {"op": "add", "path": "/metadata/annotations",
         "value": {c.ANNOTATION_SUSPEND: c.TRUE, c.ANNOTATION_JOB_HAS_ENQUEUED: c.TRUE}},
        {"op": "replace", "path": "/spec/runPolicy/suspend", "value": True},
    ]
    with pytest.raises(ValueError):
        review({"kind": "AdmissionReview"}, frozenset())


def test_the_rules_name_every_version_a_kind_is_read_in() -> None:
    """MPIJob's v1alpha1 (the mpi-operator's, which its CRD may serve alone) beside v1: a job
    created in either is suspended on creation; the chart renders the same rules."""
    hook = webhook_configuration("w", {}, frozenset({c.MPI_JOB_KIND, c.PYTORCH_JOB_KIND}))["webhooks"][0]
    assert [(r["apiGroups"], r["apiVersions"], r["resources"]) for r in hook["rules"]] == [
        ([c.KUBEFLOW_GROUP], ["v1"], [c.MPI_JOB_PLURAL, "pytorchjobs"]),
        ([c.KUBEFLOW_GROUP], ["v1alpha1"], [c.MPI_JOB_PLURAL])]
    answer = review({"request": {"uid": "1", "operation": "CREATE", "object": {
        "apiVersion": c.MPI_V1ALPHA1_API_VERSION, "kind": c.MPI_JOB_KIND, "metadata": {"name": "hvd"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "m"}]}}}},
        "kind": {"group": c.KUBEFLOW_GROUP, "version": "v1alpha1", "kind": c.MPI_JOB_KIND}}},
        frozenset({c.MPI_JOB_KIND}))
    ops = json.loads(base64.b64decode(answer["response"]["patch"]))
    paths = {op["path"] for op in ops}  # suspended by the annotation alone: the v1alpha1 form has no runPolicy
    assert "/metadata/annotations" in paths and not any("runPolicy" in path for path in paths), ops


def test_review_leaves_the_ray_cluster_of_a_rayjob_alone() -> None:
    """KubeRay makes a RayCluster for each RayJob: the RayJob is queued, not its cluster, when
    the RayJob its ownerReference names is there with that uid."""
    cluster = {"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_CLUSTER_KIND,
               "metadata": {"name": "rj-raycluster-abcde", "namespace": "default"},
               "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "head"}]}}}}}
    kinds = frozenset({c.RAY_JOB_KIND, c.RAY_CLUSTER_KIND})
    assert patch_of(review(admission_review(cluster, "ray.io", "v1", c.RAY_CLUSTER_KIND), kinds)) != []
    owned = {**cluster, "metadata": {**cluster["metadata"], "ownerReferences": [
        {"apiVersion": c.RAY_API_VERSION, "kind": c.RAY_JOB_KIND, "name": "rj", "uid": "1", "controller": True}]}}


    def there(kind: str, namespace: str, name: str) -> Parent | None:
        return Parent("1", {c.RAY_CLUSTER_KIND: ("rj-raycluster-abcde", None)}, {}) \
            if (kind, namespace, name) == (c.RAY_JOB_KIND, "default", "rj") else None

    assert patch_of(review(admission_review(owned, "ray.io", "v1", c.RAY_CLUSTER_KIND), kinds, there)) == []
    renamed = {**owned, "metadata": {**owned["metadata"], "name": "rj-other"}}  # not the cluster its RayJob names
    assert patch_of(review(admission_review(renamed, "ray.io", "v1", c.RAY_CLUSTER_KIND), kinds, there)) != []
    # Its owner not there (or another uid), or a label alone: queued as any (issue 29).
    assert patch_of(review(admission_review(owned, "ray.io", "v1", c.RAY_CLUSTER_KIND), kinds)) != []
    labelled = {**cluster, "metadata": {**cluster["metadata"],
                                        "labels": {c.LABEL_RAY_ORIGINATED_FROM_CRD: c.RAY_JOB_KIND}}}
    assert patch_of(review(admission_review(labelled, "ray.io", "v1", c.RAY_CLUSTER_KIND), kinds, there)) != []


@pytest.mark.both_control_planes
async def test_a_job_is_stored_suspended_before_any_controller_reconciles_it(system: System) -> None:
    await system.apply(quota("team-w", 0, 1))
    created = await system.akubectl("create", "-o", "json", "-f", "-",
                                    stdin=json.dumps(pytorch_job("hooked", gpus_per_pod=4)))
    job = json.loads(created)  # the object as the create request stored it
    assert job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert job["metadata"]["generation"] == 1  # suspended at creation, not patched afterwards


@pytest.mark.both_control_planes
async def test_two_replicas_each_with_its_own_ca_are_both_trusted_by_the_configuration(system: System) -> None:
    """The API server may call either replica: the caBundle must hold both CAs, and keep
    holding them when each replica writes it again (they once overwrote each other)."""
    from dataclasses import replace as with_changes

    from koordqueue.controller.webhook import SuspendWebhook

    config = with_changes(system.manager.config, webhook_host="127.0.0.1", webhook_port=0)
    replicas = [SuspendWebhook(system.client, config) for _ in range(2)]
    for replica in replicas:
        await replica.start()
    try:
        for _ in range(2):
            for replica in replicas:
                await replica.ensure_ca_bundle()
        current = await system.client.get(MUTATING_WEBHOOKS, config.webhook_config_name)
        bundle = base64.b64decode(current["webhooks"][0]["clientConfig"]["caBundle"])
        trusted = ssl.create_default_context(cadata=bundle.decode())
        review_body = admission_review(pytorch_job("x"), "kubeflow.org", "v1", "PyTorchJob")
        async with aiohttp.ClientSession() as session:
            for replica in replicas:
                async with session.post(f"https://127.0.0.1:{replica.port}/mutate", json=review_body,
                                        ssl=trusted) as response:
                    assert response.status == 200
                    assert patch_of(await response.json())  # it answered, over TLS we trust
        assert not await replicas[0].ensure_ca_bundle()  # nothing left to add: no churn
    finally:
        for replica in replicas:
            await replica.stop()


def test_the_ca_bundle_keeps_unexpired_cas_drops_expired_and_stays_small() -> None:
    import datetime as dt

    from koordqueue.controller.certs import make_serving_cert
    from koordqueue.controller.webhook import MAX_CAS, merged_ca_bundle

    now = dt.datetime.now(dt.UTC)
    old = make_serving_cert(["a"], now - dt.timedelta(days=400))  # expired 35 days ago
    live = [make_serving_cert(["b"], now) for _ in range(MAX_CAS + 2)]
    bundle = merged_ca_bundle(base64.b64encode(old.ca_pem).decode(), live[0].ca_pem, now)
    assert base64.b64decode(bundle) == live[0].ca_pem
    for cert in live[1:]:
        bundle = merged_ca_bundle(bundle, cert.ca_pem, now)
    pems = base64.b64decode(bundle).decode().count("BEGIN CERTIFICATE")
    assert pems == MAX_CAS and base64.b64decode(bundle).endswith(live[-1].ca_pem)
    assert merged_ca_bundle(bundle, live[-1].ca_pem, now) == bundle  # ours already in: unchanged
    assert base64.b64decode(merged_ca_bundle("not base64!", live[0].ca_pem, now)) == live[0].ca_pem
