"""Tenants kept apart, beyond tests/controller/test_quotas_and_tenants.py: a quota named
like another tenant's takes nothing from it, the namespaces annotation binds exactly the
namespaces it lists, the default-quota rules of SEMANTICS §5 (and their ambiguous case),
and hand edits of a QueueUnit's labels, queue and priority: undone, and never used, however
fast they come."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from koordqueue.api import constants as c
from koordqueue.apiserver.store import Event
from koordqueue.controller.phases import HOLDING
from koordqueue.controller.resources import UNITS

from ..controller.conftest import System, pytorch_job, quota, running_system

pytestmark = pytest.mark.timeout(120)

UNITS_KEY = f"{c.QUEUE_GROUP}/{c.QUEUE_UNIT_PLURAL}"


def namespace(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def message_of(system: System, job: str, ns: str) -> str:
    async def said() -> str | None:
        status = (await system.unit(f"{job}-py-qu", ns)).get("status", {})
        return status.get("message") if status.get("phase") == c.Phase.ENQUEUED and status.get("message") else None

    return str(await system.wait_for(said, what=f"{ns}/{job} told why it waits"))


async def warnings_of(system: System, name: str, ns: str) -> list[str]:
    return [e["message"] for e in await system.events(name, ns) if e["type"] == c.EventType.WARNING]


async def test_a_quota_named_like_another_tenants_takes_nothing_from_it(tmp_path: Path) -> None:
    async with running_system(tmp_path / "state") as system:
        await system.apply(namespace("team-a"), namespace("team-b"))
        await system.apply(quota("team-a", 2, 4, namespace="team-a"))
        await system.apply(pytorch_job("a-first", namespace="team-a", quota_name="team-a", workers=0))
        await system.wait_phase("a-first-py-qu", c.Phase.RUNNING, namespace="team-a")
        # Team b makes its own quota of the same name: a bigger max, bound to itself.
        twin = quota("team-a", 32, 32, namespace="team-b",
                     annotations={c.ANNOTATION_QUOTA_NAMESPACES: json.dumps(["team-b"])})
        await system.apply(twin)
        expected = ("quota not used: the name team-a is taken by the ElasticQuota in namespace team-a "
                    "(quota names are cluster-wide)")

        async def refused() -> bool:
            return expected in await warnings_of(system, "team-a", "team-b")

        await system.wait_for(refused, what="the twin refused with a Warning")
        # Team b's job naming it is refused as before; team a's quota keeps its max of 4 GPUs.
        await system.apply(pytorch_job("b-sneaky", namespace="team-b", quota_name="team-a", workers=0))
        assert await message_of(system, "b-sneaky", "team-b") == \
            "quota team-a is not bound to namespace team-b (it belongs to namespace team-a)"
        await system.apply(*[pytorch_job(f"a-{i}", namespace="team-a", quota_name="team-a", workers=0)
                             for i in range(4)])
        await system.wait_for(lambda: _count_phase(system, "team-a", c.Phase.RUNNING, 4), what="team a full")
        assert await message_of(system, "a-3", "team-a") != ""  # the fifth GPU is not there
        used = (await system.get_json("elasticquota", "team-a", "-n", "team-a"))["status"]["used"]
        assert used[c.GPU] == "4"
        assert "used" not in (await system.get_json("elasticquota", "team-a", "-n", "team-b")).get("status", {})
        # Deleting the twin changes nothing for team a.
        await system.akubectl("delete", "elasticquota", "team-a", "-n", "team-b")
        await system.akubectl("delete", "pytorchjob", "a-first", "-n", "team-a")
        await system.wait_phase("a-3-py-qu", c.Phase.RUNNING, namespace="team-a")
        queue = await system.get_json("queue", "team-a", "-n", c.SYSTEM_NAMESPACE)
        assert queue["metadata"]["labels"][c.LABEL_QUOTA_NAME] == "team-a"


async def _count_phase(system: System, ns: str, phase: str, count: int) -> bool:
    units = (await system.get_json("queueunits", "-n", ns))["items"]
    return sum(1 for u in units if u.get("status", {}).get("phase") == phase) == count


async def test_namespaces_annotation_and_default_quota_rules(tmp_path: Path) -> None:
    async with running_system(tmp_path / "state") as system:
        names = ("alpha", "beta", "gamma", "delta", "epsilon", "pool", "intruder")
        await system.apply(*[namespace(n) for n in names])
        await system.apply(
            quota("alpha", 1, 4, namespace="pool"),  # named after namespace alpha, but lives in pool:
            quota("beta-gpus", 1, 4, namespace="beta"),  # the only quota living in beta
            quota("shared", 1, 4, namespace="pool",  # lists gamma (and alpha)
                  annotations={c.ANNOTATION_QUOTA_NAMESPACES: json.dumps(["gamma", "alpha"])}),
            quota("d1", 1, 4, namespace="delta"), quota("d2", 1, 4, namespace="delta"),  # two: ambiguous
        )
        await system.apply(
            pytorch_job("in-beta", namespace="beta", workers=0),
            pytorch_job("in-gamma", namespace="gamma", workers=0),
            pytorch_job("in-delta", namespace="delta", workers=0),
            pytorch_job("in-epsilon", namespace="epsilon", workers=0),
            pytorch_job("in-alpha", namespace="alpha", workers=0),
            # The annotation binds the namespaces it lists, and only them.
            pytorch_job("gamma-by-label", namespace="gamma", quota_name="shared", workers=0),
            pytorch_job("intruder-by-label", namespace="intruder", quota_name="shared", workers=0),
            pytorch_job("intruder-by-queue", namespace="intruder", queue="shared", workers=0),
        )
        for job, ns in (("in-beta", "beta"), ("in-gamma", "gamma"), ("gamma-by-label", "gamma")):
            await system.wait_phase(f"{job}-py-qu", c.Phase.RUNNING, namespace=ns)
        for job, ns, q in (("in-beta", "beta", "beta-gpus"), ("in-gamma", "gamma", "shared"),
                           ("gamma-by-label", "gamma", "shared")):
            status = (await system.unit(f"{job}-py-qu", ns))["status"]
            assert status["admissions"] and f"quota {q} " in (await _admitted_message(system, job, ns)), (job, q)
        # Quota alpha is named after namespace alpha but neither lives there nor lists it; the
        # rule of the name does not hand it out. Shared lists alpha: that is the one used.
        await system.wait_phase("in-alpha-py-qu", c.Phase.RUNNING, namespace="alpha")
        assert "quota shared " in await _admitted_message(system, "in-alpha", "alpha")
        assert await message_of(system, "in-delta", "delta") == (
            f"namespace delta could use several quotas (d1, d2 live in it); name one with the label "
            f"{c.LABEL_QUOTA_NAME}")
        assert await message_of(system, "in-epsilon", "epsilon") == (
            f"no quota for namespace epsilon: name one with the label {c.LABEL_QUOTA_NAME} "
            f"or a queue with the annotation {c.ANNOTATION_QUEUE}")
        refused = "quota shared is not bound to namespace intruder (it belongs to namespace pool)"
        assert await message_of(system, "intruder-by-label", "intruder") == refused
        assert await message_of(system, "intruder-by-queue", "intruder") == refused
        for job in ("intruder-by-label", "intruder-by-queue"):
            assert refused in await warnings_of(system, job, "intruder")
            assert (await system.get_json("pytorchjob", job, "-n", "intruder"))["metadata"]["annotations"][
                c.ANNOTATION_SUSPEND] == c.TRUE
        # Naming one of delta's two quotas settles it; the namespace rule for its own name works too.
        await system.akubectl("label", "pytorchjob", "in-delta", "-n", "delta", f"{c.LABEL_QUOTA_NAME}=d2")
        await system.wait_phase("in-delta-py-qu", c.Phase.RUNNING, namespace="delta")
        await system.apply(quota("epsilon", 1, 4, namespace="epsilon"), quota("other", 1, 4, namespace="epsilon"))
        await system.wait_phase("in-epsilon-py-qu", c.Phase.RUNNING, namespace="epsilon")
        assert "quota epsilon " in await _admitted_message(system, "in-epsilon", "epsilon")


async def _admitted_message(system: System, job: str, ns: str) -> str:
    events = await system.events(f"{job}-py-qu", ns)
    return " ".join(e["message"] for e in events if e["reason"] == c.EventReason.DEQUEUED)


async def test_hand_edits_of_a_units_labels_and_queue_are_undone(tmp_path: Path) -> None:
    """The unit's quota label, preemptible label and queue are the job's: editing the unit
    moves nothing (a tenant who may edit units must not pick another quota or Queue, or make
    a job unpreemptible, past what its job says); editing the job does."""
    async with running_system(tmp_path / "state") as system:
        await system.apply(namespace("solo"))
        await system.apply(quota("small", 0, 1, namespace="solo"), quota("big", 0, 8, namespace="solo"))
        await system.apply(pytorch_job("wide", namespace="solo", quota_name="small", workers=1),  # 2 GPUs > 1
                           pytorch_job("runner", namespace="solo", quota_name="big", workers=0, priority=1))
        await system.wait_phase("runner-py-qu", c.Phase.RUNNING, namespace="solo")
        assert "quota small" in await message_of(system, "wide", "solo")
        await system.akubectl("label", "queueunit", "wide-py-qu", "-n", "solo", f"{c.LABEL_QUOTA_NAME}=big",
                              "--overwrite")
        await system.akubectl("label", "queueunit", "runner-py-qu", "-n", "solo", f"{c.LABEL_PREEMPTIBLE}=false")

        async def labels_back() -> bool:
            wide = (await system.unit("wide-py-qu", "solo"))["metadata"]["labels"]
            runner = (await system.unit("runner-py-qu", "solo"))["metadata"]["labels"]
            return wide.get(c.LABEL_QUOTA_NAME) == "small" and c.LABEL_PREEMPTIBLE not in runner

        await system.wait_for(labels_back, what="the units' labels set from their jobs again")
        await system.akubectl("patch", "queueunit", "wide-py-qu", "-n", "solo", "--type", "merge",
                              "-p", '{"spec":{"queue":"big"}}')

        async def queue_back() -> bool:
            return "queue" not in (await system.unit("wide-py-qu", "solo"))["spec"]

        await system.wait_for(queue_back, what="the queue given by hand removed")
        assert (await system.unit("wide-py-qu", "solo"))["status"]["phase"] == c.Phase.ENQUEUED  # never moved
        reasons = [e["message"] for e in await system.events("wide-py-qu", "solo")
                   if e["reason"] == c.EventReason.SPEC_RESTORED]
        assert f"labels set from the job: {c.LABEL_QUOTA_NAME}=small (edit the job instead)" in reasons
        # The job's own label is what counts: relabelled, the job moves.
        await system.akubectl("label", "pytorchjob", "wide", "-n", "solo", f"{c.LABEL_QUOTA_NAME}=big", "--overwrite")
        await system.wait_phase("wide-py-qu", c.Phase.RUNNING, namespace="solo")
        # A job raising its own priority annotation while admitted: the unit follows (as in
        # Koord-Queue), the running job is not disturbed.
        await system.akubectl("annotate", "pytorchjob", "runner", "-n", "solo", f"{c.ANNOTATION_PRIORITY}=50",
                              "--overwrite")

        async def priority_followed() -> bool:
            return (await system.unit("runner-py-qu", "solo"))["spec"]["priority"] == 50

        await system.wait_for(priority_followed, what="the unit's priority to follow the job")
        assert await system.phase("runner-py-qu", "solo") == c.Phase.RUNNING
        job = await system.get_json("pytorchjob", "runner", "-n", "solo")
        assert c.ANNOTATION_SUSPEND not in job["metadata"].get("annotations", {})


async def test_units_edited_as_fast_as_the_api_goes_are_admitted_as_their_jobs_say(tmp_path: Path) -> None:
    """A tenant patches its waiting units' quota label, spec.queue and spec.priority over and
    over, against scheduling cycles (each patch wakes one), while its jobs name a full quota
    and a job of higher priority waits beside them. Every admission the API server ever
    records is the one the jobs say: into their own quota, the higher priority first. (The
    engine once took these fields from the unit: a cycle between an edit and its undoing
    admitted several units into the tenant's other quota, or ahead of the higher job.)"""
    async with running_system(tmp_path / "state") as system:
        admitted: list[tuple[str, str]] = []  # (unit, status.message) of every write that admits

        def record(event: Event) -> None:
            status = event.obj.get("status") or {}
            before = (event.old or {}).get("status") or {}
            if event.key == UNITS_KEY and event.namespace == "race" and \
                    status.get("phase") in HOLDING and before.get("phase") not in HOLDING:
                admitted.append((event.obj["metadata"]["name"], str(status.get("message"))))

        system.server.store.listeners.append(record)
        await system.apply(namespace("race"))
        await system.apply(quota("small", 0, 1, namespace="race"), quota("big", 0, 16, namespace="race"))
        await system.apply(pytorch_job("runner", namespace="race", quota_name="small", workers=0))
        await system.wait_phase("runner-py-qu", c.Phase.RUNNING, namespace="race")
        lows = [f"low-{i}" for i in range(12)]
        await system.apply(*[pytorch_job(j, namespace="race", quota_name="small", workers=0) for j in lows],
                           pytorch_job("high", namespace="race", quota_name="small", workers=0, priority=10))
        for job in [*lows, "high"]:
            assert "quota small" in await message_of(system, job, "race")
        edits: list[dict[str, object]] = [
            {"metadata": {"labels": {c.LABEL_QUOTA_NAME: "big"}}},
            {"spec": {"queue": "big"}},
            {"spec": {"priority": 1000}},
            {"metadata": {"labels": {c.LABEL_QUOTA_NAME: "big"}}, "spec": {"queue": "big", "priority": 1000}},
        ]

        async def edit(rounds: int) -> None:  # each round patches every low unit, one edit of the four
            for round_ in range(rounds):
                for job in lows:
                    await system.client.patch(UNITS, f"{job}-py-qu", edits[round_ % len(edits)], namespace="race")

        await edit(20)
        assert admitted == [("runner-py-qu", "admitted into quota small through queue koord-queue/small")]
        # The runner ends while the edits go on: its room is the higher job's, nobody else's.
        editing = asyncio.create_task(edit(20))
        await system.akubectl("delete", "pytorchjob", "runner", "-n", "race")

        async def next_admitted() -> bool:
            return len(admitted) > 1

        await system.wait_for(next_admitted, what="the runner's room to be given")
        await editing
        await asyncio.sleep(1.0)  # any cycle the last edits woke is over
        assert admitted == [("runner-py-qu", "admitted into quota small through queue koord-queue/small"),
                            ("high-py-qu", "admitted into quota small through queue koord-queue/small")]
        big = await system.get_json("elasticquota", "big", "-n", "race")
        assert big.get("status", {}).get("used", {}).get(c.GPU, "0") == "0"
        await system.wait_phase("high-py-qu", c.Phase.RUNNING, namespace="race")
