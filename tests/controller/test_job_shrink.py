"""An admitted job that asks less per pod keeps its charge (docs/security.md, "Max"): its
running pods keep what they were made with (no operator makes them again when a template
shrinks, and claims made from a ResourceClaimTemplate stay as they were made), so until it is
next queued each pod is charged at least what it was admitted with. Fewer pods charge less at
once (tests/security/test_growth.py). On both control planes: the quota's status.used and the
GPUs its bound pods ask stay within its max while another job waits."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller import status as st
from koordqueue.controller.views import adapter_of_kind, job_view, queue_unit_manifest, unit_info, unit_view
from koordqueue.controller.webhook import growth
from koordqueue.jobs.pytorchjob import PyTorchJobAdapter

from .conftest import System, SystemFactory, pytorch_job, quota
from .test_dra import RESOURCE, admitted, claim_template, config, device_quota, publish_devices, using
from .test_koord_queue_keys import annotate

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]


async def used(system: System, quota_name: str, resource: str) -> str:
    found = await system.get_json("elasticquota", quota_name)
    return str(((found.get("status") or {}).get("used") or {}).get(resource, "0"))


async def bound_gpus(system: System) -> int:
    """What the bound pods of the default namespace ask of nvidia.com/gpu (their first container's limits)."""
    pods = (await system.get_json("pods"))["items"]
    return sum(int(((p["spec"]["containers"][0].get("resources") or {}).get("limits") or {}).get(c.GPU, 0))
               for p in pods if p["spec"].get("nodeName") and p.get("status", {}).get("phase") in ("Pending", "Running"))


async def spec_shows(system: System, unit: str, resource: str, amount: str | None) -> None:
    """The unit's spec (rewritten from its job by its reconciler) asks ``amount`` (None: none):
    the controller has read the change."""
    async def shown() -> bool:
        return (await system.unit(unit))["spec"]["resource"].get(resource) == amount

    await system.wait_for(shown, 30, f"{unit}'s spec asking {amount} {resource}")


async def waits_for_quota(system: System, unit: str) -> None:
    async def waits() -> bool:
        status = (await system.unit(unit)).get("status", {})
        return status.get("phase") == c.Phase.ENQUEUED and "waiting for quota" in status.get("message", "")

    await system.wait_for(waits, 30, f"{unit} waiting for quota")


async def patch_master(system: System, name: str, change: Any, check: bool = True) -> str:
    """Merge-patch the job's Master pod template: ``change`` edits its spec (a copy of it);
    what kubectl said."""
    master = (await system.get_json("pytorchjob", name))["spec"]["pytorchReplicaSpecs"]["Master"]
    spec = master["template"]["spec"]
    change(spec)
    patch = {"spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": spec}}}}}
    return await system.akubectl("patch", "pytorchjob", name, "--type=merge", "-p", json.dumps(patch), check=check)


def device_job(name: str, template: str) -> dict[str, Any]:
    """One pod whose claim is made from ``template``, running long."""
    return using(pytorch_job(name, gpus_per_pod=0, workers=0, quota_name="q", duration=600), template)


def gpus(n: int) -> Any:
    def change(spec: dict[str, Any]) -> None:
        for part in ("requests", "limits"):
            spec["containers"][0]["resources"][part][c.GPU] = str(n)
    return change


def no_claims(spec: dict[str, Any]) -> None:
    spec["resourceClaims"] = None
    spec["containers"][0]["resources"].pop("claims")


async def test_a_running_job_whose_pods_ask_less_keeps_its_charge(system: System) -> None:
    """The reviewer's repro: big (1 pod x 4 GPUs) runs in q of max 4; its Master template patched
    to 1 GPU. Its pod still holds 4: q stays charged 4, and more (3 GPUs) waits, where it ran
    before (7 GPUs bound under max 4)."""
    await system.apply(quota("q", 4, 4), pytorch_job("big", gpus_per_pod=4, workers=0, quota_name="q", duration=600))
    await system.wait_phase("big-py-qu", c.Phase.RUNNING)
    await patch_master(system, "big", gpus(1))
    await spec_shows(system, "big-py-qu", c.GPU, "1")
    await system.apply(pytorch_job("more", gpus_per_pod=3, workers=0, quota_name="q", duration=600))
    await waits_for_quota(system, "more-py-qu")
    assert await used(system, "q", c.GPU) == "4"
    assert await bound_gpus(system) <= 4
    assert await system.phase("big-py-qu") == c.Phase.RUNNING


async def test_a_job_whose_pods_ask_less_is_charged_its_new_size_once_queued_again(system: System) -> None:
    """The smaller size takes effect when the job is next queued: big, shrunk to 1 GPU a pod while
    running, made inactive (sent back, its pods gone) and active again, is admitted charged 1."""
    await system.apply(quota("q", 4, 4), pytorch_job("big", gpus_per_pod=4, workers=0, quota_name="q", duration=600))
    await system.wait_phase("big-py-qu", c.Phase.RUNNING)
    await patch_master(system, "big", gpus(1))
    await spec_shows(system, "big-py-qu", c.GPU, "1")
    assert await used(system, "q", c.GPU) == "4"
    await annotate(system, "big", c.ANNOTATION_ACTIVE, "false")
    await system.wait_phase("big-py-qu", c.Phase.ENQUEUED)
    await annotate(system, "big", c.ANNOTATION_ACTIVE, "true")

    async def charged_one() -> bool:
        return await system.phase("big-py-qu") in (c.Phase.DEQUEUED, c.Phase.RUNNING) and \
            await used(system, "q", c.GPU) == "1"

    await system.wait_for(charged_one, 60, "big admitted again, q charged 1")


async def test_a_running_job_whose_claims_are_dropped_keeps_its_charge(start_system: SystemFactory) -> None:
    """DRA: holder's pod (2 devices from its template) runs in q of 2 devices; its template
    patched to name no claims. Its pod keeps its claim: q stays charged 2, another job asking 1
    device waits."""
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=4)
        await system.apply(device_quota("q", 2), claim_template("two", 2), claim_template("one", 1))
        await system.apply(device_job("holder", "two"))
        await admitted(system, "holder-py-qu")
        await patch_master(system, "holder", no_claims)
        await spec_shows(system, "holder-py-qu", RESOURCE, None)
        await system.apply(device_job("other", "one"))
        await waits_for_quota(system, "other-py-qu")
        assert await used(system, "q", RESOURCE) == "2"


async def test_a_template_made_again_asking_less_keeps_the_admitted_jobs_charge(
        start_system: SystemFactory) -> None:
    """The counterpart of test_dra's template made again asking more: made again asking less,
    the admitted job's pod keeps the claim made from the old one. q stays charged 2, another
    job asking 1 device waits."""
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=4)
        await system.apply(device_quota("q", 2), claim_template("shrinks", 2), claim_template("one", 1))
        await system.apply(device_job("holder", "shrinks"))
        await admitted(system, "holder-py-qu")
        await system.akubectl("delete", "resourceclaimtemplate", "shrinks")
        await system.apply(claim_template("shrinks", 1))
        await spec_shows(system, "holder-py-qu", RESOURCE, "1")
        await system.apply(device_job("other", "one"))
        await waits_for_quota(system, "other-py-qu")
        assert await used(system, "q", RESOURCE) == "2"


def claiming(template: str) -> Any:
    def change(spec: dict[str, Any]) -> None:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return change


def test_claims_a_running_job_names_anew_are_growth() -> None:
    """The webhook's growth reads the update alone: a template or claim a role's pods did not
    name is growth when claims are charged (DRA mappings given); one dropped is not."""
    py = PyTorchJobAdapter()
    plain = pytorch_job("plain", gpus_per_pod=0, workers=0)
    plain["spec"]["runPolicy"] = {"suspend": False}
    claims = copy.deepcopy(plain)
    claiming("two")(claims["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"])
    other = copy.deepcopy(plain)
    claiming("eight")(other["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"])
    assert growth(py, plain, claims) == ["Master pods claiming from ResourceClaimTemplate two (not before)"]
    assert growth(py, claims, other) == ["Master pods claiming from ResourceClaimTemplate eight (not before)"]
    assert growth(py, claims, plain) == []
    assert growth(py, plain, claims, claims=False) == []  # (no mappings: claims charge nothing)


async def test_a_running_job_is_refused_claims_its_pods_did_not_name(start_system: SystemFactory) -> None:
    """The validating webhook refuses an update that makes a running job's pods name a
    ResourceClaimTemplate they did not: pods its operator made again would get devices its
    admission did not charge, before the controller could send it back."""
    async with start_system(config=config()) as system:
        await publish_devices(system, per_node=4)
        await system.apply(device_quota("q", 2), claim_template("two", 2))
        await system.apply(pytorch_job("plain", gpus_per_pod=0, workers=0, quota_name="q", duration=600))
        await system.wait_phase("plain-py-qu", c.Phase.RUNNING)
        said = await patch_master(system, "plain", claiming("two"), check=False)
        assert "denied" in said and "PyTorchJob default/plain is running" in said and \
            "Master pods claiming from ResourceClaimTemplate two (not before)" in said, said
        job_now = await system.get_json("pytorchjob", "plain")
        assert "resourceClaims" not in job_now["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        assert await system.phase("plain-py-qu") == c.Phase.RUNNING


def test_each_pod_is_charged_at_least_what_it_was_admitted_with_while_its_unit_holds_quota() -> None:
    """What the engine is given, at every load too (a restart's: views.unit_info): a job
    admitted with Master 4 + Worker 4 GPUs whose pods ask 1 each now is charged 4 a pod while
    its unit says it holds quota; with its Worker gone too, 4; queued again, its new size."""
    adapter = adapter_of_kind(c.PYTORCH_JOB_KIND)
    admitted_job = pytorch_job("j", gpus_per_pod=4, workers=1)
    running = unit_view({**queue_unit_manifest(job_view(admitted_job, adapter, {})), "status": st.admitted(
        job_view(admitted_job, adapter, {}).unit_spec or {}, "q", "q", (), 1, 0.0) | {"phase": c.Phase.RUNNING}})
    shrunk = pytorch_job("j", gpus_per_pod=1, workers=1)
    info = unit_info(running, job_view(shrunk, adapter, {}))
    assert info.request[c.GPU] == 8000 and [ps.request[c.GPU] for ps in info.pod_sets] == [4000, 4000]
    fewer = unit_info(running, job_view(pytorch_job("j", gpus_per_pod=1, workers=0), adapter, {}))
    assert fewer.request[c.GPU] == 4000
    queued = replace(running, phase=c.Phase.ENQUEUED)
    assert unit_info(queued, job_view(shrunk, adapter, {})).request[c.GPU] == 2000
