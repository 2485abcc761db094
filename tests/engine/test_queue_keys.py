"""Koord-Queue's keys read as Koord-Queue reads them (issue 19): the oversell rate, a
Queue's max-depth, wait-for-pods-running and back-off arguments (queue-args)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine.backoff import backoff_seconds
from koordqueue.engine.model import EngineConfig

from .builders import GPU, G, engine_with, keys, parent, queue_of, quota, settle, unit, used


# --- oversellrate: used + request <= max x rate, for the quota and each ancestor ---------
@pytest.mark.parametrize(
    ("rate", "requests", "admitted"),
    [
        (1.0, [4, 4, 2], "abc"),  # max 10: 4 + 4 + 2 = 10
        (1.0, [4, 4, 6], "ab"),
        (1.5, [4, 4, 6], "abc"),  # max 10 x 1.5 = 15: 4 + 4 + 6 = 14
        (1.5, [4, 4, 8], "ab"),  # 16 > 15
        (0.5, [4, 2], "a"),  # 10 x 0.5 = 5: 4 fits, 4 + 2 does not
        (1.25, [12, 1], "a"),  # 12 + 1 > 12.5
        (1.25, [12, 0.5], "ab"),  # 12.5 <= 12.5: the limit is not rounded to whole GPUs
    ],
)
def test_oversell_rate_scales_each_quotas_max(rate: float, requests: list[float], admitted: str) -> None:
    engine = engine_with(quota("team", 0, 10), oversell_rate=rate)
    for index, amount in enumerate(requests):
        engine.set_unit(replace(unit("abc"[index], 0, "team", created=float(index)),
                                request={GPU: int(amount * G)}))
    assert sorted(settle(engine, 0.0)) == [f"default/{name}" for name in admitted]


@pytest.mark.parametrize(("rate", "fits"), [(1.0, False), (2.0, True)])
def test_oversell_rate_scales_every_ancestor_too(rate: float, fits: bool) -> None:
    """The parent's max is scaled as its children's: a child with max 8 under a parent
    with max 4 gets 8 with rate 2 (4 x 2), 4 without."""
    engine = engine_with(parent("p", 0, 4), quota("team", 0, 8, parent="p"), oversell_rate=rate)
    engine.set_unit(unit("big", 8, "team"))
    assert (settle(engine, 0.0) == ["default/big"]) is fits
    if not fits:
        standing = engine.standing("default/big")
        assert standing is not None and standing.message.endswith("more than the 4 of quota p")


def test_oversell_rate_says_how_the_limit_comes_of_it() -> None:
    engine = engine_with(quota("team", 0, 10), oversell_rate=1.5)
    engine.set_unit(unit("a", 14, "team"))
    engine.set_unit(unit("b", 2, "team", created=1.0))
    settle(engine, 0.0)
    standing = engine.standing("default/b")
    assert standing is not None
    assert standing.message == ("waiting for quota team: nvidia.com/gpu asks 2, used 14 of "
                                "max 10 x oversellrate 1.5 = 15")


def test_oversell_rate_one_leaves_the_limits_as_they_are() -> None:
    """Rate 1.0 is exactly the behaviour without a rate: the same admissions, runtimes and messages."""
    def run(config: dict[str, object]) -> tuple[list[str], dict[str, int], str]:
        engine = engine_with(parent("p", 6, 10), quota("a", 3, 8, parent="p"), quota("b", 3, 8, parent="p"),
                             **config)
        for index in range(6):
            engine.set_unit(unit(f"u{index}", 2, "ab"[index % 2], created=float(index)))
        admitted = settle(engine, 0.0)
        standing = engine.standing("default/u5")
        return admitted, used(engine), standing.message if standing else ""

    assert run({"oversell_rate": 1.0}) == run({})


# --- koord-queue/max-depth: only the first N pending units are considered ------------------
@pytest.mark.parametrize(
    ("depth", "policy", "admitted"),
    [
        (None, QueuePolicy.PRIORITY, ["small"]),  # big passed over, small behind it fits
        (1, QueuePolicy.PRIORITY, []),  # small is 2nd: not looked at
        (2, QueuePolicy.PRIORITY, ["small"]),
        (1, QueuePolicy.INTELLIGENT, []),
    ],
)
def test_max_depth_limits_the_units_considered(depth: int | None, policy: QueuePolicy,
                                                admitted: list[str]) -> None:
    team = quota("team", 0, 4)
    engine = engine_with(team)
    engine.set_queue(queue_of(team, max_depth=depth, policy=policy))
    engine.set_unit(unit("big", 8, "team", created=0.0))  # never fits (more than max)
    engine.set_unit(unit("small", 2, "team", created=1.0))
    assert settle(engine, 0.0) == [f"default/{name}" for name in admitted]
    small = engine.standing("default/small")
    assert small is not None
    if not admitted:
        assert small.message == ("waiting its turn: queue koord-queue/team considers only its first 1 pending "
                                 "jobs (koord-queue/max-depth), and this one is further back")


def test_max_depth_slides_as_units_are_admitted() -> None:
    """Depth 1 with five units that fit: all are admitted, one window at a time; a unit
    that leaves ahead of one beyond the depth lets it in."""
    team = quota("team", 0, 10)
    engine = engine_with(team)
    engine.set_queue(queue_of(team, max_depth=1))
    for index in range(5):
        engine.set_unit(unit(f"u{index}", 2, "team", created=float(index)))
    assert sorted(settle(engine, 0.0)) == [f"default/u{i}" for i in range(5)]

    engine = engine_with(team)
    engine.set_queue(queue_of(team, max_depth=1))
    engine.set_unit(unit("never", 20, "team", created=0.0))
    engine.set_unit(unit("fits", 2, "team", created=1.0))
    assert settle(engine, 0.0) == []
    positions = engine.queue_positions()["koord-queue/team"]
    assert [(s.unit, s.position) for s in positions] == [("default/never", 1), ("default/fits", 2)]
    assert "considers only its first 1" in positions[1].message
    engine.remove_unit("default/never")
    assert settle(engine, 1.0) == ["default/fits"]


# --- koord-queue/wait-for-pods-running: nothing more while an admitted unit's pods start ---
def test_wait_for_pods_running_blocks_the_queue_until_the_pods_run() -> None:
    team = quota("team", 0, 10)
    engine = engine_with(team)
    engine.set_queue(queue_of(team, wait_for_pods_running=True))
    for index in range(3):
        engine.set_unit(unit(f"u{index}", 2, "team", created=float(index)))
    assert settle(engine, 0.0) == ["default/u0"]
    waiting = engine.standing("default/u1")
    assert waiting is not None and waiting.message == (
        "waiting: queue koord-queue/team waits for the pods of default/u0 to run before it admits more "
        "(koord-queue/wait-for-pods-running)")
    engine.set_pods_running("default/u0", False)  # still starting: no change
    assert settle(engine, 1.0) == []
    engine.set_pods_running("default/u0", True)
    assert settle(engine, 2.0) == ["default/u1"]
    engine.set_pods_running("default/u1", True)
    assert settle(engine, 3.0) == ["default/u2"]


@pytest.mark.parametrize("flag", [False, True])
def test_wait_for_pods_running_is_per_queue(flag: bool) -> None:
    """Only the Queue with the key waits; another quota's queue goes on."""
    a, b = quota("a", 0, 10), quota("b", 0, 10)
    engine = engine_with(a, b)
    engine.set_queue(queue_of(a, wait_for_pods_running=flag))
    for index in range(2):
        engine.set_unit(unit(f"a{index}", 2, "a", created=float(index)))
        engine.set_unit(unit(f"b{index}", 2, "b", created=float(index)))
    got = sorted(settle(engine, 0.0))
    expected = ["default/a0", "default/b0", "default/b1"] + ([] if flag else ["default/a1"])
    assert got == sorted(expected)


def test_a_unit_sent_back_unblocks_its_queue_and_backs_off() -> None:
    """The timeout gives up on a unit whose pods did not run: the queue goes on, and the
    unit backs off (and, handed in admitted after a restart, counts as running until told)."""
    team = quota("team", 0, 10)
    engine = engine_with(team, backoff_base=10.0)
    engine.set_queue(queue_of(team, wait_for_pods_running=True))
    engine.set_unit(unit("slow", 2, "team", created=0.0))
    engine.set_unit(unit("next", 2, "team", created=1.0))
    assert settle(engine, 0.0) == ["default/slow"]
    requeue_at = engine.requeue("default/slow", 300.0, "its pods were not all running")
    assert requeue_at > 300.0
    assert settle(engine, 300.0) == ["default/next"]
    info = engine.unit("default/next")
    assert info is not None
    info.admitted_quota = "team"
    restarted = engine_with(team)
    restarted.set_queue(queue_of(team, wait_for_pods_running=True))
    restarted.set_unit(info)
    restarted.set_unit(unit("later", 2, "team", created=2.0))
    assert settle(restarted, 0.0) == ["default/later"]


def test_a_unit_loaded_as_starting_blocks_its_queue() -> None:
    team = quota("team", 0, 10)
    engine = engine_with(team)
    engine.set_queue(queue_of(team, wait_for_pods_running=True))
    loaded = replace(unit("loaded", 2, "team"), admitted_quota="team", admitted_queue="koord-queue/team",
                     admitted_at=0.0)
    engine.set_unit(loaded)
    engine.set_pods_running("default/loaded", False)
    engine.set_unit(unit("next", 2, "team", created=1.0))
    assert settle(engine, 0.0) == []
    engine.remove_unit("default/loaded")
    assert settle(engine, 1.0) == ["default/next"]


# --- koord-queue/queue-args: the Queue's own back-off base and cap -------------------------
@pytest.mark.parametrize(
    ("base", "cap", "attempts", "expected"),
    [
        (None, None, 1, 10.0),  # the engine's
        (1.0, None, 1, 1.0),
        (1.0, None, 3, 4.0),  # x2 each time
        (1.0, 20.0, 10, 20.0),  # capped at podMaxBackoffSeconds
        (None, 5.0, 1, 5.0),
    ],
)
def test_queue_args_set_the_back_off(base: float | None, cap: float | None, attempts: int,
                                     expected: float) -> None:
    config = EngineConfig(backoff_base=10.0, backoff_cap=900.0, backoff_jitter=0.0)
    team = queue_of(quota("team", 0, 10), backoff_base=base, backoff_cap=cap)
    assert backoff_seconds(config, "default/u", attempts, team) == expected


def test_a_unit_sent_back_backs_off_by_its_queues_arguments() -> None:
    team = quota("team", 0, 10)
    engine = engine_with(team, backoff_base=10.0, backoff_jitter=0.0)
    engine.set_queue(queue_of(team, backoff_base=1.0, backoff_cap=20.0))
    engine.set_unit(unit("u", 2, "team"))
    assert keys(engine.schedule(0.0).admitted) == ["default/u"]
    assert engine.requeue("default/u", 100.0, "timed out") == 101.0
