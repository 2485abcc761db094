"""What time alone changes: back-offs that end, and queues to scan again at a set time
(a hold ripens, a victim's protection ends). The Engine asks at each cycle (``expire``)
and tells the shell when to call again (``next_wakeup``).
"""

from __future__ import annotations

import heapq

from koordqueue.engine import messages
from koordqueue.engine.ledger import Ledger, UnitState


def expire(ledger: Ledger, now: float) -> None:
    """Back-offs that ended queue their units again; queues whose retry time came are scanned."""
    backoff = ledger.backoff
    while backoff and backoff[0][0] <= now:
        when, key = heapq.heappop(backoff)
        record = ledger.units.get(key)
        if record is None or record.state is not UnitState.BACKOFF or record.info.requeue_at != when:
            continue
        state = record.queue
        assert state is not None
        record.state = UnitState.QUEUED
        ledger.join(state, record)
        assert record.node is not None
        ledger.say(record, messages.queued(state.key, record.node.name, state.info.policy))
        ledger.tell_as_first(state, record)
    retry = ledger.retry
    while retry and retry[0][0] <= now:
        when, key = heapq.heappop(retry)
        if ledger.retry_at.get(key) == when:
            del ledger.retry_at[key]
            state = ledger.qs.get(key)
            if state is not None:
                ledger.touch(state)


def next_wakeup(ledger: Ledger, now: float) -> float | None:
    """The next time that time alone can change a decision (``now``: queues wait for a
    scan); None: only a change of the inputs can. Drops the entries that lapsed."""
    if ledger.stale:
        return now
    backoff = ledger.backoff
    while backoff:
        when, key = backoff[0]
        record = ledger.units.get(key)
        if record is not None and record.state is UnitState.BACKOFF and record.info.requeue_at == when:
            break
        heapq.heappop(backoff)
    retry = ledger.retry
    while retry and ledger.retry_at.get(retry[0][1]) != retry[0][0]:
        heapq.heappop(retry)
    times = [heap[0][0] for heap in (backoff, retry) if heap]
    return min(times) if times else None
