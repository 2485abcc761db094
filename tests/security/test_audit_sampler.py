"""The sampler's second witness (issue 29: the max "sampled every second and from the audit
log on the real control plane"): bound pods summed from kube-apiserver's audit log. Read here
from entries as kube-apiserver writes them; on the real control plane every attack test's
sampler reads the session cluster's log (`RealCluster(audit_pods=True)`)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from koordqueue.api import constants as c
from koordqueue.realcluster.cluster import audit_policy

from . import audit

T0 = 1_800_000_000.0


def entry(at: float, verb: str, name: str, sub: str = "", code: int = 201, namespace: str = "t1",
          pod: dict[str, Any] | None = None, request: dict[str, Any] | None = None) -> dict[str, Any]:
    stamp = dt.datetime.fromtimestamp(T0 + at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ref = {"resource": "pods", "namespace": namespace, "name": name, "apiVersion": "v1"}
    if sub:
        ref["subresource"] = sub
    out = {"kind": "Event", "stage": "ResponseComplete", "verb": verb, "objectRef": ref,
           "responseStatus": {"code": code}, "stageTimestamp": stamp}
    if pod is not None:
        out["responseObject"] = pod
    if request is not None:
        out["requestObject"] = request
    return out


def pod(gpus: int, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": {c.GPU: str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "metadata": {"name": "x"}, "spec": spec}


def held(entries: list[dict[str, Any]], alive: dict[audit.Name, int] | None = None,
         known: dict[audit.Name, int] | None = None) -> list[tuple[float, int]]:
    pods = audit.histories(entries, frozenset({"t1"}))
    spans = audit.intervals(pods, known or {}, alive or {}, T0)
    return [(round(at - T0, 3), n) for at, n in audit.peaks(spans)]


def test_bound_pods_are_summed_from_binding_to_their_last_delete() -> None:
    entries = [
        entry(0.0, "create", "a", pod=pod(2)), entry(0.1, "create", "a", "binding"),
        entry(0.2, "create", "b", pod=pod(4)), entry(0.3, "create", "b", "binding"),
        entry(0.4, "delete", "a", code=200),  # graceful: a still holds its 2 GPUs
        entry(0.5, "create", "c", pod=pod(1)), entry(0.6, "create", "c", "binding"),
        entry(0.7, "delete", "a", code=200),  # kwok's: gone
        entry(0.8, "create", "d", pod=pod(1)), entry(0.9, "create", "d", "binding"),
        entry(1.0, "create", "e", "binding", code=409),  # refused: not bound
        entry(1.1, "create", "other", pod=pod(8), namespace="t2"),
        entry(1.2, "create", "other", "binding", namespace="t2"),  # another quota's namespace
    ]
    assert held(entries) == [(0.1, 2), (0.3, 6), (0.6, 7), (0.9, 6)]


def test_a_pod_between_two_samples_is_seen_and_ends_by_status_or_remaking() -> None:
    entries = [
        entry(0.0, "create", "w-0", pod=pod(4)), entry(0.05, "create", "w-0", "binding"),
        entry(0.3, "delete", "w-0", code=200),  # a pod that lived 0.25 s: no sample sees it
        entry(0.4, "create", "w-0", pod=pod(1)), entry(0.5, "create", "w-0", "binding"),  # made again
        entry(0.6, "patch", "w-0", "status", code=200, request={"status": {"phase": c.POD_SUCCEEDED}}),
        entry(0.7, "create", "n", pod=pod(3, node="kwok-0")),  # made on its node
    ]
    assert held(entries) == [(0.05, 4), (0.5, 1), (0.7, 3)]


def test_a_pod_listed_bound_at_the_start_whose_binding_is_in_the_log_counts_once() -> None:
    pods = audit.histories([entry(0.1, "create", "p", pod=pod(4)), entry(0.2, "create", "p", "binding"),
                            entry(0.9, "delete", "p", code=200)], frozenset({"t1"}))
    spans = audit.intervals(pods, {}, {("t1", "p"): 4}, T0, listed_at=T0 + 0.5)
    assert [(round(a - T0, 3), n) for a, n in audit.peaks(spans)] == [(0.0, 4)]


def test_pods_bound_before_the_log_was_read_count_until_they_go() -> None:
    entries = [entry(0.2, "create", "late", "binding"), entry(0.5, "delete", "early", code=200),
               entry(0.6, "create", "x", "binding")]
    assert held(entries, alive={("t1", "early"): 4}, known={("t1", "late"): 2, ("t1", "x"): 1}) == \
        [(0.0, 4), (0.2, 6), (0.6, 3)]


def test_the_policy_keeps_pods_as_created_and_status_writes() -> None:
    policy = audit_policy(pods=True)["rules"]
    assert policy[0] == {"level": "RequestResponse", "verbs": ["create"],
                         "resources": [{"group": "", "resources": ["pods"]}]}
    assert policy[1]["level"] == "Request" and policy[1]["resources"] == [{"group": "", "resources": ["pods/status"]}]
    assert policy[-1] == {"level": "Metadata"} and audit_policy()["rules"] == [{"level": "Metadata"}]


def test_entries_are_read_from_an_offset(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    first = json.dumps(entry(0.0, "create", "a", pod=pod(1)))
    log.write_text(first + "\n")
    offset = audit.log_size(log)
    with open(log, "a") as f:
        f.write(json.dumps(entry(1.0, "create", "a", "binding")) + "\n")
        f.write(json.dumps({**entry(1.1, "create", "b", "binding"), "stage": "RequestReceived"}) + "\n")
        f.write("{cut")
    assert [e["objectRef"].get("subresource") for e in audit.read_entries(log, offset)] == ["binding"]
    assert audit.read_entries(log, offset - 5) == audit.read_entries(log, offset)  # (a line cut is skipped)
    assert audit.read_entries(tmp_path / "none") == [] and audit.log_size(tmp_path / "none") == 0


def test_a_pod_bound_before_its_create_completed_counts_its_gpus() -> None:
    """Under load kube-scheduler binds a pod it watched stored before the create's response
    completes: the binding's completion comes first in the log. The pod is the create's,
    received before: its GPUs are counted (they were 0: a CI run's audit saw 8 of 12 bound)."""
    create = entry(0.3, "create", "a", pod=pod(4))
    create["requestReceivedTimestamp"] = dt.datetime.fromtimestamp(T0 + 0.1, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert held([create, entry(0.2, "create", "a", "binding")]) == [(0.2, 4)]
