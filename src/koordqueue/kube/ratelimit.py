"""Pacing: a token bucket for request rates and exponential backoff for retries.

Shared by the client (qps/burst toward the API server, retry delays), the informer
(delays between failed lists) and the work queue (per-item requeue delays).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up; a qps <= 0 means unlimited.

    Callers reserve a token and sleep for their turn, so waiters are served in the
    order they asked and a burst of callers is spread evenly over time.
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps > 0 and burst < 1:
            raise ValueError("burst must be at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take one token and return how many seconds to wait before using it."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)


def exponential_backoff(
    attempt: int,
    base: float,
    cap: float,
    *,
    jitter: float = 0.0,
    rng: random.Random | None = None,
) -> float:
    """`base * 2**attempt`, at most `cap`, lowered by a random fraction up to `jitter`.

    Jitter spreads out clients that failed together so they do not retry in lockstep.
    """
    delay = cap if attempt >= 64 else min(cap, base * (2.0**attempt))
    if jitter > 0:
        delay *= 1.0 - jitter * (rng or random).random()
    return delay
