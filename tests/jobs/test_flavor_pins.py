"""A flavor's admission written on a job (docs/gpus.md): in the write that resumes it, every
role's pods pinned to the flavor's nodes (nodeSelector) and, beside Koordinator, marked with
the flavor as their quota (koord-scheduler's quota label names the flavor, not the team);
the unit is still made from the job as written, and a suspension puts back what the user
wrote."""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import partial
from typing import Any

import pytest

from koordqueue.api.constants import (
    ANNOTATION_ARGO_MIN_RESOURCES,
    ANNOTATION_PLACED,
    FLAVOR_LEVEL,
    LABEL_QUOTA_NAME,
)
from koordqueue.api.meta import InvalidObject
from koordqueue.engine.model import Placement
from koordqueue.jobs import adapter_for
from koordqueue.jobs.argo import UNPINNABLE
from koordqueue.jobs.placement import PodMarks, admission_patch, koordinator_marks, originals
from koordqueue.jobs.unit import unit_info
from tests.engine.builders import GPU, engine_with, quota, with_nodes
from tests.engine.test_flavors import admitted_into, gpu_nodes, team

from .helpers import load, merge_patch
from .test_app_kinds import RAY_CLUSTER, SPARK, WORKFLOW
from .test_placement import written

PRODUCT = "nvidia.com/gpu.product"
H100 = "NVIDIA-H100-80GB-HBM3"


def test_a_flavor_pins_and_marks_every_role_and_is_put_back() -> None:
    manifest = load("seed-pytorchjob.yaml")
    manifest["metadata"].setdefault("labels", {})[LABEL_QUOTA_NAME] = "team"
    original = copy.deepcopy(manifest)
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    before = unit_info(manifest, adapter, {}, 0.0)
    pins = ((PRODUCT, H100),)
    placement = Placement(domains=(("master", FLAVOR_LEVEL, pins), ("worker", FLAVOR_LEVEL, pins)))
    marks = koordinator_marks("team-h100", "trainer", written(manifest), placement)
    patch = admission_patch(adapter.role_patch, written(manifest), originals(adapter.meta(manifest)), placement, marks)
    assert patch is not None
    placed = merge_patch(manifest, patch)
    for role in ("Master", "Worker"):
        template = placed["spec"]["pytorchReplicaSpecs"][role]["template"]
        assert template["spec"]["nodeSelector"] == {PRODUCT: H100}
        assert template["metadata"]["labels"][LABEL_QUOTA_NAME] == "team-h100"
    assert placed["metadata"]["labels"][LABEL_QUOTA_NAME] == "team"  # the job still names its team
    assert unit_info(placed, adapter, {}, 0.0) == before
    restore = admission_patch(adapter.role_patch, written(placed), originals(adapter.meta(placed)), None)
    assert restore is not None
    unpinned = merge_patch(placed, restore)
    for role in ("Master", "Worker"):
        template = unpinned["spec"]["pytorchReplicaSpecs"][role]["template"]
        assert "nodeSelector" not in template["spec"]
        assert LABEL_QUOTA_NAME not in (template.get("metadata") or {}).get("labels", {})
        written_meta = original["spec"]["pytorchReplicaSpecs"][role]["template"].get("metadata")
        if template.get("metadata") == {} and written_meta is None:  # none written: an empty one is left
            del template["metadata"]
    assert unpinned["spec"] == original["spec"]


FLAVOR_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_a_flavors_tolerations_are_added_to_the_users_and_put_back() -> None:
    """As Kueue's ResourceFlavor tolerations: added to each role's own (the Worker has one,
    the Master none) in the write that pins it; the unit is still the job as written; a
    suspension puts back the user's list (and none where there was none)."""
    manifest = load("seed-pytorchjob.yaml")
    own = {"key": "example.com/spot", "operator": "Exists"}
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = [own]
    original = copy.deepcopy(manifest)
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    before = unit_info(manifest, adapter, {}, 0.0)
    pins = ((PRODUCT, H100),)
    placement = Placement(domains=(("master", FLAVOR_LEVEL, pins), ("worker", FLAVOR_LEVEL, pins)))
    marks = PodMarks(tolerations=(FLAVOR_TOLERATION,))
    patch = admission_patch(adapter.role_patch, written(manifest), originals(adapter.meta(manifest)), placement, marks)
    assert patch is not None
    placed = merge_patch(manifest, patch)
    specs = placed["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["tolerations"] == [FLAVOR_TOLERATION]
    assert specs["Worker"]["template"]["spec"]["tolerations"] == [own, FLAVOR_TOLERATION]
    assert unit_info(placed, adapter, {}, 0.0) == before  # (its pod sets' tolerations as the user wrote them)
    # Admitted again (a restart's resume from the same view): the flavor's toleration is not doubled.
    again = admission_patch(adapter.role_patch, written(placed), originals(adapter.meta(placed)), placement, marks)
    assert again is not None
    assert merge_patch(placed, again)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] \
        == [own, FLAVOR_TOLERATION]
    restore = admission_patch(adapter.role_patch, written(placed), originals(adapter.meta(placed)), None)
    assert restore is not None
    unpinned = merge_patch(placed, restore)
    assert unpinned["spec"] == original["spec"]


def test_a_tampered_record_of_the_users_tolerations_is_refused() -> None:
    manifest = load("seed-pytorchjob.yaml")
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    manifest["metadata"].setdefault("annotations", {})[ANNOTATION_PLACED] = '{"Worker": {"tolerations": "all"}}'
    with pytest.raises(InvalidObject, match="Worker.tolerations is not what koord-queue writes"):
        unit_info(manifest, adapter, {}, 0.0)


A100 = "NVIDIA-A100-SXM4-80GB"
SPARK_PINNED = {**SPARK, "spec": {**SPARK["spec"], "nodeSelector": {"disk": "ssd"},
                                  "executor": {**SPARK["spec"]["executor"], "tolerations": [{"key": "spot",
                                                                                             "operator": "Exists"}]}}}


@pytest.mark.parametrize("manifest", [load("rayjob.yaml"), RAY_CLUSTER, SPARK_PINNED],
                         ids=["RayJob", "RayCluster", "SparkApplication"])
def test_an_admission_into_the_a100_flavor_pins_every_pod_template_of_the_kind(manifest: dict[str, Any]) -> None:
    """Each role's pods, as the kind's operator makes them (the adapter's roles read from the job
    written), carry the flavor's node selector and toleration; the unit is the job as written;
    a suspension puts back what the user wrote. (A kind without a role patch resumed into a
    flavor with nothing pinned: its pods ran on any model, charged to the flavor.)"""
    manifest = copy.deepcopy(manifest)
    original = copy.deepcopy(manifest)
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    before = unit_info(manifest, adapter, {}, 0.0)
    pins = ((PRODUCT, A100),)
    roles = written(manifest)
    placement = Placement(domains=tuple((name.lower(), FLAVOR_LEVEL, pins) for name, *_ in roles))
    marks = replace(koordinator_marks("team-a100", "job", roles, placement), tolerations=(FLAVOR_TOLERATION,))
    role_patch = partial(adapter.role_patch, job=manifest)
    patch = admission_patch(role_patch, roles, originals(adapter.meta(manifest)), placement, marks)
    assert patch is not None
    placed = merge_patch(manifest, patch)
    for role in adapter.roles(placed):
        spec = role.template["spec"]
        assert spec["nodeSelector"][PRODUCT] == A100, role.name
        assert FLAVOR_TOLERATION in spec["tolerations"], role.name
        assert role.template["metadata"]["labels"][LABEL_QUOTA_NAME] == "team-a100", role.name
    assert unit_info(placed, adapter, {}, 0.0) == before
    restore = admission_patch(partial(adapter.role_patch, job=placed), written(placed), originals(adapter.meta(placed)),
                              None)
    assert restore is not None
    unpinned = merge_patch(placed, restore)
    assert [r.template["spec"].get("nodeSelector", {}).get(PRODUCT) for r in adapter.roles(unpinned)] == \
        [None] * len(roles)
    assert unit_info(unpinned, adapter, {}, 0.0) == before
    if manifest["kind"] != "SparkApplication":  # (Spark: the spec's selector put back on the role, to the same pods)
        assert without_empty_metadata(unpinned["spec"]) == original["spec"]  # (none written: an empty one is left)


def without_empty_metadata(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_empty_metadata(v) for k, v in value.items() if not (k == "metadata" and v == {})}
    if isinstance(value, list):
        return [without_empty_metadata(v) for v in value]
    return value


def test_a_ray_worker_group_gone_since_the_job_was_read_is_not_pinned_blind() -> None:
    manifest = load("rayjob.yaml")
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    roles = written(manifest)
    placement = Placement(domains=tuple((name.lower(), FLAVOR_LEVEL, ((PRODUCT, A100),)) for name, *_ in roles))
    changed = copy.deepcopy(manifest)
    del changed["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]
    with pytest.raises(InvalidObject, match="tpu-group to pin are no longer in workerGroupSpecs"):
        admission_patch(partial(adapter.role_patch, job=changed), roles, {}, placement)


def workflow(quota_name: str) -> dict[str, Any]:
    manifest = copy.deepcopy(WORKFLOW)
    manifest["metadata"]["annotations"][ANNOTATION_ARGO_MIN_RESOURCES] = '{"nvidia.com/gpu": 1}'
    manifest["metadata"]["labels"] = {LABEL_QUOTA_NAME: quota_name}
    return manifest


@pytest.mark.parametrize("quota_name", ["team", "team-a100"])
def test_an_argo_workflow_is_not_admitted_into_a_flavor_and_says_why(quota_name: str) -> None:
    """Nothing on a Workflow holds its steps' pods to a flavor's nodes (a template's own
    nodeSelector replaces the Workflow's; podSpecPatch rewrites any field): it waits in a
    flavored quota, its parent or a flavor itself, saying why; without flavors it runs."""
    manifest = workflow(quota_name)
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    engine = with_nodes(engine_with(*team(), quota("plain", {GPU: 8}, {GPU: 8})), *gpu_nodes())
    engine.set_unit(unit_info(manifest, adapter, {}, 0.0))
    assert admitted_into(engine) == {}
    assert engine.standing("default/wf").message == (
        f"not admitted into quota {quota_name}, whose pods are held to flavors' nodes: {UNPINNABLE}")
    elsewhere = workflow("plain")
    elsewhere["metadata"]["name"] = "wf2"
    engine.set_unit(unit_info(elsewhere, adapter, {}, 0.0))
    assert admitted_into(engine, 1.0) == {"wf2": "plain"}
