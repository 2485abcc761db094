"""An asyncio loop on a virtual clock, for tests of delays: when nothing is ready, the
loop moves its clock to the next timer at once instead of sleeping, so a test can assert
delays exactly (`loop.time()` readings) however slow or loaded the machine is."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any


class _JumpingSelector(selectors.DefaultSelector):
    """Polls for I/O without waiting; a wait for a timer moves the loop's clock instead."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer at all: only I/O can wake the loop
            return super().select(None)
        self._loop.now += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run_on_virtual_clock(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``main()`` to its end on a VirtualClockLoop."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        runner.run(main())
