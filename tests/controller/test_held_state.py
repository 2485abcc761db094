"""A unit's held state (orphan, inactive) is read as a value, views.held, not by each caller
matching the opening words of its reason."""

from __future__ import annotations

from typing import Any

from koordqueue.api import constants as c
from koordqueue.controller.views import Held, bare_unit_info, held, orphan_info, unit_view


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
