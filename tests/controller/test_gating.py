"""Which pods the webhook gates and which group each is in (controller/gating.py): every field
read is a tenant's, so bad values give a reason, never an exception."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller import gating
from koordqueue.controller.webhook import SuspendWebhook


def pod(labels: dict[str, Any] | None = None, annotations: dict[str, Any] | None = None,
        owner: str | None = None, gates: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u",
                                    "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if gates is not None:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@pytest.mark.parametrize(("obj", "workload"), [
    (pod(), c.WORKLOAD_POD),
    (pod(owner="ReplicaSet"), c.WORKLOAD_DEPLOYMENT),
    (pod(owner="StatefulSet"), c.WORKLOAD_STATEFULSET),
    (pod(labels={c.LABEL_LWS_NAME: "lws"}, owner="StatefulSet"), c.WORKLOAD_LEADERWORKERSET),
    (pod(owner="PyTorchJob"), None),
    (pod(owner="Job"), None),
    (pod(labels={"training.kubeflow.org/job-name": "j"}), None),  # a job kind's pod, whoever owns it
    (pod(owner="SomeInHouseOperator"), c.WORKLOAD_POD),
])
def test_the_workload_a_pod_falls_under(obj: dict[str, Any], workload: str | None) -> None:
    assert gating.workload_of(obj) == workload


def test_opting_in_by_namespace_label_kueue_queue_name_or_our_annotation() -> None:
    assert not gating.opted_in(pod(), None)
    assert not gating.opted_in(pod(), {c.LABEL_MANAGED_NAMESPACE: "yes"})
    assert gating.opted_in(pod(), {c.LABEL_MANAGED_NAMESPACE: c.TRUE})
    assert gating.opted_in(pod(labels={c.LABEL_KUEUE_QUEUE_NAME: "q"}), None)
    assert gating.opted_in(pod(annotations={c.ANNOTATION_QUEUE: "q"}), None)
    assert not gating.opted_in({"metadata": "not a mapping"}, None)


@pytest.mark.parametrize(("total", "size", "invalid"), [
    ("3", 3, None), (" 2 ", 2, None), (None, 0, "no kueue.x-k8s.io/pod-group-total-count"),
    ("0", 0, "is not a count"), ("-4", 0, "is not a count"), ("x" * 500, 0, "is not a count"),
    ("100001", 0, "is not a count"),
])
def test_a_kueue_pod_group_and_its_size(total: str | None, size: int, invalid: str | None) -> None:
    annotations = {c.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT: total} if total is not None else {}
    group = gating.group_of(pod(labels={c.LABEL_KUEUE_POD_GROUP_NAME: "g"}, annotations=annotations))
    assert (group.unit, group.kueue_name, group.total) == ("g-group", "g", size)
    assert (invalid is None) == (group.invalid is None) and (invalid or "") in (group.invalid or "")
    assert len(group.invalid or "") < 300, "a tenant's long value is cut short in the reason"


def test_a_pod_alone_is_a_group_of_one_and_the_gate_patch_keeps_other_gates() -> None:
    assert gating.group_of(pod()) == gating.Group("p-pod", "", 1)
    ops = gating.gate_json_patch(pod(gates=["example.com/other"]))
    assert {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": c.SCHEDULING_GATE}} in ops
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
    assert [op["path"] for op in gating.gate_json_patch(bare)] == [
        "/metadata/labels", "/metadata/labels/scheduling.koord-queue.io~1gated", "/spec/schedulingGates"]


async def test_the_webhook_leaves_system_namespaces_bound_pods_and_job_kinds_alone() -> None:
    from koordqueue.controller.config import ControllerConfig

    hook = SuspendWebhook(None, ControllerConfig(workload_kinds=frozenset(c.WORKLOAD_EXTENSIONS)))  # type: ignore[arg-type]
    opted = pod(labels={c.LABEL_KUEUE_QUEUE_NAME: "q"})

    def review(obj: dict[str, Any], namespace: str = "ns", operation: str = "CREATE") -> dict[str, Any]:
        return {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": namespace,
                "operation": operation, "object": obj}

    assert "patch" in (await hook.gate(review(opted)))["response"]
    for request in (review(opted, "kube-system"), review(opted, c.SYSTEM_NAMESPACE),
                    review({**opted, "spec": {"nodeName": "n", "containers": []}}),
                    review(pod(labels={c.LABEL_KUEUE_QUEUE_NAME: "q"}, owner="PyTorchJob")),
                    review(opted, operation="UPDATE")):
        assert "patch" not in (await hook.gate(request))["response"], request


def test_a_leaderworkerset_group_is_one_gang_of_its_size() -> None:
    labels = {c.LABEL_LWS_NAME: "llm", c.LABEL_LWS_GROUP_INDEX: "1"}
    leader = pod(labels=labels, annotations={c.ANNOTATION_LWS_SIZE: "4"}, owner="StatefulSet")
    assert gating.workload_of(leader) == c.WORKLOAD_LEADERWORKERSET
    assert gating.group_of(leader) == gating.Group("llm-1-group", "llm-1", 4)
    unsized = gating.group_of(pod(labels=labels))
    assert unsized.total == 0 and "no leaderworkerset.sigs.k8s.io/size" in (unsized.invalid or "")
    assert gating.group_of(pod(labels={c.LABEL_LWS_NAME: "llm"})).unit == "p-pod"  # no group index: a pod alone


def test_a_unit_name_stays_within_253_characters() -> None:
    long = "a" * 253
    named = gating.group_of({**pod(), "metadata": {"name": long}}).unit
    assert len(named) == 253 and named.endswith("-pod")
    assert named != gating.group_of({**pod(), "metadata": {"name": long[:-1] + "b"}}).unit
    assert gating.unit_name("short", "-pod") == "short-pod"
