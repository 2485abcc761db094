"""resource.k8s.io/v1 (DRA) on both control planes: ResourceClaimTemplates and ResourceClaims
served, defaulted and refused alike in the basics (a request with neither or both of
`exactly`/`firstAvailable`, a count below 1, a request without a name), and their specs
immutable, as kube-apiserver's are: a tenant cannot make a template ask for more devices
once a job's claims were made from it, only delete it and make another (the controller
charges the job anew then: tests/controller/test_dra.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.apiserver.testing import running_apiserver
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.kube.errors import ApiError, NotFound
from koordqueue.manifests import all_crds

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]

TEMPLATES = Resource(c.DRA_GROUP, c.DRA_VERSION, c.RESOURCE_CLAIM_TEMPLATE_PLURAL)
CLAIMS = Resource(c.DRA_GROUP, c.DRA_VERSION, c.RESOURCE_CLAIM_PLURAL)
SLICES = Resource(c.DRA_GROUP, c.DRA_VERSION, c.RESOURCE_SLICE_PLURAL, namespaced=False)


@pytest.fixture
async def client(tmp_path: Path, control_plane: str, request: pytest.FixtureRequest) -> AsyncIterator[KubeClient]:
    if control_plane == "kube":
        cluster = request.getfixturevalue("kube")
        async with KubeClient(load_config(str(cluster.kubeconfig_path))) as kube_client:
            yield kube_client
        return
    async with running_apiserver(tmp_path / "state", crds=all_crds()) as server, \
            KubeClient(load_config(str(server.kubeconfig_path))) as embedded_client:
        yield embedded_client


def template(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{c.DRA_GROUP}/{c.DRA_VERSION}", "kind": c.RESOURCE_CLAIM_TEMPLATE_KIND,
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


async def refused(call: Any) -> set[str]:
    """The fields kube-apiserver names in its 422."""
    with pytest.raises(ApiError) as caught:
        await call
    assert caught.value.status == 422, caught.value
    return {x["field"] for x in (caught.value.body or {})["details"]["causes"]}


async def fresh(client: KubeClient, resource: Resource, name: str, namespace: str | None = "default") -> None:
    try:  # left by an earlier test on the shared real cluster
        await client.delete(resource, name, namespace=namespace)
    except NotFound:
        pass


async def test_templates_are_defaulted_refused_in_the_basics_and_immutable(client: KubeClient) -> None:
    await fresh(client, TEMPLATES, "dra-two")
    made = await client.create(TEMPLATES, template("dra-two", {"name": "g", "exactly": {"deviceClassName": "gpu"}}),
                               namespace="default")
    exactly = made["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert (exactly["allocationMode"], exactly["count"]) == ("ExactCount", 1)
    assert "spec.spec.devices.requests[0].exactly.count" in await refused(client.create(
        TEMPLATES, template("dra-zero", {"name": "g", "exactly": {"deviceClassName": "gpu", "count": 0}}),
        namespace="default"))
    assert await refused(client.create(TEMPLATES, template("dra-neither", {"name": "g"}), namespace="default"))
    assert await refused(client.create(
        TEMPLATES, template("dra-nameless", {"exactly": {"deviceClassName": "gpu"}}), namespace="default"))
    # What it asks for cannot be raised after claims were made from it.
    more = dict(made)
    more["spec"] = {"spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu",
                                                                                 "count": 8}}]}}}
    assert await refused(client.replace(TEMPLATES, more))
    await client.delete(TEMPLATES, "dra-two", namespace="default")


async def test_slices_need_a_driver_a_pool_and_one_node_scope(client: KubeClient) -> None:
    await fresh(client, SLICES, "dra-slice", None)
    body = {"apiVersion": f"{c.DRA_GROUP}/{c.DRA_VERSION}", "kind": c.RESOURCE_SLICE_KIND,
            "metadata": {"name": "dra-slice"},
            "spec": {"driver": "gpu.example.com", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                     "nodeName": "somewhere", "devices": [{"name": "gpu-0"}]}}
    no_scope = {**body, "spec": {k: v for k, v in body["spec"].items() if k != "nodeName"}}
    assert await refused(client.create(SLICES, no_scope))
    made = await client.create(SLICES, body)
    assert made["spec"]["nodeName"] == "somewhere"
    await client.delete(SLICES, "dra-slice")
