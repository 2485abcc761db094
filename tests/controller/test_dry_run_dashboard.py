"""The dashboard's "Will it run?" (POST /api/dry-run): the answer `koord-queue explain -f`
gives for the same manifest, from the leader's live state, nothing created; hostile text
refused with a message (controller/dryrun.py, api/safeyaml.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.controller.dryrun import MAX_MANIFEST_BYTES

from .conftest import SystemFactory, pytorch_job, quick_config, quota
from .test_forecast import cli, epoch, names

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" \
       "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nkind: PyTorchJob\nmetadata: {name: boom}\n"
# the times: the leader's engine has the admission to the microsecond, the CLI's snapshot the
# unit's lastAllocateTime (whole seconds); the words are relative to each one's now
TIMES = (c.EXPECTED_START_FIELD, c.EXPECTED_START_RANGE_FIELD, "startsAt", "rangeAt", "forecast")


async def post(port: int, body: str | bytes) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.post(
            f"http://127.0.0.1:{port}/api/dry-run", data=body, headers={"Content-Type": "application/yaml"}) as resp:
        return resp.status, await resp.json()


async def test_the_dashboards_dry_run_answers_as_explain_f_does_and_creates_nothing(
        start_system: SystemFactory, control_plane: str, tmp_path: Path) -> None:
    config = quick_config(forecast_interval_seconds=0, dashboard=True, dashboard_port=0)
    async with start_system(config=config) as system:
        await system.apply(quota("team-f", 2, 2))
        await system.apply(pytorch_job("first", gpus_per_pod=1, quota_name="team-f",
                                       annotations={c.ANNOTATION_EXPECTED_RUNTIME: "10m"}))
        await system.wait_phase("first-py-qu", c.Phase.RUNNING)
        await system.apply(pytorch_job("second", gpus_per_pod=1, quota_name="team-f",
                                       annotations={c.ANNOTATION_EXPECTED_RUNTIME: "20m"}))
        await system.wait_phase("second-py-qu", c.Phase.ENQUEUED)
        admitted_at = epoch((await system.unit("first-py-qu"))["status"]["lastAllocateTime"])
        assert system.manager.dashboard is not None
        port = system.manager.dashboard.port

        manifest = yaml.safe_dump(pytorch_job("fourth", gpus_per_pod=1, quota_name="team-f",
                                              annotations={c.ANNOTATION_EXPECTED_RUNTIME: "5m"}))
        path = tmp_path / "job.yaml"
        path.write_text(manifest)
        jobs_before, units_before = await names(system, "pytorchjobs"), await names(system, "queueunits")
        code, dry = await post(port, manifest)
        assert code == 200, dry
        out = await asyncio.to_thread(cli, system, "explain", "-f", str(path), "--json")
        assert out.returncode == 0, out.stderr
        told = json.loads(out.stdout)
        assert {k: v for k, v in dry.items() if k not in TIMES} == {k: v for k, v in told.items() if k not in TIMES}
        assert dry["dryRun"] and dry["couldEverFit"] and dry["unit"] == "default/fourth-py-qu"
        assert (dry["quota"], dry["queue"], dry["position"]) == ("team-f", "koord-queue/team-f", 2)
        # after second (20 min), which starts when first (10 min) ends
        for answer in (dry, told):
            assert abs(epoch(answer[c.EXPECTED_START_FIELD]) - (admitted_at + 1800)) <= 2
            assert [abs(epoch(t) - e) <= 2 for t, e in zip(answer[c.EXPECTED_START_RANGE_FIELD],
                                                         (admitted_at + 900, admitted_at + 3600), strict=True)] == [True] * 2
            assert abs(answer["startsAt"] - (admitted_at + 1800)) <= 2
            assert answer["basis"] == c.BASIS_ANNOTATION
            assert answer["forecast"].startswith("expected to start in about ")

        code, never = await post(port, yaml.safe_dump(pytorch_job("huge", gpus_per_pod=4, quota_name="team-f")))
        assert code == 200 and never["couldEverFit"] is False and never[c.EXPECTED_START_FIELD] is None

        # Hostile or wrong text: 400 (413 over the cap) with the reason in words.
        two = manifest + "---\n" + manifest
        refused = {
            "not: [yaml": "the manifest: not readable YAML",
            BOMB: "anchors and aliases (&name, *name) are not accepted",
            two: "give one job (found 2 documents)",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n": "kind 'ConfigMap' is not a job kind we queue",
            "kind: PyTorchJob\nmetadata: {}\n": "the job has no metadata.name",
            "[" * 200 + "]" * 200: "nested more than",
            "- 1\n- 2\n": "give one job (a mapping",
        }
        for text, why in refused.items():
            code, answer = await post(port, text)
            assert code == 400 and why in answer["message"], (text[:40], code, answer)
        code, answer = await post(port, "#" * (MAX_MANIFEST_BYTES + 1))
        assert code == 413 and str(MAX_MANIFEST_BYTES) in answer["message"]
        code, answer = await post(port, yaml.safe_dump(pytorch_job("second", gpus_per_pod=1, quota_name="team-f")))
        assert code == 400 and "a QueueUnit default/second-py-qu exists already" in answer["message"]

        assert (await names(system, "pytorchjobs"), await names(system, "queueunits")) == (jobs_before, units_before)
        assert await system.phase("second-py-qu") == c.Phase.ENQUEUED  # the live engine untouched


async def test_at_most_max_dry_runs_run_at_once_and_one_more_is_told_to_come_back() -> None:
    """Each dry run clones the engine and plays the forecast: a few at once, the next one 429."""
    from koordqueue.controller.dashboard import MAX_DRY_RUNS, Dashboard

    release, started = asyncio.Event(), asyncio.Queue[str]()

    class Leader:
        sync_done = True

        async def dry_run(self, obj: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
            await started.put(where)
            await release.wait()
            return {"unit": where}

    dashboard = Dashboard(lambda: Leader(), "127.0.0.1", 0)  # type: ignore[arg-type,return-value]
    await dashboard.start()
    try:
        manifest = yaml.safe_dump(pytorch_job("fourth"))
        slow = [asyncio.create_task(post(dashboard.port, manifest)) for _ in range(MAX_DRY_RUNS)]
        for _ in range(MAX_DRY_RUNS):
            await asyncio.wait_for(started.get(), 10)
        code, busy = await post(dashboard.port, manifest)
        assert code == 429 and f"{MAX_DRY_RUNS} dry runs are under way" in busy["message"]
        release.set()
        assert [await task for task in slow] == [(200, {"unit": "PyTorchJob/default/fourth"})] * MAX_DRY_RUNS
        assert (await post(dashboard.port, manifest))[0] == 200  # the places are given back
    finally:
        await dashboard.stop()


async def test_a_dry_run_in_the_second_a_waiting_job_was_created_stands_behind_it(
        start_system: SystemFactory, control_plane: str) -> None:
    """Creation times are whole seconds and the next tie-break is the name: a dry run of
    "fourth" in the second "second" was created in once stood ahead of it (CI, kube)."""
    from koordqueue.controller.dryrun import dry_run
    from koordqueue.controller.forecaster import RuntimeBook
    from koordqueue.controller.loading import take_snapshot

    async with start_system(config=quick_config(forecast_interval_seconds=0)) as system:
        await system.apply(quota("team-f", 2, 2))
        await system.apply(pytorch_job("first", gpus_per_pod=1, quota_name="team-f"))
        await system.wait_phase("first-py-qu", c.Phase.RUNNING)
        await system.apply(pytorch_job("second", gpus_per_pod=1, quota_name="team-f"))
        await system.wait_phase("second-py-qu", c.Phase.ENQUEUED)
        snap = await take_snapshot(system.client)
        same_second = snap.units["default/second-py-qu"].created
        why = dry_run(snap, pytorch_job("fourth", gpus_per_pod=1, quota_name="team-f"), "PyTorchJob", same_second,
                      RuntimeBook(snap.settings.default_expected_runtime), snap.job_runtimes.get, "job.yaml")
        assert (why["unit"], why["position"]) == ("default/fourth-py-qu", 2)
