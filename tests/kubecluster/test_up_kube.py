"""`koord-queue up --control-plane kube` as a user runs it, and the guide's commands on it."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.up import EXAMPLE

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]


def test_up_on_the_real_control_plane_runs_the_seed_and_the_guides_commands_work(tmp_path: Path) -> None:
    state = tmp_path / "kq"
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "koordqueue.cli", "up", "--control-plane", "kube",
                                    "--example", "--state-dir", str(state), "--dashboard-port", "0"],
                                   stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 180
        while "Press Ctrl-C" not in log.read_text():
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        printed = log.read_text()
        assert "koord-queue is up: kube-apiserver https://127.0.0.1:" in printed
        assert "QueueUnit default/pytorch-training-job-py-qu: Running" in printed
        assert f"export KUBECONFIG={state.resolve() / 'kubeconfig'}" in printed
        env = {**os.environ, "KUBECONFIG": str(state / "kubeconfig")}

        def kubectl(*args: str, stdin: str | None = None) -> str:
            result = subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env, timeout=60,
                                    input=stdin)
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
            return result.stdout

        deadline = time.monotonic() + 60
        while True:  # the Deployment's pod: made by kube-controller-manager, run by kwok
            deployment = json.loads(kubectl("get", "deployment", "-n", "koord-queue", "koord-queue-controllers",
                                            "-o", "json"))
            if deployment.get("status", {}).get("readyReplicas") == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert deployment["status"]["readyReplicas"] == 1
        assert "koord-queue-controllers" in kubectl("get", "deployment", "-n", "koord-queue")
        controller_log = kubectl("logs", "-n", "koord-queue", "deployment/koord-queue-controllers")
        assert "leading; queueing" in controller_log  # the controller's own log, served as its pod's
        assert "kwok simulates it" in kubectl("logs", "pytorch-training-job-master-0")
        version = json.loads(kubectl("version", "-o", "json"))
        assert version["serverVersion"]["gitVersion"] == "v1.37.2"

        # The visibility API through kube-apiserver's aggregation layer (the APIService, Service and
        # EndpointSlice `up` registered): a second job, too big for what the quota has left, pending.
        waiting = copy.deepcopy([d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d][2])
        waiting["metadata"]["name"] = "pytorch-waiting"
        waiting["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 7  # 8 GPUs, 6 left of the quota's 8
        kubectl("apply", "-f", "-", stdin=json.dumps(waiting))
        path = f"/apis/{c.VISIBILITY_API_VERSION}/queues/pytorch-team-a/queueunits"
        deadline = time.monotonic() + 60
        while True:
            result = subprocess.run(["kubectl", "get", "--raw", path], capture_output=True, text=True, env=env,
                                    timeout=60)
            summary = json.loads(result.stdout) if result.returncode == 0 else {}
            if summary.get("items") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert result.returncode == 0, result.stderr
        assert summary["kind"] == c.VISIBILITY_SUMMARY_KIND, summary
        assert [(i["metadata"]["name"], i["position"]) for i in summary["items"]] == [("pytorch-waiting-py-qu", 1)]
        service = json.loads(kubectl("get", "apiservice", c.VISIBILITY_APISERVICE, "-o", "json"))
        assert {x["type"]: x["status"] for x in service["status"]["conditions"]}["Available"] == "True"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert process.returncode == 0, log.read_text()[-3000:]
    left = subprocess.run(["pgrep", "-f", str(state)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes of the cluster still running: {left}"
