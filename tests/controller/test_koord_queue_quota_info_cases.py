"""Koord-Queue's ElasticQuotaV2 plugin's quota info tests
(pkg/framework/plugins/elasticquotav1alpha1/elasticquotainfo_test.go), translated case by
case: what a quota holds as units are reserved twice and deleted twice, split as Koord-Queue
splits it (used, self, children, and their guaranteed forms, which is what the Queue's
usage annotations and Koord-Queue's HTTP API say). Its oversold blocks do not carry over
(docs/migration.md): no unit is admitted oversold here."""

from __future__ import annotations

from koordqueue.api import constants as c
from koordqueue.controller.quotastatus import queue_usage
from koordqueue.engine import Engine
from koordqueue.engine.model import QuotaInfo
from tests.engine.builders import G, engine_with, quota, settle, unit

SPLITS = {"Used": c.ANNOTATION_QUEUE_USED, "SelfUsed": c.ANNOTATION_QUEUE_SELF_USED,
          "ChildrenUsed": c.ANNOTATION_QUEUE_CHILDREN_USED, "GuaranteedUsed": c.ANNOTATION_QUEUE_GUARANTEED_USED,
          "SelfGuaranteedUsed": c.ANNOTATION_QUEUE_SELF_GUARANTEED_USED,
          "ChildrenGuaranteedUsed": c.ANNOTATION_QUEUE_CHILDREN_GUARANTEED_USED}


def cpu_split(engine: Engine, quotas: dict[str, QuotaInfo], name: str) -> dict[str, int]:
    """The quota's cpu in whole cores, per split."""
    usage = queue_usage(engine.quota_status(), quotas)[name]
    return {field: usage[key].get("cpu", 0) // G for field, key in SPLITS.items()}


def reserve_twice_and_delete_twice(charged_to: str) -> list[dict[str, int]]:
    """q1 (min 10, max 15 cpu), with q2 below it; job1 (5 cpu) and job2 (3 cpu) charged to
    ``charged_to``, each added twice; then job2 deleted twice, then job1: q1's splits each time."""
    q1 = quota("q1", {"cpu": 10}, {"cpu": 15}, is_parent=charged_to == "q2")
    quotas = {"q1": q1}
    if charged_to == "q2":
        quotas["q2"] = quota("q2", {"cpu": 0}, {"cpu": 15}, parent="q1")
    engine = engine_with(*quotas.values())
    seen = []
    for _ in range(2):
        engine.set_unit(unit("job1", {"cpu": 5}, charged_to))
        engine.set_unit(unit("job2", {"cpu": 3}, charged_to, created=1.0))
    settle(engine, 1.0)
    seen.append(cpu_split(engine, quotas, "q1"))
    for key in ("default/job2", "default/job1"):
        for _ in range(2):
            engine.remove_unit(key)
        seen.append(cpu_split(engine, quotas, "q1"))
    return seen


def splits(used: int, own: int, below: int) -> dict[str, int]:
    return {"Used": used, "SelfUsed": own, "ChildrenUsed": below, "GuaranteedUsed": used,
            "SelfGuaranteedUsed": own, "ChildrenGuaranteedUsed": below}


def test_add_queue_unit_delete_queue_unit_charged_to_the_quota_itself() -> None:
    """TestAddQueueUnit_DeleteQueueUnit, its first block (forbidden oversold: guaranteed):
    8, then 5, then 0 cores, all of them the quota's own; a unit added twice counts once."""
    assert reserve_twice_and_delete_twice("q1") == [splits(8, 8, 0), splits(5, 5, 0), splits(0, 0, 0)]


def test_add_queue_unit_delete_queue_unit_charged_to_a_child() -> None:
    """TestAddQueueUnit_DeleteQueueUnit, its third block: units charged to q2 below q1 are
    q1's children's: 8, then 5, then 0 cores, none its own."""
    assert reserve_twice_and_delete_twice("q2") == [splits(8, 0, 8), splits(5, 0, 5), splits(0, 0, 0)]
