"""The process runner: a hung process tells where its tasks wait when sent SIGUSR1."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from koordqueue import aio


async def _stuck_until_asked() -> None:
    async def parked_on_an_event() -> None:
        await asyncio.Event().wait()

    stuck = asyncio.create_task(parked_on_an_event(), name="stuck-one")
    await asyncio.sleep(0)
    os.kill(os.getpid(), signal.SIGUSR1)
    await asyncio.sleep(0.1)  # the handler runs in the loop
    stuck.cancel()


def test_sigusr1_logs_every_tasks_stack(caplog: pytest.LogCaptureFixture) -> None:
    before = signal.signal(signal.SIGUSR1, lambda *_: None)  # unhandled, it would end pytest
    try:
        with caplog.at_level(logging.WARNING, logger="koordqueue.aio"):
            aio.run(_stuck_until_asked())
    finally:
        signal.signal(signal.SIGUSR1, before)
    dump = "\n".join(r.getMessage() for r in caplog.records if r.name == "koordqueue.aio")
    assert "--- stuck-one" in dump and "in parked_on_an_event" in dump
