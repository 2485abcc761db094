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


async def refused(call: Any) -> set[tuple[str, str]]:
    """The causes kube-apiserver gives in its 422: (field, message)."""
    with pytest.raises(ApiError) as caught:
        await call
    assert caught.value.status == 422, caught.value
    return {(x["field"], x["message"]) for x in (caught.value.body or {})["details"]["causes"]}


REQUEST = "spec.spec.devices.requests[0]"
LABEL_RULE = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
              "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
              "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
REFUSED: dict[str, tuple[dict[str, Any], set[tuple[str, str]]]] = {  # 1.37's words
    "negative": ({"name": "g", "exactly": {"deviceClassName": "gpu", "count": -1}},
                 {(f"{REQUEST}.exactly.count", "Invalid value: -1: must be greater than zero")}),
    "neither": ({"name": "g"},
                {(REQUEST, "Required value: exactly one of `exactly` or `firstAvailable` is required")}),
    "nameless": ({"exactly": {"deviceClassName": "gpu"}},
                 {(f"{REQUEST}.name", f'Invalid value: "": {LABEL_RULE}')}),
    "all-counted": ({"name": "g", "exactly": {"deviceClassName": "gpu", "allocationMode": "All", "count": 2}},
                    {(f"{REQUEST}.exactly.count", "Invalid value: 2: must not be specified when allocationMode "
                                                  "is 'All'")}),
    "classless": ({"name": "g", "exactly": {}}, {(f"{REQUEST}.exactly.deviceClassName", "Required value")}),
}


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
    for name, (request, causes) in REFUSED.items():
        assert await refused(client.create(TEMPLATES, template(f"dra-{name}", request), namespace="default")) \
            == causes, name
    # A count of 0 is no count (omitempty): defaulted to 1. All is taken (we refuse to charge it).
    for name, request, want in (
            ("zero", {"name": "g", "exactly": {"deviceClassName": "gpu", "count": 0}},
             {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}),
            ("all", {"name": "g", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}},
             {"deviceClassName": "gpu", "allocationMode": "All"})):
        await fresh(client, TEMPLATES, f"dra-{name}")
        kept = await client.create(TEMPLATES, template(f"dra-{name}", request), namespace="default")
        assert kept["spec"]["spec"]["devices"]["requests"][0]["exactly"] == want
        await client.delete(TEMPLATES, f"dra-{name}", namespace="default")
    # What it asks for cannot be raised after claims were made from it.
    more = dict(made)
    more["spec"] = {"spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu",
                                                                                 "count": 8}}]}}}
    assert {field for field, _ in await refused(client.replace(TEMPLATES, more))} == {"spec"}
    await client.delete(TEMPLATES, "dra-two", namespace="default")


async def test_slices_need_a_driver_a_pool_and_one_node_scope(client: KubeClient) -> None:
    await fresh(client, SLICES, "dra-slice", None)
    body = {"apiVersion": f"{c.DRA_GROUP}/{c.DRA_VERSION}", "kind": c.RESOURCE_SLICE_KIND,
            "metadata": {"name": "dra-slice"},
            "spec": {"driver": "gpu.example.com", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                     "nodeName": "somewhere", "devices": [{"name": "gpu-0"}]}}
    no_scope = {**body, "spec": {k: v for k, v in body["spec"].items() if k != "nodeName"}}
    assert await refused(client.create(SLICES, no_scope)) == {("spec", "Required value: exactly one of `nodeName`, "
                                                               "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` "
                                                               "is required")}
    made = await client.create(SLICES, body)
    assert made["spec"]["nodeName"] == "somewhere"
    await client.delete(SLICES, "dra-slice")
