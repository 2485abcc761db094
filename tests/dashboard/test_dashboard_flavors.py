"""The dashboard says, for a unit waiting in a quota with GPU flavors, which flavors were
tried, in order, and why each refused it: the words `koord-queue explain` prints and the
unit's message holds (the engine's, one place for them). In real headless Chromium, on
`koord-queue up --example` (2 nodes of 8 GPUs), as tests/dashboard/test_dashboard_live.py."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import yaml
from playwright.async_api import expect

from koordqueue.api import constants as c
from tests.controller.conftest import pytorch_job, quota
from tests.dashboard.chromium import chromium_page, require_chromium, screenshot_path
from tests.dashboard.test_dashboard_live import WAIT, koord_queue_up, run, unit_message

pytestmark = pytest.mark.timeout(120)

PRODUCT = "nvidia.com/gpu.product"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
UNIT = "default/wide-py-qu"


async def test_the_explanation_lists_each_flavor_tried_and_its_refusal(tmp_path: Path) -> None:
    require_chromium()
    async with koord_queue_up(tmp_path / "state") as (url, kubeconfig), chromium_page() as (page, problems):
        kubectl = ("kubectl", "--kubeconfig", str(kubeconfig))
        nodes = yaml.safe_load(await run(*kubectl, "get", "nodes", "-o", "yaml"))["items"]
        gpu_nodes = sorted(n["metadata"]["name"] for n in nodes if n["status"]["allocatable"].get(c.GPU))
        await run(*kubectl, "label", "node", gpu_nodes[0], f"{PRODUCT}={H100}")
        await run(*kubectl, "label", "node", gpu_nodes[1], f"{PRODUCT}={A100}")
        team = [
            quota("team", 6, 6, is_parent=True, annotations={c.ANNOTATION_FLAVOR_ORDER: "team-h100,team-a100"}),
            quota("team-h100", 2, 2, parent="team", annotations={c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={H100}"}),
            quota("team-a100", 4, 4, parent="team", annotations={c.ANNOTATION_NODE_SELECTOR: f"{PRODUCT}={A100}"}),
        ]
        first = pytorch_job("first", gpus_per_pod=1, workers=1, quota_name="team-a100")  # 2 of A100's 4
        await run(*kubectl, "apply", "-f", "-", stdin=yaml.safe_dump_all([*team, first]))
        await run(*kubectl, "wait", "queueunit/first-py-qu", "--for=jsonpath={.status.phase}=Running", "--timeout=30s")
        # 4 GPUs: more than H100's max, more than A100 has left.
        await run(*kubectl, "apply", "-f", "-", stdin=yaml.safe_dump(pytorch_job("wide", gpus_per_pod=2, workers=1,
                                                                                  quota_name="team")))
        await page.goto(url)
        button = page.locator(f'#queues button.unit[data-unit="{UNIT}"]')
        await expect(button).to_have_count(1, timeout=WAIT)
        await button.click()
        dialog = page.locator("dialog#explain")
        await expect(dialog).to_be_visible()
        tried = dialog.locator("#explain-flavors li")
        await expect(tried).to_have_count(2, timeout=WAIT)
        await expect(tried.nth(0)).to_have_attribute("data-flavor", "team-h100")
        await expect(tried.nth(1)).to_have_attribute("data-flavor", "team-a100")
        shown = await tried.all_inner_texts()
        assert shown == [
            f"team-h100 ({PRODUCT}={H100}): can never fit quota team-h100: {c.GPU} asks 4, more than its max 2",
            f"team-a100 ({PRODUCT}={A100}): waiting for quota team-a100: {c.GPU} asks 4, used 2 of max 4"], shown
        # Each refusal is the words of the unit's message, flavor by flavor, and what the CLI prints. The page
        # works the reasons out now; the message is written after (read it again until it holds them).
        refusals = [line.split(": ", 1)[1] for line in shown]
        for _ in range(90):  # a written reason is at most ~45 s behind (docs/dashboard.md)
            message = await unit_message(kubeconfig, UNIT)
            if all(refusal in message for refusal in refusals):
                break
            await asyncio.sleep(0.5)
        for line in shown:
            assert line.split(": ", 1)[1] in message, (line, message)
        cli = await run(str(Path(sys.executable).parent / "koord-queue"), "explain", "pytorchjob/wide",
                        "--kubeconfig", str(kubeconfig))
        assert [f"    {line}" for line in shown] == [
            line for line in cli.splitlines() if line.startswith(("    team-h100 ", "    team-a100 "))], cli
        await page.screenshot(path=screenshot_path("dashboard-flavors.png"))
        assert problems == []
