"""What a person sees besides kubectl: `koord-queue status`, `koord-queue explain`,
the Queue's positions and the Prometheus metrics."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from koordqueue.api import constants as c
from koordqueue.controller.overview import mode_text
from koordqueue.reports import explain_text, status_text

from .conftest import System, SystemFactory, pytorch_job, quick_config, quota

pytestmark = pytest.mark.timeout(120)


def cli(system: System, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "koordqueue.cli", *args, "--kubeconfig",
                           str(system.server.kubeconfig_path)], capture_output=True, text=True, timeout=60)


async def waiting_setup(system: System) -> None:
    """team-s (max 4 GPUs, Block): one job runs with 2, a 4-GPU one waits, a 1-GPU one waits behind it."""
    await system.apply(quota("team-s", 2, 4, policy="Block"))
    await system.apply(pytorch_job("running", gpus_per_pod=1, priority=5, quota_name="team-s"))
    await system.wait_phase("running-py-qu", c.Phase.RUNNING)
    await system.apply(pytorch_job("big", gpus_per_pod=2, priority=4, quota_name="team-s"),
                       pytorch_job("small", gpus_per_pod=1, workers=0, priority=3, quota_name="team-s"))

    async def both_told() -> bool:
        big = (await system.unit("big-py-qu")).get("status", {}).get("message", "")
        small = (await system.unit("small-py-qu")).get("status", {}).get("message", "")
        return "asks 4" in big and "blocked behind" in small

    await system.wait_for(both_told, what="both waiting units told why")


async def test_status_and_explain_say_why_a_job_waits_and_what_would_let_it_in(system: System) -> None:
    await waiting_setup(system)
    status = await asyncio.to_thread(cli, system, "status")
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    gpu_row = next(line.split() for line in lines if line.startswith("team-s"))
    assert gpu_row[:3] == ["team-s", "-", "Block"]
    assert next(line.split() for line in lines if "nvidia.com/gpu" in line)[-4:] == ["2", "2", "4", "4"]  # runtime: used + pending, up to max
    assert "koord-queue/team-s (quota team-s): 2 pending" in status.stdout
    # The forecast (no runtime annotation, no history: the default hour each): big when running ends, small after big.
    assert "    1. default/big-py-qu  priority 4  [starts ~60m]  waiting for quota team-s: nvidia.com/gpu asks 4, " \
        "used 2 of max 4" in status.stdout
    assert "    2. default/small-py-qu  priority 3  [starts ~120m]  blocked behind default/big-py-qu" in status.stdout

    explained = await asyncio.to_thread(cli, system, "explain", "pytorchjob/big")
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.splitlines() == [
        "PyTorchJob/default/big (QueueUnit default/big-py-qu): Enqueued",
        "  Why: waiting for quota team-s: nvidia.com/gpu asks 4, used 2 of max 4",
        "  When: expected to start in about 60 min (between 30 and 120; runtimes from default): 1 job ahead of it "
        "ends by then",
        "  Queue: koord-queue/team-s, quota team-s, position 1, priority 4",
        "  Asks: cpu 2, memory 2Gi, nvidia.com/gpu 4",
        "  What would let it in:",
        "    2 nvidia.com/gpu freed in quota team-s (used 2 + asks 4 > max 4)",
        "",
        f"Settings: the controller's, from ConfigMap {c.SYSTEM_NAMESPACE}/{c.SETTINGS_CONFIG_MAP}. "
        "Koordinator mode off: a quota borrows past its runtime quota while the cluster has room.",
    ]
    small = await asyncio.to_thread(cli, system, "explain", "pytorchjob/small")
    assert "  Ahead of it:" in small.stdout and "default/big-py-qu (priority 4)" in small.stdout
    missing = await asyncio.to_thread(cli, system, "explain", "pytorchjob/nope")
    assert missing.returncode == 1 and "PyTorchJob default/nope not found" in missing.stderr
    bad = await asyncio.to_thread(cli, system, "explain", "sparkjob/x")
    assert bad.returncode == 1 and "give KIND/NAME" in bad.stderr


async def test_status_and_explain_answer_as_the_controller_with_its_settings(start_system: SystemFactory) -> None:
    """The controller runs with an oversell rate and a default policy of its own: `status`
    and `explain` load the objects with the settings it published, and say what its own
    views say (they once took the cluster for half its size and the quota for Priority)."""
    config = quick_config(oversell_rate=2.0, default_queue_policy=c.QueuePolicy.BLOCK,
                          default_expected_runtime_seconds=1800.0)  # (the forecast's: the commands use it too)
    async with start_system(config=config) as system:  # 4 nodes of 8 GPUs: 64 to share
        # No policy label: the controller's default, Block. Oversold: it admits past the nodes (node fit off),
        # and past its max: 20 x 2 = 40.
        await system.apply(quota("wide", 0, 20, annotations={c.ANNOTATION_NODE_FIT: c.FALSE}))
        await system.apply(pytorch_job("a", gpus_per_pod=8, workers=3))  # 32 GPUs: every node full
        await system.wait_phase("a-py-qu", c.Phase.RUNNING)
        await system.apply(pytorch_job("b", gpus_per_pod=8, workers=0, quota_name="wide"))  # 40 of 64
        await system.wait_phase("b-py-qu", c.Phase.DEQUEUED)
        await system.apply(pytorch_job("big", gpus_per_pod=8, quota_name="wide"),
                           pytorch_job("small", gpus_per_pod=1, workers=0, quota_name="wide"))

        async def both_told() -> bool:
            small = (await system.unit("small-py-qu")).get("status", {}).get("message", "")
            return "blocked behind default/big-py-qu (Block policy" in small

        await system.wait_for(both_told, what="small told it waits behind big")
        controller = system.controller
        published = (f"\n\nSettings: the controller's, from ConfigMap {c.SYSTEM_NAMESPACE}/{c.SETTINGS_CONFIG_MAP}. "
                     f"{mode_text(False)}.")

        async def same() -> tuple[str, str] | None:
            await controller.forecaster.refresh()  # (its forecast as the commands make theirs)
            status = await asyncio.to_thread(cli, system, "status")
            explained = await asyncio.to_thread(cli, system, "explain", "pytorchjob/big")
            ours = (status_text(controller.overview()) + published,
                    explain_text(controller.explain("default/big-py-qu")) + published)
            return None if (status.stdout.rstrip("\n"), explained.stdout.rstrip("\n")) != ours else ours

        status, explained = await system.wait_for(same, what="status and explain as the controller says")
        assert next(line.split() for line in status.splitlines() if line.startswith("wide"))[:3] == [
            "wide", "-", "Block"]
        assert "  What would let it in:\n    16 nvidia.com/gpu freed in quota wide (used 40 + asks 16 > max 20 x oversellrate = 40)" \
            in explained  # and nothing to free in the cluster: 40 + 16 of 64


async def test_a_waiting_units_message_is_told_its_reason_again_when_the_amounts_move(
        start_system: SystemFactory) -> None:
    """A unit told "used 2 of max 8" kept it while 4 were used (its queue was not looked at
    again); `explain` printed that line beside "used 4". Now explain works the reason out
    now, and the message is told again within the controller's reason refresh."""
    async with start_system(config=quick_config(reason_refresh_seconds=0.5)) as system:
        await system.apply(quota("team", 0, 8))
        await system.apply(pytorch_job("run", gpus_per_pod=2, workers=0, quota_name="team"))
        await system.wait_phase("run-py-qu", c.Phase.RUNNING)
        await system.apply(pytorch_job("big", gpus_per_pod=4, quota_name="team"))

        async def told(used: int) -> bool:
            message = (await system.unit("big-py-qu")).get("status", {}).get("message", "")
            return message == f"waiting for quota team: nvidia.com/gpu asks 8, used {used} of max 8"

        await system.wait_for(lambda: told(2), what="big told 2 are used")
        await system.apply(pytorch_job("mid", gpus_per_pod=2, workers=0, quota_name="team"))
        await system.wait_phase("mid-py-qu", c.Phase.RUNNING)
        explained = await asyncio.to_thread(cli, system, "explain", "pytorchjob/big")
        assert "  Why: waiting for quota team: nvidia.com/gpu asks 8, used 4 of max 8" in explained.stdout.splitlines()
        await system.wait_for(lambda: told(4), what="big told 4 are used")


async def test_the_queue_shows_positions_and_metrics_count_what_happened(system: System) -> None:
    await waiting_setup(system)

    async def positions() -> list[tuple[str, int]] | None:
        queue = await system.get_json("queue", "team-s", "-n", c.SYSTEM_NAMESPACE)
        active = queue.get("status", {}).get("queueItemDetails", {}).get("active", [])
        got = [(a["name"], a["position"]) for a in active]
        return got if got == [("big-py-qu", 1), ("small-py-qu", 2)] else None

    await system.wait_for(positions, what="the Queue's queueItemDetails")
    url = f"http://127.0.0.1:{system.manager.metrics_port}"
    async with aiohttp.ClientSession() as session:
        async def scraped() -> str | None:
            async with session.get(f"{url}/metrics") as response:
                text = await response.text()
            wanted = 'koord_queue_pending_units{queue="koord-queue/team-s"} 2.0'
            return text if wanted in text else None

        text = await system.wait_for(scraped, what="pending units in the metrics")
        assert 'koord_queue_admissions_total{queue="koord-queue/team-s",quota="team-s"} 1.0' in text
        assert 'koord_queue_quota{kind="max",quota="team-s",resource="nvidia.com/gpu"} 4.0' in text
        assert 'koord_queue_quota{kind="used",quota="team-s",resource="nvidia.com/gpu"} 2.0' in text
        assert 'koord_queue_admission_wait_seconds_count{queue="koord-queue/team-s"} 1.0' in text
        assert "koord_queue_scheduling_cycle_seconds_count" in text
        assert "koord_queue_leader 1.0" in text
        async with session.get(f"{url}/healthz") as response:
            assert response.status == 200
        async with session.get(f"{url}/readyz") as response:
            assert response.status == 200


async def test_status_sees_twin_quotas_and_units_without_jobs_as_the_controller_does(system: System) -> None:
    """Of two ElasticQuotas named alike the older is used, and a QueueUnit made by hand
    for no job holds nothing and jumps no queue: `status` reads them so too."""
    corpus = Path(__file__).parents[1] / "data" / "bad"
    await system.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bad-a"}},
                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bad-b"}})
    await system.apply(quota("bad-a-gpus", 2, 8, namespace="bad-a"))
    await system.akubectl("apply", "-f", str(corpus / "quota-same-name-as-another-namespaces.yaml"))
    await system.akubectl("apply", "-f", str(corpus / "unit-without-job.yaml"))
    await system.apply(pytorch_job("real", namespace="bad-a", gpus_per_pod=2, workers=0, quota_name="bad-a-gpus",
                                   duration=600))
    await system.wait_phase("real-py-qu", c.Phase.RUNNING, namespace="bad-a")

    async def told() -> bool:
        return "stands for no job" in (await system.unit("ghost-py-qu", "bad-a")).get("status", {}).get("message", "")

    await system.wait_for(told, what="the unit without a job told why it waits")
    status = await asyncio.to_thread(cli, system, "status")
    assert status.returncode == 0, status.stderr
    assert ("ElasticQuota bad-b/bad-a-gpus: the name is taken by the ElasticQuota in namespace bad-a "
            "(quota names are cluster-wide)") in status.stdout
    gpus = next(line.split() for line in status.stdout.splitlines() if "nvidia.com/gpu" in line)
    assert gpus[-4:] == ["2", "2", "2", "8"]  # bad-a's quota (min 2, max 8), used by the real job only
    assert "koord-queue/bad-a-gpus (quota bad-a-gpus): 0 pending" in status.stdout
    assert "ghost" not in status.stdout  # priority 1000, yet in no queue: it stands for no job
