"""The start-time forecast where users meet it (controller/forecaster.py): the QueueUnit's
status.expectedStart and its EXPECTED-START column, written only when it moves materially;
`koord-queue explain` (text and --json) and `explain -f job.yaml`, which creates nothing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.controller.forecaster import material

from .conftest import System, SystemFactory, pytorch_job, quick_config, quota

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]


def cli(system: System, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "koordqueue.cli", *args, "--kubeconfig",
                           str(system.server.kubeconfig_path)], capture_output=True, text=True, timeout=60)


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def names(system: System, what: str) -> list[str]:
    listed = await system.get_json(what, "-A")
    return sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in listed["items"])


async def test_a_waiting_job_is_told_when_it_starts_without_a_write_storm_and_dry_runs_create_nothing(
        start_system: SystemFactory, control_plane: str, tmp_path: Path) -> None:
    async with start_system(config=quick_config(forecast_interval_seconds=0)) as system:  # (refreshed by hand only)
        controller = system.controller
        await system.apply(quota("team-f", 2, 2))
        await system.apply(pytorch_job("first", gpus_per_pod=1, quota_name="team-f",
                                       annotations={c.ANNOTATION_EXPECTED_RUNTIME: "10m"}))
        await system.wait_phase("first-py-qu", c.Phase.RUNNING)
        await system.apply(pytorch_job("second", gpus_per_pod=1, quota_name="team-f",
                                       annotations={c.ANNOTATION_EXPECTED_RUNTIME: "20m"}),
                           pytorch_job("third", gpus_per_pod=1, quota_name="team-f",
                                       annotations={c.ANNOTATION_EXPECTED_RUNTIME: "soon"}))

        async def both_waiting() -> bool:
            return [await system.phase(n) for n in ("second-py-qu", "third-py-qu")] == [c.Phase.ENQUEUED] * 2

        await system.wait_for(both_waiting, what="second and third waiting")
        first = await system.unit("first-py-qu")
        admitted_at = epoch(first["status"]["lastAllocateTime"])

        await controller.forecaster.refresh()
        writes = controller.forecaster.writes
        assert writes == 2  # one each

        async def written() -> dict[str, object]:
            status = (await system.unit("second-py-qu")).get("status", {})
            return status if c.EXPECTED_START_FIELD in status else {}

        status = await system.wait_for(written, what="second's expectedStart written")
        # second starts when first ends: 10 min after first's admission (lastAllocateTime: whole seconds)
        assert abs(epoch(str(status[c.EXPECTED_START_FIELD])) - (admitted_at + 600)) <= 2
        low, high = (epoch(t) for t in status[c.EXPECTED_START_RANGE_FIELD])  # type: ignore[attr-defined]
        assert abs(low - (admitted_at + 300)) <= 2 and abs(high - (admitted_at + 1200)) <= 2
        assert status[c.FORECAST_BASIS_FIELD] == c.BASIS_ANNOTATION
        table = await system.akubectl("get", "queueunit", "second-py-qu")
        assert "EXPECTED-START" in table.splitlines()[0] and str(status[c.EXPECTED_START_FIELD]) in table

        # Recomputed again and again with nothing changed: nothing more is written.
        for _ in range(5):
            await controller.forecaster.refresh()
        assert controller.forecaster.writes == writes

        # explain: in words, and as JSON. third's bad annotation is ignored, with a note.
        text = await asyncio.to_thread(cli, system, "explain", "pytorchjob/second")
        assert text.returncode == 0, text.stderr
        when = next(line for line in text.stdout.splitlines() if line.startswith("  When: "))
        assert when.startswith("  When: expected to start in about ") and \
            when.endswith(" and 20; runtimes from annotation): 1 job ahead of it ends by then"), when
        as_json = await asyncio.to_thread(cli, system, "explain", "pytorchjob/second", "--json")
        why = json.loads(as_json.stdout)
        assert why["basis"] == c.BASIS_ANNOTATION and len(why[c.EXPECTED_START_RANGE_FIELD]) == 2
        assert abs(epoch(why[c.EXPECTED_START_FIELD]) - (admitted_at + 600)) <= 2
        third = await asyncio.to_thread(cli, system, "explain", "pytorchjob/third")
        assert f"  Note: annotation {c.ANNOTATION_EXPECTED_RUNTIME} ignored: 'soon' is not a duration" \
            in third.stdout
        # ... on its unit, and in an event on its job
        note = (await system.unit("third-py-qu"))["status"][c.FORECAST_NOTE_FIELD]
        assert note.startswith(f"annotation {c.ANNOTATION_EXPECTED_RUNTIME} ignored: 'soon' is not a duration")

        async def warned() -> bool:
            events = await system.events("third")
            return any(e["reason"] == c.EventReason.INVALID_EXPECTED_RUNTIME and e["message"] == note for e in events)

        await system.wait_for(warned, what="an InvalidExpectedRuntime event on the job")
        # third waits for second (20 min) after first: 30 min after first's admission
        assert abs(epoch(json.loads((await asyncio.to_thread(
            cli, system, "explain", "pytorchjob/third", "--json")).stdout)[c.EXPECTED_START_FIELD])
            - (admitted_at + 1800)) <= 2

        # A job not submitted yet: what it would meet, and nothing is created.
        jobs_before, units_before = await names(system, "pytorchjobs"), await names(system, "queueunits")
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(pytorch_job("fourth", gpus_per_pod=1, quota_name="team-f", annotations={
            c.ANNOTATION_EXPECTED_RUNTIME: "5m"})))
        dry = await asyncio.to_thread(cli, system, "explain", "-f", str(path))
        assert dry.returncode == 0, dry.stderr
        lines = dry.stdout.splitlines()
        assert lines[0] == ("If submitted now (nothing was created), PyTorchJob/default/fourth would get QueueUnit "
                            "default/fourth-py-qu.")
        assert lines[1] == "  Could it ever fit: yes"
        assert "  Queue: koord-queue/team-f, quota team-f, position 3, priority 0" in lines
        assert any(line.startswith("  When: expected to start in about") for line in lines)
        dry_json = json.loads((await asyncio.to_thread(cli, system, "explain", "-f", str(path), "--json")).stdout)
        assert dry_json["dryRun"] and dry_json["position"] == 3
        # after third, which runs the default hour (its annotation ignored)
        assert abs(epoch(dry_json[c.EXPECTED_START_FIELD]) - (admitted_at + 1800 + 3600)) <= 2
        path.write_text(yaml.safe_dump(pytorch_job("huge", gpus_per_pod=4, quota_name="team-f")))
        never = json.loads((await asyncio.to_thread(cli, system, "explain", "-f", str(path), "--json")).stdout)
        assert never["couldEverFit"] is False and never[c.EXPECTED_START_FIELD] is None
        assert never["basis"] == c.BASIS_NEVER
        assert (await names(system, "pytorchjobs"), await names(system, "queueunits")) == (jobs_before, units_before)

        # first ends early (deleted): second is admitted, and its forecast leaves its status.
        await system.akubectl("delete", "pytorchjob", "first", "--wait=false")
        await system.wait_phase("second-py-qu", c.Phase.RUNNING, timeout=60)

        async def cleared() -> bool:
            return c.EXPECTED_START_FIELD not in (await system.unit("second-py-qu")).get("status", {})

        await system.wait_for(cleared, what="second's forecast cleared at its admission")
        await controller.forecaster.refresh()  # third: now due when second ends, 20 min from its admission
        second = await system.unit("second-py-qu")
        start = epoch(second["status"]["lastAllocateTime"]) + 1200

        async def moved() -> bool:
            status = (await system.unit("third-py-qu")).get("status", {})
            return c.EXPECTED_START_FIELD in status and abs(epoch(status[c.EXPECTED_START_FIELD]) - start) <= 2

        await system.wait_for(moved, what="third's forecast moved up once first ended early")
        assert control_plane in ("embedded", "kube")


def test_a_forecast_is_written_again_only_when_it_moves_materially() -> None:
    now = 1000.0
    assert material(None, 2000.0, now) and material(2000.0, None, now)
    assert not material(None, None, now)
    assert not material(2000.0, 2050.0, now)  # under a minute
    assert not material(now + 7200, now + 7200 + 600, now)  # 10 min of 2 h: under 10 %
    assert material(now + 7200, now + 7200 + 900, now)  # 15 min of 2 h


async def test_what_a_job_took_is_the_history_of_the_jobs_named_like_it(system: System) -> None:
    """A job that succeeds leaves its runtime (admission to end) under its quota and name
    pattern: the next job of that pattern is forecast with it (basis history)."""
    await system.apply(quota("team-h", 2, 2))
    await system.apply(pytorch_job("nightly-101", quota_name="team-h", duration=2))
    await system.wait_phase("nightly-101-py-qu", c.Phase.SUCCEED, timeout=60)
    book = system.controller.shared.runtimes

    async def recorded() -> float | None:
        return book.history("team-h", "nightly-102")

    took = await system.wait_for(recorded, what="the run recorded")
    assert 2 <= took < 30
    estimate = book.estimate("team-h", "nightly-7f3a9", None, None)
    assert (estimate.seconds, estimate.basis) == (took, c.BASIS_HISTORY)


def test_explain_f_refuses_what_is_not_one_job_before_asking_the_cluster(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from koordqueue.cli import main

    cases = {
        "two.yaml": "kind: PyTorchJob\nmetadata: {name: a}\n---\nkind: PyTorchJob\nmetadata: {name: b}\n",
        "pod.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
        "noname.yaml": "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {}\n",
        "broken.yaml": "kind: [\n",
    }
    said = {}
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        result = CliRunner().invoke(main, ["explain", "-f", str(path), "--kubeconfig", str(tmp_path / "none")])
        assert result.exit_code == 1, result.output
        said[name] = result.output
    assert "give one job (found 2 documents)" in said["two.yaml"]
    assert "kind 'Pod' is not a job kind we queue" in said["pod.yaml"]
    assert "the job has no metadata.name" in said["noname.yaml"]
    assert said["broken.yaml"].startswith("Error: ")
    usage = CliRunner().invoke(main, ["explain"])
    assert usage.exit_code == 2 and "give KIND/NAME, or -f job.yaml" in usage.output
