"""The visibility API through the real kube-apiserver's aggregation layer.

The chart's APIService, reader ClusterRole and binding are applied as rendered; the controller
runs on this host, so its Service has no selector and an EndpointSlice names the host's
address (kube-apiserver, with --enable-aggregator-routing, dials it; loopback is refused
there). kube-apiserver checks the reader role, then proxies with its front-proxy client
certificate and the user in X-Remote-User/X-Remote-Group; the controller verifies that
certificate against kube-system/extension-apiserver-authentication's CA and asks
kube-apiserver (SubjectAccessReview) in which namespaces the user may list QueueUnits.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.realcluster.cluster import RealCluster, free_port, host_address
from tests.chart.helmtool import NAMESPACE, RELEASE, render
from tests.controller.conftest import pytorch_job, quick_config, quota, running_system

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

BASE = f"/apis/{c.VISIBILITY_GROUP}/{c.VISIBILITY_VERSION}"


def kubectl(config: Path, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["kubectl", "--kubeconfig", str(config), *args], input=stdin, capture_output=True,
                            text=True, timeout=60)
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


async def akubectl(config: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """kubectl off the event loop, where the controller serves what it asks."""
    return await asyncio.to_thread(kubectl, config, *args, check=check)


async def raw(config: Path, path: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return await akubectl(config, "get", "--raw", path, check=check)


def units(summary: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [(i["metadata"]["namespace"], i["metadata"]["name"], i["position"]) for i in summary["items"]]


CHART_SA = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
CONTROLLER_POD = "controller-0"


def registration(port: int, host: str) -> tuple[list[dict[str, Any]], str]:
    """The chart's visibility objects and controller grants (its readers: group `tenants`),
    with the Service the APIService names pointed at this host; and that Service's DNS name."""
    rendered = render({"controller": {"enableVisibilityServer": True, "visibilityReaders": [
        {"kind": "Group", "name": "tenants", "apiGroup": "rbac.authorization.k8s.io"}]}})
    chart = [o for o in rendered if o["kind"] in ("APIService", "ClusterRole", "ClusterRoleBinding", "Role",
                                                  "RoleBinding", "ServiceAccount")]
    assert {o["kind"] for o in chart} == {"APIService", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                                          "ServiceAccount"}
    api_service = next(o for o in chart if o["kind"] == "APIService")
    name = api_service["spec"]["service"]["name"]
    chart_service = next(o for o in rendered if o["kind"] == "Service" and o["metadata"]["name"] == name)
    assert chart_service["spec"]["selector"][c.LABEL_LEADER] == c.TRUE  # the leader's pod only
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NAMESPACE},
               "spec": {"ports": [{"name": "visibility", "port": api_service["spec"]["service"]["port"],
                                   "targetPort": port, "protocol": "TCP"}]}}
    endpoints = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                 "metadata": {"name": f"{name}-host", "namespace": NAMESPACE,
                              "labels": {"kubernetes.io/service-name": name}},
                 "addressType": "IPv4", "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
                 "ports": [{"name": "visibility", "port": port, "protocol": "TCP"}]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": CONTROLLER_POD, "namespace": NAMESPACE},
           "spec": {"containers": [{"name": "controller", "image": "koord-queue"}]}}
    return [*chart, service, endpoints, pod], f"{name}.{NAMESPACE}.svc"


async def test_tenants_read_their_pending_units_and_positions_through_kube_apiserver(
        kube: RealCluster, tmp_path: Path) -> None:
    admin = kube.kubeconfig_path
    port, host = free_port(), host_address()
    objects, service_dns = registration(port, host)
    kubectl(admin, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    # The chart grants its controller what the visibility API asks of kube-apiserver.
    for ask in (["create", "subjectaccessreviews"],
                ["get", f"configmap/{c.REQUESTHEADER_CONFIG_MAP}", "-n", c.REQUESTHEADER_NAMESPACE],
                ["patch", f"apiservices/{c.VISIBILITY_APISERVICE}"], ["patch", "pods", "-n", NAMESPACE]):
        assert kubectl(admin, "auth", "can-i", *ask, f"--as={CHART_SA}", check=False).stdout.strip() == "yes", ask
    config = replace(quick_config(), webhook_host="0.0.0.0", webhook_port=port, visibility=True,
                     webhook_hosts=(service_dns, host, "127.0.0.1"), pod_name=CONTROLLER_POD,
                     pod_namespace=NAMESPACE)
    try:
        async with running_system(tmp_path / "state", config=config, cluster=kube) as system:
            shared = quota("shared", 2, 2, annotations={c.ANNOTATION_QUOTA_NAMESPACES: json.dumps(["team-a", "team-b"])})
            await system.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
                               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}, shared)
            await system.apply(pytorch_job("first", namespace="team-a", quota_name="shared"))
            await system.wait_phase("first-py-qu", c.Phase.RUNNING, namespace="team-a", timeout=60)
            await system.apply(pytorch_job("a-high", namespace="team-a", quota_name="shared", priority=100),
                               pytorch_job("b-mid", namespace="team-b", quota_name="shared", priority=50),
                               pytorch_job("a-low", namespace="team-a", quota_name="shared", priority=10))
            everyone = [("team-a", "a-high-py-qu", 1), ("team-b", "b-mid-py-qu", 2), ("team-a", "a-low-py-qu", 3)]

            async def available() -> bool:  # our CA in its caBundle (the controller wrote it), discovery answered
                service = json.loads((await akubectl(admin, "get", "apiservice", c.VISIBILITY_APISERVICE, "-o", "json")).stdout)
                conditions = {x["type"]: x for x in service.get("status", {}).get("conditions", [])}
                assert service["spec"].get("caBundle") and not service["spec"].get("insecureSkipTLSVerify")
                assert conditions["Available"]["status"] == "True", conditions
                return True

            await system.wait_for(available, 60, "the APIService Available")

            async def labelled() -> bool:  # the leader's pod, which the chart's Service selects
                pod = json.loads((await akubectl(admin, "get", "pod", CONTROLLER_POD, "-n", NAMESPACE, "-o",
                                                 "json")).stdout)
                return bool(pod["metadata"].get("labels", {}).get(c.LABEL_LEADER) == c.TRUE)

            await system.wait_for(labelled, 10, "the leader's pod labelled")

            async def all_pending() -> dict[str, Any]:
                got = json.loads((await raw(admin, f"{BASE}/queues/shared/queueunits")).stdout)
                assert units(got) == everyone, got
                return dict(got)

            summary = await system.wait_for(all_pending, 60, "the three pending units in order")
            assert summary["kind"] == c.VISIBILITY_SUMMARY_KIND and summary["apiVersion"] == c.VISIBILITY_API_VERSION
            first = summary["items"][0]
            assert first["queueName"] == "shared" and first["quotaName"] == "shared" and first["priority"] == 100
            assert first["phase"] == c.Phase.ENQUEUED and first["resources"][c.GPU] == "2", first

            # Kueue's paging options.
            page = json.loads((await raw(admin, f"{BASE}/queues/shared/queueunits?limit=1&offset=1")).stdout)
            assert units(page) == [("team-b", "b-mid-py-qu", 2)]
            # Koord-Queue's by-quota listing: the admitted unit too (no position).
            by_quota = json.loads((await raw(admin, f"{BASE}/elasticquotas/shared/queueunits")).stdout)
            assert units(by_quota) == [*everyone, ("team-a", "first-py-qu", None)]

            # A tenant of team-a: only its namespace's units, at their positions in the whole queue.
            await akubectl(admin, "create", "role", "units", "-n", "team-a", "--verb=list", "--resource=queueunits")
            await akubectl(admin, "create", "rolebinding", "alice-units", "-n", "team-a", "--role=units", "--user=alice")
            alice = kube.kubeconfig_for("alice", ("tenants",))
            seen = json.loads((await raw(alice, f"{BASE}/queues/shared/queueunits")).stdout)
            assert units(seen) == [("team-a", "a-high-py-qu", 1), ("team-a", "a-low-py-qu", 3)]
            # A reader with no namespace: nothing; one not among the chart's readers: refused by kube-apiserver.
            bob = kube.kubeconfig_for("bob", ("tenants",))
            assert json.loads((await raw(bob, f"{BASE}/queues/shared/queueunits")).stdout)["items"] == []
            mallory = kube.kubeconfig_for("mallory")
            refused = await raw(mallory, f"{BASE}/queues/shared/queueunits", check=False)
            assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
            missing = await raw(admin, f"{BASE}/queues/nope/queueunits", check=False)
            assert missing.returncode != 0 and "NotFound" in missing.stderr, missing.stderr

            # Discovery, as kubectl reads it.
            resources = (await akubectl(admin, "api-resources", f"--api-group={c.VISIBILITY_GROUP}")).stdout
            assert "queues" in resources and "elasticquotas" in resources, resources
            listed = json.loads((await raw(admin, BASE)).stdout)
            assert {r["name"] for r in listed["resources"]} >= {"queues/queueunits", "elasticquotas/queueunits"}
            # The Queue itself, as Koord-Queue's type: its summary inside (alice's: her namespace's).
            queue = json.loads((await akubectl(alice, "get", f"queues.{c.VISIBILITY_GROUP}", "shared", "-o", "json")).stdout)
            assert queue["kind"] == "Queue" and units(queue["QueueUnitsSummary"]) == units(seen)

            # Whoever calls the controller without kube-apiserver's client certificate names nobody.
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            async with aiohttp.ClientSession() as session, session.get(
                    f"https://{host}:{port}{BASE}/queues/shared/queueunits",
                    headers={"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}, ssl=context) as answer:
                assert answer.status == 401, await answer.text()
        pod = json.loads(kubectl(admin, "get", "pod", CONTROLLER_POD, "-n", NAMESPACE, "-o", "json").stdout)
        assert c.LABEL_LEADER not in pod["metadata"].get("labels", {}), "stepping down takes the label off"
    finally:
        kubectl(admin, "delete", "-f", "-", "--ignore-not-found", "--wait=false", stdin=yaml.safe_dump_all(objects),
                check=False)
