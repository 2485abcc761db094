"""Non-preemptible units stay within min (issue 29, item 4).

A unit labelled ``quota.scheduling.koordinator.sh/preemptible: "false"`` is never a
victim, so what it borrows past its quota's min is never given back. As Koord-Queue
(its ElasticQuota plugin: ``UsedOverMinWithOverSell`` on the quota's non-preemptible
usage, for the quota and each parent), such a unit is admitted only while the
non-preemptible usage of its quota, and of each quota above it, plus its request stays
within min (times the oversell rate), per resource the quota limits (a min that does
not name a resource is 0 of it).
"""

from __future__ import annotations

import pytest

from koordqueue.api.constants import LABEL_PREEMPTIBLE, QueuePolicy

from .builders import engine_with, keys, parent, queue_of, quota, unit, used

NP = f'{LABEL_PREEMPTIBLE}: "false"'


def lender_and_borrower(protect: float = 0.0):  # type: ignore[no-untyped-def]
    """Quotas a and b (min 4, max 8 GPUs each) share a pool of 8."""
    return engine_with(parent("pool", 8, 8), quota("a", 4, 8, "pool"), quota("b", 4, 8, "pool"),
                       protect_seconds=protect)


def test_a_non_preemptible_unit_is_admitted_within_min() -> None:
    engine = lender_and_borrower()
    engine.set_unit(unit("keep", 4, "b", preemptible=False))
    assert keys(engine.schedule(0.0).admitted) == ["default/keep"]


def test_a_non_preemptible_unit_does_not_borrow_past_min_and_says_why() -> None:
    engine = lender_and_borrower()
    engine.set_unit(unit("keep", 4, "b", preemptible=False, created=0))
    engine.set_unit(unit("more", 2, "b", preemptible=False, created=1))
    result = engine.schedule(0.0)
    assert keys(result.admitted) == ["default/keep"]
    said = result.messages["default/more"]
    assert said.startswith("waiting for quota b: nvidia.com/gpu asks 2; ")
    assert NP in said and "use 4 of its min 4" in said
    standing = engine.standing("default/more")
    assert standing is not None and standing.message == said  # the reason worked out now says the same


def test_a_preemptible_unit_of_the_same_request_still_borrows() -> None:
    """The two are not one stream: the non-preemptible one's misfit says nothing of the other."""
    engine = lender_and_borrower()
    engine.set_unit(unit("keep", 4, "b", preemptible=False, created=0))
    engine.set_unit(unit("np", 2, "b", preemptible=False, created=1))
    engine.set_unit(unit("p", 2, "b", created=2))
    assert keys(engine.schedule(0.0).admitted) == ["default/keep", "default/p"]
    assert used(engine)["b"] == 6


def test_the_lender_gets_its_min_back() -> None:
    """b tries to take the whole pool with non-preemptible units: it gets its min, the
    rest it borrows preemptibly, and a takes that back."""
    engine = lender_and_borrower()
    for i in range(4):
        engine.set_unit(unit(f"b{i}", 2, "b", preemptible=False, created=i))
    engine.set_unit(unit("b-borrow", 4, "b", created=10))
    engine.schedule(0.0)
    assert used(engine)["b"] == 8
    engine.set_unit(unit("a1", 4, "a", created=20))
    result = engine.schedule(1.0)
    assert keys(result.preempted) == ["default/b-borrow"] and keys(result.admitted) == ["default/a1"]
    assert used(engine)["a"] == 4


def test_more_than_min_can_never_fit() -> None:
    engine = lender_and_borrower()
    engine.set_unit(unit("huge", 6, "b", preemptible=False))
    said = engine.schedule(0.0).messages["default/huge"]
    assert said.startswith("can never fit quota b: nvidia.com/gpu asks 6, more than its min 4")
    assert NP in said


def test_a_quota_without_min_admits_no_non_preemptible_unit() -> None:
    engine = engine_with(quota("team", 0, 8))
    engine.set_unit(unit("np", 1, "team", preemptible=False))
    result = engine.schedule(0.0)
    assert result.admitted == []
    assert result.messages["default/np"].startswith("can never fit quota team: nvidia.com/gpu asks 1, more than "
                                                     "its min 0")


def test_the_min_is_oversold_like_the_max() -> None:
    engine = engine_with(quota("team", 4, 8), oversell_rate=1.5)
    engine.set_unit(unit("np", 6, "team", preemptible=False))
    assert keys(engine.schedule(0.0).admitted) == ["default/np"]


def test_a_parent_min_limits_the_non_preemptible_usage_under_it() -> None:
    """Children's mins add up to at most their parent's; units loaded from before (a
    restart) may be past a child's min all the same: the parent's min still holds."""
    engine = engine_with(parent("pool", 4, 8), quota("a", 2, 8, "pool"), quota("b", 2, 8, "pool"))
    loaded = unit("old", 4, "b", preemptible=False)
    loaded.admitted_quota, loaded.admitted_queue, loaded.admitted_at = "b", "koord-queue/b", 0.0
    engine.set_unit(loaded)
    engine.set_unit(unit("np", 1, "a", preemptible=False, created=1))
    result = engine.schedule(1.0)
    assert result.admitted == []
    assert "its parent quota pool" in result.messages["default/np"]


def test_a_non_preemptible_unit_that_ends_lets_the_next_in() -> None:
    engine = lender_and_borrower()
    engine.set_unit(unit("keep", 4, "b", preemptible=False, created=0))
    engine.set_unit(unit("next", 4, "b", preemptible=False, created=1))
    assert keys(engine.schedule(0.0).admitted) == ["default/keep"]
    engine.remove_unit("default/keep")
    assert keys(engine.schedule(1.0).admitted) == ["default/next"]


def test_relabelled_non_preemptible_after_admission_stays_a_victim() -> None:
    """A tenant admitted preemptible, borrowing, who labels the job non-preemptible
    afterwards, keeps no borrowed room from the lender: the unit counts as it was admitted."""
    engine = lender_and_borrower()
    engine.set_unit(unit("borrow", 8, "b"))
    assert keys(engine.schedule(0.0).admitted) == ["default/borrow"]
    relabelled = engine.unit("default/borrow")
    assert relabelled is not None
    relabelled.preemptible = False
    engine.set_unit(relabelled)
    engine.set_unit(unit("a1", 4, "a", created=1))
    result = engine.schedule(1.0)
    assert keys(result.preempted) == ["default/borrow"] and keys(result.admitted) == ["default/a1"]


@pytest.mark.parametrize("policy", [QueuePolicy.BLOCK, QueuePolicy.INTELLIGENT])
def test_a_non_preemptible_unit_waiting_for_min_blocks_like_any_other(policy: QueuePolicy) -> None:
    """Past min now, within min later: it waits its turn as the policy says (it is not a never-fit)."""
    b = quota("b", 4, 8, "pool", policy=policy)
    engine = engine_with(parent("pool", 8, 8), quota("a", 4, 8, "pool"), b)
    engine.set_queue(queue_of(b, priority_threshold=0))
    engine.set_unit(unit("keep", 4, "b", preemptible=False, created=0))
    engine.set_unit(unit("np", 2, "b", preemptible=False, created=1))
    engine.set_unit(unit("p", 2, "b", created=2))
    result = engine.schedule(0.0)
    assert keys(result.admitted) == ["default/keep"]
    assert "blocked behind default/np" in result.messages["default/p"]
