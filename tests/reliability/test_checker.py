"""The chaos checker catches what it must: a run with no violation means something only
if the checker reports each kind of violation when it happens."""

from __future__ import annotations

from typing import Any

from koordqueue.api import constants as c
from koordqueue.apiserver.store import ADDED, DELETED, MODIFIED, Event

from .conftest import load_chaos

chaos = load_chaos()
HOLDING = {c.Phase.RESERVED, c.Phase.DEQUEUED, c.Phase.RUNNING}


class Feed:
    """Writes as the API server would make them, each at a time `at` (seconds) given or one
    second after the last."""

    def __init__(self, **checker: Any) -> None:
        self.checker = chaos.HistoryChecker(**checker)
        self.rv = 0
        self.at = 0.0

    def write(self, key: str, obj: dict[str, Any], kind: str = MODIFIED, at: float | None = None) -> list[str]:
        self.rv += 1
        self.at = self.at + 1 if at is None else at
        self.checker.feed(Event(self.rv, key, kind, obj, None), now=self.at)
        return verdicts(self.checker)

    def quota(self, name: str, max_gpu: int, parent: str | None = None, used: int | None = None,
              at: float | None = None) -> list[str]:
        labels = {c.LABEL_QUOTA_PARENT: parent} if parent else {}
        obj: dict[str, Any] = {"metadata": {"name": name, "namespace": "default", "labels": labels},
                               "spec": {"max": {c.GPU: str(max_gpu)}}}
        if used is not None:
            obj["status"] = {"used": {c.GPU: str(used)}}
        return self.write(chaos.QUOTAS_KEY, obj, ADDED if used is None else MODIFIED, at)

    def unit(self, job: str, quota: str, gpus: int, phase: str, kind: str = MODIFIED, at: float | None = None,
             allocated: str = "2026-01-01T00:00:00Z", admissions: list[Any] | None = None) -> list[str]:
        """The unit as the controller writes it: admissions (and the time of the admission)
        while it holds quota, none otherwise, unless `admissions` says what."""
        status: dict[str, Any] = {"phase": phase}
        if phase in HOLDING:
            status["lastAllocateTime"] = allocated
            status["admissions"] = [{"name": "master", "replicas": 1}]
        if admissions is not None:
            status["admissions"] = admissions
        return self.write(chaos.UNITS_KEY, {
            "metadata": {"name": f"{job}-py-qu", "namespace": "default", "labels": {c.LABEL_QUOTA_NAME: quota}},
            "spec": {"resource": {c.GPU: str(gpus)}, "consumerRef": {"name": job, "namespace": "default"}},
            "status": status}, kind, at)

    def job(self, name: str, suspended: bool, at: float | None = None) -> list[str]:
        annotations = {c.ANNOTATION_SUSPEND: c.TRUE} if suspended else {}
        return self.write(chaos.JOBS_KEY, {"metadata": {"name": name, "namespace": "default",
                                                        "annotations": annotations},
                                           "spec": {"runPolicy": {"suspend": suspended}}}, at=at)

    def pod(self, name: str, job: str, phase: str = c.POD_RUNNING, kind: str = MODIFIED, deleting: bool = False,
            at: float | None = None) -> list[str]:
        meta: dict[str, Any] = {"name": name, "namespace": "default", "ownerReferences": [
            {"apiVersion": "kubeflow.org/v1", "kind": c.PYTORCH_JOB_KIND, "name": job, "controller": True}]}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return self.write(chaos.PODS_KEY, {"metadata": meta, "status": {"phase": phase}}, kind, at)

    def admitted_and_running(self, job: str, quota: str, gpus: int) -> None:
        self.job(job, suspended=True)
        self.unit(job, quota, gpus, c.Phase.DEQUEUED)
        self.job(job, suspended=False)
        self.unit(job, quota, gpus, c.Phase.RUNNING)


def verdicts(checker: Any) -> list[str]:
    """The violations without the history each ends with."""
    return [v.split(" [history: ")[0] for v in checker.violations]


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
    # Suspended while its unit still holds quota, and released again in the same admission.
    assert feed.job("j", suspended=True)[-1] == (
        "rv 8: job default/j suspended while its unit holds quota (a suspension is for a unit sent back, "
        "after its status says so)")
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


def test_a_violation_says_what_its_job_and_unit_did_before() -> None:
    feed = Feed()
    feed.quota("a", 8)
    feed.admitted_and_running("j", "a", 1)
    feed.job("j", suspended=True)
    assert feed.checker.violations[-1].endswith(
        "[history: 3 unit Dequeued, 4 job released, 5 unit Running, 6 job suspended]")


def test_a_unit_admitted_twice_without_a_release_between() -> None:
    feed = Feed()
    feed.quota("a", 8)
    feed.job("j", suspended=True)
    feed.unit("j", "a", 1, c.Phase.DEQUEUED, allocated="2026-01-01T00:00:00Z")
    assert feed.unit("j", "a", 1, c.Phase.RUNNING, allocated="2026-01-01T00:00:00Z") == []  # the same admission
    # Written Dequeued again over Running: a second admission.
    assert feed.unit("j", "a", 1, c.Phase.DEQUEUED, allocated="2026-01-01T00:00:00Z") == [
        "rv 5: unit default/j-py-qu admitted again while it holds quota (Running to Dequeued, allocated at "
        "2026-01-01T00:00:00Z; no release between)"]
    # A new allocation time while it holds: a second admission too.
    assert feed.unit("j", "a", 1, c.Phase.DEQUEUED, allocated="2026-01-01T00:00:09Z")[-1] == (
        "rv 6: unit default/j-py-qu admitted again while it holds quota (Dequeued to Dequeued, allocated at "
        "2026-01-01T00:00:09Z; no release between)")
    assert feed.checker.admissions == 1 and feed.checker.used["a"][c.GPU] == 1000  # charged once
    # Released, then admitted again: fine.
    before = len(feed.checker.violations)
    feed.unit("j", "a", 1, c.Phase.PREEMPTED)
    feed.unit("j", "a", 1, c.Phase.DEQUEUED, allocated="2026-01-01T00:00:20Z")
    assert len(feed.checker.violations) == before and feed.checker.admissions == 2


def test_status_admissions_agree_with_the_phase() -> None:
    feed = Feed()
    feed.quota("a", 8)
    assert feed.unit("j", "a", 1, c.Phase.DEQUEUED, admissions=[]) == [
        "rv 2: unit default/j-py-qu is Dequeued but its status.admissions is []"]
    assert feed.unit("j", "a", 1, c.Phase.RUNNING, admissions=[]) == verdicts(feed.checker)[:1]  # said once
    assert feed.unit("j", "a", 1, c.Phase.PREEMPTED, admissions=[{"name": "master"}])[-1] == (
        'rv 4: unit default/j-py-qu is Preempted but its status.admissions is [{"name": "master"}]')
    before = len(feed.checker.violations)
    feed.unit("j", "a", 1, c.Phase.ENQUEUED)  # none while queued
    feed.unit("j", "a", 1, c.Phase.DEQUEUED)  # some while admitted
    feed.unit("j", "a", 1, c.Phase.SUCCEED)
    assert len(feed.checker.violations) == before


def test_status_used_is_what_the_units_hold_give_or_take_the_writes_in_flight() -> None:
    feed = Feed(used_window=5.0)
    feed.quota("org", 16, at=0)
    feed.quota("a", 8, parent="org", at=0)
    feed.job("j1", suspended=True, at=0)
    feed.unit("j1", "a", 2, c.Phase.DEQUEUED, at=1)
    feed.quota("a", 8, parent="org", used=2, at=2)  # right
    feed.quota("org", 16, used=3, at=3)  # one GPU too many
    feed.unit("j2", "a", 3, c.Phase.DEQUEUED, at=10)
    feed.quota("a", 8, parent="org", used=5, at=11)  # right again
    feed.quota("a", 8, parent="org", used=2, at=20)  # j2 left out, though it has held all along: wrong
    feed.unit("j2", "a", 3, c.Phase.SUCCEED, at=30)
    # Ahead of the objects by j3's admission, written 2 s after: in the window, fine.
    feed.quota("a", 8, parent="org", used=4, at=40)
    feed.unit("j3", "a", 2, c.Phase.DEQUEUED, at=42)
    # Behind them by j2's release, 10 s after it: too late.
    feed.quota("org", 16, used=7, at=40.5)
    assert verdicts(feed.checker) == [
        "rv 6: quota org status.used nvidia.com/gpu 3, but its units held 0 all through and 2 at most within 5 s of "
        "that write",
        "rv 9: quota a status.used nvidia.com/gpu 2, but its units held 5 all through and 5 at most within 5 s of "
        "that write"]
    feed.checker.finish(now=60)
    assert verdicts(feed.checker)[2:] == [
        "rv 13: quota org status.used nvidia.com/gpu 7, but its units held 2 all through and 4 at most within "
        "5 s of that write"]
    assert feed.checker.used_checked == 6


def test_no_pod_lives_long_without_quota() -> None:
    feed = Feed(pod_bound=10.0)
    feed.quota("a", 8, at=0)
    feed.job("j", suspended=True, at=0)
    feed.unit("j", "a", 1, c.Phase.ENQUEUED, at=0)
    assert feed.pod("j-master-0", "j", phase="Pending", kind=ADDED, at=1) == [
        "rv 4: pod default/j-master-0 exists, but its job default/j was never released"]
    feed.pod("j-master-0", "j", kind=DELETED, at=2)
    feed.unit("j", "a", 1, c.Phase.DEQUEUED, at=3)
    feed.job("j", suspended=False, at=3)
    feed.pod("j-master-0", "j", kind=ADDED, at=4)
    feed.pod("j-worker-0", "j", kind=ADDED, at=4)
    feed.unit("j", "a", 1, c.Phase.PREEMPTED, at=5)
    feed.job("j", suspended=True, at=5)
    feed.pod("j-master-0", "j", deleting=True, at=6)  # on its way out
    assert len(feed.checker.violations) == 1
    # The worker is still running 10 s after its quota was released: settled by the next write.
    assert feed.quota("a", 8, at=16)[-1] == (
        "job default/j: pods default/j-worker-0 still live 10 s after its unit stopped holding quota")
    assert feed.pod("j-worker-0", "j", at=17)[-1] == (
        "rv 14: pod default/j-worker-0 lives 12 s after its job's unit stopped holding quota (bound 10 s)")
    # Admitted again and released: its pods may run; finished pods may stay.
    before = len(feed.checker.violations)
    feed.pod("j-worker-0", "j", kind=DELETED, at=18)
    feed.unit("j", "a", 1, c.Phase.DEQUEUED, at=20)
    feed.job("j", suspended=False, at=20)
    feed.pod("j-master-0", "j", kind=ADDED, at=21)
    feed.pod("j-master-0", "j", phase=c.POD_SUCCEEDED, at=25)
    feed.unit("j", "a", 1, c.Phase.SUCCEED, at=25)
    feed.checker.finish(now=100)
    assert len(feed.checker.violations) == before


def test_priming_takes_the_state_without_verdicts() -> None:
    feed = Feed()
    running = {"metadata": {"name": "r-py-qu", "namespace": "default", "labels": {c.LABEL_QUOTA_NAME: "a"}},
               "spec": {"resource": {c.GPU: "4"}, "consumerRef": {"name": "r", "namespace": "default"}},
               "status": {"phase": "SchedSucceed"}}  # Koord-Queue's, no admissions
    job = {"metadata": {"name": "r", "namespace": "default"}, "spec": {}}
    feed.checker.prime([{"metadata": {"name": "a", "namespace": "default"}, "spec": {"max": {c.GPU: "2"}}}],
                       [running], [job])
    assert feed.checker.violations == [] and feed.checker.used["a"][c.GPU] == 4000
    assert feed.job("r", suspended=True) == [
        "rv 1: job default/r suspended while its unit holds quota (a suspension is for a unit sent back, after "
        "its status says so)"]


def test_a_checker_bug_is_a_violation_not_a_server_error() -> None:
    feed = Feed()
    feed.checker.feed(Event(1, chaos.UNITS_KEY, ADDED, {"metadata": {}}, None))  # no name: KeyError inside
    assert feed.checker.violations and feed.checker.violations[0].startswith("checker failed on ADDED")
