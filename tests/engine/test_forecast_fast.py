"""The forecast's fast play (engine/forecast.py ``snapshot``, ``_fast_play``) gives what the
engine's own play gives, on random states of quotas on their own, and is not used elsewhere."""

from __future__ import annotations

import random

import pytest

from koordqueue.api.constants import (
    BASIS_ANNOTATION,
    BASIS_DEFAULT,
    BASIS_HISTORY,
    FORECAST_COARSEN,
    QueuePolicy,
)
from koordqueue.engine import Engine
from koordqueue.engine.forecast import clone, forecast, pending_keys, snapshot
from koordqueue.engine.model import auto_queue_for
from koordqueue.engine.runtimes import Runtime

from .builders import engine_with, gang, node, parent, pod_set, queue_of, quota, settle, unit

POLICIES = (QueuePolicy.PRIORITY, QueuePolicy.BLOCK, QueuePolicy.INTELLIGENT)
BASES = (BASIS_ANNOTATION, BASIS_HISTORY, BASIS_DEFAULT)


def _random_state(rng: random.Random) -> tuple[Engine, dict[str, Runtime], float]:
    """1-4 quotas of the cluster (GPUs, some with cpu too), the capacity unbounded or
    covering every max, nodes or none; jobs running (some not preemptible) since before ``now`` and jobs waiting, of random size
    (some larger than their quota, some naming no quota), priority and age; runtimes from a few values (ties)."""
    quotas = []
    for q in range(rng.randint(1, 4)):
        most = rng.randint(2, 8)
        amounts: int | dict[str, int] = most if rng.random() < 0.6 else {"gpu": most, "cpu": rng.randint(4, 16)}
        least: int | dict[str, int] = (
            rng.randint(0, most) if isinstance(amounts, int) else {k: rng.randint(0, v) for k, v in amounts.items()})
        quotas.append(quota(f"q{q}", least, amounts, policy=rng.choice(POLICIES), threshold=rng.choice((None, 5))))
    capacity = None
    if rng.random() < 0.5:
        capacity = {"gpu": 8 * len(quotas) + rng.randint(0, 4)}
        if all(len(q.max) == 2 for q in quotas):  # (a resource the cluster names is one each quota names)
            capacity["cpu"] = 16 * len(quotas)
    engine = engine_with(*quotas, capacity=capacity)
    if rng.random() < 0.3:
        engine.set_node(node("n1"))  # (units without pod sets are admitted on quota alone)
    runtimes: dict[str, Runtime] = {}
    choices = (60.0, 100.0, 100.0, 250.0, 400.0, 1000.0)
    for i in range(rng.randint(0, 10)):
        q = rng.randrange(len(quotas))
        request: int | dict[str, int] = rng.randint(1, 4) if rng.random() < 0.7 else {"gpu": rng.randint(1, 3),
                                                                                      "cpu": rng.randint(1, 6)}
        engine.set_unit(unit(f"run-{i}", request, f"q{q}", priority=rng.choice((0, 5)), created=float(i),
                             preemptible=rng.random() < 0.8))
        if rng.random() < 0.8:
            runtimes[f"default/run-{i}"] = Runtime(rng.choice(choices), rng.choice(BASES))
    settle(engine, 0.0)
    for key, record in list(engine._ledger.units.items()):
        if not record.info.preemptible and record.info.admitted_quota is None:
            engine.remove_unit(key)  # (a waiting unit that may not borrow is not of the fast play's states)
    now = float(rng.choice((50, 100, 300)))
    for i in range(rng.randint(1, 25)):
        q = rng.randrange(len(quotas))
        request = rng.randint(1, 9) if rng.random() < 0.7 else {"gpu": rng.randint(0, 3), "cpu": rng.randint(1, 20)}
        engine.set_unit(unit(f"wait-{i}", request, rng.choice((f"q{q}",) * 9 + ("nowhere",)), priority=rng.choice((0, 0, 5, 10)),
                             created=float(rng.randint(1, 40))))
        if rng.random() < 0.8:
            runtimes[f"default/wait-{i}"] = Runtime(rng.choice(choices), rng.choice(BASES),
                                                    rng.choice((None, None, 500.0)))
    if rng.random() < 0.5:
        settle(engine, now - 1)  # (or not: the forecast's first cycle admits what fits now)
    return engine, runtimes, now


@pytest.mark.parametrize("seed", range(120))
def test_the_fast_play_gives_what_the_engines_play_gives(seed: int) -> None:
    rng = random.Random(seed)
    engine, runtimes, now = _random_state(rng)
    default = Runtime(rng.choice((80.0, 300.0)), BASIS_DEFAULT)
    bounds = {"coarsen": rng.choice((0.0, FORECAST_COARSEN, 0.2)), "resolution": rng.choice((0.0, 1.0, 60.0)),
              "horizon": rng.choice((7 * 86400.0, 700.0)), "max_cycles": rng.choice((60_000, 4))}
    before = clone(engine)
    taken = snapshot(engine)  # as the leader takes it on its loop, played after the engine moved on
    fast = forecast(engine, now, runtimes, default, **bounds)  # type: ignore[arg-type]
    if taken is not None:
        for key in list(engine._ledger.units)[:3]:
            engine.remove_unit(key)
        engine.schedule(now)
        assert forecast(taken, now, runtimes, default, **bounds).units == fast.units  # type: ignore[arg-type]
    full = forecast(before, now, runtimes, default, fast=False, **bounds)  # type: ignore[arg-type]
    assert fast.fast == bool(pending_keys(before)[0]) and not full.fast  # (nothing waits: nothing played)
    assert fast.units == full.units
    assert (fast.cycles, fast.complete, fast.running) == (full.cycles, full.complete, full.running)


def test_the_fast_play_is_not_used_where_quotas_are_not_on_their_own() -> None:
    def waiting(engine: Engine) -> Engine:
        engine.set_unit(unit("run", 4, "a"))
        engine.set_unit(unit("wait", 4, "a", created=1.0))
        settle(engine, 0.0)
        return engine

    assert snapshot(waiting(engine_with(quota("a", 4, 4)))) is not None
    assert snapshot(waiting(engine_with(quota("a", 4, 4), capacity=3))) is None  # the cluster binds
    assert snapshot(waiting(engine_with(quota("a", 2, 4), quota("b", 2, 4), capacity=6))) is None
    assert snapshot(waiting(engine_with(parent("p", 4, 4), quota("a", 4, 4, parent="p")))) is None
    preempting = engine_with(quota("a", 4, 4))
    preempting.set_queue(queue_of(quota("a", 4, 4), preemption=True))
    assert snapshot(waiting(preempting)) is None
    two = engine_with(quota("a", 4, 4))
    two.set_queue(queue_of(quota("a", 4, 4), name="other"))
    assert snapshot(waiting(two)) is None  # two Queues take turns at one quota
    placed = engine_with(quota("a", 4, 4))
    placed.set_node(node("n1"))
    assert snapshot(waiting(placed)) is not None  # (units without pod sets are not placed)
    placed.set_unit(gang("g", pod_set(count=1, gpus=1), quota_name="a"))
    assert snapshot(placed) is None  # its pods must fit on the nodes
    held = waiting(engine_with(quota("a", 4, 4)))
    held.set_unit(unit("pinned", 1, "a", preemptible=False, created=2.0))
    assert snapshot(held) is None  # it may not borrow: held to its quota's min
    assert auto_queue_for(quota("a", 4, 4)).key in waiting(engine_with(quota("a", 4, 4)))._queues
