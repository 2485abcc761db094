"""Multi-tenant isolation and the default quota (SEMANTICS.md section 5)."""

from __future__ import annotations

import pytest

from koordqueue.engine.model import QueueInfo

from .builders import engine_with, parent, quota, unit

QUOTAS = [
    quota("team-a", 0, 8, ns="team-a"),
    quota("shared", 0, 8, ns="platform", namespaces=("team-b", "team-c")),
    quota("b-own", 0, 8, ns="team-b"),
    quota("c-1", 0, 8, ns="team-c"),
    quota("c-2", 0, 8, ns="team-c"),
    quota("d-listed-1", 0, 8, ns="", namespaces=("team-d",)),  # nodes of an ElasticQuotaTree may
    quota("d-listed-2", 0, 8, ns="", namespaces=("team-d",)),  # share a namespace (Koord-Queue's)
    quota("h-listed-1", 0, 8, ns="platform", namespaces=("team-h",)),  # ElasticQuotas may not: the
    quota("h-listed-2", 0, 8, ns="platform", namespaces=("team-h",)),  # second is refused (koord-manager)
    quota("e-listed", 0, 8, ns="platform", namespaces=("team-e",)),
    quota("team-f", 0, 8, ns="elsewhere"),
    parent("org", 0, 8, ns="team-g"),
    quota("g-leaf", 0, 8, "org", ns="team-g"),
]
USER_QUEUES = [
    QueueInfo("team-a-queue", "team-a", "team-a", priority=5),
    QueueInfo("orphan", "koord-queue", None),
    QueueInfo("sneaky", "team-b", "team-a"),
]


@pytest.mark.parametrize(
    ("ns", "quota_name", "queue", "expected"),
    [
        # A job that names nothing: the quota named after its namespace, the only quota
        # living in it, the only quota listing it; otherwise it waits and says why.
        pytest.param("team-a", None, None, "team-a", id="named-after-namespace"),
        pytest.param("team-b", None, None, "b-own", id="only-quota-living-there"),
        pytest.param("team-c", None, None,
                     "namespace team-c could use several quotas (c-1, c-2 live in it); name one with the label "
                     "quota.scheduling.koordinator.sh/name", id="ambiguous-living"),
        pytest.param("team-e", None, None, "e-listed", id="only-quota-listing-it"),
        pytest.param("team-d", None, None,
                     "namespace team-d could use several quotas (d-listed-1, d-listed-2 list it); name one with "
                     "the label quota.scheduling.koordinator.sh/name", id="ambiguous-listing"),
        pytest.param("team-h", None, None, "h-listed-1", id="listed-twice-the-second-refused"),
        pytest.param("team-h", "h-listed-2", None,
                     "quota h-listed-2 is not usable: namespace team-h is already bound to quota h-listed-1 "
                     "(annotation quota.scheduling.koordinator.sh/namespaces): a namespace is bound to one quota",
                     id="listed-twice-naming-the-second"),
        pytest.param("team-f", None, None,
                     "no quota for namespace team-f: name one with the label quota.scheduling.koordinator.sh/name "
                     "or a queue with the annotation scheduling.x-k8s.io/queue", id="named-after-but-not-bound"),
        pytest.param("team-g", None, None, "g-leaf", id="parents-are-not-candidates"),
        # A job that names its quota.
        pytest.param("team-c", "c-2", None, "c-2", id="label-picks-one"),
        pytest.param("team-b", "shared", None, "shared", id="label-quota-listing-it"),
        pytest.param("team-b", "team-a", None,
                     "quota team-a is not bound to namespace team-b (it belongs to namespace team-a)",
                     id="another-tenants-quota"),
        pytest.param("team-g", "org", None,
                     "quota org is a parent quota; a job must use one of the quotas below it", id="parent-quota"),
        pytest.param("team-a", "ghost", None, "quota ghost not found", id="unknown-quota"),
        # A job that names a queue.
        pytest.param("team-a", None, "team-a", "team-a", id="auto-queue-by-quota-name"),
        pytest.param("team-a", None, "team-a-queue", "team-a", id="user-queue-in-own-namespace"),
        pytest.param("team-b", None, "team-a", "quota team-a is not bound to namespace team-b (it belongs to namespace team-a)",
                     id="another-tenants-queue"),
        pytest.param("team-b", None, "sneaky", "quota team-a is not bound to namespace team-b (it belongs to namespace team-a)",
                     id="a-queue-is-no-way-around-a-quota"),
        pytest.param("team-a", None, "orphan", "queue koord-queue/orphan is bound to no quota, so it admits nothing",
                     id="queue-bound-to-no-quota"),
        pytest.param("team-a", None, "nowhere", "queue nowhere not found in namespace koord-queue or team-a",
                     id="unknown-queue"),
        pytest.param("team-b", "b-own", "shared",
                     "the job names quota b-own but its queue koord-queue/shared is bound to quota shared",
                     id="queue-and-quota-disagree"),
    ],
)
def test_which_quota_a_job_uses(ns: str, quota_name: str | None, queue: str | None, expected: str) -> None:
    engine = engine_with(*QUOTAS)
    for q in USER_QUEUES:
        engine.set_queue(q)
    engine.set_unit(unit("job", 1, quota_name, ns=ns, queue=queue))
    result = engine.schedule(0.0)
    standing = engine.standing(f"{ns}/job")
    assert standing is not None
    if expected in {q.name for q in QUOTAS}:
        assert [(a.unit, a.quota) for a in result.admitted] == [(f"{ns}/job", expected)]
    else:
        assert result.admitted == []
        assert result.messages[f"{ns}/job"] == expected
        assert standing.message == expected and standing.position is None


def test_a_user_queue_orders_and_charges_its_quota() -> None:
    engine = engine_with(*QUOTAS)
    for q in USER_QUEUES:
        engine.set_queue(q)
    engine.set_unit(unit("job", 1, ns="team-a", queue="team-a-queue"))
    [admission] = engine.schedule(0.0).admitted
    assert (admission.quota, admission.queue) == ("team-a", "team-a/team-a-queue")
    assert engine.quota_status()["team-a"].used


def test_a_quota_that_starts_listing_a_namespace_lets_its_jobs_in() -> None:
    engine = engine_with(quota("platform", 0, 8, ns="platform"))
    engine.set_unit(unit("job", 1, "platform", ns="team-x"))
    assert engine.schedule(0.0).admitted == []
    engine.set_quota(quota("platform", 0, 8, ns="platform", namespaces=("team-x",)))
    assert [a.unit for a in engine.schedule(1.0).admitted] == ["team-x/job"]


def test_a_job_with_an_unusable_request_waits_with_the_reason() -> None:
    engine = engine_with(quota("team-a", 0, 8, ns="team-a"))
    bad = unit("job", 1, "team-a", ns="team-a")
    bad.invalid = "Master: cpu: quantity '4 cores' is not a number"
    engine.set_unit(bad)
    result = engine.schedule(0.0)
    assert result.admitted == []
    assert result.messages["team-a/job"] == "the job cannot be queued: Master: cpu: quantity '4 cores' is not a number"


@pytest.mark.parametrize(
    ("ns", "quota_name", "queue", "expected"),
    [
        pytest.param("bad", "bad", None, "bad", id="by-label-unusable"),
        pytest.param("bad", None, None, "bad", id="by-namespace-unusable"),
        pytest.param("bad", None, "bad", "bad", id="by-its-queue-unusable"),
        pytest.param("team-a", "bad", None, None, id="not-bound-to-the-namespace"),
        pytest.param("team-a", "nowhere", None, None, id="no-such-quota"),
        pytest.param("team-a", "team-a", None, "team-a", id="usable"),
    ],
)
def test_the_quota_a_unit_names_is_known_even_when_it_is_not_usable(ns, quota_name, queue, expected) -> None:
    """Where a unit found holding quota counts (loading.count_as_admitted) when the quota
    it was admitted into has become unusable."""
    engine = engine_with(quota("team-a", 0, 8, ns="team-a"), quota("bad", 9, 8, ns="bad"))
    assert "bad" in engine.validation_errors()
    info = unit("u", 1, quota_name, ns=ns, queue=queue)
    assert engine.named_quota(info) == expected
