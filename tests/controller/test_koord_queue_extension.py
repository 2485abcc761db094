"""Koord-Queue's job extensions beside us (issue 30 item 2): with our TFJob extension off (the
chart's `extension.tf.enable: false`), a Koord-Queue job extension running for TFJobs works
unchanged. Its units are bare units to us: dequeued when they fit their quota, holding it until
the extension writes their final phase; its jobs are never touched by us.

`KoordQueueExtension` below behaves as Koord-Queue's generic job reconciler does
(pkg/jobext/framework/default_job_reconciler.go): it makes the job's unit (named job name +
"-tf-qu", owned by the job, labels copied), waits for Dequeued, resumes the job, writes
Running, and writes Succeed when told the job ended."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.config import ALL_JOB_KINDS
from koordqueue.kube.client import Resource

from .conftest import System, SystemFactory, quick_config
from .test_quota_tree import create, gpus, namespace, tree

pytestmark = [pytest.mark.timeout(150), pytest.mark.both_control_planes]

TF_JOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.TF_JOB_PLURAL)
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
NAMESPACE = "ext"


def tf_job(name: str, workers: int) -> dict[str, Any]:
    """A TFJob of `workers` one-GPU workers, made suspended (as Koord-Queue's admission webhook leaves it)."""
    container = {"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0",
                 "resources": {part: {"cpu": "1", "memory": "1Gi", c.GPU: "1"} for part in ("requests", "limits")}}
    return {"apiVersion": f"{c.KUBEFLOW_GROUP}/v1", "kind": c.TF_JOB_KIND,
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"team": "x"}},
            "spec": {"runPolicy": {"suspend": True}, "tfReplicaSpecs": {"Worker": {
                "replicas": workers, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}}}}


class KoordQueueExtension:
    """A Koord-Queue job extension for TFJobs, in small."""

    def __init__(self, system: System) -> None:
        self.system = system

    async def submit(self, name: str, workers: int) -> dict[str, Any]:
        job = await self.system.client.create(TF_JOBS, tf_job(name, workers), namespace=NAMESPACE)
        template = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]
        unit = {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_UNIT_KIND,
                "metadata": {"name": f"{name}-{c.UNIT_SUFFIX_TF}", "namespace": NAMESPACE,
                             "labels": dict(job["metadata"].get("labels") or {}),
                             "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": job["kind"],
                                                  "name": name, "uid": job["metadata"]["uid"]}]},
                "spec": {"consumerRef": {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": name,
                                         "namespace": NAMESPACE},
                         "priority": 0,
                         "resource": {"cpu": str(workers), "memory": f"{workers}Gi", c.GPU: str(workers)},
                         "podSet": [{"name": "worker", "count": workers, "template": copy.deepcopy(template)}]}}
        await self.system.client.create(UNITS, unit, namespace=NAMESPACE)
        return job

    async def phase(self, name: str) -> str:
        return await self.system.phase(f"{name}-{c.UNIT_SUFFIX_TF}", NAMESPACE)

    async def resume_once_dequeued(self, name: str) -> None:
        await self.system.wait_phase(f"{name}-{c.UNIT_SUFFIX_TF}", c.Phase.DEQUEUED, NAMESPACE, timeout=20)
        await self.system.client.patch(TF_JOBS, name, {"spec": {"runPolicy": {"suspend": False}}},
                                       namespace=NAMESPACE)
        await self.write_phase(name, c.Phase.RUNNING)

    async def write_phase(self, name: str, phase: str) -> None:
        body = json.dumps({"status": {"phase": phase, "message": phase}})
        await self.system.akubectl("patch", "queueunit", f"{name}-{c.UNIT_SUFFIX_TF}", "-n", NAMESPACE,
                                   "--subresource=status", "--type", "merge", "-p", body)


async def untouched_by_us(system: System, name: str, suspended: bool) -> None:
    """The job as the extension left it: no annotation of ours, its suspension the extension's."""
    job = await system.client.get(TF_JOBS, name, namespace=NAMESPACE)
    ours = {c.ANNOTATION_SUSPEND, c.ANNOTATION_JOB_HAS_ENQUEUED, c.ANNOTATION_JOB_ENQUEUE_TIMESTAMP,
            c.ANNOTATION_JOB_DEQUEUE_TIMESTAMP, c.ANNOTATION_PLACED}
    assert not ours & set(job["metadata"].get("annotations") or {}), job["metadata"]
    assert job["spec"]["runPolicy"]["suspend"] is suspended
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] in (2, 3)


async def test_a_koord_queue_extension_beside_us_has_its_units_dequeued_and_its_jobs_left_alone(
        start_system: SystemFactory) -> None:
    config = replace(quick_config(), job_kinds=ALL_JOB_KINDS - {c.TF_JOB_KIND})  # extension.tf.enable: false
    async with start_system(config=config) as system:
        await system.apply(namespace(NAMESPACE))
        await create(system, tree(gpus("team-x", 2, 4, namespaces=[NAMESPACE])))
        extension = KoordQueueExtension(system)
        await extension.submit("first", 3)
        await extension.resume_once_dequeued("first")
        await extension.submit("second", 2)  # 3 + 2 > team-x's max of 4: it waits

        async def waits() -> str:
            unit = await system.unit(f"second-{c.UNIT_SUFFIX_TF}", NAMESPACE)
            message = str((unit.get("status") or {}).get("message"))
            return message if "team-x" in message else ""

        await system.wait_for(waits, what="the second unit waiting for team-x's room")
        assert await extension.phase("second") == c.Phase.ENQUEUED
        await untouched_by_us(system, "second", suspended=True)
        await untouched_by_us(system, "first", suspended=False)
        # The first job ends: its extension writes the final phase, and the quota is the next one's.
        await extension.write_phase("first", c.Phase.SUCCEED)
        await extension.resume_once_dequeued("second")
        await untouched_by_us(system, "second", suspended=False)
        assert await extension.phase("first") == c.Phase.SUCCEED
