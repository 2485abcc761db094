"""DRA for workloads queued by gate (controller/podgroups.py, docs/gpus.md "DRA"), on both
control planes: a Deployment's pods that use a ResourceClaimTemplate are charged, per pod, the
quota resource its device class maps to, as a job's are (controller/dra.py), so that a tenant
gets no devices beyond the quota; a pod whose template is not there yet is queued once it is
created; a device class no mapping names holds the pod's unit, saying so."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.dra import parse_mappings
from koordqueue.controller.dra import free_devices

from .conftest import System, SystemFactory
from .test_dra import DEVICE_CLASS, DRIVER, RESOURCE, claim_template, config, device_quota, publish_devices
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
    """Placement (controller/dra.free_devices): a device an allocated claim holds, found by its
    driver and pool, is not free on that pool's node; other drivers' and unknown pools' are ignored."""
    mappings = parse_mappings(f"{DEVICE_CLASS}={RESOURCE}:2@{DRIVER}")
    slices = [("a", ("node-a", DRIVER, 4, "node-a")), ("b", ("node-b", DRIVER, 4, "node-b")),
              ("c", ("node-a", "other.example.com", 8, "other"))]
    held = ((DRIVER, "node-a", "gpu-0"), (DRIVER, "node-a", "gpu-1"), ("other.example.com", "other", "x"),
            (DRIVER, "gone", "gpu-0"))
    claims = [("ns/one", {"allocated": held[:2]}), ("ns/again", {"allocated": held[1:]})]  # gpu-1 once
    assert free_devices(mappings, slices, claims) == {"node-a": {RESOURCE: 4000}, "node-b": {RESOURCE: 8000}}
