"""UsageHistoryKeeper alone, on the in-memory API server: the engine's usage history is
written to its ConfigMap, read back by a new controller (a restart), and a copy that cannot
be read leaves the history fresh without stopping anything."""

from __future__ import annotations

import orjson
import pytest

from koordqueue.api import constants as c
from koordqueue.api.objects import parse_elastic_quota
from koordqueue.controller.resources import CONFIG_MAPS
from koordqueue.controller.usagehistory import UsageHistoryKeeper
from koordqueue.engine.model import UnitInfo

from .conftest import quota
from .fakeapi import FakeKube, shared_on

HOUR = 3600.0


def keeper(fake: FakeKube) -> UsageHistoryKeeper:
    shared = shared_on(fake)
    shared.engine.set_quota(parse_elastic_quota(
        quota("team", 8, 8, namespace="team", annotations={c.ANNOTATION_BUDGET: "nvidia.com/gpu=100h/24h"})).quota)
    return UsageHistoryKeeper(shared)


async def test_the_history_is_kept_and_read_back_after_a_restart() -> None:
    fake = FakeKube()
    first = keeper(fake)
    engine = first.engine
    engine.set_unit(UnitInfo(namespace="team", name="u", priority=0, created=0.0, request={c.GPU: 4000},
                             quota_name="team", admitted_quota="team"))
    engine.schedule(0.0)
    engine.schedule(2 * HOUR)  # 4 GPUs for 2 h
    written = await first.save()
    assert written is not None
    assert await first.save(written) == written  # unchanged: not written again
    stored = fake.get(CONFIG_MAPS, c.USAGE_HISTORY_CONFIG_MAP, namespace=first.config.system_namespace)
    assert orjson.loads(stored["data"][c.USAGE_HISTORY_KEY])["quotas"]["team"]["windows"]
    second = keeper(fake)  # a new controller: its engine starts empty
    await second.load()
    second.engine.schedule(2 * HOUR)
    budget = second.engine.fairness_status()["team"]["budgets"][c.GPU]  # type: ignore[index]
    assert budget["used"] == pytest.approx(8.0)  # type: ignore[index]


async def test_an_unreadable_copy_is_said_and_the_history_starts_afresh(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeKube()
    fresh = keeper(fake)
    for text in ("not json", orjson.dumps({"version": 1, "quotas": {"team": {"halfLife": "x"}}}).decode()):
        fake.objects.clear()
        fake.seed(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": c.USAGE_HISTORY_CONFIG_MAP, "namespace": fresh.config.system_namespace},
            "data": {c.USAGE_HISTORY_KEY: text}})
        await fresh.load()
    assert fresh.engine.usage_history()["quotas"] == {}
    assert "is not JSON" in caplog.text and "starts afresh" in caplog.text
