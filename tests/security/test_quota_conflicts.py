"""Issue 29, item 7: conflicting quotas are settled by age. A quota created later (a tenant's
`aaa`, first by name) must never make a team's older quota unusable: not by asking for min its
parent has already given out, nor by listing a namespace an older quota lists."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from koordqueue.api import constants as c
from koordqueue.api.objects import parse_elastic_quota
from koordqueue.engine.validation import validate_quotas
from tests.controller.conftest import System, pytorch_job, quota

pytestmark = pytest.mark.timeout(180)


def namespace(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def stamped(obj: dict[str, object], created: str) -> dict[str, object]:
    obj["metadata"]["creationTimestamp"] = created  # type: ignore[index]
    return obj


def test_the_older_quota_keeps_its_min_and_its_namespaces() -> None:
    """The engine's rule on its own: the newcomer `aaa` is refused, whatever its name."""
    objects = [stamped(quota("pool", 8, 8, is_parent=True), "2026-01-01T00:00:00Z"),
               stamped(quota("team-b", 8, 8, namespace="t1", parent="pool",
                             annotations={c.ANNOTATION_QUOTA_NAMESPACES: '["t4"]'}), "2026-01-02T00:00:00Z"),
               stamped(quota("aaa", 8, 8, namespace="t2", parent="pool"), "2026-02-01T00:00:00Z"),
               stamped(quota("aab", 0, 8, namespace="t2", annotations={c.ANNOTATION_QUOTA_NAMESPACES: '["t4"]'}),
                       "2026-02-01T00:00:00Z")]
    quotas = {q.name: q for q in (parse_elastic_quota(o).quota for o in objects)}
    reasons = validate_quotas(quotas)
    assert set(reasons) == {"aaa", "aab"}, reasons
    assert reasons["aaa"].startswith("the mins of the children of pool would add up to"), reasons
    assert reasons["aab"].startswith("namespace t4 is already bound to quota team-b")


def test_a_quota_not_stored_yet_is_the_newest() -> None:
    """A manifest checked before it is applied has no creationTimestamp: it is judged as the
    newcomer it will be (as koord-manager's webhook judges it), not as older than all."""
    objects = [stamped(quota("pool", 8, 8, is_parent=True), "2026-01-01T00:00:00Z"),
               stamped(quota("zzz", 8, 8, namespace="t1", parent="pool"), "2026-01-02T00:00:00Z"),
               quota("aaa", 8, 8, namespace="t2", parent="pool")]
    quotas = {q.name: q for q in (parse_elastic_quota(o).quota for o in objects)}
    assert set(validate_quotas(quotas)) == {"aaa"}


async def _past(system: System, name: str, namespace: str) -> None:
    """Until the server's clock (whole seconds) is past the quota's creation, so that one
    created now is younger (a wait on the clock, not a guess)."""
    obj = await system.get_json("elasticquota", name, "-n", namespace)
    created = datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    while datetime.now(UTC) < created + timedelta(seconds=1.1):
        await asyncio.sleep(0.1)


async def _warned(system: System, name: str, namespace: str, words: str) -> bool:
    return any(e["reason"] == c.EventReason.INVALID_QUOTA and words in e["message"]
               for e in await system.events(name, namespace))


@pytest.mark.both_control_planes
async def test_a_newer_quota_first_by_name_cannot_take_an_older_ones_place(system: System) -> None:
    await system.apply(*(namespace(n) for n in ("t1", "t2", "t4")))
    await system.apply(quota("pool", 8, 8, is_parent=True))
    await system.apply(quota("team-b", 8, 8, namespace="t1", parent="pool",
                             annotations={c.ANNOTATION_QUOTA_NAMESPACES: '["t4"]'}))
    await _past(system, "team-b", "t1")
    # The tenant of t2: a quota asking for the min pool has given out, one listing team-b's namespace.
    await system.apply(quota("aaa", 8, 8, namespace="t2", parent="pool"),
                       quota("aab", 0, 8, namespace="t2", annotations={c.ANNOTATION_QUOTA_NAMESPACES: '["t4"]'}))
    await system.apply(pytorch_job("mine", gpus_per_pod=2, workers=0, namespace="t1", quota_name="team-b"),
                       pytorch_job("listed", gpus_per_pod=2, workers=0, namespace="t4"))
    await system.wait_phase("mine-py-qu", c.Phase.RUNNING, namespace="t1")
    await system.wait_phase("listed-py-qu", c.Phase.RUNNING, namespace="t4")

    async def both_refused() -> bool:
        return await _warned(system, "aaa", "t2", "the mins of the children of pool would add up") and \
            await _warned(system, "aab", "t2", "namespace t4 is already bound to quota team-b")

    await system.wait_for(both_refused, what="the newer quotas refused, each told why")
    team_b = await system.get_json("elasticquota", "team-b", "-n", "t1")

    async def charged() -> bool:
        team_b.update(await system.get_json("elasticquota", "team-b", "-n", "t1"))
        return (team_b.get("status") or {}).get("used", {}).get(c.GPU) == "4"

    await system.wait_for(charged, what="both jobs charged to the older quota team-b")
