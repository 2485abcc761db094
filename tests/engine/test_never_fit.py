"""A unit that can never fit does not hold up its queue (issue 29, item 9).

Under Block, and in the high band of Intelligent, the first unit that does not fit stops
the queue until something changes. A unit asking more than a max on its quota's path
(or than the cluster holds, or than its nodes could hold empty) never fits whatever
ends: it is passed over, told that it can never fit and why, and the units behind it
go on as if it were not there.
"""

from __future__ import annotations

import pytest

from koordqueue.api.constants import QueuePolicy

from .builders import (
    engine_with,
    gang,
    keys,
    node,
    parent,
    pod_set,
    queue_of,
    quota,
    res,
    settle,
    unit,
    with_nodes,
)

BLOCK, INTELLIGENT = QueuePolicy.BLOCK, QueuePolicy.INTELLIGENT


def team(policy: QueuePolicy, max_: int = 8, **config: object):  # type: ignore[no-untyped-def]
    q = quota("team", 0, max_, policy=policy)
    engine = engine_with(q, **config)
    engine.set_queue(queue_of(q, priority_threshold=0))  # Intelligent: every unit in the high band
    return engine


@pytest.mark.parametrize("policy", [BLOCK, INTELLIGENT])
def test_more_than_max_is_passed_over(policy: QueuePolicy) -> None:
    engine = team(policy)
    engine.set_unit(unit("huge", 9, "team", priority=5, created=0))
    engine.set_unit(unit("small", 2, "team", priority=1, created=1))
    result = engine.schedule(0.0)
    assert keys(result.admitted) == ["default/small"]
    assert result.messages["default/huge"] == "can never fit quota team: nvidia.com/gpu asks 9, more than its max 8"


@pytest.mark.parametrize("policy", [BLOCK, INTELLIGENT])
def test_a_unit_that_only_waits_still_blocks(policy: QueuePolicy) -> None:
    """The other side: a unit that fits once others end keeps its place at the head."""
    engine = team(policy)
    engine.set_unit(unit("running", 4, "team", created=-1))
    engine.schedule(0.0)
    engine.set_unit(unit("big", 6, "team", priority=5, created=0))
    engine.set_unit(unit("small", 2, "team", priority=1, created=1))
    assert engine.schedule(1.0).admitted == []


def test_more_than_a_parent_max_is_passed_over_when_its_own_quota_is_busy_too() -> None:
    """Its own quota is full now (that would pass), but its parent's max is below its request
    (that never will): it can never fit, and says so, not that it waits for its quota."""
    a = quota("a", 0, 8, "pool", policy=BLOCK)
    engine = engine_with(parent("pool", 0, 5), a)
    engine.set_unit(unit("running", 4, "a", created=-1))
    engine.schedule(0.0)
    engine.set_unit(unit("huge", 6, "a", priority=5, created=0))
    engine.set_unit(unit("small", 1, "a", priority=1, created=1))
    result = engine.schedule(1.0)
    assert keys(result.admitted) == ["default/small"]
    assert result.messages["default/huge"] == "can never fit quota a: nvidia.com/gpu asks 6, more than the 5 of quota pool"
    standing = engine.standing("default/huge")
    assert standing is not None and standing.message == result.messages["default/huge"]


def test_more_than_the_cluster_is_passed_over() -> None:
    engine = team(BLOCK, max_=100, capacity=16)
    engine.set_unit(unit("huge", 32, "team", priority=5, created=0))
    engine.set_unit(unit("small", 2, "team", priority=1, created=1))
    result = engine.schedule(0.0)
    assert keys(result.admitted) == ["default/small"]
    assert result.messages["default/huge"].startswith("can never fit quota team: nvidia.com/gpu asks 32, more than "
                                                      "the 16 of the cluster")


def test_pods_no_empty_node_could_hold_are_passed_over() -> None:
    engine = with_nodes(team(BLOCK, max_=100), node("gpu-0", gpus=8), node("gpu-1", gpus=8))
    engine.set_unit(gang("wide", pod_set(gpus=16), quota_name="team", priority=5, created=0))
    engine.set_unit(gang("small", pod_set(gpus=2), quota_name="team", priority=1, created=1))
    assert settle(engine, 0.0) == ["default/small"]
    standing = engine.standing("default/wide")
    assert standing is not None and "nor would any, empty" in standing.message


def test_pods_no_node_may_take_are_passed_over() -> None:
    engine = with_nodes(team(BLOCK, max_=100), node("gpu-0"))
    engine.set_unit(gang("picky", pod_set(node_selector=(("accelerator", "h100"),)), quota_name="team",
                         priority=5, created=0))
    engine.set_unit(gang("small", pod_set(gpus=2), quota_name="team", priority=1, created=1))
    assert settle(engine, 0.0) == ["default/small"]


def test_the_units_behind_a_passed_over_unit_still_block_on_their_own() -> None:
    engine = team(BLOCK)
    engine.set_unit(unit("running", 4, "team", created=-1))
    engine.schedule(0.0)
    engine.set_unit(unit("huge", 9, "team", priority=9, created=0))
    engine.set_unit(unit("big", 6, "team", priority=5, created=1))
    engine.set_unit(unit("small", 2, "team", priority=1, created=2))
    result = engine.schedule(1.0)
    assert result.admitted == []
    assert "blocked behind default/big" in result.messages["default/small"]
    assert result.messages["default/huge"].startswith("can never fit quota team")


def test_a_quota_that_grows_lets_the_passed_over_unit_in() -> None:
    engine = team(BLOCK)
    engine.set_unit(unit("huge", 9, "team", created=0))
    assert engine.schedule(0.0).admitted == []
    engine.set_quota(quota("team", 0, 12, policy=BLOCK))
    assert keys(engine.schedule(1.0).admitted) == ["default/huge"]


def test_a_parent_max_that_shrinks_past_a_waiting_unit_makes_it_never_fit() -> None:
    """The least limits on a quota's path are kept between cycles (fit.never_fits); a
    parent's max edited in place below a waiting unit's request is seen at the next one."""
    a = quota("a", 0, 8, "pool", policy=BLOCK)
    engine = engine_with(parent("pool", 0, 10), a)
    engine.set_unit(unit("running", 4, "a", created=-1))
    engine.schedule(0.0)
    engine.set_unit(unit("big", 6, "a", priority=5, created=0))
    engine.set_unit(unit("small", 1, "a", priority=1, created=1))
    assert engine.schedule(1.0).admitted == []  # big waits for running, and blocks small
    engine.set_quota(parent("pool", 0, 5))
    result = engine.schedule(2.0)
    assert keys(result.admitted) == ["default/small"]
    assert result.messages["default/big"] == "can never fit quota a: nvidia.com/gpu asks 6, more than the 5 of quota pool"


def test_a_cluster_that_shrinks_past_a_waiting_unit_makes_it_never_fit() -> None:
    engine = team(BLOCK, max_=12, capacity=16)
    engine.set_unit(unit("running", 10, "team", created=-1))
    engine.schedule(0.0)
    engine.set_unit(unit("big", 8, "team", priority=5, created=0))
    engine.set_unit(unit("small", 1, "team", priority=1, created=1))
    assert engine.schedule(1.0).admitted == []
    engine.set_cluster_capacity(res(7))  # its quota's max is still the first limit it waits for
    result = engine.schedule(2.0)
    assert result.messages["default/big"].startswith("can never fit quota team")
    assert "default/big" not in keys(result.admitted)
