"""ElasticQuota and Queue views: the seed's manifests, every annotation, bad input."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api.constants import ANNOTATION_NODE_FIT, QueuePolicy
from koordqueue.api.objects import (
    AdmissionCheckSpec,
    InvalidObject,
    parse_elastic_quota,
    parse_go_duration,
    parse_queue,
)

DATA = Path(__file__).parent / "data"
GI = 2**30 * 1000


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / name).read_text())


def quota(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj = load("seed-elastic-quota.yaml")
    obj["metadata"]["labels"] = labels or {}
    obj["metadata"]["annotations"] = annotations or {}
    return obj


def test_seed_elastic_quota() -> None:
    parsed = parse_elastic_quota(load("seed-elastic-quota.yaml"))
    q = parsed.quota
    assert parsed.warnings == ()
    assert (q.name, q.namespace) == ("pytorch-team-a", "default")
    assert q.max == {"cpu": 100_000, "memory": 200 * GI, "nvidia.com/gpu": 8000}
    assert q.min == {"cpu": 20_000, "memory": 40 * GI, "nvidia.com/gpu": 2000}
    assert q.policy is QueuePolicy.PRIORITY
    assert (q.parent, q.is_parent, q.allow_lent, q.shared_weight) == (None, False, True, None)
    assert q.namespaces == frozenset() and q.priority_threshold is None


@pytest.mark.parametrize("policy", ["Priority", "Block", "Intelligent"])
def test_seed_policy_label(policy: str) -> None:
    # The seed's "configure through the ElasticQuota label" snippet.
    assert parse_elastic_quota(quota({"koord-queue/queue-policy": policy})).quota.policy == QueuePolicy(
        policy
    )


def test_quota_labels_and_annotations() -> None:
    parsed = parse_elastic_quota(
        quota(
            labels={
                "quota.scheduling.koordinator.sh/parent": "org",
                "quota.scheduling.koordinator.sh/is-parent": "true",
                "quota.scheduling.koordinator.sh/allow-lent-resource": "false",
            },
            annotations={
                "quota.scheduling.koordinator.sh/shared-weight": '{"cpu": "40", "memory": "10Gi"}',
                "quota.scheduling.koordinator.sh/namespaces": '["team-b", "team-c"]',
                "koord-queue/priority-threshold": "7",
            },
        )
    )
    q = parsed.quota
    assert parsed.warnings == ()
    assert (q.parent, q.is_parent, q.allow_lent) == ("org", True, False)
    assert q.shared_weight == {"cpu": 40_000, "memory": 10 * GI}
    assert q.namespaces == frozenset({"team-b", "team-c"})
    assert q.priority_threshold == 7


def test_allow_lent_anything_but_false() -> None:
    assert parse_elastic_quota(
        quota({"quota.scheduling.koordinator.sh/allow-lent-resource": "no"})
    ).quota.allow_lent


@pytest.mark.parametrize(
    ("labels", "annotations", "warning"),
    [
        ({"koord-queue/queue-policy": "FIFO"}, {}, "unknown queue policy 'FIFO'.*using Priority"),
        ({}, {"quota.scheduling.koordinator.sh/namespaces": "team-b"}, "namespaces: not JSON"),
        ({}, {"quota.scheduling.koordinator.sh/namespaces": '{"a": 1}'}, "JSON list of namespace names"),
        ({}, {"quota.scheduling.koordinator.sh/namespaces": '["a", 3]'}, "JSON list of namespace names"),
        ({}, {"koord-queue/priority-threshold": "high"}, "priority-threshold must be an integer"),
    ],
)
def test_quota_warnings_fall_back(labels: dict[str, str], annotations: dict[str, str], warning: str) -> None:
    parsed = parse_elastic_quota(quota(labels, annotations))
    assert len(parsed.warnings) == 1
    assert parsed.warnings[0].startswith("ElasticQuota default/pytorch-team-a: ")
    assert re.search(warning, parsed.warnings[0]), parsed.warnings[0]
    q = parsed.quota
    assert q.policy is QueuePolicy.PRIORITY and q.shared_weight is None
    assert q.namespaces == frozenset() and q.priority_threshold is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{cpu: 4", "shared-weight: Expecting property name"),
        ('{"cpu": "abc"}', "shared-weight: cpu: quantity 'abc'"),
        ('{"cpu": "-1"}', "shared-weight: cpu: quantity '-1' is negative"),
        ('["cpu"]', "shared-weight: .*must be a mapping"),
    ],
)
def test_a_shared_weight_that_is_no_list_of_amounts_makes_the_quota_unusable(text: str, message: str) -> None:
    """As koord-manager refuses it (fillQuotaDefaultInformation, validateQuotaSelfItem)."""
    with pytest.raises(InvalidObject, match=f"^ElasticQuota default/pytorch-team-a: annotation quota.scheduling.koordinator.sh/{message}"):
        parse_elastic_quota(quota({}, {"quota.scheduling.koordinator.sh/shared-weight": text}))


def _with(obj: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    target = obj
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["spec"], _DELETE, "ElasticQuota default/pytorch-team-a: spec is missing"),
        (["spec"], "big", "spec must be a mapping"),
        (["spec", "max", "cpu"], "abc", r"spec.max: cpu: quantity 'abc' is not a number"),
        (["spec", "min", "memory"], "-1Gi", r"spec.min: memory: .*negative"),
        (["spec", "max", "cpu"], "1e400", "too large"),
        (["spec", "max"], ["cpu"], "spec.max: resource list must be a mapping"),
        (["metadata"], _DELETE, "metadata is missing"),
        (["metadata", "name"], _DELETE, "metadata.name is missing"),
        (["metadata", "labels"], {"koord-queue/queue-policy": True}, "must be a string"),
        (["metadata", "annotations"], ["x"], "metadata.annotations must be a mapping"),
    ],
)
def test_invalid_quota(path: list[str], value: Any, message: str) -> None:
    with pytest.raises(InvalidObject, match=message):
        parse_elastic_quota(_with(load("seed-elastic-quota.yaml"), path, value))


def test_not_a_mapping() -> None:
    with pytest.raises(InvalidObject, match="must be a mapping, got list"):
        parse_elastic_quota([])


def test_seed_queue() -> None:
    parsed = parse_queue(load("seed-queue.yaml"), quota_names={"pytorch-team-a"})
    q = parsed.queue
    assert parsed.warnings == ()
    assert (q.name, q.namespace, q.policy, q.priority) == (
        "pytorch-training-queue",
        "koord-queue",
        QueuePolicy.PRIORITY,
        100,
    )
    assert q.quota is None  # no label, no quota of that name: bound to none, admits nothing
    assert q.preemption is False and q.priority_threshold is None
    assert parsed.settings.admission_checks == () and parsed.settings.refresh_seconds == 15.0


def test_queue_binding() -> None:
    seed = load("seed-queue.yaml")
    assert parse_queue(seed, {"pytorch-training-queue"}).queue.quota == "pytorch-training-queue"
    labelled = _with(seed, ["metadata", "labels"], {"quota.scheduling.koordinator.sh/name": "pytorch-team-a"})
    assert parse_queue(labelled, {"pytorch-training-queue"}).queue.quota == "pytorch-team-a"


def test_queue_settings() -> None:
    obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "Queue",
        "metadata": {
            "name": "team-a",
            "namespace": "koord-queue",
            "annotations": {
                "koord-queue/wait-for-pods-running": "true",
                "koord-queue/enable-queueunit-preemption": "true",
                "koord-queue/priority-threshold": "10",
                "koord-queue/max-depth": "50",
                "koord-queue/queue-items-refresh-interval": "1m30s",
                "koord-queue/hold-room-after": "2m",
            },
        },
        "spec": {
            "queuePolicy": "Intelligent",
            "priority": 1000,
            "priorityClassName": "high-priority",
            "admissionChecks": [
                {"name": "provision"},
                {"name": "gpu", "labelSelector": {"matchLabels": {"a": "b"}}},
            ],
        },
    }
    parsed = parse_queue(obj, {"team-a"})
    q, s = parsed.queue, parsed.settings
    assert parsed.warnings == ()
    assert (q.quota, q.policy, q.priority, q.priority_threshold, q.preemption, q.hold_room_after) == (
        "team-a",
        QueuePolicy.INTELLIGENT,
        1000,
        10,
        True,
        120.0,
    )
    assert s.wait_for_pods_running and s.max_depth == 50 and s.refresh_seconds == 90.0
    assert s.priority_class_name == "high-priority"
    assert s.admission_checks == (
        AdmissionCheckSpec("provision", None),
        AdmissionCheckSpec("gpu", {"matchLabels": {"a": "b"}}),
    )


@pytest.mark.parametrize(
    ("annotations", "spec", "warning"),
    [
        ({}, {"queuePolicy": "Round"}, "spec.queuePolicy: unknown queue policy 'Round'"),
        ({"koord-queue/max-depth": "deep"}, {}, "max-depth must be an integer"),
        ({"koord-queue/max-depth": "0"}, {}, "max-depth must be positive or -1"),
        ({"koord-queue/queue-items-refresh-interval": "15"}, {}, "must be a duration"),
        ({"koord-queue/queue-items-refresh-interval": "-5s"}, {}, "must be positive"),
        ({"koord-queue/wait-for-pods-running": "yes"}, {}, 'must be "true" or "false"'),
        ({"koord-queue/hold-room-after": "ten minutes"}, {}, "hold-room-after must be a duration"),
        ({"koord-queue/hold-room-after": "-1m"}, {}, "hold-room-after must be 0 or more, got '-1m'; using 600s"),
    ],
)
def test_queue_warnings(annotations: dict[str, str], spec: dict[str, Any], warning: str) -> None:
    obj = {"metadata": {"name": "q", "namespace": "koord-queue", "annotations": annotations}, "spec": spec}
    parsed = parse_queue(obj, ())
    assert len(parsed.warnings) == 1 and warning in parsed.warnings[0], parsed.warnings
    assert parsed.queue.policy is QueuePolicy.PRIORITY
    assert parsed.settings.max_depth is None and parsed.settings.refresh_seconds == 15.0
    assert parsed.settings.wait_for_pods_running is False
    assert parsed.queue.hold_room_after == 600.0


def test_room_may_be_held_at_once() -> None:
    obj = {"metadata": {"name": "q", "namespace": "koord-queue", "annotations": {"koord-queue/hold-room-after": "0s"}}}
    parsed = parse_queue(obj, ())
    assert parsed.warnings == () and parsed.queue.hold_room_after == 0.0


def test_queue_max_depth_unlimited() -> None:
    obj = {"metadata": {"name": "q", "annotations": {"koord-queue/max-depth": "-1"}}}
    parsed = parse_queue(obj, ())
    assert parsed.settings.max_depth is None and parsed.warnings == ()
    assert parsed.queue.namespace == "default" and parsed.queue.priority == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"priority": "high"}, "spec.priority must be an integer"),
        ({"priority": True}, "spec.priority must be an integer"),
        ({"priority": 2**31}, "spec.priority must be between"),
        ({"priorityClassName": 5}, "priorityClassName must be a string"),
        ({"admissionChecks": {"name": "x"}}, "admissionChecks must be a list"),
        ({"admissionChecks": ["x"]}, r"admissionChecks\[0\] must be a mapping"),
        ({"admissionChecks": [{"labelSelector": {}}]}, r"admissionChecks\[0\].name is missing"),
        ({"admissionChecks": [{"name": "a", "labelSelector": "all"}]}, "labelSelector must be a mapping"),
    ],
)
def test_invalid_queue(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidObject, match=message):
        parse_queue({"metadata": {"name": "q", "namespace": "ns"}, "spec": spec}, ())


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("2m", 120.0),
        ("1h30m", 5400.0),
        ("100ms", 0.1),
        ("1.5s", 1.5),
        ("0", 0.0),
        ("-1s", -1.0),
    ],
)
def test_go_duration(text: str, seconds: float) -> None:
    assert parse_go_duration(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "s", "1d", "1h 30m", "--1s", "1.2.3s"])
def test_go_duration_rejects(text: str) -> None:
    with pytest.raises(InvalidObject, match="must be a duration"):
        parse_go_duration(text, "x")


@pytest.mark.parametrize(("text", "node_fit", "warned"),
                         [(None, None, False), ("false", False, False), ("True", True, False), ("no", None, True)])
def test_node_fit_on_quota_and_queue(text: str | None, node_fit: bool | None, warned: bool) -> None:
    annotations = {} if text is None else {ANNOTATION_NODE_FIT: text}
    parsed_quota = parse_elastic_quota(quota(annotations=annotations))
    parsed_queue = parse_queue({"metadata": {"name": "q", "namespace": "koord-queue", "annotations": annotations}}, ())
    assert parsed_quota.quota.node_fit is node_fit and parsed_queue.queue.node_fit is node_fit
    for warnings in (parsed_quota.warnings, parsed_queue.warnings):
        assert [w for w in warnings if ANNOTATION_NODE_FIT in w] == (
            [f"{warnings[0].split(':')[0]}: annotation {ANNOTATION_NODE_FIT} must be \"true\" or \"false\", "
             f"got {text!r}; ignored"] if warned else [])
