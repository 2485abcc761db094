"""bench/hold_timeline.py reads a Job's timeline from kube-apiserver's audit log (as
versus_kueue.py --trace keeps it): its steps from resume to Complete, a second resume of the
queue's while the Job runs, and the Job controller's refused status write charged to the
queue's write that came between. The log here is written by hand, one line per request."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from koordqueue.realcluster.cluster import audit_policy

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
hold = pytest.importorskip("hold_timeline")

NS, JOB, POD = "leaf-0-0", "small-0", "small-0-abcde"


def entry(at: float, user: str, verb: str, resource: str, code: int = 200, name: str = JOB,
          sub: str = "", body: dict[str, Any] | None = None, answer: dict[str, Any] | None = None) -> str:
    stamp = f"2026-12-07T01:00:{at:09.6f}Z"
    ref = {"resource": resource, "namespace": NS, "name": name, **({"subresource": sub} if sub else {})}
    return json.dumps({"auditID": f"{at}-{verb}-{resource}-{sub}", "stage": "ResponseComplete", "verb": verb,
                       "user": {"username": user}, "objectRef": ref, "responseStatus": {"code": code},
                       "requestReceivedTimestamp": stamp, "stageTimestamp": stamp,
                       **({"requestObject": body} if body else {}), **({"responseObject": answer} if answer else {})})


def status(*types: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": t, "status": "True"} for t in types]}}


def test_a_jobs_steps_its_second_resume_and_the_conflict_it_caused(tmp_path: Path) -> None:
    queue, jc = "koord-queue-controller", hold.JOB_CONTROLLER
    resume = {"spec": {"suspend": False}}
    pod = {"metadata": {"name": POD, "labels": {hold.JOB_NAME: JOB}}}
    lines = [
        entry(1.0, hold.GENERATOR, "create", "jobs", 201),
        entry(1.5, jc, "update", "jobs", sub="status", body=status("Suspended")),
        entry(2.0, queue, "patch", "jobs", body=resume),
        entry(3.0, jc, "create", "pods", 201, name="", answer=pod),
        entry(7.0, queue, "patch", "jobs", body=resume),  # the second resume, from a lagging view
        entry(7.5, jc, "update", "jobs", 409, sub="status", body=status()),  # refused: written since
        entry(8.0, hold.SCHEDULER, "create", "pods", 201, name=POD, sub="binding"),
        entry(9.0, hold.GENERATOR, "patch", "pods", name=POD, sub="status", body={"status": {"phase": "Running"}}),
        entry(10.0, hold.GENERATOR, "patch", "pods", name=POD, sub="status", body={"status": {"phase": "Succeeded"}}),
        entry(12.0, jc, "update", "jobs", sub="status", body=status("SuccessCriteriaMet", "Complete")),
    ]
    run = tmp_path / "0-ours"
    (run / "cluster" / "logs").mkdir(parents=True)
    (run / "cluster" / "logs" / "audit.log").write_text("\n".join(lines) + "\n")
    r = hold.report(run)
    steps = r["steps"]
    assert steps["resumed -> pod created (Job controller)"] == [pytest.approx(1.0)]
    assert steps["pod created -> bound (scheduler)"] == [pytest.approx(5.0)]
    assert steps["Succeeded -> Complete written (Job controller)"] == [pytest.approx(2.0)]
    assert steps["resumed -> Complete written"] == [pytest.approx(10.0)]
    assert (r["resumes"], r["redundant_resumes"]) == (2, 1)
    assert dict(r["conflicts_after"]) == {"koord-queue-controller patch jobs (resume)": 1}
    assert "resumed once" in hold.render(r)


def test_the_trace_policy_keeps_the_bodies_of_job_writes() -> None:
    """versus_kueue.py --trace: every user's requests, the bodies of Job and Job status writes."""
    rules = audit_policy(pods=True, jobs=True)["rules"]
    assert {"level": "Request", "verbs": ["update", "patch"],
            "resources": [{"group": "batch", "resources": ["jobs", "jobs/status"]}]} in rules
    assert rules[-1] == {"level": "Metadata"}
