"""The simulated training operator under the chaos run's races: its status writes are
made on the version of the job they were computed from, so a stale view never drops a
newer condition (found by bench/chaos.py, seed 424242: a job suspended right after it
succeeded lost its Succeeded condition to the operator's write about the suspension)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from koordqueue.api import constants as c
from koordqueue.kube.client import Resource
from koordqueue.kube.errors import Conflict

from ..controller.conftest import pytorch_job
from .conftest import bare_cluster

pytestmark = pytest.mark.timeout(60)
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)


async def test_a_status_write_from_a_stale_view_conflicts_instead_of_dropping_conditions(tmp_path: Path) -> None:
    async with bare_cluster(tmp_path / "state") as (_server, client, sim):
        await sim.start()
        job = pytorch_job("raced", annotations={c.ANNOTATION_SUSPEND: c.TRUE})
        stale = await client.create(JOBS, job, namespace="default")
        succeeded = {"type": c.KUBEFLOW_CONDITION_SUCCEEDED, "status": c.CONDITION_TRUE,
                     "reason": "PyTorchJobSucceeded", "lastTransitionTime": "2024-01-01T00:00:00Z"}
        await client.patch_status(JOBS, "raced", {"status": {"conditions": [succeeded]}}, namespace="default")
        assert sim.operator is not None
        kind = sim.job_informers[c.PYTORCH_JOB_KIND][0]
        old = copy.deepcopy(stale.get("status") or {})
        new = {**old, "conditions": [{"type": c.KUBEFLOW_CONDITION_SUSPENDED, "status": c.CONDITION_TRUE}]}
        with pytest.raises(Conflict):
            await sim.operator.operator_for(c.PYTORCH_JOB_KIND)._write_status(kind, stale, old, new)
        now = await client.get(JOBS, "raced", namespace="default")
        assert succeeded["type"] in [cond["type"] for cond in now["status"]["conditions"]]
