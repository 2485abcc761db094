"""The suite's tenant has the rights it should, no more, on both control planes: what every
attack here is made with (conftest.tenant)."""

from __future__ import annotations

import pytest

from koordqueue.api import constants as c
from tests.controller.conftest import System, quota

from .conftest import tenant

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]


async def test_a_tenant_edits_its_jobs_and_only_reads_units_quotas_and_queues(system: System) -> None:
    team = await tenant(system, "t1")
    await system.apply(quota("q-t1", 4, 4, namespace="t1"))
    for verb in ("create", "patch", "update", "delete"):
        for what in ("pytorchjobs.kubeflow.org", "jobs.batch", "rayclusters.ray.io"):
            assert await team.may(verb, what), (verb, what)
    for what in ("queueunits.scheduling.x-k8s.io", "elasticquotas.scheduling.sigs.k8s.io", "pods"):
        assert await team.may("list", what), what
        assert not await team.may("patch", what), what
    assert not await team.may("patch", "pytorchjobs.kubeflow.org", "--subresource=status"), \
        "a tenant does not write its jobs' status (their operator's)"
    assert not await team.may("list", "pytorchjobs.kubeflow.org", namespace="default"), "nor in another namespace"
    refused = await team.akubectl("patch", "elasticquota", "q-t1", "--type=merge", "-p",
                                  '{"spec":{"max":{"nvidia.com/gpu":"64"}}}', check=False)
    assert "forbidden" in refused.lower(), refused
    stored = await system.get_json("elasticquota", "q-t1", "-n", "t1")
    assert stored["spec"]["max"][c.GPU] == "4"
