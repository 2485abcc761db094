"""Item 5 of issue 29: a few hundred bytes a tenant writes must not become tens of megabytes.

An alias bomb ("billion laughs") in a Queue's `koord-queue/queue-args` or an Argo Workflow's
`koord-queue/min-resources` loads as shared references and unfolds when copied or printed;
100 KB of "[" in a quota's JSON annotation overflows `json.loads`'s recursion; an int of
thousands of digits raises ValueError where a YAML error is expected. Each is refused with a
Warning on the object, and the controller goes on admitting. The API server itself refuses,
as kube-apiserver does: YAML bodies whose aliases expand too far (go-yaml's "excessive
aliasing"), JSON patches over 10000 operations or whose copies add more than 3 MiB, bodies
over 3 MiB, and objects over etcd's 1.5 MiB.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject, read_meta
from koordqueue.api.objects import parse_elastic_quota, parse_queue
from koordqueue.api.safeyaml import MAX_ANNOTATION_BYTES, RefusedYAML, load_annotation, load_json_annotation
from koordqueue.apiserver.patch import PatchCopyTooLarge, PatchTooLarge, apply_json_patch
from koordqueue.apiserver.testing import running_apiserver
from koordqueue.apiserver.yamlbody import AliasingError, load_body
from koordqueue.jobs.argo import min_resources
from koordqueue.kube.config import load_config
from koordqueue.manifests import all_crds
from tests.controller.conftest import System, pytorch_job, quota

pytestmark = pytest.mark.timeout(120)


def alias_bomb(levels: int, fan: int = 9, key: str = "x") -> str:
    """A map whose `key` holds a billion laughs of `fan` ** `levels` leaves, in about 60 bytes a level."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * fan)}]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * fan)}]")
    lines.append(f"{key}: *l{levels - 1}")
    return "\n".join(lines) + "\n"


# --- the annotation reader -----------------------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    (alias_bomb(9), "anchors and aliases"),  # 9 ** 9 leaves: gigabytes once printed
    ("a: &a {b: 1}\nc: *a\n", "anchors and aliases"),  # even a harmless alias: an annotation needs none
    ("[" * 70 + "]" * 70, "nested more than 64"),
    ("podInitialBackoffSeconds: " + "9" * 5000, "cannot be read"),  # int(): ValueError, not a YAML error
    ("x: " + "y" * MAX_ANNOTATION_BYTES, "more than the 65536 accepted"),
])
def test_the_annotation_reader_refuses_what_would_expand_or_crash(text: str, words: str) -> None:
    with pytest.raises(RefusedYAML, match=words):
        load_annotation(text)
    assert issubclass(RefusedYAML, yaml.YAMLError)  # every caller's "not YAML" path takes it


def test_the_annotation_reader_reads_json_and_plain_yaml() -> None:
    assert load_annotation('{"cpu": "2", "memory": "4Gi"}') == {"cpu": "2", "memory": "4Gi"}
    assert load_annotation('podInitialBackoffSeconds: "5"\n') == {"podInitialBackoffSeconds": "5"}


def test_json_annotations_too_deep_or_too_long_are_value_errors_not_recursion_errors() -> None:
    for text in ("[" * 100_000, "[" * (MAX_ANNOTATION_BYTES + 1)):
        with pytest.raises(ValueError):
            load_json_annotation(text)


def queue_object(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
            "metadata": {"name": "q", "namespace": c.SYSTEM_NAMESPACE, "annotations": annotations},
            "spec": {"queuePolicy": "Priority"}}


@pytest.mark.parametrize("args", [alias_bomb(9, key=c.QUEUE_ARG_INITIAL_BACKOFF),
                                  f"{c.QUEUE_ARG_INITIAL_BACKOFF}: {'9' * 5000}"])
def test_a_queue_whose_queue_args_are_a_bomb_keeps_the_default_back_off_and_says_why(args: str) -> None:
    parsed = parse_queue(queue_object({c.ANNOTATION_QUEUE_ARGS: args}), ())
    assert parsed.queue.backoff_base is None and parsed.queue.backoff_cap is None
    [warning] = parsed.warnings
    assert "refused" in warning and len(warning) < 400, warning


def test_a_quota_whose_namespaces_annotation_is_deep_json_is_warned_about() -> None:
    obj = quota("deep", 1, 2, annotations={c.ANNOTATION_QUOTA_NAMESPACES: "[" * 100_000})
    parsed = parse_elastic_quota(obj)
    assert any(c.ANNOTATION_QUOTA_NAMESPACES in w for w in parsed.warnings)


def test_a_workflow_whose_min_resources_are_a_bomb_is_invalid_with_a_short_reason() -> None:
    workflow = {"apiVersion": c.ARGO_API_VERSION, "kind": c.ARGO_WORKFLOW_KIND,
                "metadata": {"name": "w", "namespace": "default",
                             "annotations": {c.ANNOTATION_ARGO_MIN_RESOURCES: alias_bomb(9, key="cpu")}}}
    with pytest.raises(InvalidObject, match="anchors and aliases") as caught:
        min_resources(read_meta(workflow, c.ARGO_WORKFLOW_KIND))
    assert len(str(caught.value)) < 400


# --- the embedded API server's bounds, as functions -------------------------------------------------

def test_a_yaml_body_whose_aliases_expand_too_far_is_refused_as_go_yaml_refuses_it() -> None:
    with pytest.raises(AliasingError, match="excessive aliasing"):
        load_body(alias_bomb(7))
    # A few aliases in a body are fine (kubectl users write them; go-yaml takes them).
    assert load_body("a: &a {b: 1}\nc: *a\n") == {"a": {"b": 1}, "c": {"b": 1}}


def test_json_patch_copies_are_bounded_and_so_is_the_number_of_operations() -> None:
    doc = {"data": {"a": "x" * 100_000}}
    doubling = [{"op": "copy", "from": "/data/a", "path": f"/data/c{i}"} for i in range(40)]
    with pytest.raises(PatchCopyTooLarge, match="accumulated size increase of copy is 3200064, exceeding the limit "
                                                "3145728"):
        apply_json_patch(doc, doubling)
    with pytest.raises(PatchTooLarge, match="maximum operations in a JSON patch is 10000, got 10001"):
        apply_json_patch(doc, [{"op": "test", "path": "/data", "value": doc["data"]}] * 10_001)


# --- on both control planes: the API server ---------------------------------------------------------

@dataclass
class Raw:
    """Requests as the wire has them, to the API server of this test's control plane."""

    session: aiohttp.ClientSession
    server: str
    authorization: str

    async def send(self, method: str, path: str, body: bytes, content_type: str) -> tuple[int, dict[str, Any]]:
        async with self.session.request(method, self.server + path, data=body, headers={
                "Authorization": self.authorization, "Content-Type": content_type,
                "Accept": "application/json"}) as resp:
            text = await resp.read()
            return resp.status, orjson.loads(text) if text else {}


@pytest.fixture
async def raw(tmp_path: Path, control_plane: str, request: pytest.FixtureRequest) -> AsyncIterator[Raw]:
    async def serve(kubeconfig: Path) -> AsyncIterator[Raw]:
        config = load_config(str(kubeconfig))
        auth = await config.credentials.authorization() or ""
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=config.ssl_context)) as session:
            yield Raw(session, config.server, auth)

    if control_plane == "kube":
        async for r in serve(request.getfixturevalue("kube").kubeconfig_path):
            yield r
        return
    async with running_apiserver(tmp_path / "state", crds=all_crds()) as server:
        async for r in serve(server.kubeconfig_path):
            yield r


CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


@pytest.mark.both_control_planes
async def test_the_api_server_refuses_an_alias_bomb_body_in_kube_apiservers_words(raw: Raw) -> None:
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\n" + alias_bomb(6, key="data")
    code, status = await raw.send("POST", CONFIGMAPS, body.encode(), "application/yaml")
    assert (code, status.get("reason")) == (400, "BadRequest"), status
    assert "excessive aliasing" in status["message"]


@pytest.mark.both_control_planes
async def test_the_api_server_bounds_json_patch_copies_operations_bodies_and_objects(raw: Raw) -> None:
    """In kube-apiserver's words and shapes (read off kube-apiserver 1.37 and its etcd)."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "grow"}, "data": {"a": "x" * 100_000}}
    code, status = await raw.send("POST", CONFIGMAPS, orjson.dumps(cm), "application/json")
    assert code == 201, status
    path = f"{CONFIGMAPS}/grow"

    doubling = [{"op": "copy", "from": "/data/a", "path": f"/data/c{i}"} for i in range(40)]  # 4 MB of copies
    code, status = await raw.send("PATCH", path, orjson.dumps(doubling), "application/json-patch+json")
    assert (code, status.get("reason"), status.get("message"), status.get("details")) == (
        422, "Invalid", "the server rejected our request due to an error in our request", {}), status

    many = [{"op": "test", "path": "/metadata/name", "value": "grow"}] * 10_001
    code, status = await raw.send("PATCH", path, orjson.dumps(many), "application/json-patch+json")
    assert (code, status.get("reason")) == (413, "RequestEntityTooLarge"), status
    assert status["message"] == ("Request entity too large: The allowed maximum operations in a JSON patch is "
                                 "10000, got 10001")

    huge = {"data": {"big": "y" * (3 * 1024 * 1024 + 1)}}
    code, status = await raw.send("PATCH", path, orjson.dumps(huge), "application/merge-patch+json")
    assert (code, status.get("reason"), status.get("message")) == (
        413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728"), status

    # A custom resource (stored as JSON) grown by 15 copies, under the copy bound, past etcd's 1.5 MiB.
    group, version = c.ARGO_API_VERSION.split("/")
    workflows = f"/apis/{group}/{version}/namespaces/default/workflows"
    wf = {"apiVersion": c.ARGO_API_VERSION, "kind": c.ARGO_WORKFLOW_KIND, "metadata": {"name": "grow"},
          "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "busybox",
                                                                                     "args": ["y" * 100_000]}}]}}
    code, status = await raw.send("POST", workflows, orjson.dumps(wf), "application/json")
    assert code == 201, status
    args = "/spec/templates/0/container/args"
    grow = [{"op": "copy", "from": f"{args}/0", "path": f"{args}/-"}] * 15
    code, status = await raw.send("PATCH", f"{workflows}/grow", orjson.dumps(grow), "application/json-patch+json")
    assert (code, status) == (500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                    "message": "etcdserver: request is too large", "code": 500})
    code, status = await raw.send("POST", workflows, orjson.dumps({**wf, "metadata": {"name": "big"}, "spec": {
        **wf["spec"], "templates": [{"name": "main", "container": {"image": "busybox", "args": ["y" * 100_000] * 16}}]}}),
        "application/json")
    assert code == 500 and status["message"] == "etcdserver: request is too large"


# --- on both control planes: the controller ---------------------------------------------------------

def queue(name: str, quota_name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": c.QUEUE_API_VERSION, "kind": c.QUEUE_KIND,
            "metadata": {"name": name, "namespace": c.SYSTEM_NAMESPACE,
                         "labels": {c.LABEL_QUOTA_NAME: quota_name}, "annotations": annotations},
            "spec": {"queuePolicy": "Priority", "priority": 10}}


@pytest.mark.both_control_planes
async def test_bombs_in_tenant_annotations_are_warned_about_and_admission_goes_on(system: System) -> None:
    await system.apply(quota("team", 2, 4, annotations={c.ANNOTATION_QUOTA_NAMESPACES: "[" * 100_000}))
    # 6 levels: enough to show the refusal; a real bomb (9 levels) would take the old reader's test runner down.
    await system.apply(queue("bombed", "team", {c.ANNOTATION_QUEUE_ARGS: alias_bomb(6, key="podMaxBackoffSeconds")}),
                       queue("huge-int", "team", {c.ANNOTATION_QUEUE_ARGS: f"podMaxBackoffSeconds: {'9' * 5000}"}))

    async def warned(name: str) -> bool:
        messages = [e.get("message", "") for e in await system.events(name, c.SYSTEM_NAMESPACE)
                    if e.get("type") == "Warning"]
        return any(c.ANNOTATION_QUEUE_ARGS in m and "refused" in m for m in messages)

    for name in ("bombed", "huge-int"):
        await system.wait_for(lambda name=name: warned(name), 30, f"a Warning on Queue {name}")  # type: ignore[misc]
    for event in await system.events("bombed", c.SYSTEM_NAMESPACE):
        assert len(event.get("message", "")) < 1024  # the bomb is not printed into the event
    workflow = {"apiVersion": c.ARGO_API_VERSION, "kind": c.ARGO_WORKFLOW_KIND,
                "metadata": {"name": "bombed", "namespace": "default", "labels": {c.LABEL_QUOTA_NAME: "team"},
                             "annotations": {c.ANNOTATION_ARGO_MIN_RESOURCES: alias_bomb(6, key="cpu")}},
                "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "busybox"}}]}}
    await system.apply(workflow)

    async def workflow_told() -> bool:
        return any("anchors and aliases" in e.get("message", "") and len(e["message"]) < 1024
                   for e in await system.events("bombed") if e.get("type") == "Warning")

    await system.wait_for(workflow_told, 30, "a short Warning on the Workflow")
    await system.apply(pytorch_job("after", queue="bombed", quota_name="team"))
    await system.wait_phase("after-py-qu", c.Phase.RUNNING, timeout=60)
