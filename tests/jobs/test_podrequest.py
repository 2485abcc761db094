"""A pod's request: containers summed, init containers' peak, sidecars, limits, overhead."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api.meta import InvalidObject
from koordqueue.jobs.podrequest import pod_request
from tests.jobs.helpers import GI


def container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "busybox", "resources": resources, **extra}


def pod(
    containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": containers, **spec}
    if init is not None:
        body["initContainers"] = init
    return {"metadata": {"labels": {"app": "x"}}, "spec": body}


@pytest.mark.parametrize(
    ("template", "request_"),
    [
        (
            pod([container({"cpu": "1"}), container({"cpu": "500m", "memory": "1Gi"})]),
            {"cpu": 1500, "memory": GI},
        ),
        # Requests default to limits, per resource.
        (pod([container(limits={"cpu": "2", "memory": "4Gi"})]), {"cpu": 2000, "memory": 4 * GI}),
        (pod([container({"cpu": "1"}, {"cpu": "2", "memory": "4Gi"})]), {"cpu": 1000, "memory": 4 * GI}),
        # No resources at all: the pod asks for nothing.
        (pod([{"name": "c", "image": "busybox"}]), {}),
        (pod([container()]), {}),
        # An init container larger than the containers sets the peak, per resource.
        (
            pod(
                [container({"cpu": "1", "memory": "1Gi"})],
                init=[container({"cpu": "4"}), container({"memory": "512Mi"})],
            ),
            {"cpu": 4000, "memory": GI},
        ),
        # A sidecar (restartPolicy Always) runs beside the containers and the later init containers.
        (
            pod(
                [container({"cpu": "1"})],
                init=[container({"cpu": "500m"}, restartPolicy="Always"), container({"cpu": "2"})],
            ),
            {"cpu": 2500},
        ),
        (
            pod([container({"cpu": "1"})], init=[container({"cpu": "500m"}, restartPolicy="Always")]),
            {"cpu": 1500},
        ),
        # Overhead comes on top.
        (
            pod([container({"cpu": "1"})], overhead={"cpu": "250m", "memory": "120Mi"}),
            {"cpu": 1250, "memory": 120 * 2**20 * 1000},
        ),
        # Integers and floats as YAML writes them.
        (pod([container({"cpu": 2, "nvidia.com/gpu": 1})]), {"cpu": 2000, "nvidia.com/gpu": 1000}),
        (pod([container({"cpu": 0.5})]), {"cpu": 500}),
        # Pod-level requests (PodLevelResources) replace the containers' for what they name, as
        # kube-scheduler reserves them; the rest is the containers'; overhead on top.
        (
            pod([container({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1})],
                resources={"requests": {"cpu": "64", "memory": "256Gi"}}),
            {"cpu": 64000, "memory": 256 * GI, "nvidia.com/gpu": 1000},
        ),
        (
            pod([container({"cpu": "1"})], init=[container({"cpu": "4"})],
                resources={"requests": {"cpu": "8"}}, overhead={"cpu": "250m"}),
            {"cpu": 8250},
        ),
        # A pod-level limit alone: kube-apiserver defaults the request to it where no container
        # asks (memory here); where one does (cpu), to the containers' sum.
        (
            pod([container({"cpu": "1"})], resources={"limits": {"cpu": "8", "memory": "16Gi"}}),
            {"cpu": 1000, "memory": 16 * GI},
        ),
        (pod([container()], resources={"limits": {"cpu": "8"}}), {"cpu": 8000}),
        # Hugepages are not overcommitted: a pod-level limit is the pod's request.
        (
            pod([container({"hugepages-2Mi": "2Mi"})], resources={"limits": {"hugepages-2Mi": "8Mi"}}),
            {"hugepages-2Mi": 8 * 2**20 * 1000},
        ),
        (pod([container({"cpu": "1"})], resources={}), {"cpu": 1000}),
    ],
)
def test_pod_request(template: dict[str, Any], request_: dict[str, int]) -> None:
    assert pod_request(template, "Job default/x: main") == request_


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (None, "template is missing"),
        ({"metadata": {}}, "template: spec is missing"),
        (pod([]), "containers is empty"),
        ({"spec": {"containers": "pytorch"}}, "containers must be a list"),
        ({"spec": {"containers": [{"name": "c"}], "initContainers": [3]}}, "initContainers must be a list"),
        (pod([container({"cpu": "abc"})]), r"containers\[0\] \(c\): resources.requests: cpu: quantity 'abc'"),
        (pod([container(limits={"memory": "-1Gi"})]), r"resources.limits: memory: .*negative"),
        (pod([container({"cpu": "1e400"})]), "too large"),
        (pod([container({"cpu": True})]), "boolean"),
        (pod([{"name": "c", "resources": ["cpu"]}]), "resources must be a mapping"),
        (
            pod([container()], init=[container({"cpu": "x"})]),
            r"initContainers\[0\] \(c\): resources.requests: cpu",
        ),
        (pod([container()], overhead={"cpu": "lots"}), "template.spec.overhead: cpu"),
        (pod([container()], resources=["cpu"]), "template.spec: resources must be a mapping"),
        (pod([container()], resources={"requests": {"cpu": "x"}}), "template.spec.resources.requests: cpu"),
        (
            pod([container()], resources={"limits": {"nvidia.com/gpu": 1}}),
            "template.spec.resources.limits: nvidia.com/gpu: not supported at pod level",
        ),
        (
            pod([container({"cpu": "2"})], resources={"requests": {"cpu": "1"}}),
            r"template.spec.resources.requests: cpu: 1 is less than its containers ask \(2\)",
        ),
    ],
)
def test_pod_request_rejects(template: Any, message: str) -> None:
    with pytest.raises(InvalidObject, match=message) as caught:
        pod_request(template, "Job default/x: main")
    assert str(caught.value).startswith("Job default/x: main")
