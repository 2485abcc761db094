"""DRA in `koord-queue explain`, the dashboard's dry run (and `status`, the same snapshot: controller/loading.py), on
both control planes: a job's charge includes its claims, counted as the controller counts
them, through the mappings given with --device-class-mappings or, without it, those of the
controller's Deployment (the chart's deviceClassMappings)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api import constants as c

from .conftest import SystemFactory
from .test_dra import (
    DEVICE_CLASS,
    DRIVER,
    RESOURCE,
    admitted,
    claim_template,
    config,
    device_quota,
    job,
    publish_devices,
)
from .test_dry_run_dashboard import post
from .test_forecast import cli

pytestmark = [pytest.mark.timeout(180), pytest.mark.both_control_planes]

FLAG = f"{DEVICE_CLASS}={RESOURCE}@{DRIVER}"


def controller_deployment() -> dict[str, Any]:
    """The chart's Deployment as `explain` reads it: its container's --device-class-mappings
    (no replicas: the controller of the test runs in the test)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "koord-queue", "namespace": c.SYSTEM_NAMESPACE},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "koord-queue"}},
                     "template": {"metadata": {"labels": {"app": "koord-queue"}},
                                  "spec": {"containers": [{"name": "controller", "image": "koord-queue",
                                                           "args": ["controller", f"--device-class-mappings={FLAG}"]}]}}}}


async def test_explain_charges_a_jobs_claims_from_the_flag_or_the_controllers_deployment(
        start_system: SystemFactory, tmp_path: Path) -> None:
    async with start_system(config=replace(config(), dashboard=True, dashboard_port=0)) as system:
        await publish_devices(system, per_node=4)
        await system.apply(device_quota("q", 4), claim_template("two", 2))
        await system.apply(job("first", "two"))  # 2 pods x 2 devices: the whole quota
        await admitted(system, "first-py-qu")

        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(job("next", "two", workers=0)))
        out = await asyncio.to_thread(cli, system, "explain", "-f", str(path), "--json",
                                      "--device-class-mappings", FLAG)
        assert out.returncode == 0, out.stderr
        told = json.loads(out.stdout)
        assert told["request"].get(RESOURCE) == 2000, told["request"]  # milli-units
        assert not told["admitted"] and told["position"] is not None, told
        assert RESOURCE in told["message"], told["message"]
        assert system.manager.dashboard is not None  # the dashboard's "Will it run?": the leader's answer
        code, dry = await post(system.manager.dashboard.port, path.read_text())
        assert code == 200 and dry["request"] == told["request"], dry

        await system.apply(controller_deployment())
        out = await asyncio.to_thread(cli, system, "explain", "pytorchjob/first", "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["request"].get(RESOURCE) == 4000, out.stdout

        bad = await asyncio.to_thread(cli, system, "status", "--device-class-mappings", "no-equals")
        assert bad.returncode != 0 and "--device-class-mappings" in bad.stderr, bad.stderr
