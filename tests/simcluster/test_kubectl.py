"""The seed guide's "检查作业状态" commands, with kubectl 1.32, on a job the simulated cluster runs."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.apiserver.server import APIServer
from koordqueue.simcluster.cluster import SimCluster
from tests.simcluster.conftest import SEED_JOB

pytestmark = [pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
              pytest.mark.timeout(60)]


def kubectl(server: APIServer, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["kubectl", "--kubeconfig", str(server.kubeconfig_path), *args], input=stdin,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


async def run(server: APIServer, *args: str, stdin: str | None = None) -> str:
    return await asyncio.to_thread(kubectl, server, *args, stdin=stdin)


async def test_seed_job_status_commands(server: APIServer, cluster: SimCluster, tmp_path: Path) -> None:
    job = yaml.safe_load(SEED_JOB.read_text())
    job["metadata"]["annotations"][c.ANNOTATION_SIM_DURATION] = "1"
    manifest = tmp_path / "pytorchjob.yaml"
    manifest.write_text(yaml.safe_dump(job))
    name = job["metadata"]["name"]
    assert (await run(server, "apply", "-f", str(manifest))).strip() == f"pytorchjob.kubeflow.org/{name} created"

    # kubectl get pods -l training.kubeflow.org/job-name=<job-name>
    await run(server, "wait", "pod", "-l", f"{c.LABEL_JOB_NAME}={name}", "--for=jsonpath={.status.phase}=Running",
              "--timeout=20s")
    table = (await run(server, "get", "pods", "-l", f"{c.LABEL_JOB_NAME}={name}", "-o", "wide")).splitlines()
    assert table[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    rows = [row.split() for row in table[1:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [(f"{name}-master-0", "1/1", "Running"),
                                                  (f"{name}-worker-0", "1/1", "Running")]
    assert all(r[6].startswith("sim-node-") for r in rows)

    # kubectl get pytorchjob: the State column is the last condition's type
    await run(server, "wait", "pytorchjob", name, "--for=jsonpath={.status.conditions[-1:].type}=Succeeded",
              "--timeout=20s")
    jobs = (await run(server, "get", "pytorchjob")).splitlines()
    assert jobs[0].split() == ["NAME", "STATE", "AGE"]
    assert jobs[1].split()[:2] == [name, "Succeeded"]

    # kubectl describe pytorchjob <job-name>: conditions and the operator's events
    described = await run(server, "describe", "pytorchjob", name)
    assert re.search(r"Reason:\s+PyTorchJobSucceeded", described)
    assert re.search(rf"Normal\s+SuccessfulCreatePod\s+\S+\s+pytorchjob-controller\s+Created pod: {name}-master-0",
                     described)
    pod = await run(server, "describe", "pod", f"{name}-worker-0")
    assert re.search(r"^Status:\s+Succeeded$", pod, re.M)
    assert re.search(r"^Node:\s+sim-node-\d+/10\.0\.0\.\d+$", pod, re.M)
    # The training operator's env after the seed's own: the last RANK (1) is the one the container sees,
    # the seed's fieldRef reads an annotation nobody writes; its init container waits for the master.
    assert re.search(r"^\s+RANK:\s+\(v1:metadata\.annotations\['kubeflow\.org/rank'\]\)$", pod, re.M)
    assert re.search(r"^\s+RANK:\s+1$", pod, re.M) and re.search(r"^\s+WORLD_SIZE:\s+2$", pod, re.M)
    assert re.search(r"^\s+MASTER_ADDR:\s+pytorch-training-job-master-0$", pod, re.M)
    assert re.search(r"^Init Containers:\n  init-pytorch:$", pod, re.M)
    assert re.search(r"^\s+Port:\s+23456/TCP$", pod, re.M)
    assert "kubeflow.org/rank:" not in pod  # no such annotation
    assert re.search(rf"Normal\s+Scheduled\s+\S+\s+default-scheduler\s+Successfully assigned default/{name}-worker-0 "
                     "to sim-node-", pod)
    nodes = (await run(server, "get", "nodes")).splitlines()
    assert nodes[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert nodes[1].split()[:2] == ["sim-node-0", "Ready"] and nodes[1].split()[-1] == "v1.32.0"
