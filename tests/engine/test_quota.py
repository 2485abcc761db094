"""Quota rules (SEMANTICS.md section 3): demand, runtime quota, admission along the
tree, lending, validation. Tables of cases built with the small builders."""

from __future__ import annotations

import pytest

from koordqueue.engine.model import QuotaInfo
from koordqueue.engine.validation import validate_quotas
from koordqueue.engine.waterfill import water_fill

from .builders import CPU, GPU, G, engine_with, keys, parent, quota, res, runtime, settle, unit, used

WORKED = dict(mins=[10, 15, 20, 15], weights=[40, 60, 50, 80], demands=[5, 20, 40, 70])


@pytest.mark.parametrize(
    ("total", "mins", "demands", "weights", "expected"),
    [
        pytest.param(100, [10, 15, 20, 15], [5, 20, 40, 70], [40, 60, 50, 80], [5, 20, 35, 40], id="worked-example"),
        pytest.param(100, [10, 15, 20, 15], [5, 20, 40, 70], [40, 60, 50, 0], [5, 20, 40, 15], id="fourth-weight-0"),
        pytest.param(None, [1, 1], [5, 7], [1, 1], [5, 7], id="unbounded"),
        pytest.param(100, [10, 10], [30, 40], [1, 1], [30, 40], id="enough-for-all"),
        pytest.param(10, [0, 0, 0], [10, 10, 10], [1, 1, 1], [4, 3, 3], id="remainder-to-first-by-name"),
        pytest.param(10, [6, 6], [8, 8], [1, 1], [5, 5], id="less-than-the-mins"),
        pytest.param(12, [0, 0], [2, 20], [1, 1], [2, 10], id="unused-share-handed-on"),
        pytest.param(9, [0, 0], [9, 9], [1, 2], [3, 6], id="by-weight"),
    ],
)
def test_water_fill(total, mins, demands, weights, expected) -> None:
    def scale(xs: list[int]) -> list[int]:
        return [x * G for x in xs]

    shares = water_fill(None if total is None else total * G, scale(mins), scale(demands), scale(weights))
    assert shares == scale(expected)


def test_water_fill_splits_milli_units_when_the_amounts_are_not_whole() -> None:
    assert water_fill(1001, [0, 0], [1001, 1001], [1, 1]) == [501, 500]


def four_children(weight_d: int = 80, capacity: int | None = None) -> list[QuotaInfo]:
    weights = [*WORKED["weights"][:3], weight_d]
    return [
        parent("pool", 60, 100),
        *(quota(name, m, 100, "pool", w) for name, m, w in zip("abcd", WORKED["mins"], weights, strict=True)),
    ]


@pytest.mark.parametrize(("weight_d", "expected"), [(80, [5, 20, 35, 40]), (0, [5, 20, 40, 15])])
def test_runtime_quota_of_the_worked_example(weight_d: int, expected: list[int]) -> None:
    engine = engine_with(*four_children(weight_d), capacity=100)
    for name, demand in zip("abcd", WORKED["demands"], strict=True):
        engine.set_unit(unit(f"{name}-all", demand, name))
    engine.schedule(0.0)
    # Admission is work-conserving, so what is admitted follows arrival; the runtime
    # quota follows demand, whoever holds the GPUs now.
    shares = runtime(engine)
    assert [shares[n] for n in "abcd"] == expected
    assert shares["pool"] == 100


@pytest.mark.parametrize(
    ("quotas", "admitted", "pending", "expected"),
    [
        pytest.param([quota("a", 2, 8)], [3], [4], {"a": 7}, id="used-plus-pending"),
        pytest.param([quota("a", 2, 8)], [3], [4, 4], {"a": 8}, id="capped-at-max"),
        pytest.param([quota("a", 6, 8, lend=False)], [1], [], {"a": 6}, id="not-lending-raised-to-min"),
        pytest.param([parent("p", 4, 20), quota("a", 2, 8, "p"), quota("b", 2, 8, "p")], [3], [9],
                     {"p": 11, "a": 3, "b": 8}, id="parent-sums-children"),
    ],
)
def test_demand(quotas, admitted, pending, expected) -> None:
    engine = engine_with(*quotas)
    leaves = [q.name for q in quotas if not q.is_parent]
    for i, gpus in enumerate(admitted):
        engine.set_unit(unit(f"run{i}", gpus, leaves[0], created=i))
    engine.schedule(0.0)
    for i, gpus in enumerate(pending):
        engine.set_unit(unit(f"wait{i}", gpus, leaves[-1], created=10 + i))
    engine.schedule(1.0)
    status = engine.quota_status()
    assert {name: status[name].demand[GPU] // G for name in expected} == expected


@pytest.mark.parametrize(
    ("quotas", "capacity", "requests", "expected"),
    [
        pytest.param([quota("a", 0, 8)], None, [5, 3, 1], ["r0", "r1"], id="leaf-max"),
        pytest.param([parent("p", 0, 6), quota("a", 0, 8, "p"), quota("b", 0, 8, "p")], None,
                     [("a", 4), ("b", 4), ("b", 2)], ["r0", "r2"], id="parent-max"),
        pytest.param([quota("a", 0, 8), quota("b", 0, 8)], 10, [("a", 6), ("b", 6), ("b", 4)],
                     ["r0", "r2"], id="cluster-total"),
        pytest.param([parent("top", 0, 10), parent("mid", 0, 5, parent="top"), quota("a", 0, 8, "mid")],
                     None, [4, 2, 1], ["r0", "r2"], id="every-ancestor"),
        pytest.param([quota("a", 2, 8)], 100, [6, 2], ["r0", "r1"], id="borrow-beyond-min"),
    ],
)
def test_admission_along_the_tree(quotas, capacity, requests, expected) -> None:
    engine = engine_with(*quotas, capacity=capacity)
    leaf = next(q.name for q in quotas if not q.is_parent)
    for i, request in enumerate(requests):
        name, gpus = request if isinstance(request, tuple) else (leaf, request)
        engine.set_unit(unit(f"r{i}", gpus, name, created=i))
    assert keys(engine.schedule(0.0).admitted) == [f"default/{k}" for k in expected]


def test_only_resources_named_in_max_are_limited() -> None:
    engine = engine_with(quota("gpus-only", 0, {"gpu": 2}))
    engine.set_unit(unit("lots-of-cpu", {"gpu": 1, "cpu": 500}, "gpus-only"))
    engine.set_unit(unit("too-many-gpus", {"gpu": 3}, "gpus-only", created=1))
    result = engine.schedule(0.0)
    assert keys(result.admitted) == ["default/lots-of-cpu"]
    assert engine.quota_status()["gpus-only"].used == res({"gpu": 1, "cpu": 500})


def test_a_parent_limits_a_resource_its_children_do_not() -> None:
    """The parent's demand then counts what the children use and ask for."""
    engine = engine_with(
        parent("p", {"gpu": 0, "cpu": 0}, {"gpu": 8, "cpu": 4}),
        quota("a", 0, {"gpu": 8}, "p"),
    )
    engine.set_unit(unit("a1", {"gpu": 1, "cpu": 3}, "a"))
    engine.set_unit(unit("a2", {"gpu": 1, "cpu": 3}, "a", created=1))
    result = engine.schedule(0.0)
    assert keys(result.admitted) == ["default/a1"]
    assert engine.quota_status()["p"].demand == res({"gpu": 2, "cpu": 4})
    assert "its parent quota p has used 3 of max 4" in result.messages["default/a2"]


class TestLending:
    """A quota that does not lend keeps its unused min out of its siblings' reach."""

    def make(self, lend: bool):  # type: ignore[no-untyped-def]
        engine = engine_with(parent("p", 8, 8), quota("keeper", 4, 8, "p", lend=lend), quota("other", 0, 8, "p"))
        for i in range(4):
            engine.set_unit(unit(f"o{i}", 2, "other", created=i))
        return engine

    @pytest.mark.parametrize(("lend", "others_get"), [(True, 8), (False, 4)])
    def test_the_others_may_use_only_what_is_not_kept(self, lend: bool, others_get: int) -> None:
        engine = self.make(lend)
        engine.schedule(0.0)
        assert used(engine)["other"] == others_get

    def test_what_the_keeper_uses_is_no_longer_kept_twice(self) -> None:
        engine = self.make(lend=False)
        engine.schedule(0.0)
        engine.set_unit(unit("k", 1, "keeper", created=10))
        engine.remove_unit("default/o0")
        result = engine.schedule(1.0)
        # 1 used by the keeper, 3 of its min kept: the other gets 8 - 1 - 3 = 4 back.
        assert sorted(keys(result.admitted)) == ["default/k", "default/o2"]
        assert used(engine) == {"p": 5, "keeper": 1, "other": 4}

    def test_a_keeper_using_beyond_its_min_keeps_nothing_more(self) -> None:
        engine = engine_with(parent("p", 8, 8), quota("keeper", 4, 8, "p", lend=False), quota("other", 0, 8, "p"))
        engine.set_unit(unit("k", 6, "keeper"))
        engine.set_unit(unit("o", 2, "other", created=1))
        engine.schedule(0.0)
        assert used(engine) == {"p": 8, "keeper": 6, "other": 2}

    def test_its_runtime_is_at_least_its_min(self) -> None:
        engine = self.make(lend=False)
        engine.schedule(0.0)
        assert runtime(engine)["keeper"] == 4


@pytest.mark.parametrize(
    ("quotas", "expected"),
    [
        pytest.param([quota("a", 9, 8)], {"a": "min of nvidia.com/gpu (9) is more than its max (8)"}, id="min>max"),
        pytest.param([quota("a", {"cpu": 1}, {"gpu": 1})], {"a": "min names cpu, which max does not"}, id="min-key"),
        pytest.param([quota("a", -1, 8)], {"a": "min of nvidia.com/gpu is negative (-1)"}, id="negative"),
        pytest.param([quota("a", 0, 8, parent="nowhere")], {"a": "its parent quota nowhere does not exist"},
                     id="missing-parent"),
        pytest.param([quota("p", 0, 8), quota("a", 0, 8, "p")],
                     {"a": 'its parent quota p is not marked as a parent (label is-parent: "true")'},
                     id="parent-not-marked"),
        pytest.param([parent("x", 0, 8, parent="y"), parent("y", 0, 8, parent="x"), quota("a", 0, 1, "x")],
                     {"x": "its parents form a cycle: x -> y -> x", "y": "its parents form a cycle: y -> x -> y",
                      "a": "its parent quota x is not used"}, id="cycle"),
        pytest.param([parent("p", 4, 8), quota("a", 3, 8, "p"), quota("b", 2, 8, "p"), quota("c", 1, 8, "p")],
                     {"b": "the mins of the children of p would add up to 5 of nvidia.com/gpu, more than its min (4)"},
                     id="children-min-sum"),
        pytest.param([parent("p", 4, 8), quota("a", 2, 8, "p"), quota("b", 2, 8, "p")], {}, id="valid"),
    ],
)
def test_validation(quotas: list[QuotaInfo], expected: dict[str, str]) -> None:
    assert validate_quotas({q.name: q for q in quotas}) == expected


def test_a_bad_quota_is_left_out_and_the_rest_works() -> None:
    engine = engine_with(quota("bad", 9, 8), quota("good", 0, 8))
    engine.set_unit(unit("u", 1, "bad"))
    engine.set_unit(unit("v", 1, "good"))
    result = engine.schedule(0.0)
    assert keys(result.admitted) == ["default/v"]
    assert result.messages["default/u"] == "quota bad is not usable: min of nvidia.com/gpu (9) is more than its max (8)"
    assert engine.quota_status()["bad"].valid is False


@pytest.mark.parametrize("how", ["made-invalid", "deleted"])
def test_the_running_units_of_a_quota_that_becomes_unusable_still_count_in_its_parent(how: str) -> None:
    """Seen on the real control plane: team-x's max edited below its min while two of its
    jobs ran; its units' room went to the cluster's root, not to their parent org, and
    org admitted team-y's jobs up to 24 GPUs against its max 16."""
    engine = engine_with(parent("org", 16, 16), quota("x", 8, 16, "org"), quota("y", 8, 16, "org"),
                         protect_seconds=0.0)
    for i in range(2):
        engine.set_unit(unit(f"x{i}", 4, "x", created=i))
    assert len(settle(engine, 1.0)) == 2
    if how == "made-invalid":
        engine.set_quota(quota("x", 8, 4, "org"))
    else:
        engine.remove_quota("x")
    for i in range(4):
        engine.set_unit(unit(f"y{i}", 4, "y", created=2 + i))
    admitted = settle(engine, 10.0)
    assert admitted == ["default/y0", "default/y1"]
    assert used(engine)["org"] == 16, "org counts x's running units and y's two"
    if how == "made-invalid":
        assert engine.quota_status()["x"].used == {GPU: 8 * G}, "x's own usage is still shown"
    engine.remove_unit("default/x0")
    assert settle(engine, 11.0) == ["default/y2"], "x0's room goes back to org"


def test_units_of_a_deleted_quota_under_a_deleted_parent_count_in_the_quota_above_both() -> None:
    engine = engine_with(parent("org", 8, 8), parent("mid", 8, 8, parent="org"), quota("x", 8, 8, "mid"),
                         quota("y", 0, 8, "org"))
    engine.set_unit(unit("x0", 6, "x"))
    assert settle(engine, 0.0) == ["default/x0"]
    engine.remove_quota("x")
    settle(engine, 1.0)  # a rebuild between the two deletions
    engine.remove_quota("mid")
    engine.set_unit(unit("y0", 4, "y", created=2))
    engine.set_unit(unit("y1", 2, "y", created=3))
    assert settle(engine, 3.0) == ["default/y1"]
    assert used(engine)["org"] == 8


def test_fixing_a_quota_lets_its_units_in() -> None:
    engine = engine_with(quota("team", 9, 8))
    engine.set_unit(unit("u", 1, "team"))
    assert engine.schedule(0.0).admitted == []
    engine.set_quota(quota("team", 2, 8))
    assert keys(engine.schedule(1.0).admitted) == ["default/u"]


def test_changing_a_max_takes_effect_at_the_next_cycle() -> None:
    engine = engine_with(quota("team", 0, 2))
    engine.set_unit(unit("u", 4, "team"))
    result = engine.schedule(0.0)
    assert result.messages["default/u"] == "can never fit quota team: nvidia.com/gpu asks 4, more than its max 2"
    engine.set_quota(quota("team", 0, 4))
    assert keys(engine.schedule(1.0).admitted) == ["default/u"]


def test_cluster_capacity_change_wakes_waiting_units() -> None:
    engine = engine_with(quota("team", 0, 8), capacity=2)
    engine.set_unit(unit("u", 4, "team"))
    assert engine.schedule(0.0).admitted == []
    engine.set_cluster_capacity({GPU: 4 * G, CPU: 0})
    assert keys(engine.schedule(1.0).admitted) == ["default/u"]
