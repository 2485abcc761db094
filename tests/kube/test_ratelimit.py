"""Token bucket and exponential backoff."""

from __future__ import annotations

import asyncio
import random

import pytest

from koordqueue.kube.ratelimit import TokenBucket, exponential_backoff


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_a_burst_then_spaces_requests_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0]
    # Later callers queue up behind each other, 1/qps apart.
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])


def test_bucket_refills_over_time_but_not_beyond_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    bucket.reserve()
    bucket.reserve()
    clock.now += 0.1
    assert bucket.reserve() == pytest.approx(0, abs=1e-9)
    assert bucket.reserve() == pytest.approx(0.1)
    clock.now += 100
    assert [bucket.reserve() for _ in range(2)] == [0, 0]
    assert bucket.reserve() == pytest.approx(0.1)


def test_bucket_with_no_qps_is_unlimited() -> None:
    bucket = TokenBucket(qps=0, burst=0)
    assert all(bucket.reserve() == 0 for _ in range(1000))


def test_bucket_rejects_a_zero_burst() -> None:
    with pytest.raises(ValueError):
        TokenBucket(qps=5, burst=0)


async def test_acquire_sleeps_for_its_turn() -> None:
    bucket = TokenBucket(qps=50, burst=1)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for _ in range(4):
        await bucket.acquire()
    assert loop.time() - start >= 3 / 50 * 0.9


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [exponential_backoff(n, 0.1, 1.0) for n in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert exponential_backoff(10_000, 0.1, 7.0) == 7.0


def test_backoff_jitter_only_shortens_and_within_the_fraction() -> None:
    rng = random.Random(1)
    delays = [exponential_backoff(3, 0.1, 10.0, jitter=0.5, rng=rng) for _ in range(200)]
    assert all(0.4 <= d <= 0.8 for d in delays)
    assert len(set(delays)) > 100  # actually random
