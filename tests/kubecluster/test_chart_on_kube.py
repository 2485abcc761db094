"""The chart on the real kube-apiserver: real helm installs it with the README's values, and
the controller runs the seed flow out of cluster under the chart's ServiceAccount.

kube-apiserver checks what the embedded server imitates: the CRDs' structural schemas,
printer columns and status subresource, RBAC for a ServiceAccount token made by the
TokenRequest API, and the Deployment (kube-controller-manager makes its pods, kube-scheduler
places them on kwok nodes). The controller's requests are read back from kube-apiserver's
audit log: nothing it asks is refused, and every grant of the chart's roles is used.

The chart's webhook names its Service, whose pods here are kwok's and serve nothing; as
`koord-queue up` does, the configuration is pointed at the controller's own port by `url`
(the controller keeps the caBundle, with the grant the chart gives it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api.crds import our_crds
from koordqueue.apiserver.controls import Access
from koordqueue.controller.webhook import MUTATE_PATH, VALIDATE_PATH
from koordqueue.kube.client import KubeClient
from koordqueue.kube.config import load_config
from koordqueue.kube.informer import Informer
from koordqueue.realcluster.cluster import RealCluster, free_port
from tests.chart.helmtool import CHART, NAMESPACE, RELEASE, args, helm, one, render
from tests.chart.test_chart_in_cluster import (
    PYTORCHJOBS,
    SERVICE_ACCOUNT,
    eventually,
    granted_by,
    run_seed_flow,
)

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

CONTROLLER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
README_VALUES = {"extension": {"pytorch": {"enable": True}},
                 "controller": {"image": {"repository": "koord-queue", "tag": "0.1.0"}}}


def accesses(entries: list[dict[str, Any]]) -> set[Access]:
    """The audit log's requests as accesses; a streaming list (a watch with sendInitialEvents,
    authorized as the watch it is) also as the list it reads what the list grant is for (that
    grant lists by pages on a server without streaming lists)."""
    out = set()
    for entry in entries:
        ref = entry.get("objectRef") or {}
        if ref.get("resource"):
            where = (ref.get("apiGroup", ""), ref["resource"], ref.get("subresource", ""))
            out.add(Access(entry["verb"], *where))
            if entry["verb"] == "watch" and "sendInitialEvents=true" in entry.get("requestURI", ""):
                out.add(Access("list", *where))
    return out


def test_helm_installs_the_chart_and_the_controller_runs_the_seed_flow_under_its_rbac(
        kube: RealCluster, tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig_path), "HOME": str(tmp_path)}

    def run(*argv: str, stdin: str | None = None) -> str:
        result = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 0, f"{' '.join(argv)}:\n{result.stderr}"
        return result.stdout

    # A cluster without our CRDs, as a user's: the chart brings them.
    names = [crd["metadata"]["name"] for crd in our_crds()]
    run("kubectl", "delete", "crd", *names, "--ignore-not-found", "--wait=true")
    metrics_port, webhook_port = free_port(), free_port()
    values = {**README_VALUES, "controller": {**README_VALUES["controller"], "metrics": {"port": metrics_port}},
              "webhook": {"port": webhook_port}}
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    try:
        out = run(str(helm()), "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                  "-f", str(values_file))
        assert "STATUS: deployed" in out
        crds = json.loads(run("kubectl", "get", "crd", *names, "-o", "json"))["items"]
        for crd in crds:  # structural schemas accepted, names accepted, established
            conditions = {cond["type"]: cond["status"] for cond in crd["status"]["conditions"]}
            assert conditions.get("Established") == "True" and conditions.get("NonStructuralSchema") is None, crd
        deployment = json.loads(run("kubectl", "get", "deployment", "-n", NAMESPACE, "koord-queue-controllers",
                                    "-o", "json"))
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT

        async def replicas_ready() -> bool:  # kube-controller-manager made the pods, kwok runs them
            got = json.loads(run("kubectl", "get", "deployment", "-n", NAMESPACE, "koord-queue-controllers",
                                 "-o", "json"))
            return bool(got.get("status", {}).get("readyReplicas") == got["spec"]["replicas"])

        asyncio.run(eventually(replicas_ready, "the Deployment's replicas ready", timeout=60))
        asyncio.run(_seed_flow_as_the_service_account(kube, run, values, metrics_port, webhook_port, tmp_path))
    finally:
        subprocess.run([str(helm()), "uninstall", RELEASE, "--namespace", NAMESPACE], env=env,
                       capture_output=True, timeout=120)


async def _seed_flow_as_the_service_account(kube: RealCluster, run: Any, values: dict[str, Any], metrics_port: int,
                                            webhook_port: int, tmp_path: Path) -> None:
    objects = render(values, include_crds=True)
    granted = granted_by(one(objects, "ClusterRole", RELEASE)["rules"]) | granted_by(one(objects, "Role")["rules"])
    # Out of cluster, the webhook is dialled by URL at the controller's port.
    hook = json.loads(run("kubectl", "get", "mutatingwebhookconfiguration", "koord-queue", "-o", "json"))
    patch = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig",
              "value": {"url": f"https://127.0.0.1:{webhook_port}{MUTATE_PATH}"}} for i in range(len(hook["webhooks"]))]
    run("kubectl", "patch", "mutatingwebhookconfiguration", "koord-queue", "--type=json", "-p", json.dumps(patch))
    hook = json.loads(run("kubectl", "get", "validatingwebhookconfiguration", "koord-queue", "-o", "json"))
    patch = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig",
              "value": {"url": f"https://127.0.0.1:{webhook_port}{VALIDATE_PATH}"}} for i in range(len(hook["webhooks"]))]
    run("kubectl", "patch", "validatingwebhookconfiguration", "koord-queue", "--type=json", "-p", json.dumps(patch))
    token = run("kubectl", "create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=2h").strip()
    kubeconfig = tmp_path / "controller.kubeconfig"
    admin = yaml.safe_load(kube.kubeconfig_path.read_text())
    admin["users"] = [{"name": "user", "user": {"token": token}}]
    kubeconfig.write_text(yaml.safe_dump(admin))
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    log = tmp_path / "controller.log"
    controller_args = [*args(objects), "--webhook-host=127.0.0.1"]  # the address the URL names

    def kubectl(*argv: str, stdin: str | None = None) -> Awaitable[subprocess.CompletedProcess[str]]:
        command = ["kubectl", "--kubeconfig", str(kube.kubeconfig_path), *argv]
        return asyncio.to_thread(subprocess.run, command, input=stdin, capture_output=True, text=True, check=True,
                                 timeout=60)

    async def get_json(*argv: str) -> Any:
        return json.loads((await kubectl("get", *argv, "-o", "json")).stdout)

    async with KubeClient(load_config(str(kube.kubeconfig_path))) as client:
        first_seen: dict[str, dict[str, Any]] = {}
        jobs = Informer(client, PYTORCHJOBS, project=lambda o: o)
        jobs.on_add(lambda o: first_seen.setdefault(o["metadata"]["name"], o))
        jobs.start()
        await jobs.wait_synced(10)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "koordqueue.cli", "controller", "--kubeconfig", str(kubeconfig),
                 *controller_args], stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            await run_seed_flow(kubectl, get_json, metrics_port, first_seen, process, log)
            hook = await get_json("mutatingwebhookconfiguration", "koord-queue")
            assert base64.b64decode(hook["webhooks"][0]["clientConfig"]["caBundle"])

            async def all_used() -> set[Access] | None:
                used = accesses(kube.requests_by(CONTROLLER))
                return used if used >= granted else None

            try:
                await eventually(all_used, "every grant used", timeout=10)
            except AssertionError:
                pass  # said precisely below
            entries = kube.requests_by(CONTROLLER)
            denied = accesses([e for e in entries if e.get("responseStatus", {}).get("code") == 403])
            assert denied == set(), f"refused to the controller: {sorted(map(str, denied))}"
            used = accesses(entries)
            assert used - granted == set()
            assert granted - used == set(), f"granted, never used: {sorted(map(str, granted - used))}"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
            await jobs.stop()
