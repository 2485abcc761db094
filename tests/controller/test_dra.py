"""DRA through the controller (issue 32 item 3, docs/gpus.md "DRA"), on both control planes:
a job whose pods use a ResourceClaimTemplate is charged, per pod, the quota resource its
device class maps to (--device-class-mappings); a job past its quota waits with a message
naming the device class; a job whose template is not there yet waits naming it and is
queued once it is created; a device class no mapping names is refused, saying so. On the
real control plane kube-scheduler allocates the claims of the jobs we admitted, from
ResourceSlices published by hand for the kwok nodes, never more devices than the quota maps."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.config import ControllerConfig

from .conftest import System, SystemFactory, pytorch_job, quick_config

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

DEVICE_CLASS = "gpu.example.com"
DRIVER = "gpu.example.com"
RESOURCE = "example.com/gpu"
DRA = f"{c.DRA_GROUP}/{c.DRA_VERSION}"


def config() -> ControllerConfig:
    return quick_config(device_class_mappings=f"{DEVICE_CLASS}={RESOURCE}@{DRIVER}")


def device_quota(name: str, devices: int) -> dict[str, Any]:
    room = {RESOURCE: str(devices), "cpu": "64", "memory": "256Gi", c.GPU: "0"}
    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": name, "namespace": "default"}, "spec": {"min": room, "max": room}}


def device_class() -> dict[str, Any]:
    return {"apiVersion": DRA, "kind": c.DEVICE_CLASS_KIND, "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def claim_template(name: str, count: int, device_class_name: str = DEVICE_CLASS) -> dict[str, Any]:
    return {"apiVersion": DRA, "kind": c.RESOURCE_CLAIM_TEMPLATE_KIND,
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": device_class_name, "count": count}}]}}}}


def resource_slice(node: str, devices: int) -> dict[str, Any]:
    return {"apiVersion": DRA, "kind": c.RESOURCE_SLICE_KIND, "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}"} for i in range(devices)]}}


def using(job: dict[str, Any], template: str) -> dict[str, Any]:
    """Each pod of ``job`` gets a claim made from ``template`` (and its container uses it)."""
    for role in job["spec"]["pytorchReplicaSpecs"].values():
        spec = role["template"]["spec"]
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return job


def job(name: str, template: str, workers: int = 1) -> dict[str, Any]:
    return using(pytorch_job(name, gpus_per_pod=0, workers=workers, quota_name="q"), template)


async def publish_devices(system: System, per_node: int, nodes: int = 2) -> list[str]:
    names = sorted(n["metadata"]["name"] for n in (await system.get_json("nodes"))["items"]
                   if not (n["spec"].get("taints")))[:nodes]
    await system.apply(device_class(), *(resource_slice(node, per_node) for node in names))
    return names


async def message_of(system: System, unit: str) -> str:
    return str((await system.unit(unit)).get("status", {}).get("message", ""))


async def admitted(system: System, unit: str, timeout: float = 30.0) -> None:
    async def held() -> bool:
        return await system.phase(unit) in (c.Phase.DEQUEUED, c.Phase.RUNNING)

    await system.wait_for(held, timeout, f"{unit} admitted")


async def test_claims_are_charged_and_a_job_past_the_quota_waits_naming_the_device_class(
        start_system: SystemFactory, control_plane: str) -> None:
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=4)
        await system.apply(device_quota("q", 4), claim_template("two", 2))
        await system.apply(job("first", "two"))  # 2 pods x 2 devices: 4, all the quota
        await admitted(system, "first-py-qu")
        unit = await system.unit("first-py-qu")
        assert unit["spec"]["resource"][RESOURCE] == "4"
        assert {ps["name"]: ps["template"]["spec"]["containers"][0]["resources"]["requests"][RESOURCE]
                for ps in unit["spec"]["podSet"]} == {"master": "2", "worker": "2"}

        await system.apply(job("second", "two", workers=0))  # 2 more: past the quota

        async def waits() -> bool:
            return f"{RESOURCE} (device class {DEVICE_CLASS}) asks 2" in await message_of(system, "second-py-qu")

        await system.wait_for(waits, what="the second job waiting, naming the device class")
        assert await system.phase("second-py-qu") == c.Phase.ENQUEUED
        if control_plane == "kube":
            await allocated_by_kube_scheduler(system, "first", 4)


async def allocated_by_kube_scheduler(system: System, job_name: str, devices: int) -> None:
    """The claims made for the admitted job's pods are allocated by kube-scheduler and its
    pods bound; no claim of a job we did not admit is allocated, and no more devices than
    the quota maps are."""
    async def allocated() -> bool:
        claims = (await system.get_json("resourceclaims"))["items"]
        done = [cl for cl in claims if (cl.get("status") or {}).get("allocation")]
        pods = [p for p in (await system.get_json("pods"))["items"]
                if (p["metadata"].get("labels") or {}).get(c.LABEL_JOB_NAME) == job_name]
        return len(done) == 2 and len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods)

    await system.wait_for(allocated, 60, f"{job_name}'s claims allocated and its pods bound")
    claims = (await system.get_json("resourceclaims"))["items"]
    results = [r for cl in claims for r in ((cl.get("status") or {}).get("allocation") or {})
               .get("devices", {}).get("results", [])]
    assert len(results) == devices
    owners = {(cl["metadata"].get("annotations") or {}).get("resource.kubernetes.io/pod-claim-name") for cl in claims}
    assert owners <= {"gpus"}


async def test_a_job_whose_template_is_missing_waits_naming_it_until_it_is_created(
        start_system: SystemFactory) -> None:
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=4)
        await system.apply(device_quota("q", 4))
        await system.apply(job("early", "later-made"))

        async def waits() -> bool:
            message = await message_of(system, "early-py-qu")
            return "ResourceClaimTemplate later-made, which does not exist" in message

        await system.wait_for(waits, what="the job waiting for its template, naming it")
        assert await system.phase("early-py-qu") == c.Phase.ENQUEUED

        async def warned() -> bool:
            return any(e["type"] == c.EventType.WARNING and e["reason"] == c.EventReason.RESOURCE_CLAIM_NOT_FOUND
                       and "ResourceClaimTemplate later-made" in e["message"] for e in await system.events("early"))

        await system.wait_for(warned, what="a Warning on the job naming the missing template")
        await system.apply(claim_template("later-made", 1))
        await admitted(system, "early-py-qu", 10)  # at once, not at a later resync (UnitSync._claims_changed)

        async def charged() -> bool:  # the engine is told at once; the job's reconciler rewrites the spec after
            return (await system.unit("early-py-qu"))["spec"]["resource"].get(RESOURCE) == "2"

        await system.wait_for(charged, 10, "the unit's spec charging the template's devices, 1 per pod")


async def test_a_device_class_no_mapping_names_is_refused_saying_so(start_system: SystemFactory) -> None:
    async with start_system(config=config()) as system:
        await system.apply(device_quota("q", 4), claim_template("tpus", 1, device_class_name="tpu.example.com"))
        await system.apply(job("unmapped", "tpus"))

        async def warned() -> bool:
            return any(e["type"] == c.EventType.WARNING and "device class tpu.example.com is mapped to no quota "
                       "resource" in e["message"] for e in await system.events("unmapped"))

        await system.wait_for(warned, what="a Warning on the job naming the unmapped device class")
        assert (await system.get_json("pytorchjob", "unmapped"))["metadata"]["annotations"][
            c.ANNOTATION_SUSPEND] == c.TRUE


async def test_no_devices_on_the_nodes_keeps_a_job_waiting_for_node_room(start_system: SystemFactory) -> None:
    """Placement: with the driver mapped, only nodes whose ResourceSlices publish devices
    of the class take the job's pods; one pod asking more devices than any node has waits."""
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=2)
        await system.apply(device_quota("q", 8), claim_template("three", 3))
        await system.apply(job("big", "three", workers=0))

        async def unplaced() -> bool:
            message = await message_of(system, "big-py-qu")
            return "node" in message and RESOURCE in message

        await system.wait_for(unplaced, what="the job waiting for nodes with its devices")
        assert await system.phase("big-py-qu") == c.Phase.ENQUEUED


async def test_a_template_made_again_asking_more_sends_the_admitted_job_back(start_system: SystemFactory) -> None:
    """A tenant cannot change what a template asks for (its spec is immutable), but may delete
    it and make another of the same name asking more: pods made since would get the bigger
    claims. The admitted job is then charged no more than it was admitted with, and sent back
    to be queued at its new size, where it waits past its quota, naming the device class."""
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=4)
        await system.apply(device_quota("q", 2), claim_template("grows", 1))
        await system.apply(job("grower", "grows", workers=0))
        await admitted(system, "grower-py-qu")
        await system.akubectl("delete", "resourceclaimtemplate", "grows")
        await system.apply(claim_template("grows", 3))

        async def sent_back() -> bool:
            unit = await system.unit("grower-py-qu")
            return unit.get("status", {}).get("phase") == c.Phase.ENQUEUED and \
                f"{RESOURCE} (device class {DEVICE_CLASS}) asks 3" in unit["status"].get("message", "")

        await system.wait_for(sent_back, 15, "the grown job sent back, waiting past its quota")
        job_now = await system.get_json("pytorchjob", "grower")
        assert job_now["metadata"]["annotations"][c.ANNOTATION_SUSPEND] == c.TRUE
