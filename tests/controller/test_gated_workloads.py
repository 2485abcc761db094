"""Workloads queued by a scheduling gate (issue 34), on both control planes: the API server
holds gated pods as kube-apiserver does; Deployments' pods and Kueue's pod groups are gated by
the webhook, queued as units and let go by the controller once admitted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordqueue.api import constants as c
from tests.security.conftest import Tenant, refused, tenant, validating_webhook_off

from .conftest import System, quota
from .test_quota_tree import namespace

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]


def pod_spec(gpus: int = 1) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi", c.GPU: str(gpus)},
                                          "limits": {c.GPU: str(gpus)}}}]}


def managed(name: str) -> dict[str, Any]:
    ns = namespace(name)
    ns["metadata"]["labels"] = {c.LABEL_MANAGED_NAMESPACE: c.TRUE}  # type: ignore[index]
    return ns


def deployment(name: str, ns: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec()}}}


def group_pod(name: str, ns: str, group: str, total: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {c.LABEL_KUEUE_QUEUE_NAME: "default", c.LABEL_KUEUE_POD_GROUP_NAME: group},
                         "annotations": {c.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT: str(total)}},
            "spec": pod_spec()}


async def pods(system: System, ns: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["pods", "-n", ns] + (["-l", selector] if selector else [])
    return list((await system.get_json(*args))["items"])


def bound(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName"))


def is_gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == c.SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or [])


async def test_a_gated_pod_is_held_shown_scheduling_gated_and_its_gates_may_only_be_removed(system: System) -> None:
    await system.apply(namespace("gates"))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "held", "namespace": "gates"},
           "spec": {**pod_spec(0), "schedulingGates": [{"name": "example.com/a"}, {"name": "example.com/b"}]}}
    await system.apply(pod)
    got = await system.get_json("pod", "held", "-n", "gates")
    scheduled = [x for x in got["status"].get("conditions") or [] if x["type"] == c.POD_CONDITION_SCHEDULED]
    assert [(x["status"], x["reason"]) for x in scheduled] == [("False", c.POD_REASON_SCHEDULING_GATED)], got
    assert "SchedulingGated" in await system.akubectl("get", "pod", "held", "-n", "gates")
    refused = await system.akubectl("patch", "pod", "held", "-n", "gates", "--type=json", "-p",
                                    '[{"op":"add","path":"/spec/schedulingGates/-","value":{"name":"x"}}]',
                                    check=False)
    assert ('The Pod "held" is invalid: spec.schedulingGates[2].name: Forbidden: only deletion is allowed, '
            "but found new scheduling gate 'x'") in refused, refused
    await system.akubectl("patch", "pod", "held", "-n", "gates", "--type=merge", "-p",
                          '{"spec":{"schedulingGates":[{"name":"example.com/b"}]}}')
    assert not bound(await system.get_json("pod", "held", "-n", "gates")), "one gate left: still held"
    await system.akubectl("patch", "pod", "held", "-n", "gates", "--type=json", "-p",
                          '[{"op":"remove","path":"/spec/schedulingGates"}]')

    async def running() -> bool:
        return "Running" in await system.akubectl("get", "pod", "held", "-n", "gates")

    await system.wait_for(running, 30, "the pod Running once its last gate was removed")


async def test_a_deployment_of_four_gpus_in_a_quota_of_two_runs_two_and_scaling_down_gives_quota_back(
        system: System) -> None:
    await system.apply(managed("serving"), quota("q-serving", 2, 2, namespace="serving"))
    await system.apply(deployment("web", "serving", 4))

    async def two_and_two() -> list[dict[str, Any]] | None:
        found = await pods(system, "serving", "app=web")
        running = [p for p in found if bound(p) and not is_gated(p)]
        gated = [p for p in found if is_gated(p) and not bound(p)]
        return found if len(found) == 4 and len(running) == 2 and len(gated) == 2 else None

    found = await system.wait_for(two_and_two, 60, "2 pods running and 2 gated")
    table = await system.akubectl("get", "pods", "-n", "serving")
    assert table.count("SchedulingGated") == 2 and table.count("Running") == 2, table
    waiting = next(p for p in found if is_gated(p))
    unit_name = waiting["metadata"]["name"] + "-pod"

    async def says_why() -> str:
        status = (await system.unit(unit_name, "serving")).get("status") or {}
        return str(status.get("message")) if status.get("phase") == c.Phase.ENQUEUED.value else ""

    said = await system.wait_for(says_why, 30, "the waiting pod's unit to say why")
    assert "waiting for quota q-serving" in said and "max 2" in said, said

    await system.akubectl("patch", "deployment", "web", "-n", "serving", "--type=merge", "-p",
                          '{"spec":{"replicas":1}}')  # (the embedded server serves no deployments/scale)

    async def one_left() -> bool:
        units = (await system.get_json("queueunits", "-n", "serving"))["items"]
        left = await pods(system, "serving", "app=web")
        live = [p for p in left if not p["metadata"].get("deletionTimestamp")]
        return len(units) == 1 and len(live) == 1 and bound(live[0])

    await system.wait_for(one_left, 60, "one pod and one unit left")

    async def used_one() -> bool:
        got = await system.get_json("elasticquota", "q-serving", "-n", "serving")
        return str(((got.get("status") or {}).get("used") or {}).get(c.GPU)) == "1"

    await system.wait_for(used_one, 30, "the quota's used back to 1 GPU")


async def test_a_kueue_pod_group_is_admitted_whole_or_not_at_all(system: System) -> None:
    await system.apply(namespace("groups"), quota("q-groups", 3, 3, namespace="groups"))
    await system.apply(*(group_pod(f"big-{i}", "groups", "big", 4) for i in range(4)))
    await system.apply(*(group_pod(f"fits-{i}", "groups", "fits", 3) for i in range(3)))

    async def fits_runs() -> bool:
        found = await pods(system, "groups", f"{c.LABEL_KUEUE_POD_GROUP_NAME}=fits")
        return len(found) == 3 and all(bound(p) and not is_gated(p) for p in found)

    await system.wait_for(fits_runs, 60, "the group of 3 admitted whole")
    unit = await system.unit("fits-group", "groups")
    assert unit["spec"]["podSet"][0]["count"] == 3
    big = await pods(system, "groups", f"{c.LABEL_KUEUE_POD_GROUP_NAME}=big")
    assert len(big) == 4 and all(is_gated(p) and not bound(p) for p in big), "4 GPUs past a max of 3: none runs"
    await system.wait_phase("big-group", c.Phase.ENQUEUED.value, namespace="groups")


async def grant_pods(system: System, team: Tenant, role: str, verbs: list[str]) -> None:
    """Give the tenant ``verbs`` on pods in its namespace (Role and RoleBinding ``role``), as
    Kubernetes' own roles may, and wait until the API server says it may use the last."""
    rbac = "rbac.authorization.k8s.io"
    meta = {"name": role, "namespace": team.namespace}
    await system.apply(
        {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": role},
         "subjects": [{"apiGroup": rbac, "kind": "User", "name": team.user}]})

    async def granted() -> bool:
        return await team.may(verbs[-1], "pods")

    await system.wait_for(granted, 10, f"the tenant's {role} binding to take effect")


async def test_a_tenant_may_not_remove_the_gate_and_pods_of_job_kinds_are_not_gated(system: System) -> None:
    team = await tenant(system, "gt1")
    # Kubernetes' own "edit" role lets a namespace's users patch its pods: this tenant may too.
    await grant_pods(system, team, "pods-edit", ["get", "list", "patch", "update"])
    await system.apply(quota("q-gt1", 1, 1, namespace="gt1"))
    await system.akubectl("label", "namespace", "gt1", f"{c.LABEL_MANAGED_NAMESPACE}={c.TRUE}")
    await system.apply(deployment("greedy", "gt1", 2))

    async def one_gated() -> dict[str, Any] | None:
        found = await pods(system, "gt1", "app=greedy")
        gated = [p for p in found if is_gated(p)]
        return gated[0] if len(found) == 2 and len(gated) == 1 else None

    held = await system.wait_for(one_gated, 60, "one pod running, one gated")
    name = held["metadata"]["name"]
    said = await team.akubectl("patch", "pod", name, "--type=json", "-p",
                               '[{"op":"remove","path":"/spec/schedulingGates"}]', check=False)
    assert refused(said) and "only the controller may remove its scheduling gate" in said, said
    assert is_gated(await system.get_json("pod", name, "-n", "gt1"))
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "plain", "namespace": "gt1"},
           "spec": {"template": {"spec": {**pod_spec(0), "restartPolicy": "Never"}}}}
    await system.apply(job)

    async def job_pod() -> list[dict[str, Any]]:
        return await pods(system, "gt1", "batch.kubernetes.io/job-name=plain")

    made = await system.wait_for(job_pod, 60, "the Job's pod")
    assert not any(is_gated(p) for p in made), json.dumps(made[0]["spec"])


async def test_inference_preempts_a_deployment_whose_pods_come_back_gated(system: System) -> None:
    """A higher-priority pod group takes the quota of a running Deployment: the Deployment's
    units are preempted, their pods deleted; its ReplicaSet makes them again, gated, to queue."""
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "gated-inference"},
          "value": 1000}
    await system.apply(pc, managed("shared"), quota("q-shared", 2, 2, namespace="shared"))
    await system.apply(deployment("batchy", "shared", 2))

    async def both_run() -> list[dict[str, Any]] | None:
        found = await pods(system, "shared", "app=batchy")
        return found if len(found) == 2 and all(bound(p) and not is_gated(p) for p in found) else None

    first = {p["metadata"]["name"] for p in await system.wait_for(both_run, 60, "the Deployment's 2 pods running")}
    # Priority preemption inside a quota is the Queue's to allow (docs/annotations.md).
    await system.akubectl("annotate", "queue", "q-shared", "-n", c.SYSTEM_NAMESPACE,
                          f"{c.ANNOTATION_ENABLE_PREEMPTION}=true")
    urgent = [group_pod(f"urgent-{i}", "shared", "urgent", 2) for i in range(2)]
    for pod in urgent:
        pod["spec"]["priorityClassName"] = "gated-inference"
    await system.apply(*urgent)

    async def swapped() -> bool:
        high = await pods(system, "shared", f"{c.LABEL_KUEUE_POD_GROUP_NAME}=urgent")
        low = [p for p in await pods(system, "shared", "app=batchy") if not p["metadata"].get("deletionTimestamp")]
        return len(high) == 2 and all(bound(p) and not is_gated(p) for p in high) and len(low) == 2 and \
            all(is_gated(p) and not bound(p) and p["metadata"]["name"] not in first for p in low)

    await system.wait_for(swapped, 90, "the group running and the Deployment's pods made again, gated")
    said = await system.akubectl("get", "events", "-n", "shared", "--field-selector", "reason=Evicted")
    assert "its QueueUnit" in said, said


async def test_with_the_validating_webhook_off_a_pod_run_ungated_unadmitted_is_evicted_and_comes_back_gated(
        system: System) -> None:
    await system.apply(managed("bypass"), quota("q-bypass", 1, 1, namespace="bypass"))
    await system.apply(deployment("sneaky", "bypass", 2))

    async def one_gated() -> dict[str, Any] | None:
        found = await pods(system, "bypass", "app=sneaky")
        gated = [p for p in found if is_gated(p)]
        return gated[0] if len(found) == 2 and len(gated) == 1 else None

    held = await system.wait_for(one_gated, 60, "one pod running, one gated")
    await validating_webhook_off(system)
    await system.akubectl("patch", "pod", held["metadata"]["name"], "-n", "bypass", "--type=json", "-p",
                          '[{"op":"remove","path":"/spec/schedulingGates"}]')

    async def replaced() -> bool:
        found = [p for p in await pods(system, "bypass", "app=sneaky") if not p["metadata"].get("deletionTimestamp")]
        names = {p["metadata"]["name"] for p in found}
        return len(found) == 2 and held["metadata"]["name"] not in names and sum(map(is_gated, found)) == 1

    await system.wait_for(replaced, 60, "the ungated pod deleted and made again, gated")
    said = await system.akubectl("get", "events", "-n", "bypass", "--field-selector", "reason=Evicted")
    assert "ran without its scheduling gate" in said, said


async def test_a_pod_group_without_a_readable_size_is_held_and_told_why(system: System) -> None:
    await system.apply(namespace("badgroup"), quota("q-badgroup", 4, 4, namespace="badgroup"))
    broken = group_pod("odd-0", "badgroup", "odd", 2)
    broken["metadata"]["annotations"][c.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT] = "two"
    await system.apply(broken)

    async def told() -> str:
        return await system.akubectl("get", "events", "-n", "badgroup", "--field-selector", "reason=InvalidJob")

    said = await system.wait_for(told, 30, "the pod told why its group is held")
    assert "'two' is not a count of pods" in said, said
    unit = await system.unit("odd-group", "badgroup")
    assert unit["spec"]["active"] is False
    assert is_gated(await system.get_json("pod", "odd-0", "-n", "badgroup"))


async def test_an_ordered_statefulset_of_three_in_a_quota_of_two_runs_two_and_scales_down(system: System) -> None:
    """OrderedReady (the default) makes one pod at a time: each is queued on its own, so the
    first two run and the third waits gated; scaled to 1, the highest ordinals go with their units."""
    await system.apply(namespace("ordered"), quota("q-ordered", 2, 2, namespace="ordered"))
    template = {"metadata": {"labels": {"app": "db", c.LABEL_KUEUE_QUEUE_NAME: "default"}}, "spec": pod_spec()}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "ordered"},
           "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                    "template": template}}
    await system.apply(sts)

    async def two_run_one_waits() -> bool:
        found = {p["metadata"]["name"]: p for p in await pods(system, "ordered", "app=db")}
        return set(found) == {"db-0", "db-1", "db-2"} and bound(found["db-0"]) and bound(found["db-1"]) \
            and is_gated(found["db-2"]) and not bound(found["db-2"])

    await system.wait_for(two_run_one_waits, 90, "db-0 and db-1 running, db-2 gated")
    await system.wait_phase("db-2-pod", c.Phase.ENQUEUED.value, namespace="ordered")
    await system.akubectl("patch", "statefulset", "db", "-n", "ordered", "--type=merge", "-p",
                          '{"spec":{"replicas":1}}')

    async def one_left() -> bool:
        units = [u["metadata"]["name"] for u in (await system.get_json("queueunits", "-n", "ordered"))["items"]]
        return units == ["db-0-pod"] and [p["metadata"]["name"] for p in await pods(system, "ordered", "app=db")] \
            == ["db-0"]

    await system.wait_for(one_left, 90, "db-0 alone, with its unit")


async def test_a_plain_pod_that_finishes_gives_its_quota_back(system: System) -> None:
    await system.apply(managed("oneshot"), quota("q-oneshot", 1, 1, namespace="oneshot"))
    first = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "first", "namespace": "oneshot"},
             "spec": {**pod_spec(), "restartPolicy": "Never"}}
    # (the simulated kubelet, and kwok's stages on kube, end a pod after this long)
    first["metadata"]["annotations"] = {c.ANNOTATION_SIM_DURATION: "1"}
    second = {**first, "metadata": {**first["metadata"], "name": "second"}}
    await system.apply(first, second)

    async def both_done() -> bool:
        found = {p["metadata"]["name"]: p["status"].get("phase") for p in await pods(system, "oneshot")}
        return found == {"first": c.POD_SUCCEEDED, "second": c.POD_SUCCEEDED}

    await system.wait_for(both_done, 60, "one pod after the other, each in the quota of 1, both Succeeded")

    async def no_units() -> bool:
        return not (await system.get_json("queueunits", "-n", "oneshot"))["items"]

    await system.wait_for(no_units, 30, "their units gone")
