"""Who writes why a waiting unit waits (status.message, and FailedScheduling events): the
engine's message for each unit it looked at, gathered by the scheduling loop and written
at most once a second (MESSAGE_FLUSH_SECONDS) each, in a line of its own (the unit-status
writer's message_limit), never over a newer status of ours: only from a view of the unit
at least as new as our last write of it, and only while the engine still has it waiting.
A reason that moves is rewritten at most every MESSAGE_REFRESH_SECONDS; one whose words stay
and only its amounts move (used, free, counts), at most every AMOUNTS_REFRESHES reason refreshes."""

from __future__ import annotations

import asyncio
import heapq
import logging
import re

from koordqueue.api import constants as c
from koordqueue.controller import status as st
from koordqueue.controller.dra import with_device_classes
from koordqueue.controller.eventline import job_ref, unit_ref
from koordqueue.controller.phases import SENT_BACK
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.controller.views import UnitView
from koordqueue.engine.messages import says_only_queued
from koordqueue.engine.model import Standing
from koordqueue.kube.errors import Conflict, KubeError

log = logging.getLogger(__name__)

MESSAGE_FLUSH_SECONDS = 1.0  # a waiting unit's message is written at most this often
# ... and, once it says why the unit does not fit, rewritten at most this often: under load
# a unit's reason moves with every admission and release (used amounts, a unit holding the
# free room, then none), each a write; `koord-queue explain` and the dashboard say it live.
MESSAGE_REFRESH_SECONDS = 10.0
# ... and when only its amounts moved, its meaning the same, at most once every this many of
# the controller's reason refreshes (reason_refresh_seconds: 60 s by default): a unit waiting
# a minute for a busy quota would otherwise be rewritten six times to say the same thing.
AMOUNTS_REFRESHES = 2
FAILED_SCHEDULING_EVERY = 60.0  # seconds between FailedScheduling events of one unit


class MessageWriter(Part):
    def __init__(self, shared: Shared, status: UnitStatusWriter) -> None:
        super().__init__(shared)
        self.status = status
        self.messages_due: list[tuple[float, str]] = []  # (when, unit key) of the deferred messages
        self.amounts_seconds = max(MESSAGE_REFRESH_SECONDS, AMOUNTS_REFRESHES * self.config.reason_refresh_seconds)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(MESSAGE_FLUSH_SECONDS)
            batch, self.records.pending_messages = self.records.pending_messages, {}
            now = self.clock()
            while self.messages_due and self.messages_due[0][0] <= now:
                _, key = heapq.heappop(self.messages_due)
                record = self.records.unit(key)
                message = record.deferred_message if record is not None else None
                if record is not None:
                    record.deferred_message = None
                if message is not None:
                    batch.setdefault(key, message)  # unless a newer one came meanwhile
            # Which to write is decided here, in the step that took the batch: one not written yet
            # is back in pending_messages before anything else runs, never missing from both.
            batch = {key: self._with_device_classes(key, message) for key, message in batch.items()}
            writes = [self._tell(key, message, unit) for key, message in batch.items()
                      if not self._defer(key, message, now) and (unit := self._view_to_write(key, message))]
            if writes:
                await asyncio.gather(*writes)

    def _with_device_classes(self, key: str, message: str) -> str:
        """The message naming the device classes of the quota resources its job's claims are
        charged (dra.with_device_classes); as the engine says it for a job with none."""
        unit = self.informers.unit.get(key)
        if unit is None or not self.informers.claims.mappings:
            return message
        return with_device_classes(message, self.informers.job_of(unit))

    def _defer(self, key: str, message: str, now: float) -> bool:
        """Whether the message is not to be written now: it is written already, or the unit was
        told why it waits less than MESSAGE_REFRESH_SECONDS ago (amounts_seconds when the
        new one says the same with other amounts); then it is kept until that is over."""
        record = self.records.unit(key)
        last = record.written_message if record is not None else None
        if last == message:
            if record is not None:
                record.deferred_message = None
            return True
        if record is None or last is None or says_only_queued(last):
            return False
        written_at = record.message_written_at
        every = self.amounts_seconds if meaning(last) == meaning(message) else MESSAGE_REFRESH_SECONDS
        due = (written_at if written_at is not None else -every) + every
        if now >= due:
            return False
        if record.deferred_message is None or due < record.deferred_due:
            heapq.heappush(self.messages_due, (due, key))  # (a later entry of it then finds nothing deferred)
            record.deferred_due = due
        record.deferred_message = message
        return True

    def _view_to_write(self, key: str, message: str) -> UnitView | None:
        """Our view of the unit to write the message from; None when there is nothing to write
        (written already; admitted, gone, or backing off since: its own status says why) or not
        yet (then it is pending again, for the next flush)."""
        if self.records.written_message(key) == message:
            return None
        unit = self.informers.unit.get(key)
        if not self._waiting(key) or (unit is not None and unit.phase in SENT_BACK):
            return None
        if unit is None or not self.records.newer(key, unit.resource_version):
            # Created, but our watch has not brought it yet; or our view of it is older than our
            # own last write (an admission, a send-back), and would take it for a new unit.
            self.records.pending_messages.setdefault(key, message)
            return None
        return unit

    async def _tell(self, key: str, message: str, unit: UnitView) -> None:
        first = not unit.phase  # a new unit: its first status is its phase and this message
        seen = unit.resource_version

        def still_waiting() -> bool:  # not admitted, nor written otherwise, while this write waited for its turn
            return self._waiting(key) and self.records.written_message(key) != message and \
                self.records.newer(key, seen)

        try:
            if first:
                written = await self.status.write(key, st.enqueued(message), precondition=True,
                                                  limit=self.status.message_limit, still=still_waiting)
            else:
                written = await self.status.write(key, {"message": message}, touch=False,
                                                  limit=self.status.message_limit, still=still_waiting)
            if not written:
                if self._waiting(key) and self.records.written_message(key) != message:
                    # Skipped because another write of ours (the forecast's) came first: our view
                    # of the unit was stale, the message still to be written at the next flush.
                    self.records.pending_messages.setdefault(key, message)
                return
            self.records.unit_to_write(key).message_written_at = self.clock()
        except Conflict:  # our view of it is stale: look again at the next flush
            self.records.pending_messages.setdefault(key, message)
            return
        except KubeError as e:
            log.info("message of %s not written: %s", key, e)
            return
        now = self.clock()
        if says_only_queued(message):
            return  # queued, not yet tried: no scheduling has failed
        record = self.records.unit_to_write(key)
        last_failed = record.failed_scheduling_at
        if now - (last_failed if last_failed is not None else -FAILED_SCHEDULING_EVERY) >= FAILED_SCHEDULING_EVERY:
            record.failed_scheduling_at = now
            self._event(unit_ref(unit), c.EventType.WARNING, c.EventReason.FAILED_SCHEDULING, message)
            job = self.informers.job_of(unit)
            if job is not None:
                self._event(job_ref(job), c.EventType.WARNING, c.EventReason.FAILED_SCHEDULING, message)

    def retell_reasons(self, positions: dict[str, list[Standing]]) -> None:
        """Tell again the waiting units whose written reason moved since: the engine tells a
        unit why it waits when it looks at it, and amounts (what is used, what is held for
        whom) move with every admission elsewhere. A unit only queued so far ("waiting for
        its turn") keeps that until the engine tells it a reason: true, and with 100k
        pending units not worth 100k writes."""
        for standings in positions.values():
            for standing in standings:
                written = self.records.written_message(standing.unit)
                if written is not None and standing.message and written != standing.message \
                        and not says_only_queued(written):
                    self.records.pending_messages.setdefault(standing.unit, standing.message)


_AMOUNT = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?[A-Za-z]*(?![\w.-])")


def meaning(message: str) -> str:
    """The message with its amounts (quantities, counts, priorities) blanked out: what it says
    of why the unit waits. Numbers inside names (leaf-0-1) are kept."""
    return _AMOUNT.sub("#", message)
