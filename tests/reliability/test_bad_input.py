"""The bad-input corpus (tests/data/bad/, described by its index.yaml) applied with
kubectl to a running system while valid jobs run next to it: every bad manifest gets the
refusal, event or unit message its entry names, the valid jobs are admitted and run as
usual, the controller is alive afterwards and nothing that was accepted is lost."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.kube.client import Resource
from koordqueue.kube.errors import ApiError

from ..controller.conftest import System, SystemFactory, pytorch_job, quota

pytestmark = pytest.mark.timeout(240)
CORPUS = Path(__file__).parents[1] / "data" / "bad"
INDEX: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "index.yaml").read_text())
FILL = "__FILL_1MiB__"
RESOURCES = {
    "PyTorchJob": Resource(c.KUBEFLOW_GROUP, "v1", c.PYTORCH_JOB_PLURAL),
    "ElasticQuota": Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL),
    "Queue": Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_PLURAL),
    "QueueUnit": Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL),
}


def manifest_text(name: str) -> str:
    return (CORPUS / name).read_text().replace(FILL, "x" * (1 << 20))


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifest_text(name)) if d]


def namespace(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def test_the_corpus_is_complete_and_indexed() -> None:
    files = sorted(p.name for p in CORPUS.glob("*.yaml") if p.name != "index.yaml")
    assert files == sorted(INDEX), set(files) ^ set(INDEX)
    assert len(files) >= 40
    outcomes = {"refused", "event", "unit", "runs"}
    for name, entry in INDEX.items():
        assert entry.get("about") and outcomes & set(entry), name


@pytest.mark.slow
@pytest.mark.both_control_planes
async def test_the_whole_corpus_alongside_valid_jobs(start_system: SystemFactory, caplog: pytest.LogCaptureFixture,
                                                     control_plane: str) -> None:
    caplog.set_level(logging.ERROR, logger="koordqueue")
    async with start_system() as system:
        await system.apply(*(namespace(n) for n in ("bad-a", "bad-b", "bad-none", "good")))
        await system.apply(quota("bad-a-gpus", 2, 8, namespace="bad-a"), quota("bad-b-gpus", 1, 4, namespace="bad-b"),
                           quota("bad-a-other", 1, 4, namespace="bad-a"),
                           quota("bad-parent", 1, 4, namespace="bad-a", is_parent=True),
                           quota("good-gpus", 4, 8, namespace="good"))
        valid = [pytorch_job(f"good-{i}", namespace="good", workers=i % 2, duration=1.0, quota_name="good-gpus")
                 for i in range(8)]
        await system.apply(*valid[:4])
        accepted: list[dict[str, Any]] = []
        for name, entry in INDEX.items():
            out = await system.akubectl("apply", "-f", "-", stdin=manifest_text(name), check=False)
            refused = entry.get("refused")
            if refused:
                assert refused["message"] in out, (name, out)
                await check_status_code(system, name, refused["code"])
            else:
                assert "created" in out and "error" not in out.lower(), (name, out)
                accepted += documents(name)
        await system.apply(*valid[4:])

        # The valid jobs ran as usual, each admitted once and ended.
        for job in valid:
            await system.wait_phase(f"{job['metadata']['name']}-py-qu", c.Phase.SUCCEED, namespace="good", timeout=60)
        # Every bad manifest said what it must.
        for name, entry in INDEX.items():
            if "event" in entry:
                await wait_event(system, name, entry["event"])
            if "unit" in entry:
                await wait_unit(system, name, entry["unit"])
            if entry.get("runs"):
                job = documents(name)[0]["metadata"]
                await system.wait_phase(f"{job['name']}-py-qu", c.Phase.SUCCEED, namespace=job["namespace"],
                                        timeout=60)
            if entry.get("no_unit"):
                job = documents(name)[0]["metadata"]
                units = await system.get_json("queueunits", "-n", job["namespace"])
                assert all(u["spec"]["consumerRef"]["name"] != job["name"] for u in units["items"]), name
        # Nothing accepted was lost: every object is still there.
        for doc in accepted:
            meta = doc["metadata"]
            found = await system.client.get(RESOURCES[doc["kind"]], meta["name"], namespace=meta.get("namespace"))
            assert found["metadata"]["uid"]
        # The hand-made unit holds no more than its quota's max, and the quota named twice kept its own max.
        used = (await system.get_json("elasticquota", "bad-a-gpus", "-n", "bad-a"))["status"]["used"]
        assert int(used.get(c.GPU, "0")) <= 8
        # The controller is alive: its loops run, it answers a new job, nothing crashed in it.
        controller = system.controller
        assert controller.sync_done and not any(task.done() for task in controller._tasks)
        await system.apply(pytorch_job("after-all", namespace="good", duration=0.5, quota_name="good-gpus"))
        await system.wait_phase("after-all-py-qu", c.Phase.SUCCEED, namespace="good")
        crashes = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert crashes == []


async def check_status_code(system: System, name: str, code: int) -> None:
    """A manifest kubectl could not apply: the API server's own answer (to a create with the
    strict field validation kubectl asks for) has the right code."""
    for doc in documents(name):
        meta = doc["metadata"]
        with pytest.raises(ApiError) as refused:
            await system.client.create(RESOURCES[doc["kind"]], doc, namespace=meta.get("namespace"),
                                       field_validation="Strict")
        assert refused.value.status == code, (name, refused.value)


async def wait_event(system: System, name: str, want: dict[str, Any]) -> None:
    docs = documents(name)
    names = want.get("names") or ([want["name"]] if "name" in want else [d["metadata"]["name"] for d in docs])
    ns = want.get("namespace") or docs[0]["metadata"].get("namespace", "default")

    async def seen() -> bool:
        events = (await system.get_json("events", "-n", ns))["items"]
        for event in events:
            involved = event["involvedObject"]
            if involved.get("kind") != want["kind"] or involved.get("name") not in names:
                continue
            if want.get("reason") and event["reason"] != want["reason"]:
                continue
            if want.get("type") and event["type"] != want["type"]:
                continue
            if "message" in want and event["message"] != want["message"]:
                continue
            if "contains" in want and want["contains"] not in event["message"]:
                continue
            return True
        return False

    await system.wait_for(seen, timeout=30, what=f"{name}: event {want}")


async def wait_unit(system: System, name: str, want: dict[str, Any]) -> None:
    meta = documents(name)[0]["metadata"]
    unit = want.get("name") or f"{meta['name']}-py-qu"

    seen: dict[str, Any] = {}

    async def told() -> bool:
        status = (await system.unit(unit, meta["namespace"])).get("status", {})
        seen.update(status)
        if "phase" in want and status.get("phase") != want["phase"]:
            return False
        if "message" in want and status.get("message") != want["message"]:
            return False
        return "contains" not in want or want["contains"] in str(status.get("message"))

    await system.wait_for(told, timeout=30, what=f"{name}: unit {want} (seen: {seen})")
