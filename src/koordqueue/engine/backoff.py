"""Exponential back-off before a unit that was sent back is queued again.

The jitter spreads units that failed together, but it is drawn from a hash of the
unit and the attempt, never from a random generator: the same inputs give the same
times, in the simulator and in tests.
"""

from __future__ import annotations

import zlib

from koordqueue.engine.model import EngineConfig


def backoff_seconds(config: EngineConfig, key: str, attempts: int) -> float:
    """Delay before attempt number ``attempts`` (1 for the first send-back)."""
    base = min(config.backoff_cap, config.backoff_base * config.backoff_factor ** max(attempts - 1, 0))
    fraction = zlib.crc32(f"{key}#{attempts}".encode()) / 0xFFFFFFFF  # in [0, 1]
    return base * (1.0 + config.backoff_jitter * (2.0 * fraction - 1.0))
