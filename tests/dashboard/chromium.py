"""Headless Chromium for the page tests: Debian's browser driven by Playwright.

Playwright never downloads a browser here: it launches /usr/bin/chromium (installed
by .ci/run) with a fresh profile. Every console error and uncaught exception of the
page is collected, so a test can say the page ran cleanly.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import ConsoleMessage, Page, async_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def require_chromium() -> None:
    """Skip where no Chromium is installed; in CI, where .ci/run installs it, fail instead."""
    if Path(CHROMIUM).exists():
        return
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: .ci/run should have installed Debian's chromium")
    pytest.skip("Chromium is not installed (apt-get install -y chromium)")


def screenshot_path(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


@asynccontextmanager
async def chromium_page(width: int = 1280, height: int = 900) -> AsyncIterator[tuple[Page, list[str]]]:
    """A page in a fresh headless Chromium, and the list its console errors land in."""
    require_chromium()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text} at {message.location}")

    async with async_playwright() as playwright:
        with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
            context = await playwright.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": width, "height": height})
            try:
                page = context.pages[0] if context.pages else await context.new_page()
                page.on("console", on_console)
                page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
                yield page, problems
            finally:
                await context.close()
