"""Issue 29, item 10: the webhooks' scope, updates that let a queued job run, and jobs the
controller finds running when it starts.

- Kubernetes' own namespaces (and the controller's) are left alone by default, by the
  webhooks and the controller alike (controller/scope.py): a system add-on's job is
  neither suspended nor queued.
- A tenant turning a queued job's own suspend field off (the annotation left) had the real
  training operator start its pods at once: the validating webhook refuses it while the
  job's unit holds no quota; the controller's own resume, after admitting it, passes.
- A job running when the controller starts (made while no webhook answered) was adopted as
  admitted whatever its quota said: now it is charged only if it fits, else queued and
  suspended."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.scope import default_selector, namespace_selected, parse_selector
from koordqueue.controller.webhook import refusal, unit_holds_quota, unsuspends
from koordqueue.jobs.pytorchjob import PyTorchJobAdapter
from tests.controller.conftest import System, SystemFactory, pytorch_job, quota

pytestmark = pytest.mark.timeout(180)

QUOTA = "q-scope"  # max 4 GPUs


def job_of(name: str, namespace: str = "default", **kwargs: Any) -> dict[str, Any]:
    """A PyTorchJob of one 4-GPU master in QUOTA, running until deleted."""
    return pytorch_job(name, gpus_per_pod=4, workers=0, namespace=namespace, quota_name=QUOTA, duration=600, **kwargs)


async def stored(system: System, obj: dict[str, Any]) -> dict[str, Any]:
    """Create as a tenant does; the object as the create request stored it."""
    return dict(json.loads(await system.akubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(obj))))


async def units_in(system: System, namespace: str) -> list[str]:
    return sorted(u["metadata"]["name"] for u in (await system.get_json("queueunits", "-n", namespace))["items"])


def test_the_default_scope_leaves_kubernetes_and_the_controllers_namespaces_out() -> None:
    selector = default_selector("koord-queue")
    for namespace in ("kube-system", "kube-public", "kube-node-lease", "koord-queue"):
        assert not namespace_selected(selector, namespace, None)
        assert not namespace_selected(selector, namespace, {"team": "a"})
    assert namespace_selected(selector, "default", None) and namespace_selected(selector, "t1", {})
    opt_in = parse_selector('{"matchLabels": {"queue-jobs": "true"}}')
    assert opt_in is not None
    assert namespace_selected(opt_in, "t1", {"queue-jobs": "true"}) and not namespace_selected(opt_in, "t2", {})
    assert parse_selector("  ") is None
    for bad in ("[1]", '{"matchLabels": {"a": 1}}', '{"matchExpressions": [{"key": "a", "operator": "Near"}]}',
                '{"labels": {}}', "{"):
        with pytest.raises(ValueError):
            parse_selector(bad)


def test_an_update_unsuspends_when_the_field_or_the_last_suspension_goes() -> None:
    adapter = PyTorchJobAdapter()
    queued = job_of("b", annotations={c.ANNOTATION_SUSPEND: c.TRUE})
    queued["spec"]["runPolicy"] = {"suspend": True}
    field_off = json.loads(json.dumps(queued))
    field_off["spec"]["runPolicy"]["suspend"] = False  # the annotation left: the operator reads the field
    both_off = json.loads(json.dumps(field_off))
    del both_off["metadata"]["annotations"][c.ANNOTATION_SUSPEND]
    relabelled = json.loads(json.dumps(queued))
    relabelled["metadata"]["labels"]["x"] = "y"
    assert unsuspends(adapter, queued, field_off) and unsuspends(adapter, queued, both_off)
    assert not unsuspends(adapter, queued, relabelled) and not unsuspends(adapter, both_off, both_off)
    assert not unsuspends(adapter, queued, {**queued, "spec": "broken"})  # (never raises)
    assert not unit_holds_quota(None) and not unit_holds_quota({"status": {"phase": "Enqueued"}})
    assert unit_holds_quota({"status": {"phase": "Running"}}) and unit_holds_quota({"status": {"phase": "Succeed"}})
    said = refusal(adapter, queued, "b-py-qu", {"status": {"phase": "Enqueued"}})
    assert "PyTorchJob default/b is queued (QueueUnit b-py-qu is Enqueued)" in said


@pytest.mark.both_control_planes
async def test_jobs_in_kubernetes_own_namespaces_are_neither_suspended_nor_queued(system: System) -> None:
    await system.apply(quota(QUOTA, 4, 4))
    system_job = await stored(system, job_of("addon", namespace="kube-system"))
    assert c.ANNOTATION_SUSPEND not in system_job["metadata"]["annotations"]
    assert system_job["spec"].get("runPolicy", {}).get("suspend") is not True
    tenant_job = await stored(system, job_of("tenant"))  # made after it: seen after it
    assert tenant_job["spec"]["runPolicy"]["suspend"] is True
    await system.wait_phase("tenant-py-qu", c.Phase.RUNNING)
    assert await units_in(system, "kube-system") == []


@pytest.mark.both_control_planes
async def test_a_queued_job_is_not_let_run_by_turning_its_own_suspension_off(system: System) -> None:
    """The issue's repro: b waits behind a (4 GPUs each, max 4); its own field set false
    with the annotation left had the real training operator run it: 8 GPUs bound."""
    await system.apply(quota(QUOTA, 4, 4), job_of("a"))
    await system.wait_phase("a-py-qu", c.Phase.RUNNING)
    await system.apply(job_of("b"))
    await system.wait_phase("b-py-qu", c.Phase.ENQUEUED)
    for patch in ({"spec": {"runPolicy": {"suspend": False}}},
                  {"spec": {"runPolicy": {"suspend": False}}, "metadata": {"annotations": {c.ANNOTATION_SUSPEND: None}}}):
        said = await system.akubectl("patch", "pytorchjob", "b", "--type=merge", "-p", json.dumps(patch), check=False)
        assert "denied the request" in said and "PyTorchJob default/b is queued (QueueUnit b-py-qu is Enqueued)" \
            in said, said
    job = await system.get_json("pytorchjob", "b")
    assert job["spec"]["runPolicy"]["suspend"] is True
    # Other updates pass, and the controller's own resume, once a has gone, too.
    await system.akubectl("label", "pytorchjob", "b", "note=kept")
    await system.akubectl("delete", "pytorchjob", "a", "--wait=false")
    await system.wait_phase("b-py-qu", c.Phase.RUNNING)
    assert (await system.get_json("pytorchjob", "b"))["spec"]["runPolicy"]["suspend"] is False


@pytest.mark.both_control_planes
async def test_jobs_running_at_start_are_charged_and_what_does_not_fit_is_requeued(
        start_system: SystemFactory) -> None:
    """Two 4-GPU jobs made while no webhook answered, both running when the controller starts,
    in a quota of max 4: one is adopted, the other queued and suspended (both were adopted,
    8 GPUs charged to a quota of 4)."""
    async def prepare(system: System) -> None:
        await system.apply(quota(QUOTA, 4, 4), job_of("early-1"), job_of("early-2"))

        async def both_run() -> bool:
            jobs = [await system.get_json("pytorchjob", name) for name in ("early-1", "early-2")]
            return all(any(cond["type"] == "Running" and cond["status"] == "True"
                           for cond in (job.get("status") or {}).get("conditions") or ()) for job in jobs)

        await system.wait_for(both_run, 60, "both jobs to run before the controller starts")

    async with start_system(prepare=prepare) as system:
        async def settled() -> list[str] | None:
            phases = sorted([await system.phase("early-1-py-qu"), await system.phase("early-2-py-qu")])
            return phases if phases == [c.Phase.ENQUEUED.value, c.Phase.RUNNING.value] else None

        await system.wait_for(settled, 60, "one adopted, the other queued")
        queued = [name for name in ("early-1", "early-2") if await system.phase(f"{name}-py-qu") == "Enqueued"][0]
        assert (await system.get_json("pytorchjob", queued))["spec"]["runPolicy"]["suspend"] is True
        used = (await system.get_json("elasticquota", QUOTA)).get("status", {}).get("used", {})
        assert int(used.get(c.GPU, "0")) <= 4


@pytest.mark.both_control_planes
async def test_namespaces_opt_in_by_label_when_the_selector_says_so(start_system: SystemFactory) -> None:
    """An opt-in selector: a job in a namespace without the label is left alone by the webhooks
    and the controller alike; one in a labelled namespace is queued."""
    from tests.controller.conftest import quick_config

    config = quick_config(managed_jobs_namespace_selector={"matchLabels": {"queue-jobs": "true"}})
    async with start_system(config=config) as system:
        await system.akubectl("create", "namespace", "t-out")
        await system.akubectl("create", "namespace", "t-in")
        await system.akubectl("label", "namespace", "t-in", "queue-jobs=true")

        async def label_seen() -> bool:  # (a label put on later counts for a job at its next change)
            return bool(system.controller.shared.informers.namespace_queued("t-in"))

        await system.wait_for(label_seen, what="the controller to see t-in's label")
        await system.apply(quota(QUOTA, 4, 4, namespace="t-in"))
        left = await stored(system, job_of("left", namespace="t-out"))
        assert left["spec"].get("runPolicy", {}).get("suspend") is not True
        queued = await stored(system, job_of("queued", namespace="t-in"))
        assert queued["spec"]["runPolicy"]["suspend"] is True
        await system.wait_phase("queued-py-qu", c.Phase.RUNNING, namespace="t-in")
        assert await units_in(system, "t-out") == []
