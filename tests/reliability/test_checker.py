"""The chaos checker catches what it must: a run with no violation means something only
if the checker reports each kind of violation when it happens."""

from __future__ import annotations

from typing import Any

from koordqueue.api import constants as c
from koordqueue.localcluster.store import ADDED, DELETED, MODIFIED, Event

from .conftest import load_chaos

chaos = load_chaos()


class Feed:
    def __init__(self) -> None:
        self.checker = chaos.HistoryChecker()
        self.rv = 0

    def write(self, key: str, obj: dict[str, Any], kind: str = MODIFIED) -> list[str]:
        self.rv += 1
        self.checker.feed(Event(self.rv, key, kind, obj, None))
        return self.checker.violations

    def quota(self, name: str, max_gpu: int, parent: str | None = None) -> None:
        labels = {c.LABEL_QUOTA_PARENT: parent} if parent else {}
        self.write(chaos.QUOTAS_KEY, {"metadata": {"name": name, "namespace": "default", "labels": labels},
                                      "spec": {"max": {c.GPU: str(max_gpu)}}}, ADDED)

    def unit(self, job: str, quota: str, gpus: int, phase: str, kind: str = MODIFIED) -> list[str]:
        return self.write(chaos.UNITS_KEY, {
            "metadata": {"name": f"{job}-py-qu", "namespace": "default", "labels": {c.LABEL_QUOTA_NAME: quota}},
            "spec": {"resource": {c.GPU: str(gpus)}, "consumerRef": {"name": job, "namespace": "default"}},
            "status": {"phase": phase}}, kind)

    def job(self, name: str, suspended: bool) -> list[str]:
        annotations = {c.ANNOTATION_SUSPEND: c.TRUE} if suspended else {}
        return self.write(chaos.JOBS_KEY, {"metadata": {"name": name, "namespace": "default",
                                                        "annotations": annotations},
                                           "spec": {"runPolicy": {"suspend": suspended}}})


def test_a_parent_over_its_max_is_caught_on_the_write_that_does_it() -> None:
    feed = Feed()
    feed.quota("org", 4)
    feed.quota("a", 4, parent="org")
    feed.quota("b", 4, parent="org")
    assert feed.unit("j1", "a", 3, c.Phase.DEQUEUED) == []
    assert feed.unit("j2", "b", 1, c.Phase.RUNNING) == []
    violations = feed.unit("j3", "b", 1, c.Phase.DEQUEUED)
    assert violations == ["rv 6: quota org holds 5 nvidia.com/gpu, over its max 4 "
                          "(after the write of unit default/j3-py-qu)"]
    feed.unit("j1", "a", 3, c.Phase.SUCCEED)  # released: usage goes down again
    assert feed.checker.used["org"][c.GPU] == 2000 and len(feed.checker.violations) == 1


def test_a_leaf_over_its_max_and_a_deleted_unit_releasing_its_quota() -> None:
    feed = Feed()
    feed.quota("a", 2)
    feed.unit("j1", "a", 2, c.Phase.RUNNING)
    feed.unit("j1", "a", 2, c.Phase.RUNNING, kind=DELETED)
    assert feed.unit("j2", "a", 2, c.Phase.DEQUEUED) == []
    assert feed.unit("j3", "a", 1, c.Phase.RESERVED)[-1].startswith("rv 5: quota a holds 3 nvidia.com/gpu")


def test_releases_must_follow_admissions_one_each() -> None:
    feed = Feed()
    feed.quota("a", 8)
    feed.job("j", suspended=True)
    feed.unit("j", "a", 1, c.Phase.ENQUEUED)
    assert feed.job("j", suspended=False) == ["rv 4: job default/j released while its unit holds no quota"]
    feed.job("j", suspended=True)
    feed.unit("j", "a", 1, c.Phase.DEQUEUED)
    assert len(feed.job("j", suspended=False)) == 1  # released with quota: fine
    feed.job("j", suspended=True)
    assert feed.job("j", suspended=False)[-1] == (
        "rv 9: job default/j released twice in one admission (no suspension and re-admission between)")
    # Preempted while the job still runs, then admitted again before it was suspended.
    feed.unit("j", "a", 1, c.Phase.PREEMPTED)
    assert feed.unit("j", "a", 1, c.Phase.DEQUEUED)[-1] == (
        "rv 11: unit default/j-py-qu admitted while its job default/j still runs from before "
        "(released twice without a suspension between)")
    # The legitimate cycle: preempted, suspended, admitted again, released again.
    before = len(feed.checker.violations)
    feed.unit("j", "a", 1, c.Phase.PREEMPTED)
    feed.job("j", suspended=True)
    feed.unit("j", "a", 1, c.Phase.ENQUEUED)
    feed.unit("j", "a", 1, c.Phase.DEQUEUED)
    feed.job("j", suspended=False)
    assert len(feed.checker.violations) == before
    assert feed.checker.suspensions == 3 and feed.checker.admissions == 3


def test_a_checker_bug_is_a_violation_not_a_server_error() -> None:
    feed = Feed()
    feed.checker.feed(Event(1, chaos.UNITS_KEY, ADDED, {"metadata": {}}, None))  # no name: KeyError inside
    assert feed.checker.violations and feed.checker.violations[0].startswith("checker failed on ADDED")
