"""The controller tells a unit merely queued from one that does not fit by the engine's wording."""

from __future__ import annotations

from koordqueue.controller.messages import _waiting_its_turn
from koordqueue.engine import messages


def test_queued_is_waiting_its_turn_and_reasons_are_not() -> None:
    assert _waiting_its_turn(messages.queued("koord-queue/team-a", "team-a", "Priority"))
    assert not _waiting_its_turn(messages.blocked("default/big", "koord-queue/team-a", "Block"))
    assert not _waiting_its_turn(messages.band_blocked("default/big", "koord-queue/team-a", 4))
    assert not _waiting_its_turn(messages.backing_off("admission check x said Retry", 10, 1))
