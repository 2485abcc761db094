"""The in-memory API server the parts' unit tests use (fakeapi.py) behaves as the real one
where the parts rely on it, and both it and KubeClient meet the KubeAPI Protocol."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from koordqueue.controller.resources import QUEUES, UNITS
from koordqueue.kube.errors import AlreadyExists, Conflict, ConnectionFailed, NotFound, ServerError
from koordqueue.kube.informer import Informer

from .fakeapi import FakeKube, merge_patch, status_error

ROOT = Path(__file__).parents[2]


def unit(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
            "metadata": {"name": name, "namespace": namespace, "labels": {"team": "a"}}, "spec": dict(spec)}


def test_kube_client_and_the_fake_meet_the_protocol_as_mypy_sees_it(tmp_path: Path) -> None:
    """kube/api.py and fakeapi.py each assign theirs to a KubeAPI in a function; a client
    whose patch_status lacks `namespace` is refused the same way (so the check can fail)."""
    wrong = tmp_path / "wrong_client.py"
    wrong.write_text(
        "from koordqueue.kube.api import KubeAPI\n"
        "from koordqueue.kube.client import Body, KubeClient, Object, PatchType, Resource\n\n\n"
        "class Wrong(KubeClient):\n"
        "    async def patch_status(self, resource: Resource, name: str, patch: Body, *,\n"
        "                           patch_type: PatchType = PatchType.MERGE) -> Object:\n"
        "        return {}\n\n\n"
        "def conforms(client: Wrong) -> KubeAPI:\n"
        "    return client\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
         "src/koordqueue/kube/api.py", "tests/controller/fakeapi.py", str(wrong)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    # (by the file's name: mypy's cache may name a module by where an earlier run found it)
    assert errors and all(Path(line.split(":")[0]).name == wrong.name for line in errors), \
        result.stdout + result.stderr
    assert any("incompatible return value type" in line.lower() for line in errors), result.stdout


async def test_versions_grow_and_stale_ones_conflict() -> None:
    fake = FakeKube()
    created = await fake.create(UNITS, unit("a"))
    rv1 = created["metadata"]["resourceVersion"]
    with pytest.raises(AlreadyExists):
        await fake.create(UNITS, unit("a"))
    patched = await fake.patch_status(UNITS, "a", {"status": {"phase": "Enqueued"}, "metadata": {"resourceVersion": rv1}},
                                      namespace="default")
    rv2 = patched["metadata"]["resourceVersion"]
    assert int(rv2) > int(rv1)
    with pytest.raises(Conflict):  # written on the version before
        await fake.patch_status(UNITS, "a", {"status": {"phase": "Dequeued"}, "metadata": {"resourceVersion": rv1}},
                                namespace="default")
    assert fake.get(UNITS, "a", namespace="default")["status"] == {"phase": "Enqueued"}
    with pytest.raises(NotFound):
        await fake.patch(UNITS, "b", {"spec": {}}, namespace="default")
    with pytest.raises(Conflict):
        await fake.delete(UNITS, "a", namespace="default", preconditions={"resourceVersion": rv1})
    await fake.delete(UNITS, "a", namespace="default", preconditions={"resourceVersion": rv2})
    with pytest.raises(NotFound):
        await fake.delete(UNITS, "a", namespace="default")
    assert [(r.verb, type(r.error).__name__ if r.error else None) for r in fake.requests] == [
        ("create", None), ("create", "AlreadyExists"), ("patch_status", None), ("patch_status", "Conflict"),
        ("patch", "NotFound"), ("delete", "Conflict"), ("delete", None), ("delete", "NotFound")]


async def test_merge_patches_of_the_object_and_of_its_status() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": None, "d": 3}, "l": [3]}) == \
        {"a": {"c": 2, "d": 3}, "l": [3]}
    fake = FakeKube()
    fake.seed(UNITS, {**unit("a", podSet=[{"name": "w", "count": 2}]), "status": {"phase": "Enqueued"}})
    before = fake.get(UNITS, "a", namespace="default")
    # a patch of the object leaves its status; a status patch leaves the rest
    after = await fake.patch(UNITS, "a", {"spec": {"priority": 5}, "status": {"phase": "Running"}}, namespace="default")
    assert after["spec"] == {"podSet": [{"name": "w", "count": 2}], "priority": 5}
    assert after["status"] == {"phase": "Enqueued"} and after["metadata"]["generation"] == 2
    after = await fake.patch_status(UNITS, "a", {"status": {"message": "hi"}, "spec": {"priority": 1}},
                                    namespace="default")
    assert after["spec"]["priority"] == 5 and after["status"] == {"phase": "Enqueued", "message": "hi"}
    # a patch that changes nothing keeps the version
    again = await fake.patch_status(UNITS, "a", {"status": {"message": "hi"}}, namespace="default")
    assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"] != \
        before["metadata"]["resourceVersion"]
    assert fake.requests[-1].resource_version == again["metadata"]["resourceVersion"]


async def test_failures_to_the_caller_and_failed_attempts_retried() -> None:
    fake = FakeKube()
    fake.seed(QUEUES, {"metadata": {"name": "q", "namespace": "kq"}})
    fake.fail_next(ConnectionFailed("unreachable"), verb="patch", name="q")
    with pytest.raises(ConnectionFailed):
        await fake.patch(QUEUES, "q", {"spec": {"x": 1}}, namespace="kq")
    assert "spec" not in fake.get(QUEUES, "q", namespace="kq")
    fake.fail_next(status_error(500, "InternalError"), times=2, verb="patch", retried_after=0.01)
    await fake.patch(QUEUES, "q", {"spec": {"x": 2}}, namespace="kq")
    assert fake.get(QUEUES, "q", namespace="kq")["spec"] == {"x": 2}
    assert [type(r.error).__name__ if r.error else None for r in fake.writes(name="q")] == \
        ["ConnectionFailed", "ServerError", "ServerError", None]
    assert isinstance(fake.writes()[1].error, ServerError)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "pages"])
async def test_an_informer_lists_and_watches_the_fake(stream: bool) -> None:
    fake = FakeKube()
    for name in ("a", "b", "c"):
        fake.seed(UNITS, unit(name))
    fake.seed(UNITS, unit("x", namespace="other"))
    seen: list[tuple[str, str]] = []
    informer = Informer(fake, UNITS, namespace="default", page_size=2)
    informer.stream = stream
    informer.on_add(lambda obj: seen.append(("add", obj["metadata"]["name"])))
    informer.on_update(lambda old, new: seen.append(("update", new["metadata"]["name"])))
    informer.on_delete(lambda obj: seen.append(("delete", obj["metadata"]["name"])))
    informer.start()
    try:
        await informer.wait_synced(5)
        assert sorted(k for k, _ in informer.items()) == ["default/a", "default/b", "default/c"]
        # two pages, or one streaming list (its state, then the changes, on one watch)
        assert [r.verb for r in fake.requests[:2]] == (["watch"] if stream else ["list", "list"])
        await fake.patch(UNITS, "a", {"spec": {"priority": 1}}, namespace="default")
        await fake.delete(UNITS, "b", namespace="default")
        await fake.create(UNITS, unit("d"))
        await fake.create(UNITS, unit("y", namespace="other"))
        for _ in range(100):
            if len(seen) == 6:
                break
            await asyncio.sleep(0.01)
        assert seen == [("add", "a"), ("add", "b"), ("add", "c"), ("update", "a"), ("delete", "b"), ("add", "d")]
    finally:
        await informer.stop()
