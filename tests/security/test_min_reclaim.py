"""Issue 29's second and third promises under attack: every team gets its min back within the
protect time plus a bound, and the controller keeps admitting, while a tenant tries every way
it has to keep what it borrowed, its attacks sent while admission cycles run.

The tenant (`att`, quota q-att: min 4 of a pool of 16) holds its min with non-preemptible
jobs and borrows the rest of the pool with jobs of the highest priority there is. Then, all
at once: the lender (`vic`, q-vic: min 12, all the tenant borrowed) asks for its min; a team outside the pool (`new`,
q-new) submits a fresh job; and the tenant sends more top-priority borrowers, grows a running
job, turns a queued job's suspension off, and marks a borrower non-preemptible. The lender
is admitted within PROTECT + BOUND, the fresh job within BOUND; the tenant keeps its min (its
non-preemptible jobs are never taken); no quota's bound pods ever ask more than its max, from
the first sample (and in the audit log, on the real control plane).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.meta import INT32_MAX
from tests.controller.conftest import SystemFactory, pytorch_job, quick_config, quota

from .conftest import GpuSampler, refused, tenant

pytestmark = [pytest.mark.timeout(300), pytest.mark.both_control_planes]

PROTECT = 5.0  # seconds a borrower admitted keeps its room (the controller's --protect-seconds)
BOUND = 40.0  # seconds past it by which a min is back (preemption, the pods' going and coming)
NON_PREEMPTIBLE = {c.LABEL_PREEMPTIBLE: c.FALSE}


def job(name: str, namespace: str, quota_name: str, gpus: int, workers: int = 0, **kwargs: Any) -> dict[str, Any]:
    return pytorch_job(name, gpus_per_pod=gpus, workers=workers, namespace=namespace, quota_name=quota_name,
                       **kwargs)


async def test_every_min_comes_back_and_admission_goes_on_while_a_tenant_attacks(
        start_system: SystemFactory) -> None:
    async with start_system(config=quick_config(protect_seconds=PROTECT)) as system:
        att, vic, new = [await tenant(system, space) for space in ("att", "vic", "new")]
        await system.apply(quota("pool", 16, 16, is_parent=True),
                           quota("q-att", 4, 16, namespace="att", parent="pool"),
                           quota("q-vic", 12, 16, namespace="vic", parent="pool"),
                           quota("q-new", 4, 4, namespace="new"))
        # Its min held non-preemptibly (Master + Worker, 1 GPU each), the rest of the pool borrowed.
        await att.apply(*[job(f"np-{i}", "att", "q-att", 1, workers=1, labels=NON_PREEMPTIBLE) for i in (1, 2)])
        await att.apply(*[job(f"top-{i}", "att", "q-att", 4, priority=INT32_MAX) for i in (1, 2, 3)])
        for name in ("np-1", "np-2", "top-1", "top-2", "top-3"):
            await system.wait_phase(f"{name}-py-qu", c.Phase.RUNNING, namespace="att", timeout=60)
        await att.apply(job("queued", "att", "q-att", 4, priority=INT32_MAX))
        await system.wait_phase("queued-py-qu", c.Phase.ENQUEUED, namespace="att")

        async with GpuSampler(system, [("att", "q-att"), ("vic", "q-vic"), ("new", "q-new")]) as sampler:
            started = sampler.now()
            attacks = await asyncio.gather(
                vic.apply(*[job(f"mine-{i}", "vic", "q-vic", 4) for i in (1, 2, 3)]),
                new.apply(job("fresh", "new", "q-new", 4)),
                att.apply(*[job(f"more-{i}", "att", "q-att", 4, priority=INT32_MAX) for i in (1, 2)]),
                att.try_patch("pytorchjob", "np-1", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 5}}}}),
                att.try_patch("pytorchjob", "queued", {"spec": {"runPolicy": {"suspend": False}}}),
                att.akubectl("label", "pytorchjob", "top-1", f"{c.LABEL_PREEMPTIBLE}={c.FALSE}", "--overwrite"),
            )
            grow, unsuspend = attacks[3], attacks[4]
            assert refused(grow) and "a running job may shrink but not grow" in grow, grow
            assert refused(unsuspend) and "att/queued is queued" in unsuspend, unsuspend

            async def phases(space: str, *names: str) -> list[str]:
                return [await system.phase(f"{name}-py-qu", space) for name in names]

            async def fresh_runs() -> bool:
                return await phases("new", "fresh") == [c.Phase.RUNNING]

            await system.wait_for(fresh_runs, BOUND, "the fresh job in q-new admitted and running")

            async def min_back() -> bool:
                return await phases("vic", "mine-1", "mine-2", "mine-3") == [c.Phase.RUNNING] * 3

            await system.wait_for(min_back, PROTECT + BOUND - (sampler.now() - started),
                                  "q-vic's min back: its three jobs running")
            took = sampler.now() - started
            assert took <= PROTECT + BOUND, took
            # The tenant keeps its min: its non-preemptible jobs are never taken, whoever wants room.
            assert await phases("att", "np-1", "np-2") == [c.Phase.RUNNING] * 2
            np_1 = await system.get_json("pytorchjob", "np-1", "-n", "att")
            assert np_1["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
            assert await phases("att", "queued") != [c.Phase.RUNNING]

            async def lender_bound() -> bool:
                return (await sampler.sample()).gpus["q-vic"] == 12

            await system.wait_for(lender_bound, BOUND, "q-vic's 12 GPUs bound")
        sampler.assert_within_max()
        last = sampler.samples[-1]
        assert (last.charged["q-vic"], last.charged["q-new"], last.charged["q-att"]) == (12, 4, 4), last
