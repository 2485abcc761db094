"""A unit's held state (orphan, inactive) is a field of the engine's UnitInfo, set where the
unit info is made and read by views.held: never read from the opening words of its reason."""

from __future__ import annotations

from typing import Any

from koordqueue.api import constants as c
from koordqueue.controller.views import ORPHAN, bare_unit_info, held, orphan_info, unit_view
from koordqueue.engine.model import Held, UnitInfo


def _unit(spec: dict[str, Any]) -> Any:
    return unit_view({"apiVersion": f"{c.QUEUE_GROUP}/{c.QUEUE_VERSION}", "kind": c.QUEUE_UNIT_KIND,
                      "metadata": {"namespace": "team-a", "name": "u", "uid": "1", "resourceVersion": "1",
                                   "creationTimestamp": "2026-01-01T00:00:00Z"},
                      "spec": spec})


def test_an_orphan_is_held_as_one_whatever_its_reason_says() -> None:
    unit = _unit({"resource": {"cpu": "1"}})
    assert held(orphan_info(unit, "this QueueUnit stands for no job: team-a/j does not exist")) is Held.ORPHAN


def test_a_bare_unit_made_inactive_is_held_inactive_and_active_again_is_not_held() -> None:
    off = bare_unit_info(_unit({"resource": {"cpu": "1"}, "active": False}), lambda name, ns: False)
    on = bare_unit_info(_unit({"resource": {"cpu": "1"}}), lambda name, ns: False)
    assert held(off) is Held.INACTIVE
    assert held(on) is None and held(None) is None


def test_a_unit_unusable_for_another_reason_is_not_held() -> None:
    unreadable = bare_unit_info(_unit({}), lambda name, ns: False)
    assert unreadable.invalid is not None and held(unreadable) is None


def test_an_orphan_is_held_as_one_whatever_words_its_reason_begins_with() -> None:
    unit = _unit({"resource": {"cpu": "1"}})
    assert held(orphan_info(unit, "team-a/j: gone")) is Held.ORPHAN


def test_a_reason_that_begins_with_the_held_words_alone_is_not_held() -> None:
    """Only the field says it: a reason that happens to open with an orphan's or an inactive
    unit's words (a tenant's text quoted in it, say) holds nothing."""
    for reason in (ORPHAN, "it is inactive (so it says)"):
        info = UnitInfo(namespace="team-a", name="u", priority=0, created=0.0, request={}, invalid=reason)
        assert held(info) is None
