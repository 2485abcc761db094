"""DRA for workloads queued by gate (controller/podgroups.py, docs/gpus.md "DRA"), on both
control planes: a Deployment's pods that use a ResourceClaimTemplate are charged, per pod, the
quota resource its device class maps to, as a job's are (controller/dra.py), so that a tenant
gets no devices beyond the quota; a pod whose template is not there yet is queued once it is
created; a device class no mapping names holds the pod's unit, saying so."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.dra import parse_mappings
from koordqueue.controller.dra import held_devices, published_devices

from .conftest import System, SystemFactory
from .test_dra import (
    DEVICE_CLASS,
    DRA,
    DRIVER,
    RESOURCE,
    admitted,
    claim_template,
    config,
    device_quota,
    job,
    publish_devices,
)
from .test_gated_workloads import bound, is_gated, managed, pod_spec, pods

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

NS = "dra-serving"


def in_ns(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["namespace"] = NS
    return obj


def deployment(name: str, template: str, replicas: int) -> dict[str, Any]:
    spec = pod_spec(0)
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


async def units(system: System) -> list[dict[str, Any]]:
    return list((await system.get_json("queueunits", "-n", NS))["items"])


async def test_a_deployments_claims_are_charged_and_pods_past_the_quota_stay_gated(
        start_system: SystemFactory, control_plane: str) -> None:
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=4)
        await system.apply(managed(NS))
        await system.apply(in_ns(device_quota("q", 2)), in_ns(claim_template("one", 1)))
        await system.apply(deployment("web", "one", 3))  # 3 pods x 1 device, in a quota of 2

        async def two_and_one() -> list[dict[str, Any]] | None:
            found = await units(system)
            phases = sorted(str((u.get("status") or {}).get("phase")) for u in found)
            return found if phases == [c.Phase.DEQUEUED.value] * 2 + [c.Phase.ENQUEUED.value] or \
                sorted(phases) == sorted([c.Phase.RUNNING.value] * 2 + [c.Phase.ENQUEUED.value]) else None

        found = await system.wait_for(two_and_one, 60, "two pods' units admitted and the third waiting")
        assert {u["spec"]["resource"][RESOURCE] for u in found} == {"1"}
        waiting = next(u for u in found if u["status"]["phase"] == c.Phase.ENQUEUED.value)
        assert RESOURCE in waiting["status"].get("message", ""), waiting["status"]
        left = await pods(system, NS, "app=web")
        assert sum(1 for p in left if is_gated(p)) == 1, [p["metadata"]["name"] for p in left if is_gated(p)]
        if control_plane == "kube":
            async def two_bound() -> bool:
                return sum(1 for p in await pods(system, NS, "app=web") if bound(p)) == 2

            await system.wait_for(two_bound, 60, "the two admitted pods bound, their claims allocated")
            claims = (await system.get_json("resourceclaims", "-n", NS))["items"]
            allocated = [cl for cl in claims if (cl.get("status") or {}).get("allocation")]
            assert len(allocated) == 2, claims


async def test_a_pod_whose_template_is_missing_is_queued_once_it_is_created(start_system: SystemFactory) -> None:
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=4)
        await system.apply(managed(NS))
        await system.apply(in_ns(device_quota("q", 2)))
        await system.apply(deployment("early", "later-made", 1))

        async def warned() -> str | None:
            for pod in await pods(system, NS, "app=early"):
                events = await system.events(pod["metadata"]["name"], NS)
                if any(e["reason"] == c.EventReason.RESOURCE_CLAIM_NOT_FOUND and
                       "ResourceClaimTemplate later-made" in e["message"] for e in events):
                    return str(pod["metadata"]["name"])
            return None

        name = await system.wait_for(warned, 30, "a Warning on the pod naming the missing template")
        assert await units(system) == [], "no unit (charged nothing) while its template is missing"
        await system.apply(in_ns(claim_template("later-made", 2)))

        async def admitted() -> dict[str, Any] | None:
            found = await units(system)
            return found[0] if found and (found[0].get("status") or {}).get("phase") in (
                c.Phase.DEQUEUED.value, c.Phase.RUNNING.value) else None

        unit = await system.wait_for(admitted, 15, "the pod's unit made and admitted once its template is")
        assert unit["metadata"]["name"] == f"{name}-pod"
        assert unit["spec"]["resource"][RESOURCE] == "2"


async def test_a_device_class_no_mapping_names_holds_the_pods_unit_saying_so(start_system: SystemFactory) -> None:
    async with start_system(config=config()) as system:
        await system.apply(managed(NS))
        await system.apply(in_ns(device_quota("q", 2)),
                           in_ns(claim_template("tpus", 1, device_class_name="tpu.example.com")))
        await system.apply(deployment("unmapped", "tpus", 1))

        async def held() -> dict[str, Any] | None:
            found = await units(system)
            return found[0] if found else None

        unit = await system.wait_for(held, 30, "the pod's unit made")
        assert unit["spec"].get("active") is False
        name = unit["metadata"]["name"].removesuffix("-pod")

        async def warned() -> bool:
            return any(e["type"] == c.EventType.WARNING and "device class tpu.example.com is mapped to no quota "
                       "resource" in e["message"] for e in await system.events(name, NS))

        await system.wait_for(warned, 30, "a Warning on the pod naming the unmapped device class")
        assert all(is_gated(p) for p in await pods(system, NS, "app=unmapped"))


def test_devices_held_by_allocated_claims_are_taken_off_their_nodes_room() -> None:
    """Placement (controller/dra.held_devices): a device an allocated claim holds, found by its
    driver and pool, is used room on that pool's node; other drivers' and unknown pools' are ignored."""
    mappings = parse_mappings(f"{DEVICE_CLASS}={RESOURCE}:2@{DRIVER}")
    slices = [("a", ("node-a", DRIVER, 4, "node-a")), ("b", ("node-b", DRIVER, 4, "node-b")),
              ("c", ("node-a", "other.example.com", 8, "other"))]
    held = ((DRIVER, "node-a", "gpu-0"), (DRIVER, "node-a", "gpu-1"), ("other.example.com", "other", "x"),
            (DRIVER, "gone", "gpu-0"))
    claims = [("ns/one", {"allocated": held[:2]}), ("ns/again", {"allocated": held[1:]})]  # gpu-1 once
    assert published_devices(mappings, slices) == {"node-a": {RESOURCE: 8000}, "node-b": {RESOURCE: 8000}}
    assert held_devices(mappings, slices, claims) == {"node-a": {RESOURCE: 4000}}


async def test_a_node_whose_devices_claims_hold_takes_no_pod_asking_for_them(
        start_system: SystemFactory, control_plane: str) -> None:
    """Placement: the devices a ResourceClaim's allocation holds on a node (kube-scheduler's
    for a pod bound there) are not free room for a job's pods, though quota has room."""
    if control_plane == "kube":  # (the allocation is written by hand here)
        pytest.skip("kube-controller-manager clears the allocation of a claim no pod reserves, and the session's "
                    "cluster keeps other tests' slices")
    async with start_system(config=config()) as system:
        (node,) = await publish_devices(system, per_node=2, nodes=1)
        await system.apply(device_quota("q", 8), claim_template("two", 2))
        held = {"apiVersion": DRA, "kind": c.RESOURCE_CLAIM_KIND, "metadata": {"name": "held", "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DEVICE_CLASS,
                                                                                "count": 2}}]}}}
        await system.apply(held)
        allocation = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"}
                                              for i in range(2)]},
                      "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                          {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
        await system.akubectl("patch", "resourceclaim", "held", "-n", "default", "--subresource=status",
                              "--type=merge", "-p", json.dumps({"status": {"allocation": allocation}}))
        await system.apply(job("late", "two", workers=0))  # 1 pod x 2 devices: none free on the node

        async def unplaced() -> bool:
            message = str((await system.unit("late-py-qu")).get("status", {}).get("message", ""))
            return "node" in message and RESOURCE in message

        await system.wait_for(unplaced, what="the job waiting for nodes with free devices")
        assert await system.phase("late-py-qu") == c.Phase.ENQUEUED
        await system.akubectl("delete", "resourceclaim", "held", "-n", "default")
        await admitted(system, "late-py-qu", 15)  # its devices free again
