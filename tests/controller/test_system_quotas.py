"""Koordinator's system and default quotas beside koord-scheduler: which pods it charges
to them (its rules, v1.8.0), what they use (resources of their max only), and QuotaSync
giving the engine the nodes' allocatable less that, in Koordinator mode only, so that a
unit admitted fits what koord-scheduler's quota tree shares."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.config import ControllerConfig
from koordqueue.controller.pods import PodView, pod_view
from koordqueue.controller.quotasync import QuotaSync
from koordqueue.controller.resources import NODES, PODS, QUOTAS
from koordqueue.controller.systemquotas import Charging, SystemQuotaUsage, shared_total
from koordqueue.engine.model import QueueInfo, UnitInfo

from .conftest import quota
from .fakeapi import Clock, FakeKube, shared_on, until

SYSTEM, DEFAULT = c.KOORDINATOR_SYSTEM_QUOTA, c.KOORDINATOR_DEFAULT_QUOTA
GPU = c.GPU


def koordinators(name: str, max_: dict[str, str] | None = None) -> dict[str, Any]:
    """One of the quotas koord-scheduler makes in koordinator-system (its default max: cpu, memory)."""
    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": name, "namespace": "koordinator-system"},
            "spec": {"max": max_ if max_ is not None else {"cpu": "1844674407370955", "memory": "1844674407370955"}}}


def bound(name: str, namespace: str = "default", quota_label: str | None = None, gpus: int = 0, cpu: str = "1",
          phase: str = "Running", node: str = "n0") -> dict[str, Any]:
    labels = {c.LABEL_QUOTA_NAME: quota_label} if quota_label else {}
    requests = {"cpu": cpu, **({GPU: str(gpus)} if gpus else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                      "resources": {"requests": requests}}]},
            "status": {"phase": phase}}


def view(obj: dict[str, Any]) -> PodView:
    pod = pod_view(obj)
    assert pod is not None
    return pod


# --- the rules ------------------------------------------------------------------------------

def test_a_pod_is_charged_by_its_label_then_its_namespace_then_a_listing_else_to_the_default() -> None:
    listing = quota("team-b", 0, 8, namespace="b", annotations={c.ANNOTATION_QUOTA_NAMESPACES: '["shared"]'})
    rules = Charging([koordinators(SYSTEM), koordinators(DEFAULT), quota("team-a", 0, 8),
                      quota("ml", 0, 8, namespace="ml"), listing], ours=["tree-leaf"])
    assert rules.quota("default", "team-a") == "team-a"
    assert rules.quota("ml", "team-a") == "team-a"  # the label first
    assert rules.quota("default", SYSTEM) == SYSTEM
    assert rules.quota("default", "nowhere") == DEFAULT  # a quota koord-scheduler does not know
    assert rules.quota("default", "tree-leaf") == "tree-leaf"  # one of ours (an ElasticQuotaTree's)
    assert rules.quota("ml", "") == "ml"  # the quota of its namespace's name, in that namespace
    assert rules.quota("team-a", "") == DEFAULT  # (team-a is in namespace default: not that)
    assert rules.quota("shared", "") == "team-b"
    assert rules.quota("koordinator-system", "") == DEFAULT  # Koordinator's namespace is no quota's
    assert Charging([]).quota("x", SYSTEM) == SYSTEM  # known to koord-scheduler, there or not


def test_the_system_and_default_quotas_use_the_resources_of_their_max_only() -> None:
    usage = SystemQuotaUsage()
    usage.set_rules(Charging([koordinators(SYSTEM, {"cpu": "100", GPU: "16"}), koordinators(DEFAULT)]))
    assert usage.put(view(bound("s", quota_label=SYSTEM, gpus=8, cpu="2")))
    assert usage.put(view(bound("d", namespace="kube-system", gpus=4, cpu="3")))  # the default: no GPUs counted
    assert usage.used == {"cpu": 5000, GPU: 8000}
    assert usage.put(view(bound("t", quota_label="team-a", gpus=8)))  # unknown: the default's (its cpu)
    assert usage.used == {"cpu": 6000, GPU: 8000}
    assert usage.put(view(bound("s", quota_label=SYSTEM, gpus=8, cpu="2", phase="Succeeded")))  # ended
    assert usage.used == {"cpu": 4000}
    assert not usage.put(view(bound("d", namespace="kube-system", gpus=4, cpu="3")))  # unchanged
    # team-a appears: its pod is charged to it from now on.
    assert usage.set_rules(Charging([koordinators(SYSTEM, {"cpu": "100", GPU: "16"}), koordinators(DEFAULT),
                                     quota("team-a", 0, 8)]))
    assert usage.used == {"cpu": 3000}
    assert usage.remove(view(bound("d", namespace="kube-system")))
    assert usage.used == {}
    assert not usage.remove(view(bound("d", namespace="kube-system")))


def test_the_shared_total_is_the_capacity_less_that_and_never_below_nothing() -> None:
    assert shared_total({GPU: 32000, "cpu": 64000}, {"cpu": 70000, "memory": 5}) == {GPU: 32000, "cpu": 0}
    assert shared_total(None, {"cpu": 1}) is None


# --- QuotaSync, on the in-memory API server -----------------------------------------------------

class Setting:
    """4 nodes of 8 GPUs, Koordinator's quotas (the system one with GPUs in its max) and
    team-a (max 32 GPUs), seen by QuotaSync through its informers of nodes, quotas and pods."""

    def __init__(self, mode: c.KoordinatorMode) -> None:
        self.fake = FakeKube()
        for i in range(4):
            self.fake.seed(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"},
                                   "status": {"allocatable": {"cpu": "64", "memory": "256Gi", GPU: "8",
                                                              "pods": "110"}}})
        for obj in (koordinators(c.KOORDINATOR_ROOT_QUOTA, {}), koordinators(SYSTEM, {"cpu": "1000", GPU: "32"}),
                    koordinators(DEFAULT), quota("team-a", 0, 32)):
            self.fake.seed(QUOTAS, obj)
        config = replace(ControllerConfig(), koordinator=mode)
        self.shared = shared = shared_on(self.fake, Clock(), config)
        self.sync = QuotaSync(shared)
        self.sync.wire()
        self.informers = [shared.informers.node, shared.informers.quota, shared.informers.pod]

    async def start(self) -> None:
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            await informer.wait_synced(5)
        await self.sync.settle()
        self.shared.sync_done = True

    def gpus(self) -> int | None:
        return None if self.sync.capacity is None else self.sync.capacity.get(GPU, 0) // 1000

    def admits(self, gpus: int) -> bool:
        """Whether the engine admits a unit of ``gpus`` in team-a now (taken back after)."""
        engine = self.shared.engine
        engine.set_queue(QueueInfo(namespace="koord-queue", name="team-a", quota="team-a"))
        engine.set_unit(UnitInfo(namespace="default", name="probe", priority=0, created=0.0,
                                 request={GPU: gpus * 1000}, quota_name="team-a"))
        admitted = [a.unit for a in engine.schedule(0.0).admitted]
        engine.remove_unit("default/probe")
        return admitted == ["default/probe"]


@pytest.fixture
async def koordinator_mode() -> AsyncIterator[Setting]:
    s = Setting(c.KoordinatorMode.AUTO)  # on: Koordinator's quotas are there
    await s.start()
    try:
        yield s
    finally:
        for informer in s.informers:
            await informer.stop()


async def test_koordinator_mode_shares_the_nodes_less_what_the_system_and_default_quotas_use(
        koordinator_mode: Setting) -> None:
    s = koordinator_mode
    assert s.shared.beside_koordinator and s.gpus() == 32
    assert s.admits(32)
    s.fake.seed(PODS, bound("agent", namespace="kube-system", quota_label=SYSTEM, gpus=8, cpu="4"))
    s.fake.seed(PODS, bound("dns", namespace="kube-system", gpus=2, cpu="2"))  # the default's: its cpu only
    await until(lambda: s.gpus() == 24)
    assert s.sync.capacity == {"cpu": 250000, "memory": 4 * 256 * 2**30 * 1000, GPU: 24000, "pods": 440000}
    assert not s.admits(32) and s.admits(24)
    # The system quota's pod ends: its GPUs are the tree's again.
    await s.fake.patch_status(PODS, "agent", {"status": {"phase": "Succeeded"}}, namespace="kube-system")
    await until(lambda: s.gpus() == 32)
    assert s.sync.capacity is not None and s.sync.capacity["cpu"] == 254000
    # A namespace listed by the system quota: its pods are charged to it.
    await s.fake.patch(QUOTAS, SYSTEM, {"metadata": {"annotations": {
        c.ANNOTATION_QUOTA_NAMESPACES: json.dumps(["monitoring"])}}}, namespace="koordinator-system")
    s.fake.seed(PODS, bound("exporter", namespace="monitoring", gpus=4))
    await until(lambda: s.gpus() == 28)
    assert not s.admits(32) and s.admits(28)
    await s.fake.delete(PODS, "exporter", namespace="monitoring")
    await until(lambda: s.gpus() == 32)


async def test_without_koordinator_the_nodes_are_shared_whole() -> None:
    s = Setting(c.KoordinatorMode.OFF)
    await s.start()
    try:
        assert not s.shared.beside_koordinator
        s.fake.seed(PODS, bound("agent", namespace="kube-system", quota_label=SYSTEM, gpus=8))
        await until(lambda: s.sync.system_usage.used.get(GPU) == 8000)
        assert s.gpus() == 32 and s.admits(32)
    finally:
        for informer in s.informers:
            await informer.stop()
