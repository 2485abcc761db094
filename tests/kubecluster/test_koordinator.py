"""Beside Koordinator, as the guide's users run us: koord-scheduler schedules the pods (in
kube-scheduler's place, with its chart's configuration) and koord-manager's webhooks check
the ElasticQuotas, on the real control plane with kwok nodes and the training operator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.resources import QUOTAS
from koordqueue.realcluster.cluster import KOORDINATOR_NAMESPACE, RealCluster
from tests.controller.conftest import SEED, System, pytorch_job, quick_config, quota, running_system

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]
SEED_UNIT = "pytorch-training-job-py-qu"


async def test_the_seed_flow_beside_koordinator(koordinator: RealCluster, tmp_path: Path) -> None:
    async with running_system(tmp_path, cluster=koordinator) as system:
        async with writers_of_used(system, "pytorch-team-a") as writers:
            await seed_flow(system)
        # Koordinator's ElasticQuota CRD has no status subresource (its /status answers 404): we
        # write status.used with the object, and a version of the quota had it as ours.
        crd = await system.get_json("crd", "elasticquotas.scheduling.sigs.k8s.io")
        assert [v.get("subresources") for v in crd["spec"]["versions"]] == [None], crd["spec"]["versions"]
        # Ours took the object's path and its write was kept. (Whether the watch sees us among the
        # writers depends on who writes first: koord-scheduler writes the same "2", and a write
        # that changes nothing leaves no version and no ownership; it failed so in CI's run.)
        assert system.controller.quota_status.status_subresource is False
        assert writers <= {"koord-queue", "koord-scheduler"} and writers, writers
        quota = await system.get_json("elasticquota", "pytorch-team-a")  # (koord-scheduler writes it too, alike)
        assert quota["status"]["used"][c.GPU] == "2", quota.get("status")


@contextlib.asynccontextmanager
async def writers_of_used(system: System, name: str) -> AsyncIterator[set[str]]:
    """The managers that owned the quota's status.used in any version of it a watch saw
    meanwhile (its managedFields: koord-scheduler's and ours both write it)."""
    managers: set[str] = set()
    since = (await system.client.list(QUOTAS, namespace="default")).resource_version  # every version after

    async def watch() -> None:
        async for event in system.client.watch(QUOTAS, namespace="default", resource_version=since):
            meta = event.object.get("metadata") or {}
            if meta.get("name") != name:
                continue
            for entry in meta.get("managedFields") or ():
                if "f:used" in ((entry.get("fieldsV1") or {}).get("f:status") or {}):
                    managers.add(str(entry.get("manager")))

    task = asyncio.create_task(watch())
    try:
        yield managers
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def seed_flow(system: System) -> None:
    out = await system.akubectl("apply", "-f", str(SEED))
    assert "elasticquota.scheduling.sigs.k8s.io/pytorch-team-a created" in out
    quota = await system.get_json("elasticquota", "pytorch-team-a")
    # koord-manager's mutating webhook saw it: Koordinator's defaults are on the stored quota.
    assert quota["metadata"]["labels"].get("quota.scheduling.koordinator.sh/parent") == "koordinator-root-quota", quota
    await system.wait_phase(SEED_UNIT, c.Phase.RUNNING, timeout=60)

    async def pods_bound() -> list[dict[str, object]] | None:
        pods = (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=pytorch-training-job"))["items"]
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = await system.wait_for(pods_bound, 60, "koord-scheduler to bind the seed's two pods")
    # By koord-scheduler, the only scheduler running (under the default scheduler's name); its
    # ElasticQuota plugin's request annotation on the quota, below, is its own mark too.
    assert isinstance(system.server, RealCluster)
    assert "koord-scheduler" in system.server.processes and "kube-scheduler" not in system.server.processes
    # Every pod carries the quota its unit was charged to, and one gang of all of them.
    for pod in pods:
        meta = pod["metadata"]  # type: ignore[index]
        assert meta["labels"][c.LABEL_QUOTA_NAME] == "pytorch-team-a", meta
        assert meta["annotations"][c.ANNOTATION_GANG_NAME] == "pytorch-training-job", meta
        assert meta["annotations"][c.ANNOTATION_GANG_MIN_AVAILABLE] == "2", meta
    # koord-scheduler counts them in that quota, as we do (its annotation on the quota), and
    # not in its default quota, where the pods of no quota go.

    async def koordinator_request() -> dict[str, str] | None:
        quotas = {q["metadata"]["name"]: q for q in (await system.get_json("elasticquotas", "-A"))["items"]}
        request = json.loads(quotas["pytorch-team-a"]["metadata"].get("annotations", {}).get(
            "quota.scheduling.koordinator.sh/request", "{}"))
        return quotas if request.get(c.GPU) == "2" else None

    quotas = await system.wait_for(koordinator_request, 60, "koord-scheduler to count the pods in pytorch-team-a")
    default_request = json.loads(quotas[c.KOORDINATOR_DEFAULT_QUOTA]["metadata"].get("annotations", {}).get(
        "quota.scheduling.koordinator.sh/request", "{}"))
    assert default_request.get("cpu") in (None, "0"), default_request
    assert {c.KOORDINATOR_ROOT_QUOTA, c.KOORDINATOR_SYSTEM_QUOTA, c.KOORDINATOR_DEFAULT_QUOTA} <= set(quotas)
    # Koordinator's own quotas are not teams': no Queue of ours, no warning about them.
    queues = {q["metadata"]["name"] for q in (await system.get_json("queues", "-n", c.SYSTEM_NAMESPACE))["items"]}
    assert queues == {"pytorch-team-a", "pytorch-training-queue"}
    warned = json.loads(await system.akubectl("get", "events", "-n", KOORDINATOR_NAMESPACE, "-o", "json"))["items"]
    assert [e["message"] for e in warned if e["type"] == "Warning"] == []


# A stream from three teams under koordinator-root-quota on the 32 GPUs of 4 kwok nodes:
# small mins, larger maxes, so that they borrow and compete. (name, min, max GPUs)
TEAMS = (("team-a", 4, 24), ("team-b", 8, 24), ("team-c", 4, 16))
STREAM_JOBS = 8  # per team
REFUSAL_BOUND = 10.0  # seconds an admitted job's pod may stay Pending for quota (none expected)


def stream() -> list[tuple[float, dict[str, Any]]]:
    """(when to submit, job): each team a job every 3 s or so, of 2 pods of 4 GPUs, 10 s
    long: 24 jobs, 192 GPUs x 10 s on 32 GPUs in a stream of 22 s. Pods of half a node
    each, so that wherever koord-scheduler puts them the nodes' room is what we count
    (with pods of 3 GPUs it may leave a node 2 free where we planned 4: its gang then waits
    on the node room, not on quota, up to its scheduling queue's flush of 5 minutes)."""
    jobs = []
    for t, (team, _, _) in enumerate(TEAMS):
        for i in range(STREAM_JOBS):
            job = pytorch_job(f"{team}-{i}", gpus_per_pod=4, duration=10, quota_name=team)
            jobs.append((3.0 * i + 1.1 * t, job))
    return sorted(jobs, key=lambda item: item[0])


def quota_refusal(pod: dict[str, Any]) -> str | None:
    """koord-scheduler's ElasticQuota plugin's refusal on a Pending pod, if that is why it waits."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        message = str(condition.get("message") or "")
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" and (
                "Insufficient quotas" in message or "ElasticQuota" in message):
            return message
    return None


async def test_a_stream_of_teams_beside_koordinator(koordinator: RealCluster, tmp_path: Path) -> None:
    """Three teams borrow and compete; we admit within each quota's runtime as koord-scheduler
    computes it, so it never leaves an admitted job's pods Pending for quota ("Insufficient
    quotas"), and every pod carries the quota its unit was charged to."""
    # Admitted units are not preempted within the stream (each runs 10 s): a victim's pods,
    # still going when the gang that reclaimed their room comes, would make koord-scheduler
    # reject that gang for node room, and keep one of its pods back until its queue's flush.
    config = quick_config(protect_seconds=60.0)
    async with running_system(tmp_path, cluster=koordinator, config=config) as system:
        await system.apply(*(quota(name, low, high, parent=c.KOORDINATOR_ROOT_QUOTA) for name, low, high in TEAMS))
        jobs = stream()
        started = time.monotonic()
        refused_since: dict[str, float] = {}  # pod -> when it was first seen refused for quota
        refusals: dict[str, tuple[float, str]] = {}  # pod -> (longest seen, message)
        pending_since: dict[str, float] = {}
        longest_pending = 0.0
        labels_seen: dict[str, str] = {}  # pod -> its quota label
        peak_gpus: dict[str, int] = {}  # team -> the most GPUs its running pods held at once

        async def submit() -> None:
            for when, job in jobs:
                await asyncio.sleep(max(0.0, started + when - time.monotonic()))
                await system.apply(job)

        async def watch() -> None:
            nonlocal longest_pending
            while True:
                now = time.monotonic()
                pods = (await system.get_json("pods", "-n", "default"))["items"]
                running: dict[str, int] = {}  # team -> GPUs of its running pods
                for pod in pods:
                    name = pod["metadata"]["name"]
                    labels_seen[name] = pod["metadata"].get("labels", {}).get(c.LABEL_QUOTA_NAME, "")
                    if pod["spec"].get("nodeName"):
                        pending_since.pop(name, None)
                        refused_since.pop(name, None)
                        if pod["status"].get("phase") == "Running":
                            team = labels_seen[name]
                            asks = pod["spec"]["containers"][0]["resources"]["requests"][c.GPU]
                            running[team] = running.get(team, 0) + int(asks)
                        continue
                    longest_pending = max(longest_pending, now - pending_since.setdefault(name, now))
                    why = quota_refusal(pod)
                    if why is not None:
                        since = refused_since.setdefault(name, now)
                        refusals[name] = (max(refusals.get(name, (0.0, ""))[0], now - since), why)
                for team, gpus in running.items():
                    peak_gpus[team] = max(peak_gpus.get(team, 0), gpus)
                await asyncio.sleep(0.5)

        async def all_done() -> bool:
            units = (await system.get_json("queueunits", "-n", "default"))["items"]
            return len(units) == len(jobs) and all(
                (u.get("status") or {}).get("phase") == c.Phase.SUCCEED for u in units)

        watcher = asyncio.create_task(watch())
        unfinished = ""
        try:
            await submit()
            await system.wait_for(all_done, 150, "every job of the stream to finish")
        except AssertionError as e:  # said below, with the figures and what was left
            units = (await system.get_json("queueunits", "-n", "default"))["items"]
            left = [f"{u['metadata']['name']}: {(u.get('status') or {}).get('phase')} "
                    f"{(u.get('status') or {}).get('message')}" for u in units
                    if (u.get("status") or {}).get("phase") != c.Phase.SUCCEED]
            pods = [f"{p['metadata']['name']}: {p['status'].get('phase')} {p['status'].get('conditions')}"
                    for p in (await system.get_json("pods", "-n", "default"))["items"] if not p["spec"].get("nodeName")]
            unfinished = f"{e}\nunits left: {left}\npods not bound: {pods}"
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        elapsed = time.monotonic() - started
        # Each admission's Dequeued event names the quota its unit was charged to.
        dequeued = (await system.get_json("events", "-n", "default", "--field-selector",
                                          f"reason={c.EventReason.DEQUEUED}"))["items"]
        charged: dict[str, set[str]] = {}
        for event in dequeued:
            words = str(event["message"]).split()  # admitted into quota Q through queue ...
            job = event["involvedObject"]["name"].removesuffix("-py-qu")
            charged.setdefault(job, set()).add(words[3])
        admissions = sum(int(e.get("count") or 1) for e in dequeued)
        worst = max((seconds for seconds, _ in refusals.values()), default=0.0)
        print(f"\nstream beside Koordinator: {len(jobs)} jobs, {admissions} admissions, {len(labels_seen)} pods, "
              f"{len(refusals)} refused for quota (longest {worst:.1f} s), longest Pending {longest_pending:.1f} s, "
              f"peak GPUs running by team {dict(sorted(peak_gpus.items()))}, {elapsed:.0f} s")
        assert not unfinished, unfinished
        assert worst <= REFUSAL_BOUND, refusals
        # They borrowed: two teams at least ran past their min at some time.
        assert sum(peak_gpus.get(name, 0) > low for name, low, _ in TEAMS) >= 2, peak_gpus
        # Every pod carries the quota its unit was charged to (the team its job names).
        assert len(labels_seen) == 2 * len(jobs), labels_seen
        for pod, label in labels_seen.items():
            job = pod.rsplit("-", 2)[0]
            assert {label} == charged[job] == {job.rsplit("-", 1)[0]}, (pod, label, charged.get(job))


def outsider(name: str, node: str, cpu: int) -> dict[str, Any]:
    """A pod of no quota (koord-scheduler charges it to its default quota), bound to a node."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox", "resources": {
                "requests": {"cpu": str(cpu)}, "limits": {"cpu": str(cpu)}}}]}}


async def test_what_koordinators_default_quota_uses_is_not_shared(koordinator: RealCluster, tmp_path: Path) -> None:
    """koord-scheduler's quota tree shares the nodes less what its system and default quotas
    use: so does ours. Pods of no quota take 270 of the 4 x 96 cpus, so team-a's runtime is
    114 cpus at most: a job of 2 pods of 60 cpus waits with us (not admitted to sit with
    pods refused "Insufficient quotas"), and is admitted once one of those pods is gone.
    Node fit is off for team-a, so that only the quota decides."""
    async with running_system(tmp_path, cluster=koordinator) as system:
        await system.apply(quota("team-a", 0, 32, parent=c.KOORDINATOR_ROOT_QUOTA,
                                 annotations={c.ANNOTATION_NODE_FIT: "false"}))
        await system.apply(*(outsider(f"outsider-{i}", f"gpu-{i}", 90) for i in range(3)))
        quotas = system.controller.quota_sync

        async def shared_cpus() -> int | None:
            capacity = quotas.capacity or {}
            return capacity.get("cpu") if capacity.get("cpu") == 114_000 else None

        await system.wait_for(shared_cpus, 30, "our root total less the default quota's 270 cpus")
        job = pytorch_job("big", gpus_per_pod=1, duration=5, quota_name="team-a")
        for role in job["spec"]["pytorchReplicaSpecs"].values():
            for part in ("requests", "limits"):
                role["template"]["spec"]["containers"][0]["resources"][part]["cpu"] = "60"
        await system.apply(job)
        await system.wait_phase("big-py-qu", c.Phase.ENQUEUED, timeout=30)
        await asyncio.sleep(5)  # a few cycles: still waiting, no pod made
        assert await system.phase("big-py-qu") == c.Phase.ENQUEUED, await system.unit("big-py-qu")
        assert (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=big"))["items"] == []
        await system.akubectl("delete", "pod", "outsider-0", "--grace-period=0", "--force")
        await system.wait_phase("big-py-qu", c.Phase.RUNNING, timeout=60)
        pods = (await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}=big"))["items"]
        assert [quota_refusal(p) for p in pods] == [None] * len(pods)


RECLAIM_BOUND = 30.0  # seconds from the reclaiming job's admission to its pods all running
TERMINATING_SECONDS = 5.0  # how long the victim's pods take to stop once deleted (a grace period)
LINGER = "koord-queue.test/terminating"  # the finalizer that keeps them that long


async def test_a_reclaiming_gang_runs_as_soon_as_its_victims_pods_are_gone(koordinator: RealCluster,
                                                                            tmp_path: Path) -> None:
    """team-b's `low` fills the 4 nodes, borrowing team-a's min; team-a's `high` reclaims it;
    `low`'s pods take 5 s to stop. `high`'s job is resumed once they are gone (issue 21), so
    koord-scheduler finds room for its gang at once, rather than rejecting it for the room
    `low`'s terminating pods still hold and leaving it to its queue's backoff or flush."""
    async with running_system(tmp_path, cluster=koordinator) as system:
        seconds, refused = await reclaim_on_full_nodes(system)
    print(f"\nreclaim beside Koordinator: high's pods all running {seconds:.1f} s after its admission; "
          f"refused by the scheduler meanwhile: {refused}")
    assert not refused and TERMINATING_SECONDS <= seconds <= RECLAIM_BOUND, (seconds, refused)


async def reclaim_on_full_nodes(system: System) -> tuple[float, dict[str, str]]:
    """The scene above; seconds from `high` seen admitted to both its pods seen Running, and
    the scheduler's refusals of its pods meanwhile (pod -> message)."""
    root = c.KOORDINATOR_ROOT_QUOTA
    await system.apply(quota("team-a", 16, 32, parent=root), quota("team-b", 16, 32, parent=root))
    await system.apply(pytorch_job("low", gpus_per_pod=8, workers=3, quota_name="team-b"))

    async def pods(job: str) -> list[dict[str, Any]]:
        return list((await system.get_json("pods", "-l", f"{c.LABEL_JOB_NAME}={job}"))["items"])

    async def low_fills_the_nodes() -> bool:
        mine = await pods("low")
        return len(mine) == 4 and all(p["status"].get("phase") == "Running" for p in mine)

    await system.wait_for(low_fills_the_nodes, 60, "low's 4 pods of 8 GPUs to run")
    for pod in await pods("low"):
        await system.akubectl("patch", "pod", pod["metadata"]["name"], "--type", "merge", "-p",
                              json.dumps({"metadata": {"finalizers": [LINGER]}}))
    loop = asyncio.get_running_loop()

    async def low_terminates_slowly() -> None:
        deleted: dict[str, float] = {}
        while True:
            for pod in await pods("low"):
                name = pod["metadata"]["name"]
                if pod["metadata"].get("deletionTimestamp") and LINGER in (pod["metadata"].get("finalizers") or ()):
                    if loop.time() - deleted.setdefault(name, loop.time()) >= TERMINATING_SECONDS:
                        await system.akubectl("patch", "pod", name, "--type", "merge", "-p",
                                              json.dumps({"metadata": {"finalizers": None}}), check=False)
            await asyncio.sleep(0.2)

    terminating = asyncio.create_task(low_terminates_slowly())
    try:
        await system.apply(pytorch_job("high", gpus_per_pod=8, workers=1, quota_name="team-a", duration=5))
        deadline = loop.time() + 240
        admitted: float | None = None
        refused: dict[str, str] = {}
        while loop.time() < deadline:
            if admitted is None and await system.phase("high-py-qu") in (c.Phase.DEQUEUED, c.Phase.RUNNING):
                admitted = loop.time()
            mine = await pods("high")
            for pod in mine:
                for condition in pod["status"].get("conditions") or ():
                    if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                        refused[pod["metadata"]["name"]] = str(condition.get("message"))
            if admitted is not None and len(mine) == 2 and all(p["status"].get("phase") == "Running" for p in mine):
                return loop.time() - admitted, refused
            await asyncio.sleep(0.2)
        raise AssertionError(f"high's pods did not all run in 240 s (admitted: {admitted is not None}); "
                             f"refused: {refused}")
    finally:
        terminating.cancel()
        await asyncio.gather(terminating, return_exceptions=True)
        for pod in await pods("low"):
            await system.akubectl("patch", "pod", pod["metadata"]["name"], "--type", "merge", "-p",
                                  json.dumps({"metadata": {"finalizers": None}}), check=False)
