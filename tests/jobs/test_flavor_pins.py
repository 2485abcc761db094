"""A flavor's admission written on a job (docs/gpus.md): in the write that resumes it, every
role's pods pinned to the flavor's nodes (nodeSelector) and, beside Koordinator, marked with
the flavor as their quota (koord-scheduler's quota label names the flavor, not the team);
the unit is still made from the job as written, and a suspension puts back what the user
wrote."""

from __future__ import annotations

import copy

import pytest

from koordqueue.api.constants import ANNOTATION_PLACED, FLAVOR_LEVEL, LABEL_QUOTA_NAME
from koordqueue.api.meta import InvalidObject
from koordqueue.engine.model import Placement
from koordqueue.jobs import adapter_for
from koordqueue.jobs.placement import PodMarks, admission_patch, koordinator_marks, originals
from koordqueue.jobs.unit import unit_info

from .helpers import load, merge_patch
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
