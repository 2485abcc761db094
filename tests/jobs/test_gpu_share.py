"""Koordinator's GPU sharing charged as koord-scheduler charges it (issue 32, item 2).

koord-scheduler's ElasticQuota plugin charges a pod its requests (PodRequests) as
koord-manager's pod webhook left them (v1.8.0, pkg/webhook/pod/mutating/
device_resource_spec.go): ``koordinator.sh/gpu: N`` becomes ``gpu-core: N`` and
``gpu-memory-ratio: N``, and ``gpu.shared`` is added when not asked. A job's request here
is the same, so a half-GPU job is charged alike by both. MIG slices are ordinary
extended resources, charged as asked.
"""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.jobs.podrequest import as_koord_manager_writes, pod_request

G = 1000


def template(requests: dict[str, Any], init: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}]}
    if init is not None:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init}}]
    return {"spec": spec}


@pytest.mark.parametrize(("asked", "charged"), [
    # half a GPU by koordinator.sh/gpu: rewritten into core and memory ratio, shared 1
    ({c.KOORD_GPU: "50", "cpu": "1"},
     {c.KOORD_GPU_CORE: 50 * G, c.KOORD_GPU_MEMORY_RATIO: 50 * G, c.KOORD_GPU_SHARED: G, "cpu": G}),
    # half a GPU asked as core and ratio: only gpu.shared added
    ({c.KOORD_GPU_CORE: "50", c.KOORD_GPU_MEMORY_RATIO: "50"},
     {c.KOORD_GPU_CORE: 50 * G, c.KOORD_GPU_MEMORY_RATIO: 50 * G, c.KOORD_GPU_SHARED: G}),
    # two whole GPUs by koordinator.sh/gpu: 200 -> shared 2
    ({c.KOORD_GPU: "200"}, {c.KOORD_GPU_CORE: 200 * G, c.KOORD_GPU_MEMORY_RATIO: 200 * G, c.KOORD_GPU_SHARED: 2 * G}),
    # 150 is no multiple of 100: shared 1
    ({c.KOORD_GPU_MEMORY_RATIO: "150"}, {c.KOORD_GPU_MEMORY_RATIO: 150 * G, c.KOORD_GPU_SHARED: G}),
    # gpu-core alone past 100: the webhook reads the (absent) ratio, so shared 0
    ({c.KOORD_GPU_CORE: "200"}, {c.KOORD_GPU_CORE: 200 * G, c.KOORD_GPU_SHARED: 0}),
    # gpu-memory in bytes, with gpu.shared asked: kept as asked
    ({c.KOORD_GPU_MEMORY: "8Gi", c.KOORD_GPU_SHARED: "1"}, {c.KOORD_GPU_MEMORY: 8 * 1024**3 * G, c.KOORD_GPU_SHARED: G}),
    # nvidia.com/gpu is not rewritten by the webhook (v1.8.0): charged as asked
    ({c.GPU: "1"}, {c.GPU: G}),
    # a MIG slice: an ordinary extended resource
    ({"nvidia.com/mig-1g.10gb": "2"}, {"nvidia.com/mig-1g.10gb": 2 * G}),
])
def test_charged_as_koord_scheduler_charges_the_rewritten_pod(asked: dict[str, Any], charged: dict[str, int]) -> None:
    assert pod_request(template(asked), "t") == charged


def test_init_containers_are_not_rewritten() -> None:
    # The webhook rewrites containers only; an init container's peak counts as asked.
    assert pod_request(template({"cpu": "1"}, init={c.KOORD_GPU: "30"}), "t") == {"cpu": G, c.KOORD_GPU: 30 * G}


def test_a_request_without_share_resources_is_the_same_object() -> None:
    request = {"cpu": G}
    assert as_koord_manager_writes(request) is request
