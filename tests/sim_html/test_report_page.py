"""`koord-queue simulate --html` (and `--compare`), opened in headless Chromium.

The page must run without a console error and its plots must carry the numbers the
`--json` output gives: each job's wait, each quota's peak use, the end of the run,
and queue lengths that follow from the jobs' submission and admission times.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from koordqueue.api.quantity import parse_quantity
from tests.dashboard.chromium import chromium_page, require_chromium, screenshot_path

pytestmark = pytest.mark.timeout(90)

TRACES = Path(__file__).parents[2] / "examples" / "traces"
RECLAIM = TRACES / "borrow-and-reclaim.yaml"  # preemptions, nodes, three resources
BLOCK = TRACES / "block-vs-priority.yaml"  # two queues, long waits, no preemptions
KOORD_QUEUE = str(Path(sys.executable).parent / "koord-queue")


def simulate(*args: str) -> str:
    result = subprocess.run([KOORD_QUEUE, "simulate", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


async def series_of(page: Page, selector: str) -> dict[str, list[list[float]]]:
    return dict(await page.locator(f"{selector} path.series").evaluate_all(
        "paths => paths.map(p => [p.dataset.series, JSON.parse(p.dataset.points)])"))


async def check_run(page: Page, index: int, expected: dict[str, Any]) -> None:
    """The plots of run ``index`` say what ``expected`` (its --json output) says."""
    run = f'[data-run="{index}"]'
    waits = {f"{job['namespace']}/{job['name']}": job["admitted"] - job["submitted"]
             for job in expected["jobs"] if job["admitted"] is not None}
    assert waits
    for chart in ("waits-by-quota", "waits-by-priority"):
        dots = dict(await page.locator(f'figure[data-chart="{chart}"]{run} circle').evaluate_all(
            "dots => dots.map(d => [d.dataset.job, Number(d.dataset.wait)])"))
        assert dots.keys() == waits.keys(), chart
        for job, wait in waits.items():
            assert dots[job] == pytest.approx(wait, abs=1e-5), (chart, job)
    plotted = 0
    for quota, amounts in expected["quotas"].items():
        for resource, peak in amounts["peak_used"].items():
            if parse_quantity(peak) == 0:
                continue
            points = (await series_of(page, f'figure[data-chart="usage"][data-resource="{resource}"]{run}'))[quota]
            assert max(value for _, value in points) == parse_quantity(peak), (quota, resource)
            assert points[-1][0] == expected["end"]
            plotted += 1
    assert plotted
    embedded = json.loads(await page.locator("#report-data").text_content() or "null")
    assert embedded[index]["result"] == expected


async def test_report_and_comparison_carry_the_json_numbers(tmp_path: Path) -> None:
    require_chromium()
    report = tmp_path / "report.html"
    reclaim_json = simulate(str(RECLAIM), "--json")
    assert simulate(str(RECLAIM), "--json", "--html", str(report), "--compare", str(BLOCK)) == reclaim_json
    reclaim, block = json.loads(reclaim_json), json.loads(simulate(str(BLOCK), "--json"))
    assert not re.search(r'(src|href)="(?!#|data:)', report.read_text())  # nothing fetched: one file is all

    async with chromium_page(1400, 1000) as (page, problems):
        await page.goto(report.as_uri())
        await check_run(page, 0, reclaim)
        await check_run(page, 1, block)

        # Shared axes: both runs' plots span the longer run.
        assert set(await page.locator('figure[data-chart="usage"] svg.plot').evaluate_all(
            "svgs => svgs.map(s => s.dataset.xTop)")) == {"3600.0"}

        # Queue length of the run without preemptions: the jobs between submission and admission.
        queues = await series_of(page, 'figure[data-chart="queue-length"][data-run="1"]')
        assert set(queues) == {"koord-queue/block-team", "koord-queue/priority-team", "all queues"}
        for at, value in queues["all queues"]:
            assert value == sum(1 for job in block["jobs"] if job["submitted"] <= at
                                and (job["admitted"] is None or job["admitted"] > at)), at

        # Every plot is labelled: an image with a title and a description.
        labels = await page.locator("svg.plot").evaluate_all(
            "svgs => svgs.map(s => [s.getAttribute('role'), s.querySelector('title')?.textContent,"
            " s.querySelector('desc')?.textContent])")
        # usage of GPU, cpu and memory in the first run, of GPU alone in the second; two wait plots; queue
        # length; the room on the nodes of the first (the second has none)
        assert len(labels) == (3 + 2 + 1 + 1) + (1 + 2 + 1)
        room = await series_of(page, 'figure[data-chart="node-room"][data-run="0"]')
        assert {"most free on one node", "free on all nodes"} <= set(room)
        gpus = await series_of(page, 'figure[data-chart="usage"][data-resource="nvidia.com/gpu"][data-run="0"]')
        for at, value in room["free on all nodes"]:  # the 16 GPUs less what the teams' jobs hold
            assert value == 16_000 - sum([v for t, v in gpus[team] if t <= at][-1] for team in gpus), at
        await expect(page.locator('p[data-chart="usage"][data-run="1"]')).to_have_text(
            ["No quota of this run limits or uses cpu.", "No quota of this run limits or uses memory."])
        assert all(role == "img" and title and desc for role, title, desc in labels)

        # The keyboard reads the plot: Home shows t = 0 (team-a's 4 jobs of 2 GPUs), End the finish.
        gpu_plot = page.locator('figure[data-chart="usage"][data-resource="nvidia.com/gpu"][data-run="0"]')
        await gpu_plot.locator("svg.plot").focus()
        await page.keyboard.press("Home")
        await expect(gpu_plot.locator(".readout")).to_have_text("At 0.0 s: team-a 8, team-b 0")
        await page.keyboard.press("ArrowRight")
        await expect(gpu_plot.locator(".readout")).to_have_text("At 36.0 s: team-a 16, team-b 0")
        await page.keyboard.press("End")
        await expect(gpu_plot.locator(".readout")).to_have_text("At 1.00 h: team-a 0, team-b 0")
        await page.screenshot(path=screenshot_path("sim-report-compare.png"), full_page=True)
        assert problems == []
