"""Koord-Queue's own unit tests, translated case by case into what they mean for the engine.

Each test is named after the Go test (and sub-case) it stands for:

- ``pkg/queue/queuepolicies/schedulingqueuev2/schedulingqueuev2_test.go`` (the Priority and
  Block policies' queue): what is queued, in which order, and what leaves it;
- ``pkg/queue/queuepolicies/intelligentqueue/intelligentqueue_test.go`` (the Intelligent
  policy): its two bands by the threshold, the high one first-in-first-out and blocking;
- ``pkg/framework/plugins/elasticquota/elastic_quota_tree_test.go`` (the ElasticQuotaTree
  plugin): what fits a leaf (min for jobs that may not be preempted, max for the others),
  what a reservation charges, and which quota a unit maps to.
- ``.../elasticquota/elasticquotatree/elasticquota_test.go`` (the tree): usage as units come
  and go, lookups by namespace, name and full name, leaves and parents.
- ``.../schedulingqueuev2/job_failure_test.go``: a running job does not block a Block queue.
- ``pkg/queue/multischedulingqueue/multi_scheduling_queue_test.go``: a unit deleted, or whose
  queue is gone, leaves no trace in the queue it was in.
- ``pkg/controller/eventhandler_test.go`` and ``controller_test.go``: deletions, a Queue
  updated before it was added, and a queue's or a quota's waiting units.
- ``pkg/framework/plugins/elasticquotav1alpha1/elasticquota_test.go`` (the ElasticQuotaV2
  plugin): reservations charge the quota and its parent, and are given back.

Koord-Queue's tests look at the queue's inner state (its slice, ``assumed``, ``nextIdx``);
here the same facts are read where the engine shows them: the queue's positions, its
admissions, the quotas' usage and a unit's standing. The cases that are about Koord-Queue's
inner bookkeeping only, or where we decide otherwise, are in docs/migration.md ("Koord-Queue's
own tests"), with the reason.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from koordqueue.api.constants import (
    ELASTIC_QUOTA_TREE_KIND,
    QUOTA_TREE_API_VERSION,
    QUOTA_TREE_NAMESPACE,
    SYSTEM_NAMESPACE,
    QueuePolicy,
)
from koordqueue.api.quotatree import ParsedTree, parse_quota_tree
from koordqueue.engine import Engine

from .builders import CPU, G, engine_with, keys, parent, queue_of, quota, settle, unit, used

TEAM = f"{SYSTEM_NAMESPACE}/team"


def team(cpu: int = 100, policy: QueuePolicy = QueuePolicy.PRIORITY) -> Engine:
    """One quota (and its Queue) of ``cpu`` cores, as schedulingqueuev2_test.go's queue "test"."""
    return engine_with(quota("team", {"cpu": 0}, {"cpu": cpu}, policy=policy))


def job(name: str, priority: int, created: float = 0.0, cpu: int = 1, quota_name: str = "team"):  # type: ignore[no-untyped-def]
    """makeTestQueueUnit: one pod of 1 cpu (and 1Gi, left out: no quota names memory)."""
    return unit(name, {"cpu": cpu}, quota_name, priority=priority, created=created)


def order(engine: Engine, queue: str = TEAM) -> list[tuple[str, int]]:
    """The queue's pending units, first first, with their priorities (SortedList's view)."""
    return [(s.unit.removeprefix("default/"), s.priority) for s in engine.queue_positions().get(queue, [])]


def hold(engine: Engine) -> None:
    """Keep everything pending: a quota of no room, so the queue's order can be read."""
    engine.set_quota(quota("team", {"cpu": 0}, {"cpu": 0}))


# --- schedulingqueuev2_test.go ------------------------------------------------------------


def test_add_queue_unit_info() -> None:
    """TestAddQueueUnitInfo: a unit is queued once; adding it again adds nothing."""
    engine = team()
    hold(engine)
    engine.set_unit(job("job1", 10))
    engine.set_unit(job("job1", 10))
    assert order(engine) == [("job1", 10)]


def test_delete() -> None:
    """TestDelete: a deleted unit leaves the queue."""
    engine = team()
    hold(engine)
    engine.set_unit(job("job1", 10))
    engine.remove_unit("default/job1")
    assert order(engine) == []


def test_update() -> None:
    """TestUpdate: a unit whose priority changes stays one entry, with the new priority."""
    engine = team()
    hold(engine)
    engine.set_unit(job("job1", 10))
    engine.set_unit(job("job1", 20))
    assert order(engine) == [("job1", 20)]


def test_next() -> None:
    """TestNext: the higher priority is taken first; once it is admitted, the lower one."""
    engine = engine_with(quota("team", {"cpu": 0}, {"cpu": 1}))  # room for one at a time
    engine.set_unit(job("job1", 10))
    engine.set_unit(job("job2", 20))
    assert keys(engine.schedule(1.0).admitted) == ["default/job2"]
    engine.remove_unit("default/job2")
    assert keys(engine.schedule(2.0).admitted) == ["default/job1"]


def test_length() -> None:
    """TestLength: two pending units, then one after a deletion."""
    engine = team()
    hold(engine)
    engine.set_unit(job("job1", 10))
    engine.set_unit(job("job2", 20))
    assert len(order(engine)) == 2
    engine.remove_unit("default/job1")
    assert len(order(engine)) == 1


def test_sorted_list() -> None:
    """TestSortedList: the queue lists its units by priority, positions from 1."""
    engine = team()
    hold(engine)
    for name, priority in (("job1", 10), ("job2", 20), ("job3", 15)):
        engine.set_unit(job(name, priority))
    assert order(engine) == [("job2", 20), ("job3", 15), ("job1", 10)]
    assert [s.position for s in engine.queue_positions()[TEAM]] == [1, 2, 3]


def test_reserve() -> None:
    """TestReserve: a unit reserved (admitted) holds its quota from then on."""
    engine = team()
    engine.set_unit(job("job1", 10))
    assert keys(engine.schedule(1.0).admitted) == ["default/job1"]
    assert used(engine, CPU)["team"] == 1 and order(engine) == []


def test_wait_for_pods_running_reserve() -> None:
    """TestWaitForPodsRunningReserve (its second half): with wait-for-pods-running, while an
    admitted unit's pods do not all run, the queue admits nothing more ("no more queueUnit
    allowed to schedule in this queue"); once they run, the next is admitted."""
    engine = team()
    engine.set_queue(queue_of(quota("team", {"cpu": 0}, {"cpu": 100}), wait_for_pods_running=True))
    engine.set_unit(job("job2", 12))
    assert keys(engine.schedule(1.0).admitted) == ["default/job2"]
    engine.set_unit(job("job1", 10, created=1.0))
    assert engine.schedule(2.0).admitted == []
    engine.set_pods_running("default/job2", True)
    assert keys(engine.schedule(3.0).admitted) == ["default/job1"]



def test_indexed_job_failure_does_not_block_queue_all_pods_running() -> None:
    """job_failure_test.go TestIndexedJobFailureDoesNotBlockQueue/all_pods_running: in a Block
    queue with wait-for-pods-running, a job admitted with all its pods running lets the next
    one be admitted."""
    engine = team(policy=QueuePolicy.BLOCK)
    engine.set_queue(queue_of(quota("team", {"cpu": 0}, {"cpu": 100}, policy=QueuePolicy.BLOCK),
                              wait_for_pods_running=True))
    engine.set_unit(job("job", 10, cpu=2))
    assert keys(engine.schedule(1.0).admitted) == ["default/job"]
    engine.set_pods_running("default/job", True)
    engine.set_unit(job("next", 5, created=2.0))
    assert keys(engine.schedule(3.0).admitted) == ["default/next"]

def test_fix() -> None:
    """TestFix: a unit whose mapping now says another queue leaves this one for it."""
    engine = engine_with(quota("team", {"cpu": 0}, {"cpu": 0}), quota("other", {"cpu": 0}, {"cpu": 0}))
    engine.set_unit(job("job1", 10))
    assert order(engine) == [("job1", 10)]
    engine.set_unit(job("job1", 10, quota_name="other"))
    assert order(engine) == [] and order(engine, f"{SYSTEM_NAMESPACE}/other") == [("job1", 10)]


# TestLess: (name, a, b, a first?) with a and b as (name, priority, created).
LESS = [
    ("Same UID", ("pod1", 10, 0.0), ("pod1", 5, 1.0), None),
    ("a higher priority", ("pod1", 10, 0.0), ("pod2", 5, 0.0), True),
    ("b higher priority", ("pod1", 5, 0.0), ("pod2", 10, 0.0), False),
    ("equal priority, a earlier timestamp", ("pod1", 5, 0.0), ("pod2", 5, 1.0), True),
    ("equal priority, b earlier timestamp", ("pod1", 5, 1.0), ("pod2", 5, 0.0), False),
    ("equal priority and timestamp, a.Name < b.Name", ("pod1", 5, 0.0), ("pod2", 5, 0.0), True),
    ("equal priority and timestamp, a.Name > b.Name", ("pod2", 5, 0.0), ("pod1", 5, 0.0), False),
]


@pytest.mark.parametrize(("a", "b", "a_first"), [pytest.param(a, b, f, id=name) for name, a, b, f in LESS])
def test_less(a: tuple[str, int, float], b: tuple[str, int, float], a_first: bool | None) -> None:
    """TestLess: priority first, then the earlier, then the name; the same unit is one entry
    (the later write of it counts)."""
    engine = team()
    hold(engine)
    for name, priority, created in (a, b):
        engine.set_unit(job(name, priority, created))
    if a_first is None:
        assert order(engine) == [(b[0], b[1])]
    else:
        first, second = (a, b) if a_first else (b, a)
        assert order(engine) == [(first[0], first[1]), (second[0], second[1])]


def test_priority_queue_update_priority() -> None:
    """TestPriorityQueue_UpdatePriority: raising a unit's priority moves it ahead, lowering
    it moves it back; the queue keeps two entries."""
    engine = team()
    hold(engine)
    engine.set_unit(job("job1", 10))
    engine.set_unit(job("job2", 11))
    assert order(engine) == [("job2", 11), ("job1", 10)]
    engine.set_unit(job("job1", 20))
    assert order(engine) == [("job1", 20), ("job2", 11)]
    engine.set_unit(job("job1", 5))
    assert order(engine) == [("job2", 11), ("job1", 5)]


def test_priority_queue_update_priority_order() -> None:
    """TestPriorityQueue_UpdatePriorityOrder: 30, 20, 10; the 10 raised to 25 goes second."""
    engine = team()
    hold(engine)
    for name, priority in (("job1", 10), ("job2", 20), ("job3", 30)):
        engine.set_unit(job(name, priority))
    assert order(engine) == [("job3", 30), ("job2", 20), ("job1", 10)]
    engine.set_unit(job("job1", 25))
    assert order(engine) == [("job3", 30), ("job1", 25), ("job2", 20)]


def test_priority_queue_update_no_change() -> None:
    """TestPriorityQueue_UpdateNoChange: a write that changes neither status nor priority
    leaves the unit where it stands."""
    engine = team()
    hold(engine)
    engine.set_unit(job("job1", 10))
    engine.set_unit(job("job2", 5, created=1.0))
    before = engine.queue_positions()[TEAM]
    engine.set_unit(job("job1", 10))
    assert engine.queue_positions()[TEAM] == before


# --- elastic_quota_tree_test.go -------------------------------------------------------------


def tree_with_child(min_cpu: int, max_cpu: int) -> Engine:
    """queueunits.ElasticQuotaTree(10 cpu, 10 cpu).Child("child1", ["default"], min, max)."""
    return engine_with(parent("root", {"cpu": 10}, {"cpu": 10}),
                       quota("child1", {"cpu": min_cpu}, {"cpu": max_cpu}, parent="root", ns="",
                             namespaces=("default",)))


# TestFilter: (name, preemptible, replicas of 1 cpu, child min, child max, admitted?).
FILTER = [
    ("Valid non-preemptible request within min", False, 1, 1, 10, True),
    ("Invalid non-preemptible request over min", False, 3, 0, 10, False),
    ("Valid preemptible request within max", True, 1, 1, 1, True),
    ("Invalid preemptible request over max", True, 3, 0, 0, False),
]


@pytest.mark.parametrize(("preemptible", "replicas", "min_cpu", "max_cpu", "admitted"),
                         [pytest.param(*case[1:], id=case[0]) for case in FILTER])
def test_filter(preemptible: bool, replicas: int, min_cpu: int, max_cpu: int, admitted: bool) -> None:
    """TestFilter: a job that may not be preempted fits within its quota's min; one that
    may, within its max (and not past it)."""
    engine = tree_with_child(min_cpu, max_cpu)
    engine.set_unit(replace(unit("unit-1", {"cpu": replicas}), preemptible=preemptible))
    assert keys(engine.schedule(1.0).admitted) == (["default/unit-1"] if admitted else [])


def test_elastic_quota_tree_reserve() -> None:
    """TestReserve (its first half): reserving a unit of 1 cpu charges its leaf 1000
    milli-cpu; its dequeue does not charge it again."""
    engine = tree_with_child(1, 10)
    engine.set_unit(unit("unit-1", {"cpu": 1}))
    settle(engine, 1.0)
    assert engine.quota_status()["child1"].used[CPU] == 1 * G
    settle(engine, 2.0)  # (DequeueComplete: nothing new)
    assert engine.quota_status()["child1"].used[CPU] == 1 * G


def test_reserve_concurrent() -> None:
    """TestReserveConcurrent: a unit reserved ten times at once is charged once."""
    engine = tree_with_child(1, 10)
    for _ in range(10):
        engine.set_unit(unit("unit-1", {"cpu": 2}))
    settle(engine, 1.0)
    assert engine.quota_status()["child1"].used[CPU] == 2 * G


def test_get_elastic_quota_info_without_lock_get_quota_by_namespace() -> None:
    """TestGetElasticQuotaInfoWithoutLock/Get quota by namespace: a unit that names no quota
    maps to the one listing its namespace."""
    engine = engine_with(parent("root", 8, 8), quota("test-quota", 0, 8, parent="root", ns="",
                                                     namespaces=("test-namespace",)))
    engine.set_unit(unit("test-unit", 1, ns="test-namespace"))
    standing = engine.standing("test-namespace/test-unit")
    assert standing is not None and standing.quota == "test-quota"


def test_get_elastic_quota_info_without_lock_get_quota_by_label() -> None:
    """TestGetElasticQuotaInfoWithoutLock/Get quota by label: the quota the unit's label names."""
    engine = engine_with(parent("root", 8, 8),
                         quota("test-quota", 0, 8, parent="root", ns="", namespaces=("test-namespace",)),
                         quota("test-label-quota", 0, 8, parent="root", ns="", namespaces=("test-namespace",)))
    engine.set_unit(unit("test-unit", 1, "test-label-quota", ns="test-namespace"))
    standing = engine.standing("test-namespace/test-unit")
    assert standing is not None and standing.quota == "test-label-quota"


def test_get_elastic_quota_info_without_lock_quota_not_available_in_namespace() -> None:
    """TestGetElasticQuotaInfoWithoutLock/Quota not available in namespace with feature enabled:
    a label naming a quota the namespace may not use is refused, with the reason (here always,
    not behind ElasticQuotaTreeCheckAvailableQuota: a label is no way around a quota)."""
    engine = engine_with(parent("root", 8, 8),
                         quota("test-unavailable-quota", 0, 8, parent="root", ns="", namespaces=("elsewhere",)))
    engine.set_unit(unit("test-unit", 1, "test-unavailable-quota", ns="test-namespace"))
    result = engine.schedule(1.0)
    assert result.admitted == []
    assert "is not bound to namespace test-namespace" in result.messages["test-namespace/test-unit"]


def test_get_elastic_quota_info_without_lock_queue_unit_does_not_belong_to_any_elastic_quota() -> None:
    """TestGetElasticQuotaInfoWithoutLock/QueueUnit does not belong to any elastic quota: it is
    not queued, and says why."""
    engine = engine_with(parent("root", 8, 8), quota("other", 0, 8, parent="root", ns="", namespaces=("n",)))
    engine.set_unit(unit("test-unit", 1, ns="test-namespace"))
    result = engine.schedule(1.0)
    assert result.admitted == []
    message = result.messages["test-namespace/test-unit"]
    assert "test-namespace" in message, message


# --- intelligentqueue_test.go ----------------------------------------------------------------


def intelligent(threshold: int = 4) -> Engine:
    """A team of 8 GPUs on the Intelligent policy (koord-queue/priority-threshold), 4 in use."""
    engine = engine_with(quota("team", 0, 8, policy=QueuePolicy.INTELLIGENT, threshold=threshold))
    engine.set_unit(unit("running", 4, "team"))
    engine.schedule(0.0)
    return engine


def blocks(engine: Engine, priority: int, now: float = 1.0) -> bool:
    """Whether a unit of ``priority`` that does not fit (6 GPUs) keeps a later one of
    priority 0 that fits (2 GPUs) waiting: the high band is first-in-first-out and blocks,
    the low band is passed over."""
    engine.set_unit(unit("big", 6, "team", priority=priority, created=now))
    engine.set_unit(unit("small", 2, "team", priority=0, created=now + 0.5))
    admitted = keys(engine.schedule(now + 1).admitted)
    assert "default/big" not in admitted
    return "default/small" not in admitted


@pytest.mark.parametrize(("a", "b"), [pytest.param(10, 5, id="higher priority should come first"),
                                      pytest.param(5, 10, id="lower priority should come after")])
def test_priority_less(a: int, b: int) -> None:
    """TestPriorityLess: within a band, the higher priority first."""
    engine = engine_with(quota("team", 0, 0, policy=QueuePolicy.INTELLIGENT, threshold=100))  # low band
    engine.set_unit(unit("job1", 1, "team", priority=a))
    engine.set_unit(unit("job2", 1, "team", priority=b))
    assert [name for name, _ in order(engine)] == (["job1", "job2"] if a > b else ["job2", "job1"])


@pytest.mark.parametrize(("priority", "high"), [pytest.param(5, True, id="high priority task (priority >= 4)"),
                                                pytest.param(2, False, id="low priority task (priority < 4)"),
                                                pytest.param(4, True, id="boundary case (priority == 4)")])
def test_intelligent_queue_distribute_to_queue(priority: int, high: bool) -> None:
    """TestIntelligentQueue_DistributeToQueue: with threshold 4, priorities of 4 and more are
    the high band (which blocks), lower ones the low band (passed over)."""
    assert blocks(intelligent(threshold=4), priority) is high


def test_intelligent_queue_add_queue_unit_info() -> None:
    """TestIntelligentQueue_AddQueueUnitInfo: a high and a low unit are queued, a duplicate is not."""
    engine = engine_with(quota("team", 0, 0, policy=QueuePolicy.INTELLIGENT, threshold=4))
    high, low = unit("high-job", 1, "team", priority=5), unit("low-job", 1, "team", priority=2)
    for u in (high, low, high):
        engine.set_unit(u)
    assert [name for name, _ in order(engine)] == ["high-job", "low-job"]


def test_intelligent_queue_top() -> None:
    """TestIntelligentQueue_Top: an empty queue has no head; a low unit alone is the head;
    a high unit added comes before it."""
    engine = engine_with(quota("team", 0, 0, policy=QueuePolicy.INTELLIGENT, threshold=4))
    assert order(engine) == []
    engine.set_unit(unit("low-job", 1, "team", priority=2))
    assert order(engine)[0][0] == "low-job"
    engine.set_unit(unit("high-job", 1, "team", priority=5, created=1.0))
    assert order(engine)[0][0] == "high-job"


@pytest.mark.parametrize(("threshold", "job2_blocks"), [pytest.param(4, True, id="threshold 4"),
                                                        pytest.param(6, False, id="updated to 6"),
                                                        pytest.param(2, True, id="updated to 2")])
def test_intelligent_queue_threshold_update(threshold: int, job2_blocks: bool) -> None:
    """TestIntelligentQueue_ThresholdUpdate: the Queue's threshold, changed, moves units
    between the bands: a unit of priority 5 is high (blocking) at 4 and at 2, low at 6."""
    engine = intelligent(threshold=4)
    engine.set_queue(queue_of(quota("team", 0, 8, policy=QueuePolicy.INTELLIGENT), priority_threshold=threshold))
    assert blocks(engine, 5) is job2_blocks


def test_intelligent_queue_high_priority_blocking_behavior() -> None:
    """TestIntelligentQueue_HighPriorityBlockingBehavior: a high unit that does not fit stays
    at the head and nothing passes it; once it is gone, the low units are looked at in order
    of arrival and one that does not fit is passed over."""
    engine = intelligent()
    engine.set_unit(unit("high-job", 6, "team", priority=5, created=1.0))
    engine.set_unit(unit("low-job-1", 6, "team", priority=2, created=2.0))
    engine.set_unit(unit("low-job-2", 2, "team", priority=2, created=3.0))
    engine.set_unit(unit("low-job-3", 2, "team", priority=2, created=4.0))
    assert engine.schedule(5.0).admitted == []
    assert [name for name, _ in order(engine)] == ["high-job", "low-job-1", "low-job-2", "low-job-3"]
    engine.remove_unit("default/high-job")
    assert keys(engine.schedule(6.0).admitted) == ["default/low-job-2", "default/low-job-3"]


# --- elasticquotatree/elasticquota_test.go ----------------------------------------------------


def koord_tree(*children: dict[str, object]) -> ParsedTree:
    """An ElasticQuotaTree as the Go tests build it (cpu and memory), read as the controller does."""
    return parse_quota_tree({"apiVersion": QUOTA_TREE_API_VERSION, "kind": ELASTIC_QUOTA_TREE_KIND,
                             "metadata": {"name": "tree", "namespace": QUOTA_TREE_NAMESPACE},
                             "spec": {"root": {"name": "root", "min": {"cpu": "10", "memory": "20Gi"},
                                               "max": {"cpu": "10", "memory": "20Gi"},
                                               "children": list(children)}}})


TEST_QUOTA = {"name": "test-quota", "namespaces": ["test-namespace"], "min": {"cpu": "1", "memory": "1Gi"},
              "max": {"cpu": "2", "memory": "2Gi"}}


def loaded(parsed: ParsedTree) -> Engine:
    return engine_with(*parsed.quotas.values())


def cpu_mem(cpu_milli: int, mem_gi: float) -> dict[str, int]:
    """Milli-units of cpu (milli-cores) and memory (bytes), as the engine keeps them."""
    return {CPU: cpu_milli, "memory": int(mem_gi * 2**30) * 1000}


@pytest.mark.parametrize(("preemptible", "remove", "expected"), [
    pytest.param(False, False, (3, 3), id="Reserve non-preemptible resource"),
    pytest.param(False, True, (1, 1), id="Unreserve non-preemptible resource"),
    pytest.param(True, False, (3, 3), id="Reserve preemptible resource"),
])
def test_reserve_resource(preemptible: bool, remove: bool, expected: tuple[int, int]) -> None:
    """TestReserveResource: a quota using 2 cpu and 2Gi reserves 1 and 1Gi more (3, 3Gi), or
    releases 1 and 1Gi (1, 1Gi)."""
    engine = loaded(koord_tree({**TEST_QUOTA, "min": {"cpu": "4", "memory": "4Gi"},
                                "max": {"cpu": "4", "memory": "4Gi"}}))
    for name in ("used-1", "used-2"):
        engine.set_unit(replace(unit(name, {}, ns="test-namespace"), request=cpu_mem(1000, 1)))
    settle(engine, 1.0)
    if remove:
        engine.remove_unit("test-namespace/used-2")
    else:
        engine.set_unit(replace(unit("job", {}, ns="test-namespace"), request=cpu_mem(1000, 1),
                                preemptible=preemptible))
    settle(engine, 2.0)
    used_now = engine.quota_status()["test-quota"].used
    assert (used_now[CPU] // G, used_now["memory"] // G // 2**30) == expected


def test_elastic_quota_tree_get_elastic_quota_info_by_namespace() -> None:
    """TestElasticQuotaTree_GetElasticQuotaInfoByNamespace: a namespace a leaf lists maps to
    it; another maps to none (its units wait, saying so)."""
    engine = loaded(koord_tree(TEST_QUOTA))
    engine.set_unit(unit("a", {"cpu": 1}, ns="test-namespace"))
    engine.set_unit(unit("b", {"cpu": 1}, ns="non-existent-namespace"))
    result = engine.schedule(1.0)
    standing = engine.standing("test-namespace/a")
    assert keys(result.admitted) == ["test-namespace/a"] and standing is not None and standing.quota == "test-quota"
    assert "non-existent-namespace" in result.messages["non-existent-namespace/b"]


def test_elastic_quota_tree_get_elastic_quota_info_by_name() -> None:
    """TestElasticQuotaTree_GetElasticQuotaInfoByName: a quota named by a unit's label is found
    by its name; a name no quota has is not."""
    engine = loaded(koord_tree(TEST_QUOTA))
    engine.set_unit(unit("a", {"cpu": 1}, "test-quota", ns="test-namespace"))
    engine.set_unit(unit("b", {"cpu": 1}, "non-existent-quota", ns="test-namespace"))
    result = engine.schedule(1.0)
    assert keys(result.admitted) == ["test-namespace/a"]
    assert result.messages["test-namespace/b"] == "quota non-existent-quota not found"


def test_elastic_quota_tree_get_elastic_quota_info_by_full_name() -> None:
    """TestElasticQuotaTree_GetElasticQuotaInfoByFullName: root/test-quota is test-quota."""
    parsed = koord_tree(TEST_QUOTA)
    assert parsed.paths["test-quota"] == "root/test-quota"
    assert "root/non-existent-quota" not in parsed.paths.values()


def test_elastic_quota_info_used_over_max() -> None:
    """TestElasticQuotaInfo_UsedOverMax: 1.5 cpu used of a max of 2: 1 more is over it,
    0.1 is not."""
    engine = loaded(koord_tree(TEST_QUOTA))
    engine.set_unit(replace(unit("used", {}, ns="test-namespace"), request={CPU: 1500}))
    settle(engine, 1.0)
    engine.set_unit(replace(unit("over", {}, ns="test-namespace", created=2.0), request={CPU: 1000}))
    engine.set_unit(replace(unit("within", {}, ns="test-namespace", created=3.0), request={CPU: 100}))
    assert settle(engine, 4.0) == ["test-namespace/within"]


def test_elastic_quota_info_is_leaf() -> None:
    """TestElasticQuotaInfo_IsLeaf: a quota is a leaf until it has a child."""
    parsed = koord_tree({"name": "test-quota", "min": {"cpu": "1"}, "max": {"cpu": "1"},
                         "children": [{"name": "child-quota", "min": {"cpu": "1"}, "max": {"cpu": "1"}}]})
    assert parsed.quotas["test-quota"].is_parent and not parsed.quotas["child-quota"].is_parent


def test_elastic_quota_info_get_parent() -> None:
    """TestElasticQuotaInfo_GetParent: a child's parent is the quota above it; the root has none."""
    parsed = koord_tree({"name": "parent-quota", "min": {"cpu": "1"}, "max": {"cpu": "1"},
                         "children": [{"name": "child-quota", "min": {"cpu": "1"}, "max": {"cpu": "1"}}]})
    assert parsed.quotas["child-quota"].parent == "parent-quota"
    assert parsed.quotas["root"].parent is None


# --- multi_scheduling_queue_test.go ------------------------------------------------------------


def test_delete_queue_unit_clears_mapping() -> None:
    """TestDeleteQueueUnitClearsMapping: a deleted unit is gone from its queue, which stays."""
    engine = team()
    hold(engine)
    engine.set_unit(job("job1", 0))
    engine.remove_unit("default/job1")
    assert TEAM in engine.queue_positions() and order(engine) == []
    assert engine.standing("default/job1") is None


def test_delete_queue_unit_without_mapping() -> None:
    """TestDeleteQueueUnitWithoutMapping: deleting a unit that never matched a queue is harmless."""
    engine = team()
    engine.set_unit(job("job-unmapped", 0, quota_name="no-such-quota"))
    engine.schedule(1.0)
    engine.remove_unit("default/job-unmapped")
    engine.remove_unit("default/job-unmapped")
    assert TEAM in engine.queue_positions() and engine.standing("default/job-unmapped") is None


def test_add_units_find_no_queue_clears_mapping() -> None:
    """TestAddUnitsFindNoQueueClearsMapping: a unit whose queue is no longer found leaves the
    queue it was in (no stale entry) and waits, saying why; the queue stays."""
    engine = team()
    hold(engine)
    engine.set_unit(replace(job("job1", 0), queue_name="team"))
    assert order(engine) == [("job1", 0)]
    engine.set_unit(replace(job("job1", 0), queue_name="gone"))
    result = engine.schedule(1.0)
    assert TEAM in engine.queue_positions() and order(engine) == []
    assert result.messages["default/job1"].startswith("queue gone not found"), result.messages


# --- pkg/controller/eventhandler_test.go, controller_test.go ----------------------------------


def test_controller_delete_queue_unit_clears_mapping() -> None:
    """TestControllerDeleteQueueUnitClearsMapping: a QueueUnit deleted leaves its queue (the
    queue stays), and deleting it again is harmless."""
    engine = engine_with(quota("q1", {"cpu": 0}, {"cpu": 0}, policy=QueuePolicy.BLOCK, ns="test"))
    engine.set_unit(unit("job1", {"cpu": 1}, "q1", ns="test"))
    assert [s.unit for s in engine.queue_positions()[f"{SYSTEM_NAMESPACE}/q1"]] == ["test/job1"]
    engine.remove_unit("test/job1")
    engine.remove_unit("test/job1")
    assert engine.queue_positions()[f"{SYSTEM_NAMESPACE}/q1"] == []


def test_update_unregistered_queue_does_not_deadlock() -> None:
    """TestUpdateUnregisteredQueueDoesNotDeadlock: an update of a Queue never added registers
    it (and returns)."""
    engine = engine_with(quota("team", {"cpu": 0}, {"cpu": 4}))
    q1 = replace(queue_of(quota("team", {"cpu": 0}, {"cpu": 4})), name="q1", policy=QueuePolicy.BLOCK)
    engine.set_queue(q1)
    engine.set_queue(q1)
    assert f"{SYSTEM_NAMESPACE}/q1" in engine.queue_positions()


def test_get_queue_units_by_queue() -> None:
    """TestGetQueueUnitsByQueue: a queue's units are its waiting ones (a dequeued one is not
    listed); a queue that does not exist has none to list."""
    engine = engine_with(quota("test-queue", {"cpu": 0}, {"cpu": 1}, policy=QueuePolicy.BLOCK, ns="test"))
    engine.set_unit(unit("job3", {"cpu": 1}, "test-queue", ns="test"))
    assert keys(engine.schedule(1.0).admitted) == ["test/job3"]  # dequeued
    engine.set_unit(unit("job1", {"cpu": 2}, "test-queue", ns="test", created=2.0))
    engine.set_unit(unit("job2", {"cpu": 1}, "test-queue", ns="test", created=3.0))
    engine.schedule(4.0)
    listed = engine.queue_positions()
    assert sorted(s.unit for s in listed[f"{SYSTEM_NAMESPACE}/test-queue"]) == ["test/job1", "test/job2"]
    assert f"{SYSTEM_NAMESPACE}/non-existent" not in listed


def test_get_queue_units_by_quota() -> None:
    """TestGetQueueUnitsByQuota: the waiting units charged to quota1, by its name."""
    engine = engine_with(quota("quota1", {"cpu": 0}, {"cpu": 0}, ns="test"), quota("quota2", {"cpu": 0}, {"cpu": 0}, ns="test"))
    engine.set_unit(unit("job1", {"cpu": 2}, "quota1", ns="test"))
    engine.set_unit(unit("job2", {"cpu": 1}, "quota1", ns="test", created=1.0))
    engine.set_unit(unit("other", {"cpu": 1}, "quota2", ns="test"))
    engine.schedule(2.0)
    waiting = [s for rows in engine.queue_positions().values() for s in rows if s.quota == "quota1"]
    assert sorted(s.unit for s in waiting) == ["test/job1", "test/job2"]


# --- elasticquotav1alpha1/elasticquota_test.go ---------------------------------------------------


def test_plugin_filter_reserve_unreseve() -> None:
    """TestPlugin_Filter_Reserve_Unreseve (its reservations, the over-max filter and the
    unreserves): test1 (11 cpu) below test3 (20 cpu); job1 (5) and job2 (3) reserved charge
    both 8; a job of 300000 cpu does not fit; unreserving job2, then job1, gives 5, then 0."""
    engine = engine_with(parent("test3", {"cpu": 20}, {"cpu": 20}),
                         quota("test1", {"cpu": 11}, {"cpu": 11}, parent="test3"))
    engine.set_unit(unit("job1", {"cpu": 5}, "test1"))
    engine.set_unit(unit("job2", {"cpu": 3}, "test1", created=1.0))
    assert settle(engine, 1.0) == ["default/job1", "default/job2"]
    assert (used(engine, CPU)["test1"], used(engine, CPU)["test3"]) == (8, 8)
    engine.set_unit(unit("job4", {"cpu": 300000}, "test1", created=2.0))
    assert settle(engine, 2.0) == []
    engine.remove_unit("default/job4")
    engine.remove_unit("default/job2")
    settle(engine, 3.0)
    assert (used(engine, CPU)["test1"], used(engine, CPU)["test3"]) == (5, 5)
    engine.remove_unit("default/job1")
    settle(engine, 4.0)
    assert (used(engine, CPU)["test1"], used(engine, CPU)["test3"]) == (0, 0)
