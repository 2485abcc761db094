"""`koord-queue status` and `explain` load the engine as the controller does: what a unit
asks for (priority, quota, queue, request) is its job's, whatever its own spec and labels
say, and a unit naming a job that has a unit of its own is a bare unit, not that job's."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.apiserver.server import APIServer
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.informers import Informers
from koordqueue.controller.loading import take_snapshot
from koordqueue.controller.records import Records
from koordqueue.controller.resources import NODES, PODS, QUOTA_TREES, QUOTAS, UNITS
from koordqueue.controller.views import adapter_of_kind, job_view, queue_unit_manifest
from koordqueue.jobs.mpijob import mpi_job_crd
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.manifests import all_crds

from .conftest import pytorch_job, quota
from .test_app_kinds import mpi_v1alpha1

pytestmark = pytest.mark.timeout(60)
PYTORCH_JOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[KubeClient]:
    server = APIServer(tmp_path / "state", crds=all_crds())
    await server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig_path))) as kube:
            yield kube
    finally:
        await server.stop()


async def test_a_units_asks_are_its_jobs_in_the_snapshot(client: KubeClient) -> None:
    await client.create(QUOTAS, quota("small", 0, 1), namespace="default")
    await client.create(QUOTAS, quota("big", 0, 8), namespace="default")
    job = await client.create(PYTORCH_JOBS, pytorch_job("wide", quota_name="small", priority=3), namespace="default")
    unit: dict[str, Any] = queue_unit_manifest(job_view(job, adapter_of_kind(c.PYTORCH_JOB_KIND), {}))
    edited = copy.deepcopy(unit)  # as a tenant who may edit QueueUnits left it
    edited["metadata"]["labels"][c.LABEL_QUOTA_NAME] = "big"
    edited["spec"].update(priority=1000, queue="big", resource={c.GPU: "0"})
    await client.create(UNITS, edited, namespace="default")
    thief = copy.deepcopy(unit)  # made by hand, naming the same job
    thief["metadata"]["name"] = "thief-py-qu"
    await client.create(UNITS, thief, namespace="default")

    snap = await take_snapshot(client)
    info = snap.engine.unit("default/wide-py-qu")
    assert info is not None
    assert (info.priority, info.quota_name, info.queue_name, info.request[c.GPU]) == (3, "small", None, 2000)
    standing = snap.engine.standing("default/wide-py-qu")
    assert standing is not None and standing.quota == "small"
    # Named otherwise than the job's own unit: a bare unit (issue 30), queued on its own, by what
    # it says itself (its priority and request, the quota its labels name); it is not the job's.
    thief_info = snap.engine.unit("default/thief-py-qu")
    assert thief_info is not None and thief_info.invalid is None
    assert (thief_info.priority, thief_info.quota_name, thief_info.request[c.GPU]) == (3, "small", 2000)


async def test_the_snapshot_reads_the_quota_tree_as_the_controller_does(client: KubeClient) -> None:
    """`koord-queue status` sees the tree's quotas (and its problems), not the ElasticQuotas set aside."""
    await client.create(QUOTAS, quota("legacy", 0, 8), namespace="default")
    tree = {"apiVersion": c.QUOTA_TREE_API_VERSION, "kind": c.ELASTIC_QUOTA_TREE_KIND,
            "metadata": {"name": "tree", "namespace": c.QUOTA_TREE_NAMESPACE},
            "spec": {"root": {"name": "root", "min": {c.GPU: "8"}, "max": {c.GPU: "8"}, "children": [
                {"name": "leaf", "namespaces": ["default"], "min": {c.GPU: "2"}, "max": {c.GPU: "4"}},
                {"name": "leaf", "max": {c.GPU: "1"}}]}}}
    await client.create(QUOTA_TREES, tree, namespace=c.QUOTA_TREE_NAMESPACE)
    elsewhere = copy.deepcopy(tree)
    elsewhere["metadata"]["namespace"] = "default"
    await client.create(QUOTA_TREES, elsewhere, namespace="default")
    snap = await take_snapshot(client)
    assert sorted(snap.quotas) == ["leaf", "root"]
    assert snap.quotas["leaf"].parent == "root" and snap.quotas["leaf"].max == {c.GPU: 4000}
    assert snap.problems == [
        "ElasticQuotaTree default/tree: not used: an ElasticQuotaTree is read in namespace kube-system only",
        "ElasticQuotaTree kube-system/tree: quota root/leaf: not used: the name leaf is taken by the quota before "
        "it at root/leaf (quota names are unique)",
    ]


async def test_mpijobs_are_read_where_their_crd_serves_v1alpha1_alone(tmp_path: Path) -> None:
    """The mpi-operator's own CRD serves kubeflow.org/v1alpha1 alone (no v1): its jobs are
    read there, by the snapshot (their units stand for them, not for jobs that do not exist)
    and by the controller's informers."""
    mpi = mpi_job_crd()
    mpi["spec"]["versions"] = [{**v, "storage": True} for v in mpi["spec"]["versions"] if v["name"] == "v1alpha1"]
    crds = [crd for crd in all_crds() if crd["metadata"]["name"] != mpi["metadata"]["name"]] + [mpi]
    server = APIServer(tmp_path / "state", crds=crds)
    await server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig_path))) as client:
            await client.create(QUOTAS, quota("team", 2, 3), namespace="default")
            alpha = Resource(c.KUBEFLOW_GROUP, "v1alpha1", c.MPI_JOB_PLURAL)
            job = await client.create(alpha, mpi_v1alpha1("hvd", None), namespace="default")
            await client.create(UNITS, queue_unit_manifest(job_view(job, adapter_of_kind(c.MPI_JOB_KIND), {})),
                                namespace="default")
            snap = await take_snapshot(client)
            informers = Informers(client, ControllerConfig(), Records())  # the controller's, as it starts
            try:
                async with asyncio.timeout(10):  # (an informer of v1 here would never sync)
                    await informers.start()
                assert informers.job_resource(c.MPI_JOB_KIND) == alpha
                assert informers.job_view(f"{c.MPI_JOB_KIND}/default/hvd") is not None
            finally:
                for informer in informers.all():
                    await informer.stop()
    finally:
        await server.stop()
    info = snap.engine.unit("default/hvd-mpi-qu")
    assert info is not None and info.invalid is None, info
    assert (info.quota_name, info.request[c.GPU]) == ("team", 2000)



async def test_beside_koordinator_the_snapshot_shares_the_nodes_less_its_system_quotas_use(
        client: KubeClient) -> None:
    """As the controller: the quotas share the nodes' allocatable less what Koordinator's
    system and default quotas use (here the system quota, GPUs in its max, a pod of 8)."""
    from .test_system_quotas import DEFAULT, SYSTEM, bound, koordinators

    await client.create(NAMESPACES, {"metadata": {"name": "koordinator-system"}})
    for i in range(2):
        await client.create(NODES, {"metadata": {"name": f"n{i}"}})
        await client.patch_status(NODES, f"n{i}", {"status": {"allocatable": {"cpu": "64", c.GPU: "16"}}})
    for obj in (koordinators(c.KOORDINATOR_ROOT_QUOTA, {}), koordinators(SYSTEM, {"cpu": "1000", c.GPU: "32"}),
                koordinators(DEFAULT)):
        await client.create(QUOTAS, obj, namespace="koordinator-system")
    await client.create(PODS, bound("agent", namespace="kube-system", quota_label=SYSTEM, gpus=8, cpu="2"),
                        namespace="kube-system")
    await client.create(PODS, bound("waiting", namespace="kube-system", quota_label=SYSTEM, gpus=8, node=""),
                        namespace="kube-system")  # not bound: it takes nothing yet
    snap = await take_snapshot(client)
    assert snap.engine.koordinator
    assert snap.capacity == {"cpu": 126000, c.GPU: 24000}
    assert snap.problems == []
