"""The dashboard of a replica that does not lead: it says so, and shows no numbers.

No cluster is needed: a Dashboard whose replica holds no controller is exactly what
a follower serves. The same page also carries the quantity formatting, checked here
against the CLI's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from playwright.async_api import expect

from koordqueue.api.quantity import format_quantity
from koordqueue.controller.dashboard import Dashboard
from tests.dashboard.chromium import chromium_page, require_chromium, screenshot_path

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def follower() -> AsyncIterator[str]:
    dashboard = Dashboard(lambda: None, "127.0.0.1", 0, identity="replica-b")
    await dashboard.start()
    try:
        yield f"http://127.0.0.1:{dashboard.port}/"
    finally:
        await dashboard.stop()


async def test_api_answers_503_with_the_reason(follower: str) -> None:
    async with aiohttp.ClientSession() as session:
        for path in ("api/overview", "api/explain/default/some-unit"):
            async with session.get(follower + path) as response:
                assert response.status == 503
                body = await response.json()
                assert body["error"] == "unavailable"
                assert "replica (replica-b) is not the leader" in body["message"]
        async with session.get(follower + "api/stream") as response:
            assert response.status == 200 and response.content_type == "text/event-stream"
            first = await response.content.readuntil(b"\n\n")
            assert first.startswith(b"event: unavailable\ndata: {")
            assert b"is not the leader" in first


async def test_static_files_are_served_and_nothing_else(follower: str) -> None:
    async with aiohttp.ClientSession() as session:
        for path, kind in (("", "text/html"), ("static/dashboard.js", "text/javascript"),
                           ("static/dashboard.css", "text/css")):
            async with session.get(follower + path) as response:
                assert response.status == 200 and response.content_type == kind, path
        for path in ("static/..%2Fdashboard.py", "static/missing.js", "static/index.py"):
            async with session.get(follower + path) as response:
                assert response.status == 404, path


async def test_page_says_it_is_not_the_leader_and_hides_the_data(follower: str) -> None:
    require_chromium()
    async with chromium_page() as (page, problems):
        await page.goto(follower)
        notice = page.locator("#unavailable")
        await expect(notice).to_be_visible()
        await expect(notice).to_contain_text("(replica-b) is not the leader")
        await expect(page.locator("main#content")).to_be_hidden()
        await expect(page.locator("#connection")).to_have_text("Not available: see the notice below.")
        await page.screenshot(path=screenshot_path("dashboard-follower.png"))
        assert problems == []


MILLI_AMOUNTS = [0, 1, 500, 1500, 1000, 8000, 100_000, 1_000_000, 1024_000, 4_000_000, 2048 * 1000 + 1,
                 200 * 2**30 * 1000, 40 * 2**30 * 1000, 2**40 * 1000, 10**12 * 1000, 1536 * 2**20 * 1000, -3000, -250]


async def test_page_writes_quantities_as_the_cli_does(follower: str) -> None:
    require_chromium()
    async with chromium_page() as (page, problems):
        await page.goto(follower)
        shown = await page.evaluate("amounts => amounts.map(a => window.koordQueue.formatQuantity(a))", MILLI_AMOUNTS)
        assert shown == [format_quantity(amount) for amount in MILLI_AMOUNTS]
        assert problems == []
