"""A flavor's admission written on a job (docs/gpus.md): in the write that resumes it, every
role's pods pinned to the flavor's nodes (nodeSelector) and, beside Koordinator, marked with
the flavor as their quota (koord-scheduler's quota label names the flavor, not the team);
the unit is still made from the job as written, and a suspension puts back what the user
wrote."""

from __future__ import annotations

import copy

from koordqueue.api.constants import FLAVOR_LEVEL, LABEL_QUOTA_NAME
from koordqueue.engine.model import Placement
from koordqueue.jobs import adapter_for
from koordqueue.jobs.placement import admission_patch, koordinator_marks, originals
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
