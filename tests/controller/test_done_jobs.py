"""A job whose pods have all succeeded is no victim for a grace (its operator says it ended
seconds later under load; engine/starting.py ``Done``). Hostile input: a tenant's job that no
operator ever ends (managed by another controller, so its operator leaves it alone) with a bare
pod of its label that succeeds keeps its borrowed GPUs from reclaim only for that grace."""

from __future__ import annotations

import pytest

from koordqueue.api import constants as c

from .conftest import SystemFactory, pytorch_job, quick_config, quota

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]


async def test_a_job_no_one_ends_with_a_succeeded_pod_of_its_label_is_reclaimed_after_the_grace(
        start_system: SystemFactory) -> None:
    async with start_system(config=quick_config()) as system:
        await system.apply(quota("pool", 8, 8, is_parent=True))
        await system.apply(quota("team-a", 4, 8, parent="pool"), quota("team-b", 4, 8, parent="pool"))
        squat = pytorch_job("squat", gpus_per_pod=4, quota_name="team-b")  # 8 GPUs: team-a's half borrowed
        squat["spec"].setdefault("runPolicy", {})["managedBy"] = c.MULTIKUEUE_MANAGER  # no operator runs it
        await system.apply(squat)
        await system.wait_phase("squat-py-qu", c.Phase.DEQUEUED, timeout=60)
        # The tenant's bare pod, labelled as a pod of squat, that succeeds at once.
        await system.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "squat-master-0", "namespace": "default",
            "labels": {c.LABEL_JOB_NAME: "squat", c.LABEL_REPLICA_TYPE: "master"},
            "annotations": {c.ANNOTATION_SIM_DURATION: "0.2"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}})

        async def succeeded() -> bool:
            pod = await system.get_json("pod", "squat-master-0")
            return (pod.get("status") or {}).get("phase") == "Succeeded"

        await system.wait_for(succeeded, 60, "the tenant's pod to succeed")
        await system.apply(pytorch_job("claim", gpus_per_pod=2, quota_name="team-a"))  # team-a's min, 4 GPUs
        # Spared for the grace, then reclaimed: squat does not keep team-a's min.
        await system.wait_phase("squat-py-qu", c.Phase.PREEMPTED, timeout=c.DONE_GRACE_SECONDS + 30)
        await system.wait_phase("claim-py-qu", c.Phase.RUNNING, timeout=60)

        async def team_b_holds_nothing() -> bool:
            status = (await system.get_json("elasticquota", "team-b")).get("status") or {}
            return (status.get("used") or {}).get(c.GPU, "0") == "0"

        await system.wait_for(team_b_holds_nothing, 10, "team-b's status.used to drop squat's GPUs")
