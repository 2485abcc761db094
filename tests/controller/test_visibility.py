"""The visibility API on the embedded control plane (served directly by `koord-queue up`'s
API server from the controller in its process), and its pieces alone. Through the real
kube-apiserver's aggregation layer: tests/kubecluster/test_visibility.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from multidict import CIMultiDict

from koordqueue.api import constants as c
from koordqueue.controller.visibility import Caller, RequestHeader, resolve_queue
from koordqueue.up import serve_visibility

from .conftest import System, pytorch_job, quota

pytestmark = [pytest.mark.timeout(120)]

BASE = f"/apis/{c.VISIBILITY_GROUP}/{c.VISIBILITY_VERSION}"


def units(summary: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [(i["metadata"]["namespace"], i["metadata"]["name"], i["position"]) for i in summary["items"]]


async def run(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl as another user, off the event loop (the API server and the controller are on it)."""
    return await asyncio.to_thread(subprocess.run, ["kubectl", "--kubeconfig", str(kubeconfig), *args],
                                   capture_output=True, text=True, timeout=60)


async def test_kubectl_get_raw_lists_a_queues_pending_units_in_order_and_a_tenant_sees_its_own(
        system: System, tmp_path: Path) -> None:
    await serve_visibility(system.server, system.client, system.manager)  # as `koord-queue up` does
    shared = quota("shared", 2, 2, annotations={c.ANNOTATION_QUOTA_NAMESPACES: json.dumps(["team-a", "team-b"])})
    await system.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}, shared)
    await system.apply(pytorch_job("first", namespace="team-a", quota_name="shared"))
    await system.wait_phase("first-py-qu", c.Phase.RUNNING, namespace="team-a")
    await system.apply(pytorch_job("a-high", namespace="team-a", quota_name="shared", priority=100),
                       pytorch_job("b-mid", namespace="team-b", quota_name="shared", priority=50),
                       pytorch_job("a-low", namespace="team-a", quota_name="shared", priority=10))
    everyone = [("team-a", "a-high-py-qu", 1), ("team-b", "b-mid-py-qu", 2), ("team-a", "a-low-py-qu", 3)]

    async def all_pending() -> dict[str, Any]:
        got = json.loads(await system.akubectl("get", "--raw", f"{BASE}/queues/shared/queueunits"))
        assert units(got) == everyone, got
        return dict(got)

    summary = await system.wait_for(all_pending, what="the three pending units in order")
    assert summary["kind"] == c.VISIBILITY_SUMMARY_KIND
    assert summary["items"][0]["quotaName"] == "shared" and summary["items"][0]["phase"] == c.Phase.ENQUEUED
    # With the leader's forecast (controller/forecaster.py): one after another, the default hour each.
    await system.controller.forecaster.refresh()
    forecast = json.loads(await system.akubectl("get", "--raw", f"{BASE}/queues/shared/queueunits"))["items"]
    starts = [datetime.fromisoformat(i[c.EXPECTED_START_FIELD].replace("Z", "+00:00")).timestamp() for i in forecast]
    assert [round(later - earlier) for earlier, later in itertools.pairwise(starts)] == [3600, 3600]
    assert [i["basis"] for i in forecast] == [c.BASIS_DEFAULT] * 3
    assert all(len(i[c.EXPECTED_START_RANGE_FIELD]) == 2 for i in forecast)

    async def status_agrees() -> bool:  # the order the Queue's status lists (written every 0.5 s here)
        queue = await system.get_json("queue", "shared", "-n", c.SYSTEM_NAMESPACE)
        active = queue.get("status", {}).get("queueItemDetails", {}).get("active", [])
        return [(i["namespace"], i["name"], i["position"]) for i in active] == everyone

    await system.wait_for(status_agrees, what="the Queue's status to list the same order")
    by_quota = json.loads(await system.akubectl("get", "--raw", f"{BASE}/elasticquotas/shared/queueunits"))
    assert units(by_quota) == [*everyone, ("team-a", "first-py-qu", None)]
    assert "queues" in await system.akubectl("api-resources", f"--api-group={c.VISIBILITY_GROUP}")

    # A ServiceAccount of team-a that may list team-a's QueueUnits sees team-a's units only.
    await system.akubectl("create", "serviceaccount", "alice", "-n", "team-a")
    await system.akubectl("create", "role", "units", "-n", "team-a", "--verb=list", "--resource=queueunits")
    await system.akubectl("create", "rolebinding", "alice-units", "-n", "team-a", "--role=units",
                          "--serviceaccount=team-a:alice")
    token = (await system.akubectl("create", "token", "alice", "-n", "team-a")).strip()
    config = yaml.safe_load(system.server.kubeconfig_path.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    alice = tmp_path / "alice.kubeconfig"
    alice.write_text(yaml.safe_dump(config))
    seen = await run(alice, "get", "--raw", f"{BASE}/queues/shared/queueunits")
    assert seen.returncode == 0, seen.stderr
    assert units(json.loads(seen.stdout)) == [("team-a", "a-high-py-qu", 1), ("team-a", "a-low-py-qu", 3)]
    # Without the reader role (the default binding removed) the API server refuses before asking us.
    await system.akubectl("delete", "clusterrolebinding", "koord-queue-visibility-reader")
    refused = await run(alice, "get", "--raw", f"{BASE}/queues/shared/queueunits")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    missing = await run(system.server.kubeconfig_path, "get", "--raw", f"{BASE}/queues/nope/queueunits")
    assert missing.returncode != 0 and "NotFound" in missing.stderr, missing.stderr


def test_only_a_certificate_the_requestheader_ca_allows_names_a_user() -> None:
    header = RequestHeader.from_config_map({
        "requestheader-client-ca-file": "PEM",
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    })
    headers = CIMultiDict([("X-Remote-User", "alice"), ("X-Remote-Group", "tenants"),
                           ("X-Remote-Group", "system:authenticated"), ("X-Remote-Extra-Scopes%2Fa", "x")])
    assert header.caller(["front-proxy-client"], headers) == Caller(
        "alice", ("tenants", "system:authenticated"), (("scopes/a", ("x",)),))
    assert header.caller(None, headers) is None  # no client certificate
    assert header.caller(["someone-else"], headers) is None  # a certificate of that CA, not an allowed name
    assert header.caller(["front-proxy-client"], CIMultiDict()) is None  # no user named
    assert RequestHeader(allowed_names=()).caller(["anyone"], headers) is not None  # no names: any of the CA


def test_queues_are_found_by_name_in_the_system_namespace_first() -> None:
    known = ["koord-queue/a", "team/a", "team/b"]
    assert resolve_queue("a", known, "koord-queue") == "koord-queue/a"
    assert resolve_queue("b", known, "koord-queue") == "team/b"
    assert resolve_queue("c", known, "koord-queue") is None
    assert resolve_queue("x", ["one/x", "two/x"], "koord-queue") is None  # ambiguous: not guessed
