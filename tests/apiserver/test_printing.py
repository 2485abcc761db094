"""Server-side Table printing: CRD printer columns, built-in printers, ages, JSONPath."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from koordqueue.apiserver import printing
from koordqueue.apiserver.builtin import BUILTIN_TYPES
from koordqueue.apiserver.registry import ResourceType

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def ago(**kw: float) -> str:
    return (NOW - timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")


def builtin(kind: str, group: str = "") -> ResourceType:
    return next(rt for rt in BUILTIN_TYPES if rt.kind == kind and rt.group == group)


def table(rt: ResourceType, *objs: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return printing.to_table(rt, list(objs), now=NOW, **kw)


def header(t: dict[str, Any], wide: bool = False) -> list[str]:
    return [c["name"] for c in t["columnDefinitions"] if wide or c["priority"] == 0]


QUEUE_UNIT = ResourceType(
    "scheduling.x-k8s.io", "v1alpha1", "QueueUnit", "queueunits", "queueunit", True,
    from_crd="queueunits.scheduling.x-k8s.io",
    printer_columns=(
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Admissions", "type": "string", "jsonPath": ".status.admissions", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ),
)


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (59, "59s"), (119, "119s"), (120, "2m"), (302, "5m2s"),
    (600, "10m"), (179 * 60, "179m"), (3 * 3600, "3h"), (3 * 3600 + 240, "3h4m"), (9 * 3600, "9h"),
    (50 * 3600, "2d2h"), (48 * 3600, "2d"), (30 * 86400, "30d"), (800 * 86400, "2y70d"), (3000 * 86400, "8y"),
])
def test_human_duration_matches_apimachinery(seconds: int, text: str) -> None:
    assert printing.human_duration(seconds) == text


def test_jsonpath_subset() -> None:
    obj = {"a": {"b": [{"type": "Ready", "status": "True", "n": 1}, {"type": "Other", "status": "False", "n": 2}],
                 "x.y": "dotted"}}
    assert printing.jsonpath(".a.b[0].status", obj) == ["True"]
    assert printing.jsonpath(".a.b[-1].type", obj) == ["Other"]
    assert printing.jsonpath(".a.b[*].type", obj) == ["Ready", "Other"]
    assert printing.jsonpath('.a.b[?(@.type=="Other")].status', obj) == ["False"]
    assert printing.jsonpath(".a.b[?(@.n==2)].type", obj) == ["Other"]
    assert printing.jsonpath('.a.b[?(@.type!="Other")].n', obj) == [1]
    assert printing.jsonpath(".a['x.y']", obj) == ["dotted"]
    assert printing.jsonpath("{.a.missing}", obj) == []
    assert printing.jsonpath(".a.b[-1:].type", obj) == ["Other"]
    assert printing.jsonpath(".a.b[0:5].n", obj) == [1, 2]
    with pytest.raises(ValueError):
        printing.jsonpath("..type", obj)
    with pytest.raises(ValueError):
        printing.jsonpath(".a.b[?(@.n>1)]", obj)


def test_crd_columns_are_evaluated_typed_and_humanized() -> None:
    unit = {"metadata": {"name": "job-a", "namespace": "default", "creationTimestamp": ago(minutes=5, seconds=2)},
            "spec": {"priority": 10},
            "status": {"phase": "Enqueued", "admissions": [{"name": "m", "replicas": 1}],
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    t = table(QUEUE_UNIT, unit, list_meta={"resourceVersion": "42"})
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert t["metadata"] == {"resourceVersion": "42"}
    assert header(t) == ["Name", "Phase", "Priority", "Ready", "Age"]
    assert header(t, wide=True) == ["Name", "Phase", "Priority", "Ready", "Admissions", "Age"]
    assert t["columnDefinitions"][0] == {"name": "Name", "type": "string", "format": "name",
                                         "description": printing.NAME_COLUMN["description"], "priority": 0}
    assert t["rows"][0]["cells"] == ["job-a", "Enqueued", 10, "True", '[{"name":"m","replicas":1}]', "5m2s"]
    assert t["rows"][0]["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                      "metadata": unit["metadata"]}


def test_crd_missing_or_mistyped_values_print_as_none() -> None:
    unit = {"metadata": {"name": "u"}, "spec": {"priority": "high"}, "status": {}}
    assert table(QUEUE_UNIT, unit)["rows"][0]["cells"] == ["u", None, None, None, None, None]


def test_crd_without_columns_prints_name_and_age() -> None:
    rt = ResourceType("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", "pytorchjob", True, from_crd="x")
    t = table(rt, {"metadata": {"name": "p", "creationTimestamp": ago(hours=3)}})
    assert header(t) == ["Name", "Age"] and t["rows"][0]["cells"] == ["p", "3h"]


def test_include_object_and_headers() -> None:
    obj = {"metadata": {"name": "c"}, "data": {"a": "b"}}
    rt = builtin("ConfigMap")
    assert table(rt, obj, include_object="Object")["rows"][0]["object"] == obj
    assert table(rt, obj, include_object="None")["rows"][0]["object"] is None
    assert table(rt, obj, include_object="")["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table(rt, obj, headers=False)["columnDefinitions"] is None
    assert table(rt, obj, version="v1beta1")["apiVersion"] == "meta.k8s.io/v1beta1"
    with pytest.raises(ValueError, match='unrecognized includeObject value: "All"'):
        table(rt, obj, include_object="All")


def test_table_negotiation() -> None:
    kubectl = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
               "application/json")
    assert printing.table_version(kubectl) == "v1"
    assert printing.table_version("application/json;as=Table;v=v1beta1;g=meta.k8s.io") == "v1beta1"
    assert printing.table_version("application/json") is None
    assert printing.table_version(None) is None
    assert printing.table_content_type("v1") == "application/json;as=Table;v=v1;g=meta.k8s.io"


def _pod(phase: str = "Running", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "creationTimestamp": ago(seconds=30)},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": phase, **status}}


def _running(ready: bool = True, restarts: int = 0, **extra: Any) -> dict[str, Any]:
    return {"ready": ready, "restartCount": restarts, "state": {"running": {}}, **extra}


def test_pod_columns_and_wide_cells() -> None:
    pod = _pod(containerStatuses=[_running(), _running(ready=False)], podIPs=[{"ip": "10.0.0.1"}])
    t = table(builtin("Pod"), pod)
    assert header(t) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert header(t, wide=True)[5:] == ["IP", "Node", "Nominated Node", "Readiness Gates"]
    assert t["rows"][0]["cells"] == ["p", "1/2", "Running", "0", "30s", "10.0.0.1", "n1", "<none>", "<none>"]
    assert "conditions" not in t["rows"][0]


@pytest.mark.parametrize(("pod", "ready", "status", "restarts"), [
    (_pod("Pending"), "0/2", "Pending", "0"),
    (_pod(containerStatuses=[
        {"restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"finishedAt": ago(minutes=4)}}}, _running()]),
     "1/2", "CrashLoopBackOff", "3 (4m ago)"),
    (_pod("Succeeded", containerStatuses=[{"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}] * 2),
     "0/2", "Completed", "0"),
    (_pod("Failed", containerStatuses=[{"state": {"terminated": {"exitCode": 2}}}]), "0/2", "ExitCode:2", "0"),
    (_pod(reason="Evicted"), "0/2", "Evicted", "0"),
    (_pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]),
     "0/2", "SchedulingGated", "0"),
])
def test_pod_status_like_kubectl(pod: dict[str, Any], ready: str, status: str, restarts: str) -> None:
    assert table(builtin("Pod"), pod)["rows"][0]["cells"][1:4] == [ready, status, restarts]


def test_pod_init_and_terminating_and_completed_condition() -> None:
    init = _pod("Pending", initContainerStatuses=[{"name": "i", "state": {"waiting": {"reason": "PodInitializing"}}}])
    init["spec"]["initContainers"] = [{"name": "i"}]
    assert table(builtin("Pod"), init)["rows"][0]["cells"][2] == "Init:0/1"
    gone = _pod(containerStatuses=[_running(), _running()])
    gone["metadata"]["deletionTimestamp"] = ago(seconds=1)
    assert table(builtin("Pod"), gone)["rows"][0]["cells"][1:3] == ["2/2", "Terminating"]
    done = table(builtin("Pod"), _pod("Succeeded"))["rows"][0]
    assert done["conditions"] == [{"type": "Completed", "status": "True", "reason": "Succeeded",
                                   "message": "The pod has completed successfully."}]


def test_node_namespace_configmap_priorityclass_lease() -> None:
    node = {"metadata": {"name": "gpu-0", "creationTimestamp": ago(days=2),
                         "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": ""}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.0"},
                       "addresses": [{"type": "InternalIP", "address": "10.1.1.1"}]}}
    t = table(builtin("Node"), node)
    assert header(t) == ["Name", "Status", "Roles", "Age", "Version"]
    assert t["rows"][0]["cells"] == ["gpu-0", "Ready,SchedulingDisabled", "gpu,worker", "2d", "v1.32.0",
                                     "10.1.1.1", "<none>", "<unknown>", "<unknown>", "<unknown>"]
    ns = {"metadata": {"name": "default", "creationTimestamp": ago(seconds=5)}, "status": {"phase": "Active"}}
    assert table(builtin("Namespace"), ns)["rows"][0]["cells"] == ["default", "Active", "5s"]
    cm = {"metadata": {"name": "c", "creationTimestamp": ago(seconds=5)}, "data": {"a": "1", "b": "2"}}
    assert table(builtin("ConfigMap"), cm)["rows"][0]["cells"] == ["c", 2, "5s"]
    pc = {"metadata": {"name": "high-priority", "creationTimestamp": ago(seconds=5)}, "value": 1000}
    t = table(builtin("PriorityClass", "scheduling.k8s.io"), pc)
    assert header(t) == ["Name", "Value", "Global-Default", "Age", "PreemptionPolicy"]
    assert t["rows"][0]["cells"] == ["high-priority", 1000, False, "5s", "PreemptLowerPriority"]
    lease = {"metadata": {"name": "l", "creationTimestamp": ago(seconds=5)}, "spec": {"holderIdentity": "me"}}
    assert table(builtin("Lease", "coordination.k8s.io"), lease)["rows"][0]["cells"] == ["l", "me", "5s"]


def test_job_status_completions_duration() -> None:
    job = {"metadata": {"name": "j", "creationTimestamp": ago(minutes=3)},
           "spec": {"completions": 2, "selector": {"matchLabels": {"b": "2", "a": "1"}},
                    "template": {"spec": {"containers": [{"name": "c", "image": "busybox"},
                                                         {"name": "d", "image": "alpine"}]}}},
           "status": {"succeeded": 1, "startTime": ago(minutes=2)}}
    t = table(builtin("Job", "batch"), job)
    assert header(t) == ["Name", "Status", "Completions", "Duration", "Age"]
    assert t["rows"][0]["cells"] == ["j", "Running", "1/2", "2m", "3m", "c,d", "busybox,alpine", "a=1,b=2"]
    job["status"].update(completionTime=ago(seconds=30), conditions=[{"type": "Complete", "status": "True"}])
    assert table(builtin("Job", "batch"), job)["rows"][0]["cells"][1:4] == ["Complete", "1/2", "90s"]
    job["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
    assert table(builtin("Job", "batch"), job)["rows"][0]["cells"][1:4] == ["Suspended", "0/2", ""]


def test_event_columns_put_name_last() -> None:
    event = {"metadata": {"name": "e.1", "creationTimestamp": ago(seconds=9)},
             "involvedObject": {"kind": "ElasticQuota", "name": "team-a"}, "reason": "InvalidQuota",
             "message": " min exceeds max ", "type": "Warning", "source": {"component": "koord-queue"},
             "firstTimestamp": ago(minutes=1), "lastTimestamp": ago(seconds=9), "count": 3}
    t = table(builtin("Event"), event)
    assert header(t) == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert t["rows"][0]["cells"] == ["9s", "Warning", "InvalidQuota", "elasticquota/team-a", "", "koord-queue",
                                     "min exceeds max", "60s", 3, "e.1"]


def test_kinds_without_a_printer_print_created_at() -> None:
    role = {"metadata": {"name": "r", "creationTimestamp": "2025-01-01T10:00:00Z"}}
    t = table(builtin("Role", "rbac.authorization.k8s.io"), role)
    assert header(t) == ["Name", "Created At"]
    assert t["rows"][0]["cells"] == ["r", "2025-01-01T10:00:00Z"]
    crd = builtin("CustomResourceDefinition", "apiextensions.k8s.io")
    assert header(table(crd, role)) == ["Name", "Created At"]
