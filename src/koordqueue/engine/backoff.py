"""Exponential back-off before a unit that was sent back is queued again.

The jitter spreads units that failed together, but it is drawn from a hash of the
unit and the attempt, never from a random generator: the same inputs give the same
times, in the simulator and in tests. A Queue may set its own base and cap (Koord-Queue's
``koord-queue/queue-args``); the factor and the jitter are the engine's.
"""

from __future__ import annotations

import zlib

from koordqueue.engine.model import EngineConfig, QueueInfo


def backoff_seconds(config: EngineConfig, key: str, attempts: int, queue: QueueInfo | None = None) -> float:
    """Delay before attempt number ``attempts`` (1 for the first send-back) of a unit
    admitted through ``queue``."""
    base_seconds = config.backoff_base
    cap = config.backoff_cap
    if queue is not None:
        base_seconds = base_seconds if queue.backoff_base is None else queue.backoff_base
        cap = cap if queue.backoff_cap is None else queue.backoff_cap
    base = min(cap, base_seconds * config.backoff_factor ** max(attempts - 1, 0))
    fraction = zlib.crc32(f"{key}#{attempts}".encode()) / 0xFFFFFFFF  # in [0, 1]
    return base * (1.0 + config.backoff_jitter * (2.0 * fraction - 1.0))
