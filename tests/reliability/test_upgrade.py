"""Upgrade from Koord-Queue v1.8 with jobs in flight.

The store is seeded as Koord-Queue leaves a cluster: QueueUnits in its field names
(labels and annotations copied from the job, `spec.resource` and `spec.request` both
the total, `podSet` with lowercase role names and whole pod templates, an owner
reference without `controller`), in every phase it writes — Enqueued, no phase at all,
the older SchedReady / SchedSucceed / SchedFailed, Reserved, Dequeued (with and without
`admissions`, as its v1 units are), Running, TimeoutBackoff, Preempted, Succeed, Failed —
and their PyTorchJobs as its job extension leaves them (suspended: annotation "true" and
`runPolicy.suspend`; released: annotation "false", `runPolicy.suspend: false`, pods
running). Then our controller starts, and each unit must go on as it would have:
running ones accounted and never disturbed, queued ones admitted in their order,
finished ones left alone.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.apiserver.store import DELETED, Event
from koordqueue.kube.client import KubeClient, Resource

from ..controller.conftest import pytorch_job, quick_config, quota
from .conftest import bare_cluster, controller_running, load_chaos

pytestmark = pytest.mark.timeout(120)
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
JOBS = Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL)
QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
PODS = Resource("", "v1", "pods")
HOLDING = {p.value for p in c.PHASES_HOLDING_QUOTA}

# name: (Koord-Queue phase or None for no status, job released by Koord-Queue?, GPUs, priority)
RUNNING = {  # quota held, job released: must be accounted and left running
    "kq-running": ("Running", True, 1, 0),
    "kq-dequeued": ("Dequeued", True, 1, 0),
    "kq-v1-dequeued": ("Dequeued", True, 1, 0),  # a v1 unit: no status.admissions
    "kq-schedsucceed": ("SchedSucceed", True, 1, 0),
}
HELD = {  # quota held, job still suspended: must keep its quota and be released
    "kq-schedready": ("SchedReady", False, 1, 0),
    "kq-reserved": ("Reserved", False, 1, 0),  # its admission check already said Ready
}
QUEUED = {  # waiting: admitted in priority order (2 GPUs each, room for one at a time)
    "kq-enqueued": ("Enqueued", False, 2, 50),
    "kq-nophase": (None, False, 2, 40),
    "kq-schedfailed": ("SchedFailed", False, 2, 30),
    "kq-backoff": ("TimeoutBackoff", False, 2, 20),
    "kq-preempted": ("Preempted", False, 2, 10),
}
FINISHED = {"kq-succeed": ("Succeed", True, 1, 0), "kq-failed": ("Failed", True, 1, 0)}


def koord_queue_job(name: str, released: bool, gpus: int, priority: int, duration: float) -> dict[str, Any]:
    """A PyTorchJob as Koord-Queue's job extension leaves it (suspended until released)."""
    job = pytorch_job(name, gpus_per_pod=gpus, workers=0, duration=duration, priority=priority,
                      quota_name="team-u")
    job["spec"]["runPolicy"] = {"suspend": not released}
    job["metadata"]["annotations"][c.ANNOTATION_SUSPEND] = "false" if released else c.TRUE
    if released:
        job["metadata"]["annotations"]["koord-queue/job-dequeue-timestamp"] = "2024-05-01 10:00:00 +0000 UTC"
    return job


def koord_queue_unit(job: dict[str, Any], phase: str | None, gpus: int, priority: int) -> tuple[
        dict[str, Any], dict[str, Any] | None]:
    """The QueueUnit Koord-Queue created for ``job`` and the status its scheduler wrote."""
    meta = job["metadata"]
    total = {"cpu": "1", "memory": "1Gi", c.GPU: str(gpus)}
    template = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    unit = {
        "apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_UNIT_KIND,
        "metadata": {
            "name": f"{meta['name']}-py-qu", "namespace": "default",
            "labels": dict(meta["labels"]),
            # Copied from the job when it was created: it was suspended then.
            "annotations": {**meta["annotations"], c.ANNOTATION_SUSPEND: c.TRUE},
            "ownerReferences": [{"apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.PYTORCH_JOB_KIND,
                                 "name": meta["name"], "uid": meta["uid"]}],
        },
        "spec": {
            "consumerRef": {"apiVersion": c.KUBEFLOW_API_VERSION, "kind": c.PYTORCH_JOB_KIND,
                            "name": meta["name"], "namespace": "default"},
            "priority": priority, "resource": total, "request": total,
            "podSet": [{"name": "master", "count": 1, "template": template}],
            **({"queue": "team-u"} if phase not in (None, "Enqueued") else {}),
        },
    }
    if phase is None:
        return unit, None
    status: dict[str, Any] = {"phase": phase, "message": f"koord-queue says {phase}",
                              "lastUpdateTime": "2024-05-01T10:00:00Z", "attempts": 1}
    if phase in ("Running", "Dequeued", "SchedSucceed", "SchedReady", "Reserved") and \
            meta["name"] != "kq-v1-dequeued":
        status["admissions"] = [{"name": "master", "replicas": 1, "resources": total,
                                 "running": 1 if phase == "Running" else 0}]
        status["lastAllocateTime"] = "2024-05-01T10:00:00Z"
    if phase == "Running":
        status["podState"] = {"running": 1}
    if phase == "Reserved":
        status["admissionChecks"] = [{"name": "provision", "state": "Ready",
                                      "lastTransitionTime": "2024-05-01T10:00:00Z"}]
    if phase == "TimeoutBackoff":
        status["requeueState"] = {"count": 1, "requeueAt": "2024-05-01T10:01:00Z"}
    if phase in ("Succeed", "Failed"):
        status["admissions"] = []
    return unit, status


class Recorder:
    """Every write the store makes to the units and jobs, in order."""

    def __init__(self) -> None:
        self.first_held: list[str] = []  # jobs in the order their units first held quota
        self.suspended_jobs: list[str] = []  # jobs whose suspension was set by someone
        self.deleted_pods: list[str] = []

    def __call__(self, event: Event) -> None:
        meta = event.obj["metadata"]
        name = meta["name"]
        if event.key.endswith("/queueunits"):
            phase = (event.obj.get("status") or {}).get("phase")
            job = name.removesuffix("-py-qu")
            if phase in HOLDING and job not in self.first_held:
                self.first_held.append(job)
        elif event.key.endswith("/pytorchjobs") and event.old is not None:
            was = (event.old["metadata"].get("annotations") or {}).get(c.ANNOTATION_SUSPEND) == c.TRUE
            now = (meta.get("annotations") or {}).get(c.ANNOTATION_SUSPEND) == c.TRUE
            if now and not was:
                self.suspended_jobs.append(name)
        elif event.key == "/pods" and event.type == DELETED:
            self.deleted_pods.append((meta.get("labels") or {}).get(c.LABEL_JOB_NAME, "?"))


async def seed(client: KubeClient) -> dict[str, dict[str, Any]]:
    """Koord-Queue's cluster: the quota, jobs in every state, their units."""
    await client.create(QUOTAS, quota("team-u", 2, 8), namespace="default")
    specs = {**RUNNING, **HELD, **QUEUED, **FINISHED}
    stored: dict[str, dict[str, Any]] = {}
    for name, (phase, released, gpus, priority) in specs.items():
        duration = 4.0 if name in RUNNING or name in HELD else 1.5
        job = koord_queue_job(name, released=False, gpus=gpus, priority=priority, duration=duration)
        created = await client.create(JOBS, job, namespace="default")
        if name in FINISHED:  # ended before the switch: conditions first, then released
            kind = c.KUBEFLOW_CONDITION_SUCCEEDED if phase == "Succeed" else c.KUBEFLOW_CONDITION_FAILED
            await client.patch_status(JOBS, name, {"status": {"conditions": [
                {"type": kind, "status": c.CONDITION_TRUE, "reason": f"PyTorchJob{kind}",
                 "lastTransitionTime": "2024-05-01T10:05:00Z"}]}}, namespace="default")
        if released:
            released_job = koord_queue_job(name, released=True, gpus=gpus, priority=priority, duration=duration)
            created = await client.patch(JOBS, name, {"metadata": {"annotations": released_job["metadata"][
                "annotations"]}, "spec": {"runPolicy": {"suspend": False}}}, namespace="default")
        job["metadata"]["uid"] = created["metadata"]["uid"]
        unit, status = koord_queue_unit(job, phase, gpus, priority)
        await client.create(UNITS, unit, namespace="default")
        if status is not None:
            await client.patch_status(UNITS, unit["metadata"]["name"], {"status": status}, namespace="default")
        stored[name] = created
    return stored


async def wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_cluster_switches_from_koord_queue_with_jobs_in_flight(tmp_path: Path) -> None:
    chaos = load_chaos()
    async with bare_cluster(tmp_path / "state") as (server, client, sim):
        await seed(client)
        await sim.start()  # the training operator and kubelet find the cluster as Koord-Queue left it

        async def released_pods_run() -> bool:
            pods = (await client.list(PODS, namespace="default")).items
            running = {p["metadata"]["labels"].get(c.LABEL_JOB_NAME) for p in pods
                       if (p.get("status") or {}).get("phase") == c.POD_RUNNING}
            return running >= set(RUNNING)

        await wait(released_pods_run, 20, "the jobs Koord-Queue released to run")
        pods_before = {p["metadata"]["name"]: p["metadata"]["uid"]
                       for p in (await client.list(PODS, namespace="default")).items}
        finished_before = {f"{n}-py-qu": server.store.get(chaos.UNITS_KEY, "default", f"{n}-py-qu")
                           for n in FINISHED}
        # The checker, primed with the cluster as it is (units before jobs: released jobs hold quota).
        checker = chaos.HistoryChecker()
        checker.prime(*(server.store.items(key) for key in (chaos.QUOTAS_KEY, chaos.UNITS_KEY, chaos.JOBS_KEY)))
        recorder = Recorder()
        server.store.listeners += [checker.feed, recorder]

        async with controller_running(client, quick_config()) as manager:
            engine = manager.controller.engine
            # Accounted at once: every unit Koord-Queue had given quota holds it in our engine.
            for name in (*RUNNING, *HELD):
                held = engine.unit(f"default/{name}-py-qu")
                assert held is not None and held.admitted_quota == "team-u", (name, held)

            async def all_done() -> bool:
                units = {u["metadata"]["name"]: (u.get("status") or {}).get("phase")
                         for u in (await client.list(UNITS, namespace="default")).items}
                want = {f"{n}-py-qu": "Succeed" for n in (*RUNNING, *HELD, *QUEUED, "kq-succeed")}
                return all(units.get(k) == v for k, v in want.items())

            await wait(all_done, 60, "every job to end")
            assert checker.violations == [], checker.violations
            assert checker.peak_gpus["team-u"] == 8  # full, never more
            # Running ones never disturbed: no suspension, no pod of theirs deleted by anyone.
            assert not set(recorder.suspended_jobs) & set(RUNNING), recorder.suspended_jobs
            assert not set(recorder.deleted_pods) & set(RUNNING), recorder.deleted_pods
            pods_after = {p["metadata"]["name"]: p["metadata"]["uid"]
                          for p in (await client.list(PODS, namespace="default")).items}
            for pod, uid in pods_before.items():
                assert pods_after.get(pod) == uid, f"pod {pod} was replaced"
            # Queued ones admitted in priority order, after the held ones kept theirs.
            queued_order = [n for n in recorder.first_held if n in QUEUED]
            assert queued_order == list(QUEUED), recorder.first_held
            # Finished ones left alone: not a write to their units.
            for name, before in finished_before.items():
                after = server.store.get(chaos.UNITS_KEY, "default", name)
                assert after is before, (name, after)
            failed = server.store.get(chaos.UNITS_KEY, "default", "kq-failed-py-qu")
            assert failed["status"]["phase"] == "Failed"
            # Nobody edited a unit by hand: Koord-Queue's way of writing one is not taken for that.
            events = server.store.items("/events", "default")
            restored = [e["involvedObject"]["name"] for e in events if e.get("reason") == c.EventReason.SPEC_RESTORED]
            assert restored == []
            # Nothing lost, nothing made up: one unit per job.
            names = sorted(u["metadata"]["name"] for u in (await client.list(UNITS, namespace="default")).items)
            assert names == sorted(f"{n}-py-qu" for n in (*RUNNING, *HELD, *QUEUED, *FINISHED))
