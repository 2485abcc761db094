"""The dashboard on `koord-queue up --example`, in real headless Chromium, driven as a person would.

The whole system runs in this process (the embedded API server, the simulated
cluster, the controller and its dashboard) exactly as `koord-queue up` starts it;
jobs are submitted and deleted with kubectl; the page is read, clicked and tabbed
through in Chromium. Screenshots go to test-artifacts/dashboard-*.png.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.async_api import Page, expect

from koordqueue.api import constants as c
from koordqueue.up import EXAMPLE, EXAMPLE_UNIT, run_up
from tests.dashboard.chromium import chromium_page, require_chromium, screenshot_path

pytestmark = pytest.mark.timeout(120)

QUOTA = "pytorch-team-a"
BIG_UNIT = "default/big-training-job-py-qu"
URGENT_UNIT = "default/urgent-training-job-py-qu"
WAIT = 15_000  # ms for the page to show a change (stream every 1 s, messages written every 1 s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def seed_job(name: str, gpus_per_pod: int, priority: int) -> dict[str, Any]:
    """The seed guide's PyTorchJob (Master + Worker), renamed, with more GPUs per pod."""
    job = copy.deepcopy(next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] == "PyTorchJob"))
    job["metadata"]["name"] = name
    job["metadata"]["annotations"][c.ANNOTATION_PRIORITY] = str(priority)
    for role in job["spec"]["pytorchReplicaSpecs"].values():
        resources = role["template"]["spec"]["containers"][0]["resources"]
        for side in ("requests", "limits"):
            resources[side][c.GPU] = str(gpus_per_pod)
    return job


async def run(*argv: str, stdin: str | None = None) -> str:
    """A command run without blocking the event loop the API server lives on."""
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 60)
    assert proc.returncode == 0, f"{' '.join(argv)}: {err.decode()}"
    return out.decode()


@contextlib.asynccontextmanager
async def koord_queue_up(state_dir: Path) -> AsyncIterator[tuple[str, Path]]:
    """`koord-queue up --example` in this process; yields the dashboard's URL and the kubeconfig."""
    port = free_port()
    ready, stop = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_up(state_dir, nodes=2, gpus_per_node=8, example=True,
                                      dashboard_port=port, ready=ready, stop=stop))
    try:
        done, _ = await asyncio.wait([task, asyncio.create_task(ready.wait())], timeout=60,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # it failed: raise why
        assert ready.is_set(), "koord-queue up did not become ready in 60 s"
        yield f"http://127.0.0.1:{port}/", state_dir / "kubeconfig"
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def unit_message(kubeconfig: Path, key: str) -> str:
    namespace, name = key.split("/")
    return await run("kubectl", "--kubeconfig", str(kubeconfig), "get", "queueunit", name, "-n", namespace,
                     "-o", "jsonpath={.status.message}")


async def tab_to(page: Page, selector: str, limit: int = 60) -> int:
    """Press Tab until the element matching ``selector`` has the focus; return how many presses."""
    for presses in range(1, limit + 1):
        await page.keyboard.press("Tab")
        if await page.evaluate("s => document.activeElement?.matches(s) ?? false", selector):
            return presses
    raise AssertionError(f"{selector} was not reached with {limit} presses of Tab")


async def test_dashboard_follows_a_job_from_the_queue_to_admission(tmp_path: Path) -> None:
    require_chromium()
    async with koord_queue_up(tmp_path / "state") as (url, kubeconfig), chromium_page() as (page, problems):
        kubectl = ("kubectl", "--kubeconfig", str(kubeconfig))
        await page.goto(url)

        # The seed's quota, with its GPU bar: the seed job uses 2 of max 8, min 2.
        gpu_bar = page.locator(f'article[data-quota="{QUOTA}"] .bar[data-resource="{c.GPU}"]')
        await expect(gpu_bar).to_have_attribute("aria-label", f"{QUOTA}, {c.GPU}: used 2, min 2, runtime share 2, max 8",
                                                timeout=WAIT)
        used_width = await gpu_bar.locator(".used").evaluate("e => e.getBoundingClientRect().width")
        track_width = await gpu_bar.evaluate("e => e.clientWidth")
        assert used_width / track_width == pytest.approx(2 / 8, abs=0.02)
        await expect(page.locator(f'#recent tr[data-what="admitted"][data-unit="{EXAMPLE_UNIT}"]')).to_have_count(
            1, timeout=WAIT)
        await page.screenshot(path=screenshot_path("dashboard-seed.png"), full_page=True)

        # A job asking 8 GPUs must wait (2 are used of max 8): it appears in the queue.
        await run(*kubectl, "apply", "-f", "-", stdin=yaml.safe_dump(seed_job("big-training-job", 4, 10)))
        big_row = page.locator(f'#queues tr[data-unit="{BIG_UNIT}"]')
        await expect(big_row).to_have_count(1, timeout=WAIT)
        await expect(big_row.locator("td").nth(0)).to_have_text("1")
        await expect(big_row.locator("td").nth(3)).to_have_text("10")
        await expect(big_row.locator("td.message")).to_contain_text(f"waiting for quota {QUOTA}", timeout=WAIT)
        # Its forecast (controller/forecaster.py, recomputed within seconds of a cycle): when the seed job ends,
        # after the default hour (no annotation, no history); range half to twice that. And the queue's timeline.
        await expect(big_row.locator("td.forecast")).to_have_text(
            re.compile(r"^in ~(59|60)m \((29|30)m–(2h|119m)\)$"), timeout=WAIT)
        await expect(page.locator(f'#queues figure.timeline .mark[data-unit="{BIG_UNIT}"]')).to_have_count(1)
        await expect(page.locator(f'#queues figure.timeline .run[data-unit="{EXAMPLE_UNIT}"]')).to_have_count(1)
        await page.screenshot(path=screenshot_path("dashboard-forecast.png"), full_page=True)

        # Every bar is labelled for those who cannot see it, every button has a name, one h1.
        bars = await page.locator(".bar").evaluate_all(
            "bars => bars.map(b => [b.getAttribute('role'), b.getAttribute('aria-label')])")
        assert len(bars) == 3  # the seed's quota: cpu, memory, GPU
        assert all(role == "img" and label.startswith(f"{QUOTA}, ") and "used " in label for role, label in bars)
        names = await page.locator("button").evaluate_all("bs => bs.map(b => b.textContent.trim())")
        assert len(names) >= 3 and all(names)  # the dialog's Close, the queued unit, the admitted one
        headings = await page.locator("h1, h2, h3").evaluate_all("hs => hs.map(h => h.tagName)")
        assert headings.count("H1") == 1 and headings[0] == "H1"

        # A more urgent one, also too big, goes ahead of it: the first one moves to position 2.
        await run(*kubectl, "apply", "-f", "-", stdin=yaml.safe_dump(seed_job("urgent-training-job", 4, 100)))
        await expect(page.locator(f'#queues tr[data-unit="{URGENT_UNIT}"] td').first).to_have_text("1", timeout=WAIT)
        await expect(big_row.locator("td").first).to_have_text("2", timeout=WAIT)

        # Reach the waiting unit with the keyboard alone and open its explanation.
        await tab_to(page, f'#queues button.unit[data-unit="{BIG_UNIT}"]')
        await page.keyboard.press("Enter")
        dialog = page.locator("dialog#explain")
        await expect(dialog).to_be_visible()
        why = dialog.locator("#explain-why")
        await expect(why).to_contain_text("waiting for quota", timeout=WAIT)
        # The reason is worked out now; the unit's status.message says the same once written (read both again
        # until equal).
        for _ in range(90):  # a written reason is at most ~45 s behind (docs/dashboard.md)
            shown, written = await why.inner_text(), await unit_message(kubeconfig, BIG_UNIT)
            if shown == written:
                break
            await asyncio.sleep(0.5)
        assert shown == written and written.startswith(f"waiting for quota {QUOTA}")
        # The page says what `koord-queue explain` says.
        cli = await run(str(Path(sys.executable).parent / "koord-queue"), "explain", "pytorchjob/big-training-job",
                        "--kubeconfig", str(kubeconfig))
        advice = await dialog.locator("#explain-advice li").all_inner_texts()
        # The urgent job ahead of it goes first: what it asks counts too.
        ahead = "8 for the 1 unit ahead of it in its queue"
        assert advice == [f"10 {c.GPU} freed in quota {QUOTA} (used 2 + {ahead} + asks 8 > max 8)",
                          f"2 {c.GPU} freed in the cluster (used 2 + {ahead} + asks 8 > capacity 16)"]
        assert f"    {advice[0]}" in cli.splitlines()
        assert f"  Why: {written}" in cli.splitlines()
        await expect(dialog).to_contain_text("position 2, priority 10")
        await page.screenshot(path=screenshot_path("dashboard-explain.png"))
        await page.keyboard.press("Escape")
        await expect(dialog).to_be_hidden()
        # Focus comes back to the button that opened it (the dialog's close event, which gives
        # it back, is a task queued after the dialog is hidden; a table re-drawn meanwhile
        # replaced that button, so the browser's own restore finds it gone).
        await expect(page.locator(f'#queues button.unit[data-unit="{BIG_UNIT}"]')).to_be_focused(timeout=WAIT)

        # The seed job ends: the urgent job takes all 8 GPUs, the first one moves up to position 1.
        await run(*kubectl, "delete", "pytorchjob", "pytorch-training-job", "-n", "default")
        await expect(page.locator(f'#recent tr[data-what="admitted"][data-unit="{URGENT_UNIT}"]')).to_have_count(
            1, timeout=WAIT)
        await expect(page.locator(f'#queues tr[data-unit="{URGENT_UNIT}"]')).to_have_count(0)
        await expect(big_row.locator("td").first).to_have_text("1", timeout=WAIT)
        await expect(gpu_bar).to_have_attribute("aria-label", f"{QUOTA}, {c.GPU}: used 8, min 2, runtime share 8, max 8",
                                                timeout=WAIT)
        await expect(big_row.locator("td.message")).to_contain_text("used 8 of max 8", timeout=WAIT)
        await page.screenshot(path=screenshot_path("dashboard-moved.png"), full_page=True)

        # The JSON the page draws is the controller's overview.
        overview = json.loads(await (await page.request.get(url + "api/overview")).text())
        queue = next(q for q in overview["queues"] if q["key"] == f"{c.SYSTEM_NAMESPACE}/{QUOTA}")
        assert [item["unit"] for item in queue["pending"]] == [BIG_UNIT]
        assert problems == []



async def test_will_it_run_answers_for_a_pasted_manifest_and_creates_nothing(tmp_path: Path) -> None:
    """The "Will it run?" panel: paste a job's YAML, ask, read the answer `koord-queue explain -f` gives."""
    require_chromium()
    async with koord_queue_up(tmp_path / "state") as (url, kubeconfig), chromium_page() as (page, problems):
        kubectl = ("kubectl", "--kubeconfig", str(kubeconfig))
        await page.goto(url)
        await expect(page.locator(f'#recent tr[data-what="admitted"][data-unit="{EXAMPLE_UNIT}"]')).to_have_count(
            1, timeout=WAIT)
        manifest = yaml.safe_dump(seed_job("big-training-job", 4, 10))  # 8 GPUs; the seed's 2 of max 8 are used
        path = tmp_path / "job.yaml"
        path.write_text(manifest)

        await page.get_by_label("Job manifest").fill(manifest)
        await page.get_by_role("button", name="Will it run?").click()
        result = page.locator("#dryrun-result")
        await expect(result.locator("#dryrun-head")).to_have_text(
            "If submitted now (nothing was created), PyTorchJob/default/big-training-job would get QueueUnit "
            f"{BIG_UNIT}. Could it ever fit: yes.", timeout=WAIT)
        # It starts when the seed job ends, after the default hour (no annotation, no history).
        await expect(result.locator("#dryrun-when")).to_have_text(
            re.compile(r"^expected to start in about (59|60) min \(between (29|30) and 1(19|20); runtimes from "
                       r"default\): 1 job ahead of it ends by then$"))
        start = await result.locator("#dryrun-start").inner_text()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(between \S+Z to \S+Z\)", start), start
        await page.screenshot(path=screenshot_path("dashboard-dry-run.png"), full_page=True)

        # The page's answer is the CLI's, and nothing was created.
        cli = json.loads(await run(str(Path(sys.executable).parent / "koord-queue"), "explain", "-f", str(path),
                                   "--json", "--kubeconfig", str(kubeconfig)))
        assert start.startswith(cli[c.EXPECTED_START_FIELD][:16])  # (to the minute: each has its own now)
        assert await result.locator("#dryrun-advice li").all_inner_texts() == cli["advice"]
        jobs = await run(*kubectl, "get", "pytorchjobs,queueunits", "-A", "-o", "name")
        assert "big-training-job" not in jobs

        assert problems == []
        # A bad paste: the reason, in words (the browser logs the 400 itself, and nothing else).
        await page.get_by_label("Job manifest").fill("kind: ConfigMap\nmetadata: {name: x}\n")
        await page.get_by_role("button", name="Will it run?").click()
        await expect(result.locator("#dryrun-error")).to_contain_text("'ConfigMap' is not a job kind we queue",
                                                                      timeout=WAIT)
        assert len(problems) == 1 and "status of 400" in problems[0] and "/api/dry-run" in problems[0], problems
