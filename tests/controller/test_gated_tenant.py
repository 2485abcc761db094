"""A tenant against workloads queued by gate (controller/podgroups.py), on both control planes:
pods created already carrying our mark are gated all the same; pods of an admitted group that
run ungated beyond what its unit was admitted for (more pods, bigger ones) are deleted; and a
later pod of a group whose DRA claims ask more than the pod its unit was charged for, or cannot
be charged, keeps its gate."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.webhook import MUTATING_WEBHOOKS, SuspendWebhook
from koordqueue.kube.errors import NotFound
from koordqueue.up import WEBHOOK_CONFIG
from tests.security.conftest import refused, tenant, validating_webhook_off

from .conftest import System, SystemFactory, quota
from .test_dra import RESOURCE, claim_template, config, device_quota, publish_devices
from .test_gated_workloads import bound, grant_pods, group_pod, is_gated, managed, pod_spec, pods
from .test_quota_tree import namespace

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

GROUP = f"{c.LABEL_KUEUE_POD_GROUP_NAME}=g"


def marked(name: str, ns: str, gpus: int) -> dict[str, Any]:
    """A pod of group g (total count 1) that says it is ours and asks for ``gpus``, with no gate."""
    pod = group_pod(name, ns, "g", 1)
    pod["metadata"]["labels"][c.LABEL_GATED_POD] = c.TRUE
    pod["spec"] = pod_spec(gpus)
    return pod


def live(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in found if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in (c.POD_SUCCEEDED, c.POD_FAILED)]


def gpus_bound(found: list[dict[str, Any]]) -> int:
    return sum(int(p["spec"]["containers"][0]["resources"]["requests"][c.GPU]) for p in live(found) if bound(p))


async def admitted_alone(system: System, ns: str) -> None:
    """g-0 (1 GPU, the group's one pod) running on its unit's admission."""
    await system.apply(group_pod("g-0", ns, "g", 1))

    async def runs() -> bool:
        found = await pods(system, ns, GROUP)
        return len(found) == 1 and bound(found[0]) and not is_gated(found[0])

    await system.wait_for(runs, 60, "g-0 admitted and running")


async def test_the_webhook_gates_a_new_pod_that_carries_our_mark() -> None:
    hook = SuspendWebhook(None, ControllerConfig(workload_kinds=frozenset(c.WORKLOAD_EXTENSIONS)))  # type: ignore[arg-type]
    for pod in (marked("p", "ns", 1), {**marked("p", "ns", 1), "metadata": {
            "name": "p", "labels": {c.LABEL_GATED_POD: c.TRUE}}}):  # (opted in by our mark alone)
        review = {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "ns",
                  "operation": "CREATE", "object": pod}
        assert "patch" in (await hook.gate(review))["response"], pod


async def test_pods_created_with_our_mark_are_gated_and_stay_so_beyond_the_group(system: System) -> None:
    """The reviewer's finding: three 8-GPU pods labelled gated and of an admitted group of one ran
    beside it (25 GPUs in a quota of max 1)."""
    await system.apply(namespace("marked"), quota("q-marked", 1, 1, namespace="marked"))
    await admitted_alone(system, "marked")
    await system.apply(*(marked(f"extra-{i}", "marked", 8) for i in range(3)))

    async def all_there() -> list[dict[str, Any]] | None:
        found = await pods(system, "marked", GROUP)
        return found if len(found) == 4 else None

    found = {p["metadata"]["name"]: p for p in await system.wait_for(all_there, 30, "the three extra pods")}
    assert all(is_gated(found[f"extra-{i}"]) for i in range(3)), "created with our mark: gated all the same"
    await asyncio.sleep(3)  # (the controller's syncs of the group, with its unit admitted)
    found = {p["metadata"]["name"]: p for p in await pods(system, "marked", GROUP)}
    assert all(is_gated(found[f"extra-{i}"]) and not bound(found[f"extra-{i}"]) for i in range(3)), found
    assert gpus_bound(list(found.values())) == 1


async def mutating_webhook_off(system: System, ns: str) -> None:
    """The mutating webhook unregistered (as when it is off or fails open), and seen so: an
    opted-in pod is created ungated (kube-apiserver drops it when its watch brings the deletion)."""
    with contextlib.suppress(NotFound):
        await system.client.delete(MUTATING_WEBHOOKS, WEBHOOK_CONFIG)
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "probe", "namespace": ns, "labels": {c.LABEL_KUEUE_QUEUE_NAME: "default"}},
             "spec": pod_spec(0)}

    async def ungated() -> bool:
        await system.apply(probe)
        made = await system.get_json("pod", "probe", "-n", ns)
        await system.akubectl("delete", "pod", "probe", "-n", ns, "--wait=true")
        return not is_gated(made)

    await system.wait_for(ungated, 30, "a pod created ungated, the mutating webhook gone")


async def test_with_the_mutating_webhook_off_ungated_pods_beyond_an_admitted_group_are_deleted(
        system: System) -> None:
    """Made past both webhooks, the 8-GPU pods of the group (its size 1, its pod 1 GPU) are
    deleted while its unit holds quota; the admitted pod is left running."""
    await system.apply(namespace("beyond"), quota("q-beyond", 1, 1, namespace="beyond"))
    await admitted_alone(system, "beyond")
    await validating_webhook_off(system)
    await mutating_webhook_off(system, "beyond")
    await system.apply(*(marked(f"extra-{i}", "beyond", 8) for i in range(3)), marked("same", "beyond", 1))

    async def only_g0() -> bool:
        found = live(await pods(system, "beyond", GROUP))
        return [p["metadata"]["name"] for p in found] == ["g-0"] and bound(found[0])

    await system.wait_for(only_g0, 60, "the ungated pods beyond the group's one deleted, g-0 left")
    said = await system.akubectl("get", "events", "-n", "beyond", "--field-selector", "reason=Evicted")
    assert "asks for more than the pod its QueueUnit g-group was admitted for" in said, said
    assert "its group's 1 admitted pods run already" in said, said  # ("same": the size of g-0, one too many)
    assert not any("pod/g-0" in line for line in said.splitlines()), said


async def test_a_tenant_may_not_create_a_pod_marked_ours_without_the_gate(system: System) -> None:
    """With the mutating webhook off (or skipped), the validating one refuses a pod created with
    our mark and no gate by anyone but the controller."""
    team = await tenant(system, "gt2")
    await grant_pods(system, team, "pods-create", ["get", "list", "patch", "create"])
    await system.apply(quota("q-gt2", 1, 1, namespace="gt2"))
    await mutating_webhook_off(system, "gt2")
    said = await team.akubectl("apply", "-f", "-", stdin=json.dumps(marked("sneak", "gt2", 8)), check=False)
    assert refused(said) and f"carries {c.LABEL_GATED_POD} without the scheduling gate" in said, said
    assert not await pods(system, "gt2", GROUP)


# --- DRA: a later pod's claims ---

NS = "dra-tenant"


def dra_pod(name: str, group: str, template: str) -> dict[str, Any]:
    pod = group_pod(name, NS, group, 2)
    spec = pod_spec(0)
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    pod["spec"] = spec
    return pod


def in_ns(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["namespace"] = NS
    return obj


async def test_a_later_pod_whose_claims_ask_more_or_are_unmapped_keeps_its_gate(start_system: SystemFactory) -> None:
    """Groups g and h of 2 pods admitted for 1 device each (max 4): g's second pod names a
    template of 4 devices, h's one of a class no mapping names; both stay gated, told why."""
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=4)
        await system.apply(managed(NS))
        await system.apply(in_ns(device_quota("q", 4)), in_ns(claim_template("one", 1)),
                           in_ns(claim_template("four", 4)),
                           in_ns(claim_template("tpus", 1, device_class_name="tpu.example.com")))
        await system.apply(dra_pod("a", "g", "one"), dra_pod("c", "h", "one"))

        async def first_ones_run() -> bool:
            found = {p["metadata"]["name"]: p for p in await pods(system, NS)}
            return set(found) == {"a", "c"} and not any(map(is_gated, found.values()))

        await system.wait_for(first_ones_run, 60, "a and c ungated, their groups admitted")
        for name in ("g-group", "h-group"):
            assert (await system.unit(name, NS))["spec"]["resource"][RESOURCE] == "2"
        await system.apply(dra_pod("b", "g", "four"), dra_pod("d", "h", "tpus"))

        async def told() -> tuple[list[dict[str, Any]], ...] | None:
            said = tuple([[e for e in await system.events(name, NS) if "QueueUnit" in e["message"]]
                          for name in ("b", "d")])
            return said if all(said) else None

        b, d = await system.wait_for(told, 30, "b and d ungated, or told why not")
        found = {p["metadata"]["name"]: p for p in await pods(system, NS)}
        assert is_gated(found["b"]) and is_gated(found["d"]) and not bound(found["b"]) and not bound(found["d"])
        assert not is_gated(found["a"]) and not is_gated(found["c"])
        assert any(e["reason"] == c.EventReason.KEPT_GATED and f"its DRA claims ask for more {RESOURCE}"
                   in e["message"] for e in b), b
        assert any(e["reason"] == c.EventReason.KEPT_GATED and "device class tpu.example.com is mapped to no "
                   "quota resource" in e["message"] for e in d), d
