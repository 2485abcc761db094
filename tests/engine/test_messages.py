"""Why a unit waits, in words: the quota, the resource, how much is asked, used and
allowed, in the units people write (SEMANTICS.md section 1, QueueUnit status.message)."""

from __future__ import annotations

import pytest

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine.model import QuotaInfo, UnitInfo

from .builders import MEM, engine_with, parent, quota, settle, unit

GI = 1024**3 * 1000  # 1Gi in milli-units


def memory_unit(name: str, gib: int, created: float, cpu_milli: int = 0) -> UnitInfo:
    request = {MEM: gib * GI} | ({"cpu": cpu_milli} if cpu_milli else {})
    return UnitInfo("default", name, 0, created, request, quota_name="m")


CASES = {
    "leaf-max": (
        [quota("team", 0, 8)],
        None,
        [("run", 5, "team"), ("wait", 4, "team")],
        "waiting for quota team: nvidia.com/gpu asks 4, used 5 of max 8",
    ),
    "parent-max": (
        [parent("pool", 0, 6), quota("a", 0, 8, "pool"), quota("b", 0, 8, "pool")],
        None,
        [("run", 5, "a"), ("wait", 2, "b")],
        # a runs past its runtime share (what is fair of 6 against b's demand): b takes it
        # back from a's unit when that has run the protect time.
        "waiting for quota b: nvidia.com/gpu asks 2; its parent quota pool has used 5 of max 6; units it could "
        "preempt for room have run less than the protect time (1m, protectSeconds): it tries again as each passes it",
    ),
    "kept-by-non-lending": (
        [parent("pool", 8, 8), quota("keeper", 4, 8, "pool", lend=False), quota("b", 0, 8, "pool")],
        None,
        [("run", 3, "b"), ("wait", 2, "b")],
        "waiting for quota b: nvidia.com/gpu asks 2; its parent quota pool has used 3 of max 8, "
        "4 of it kept by quotas that do not lend",
    ),
    "cluster": (
        [quota("a", 0, 8), quota("b", 0, 8)],
        6,
        [("run", 5, "a"), ("wait", 2, "b")],
        "waiting for cluster capacity: nvidia.com/gpu asks 2, used 5 of 6 in the cluster; units it could preempt "
        "for room have run less than the protect time (1m, protectSeconds): it tries again as each passes it",
    ),
    "never-leaf": (
        [quota("team", 0, 8)],
        None,
        [("wait", 9, "team")],
        "can never fit quota team: nvidia.com/gpu asks 9, more than its max 8",
    ),
    "never-parent": (
        [parent("pool", 0, 6), quota("a", 0, 8, "pool")],
        None,
        [("wait", 7, "a")],
        "can never fit quota a: nvidia.com/gpu asks 7, more than the 6 of quota pool",
    ),
    "never-cluster": (
        [quota("team", 0, 8)],
        4,
        [("wait", 6, "team")],
        "can never fit quota team: nvidia.com/gpu asks 6, more than the 4 of the cluster",
    ),
    "held-for-a-higher-priority-head": (
        [parent("pool", 0, 8), quota("a", 0, 8, "pool"), quota("b", 0, 8, "pool")],
        None,
        [("run", 4, "b"), ("big", 6, "a", 5), ("wait", 2, "b")],
        "waiting for quota b: nvidia.com/gpu asks 2; the free 4 of quota pool is held for default/big, "
        "of higher priority (5 > 0)",
    ),
    "held-for-a-head-that-waited-long": (
        [parent("pool", 0, 8), quota("a", 0, 8, "pool"), quota("b", 0, 8, "pool")],
        None,
        [("run", 4, "b"), ("big", 6, "a"), ("wait", 2, "b", 0, 601.0)],
        "waiting for quota b: nvidia.com/gpu asks 2; the free 4 of quota pool is held for default/big, "
        "of the same priority (0), which has waited more than 10m (koord-queue/hold-room-after of its Queue)",
    ),
}


@pytest.mark.parametrize(("quotas", "capacity", "units", "expected"), list(CASES.values()), ids=list(CASES))
def test_why_a_unit_waits(quotas, capacity, units, expected) -> None:
    """Units are (name, GPUs, quota[, priority[, when]]), one a second unless ``when`` says."""
    engine = engine_with(*quotas, capacity=capacity)
    for i, (name, gpus, quota_name, *rest) in enumerate(units):
        when = rest[1] if len(rest) > 1 else float(i)
        priority = rest[0] if rest else 0
        settle(engine, when)
        engine.set_unit(unit(name, gpus, quota_name, priority=priority, created=when))
        settle(engine, when)
    standing = engine.standing("default/wait")
    assert standing is not None and standing.message == expected


def test_amounts_are_written_as_in_manifests() -> None:
    engine = engine_with(QuotaInfo("m", "default", {}, {MEM: 64 * GI, "cpu": 4000}))
    engine.set_unit(memory_unit("run", 60, 0))
    engine.set_unit(memory_unit("wait", 8, 1, cpu_milli=500))
    result = engine.schedule(0.0)
    assert result.messages["default/wait"] == "waiting for quota m: memory asks 8Gi, used 60Gi of max 64Gi"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (QueuePolicy.BLOCK, "blocked behind default/big (Block policy of queue koord-queue/team)"),
        (QueuePolicy.INTELLIGENT, "waiting while high-priority default/big (priority 4 or more) waits ahead of it "
                                  "(Intelligent policy of queue koord-queue/team)"),
    ],
)
def test_units_behind_a_blocking_head_are_told_who_blocks_them(policy: QueuePolicy, expected: str) -> None:
    engine = engine_with(quota("team", 0, 8, policy=policy))
    engine.set_unit(unit("run", 4, "team"))
    engine.schedule(0.0)
    engine.set_unit(unit("big", 6, "team", priority=9, created=1))
    for i in range(3):
        engine.set_unit(unit(f"small{i}", 1, "team", priority=1, created=2 + i))
    result = engine.schedule(1.0)
    for i in range(3):
        assert result.messages[f"default/small{i}"] == expected


def test_every_unit_of_a_waiting_stream_says_why() -> None:
    """Units with the same request as a unit that does not fit wait for the same reason."""
    engine = engine_with(quota("team", 0, 4))
    for i in range(30):
        engine.set_unit(unit(f"u{i:02}", 2, "team", created=i))
    engine.schedule(0.0)
    reason = "waiting for quota team: nvidia.com/gpu asks 2, used 4 of max 4"
    waiting = engine.queue_positions()["koord-queue/team"]
    assert len(waiting) == 28
    assert {s.message for s in waiting} == {reason}
    for s in waiting:
        standing = engine.standing(s.unit)
        assert standing is not None and standing.message == reason


def test_a_waiting_message_follows_usage() -> None:
    engine = engine_with(quota("team", 0, 8))
    engine.set_unit(unit("a", 5, "team"))
    engine.set_unit(unit("b", 2, "team", created=1))
    engine.set_unit(unit("wait", 4, "team", created=2))
    assert engine.schedule(0.0).messages["default/wait"] == "waiting for quota team: nvidia.com/gpu asks 4, used 7 of max 8"
    engine.remove_unit("default/b")
    result = engine.schedule(1.0)
    assert result.messages["default/wait"] == "waiting for quota team: nvidia.com/gpu asks 4, used 5 of max 8"
    engine.remove_unit("default/a")
    assert [a.unit for a in engine.schedule(2.0).admitted] == ["default/wait"]
    assert engine.standing("default/wait").message == "admitted to quota team"  # type: ignore[union-attr]


def test_a_unit_that_joins_behind_a_waiting_unit_of_its_request_is_told_why_too() -> None:
    """Seen on both control planes: the fourth of four 4-GPU jobs, created a moment after
    the third had been told why it waits, kept "waiting for its turn" for good."""
    engine = engine_with(quota("t", 0, 8))
    for i in range(3):
        engine.set_unit(unit(f"b{i}", 4, "t", created=i))
    told = engine.schedule(3.0).messages
    why = "waiting for quota t: nvidia.com/gpu asks 4, used 8 of max 8"
    assert told == {"default/b2": why}
    engine.set_unit(unit("b3", 4, "t", created=4))
    assert engine.schedule(4.0).messages == {"default/b3": why}
