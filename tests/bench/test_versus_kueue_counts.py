"""bench/versus_kueue.py's count of jobs let run more than once, fed the events its watches see:
a job preempted and admitted again is released once per admission (no defect); one released
twice while it held its quota once is the defect the count is for. The same for both systems'
records (a QueueUnit's phase, a Workload's QuotaReserved)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from koordqueue.api import constants as c

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
versus = pytest.importorskip("versus_kueue")


def world(*names: str) -> Any:
    records = [versus.JobRecord(name, "leaf-0-0", "parent-0", "leaf-0-0", versus.kueue_sim.CLASSES[0], 1000, 0.0)
               for name in names]
    for r in records:
        r.submitted = 0.0
    return versus.World(client=None, records=records, system=versus.Ours(Path("/nonexistent")))


def unit(name: str, phase: c.Phase) -> dict[str, Any]:
    return {"metadata": {"namespace": "leaf-0-0", "name": f"{name}-qu"},
            "spec": {"consumerRef": {"name": name}}, "status": {"phase": phase.value}}


def job(name: str, suspended: bool, ended: bool = False) -> tuple[str, bool, bool, bool]:
    return (f"leaf-0-0/{name}", suspended, False, ended)


def test_a_job_preempted_and_admitted_again_is_not_counted_released_twice() -> None:
    w = world("preempted", "plain")
    ours = w.system
    for name in ("preempted", "plain"):
        w._holder(ours.holder(unit(name, c.Phase.DEQUEUED)))
        w._job(job(name, False))
    w._holder(ours.holder(unit("preempted", c.Phase.PREEMPTED)))
    w._job(job("preempted", True))
    w._holder(ours.holder(unit("preempted", c.Phase.ENQUEUED)))
    w._job(job("preempted", False))  # (its release seen before its new admission: the two watches race)
    w._holder(ours.holder(unit("preempted", c.Phase.DEQUEUED)))
    f = versus.figures(w, end=10.0, divisor=50)
    assert (f["readmitted"], f["released_again_when_readmitted"], f["released_twice_in_one_admission"]) == (1, 1, 0)


def test_a_job_suspended_and_resumed_while_it_held_its_quota_is_counted_released_twice() -> None:
    w = world("twice")
    ours = w.system
    w._holder(ours.holder(unit("twice", c.Phase.DEQUEUED)))
    w._job(job("twice", False))
    w._job(job("twice", True))
    w._holder(ours.holder(unit("twice", c.Phase.RUNNING)))  # (still holding: one admission)
    w._job(job("twice", False))
    f = versus.figures(w, end=10.0, divisor=50)
    assert (f["readmitted"], f["released_again_when_readmitted"], f["released_twice_in_one_admission"]) == (0, 0, 1)


def test_a_job_resumed_after_it_ended_is_counted_apart_not_released_twice() -> None:
    """Preempted after its pod had succeeded, the Job ends suspended (SuccessCriteriaMet), and
    ours resumes it to be marked Complete: not a second release for its one admission."""
    w = world("ended")
    ours = w.system
    w._holder(ours.holder(unit("ended", c.Phase.DEQUEUED)))
    w._job(job("ended", False))
    w._holder(ours.holder(unit("ended", c.Phase.PREEMPTED)))
    w._job(job("ended", True))
    w._holder(ours.holder(unit("ended", c.Phase.SUCCEED)))
    w._job(job("ended", True, ended=True))
    w._job(job("ended", False, ended=True))
    f = versus.figures(w, end=10.0, divisor=50)
    assert (f["released_twice_in_one_admission"], f["resumed_after_it_ended"]) == (0, 1)
    batch = versus.JOB_TYPES[c.BATCH_JOB_KIND]
    manifest = {"metadata": {"namespace": "leaf-0-0", "name": "ended"}, "spec": {"suspend": True},
                "status": {"conditions": [{"type": c.BATCH_CONDITION_SUCCESS_CRITERIA_MET, "status": "True"}]}}
    assert batch.state(manifest) == ("leaf-0-0/ended", True, False, True)


def test_requests_refused_are_counted_apart(tmp_path: Path) -> None:
    """Kueue's job reconciler sometimes creates a Workload again before its cache has the first:
    kube-apiserver refuses it (409), and it is a request, but not a Workload."""
    import json
    from types import SimpleNamespace

    def entry(n: int, verb: str, code: int, user: str = "kueue") -> str:
        return json.dumps({"auditID": str(n), "user": {"username": user}, "verb": verb,
                           "requestReceivedTimestamp": "2026-12-05T04:00:00.000000Z",
                           "objectRef": {"resource": "workloads"}, "responseStatus": {"code": code}})

    log = tmp_path / "audit.log"
    log.write_text("\n".join([entry(1, "create", 201), entry(2, "create", 201), entry(3, "create", 409),
                              entry(3, "create", 409), entry(4, "create", 201, user="other")]) + "\n")
    at = 1_796_443_200.0  # 2026-12-05T04:00:00Z
    counts = versus.audit_counts(SimpleNamespace(audit_log=log), "kueue", at - 1, at + 1)
    assert counts == {"create workloads": 2, "create workloads (refused 409)": 1}


def test_the_stream_can_be_pytorchjobs() -> None:
    record = versus.JobRecord("large-0", "leaf-0-0", "parent-0", "leaf-0-0", versus.kueue_sim.CLASSES[2], 20000, 1.2)
    pytorch = versus.JOB_TYPES[c.PYTORCH_JOB_KIND]
    manifest = pytorch.manifest(record, {"labels": {"kueue.x-k8s.io/queue-name": "leaf-0-0"}})
    assert manifest["kind"] == c.PYTORCH_JOB_KIND and manifest["spec"]["runPolicy"]["suspend"] is True
    master = manifest["spec"]["pytorchReplicaSpecs"][c.REPLICA_MASTER]
    container = master["template"]["spec"]["containers"][0]
    assert master["replicas"] == 1 and container["name"] == c.PYTORCH_CONTAINER
    assert container["resources"]["requests"] == {"cpu": "20"}
    assert pytorch.state(manifest) == ("leaf-0-0/large-0", True, False, False)
    manifest["spec"]["runPolicy"]["suspend"] = False
    manifest["status"] = {"conditions": [{"type": "Running", "status": "False"},
                                         {"type": "Succeeded", "status": "True"}]}
    assert pytorch.state(manifest) == ("leaf-0-0/large-0", False, True, True)
    batch = versus.JOB_TYPES[c.BATCH_JOB_KIND].manifest(record, {})
    assert versus.JOB_TYPES[c.BATCH_JOB_KIND].state(batch) == ("leaf-0-0/large-0", True, False, False)
