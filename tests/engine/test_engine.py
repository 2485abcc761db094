"""The engine's rules, as small tables of cases built with tiny builders."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine import Engine
from koordqueue.engine.model import EngineConfig, QueueInfo, QuotaInfo, UnitInfo, auto_queue_for
from koordqueue.engine.waterfill import water_fill

G = 1000  # one GPU in milli-units
GPU = "nvidia.com/gpu"


def quota(name: str, min_: int, max_: int, parent: str | None = None, weight: int | None = None,
          policy: QueuePolicy = QueuePolicy.PRIORITY, lend: bool = True, is_parent: bool = False,
          ns: str = "default") -> QuotaInfo:
    return QuotaInfo(name=name, namespace=ns, min={GPU: min_ * G}, max={GPU: max_ * G}, parent=parent,
                     shared_weight=None if weight is None else {GPU: weight * G}, policy=policy,
                     allow_lent=lend, is_parent=is_parent)


def unit(name: str, gpus: int, quota_name: str, priority: int = 0, created: float = 0.0,
         ns: str = "default") -> UnitInfo:
    return UnitInfo(namespace=ns, name=name, priority=priority, created=created,
                    request={GPU: gpus * G}, quota_name=quota_name)


def engine_with(*quotas: QuotaInfo, capacity: int | None = None, **cfg: object) -> Engine:
    e = Engine(EngineConfig(cluster_capacity=None if capacity is None else {GPU: capacity * G}, **cfg))  # type: ignore[arg-type]
    for q in quotas:
        e.set_quota(q)
        if not q.is_parent:
            e.set_queue(auto_queue_for(q))
    return e


def admitted_gpus(e: Engine) -> dict[str, int]:
    return {name: s.used.get(GPU, 0) // G for name, s in e.quota_status().items()}


@pytest.mark.parametrize(
    ("total", "mins", "demands", "weights", "expected"),
    [
        (100, [10, 15, 20, 15], [5, 20, 40, 70], [40, 60, 50, 80], [5, 20, 35, 40]),
        (100, [10, 15, 20, 15], [5, 20, 40, 70], [40, 60, 50, 0], [5, 20, 40, 15]),
        (None, [1, 1], [5, 7], [1, 1], [5, 7]),
        (10, [0, 0, 0], [10, 10, 10], [1, 1, 1], [4, 3, 3]),
    ],
)
def test_water_fill_worked_examples(total, mins, demands, weights, expected) -> None:
    scale = lambda xs: [x * G for x in xs]  # noqa: E731
    shares = water_fill(None if total is None else total * G, scale(mins), scale(demands), scale(weights))
    assert [s // G for s in shares] == expected
    assert sum(shares) <= (total or 10**9) * G


def test_worked_example_settles_after_reclaim() -> None:
    e = engine_with(
        quota("parent", 60, 100, is_parent=True),
        quota("a", 10, 100, "parent", 40), quota("b", 15, 100, "parent", 60),
        quota("c", 20, 100, "parent", 50), quota("d", 15, 100, "parent", 80),
        capacity=100, protect_seconds=60.0,
    )
    # d arrives first and borrows everything; the others come later.
    for i in range(14):
        e.set_unit(unit(f"d{i}", 5, "d", created=i))
    e.schedule(0.0)
    assert admitted_gpus(e)["d"] == 70
    for name, demand in (("a", 5), ("b", 20), ("c", 40)):
        for i in range(demand // 5):
            e.set_unit(unit(f"{name}{i}", 5, name, created=10 + i))
    now = 1.0
    for _ in range(30):
        now += 61.0
        e.schedule(now)
    got = admitted_gpus(e)
    assert (got["a"], got["b"], got["c"], got["d"]) == (5, 20, 35, 40)


def test_over_max_waits_with_a_reason_naming_resource_and_amounts() -> None:
    e = engine_with(quota("team", 2, 8))
    e.set_unit(unit("first", 4, "team"))
    e.set_unit(unit("second", 6, "team", created=1))
    r = e.schedule(0.0)
    assert [a.unit for a in r.admitted] == ["default/first"]
    assert r.messages["default/second"] == "waiting for quota team: nvidia.com/gpu asks 6, used 4 of max 8"
    e.remove_unit("default/first")
    assert [a.unit for a in e.schedule(1.0).admitted] == ["default/second"]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (QueuePolicy.PRIORITY, ["default/small"]),  # the big head is passed over
        (QueuePolicy.BLOCK, []),  # nothing goes ahead of the big head
    ],
)
def test_block_and_priority(policy: QueuePolicy, expected: list[str]) -> None:
    e = engine_with(quota("team", 0, 8, policy=policy))
    e.set_unit(unit("running", 4, "team", created=0))
    e.schedule(0.0)
    e.set_unit(unit("big", 6, "team", priority=5, created=1))
    e.set_unit(unit("small", 2, "team", priority=1, created=2))
    r = e.schedule(1.0)
    assert [a.unit for a in r.admitted] == expected
    if policy is QueuePolicy.BLOCK:
        assert "blocked behind default/big" in r.messages["default/small"]


def test_intelligent_high_band_blocks_low_band() -> None:
    e = engine_with(quota("team", 0, 8, policy=QueuePolicy.INTELLIGENT))
    e.set_unit(unit("running", 4, "team"))
    e.schedule(0.0)
    e.set_unit(unit("high", 6, "team", priority=9, created=1))
    e.set_unit(unit("low", 2, "team", priority=1, created=2))
    r = e.schedule(1.0)
    assert r.admitted == []
    assert "high-priority" in r.messages["default/low"] or "blocked" in r.messages["default/low"]
    e.remove_unit("default/high")
    assert [a.unit for a in e.schedule(2.0).admitted] == ["default/low"]


def test_priority_order_and_many_admissions_per_cycle() -> None:
    e = engine_with(quota("team", 0, 10))
    for i, prio in enumerate([1, 5, 3]):
        e.set_unit(unit(f"u{i}", 3, "team", priority=prio, created=i))
    r = e.schedule(0.0)
    assert [a.unit for a in r.admitted] == ["default/u1", "default/u2", "default/u0"]


def test_tenant_isolation_and_resolution_messages() -> None:
    e = engine_with(quota("team-a", 0, 8, ns="team-a"))
    e.set_unit(unit("intruder", 1, "team-a", ns="team-b"))
    e.set_unit(UnitInfo(namespace="nowhere", name="lost", priority=0, created=0, request={GPU: G}))
    e.set_unit(UnitInfo(namespace="team-a", name="by-ns", priority=0, created=0, request={GPU: G}))
    e.set_queue(QueueInfo(name="orphan", namespace="koord-queue", quota=None))
    e.set_unit(UnitInfo(namespace="team-a", name="q", priority=0, created=0, request={GPU: G}, queue_name="orphan"))
    r = e.schedule(0.0)
    assert [a.unit for a in r.admitted] == ["team-a/by-ns"]
    assert "not bound to namespace team-b" in r.messages["team-b/intruder"]
    assert "no quota for namespace nowhere" in r.messages["nowhere/lost"]
    assert "bound to no quota" in r.messages["team-a/q"]


def test_invalid_quota_is_not_used_and_says_why() -> None:
    e = engine_with(quota("bad", 9, 8))
    e.set_unit(unit("u", 1, "bad"))
    r = e.schedule(0.0)
    assert r.admitted == []
    assert "not usable" in r.messages["default/u"]
    assert "bad" in e.validation_errors()


def test_protect_time_and_non_preemptible_victims() -> None:
    e = engine_with(quota("p", 8, 8, is_parent=True), quota("a", 4, 8, "p"), quota("b", 4, 8, "p"),
                    capacity=8, protect_seconds=60.0)
    for i in range(4):
        b = unit(f"b{i}", 2, "b", created=i)
        b.preemptible = i != 3  # labelled preemptible: "false"
        e.set_unit(b)
        e.schedule(float(i))
    e.set_unit(unit("a0", 2, "a", created=10))
    r = e.schedule(10.0)
    assert r.preempted == [] and r.next_wakeup == 60.0  # b0 is protected until 0 + 60
    r = e.schedule(64.0)
    # The most recently admitted preemptible borrower goes: b3 may not, so b2.
    assert [p.unit for p in r.preempted] == ["default/b2"]
    assert [a.unit for a in r.admitted] == ["default/a0"]


def test_requeue_backoff_is_exponential_and_deterministic() -> None:
    e = engine_with(quota("team", 0, 8))
    e.set_unit(unit("u", 1, "team"))
    e.schedule(0.0)
    first = e.requeue("default/u", 100.0, "pods did not start")
    assert 109.0 <= first <= 111.0
    e.schedule(first)
    second = e.requeue("default/u", 200.0, "again")
    assert 218.0 <= second <= 222.0


@settings(max_examples=60, deadline=None)
@given(
    maxes=st.lists(st.integers(1, 20), min_size=1, max_size=5),
    jobs=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 8), st.integers(0, 3)), max_size=40),
    capacity=st.integers(1, 60),
    parent_max=st.integers(1, 60),
)
def test_never_over_max_or_capacity_and_deterministic(maxes, jobs, capacity, parent_max) -> None:
    def run() -> list:
        qs = [quota("root", 0, parent_max, is_parent=True)]
        qs += [quota(f"q{i}", 0, m, "root") for i, m in enumerate(maxes)]
        e = engine_with(*qs, capacity=capacity, protect_seconds=0.0)
        log = []
        for t, (qi, gpus, prio) in enumerate(jobs):
            e.set_unit(unit(f"j{t}", gpus, f"q{qi % len(maxes)}", priority=prio, created=t))
            r = e.schedule(float(t))
            log.append(([a.unit for a in r.admitted], [p.unit for p in r.preempted]))
            status = e.quota_status()
            total = 0
            for i, m in enumerate(maxes):
                used = status[f"q{i}"].used.get(GPU, 0)
                assert used <= m * G
                total += used
                rt = status[f"q{i}"].runtime.get(GPU, 0)
                assert rt <= m * G
            assert total <= min(capacity, parent_max) * G
            assert sum(status[f"q{i}"].runtime.get(GPU, 0) for i in range(len(maxes))) <= min(capacity, parent_max) * G
        return log

    assert run() == run()
