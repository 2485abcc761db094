"""GPU models as flavors (engine/flavors.py, docs/gpus.md).

A team's parent quota has one leaf quota per GPU model, each carrying a node selector; a
job charged to the parent is admitted into the first flavor where it fits the quota chain
and the nodes, its pods pinned to that flavor's nodes; a job selecting a model goes only
to the flavor that agrees; Kueue's FlavorFungibility decides borrowing and preemption.
"""

from __future__ import annotations

from dataclasses import replace

from koordqueue.api.constants import FLAVOR_LEVEL
from koordqueue.engine.model import Requirement

from .builders import GPU, engine_with, gang, node, pod_set, quota, settle, used, with_nodes

PRODUCT = "nvidia.com/gpu.product"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


def team(h100: int = 8, a100: int = 16, order: tuple[str, ...] = ("team-h100", "team-a100"), borrow_first: bool = True,
         preempt_first: bool = False, h100_max: int | None = None) -> list:  # type: ignore[type-arg]
    parent = replace(quota("team", {GPU: h100 + a100}, {GPU: h100 + a100}, is_parent=True), flavor_order=order,
                     borrow_first=borrow_first, preempt_first=preempt_first)
    return [
        parent,
        replace(quota("team-h100", {GPU: h100}, {GPU: h100 if h100_max is None else h100_max}, parent="team"),
                node_selector=((PRODUCT, H100),)),
        replace(quota("team-a100", {GPU: a100}, {GPU: a100}, parent="team"), node_selector=((PRODUCT, A100),)),
    ]


def gpu_nodes(h100: int = 1, a100: int = 2):  # type: ignore[no-untyped-def]
    return [node(f"h100-{i}", 8, labels={PRODUCT: H100}) for i in range(h100)] + \
        [node(f"a100-{i}", 8, labels={PRODUCT: A100}) for i in range(a100)]


def one_gpu(name: str, **fields: object):  # type: ignore[no-untyped-def]
    return gang(name, pod_set("worker", 1, gpus=1, cpu=1, **fields), quota_name="team")


def admitted_into(engine, now: float = 0.0) -> dict[str, str]:  # type: ignore[no-untyped-def]
    out = {}
    for _ in range(50):
        result = engine.schedule(now)
        for a in result.admitted:
            out[a.unit.split("/")[1]] = a.quota
        if result.next_wakeup is None or result.next_wakeup > now:
            return out
    raise AssertionError("still busy")


def test_twenty_jobs_take_h100_first_then_a100() -> None:
    engine = with_nodes(engine_with(*team()), *gpu_nodes())
    for i in range(20):
        engine.set_unit(one_gpu(f"job-{i:02d}", ))
    got = admitted_into(engine)
    assert sorted(got.values()).count("team-h100") == 8
    assert sorted(got.values()).count("team-a100") == 12
    assert {got[f"job-{i:02d}"] for i in range(8)} == {"team-h100"}  # the first 8 in queue order
    assert used(engine) == {"team": 20, "team-h100": 8, "team-a100": 12}


def test_the_placement_pins_the_pods_to_the_flavor() -> None:
    engine = with_nodes(engine_with(*team()), *gpu_nodes())
    engine.set_unit(one_gpu("job"))
    (admission,) = engine.schedule(0.0).admitted
    assert admission.quota == "team-h100"
    assert admission.placement is not None
    assert admission.placement.domains == (("worker", FLAVOR_LEVEL, ((PRODUCT, H100),)),)
    assert {n for _, n, _ in admission.placement.nodes} == {"h100-0"}


def test_without_flavor_order_flavors_go_by_name() -> None:
    engine = with_nodes(engine_with(*team(order=())), *gpu_nodes())
    engine.set_unit(one_gpu("job"))
    (admission,) = engine.schedule(0.0).admitted
    assert admission.quota == "team-a100"


def test_a_flavor_without_nodes_is_passed_for_the_next() -> None:
    # H100 quota has room, but no H100 node has: the job goes to A100.
    engine = with_nodes(engine_with(*team()), *gpu_nodes(h100=0))
    engine.set_unit(one_gpu("job"))
    assert admitted_into(engine) == {"job": "team-a100"}


def test_a_job_selecting_h100_waits_while_h100_is_full() -> None:
    engine = with_nodes(engine_with(*team()), *gpu_nodes())
    for i in range(8):
        engine.set_unit(one_gpu(f"fill-{i}"))
    assert set(admitted_into(engine).values()) == {"team-h100"}
    engine.set_unit(one_gpu("picky", node_selector=((PRODUCT, H100),)))
    assert admitted_into(engine, 1.0) == {}
    message = engine.standing("default/picky").message
    assert message.startswith("waiting for flavor team-h100 of quota team (its pods select it; the other flavors "
                              "disagree): team-h100 (nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3): waiting for "
                              "quota team-h100: nvidia.com/gpu asks 1, used 8 of max 8")
    # One leaves: the picky job takes its place, not an A100.
    engine.remove_unit("default/fill-0")
    assert admitted_into(engine, 2.0) == {"picky": "team-h100"}


def test_required_affinity_selects_a_model_too() -> None:
    engine = with_nodes(engine_with(*team()), *gpu_nodes())
    term = (Requirement(PRODUCT, "In", (A100,)),)
    engine.set_unit(one_gpu("job", affinity=(term,)))
    assert admitted_into(engine) == {"job": "team-a100"}


def test_no_flavor_agrees_parks_the_job_saying_so() -> None:
    engine = with_nodes(engine_with(*team()), *gpu_nodes())
    engine.set_unit(one_gpu("job", node_selector=((PRODUCT, "NVIDIA-L40S"),)))
    assert admitted_into(engine) == {}
    assert engine.standing("default/job").message == (
        "no flavor of quota team agrees with the nodes its pods select; its flavors: team-h100 "
        "(nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3); team-a100 (nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB)")


def test_the_message_says_what_each_flavor_refused() -> None:
    engine = with_nodes(engine_with(*team(h100=1, a100=1)), node("h100-0", 1, labels={PRODUCT: H100}),
                        node("a100-0", 1, labels={PRODUCT: A100}))
    engine.set_unit(one_gpu("a"))
    engine.set_unit(one_gpu("b"))
    assert admitted_into(engine) == {"a": "team-h100", "b": "team-a100"}
    engine.set_unit(one_gpu("c", ))
    admitted_into(engine, 1.0)
    assert engine.standing("default/c").message == (
        "waiting for a flavor of quota team, tried in order: team-h100 (nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3): "
        "waiting for quota team-h100: nvidia.com/gpu asks 1, used 1 of max 1; team-a100 "
        "(nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB): waiting for quota team-a100: nvidia.com/gpu asks 1, used 1 "
        "of max 1")


def test_borrow_first_borrows_in_the_first_flavor() -> None:
    # team-h100 may borrow up to 16 (min 8): by default the 9th job borrows there.
    quotas = team(h100_max=16)
    quotas[0] = replace(quotas[0], max={GPU: 40 * 1000})
    engine = with_nodes(engine_with(*quotas), *gpu_nodes(h100=2))
    for i in range(9):
        engine.set_unit(one_gpu(f"job-{i}"))
    got = admitted_into(engine)
    assert list(got.values()).count("team-h100") == 9


def test_try_next_flavor_when_it_would_borrow() -> None:
    quotas = team(h100_max=16, borrow_first=False)
    quotas[0] = replace(quotas[0], max={GPU: 40 * 1000})
    engine = with_nodes(engine_with(*quotas), *gpu_nodes(h100=2))
    for i in range(9):
        engine.set_unit(one_gpu(f"job-{i}"))
    got = admitted_into(engine)
    assert list(got.values()).count("team-h100") == 8
    assert list(got.values()).count("team-a100") == 1


def test_a_job_charged_to_a_flavor_directly_is_pinned_too() -> None:
    engine = with_nodes(engine_with(*team()), *gpu_nodes())
    engine.set_unit(gang("job", pod_set("worker", 1, gpus=1, cpu=1), quota_name="team-a100"))
    (admission,) = engine.schedule(0.0).admitted
    assert admission.quota == "team-a100"
    assert admission.placement is not None
    assert admission.placement.domains == (("worker", FLAVOR_LEVEL, ((PRODUCT, A100),)),)
    assert {n for _, n, _ in admission.placement.nodes} <= {"a100-0", "a100-1"}


def test_an_unknown_name_in_flavor_order_is_a_problem_said() -> None:
    engine = with_nodes(engine_with(*team(order=("team-l40s", "team-a100"))), *gpu_nodes())
    # (named in the order, team-a100 comes first; team-h100 after it, by name)
    assert engine.flavor_problems() == {
        "team": "flavor order names team-l40s, which is no flavor of it (its flavors: team-a100, team-h100); ignored"}
    engine.set_unit(one_gpu("job"))
    assert admitted_into(engine) == {"job": "team-a100"}


def test_reclaim_in_a_flavor_takes_back_what_another_team_borrowed() -> None:
    # Team b borrows team a's idle H100 min (the cluster has 8 GPUs of each model); team a's
    # H100 job then reclaims it.
    a = team(h100=4, a100=4)
    b = [replace(q, name=q.name.replace("team", "other"), parent="other" if q.parent else None, flavor_order=())
         for q in team(4, 4)]
    b[1] = replace(b[1], max={GPU: 8 * 1000})
    b[0] = replace(b[0], max={GPU: 16 * 1000})
    engine = with_nodes(engine_with(*a, *b, protect_seconds=0.0, capacity={GPU: 16}),
                        node("h100-0", 8, labels={PRODUCT: H100}),
                        node("a100-0", 8, labels={PRODUCT: A100}))
    for i in range(8):
        engine.set_unit(gang(f"b-{i}", pod_set("worker", 1, gpus=1, cpu=1, node_selector=((PRODUCT, H100),)),
                             quota_name="other"))
    assert list(admitted_into(engine).values()).count("other-h100") == 8
    engine.set_unit(gang("a-0", pod_set("worker", 1, gpus=1, cpu=1, node_selector=((PRODUCT, H100),)),
                         quota_name="team"))
    result = engine.schedule(10.0)
    assert [p.quota for p in result.preempted] == ["other-h100"]
    assert result.preempted[0].unit == "default/b-7"  # the most recently admitted (all at once: the last)
    assert [(a.unit, a.quota) for a in result.admitted] == [("default/a-0", "team-h100")]


def test_demand_of_a_waiting_job_counts_at_its_first_flavor() -> None:
    engine = engine_with(*team())
    engine.set_unit(one_gpu("job", node_selector=((PRODUCT, A100),)))
    status = engine.quota_status()
    assert status["team-a100"].demand.get(GPU, 0) == 1000
    assert status["team-h100"].demand.get(GPU, 0) == 0
    settle(engine, 0.0)
    assert used(engine) == {"team": 1, "team-h100": 0, "team-a100": 1}


MIG = "nvidia.com/mig-1g.10gb"


def test_mig_slices_are_ordinary_resources_placed_where_advertised() -> None:
    from koordqueue.engine.model import NodeInfo, PodSetInfo, UnitInfo

    engine = with_nodes(engine_with(quota("team", {MIG: 7}, {MIG: 7})),
                        NodeInfo("mig-0", {MIG: 7000, "cpu": 8000}, {"kubernetes.io/hostname": "mig-0"}),
                        node("plain-0", 8))

    def job(name: str, slices: int) -> UnitInfo:
        ps = PodSetInfo("worker", 1, {MIG: slices * 1000, "cpu": 1000})
        return UnitInfo("default", name, 0, 0.0, dict(ps.request), quota_name="team", pod_sets=(ps,))

    engine.set_unit(job("a", 4))
    engine.set_unit(job("b", 4))
    (admission,) = engine.schedule(0.0).admitted
    assert admission.unit == "default/a"
    assert admission.placement is not None and {n for _, n, _ in admission.placement.nodes} == {"mig-0"}
    assert engine.standing("default/b").message == (
        "waiting for quota team: nvidia.com/mig-1g.10gb asks 4, used 4 of max 7")


def test_a_restarted_controller_charges_a_unit_where_its_status_says_it_was_admitted() -> None:
    from koordqueue.controller.unitsync import count_as_admitted
    from koordqueue.engine.model import Placement

    engine = with_nodes(engine_with(*team()), *gpu_nodes())
    info = one_gpu("job")
    # Its status: admitted with its pods pinned to A100 (as read back, one chain of labels).
    count_as_admitted(engine, info, 5.0, Placement(counts=(("worker", 1),),
                                                   domains=(("worker", PRODUCT, ((PRODUCT, A100),)),)))
    assert engine.unit("default/job").admitted_quota == "team-a100"
    assert used(engine) == {"team": 1, "team-h100": 0, "team-a100": 1}


def test_affinity_not_in_a_model_leaves_the_others() -> None:
    engine = with_nodes(engine_with(*team()), *gpu_nodes())
    engine.set_unit(one_gpu("job", affinity=((Requirement(PRODUCT, "NotIn", (H100,)),),)))
    engine.set_unit(one_gpu("any", affinity=((Requirement(PRODUCT, "DoesNotExist"),),
                                             (Requirement(PRODUCT, "In", (H100,)),))))
    assert admitted_into(engine) == {"job": "team-a100", "any": "team-h100"}


def test_a_parent_whose_flavors_are_all_unusable_takes_no_job() -> None:
    quotas = team()
    quotas[1] = replace(quotas[1], min={GPU: -1000})  # unusable (a negative min)
    quotas[2] = replace(quotas[2], min={GPU: -1000})
    engine = with_nodes(engine_with(*quotas), *gpu_nodes())
    engine.set_unit(one_gpu("job"))
    assert admitted_into(engine) == {}
    assert engine.standing("default/job").message == (
        "quota team is a parent quota; a job must use one of the quotas below it")
