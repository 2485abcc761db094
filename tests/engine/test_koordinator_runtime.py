"""Runtime quota beside koord-scheduler: split as Koordinator v1.8.0 splits it, case for
case with its own tests (pkg/scheduler/plugins/elasticquota/core, each case named after
the Go test it comes from), and no unit admitted past it (EngineConfig.koordinator).

Koordinator's tests write cpu in cores (createResourceList) or milli-cores
(createResourceList2) and memory in bytes; here both are in milli-units, as the engine
keeps them. Each step sets every quota's request (what Koordinator's
updateGroupDeltaRequestNoLock calls add up to); a step that edits quotas builds the tree
again, one that only moves requests goes through the tree's incremental path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from koordqueue.engine.model import QuotaInfo, ResourceList
from koordqueue.engine.tree import QuotaTree
from koordqueue.engine.waterfill import koordinator_fill

from .builders import GPU, G, engine_with, keys, quota, runtime, unit, used

GIB = 1024 * 1048576  # Koordinator's tests' GigaByte


def r(cpu: int, mem: int) -> ResourceList:
    """createResourceList: cpu in cores, memory in bytes."""
    return {"cpu": cpu * 1000, "memory": mem * 1000}


def r2(milli_cpu: int, mem: int) -> ResourceList:
    """createResourceList2: cpu in milli-cores, memory in bytes."""
    return {"cpu": milli_cpu, "memory": mem * 1000}


def q(name: str, parent: str | None, max_: ResourceList, min_: ResourceList, lend: bool = True,
      weight: ResourceList | None = None) -> QuotaInfo:
    """CreateQuota (its shared weight is its max unless said)."""
    return QuotaInfo(name, "default", dict(min_), dict(max_), parent, False, weight, lend)


@dataclass
class Step:
    requests: dict[str, ResourceList]
    expected: dict[str, ResourceList]
    quotas: list[QuotaInfo] | None = None  # new quotas (edited): the tree is built again
    total: ResourceList | None = None  # a new cluster total


@dataclass
class Case:
    total: ResourceList
    quotas: list[QuotaInfo]
    steps: list[Step] = field(default_factory=list)


CASES = {
    "TestRuntimeQuotaCalculator_UpdateOneGroupRuntimeQuota2": Case(
        r(120, 1200),
        [q("test1", None, r(80, 800), r(50, 500), weight=r(1, 1))],
        [Step({"test1": r(100, 1000)}, {"test1": r(80, 800)}),
         Step({"test1": r(100, 1000), "test2": r(150, 1500)}, {"test1": r(60, 600), "test2": r(60, 600)},
              quotas=[q("test1", None, r(80, 800), r(50, 500), weight=r(1, 1)),
                      q("test2", None, r(100, 1000), r(50, 500), weight=r(1, 1))])],
    ),
    "TestGroupQuotaManager_NotAllowLentResource": Case(
        r(100, 0),
        [q("test1", None, r(96, 0), r(60, 0)), q("test2", None, r(96, 0), r(40, 0), lend=False)],
        [Step({"test1": r(120, 0)}, {"test1": r(60, 0), "test2": r(40, 0)})],
    ),
    "TestGroupQuotaManager_NotAllowLentResource_2": Case(
        r(100, 0),
        [q("test-root", None, r(96, 0), r(60, 0), lend=False),
         q("test-child1", "test-root", r(96, 0), r(20, 0), lend=False),
         q("test-child2", "test-root", r(96, 0), r(20, 0), lend=False)],
        [Step({}, {"test-root": r(60, 0), "test-child1": r(20, 0), "test-child2": r(20, 0)}),
         Step({"test-child1": r(40, 0)}, {"test-root": r(60, 0), "test-child1": r(40, 0), "test-child2": r(20, 0)}),
         Step({"test-child1": r(60, 0)}, {"test-root": r(80, 0), "test-child1": r(60, 0), "test-child2": r(20, 0)})],
    ),
    "TestGroupQuotaManager_NotAllowLentResource_3": Case(
        r(100, 0),
        [q("test-root", None, r(96, 0), r(60, 0)),
         q("test-child1", "test-root", r(96, 0), r(20, 0), lend=False),
         q("test-child2", "test-root", r(96, 0), r(20, 0))],
        [Step({}, {"test-root": r(20, 0), "test-child1": r(20, 0), "test-child2": r(0, 0)}),
         Step({"test-child1": r(40, 0)}, {"test-root": r(40, 0), "test-child1": r(40, 0), "test-child2": r(0, 0)}),
         Step({"test-child1": r(60, 0)}, {"test-root": r(60, 0), "test-child1": r(60, 0), "test-child2": r(0, 0)})],
    ),
    "TestGroupQuotaManager_NotAllowLentResource_4": Case(
        r(100, 0),
        [q("test-root", None, r(96, 0), r(60, 0)),
         q("test-child1", "test-root", r(96, 0), r(20, 0), lend=False),
         q("test-child2", "test-root", r(96, 0), r(20, 0), lend=False)],
        [Step({}, {"test-root": r(40, 0), "test-child1": r(20, 0), "test-child2": r(20, 0)}),
         Step({"test-child1": r(40, 0)}, {"test-root": r(60, 0), "test-child1": r(40, 0), "test-child2": r(20, 0)}),
         Step({"test-child1": r(60, 0)}, {"test-root": r(80, 0), "test-child1": r(60, 0), "test-child2": r(20, 0)})],
    ),
    "TestGroupQuotaManager_UpdateQuotaRequest": Case(
        r(96, 160 * GIB),
        [q("test1", None, r(96, 160 * GIB), r(50, 80 * GIB)), q("test2", None, r(96, 160 * GIB), r(40, 80 * GIB))],
        [Step({"test1": r(60, 100 * GIB)}, {"test1": r(60, 100 * GIB)}),
         Step({"test1": r(120, 200 * GIB)}, {"test1": r(96, 160 * GIB)}),
         Step({"test1": r(120, 200 * GIB), "test2": r(150, 210 * GIB)},
              {"test1": r(53, 80 * GIB), "test2": r(43, 80 * GIB)})],
    ),
    "TestGroupQuotaManager_MultiUpdateQuotaRequest": Case(
        r(96, 160 * GIB),
        [q("test1", None, r(96, 160 * GIB), r(50, 80 * GIB)),
         q("test1-a", "test1", r(96, 160 * GIB), r(50, 80 * GIB)),
         q("a-123", "test1-a", r(96, 160 * GIB), r(50, 80 * GIB))],
        [Step({"a-123": r(96, 130 * GIB)},
              {"a-123": r(96, 130 * GIB), "test1-a": r(96, 130 * GIB), "test1": r(96, 130 * GIB)}),
         Step({"a-123": r(96, 130 * GIB)}, {"a-123": r(64, 128 * GIB)},  # a-123's max decreased
              quotas=[q("test1", None, r(96, 160 * GIB), r(50, 80 * GIB)),
                      q("test1-a", "test1", r(96, 160 * GIB), r(50, 80 * GIB)),
                      q("a-123", "test1-a", r(64, 128 * GIB), r(50, 80 * GIB), weight=r(96, 160 * GIB))]),
         Step({"a-123": r(96, 130 * GIB)}, {"a-123": r(96, 130 * GIB)},  # and increased
              quotas=[q("test1", None, r(96, 160 * GIB), r(50, 80 * GIB)),
                      q("test1-a", "test1", r(96, 160 * GIB), r(50, 80 * GIB)),
                      q("a-123", "test1-a", r(100, 200 * GIB), r(90, 160 * GIB), weight=r(96, 160 * GIB))])],
    ),
    "TestGroupQuotaManager_MultiUpdateQuotaRequest2": Case(
        r(96, 160 * GIB),
        [q("test1", None, r(96, 160 * GIB), r(80, 80 * GIB)),
         q("test1-a", "test1", r(60, 80 * GIB), r(50, 80 * GIB)),
         q("a-123", "test1-a", r(30, 60 * GIB), r(20, 40 * GIB))],
        [Step({"a-123": r(10, 30 * GIB)},
              {"a-123": r(10, 30 * GIB), "test1-a": r(10, 30 * GIB), "test1": r(10, 30 * GIB)}),
         Step({"a-123": r(25, 45 * GIB)}, {"a-123": r(25, 45 * GIB)}),
         Step({"a-123": r(55, 75 * GIB)}, {"a-123": r(30, 60 * GIB)})],
    ),
    "TestGroupQuotaManager_MultiUpdateQuotaRequest_WithScaledMinQuota1": Case(
        r(200, 200 * GIB),
        [q("p", None, r(1000, 1000 * GIB), r(300, 300 * GIB)),
         *(q(name, "p", r(1000, 1000 * GIB), r(100, 100 * GIB)) for name in "abc")],
        [Step({name: r(200, 200 * GIB) for name in "abc"},
              {"p": r(200, 200 * GIB), **{name: r2(66667, 200 * GIB // 3 + 1) for name in "abc"}}),
         Step({name: r(200, 200 * GIB) for name in "abc"},
              {"p": r(600, 600 * GIB), **{name: r(200, 200 * GIB) for name in "abc"}}, total=r(600, 600 * GIB))],
    ),
    "TestGroupQuotaManager_MultiUpdateQuotaRequest_WithScaledMinQuota2": Case(
        r(200, 200 * GIB),
        [q("p", None, r(1000, 1000 * GIB), r(300, 300 * GIB)),
         *(q(name, "p", r(1000, 1000 * GIB), r(100, 100 * GIB)) for name in "abc")],
        [Step({"a": r(200, 200 * GIB), "c": r(200, 200 * GIB)},
              {"p": r(200, 200 * GIB), "a": r(100, 100 * GIB), "b": r(0, 0), "c": r(100, 100 * GIB)})],
    ),
    "TestGroupQuotaManager_MultiChildMaxGreaterParentMax_MaxGreaterThanTotalRes": Case(
        r(300, 8000),
        [q("test1", None, r(600, 4096), r(100, 100)), q("test1-sub1", "test1", r(500, 2048), r(100, 100))],
        [Step({"test1-sub1": r(500, 4096)}, {"test1-sub1": r(300, 2048)}),
         Step({"test1-sub1": r(1050, 8192)}, {"test1": r(300, 2048), "test1-sub1": r(300, 2048)})],
    ),
    "TestGroupQuotaManager_MultiChildMaxGreaterParentMax": Case(
        r(350, 1800 * GIB),
        [q("test1", None, r(300, 1024 * GIB), r(176, 756 * GIB)),
         q("test1-sub1", "test1", r(500, 2048 * GIB), r(100, 512 * GIB))],
        [Step({"test1-sub1": r(400, 1500 * GIB)}, {"test1-sub1": r(300, 1024 * GIB)}),
         Step({"test1-sub1": r(800, 3000 * GIB)}, {"test1-sub1": r(300, 1024 * GIB)})],
    ),
    "TestGroupQuotaManager_RefreshAndGetRuntimeQuota_UpdateQuota": Case(
        r(50, 50),
        [q("1", None, r(40, 40), r(10, 10)), q("2", None, r(40, 40), r(0, 0))],
        [Step({}, {"1": r(0, 0)}),
         Step({"1": r(5, 5), "2": r(5, 5)}, {"1": r(5, 5), "2": r(5, 5)}),
         Step({"1": r(30, 30), "2": r(30, 30)}, {"1": r(30, 30), "2": r(20, 20)})],
    ),
    "TestGroupQuotaManager_UpdateOneGroupMaxQuota_UpdateQuota": Case(
        r(50, 50),
        [q("1", None, r(40, 40), r(10, 10)), q("2", None, r(40, 40), r(10, 10))],
        [Step({"1": r(35, 35), "2": r(35, 35)}, {"1": r(25, 25), "2": r(25, 25)}),
         Step({"1": r(35, 35), "2": r(35, 35)}, {"1": r(25, 25), "2": r(25, 25)},
              quotas=[q(n, None, r(30, 30), r(10, 10), weight=r(40, 40)) for n in "12"]),
         Step({"1": r(35, 35), "2": r(35, 35)}, {"1": r(25, 25), "2": r(25, 25)},
              quotas=[q(n, None, r(50, 50), r(10, 10), weight=r(40, 40)) for n in "12"])],
    ),
    "TestGroupQuotaManager_UpdateOneGroupMinQuota_UpdateQuota": Case(
        r(50, 50),
        [q("1", None, r(40, 40), r(10, 10)), q("2", None, r(40, 40), r(10, 10))],
        [Step({"1": r(15, 15), "2": r(15, 15)}, {"1": r(15, 15), "2": r(15, 15)}),
         *(Step({"1": r(15, 15), "2": r(15, 15)}, {"1": r(15, 15), "2": r(15, 15)},
                quotas=[q(n, None, r(40, 40), r(m, m)) for n in "12"]) for m in (15, 20, 5)),
         Step({"1": r(115, 115), "2": r(115, 115)}, {"1": r(40, 40), "2": r(10, 10)},
              quotas=[q("1", None, r(40, 40), r(40, 40)), q("2", None, r(40, 40), r(5, 5))])],
    ),
}


def _request(tree: QuotaTree, requests: dict[str, ResourceList], now: dict[str, ResourceList]) -> None:
    """Move each quota's request to ``requests`` (as pending units' requests)."""
    for name in set(requests) | set(now):
        node = tree.nodes.get(name)
        if node is None:
            continue
        before, after = now.get(name, {}), requests.get(name, {})
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
        if any(delta.values()):
            tree.add_pending(node, delta, 1)


@pytest.mark.parametrize("name", list(CASES))
def test_runtime_as_koordinator_computes_it(name: str) -> None:
    case = CASES[name]
    quotas, total = case.quotas, case.total
    tree = QuotaTree(quotas, total, koordinator=True)
    now: dict[str, ResourceList] = {}
    for number, step in enumerate(case.steps, start=1):
        if step.quotas is not None or step.total is not None:
            quotas = step.quotas if step.quotas is not None else quotas
            total = step.total if step.total is not None else total
            tree, now = QuotaTree(quotas, total, koordinator=True), {}
        _request(tree, step.requests, now)
        now = {k: dict(v) for k, v in step.requests.items()}
        tree.refresh()
        got = {quota: {k: tree.nodes[quota].runtime.get(k, 0) for k in want} for quota, want in step.expected.items()}
        assert got == step.expected, f"{name}, step {number}"


@pytest.mark.parametrize(
    ("case", "total", "mins", "demands", "weights", "expected"),
    [
        # TestRuntimeQuotaCalculator_IterationAdjustQuota (milli-cores; case3-node4.guarantee>min is
        # for ElasticQuotaGuaranteeUsage, a feature gate off by default: no guarantee here).
        ("case1-no-guarantee", 100, [10, 15, 20, 15], [5, 20, 40, 70], [40, 60, 50, 80], [5, 20, 35, 40]),
        ("case2-node4.sharedWeight=0", 100, [10, 15, 20, 15], [5, 20, 40, 70], [40, 60, 50, 0], [5, 20, 40, 15]),
    ],
)
def test_iteration_adjust_quota(case: str, total: int, mins: list[int], demands: list[int], weights: list[int],
                                expected: list[int]) -> None:
    assert koordinator_fill(total, mins, demands, weights, 1) == expected, case


@pytest.mark.parametrize(
    ("requests", "expected"),
    [((0, 90), (0, 90)), ((30, 90), (30, 70)), ((60, 90), (60, 50)), ((None, 90), (None, 90))],
)
def test_update_one_group_runtime_quota(requests: tuple[int | None, int], expected: tuple[int | None, int]) -> None:
    """TestRuntimeQuotaCalculator_UpdateOneGroupRuntimeQuota, its steps (None: test1
    deleted): the calculator alone, which scales no mins (its manager does), so that
    test2 keeps its min 50 when test1's 60 and it pass the total of 100. Memory is
    the same in tenfold and omitted."""
    mins, weights = [60_000, 50_000], [1000, 1000]
    kept = [i for i, ask in enumerate(requests) if ask is not None]
    shares = koordinator_fill(100_000, [mins[i] for i in kept], [requests[i] * 1000 for i in kept],  # type: ignore[operator]
                              [weights[i] for i in kept], 1, scale_mins=False)
    assert shares == [expected[i] * 1000 for i in kept]  # type: ignore[operator]


def test_with_scaled_min_quota_off() -> None:
    """TestGroupQuotaManager_MultiUpdateQuotaRequest_WithScaledMinQuota3: EnableMinQuotaScale
    off, p keeps its min 300 of a cluster of 200, and a, b, c their 100 each of it."""
    p = koordinator_fill(200_000, [300_000], [600_000], [1_000_000], 1, scale_mins=False)
    assert p == [300_000]
    assert koordinator_fill(p[0], [100_000] * 3, [200_000] * 3, [1_000_000] * 3, 1, scale_mins=False) == [100_000] * 3


def test_rounding_differs_from_ours() -> None:
    """Koordinator rounds each share half up on its own: of 10 GPUs asked 4, 3 and 3 by three
    teams alike, it gives 3, 3, 3 (one GPU left out), where our split gives 4, 3, 3."""
    assert koordinator_fill(10 * G, [0] * 3, [4 * G, 3 * G, 3 * G], [G] * 3, G) == [3 * G] * 3


def _teams(**config: object):  # type: ignore[no-untyped-def]
    a = quota("a", 2, 10)
    b = quota("b", 2, 10)
    return engine_with(a, b, capacity=10, **config)


def test_beside_koordinator_nothing_is_admitted_past_runtime() -> None:
    """a asks 4 + 4, b 4 of 10 GPUs (min 2 each, weights alike): runtimes 6 and 4, as
    Koordinator splits them; a's second unit would take a to 8 past its 6: it waits, and
    says why, where koord-scheduler would have left its pods Pending."""
    engine = _teams(koordinator=True)
    engine.set_unit(unit("a1", 4, "a", created=1))
    engine.set_unit(unit("a2", 4, "a", created=2))
    engine.set_unit(unit("b1", 4, "b", created=3))
    result = engine.schedule(0.0)
    assert sorted(keys(result.admitted)) == ["default/a1", "default/b1"]
    assert runtime(engine)["a"] == 6 and runtime(engine)["b"] == 4
    assert result.messages["default/a2"] == (
        f"waiting for quota a: {GPU} asks 4, used 4: over its runtime quota 6 as koord-scheduler computes it")
    assert engine.standing("default/a2").message == result.messages["default/a2"]  # type: ignore[union-attr]


@pytest.mark.parametrize("koordinator", [False, True])
def test_borrowing_past_runtime_only_without_koordinator(koordinator: bool) -> None:
    """a asks 4 + 4, b 6 of 10: runtimes 5 and 5. Without Koordinator b's 6 borrows past
    its runtime (idle GPUs are used); beside it, it waits."""
    engine = _teams(koordinator=koordinator)
    engine.set_unit(unit("a1", 4, "a", created=1))
    engine.set_unit(unit("a2", 4, "a", created=2))
    engine.set_unit(unit("b1", 6, "b", created=3))
    result = engine.schedule(0.0)
    assert runtime(engine)["a"] == runtime(engine)["b"] == 5
    if koordinator:
        assert keys(result.admitted) == ["default/a1"]
        assert "over its runtime quota 5 as koord-scheduler computes it" in result.messages["default/b1"]
    else:
        assert sorted(keys(result.admitted)) == ["default/a1", "default/b1"]
        assert used(engine)["b"] == 6 > runtime(engine)["b"]


def test_turned_on_later_the_engine_splits_again() -> None:
    """A controller in auto mode turns the mode on when it sees Koordinator's quotas."""
    engine = _teams()
    engine.set_unit(unit("a1", 4, "a", created=1))
    engine.set_unit(unit("a2", 4, "a", created=2))
    engine.set_unit(unit("b1", 4, "b", created=3))
    engine.set_koordinator(True)
    assert engine.koordinator
    assert sorted(keys(engine.schedule(0.0).admitted)) == ["default/a1", "default/b1"]


def test_reclaim_as_today_beside_koordinator() -> None:
    """a borrowed all 10 while b asked nothing; b's unit within its runtime takes back
    what it needs from a's units (reclaim), as without Koordinator."""
    engine = _teams(koordinator=True, protect_seconds=0.0)
    for i in range(5):
        engine.set_unit(unit(f"a{i}", 2, "a", created=i))
    assert len(engine.schedule(0.0).admitted) == 5
    engine.set_unit(unit("b1", 4, "b", created=10))
    result = engine.schedule(1.0)
    assert len(result.preempted) == 2 and keys(result.admitted) == ["default/b1"]


@pytest.mark.parametrize(("mode", "seen", "on"), [
    ("auto", False, False), ("auto", True, True), ("on", False, True), ("off", True, False)])
def test_settings_say_the_mode_and_publish_it(mode: str, seen: bool, on: bool) -> None:
    """The chart's koordinator.mode (--koordinator) reaches the engine, and `status` and
    `explain` read it back from the published settings."""
    from koordqueue.api.constants import KoordinatorMode
    from koordqueue.loader import Settings

    settings = Settings(koordinator=KoordinatorMode(mode))
    assert settings.engine_config(koordinator_seen=seen).koordinator is on
    assert Settings.from_data(settings.to_data()) == (settings, [])
    assert Settings.from_data({"koordinator": "maybe"})[1] == ["koordinator: unknown mode 'maybe'; using auto"]


def test_koordinator_would_cut_a_sibling_by_its_rounding() -> None:
    """Split on our demand (queued units counted) a's 4 fits its runtime of 7; but once its
    pods exist koord-scheduler sees requests 6, 3 and 8 of 17 and, rounding each share on
    its own, leaves c a runtime of 7 under the 8 it uses: c's pods not yet bound would be
    refused. a's unit waits, and says so."""
    from dataclasses import replace as copy

    from koordqueue.api.constants import SYSTEM_NAMESPACE

    engine = engine_with(quota("a", 3, 17, weight=4), quota("b", 1, 17, weight=4), quota("c", 1, 17, weight=3),
                         capacity=17, koordinator=True)
    for name, amount in (("a", 2), ("b", 3), ("c", 8)):
        engine.set_unit(copy(unit(f"{name}-held", amount, name), admitted_quota=name,
                             admitted_queue=f"{SYSTEM_NAMESPACE}/{name}", admitted_at=0.0))
    engine.set_unit(unit("a-next", 4, "a", created=1))
    for name, amount in (("a", 2), ("b", 4), ("c", 3)):
        engine.set_unit(unit(f"{name}-more", amount, name, created=2))
    result = engine.schedule(1.0)
    assert runtime(engine)["a"] == 7
    assert result.messages["default/a-next"] == (
        f"waiting for quota a: {GPU} asks 4; admitted, it would leave quota c a runtime quota of 7 as "
        "koord-scheduler computes it, less than the 8 it uses")
    assert "default/a-next" not in keys(result.admitted)
