"""The controller tells a unit merely queued from one that does not fit by the engine's wording."""

from __future__ import annotations

from koordqueue.engine import messages


def test_queued_is_waiting_its_turn_and_reasons_are_not() -> None:
    assert messages.says_only_queued(messages.queued("koord-queue/team-a", "team-a", "Priority"))
    assert not messages.says_only_queued(messages.blocked("default/big", "koord-queue/team-a", "Block"))
    assert not messages.says_only_queued(messages.band_blocked("default/big", "koord-queue/team-a", 4))
    assert not messages.says_only_queued(messages.backing_off("admission check x said Retry", 10, 1))
