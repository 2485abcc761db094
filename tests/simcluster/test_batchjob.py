"""The simulated batch Job controller: pods, counts and conditions as kube-controller-manager writes them."""

from __future__ import annotations

import pytest

from koordqueue.api import constants as c
from koordqueue.jobs import adapter_for
from koordqueue.jobs.base import JobState
from koordqueue.kube.client import KubeClient
from koordqueue.simcluster.cluster import SimCluster
from tests.simcluster.conftest import (
    EVENTS,
    JOBS,
    Object,
    batch_job,
    condition_true,
    conditions,
    pods_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(30)
ADAPTER = adapter_for(c.BATCH_API_VERSION, c.BATCH_JOB_KIND)
assert ADAPTER is not None


async def get_job(client: KubeClient, name: str) -> Object:
    return await client.get(JOBS, name, namespace="default")


async def job_pods(client: KubeClient, name: str) -> list[Object]:
    return await pods_of(client, c.LABEL_BATCH_JOB_NAME, name)


async def test_batch_job_runs_its_pods_and_completes(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(JOBS, batch_job("crunch", parallelism=2, completions=2, duration=0.5))

    async def active() -> Object | None:
        job = await get_job(client, "crunch")
        return job if job.get("status", {}).get("ready") == 2 else None

    job = await wait_for(active, "two ready pods")
    assert job["status"]["active"] == 2 and job["status"]["startTime"]
    assert ADAPTER.status(job) is JobState.RUNNING
    pods = await job_pods(client, "crunch")
    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["name"].startswith("crunch-")
        assert pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]
        [owner] = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", "crunch", True)
        # No gang: the Job controller writes none, and kube-scheduler places a Job's pods one by one. (A
        # gang sized by the wave stalled the Job when its last, smaller wave came while one pod still ran.)
        assert set(pod["metadata"]["annotations"]) == {c.ANNOTATION_SIM_DURATION}

    async def complete() -> Object | None:
        job = await get_job(client, "crunch")
        return job if condition_true(job, c.BATCH_CONDITION_COMPLETE) else None

    job = await wait_for(complete, "the Complete condition")
    assert ADAPTER.status(job) is JobState.SUCCEEDED
    assert job["status"]["succeeded"] == 2 and "active" not in job["status"]
    assert job["status"]["completionTime"]
    assert conditions(job)[c.BATCH_CONDITION_COMPLETE]["reason"] == c.BATCH_REASON_COMPLETED
    # as kube-controller-manager 1.31+: the interim condition stays beside the terminal one
    assert conditions(job)[c.BATCH_CONDITION_SUCCESS_CRITERIA_MET]["reason"] == c.BATCH_REASON_COMPLETED
    assert len(await job_pods(client, "crunch")) == 2  # no extra pod was made


async def test_completions_beyond_parallelism_run_in_waves(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(JOBS, batch_job("waves", parallelism=2, completions=5, duration=0.1))

    async def complete() -> Object | None:
        job = await get_job(client, "waves")
        return job if condition_true(job, c.BATCH_CONDITION_COMPLETE) else None

    job = await wait_for(complete, "the Complete condition")
    assert job["status"]["succeeded"] == 5
    pods = await job_pods(client, "waves")
    assert len(pods) == 5 and all(p["status"]["phase"] == c.POD_SUCCEEDED for p in pods)


async def test_suspended_batch_job_has_no_pods_until_resumed(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(JOBS, batch_job("later", suspend=True, duration=0.2))

    async def suspended() -> Object | None:
        job = await get_job(client, "later")
        return job if condition_true(job, c.BATCH_CONDITION_SUSPENDED) else None

    job = await wait_for(suspended, "the Suspended condition")
    assert conditions(job)[c.BATCH_CONDITION_SUSPENDED]["reason"] == c.BATCH_REASON_SUSPENDED
    assert ADAPTER.status(job) is JobState.PENDING
    assert await job_pods(client, "later") == []

    await client.patch(JOBS, "later", ADAPTER.resume_patch(job), namespace="default")

    async def complete() -> Object | None:
        job = await get_job(client, "later")
        return job if condition_true(job, c.BATCH_CONDITION_COMPLETE) else None

    job = await wait_for(complete, "the Complete condition after resume")
    resumed = conditions(job)[c.BATCH_CONDITION_SUSPENDED]
    assert resumed["status"] == c.CONDITION_FALSE and resumed["reason"] == c.BATCH_REASON_RESUMED


async def test_suspending_a_running_batch_job_deletes_its_pods(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(JOBS, batch_job("stopme"))

    async def running() -> bool:
        return (await get_job(client, "stopme")).get("status", {}).get("ready") == 2

    await wait_for(running, "two ready pods")
    await client.patch(JOBS, "stopme", ADAPTER.suspend_patch(await get_job(client, "stopme")), namespace="default")

    async def emptied() -> Object | None:
        job = await get_job(client, "stopme")
        gone = not await job_pods(client, "stopme")
        return job if gone and condition_true(job, c.BATCH_CONDITION_SUSPENDED) else None

    job = await wait_for(emptied, "pods deleted and Suspended")
    assert "active" not in job["status"]


async def test_failing_batch_job_retries_up_to_its_backoff_limit(client: KubeClient, cluster: SimCluster) -> None:
    await client.create(JOBS, batch_job("doomed", parallelism=1, completions=1, duration=0, fail=True,
                                        backoff_limit=2))

    async def failed() -> Object | None:
        job = await get_job(client, "doomed")
        return job if condition_true(job, c.BATCH_CONDITION_FAILED) else None

    job = await wait_for(failed, "the Failed condition")
    assert ADAPTER.status(job) is JobState.FAILED
    assert conditions(job)[c.BATCH_CONDITION_FAILED]["reason"] == c.BATCH_REASON_BACKOFF_LIMIT
    assert conditions(job)[c.BATCH_CONDITION_FAILURE_TARGET]["reason"] == c.BATCH_REASON_BACKOFF_LIMIT
    assert job["status"]["failed"] == 3  # the first try and two retries
    pods = await job_pods(client, "doomed")
    assert len(pods) == 3 and all(p["status"]["phase"] == c.POD_FAILED for p in pods)


async def test_invalid_batch_job_is_not_run_and_says_why(client: KubeClient, cluster: SimCluster) -> None:
    job = batch_job("typo")
    job["spec"]["backoffLimit"] = "six"
    await client.create(JOBS, job)

    async def warned() -> list[Object] | None:
        events = await client.list(EVENTS, namespace="default", field_selector="involvedObject.name=typo")
        return events.items or None

    [event] = await wait_for(warned, "a warning event on the Job")
    assert event["type"] == "Warning" and event["source"]["component"] == "job-controller"
    assert event["message"] == "the Job is not run: spec.backoffLimit must be a whole number >= 0, not 'six'"
    assert await job_pods(client, "typo") == []
