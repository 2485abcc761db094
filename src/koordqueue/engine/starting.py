"""Admitted units whose pods do not all run yet (koord-queue/wait-for-pods-running), and
those whose pods have all succeeded (``Done``).

A Queue that waits for pods admits nothing more while one of its units is starting: the
ledger asks ``first`` of a Queue, and is told (``changed``) when a Queue gains or loses one.
"""

from __future__ import annotations

from collections.abc import Callable


class Starting:
    """Starting units with the key of the Queue they were admitted through, and the same by
    Queue in admission order."""

    def __init__(self, changed: Callable[[str], None]) -> None:
        self.queue_of: dict[str, str] = {}
        self.in_queue: dict[str, dict[str, None]] = {}
        self._changed = changed  # a Queue gained or lost a starting unit

    def __contains__(self, key: str) -> bool:
        return key in self.queue_of

    def get(self, key: str) -> str | None:
        """The Queue the starting unit ``key`` was admitted through; None: it is not starting."""
        return self.queue_of.get(key)

    def start(self, key: str, queue: str, touch: bool = True) -> None:
        """``key``, admitted through ``queue``, waits for its pods; ``touch`` False: not told."""
        before = self.queue_of.get(key)
        if before == queue:
            return
        if before is not None:
            self.stop(key)
        self.queue_of[key] = queue
        self.in_queue.setdefault(queue, {})[key] = None
        if touch:
            self._changed(queue)

    def stop(self, key: str) -> None:
        """``key``'s pods all run, or it is no longer admitted (unknown keys are ignored)."""
        queue = self.queue_of.pop(key, None)
        if queue is None:
            return
        units = self.in_queue[queue]
        del units[key]
        if not units:
            del self.in_queue[queue]
        self._changed(queue)

    def first(self, queue: str) -> str | None:
        """The first unit admitted through ``queue`` that is still starting."""
        units = self.in_queue.get(queue)
        return next(iter(units)) if units else None


class Done:
    """Admitted units whose pods have all succeeded, since when: their end is near (their
    controller says so seconds later under load), so for ``EngineConfig.done_grace_seconds``
    they are no one's victim; preempting one would only make that write fail and the end come
    later. Bounded, as a protect time is: a job whose controller never ends it (a tenant's
    Job managed by no one, with a bare pod of its label that succeeded) is a victim again
    after it, and cannot keep borrowed quota from being reclaimed."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.since

    def start(self, key: str, now: float) -> None:
        """``key``'s pods have all succeeded, seen at ``now`` (its grace runs from the first time)."""
        self.since.setdefault(key, now)

    def stop(self, key: str) -> None:
        """``key`` is not done (a pod of it made again), or no longer admitted."""
        self.since.pop(key, None)

    def spared_until(self, key: str, grace: float) -> float | None:
        """Until when ``key`` is no victim (None: it is not done)."""
        since = self.since.get(key)
        return None if since is None else since + grace
