"""The flavor annotations of an ElasticQuota (docs/gpus.md), read from a tenant's object:
a node selector that is not label equality terms makes the quota unusable (InvalidObject:
the controller says why in a Warning event); a fungibility term that is not Kueue's falls
back to its default with a warning; a flavor order is names, kept in order, once each."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.objects import parse_elastic_quota


def quota(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": "q", "namespace": "ns", "annotations": annotations},
            "spec": {"min": {c.GPU: "8"}, "max": {c.GPU: "8"}}}


def test_a_node_selector_of_equality_terms() -> None:
    parsed = parse_elastic_quota(quota({c.ANNOTATION_NODE_SELECTOR:
                                        " nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 , zone=a"}))
    assert parsed.quota.node_selector == (("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"), ("zone", "a"))
    assert parsed.warnings == ()


@pytest.mark.parametrize("text", [
    "gpu in (h100)", "gpu", "gpu==h100", "=h100", "gpu=h 100", "Bad_Prefix.com/gpu=x", "a=1,a=2",
    "gpu=" + "x" * 64, "", ",",
])
def test_a_bad_node_selector_makes_the_quota_unusable(text: str) -> None:
    with pytest.raises(InvalidObject, match=c.ANNOTATION_NODE_SELECTOR):
        parse_elastic_quota(quota({c.ANNOTATION_NODE_SELECTOR: text}))


def test_an_empty_value_selects_nodes_whose_label_is_empty() -> None:
    assert parse_elastic_quota(quota({c.ANNOTATION_NODE_SELECTOR: "gpu="})).quota.node_selector == (("gpu", ""),)


def test_flavor_order_is_names_in_order_once_each() -> None:
    parsed = parse_elastic_quota(quota({c.ANNOTATION_FLAVOR_ORDER: " b , a,b,, c "}))
    assert parsed.quota.flavor_order == ("b", "a", "c")


@pytest.mark.parametrize(("text", "borrow", "preempt"), [
    ("", True, False),
    ("whenCanBorrow=TryNextFlavor", False, False),
    ("whenCanPreempt=Preempt", True, True),
    ("whenCanBorrow=TryNextFlavor, whenCanPreempt=Preempt", False, True),
])
def test_fungibility(text: str, borrow: bool, preempt: bool) -> None:
    parsed = parse_elastic_quota(quota({c.ANNOTATION_FLAVOR_FUNGIBILITY: text}))
    assert (parsed.quota.borrow_first, parsed.quota.preempt_first) == (borrow, preempt)
    assert parsed.warnings == ()


def test_a_fungibility_term_not_kueues_is_ignored_with_a_warning() -> None:
    parsed = parse_elastic_quota(quota({c.ANNOTATION_FLAVOR_FUNGIBILITY: "whenCanBorrow=Maybe,whenCanPreempt=Preempt"}))
    assert (parsed.quota.borrow_first, parsed.quota.preempt_first) == (True, True)
    (warning,) = parsed.warnings
    assert "'whenCanBorrow=Maybe' is not whenCanBorrow=Borrow|TryNextFlavor" in warning


SELECTS = {c.ANNOTATION_NODE_SELECTOR: "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"}


def test_a_flavors_tolerations_are_core_v1_tolerations() -> None:
    text = json.dumps([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                       {"key": "pool", "value": "h100"},
                       {"operator": "Exists"},
                       {"key": "zone-down", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}])
    parsed = parse_elastic_quota(quota({**SELECTS, c.ANNOTATION_FLAVOR_TOLERATIONS: text}))
    assert [t.as_dict() for t in parsed.quota.tolerations] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "pool", "operator": "Equal", "value": "h100"},
        {"operator": "Exists"},
        {"key": "zone-down", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]
    assert parsed.warnings == ()


@pytest.mark.parametrize(("value", "why"), [
    ("gpu", "not JSON"),
    ('{"key": "gpu"}', "a JSON list of Tolerations, got dict"),
    ('["gpu"]', r"\[0\]: a Toleration is a JSON object"),
    ('[{"key": "gpu", "op": "Exists"}]', "unknown field op"),
    ('[{"key": 1}]', "key, operator, value and effect are strings"),
    ('[{"key": "gpu", "operator": "In"}]', "operator is Equal or Exists, got 'In'"),
    ('[{"key": "bad key"}]', "key 'bad key' is not a label key"),
    ('[{"value": "x"}]', "a Toleration with no key must have operator Exists"),
    ('[{"key": "gpu", "operator": "Exists", "value": "x"}]', "value must be empty with operator Exists"),
    ('[{"key": "gpu", "value": "a b"}]', "value 'a b' is not a label value"),
    ('[{"key": "gpu", "effect": "Never"}]', "effect is NoSchedule, PreferNoSchedule, NoExecute or empty"),
    ('[{"key": "gpu", "effect": "NoExecute", "tolerationSeconds": "60"}]', "tolerationSeconds is a whole number"),
    ('[{"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 60}]', "only for effect NoExecute"),
])
def test_bad_tolerations_make_the_flavor_unusable(value: str, why: str) -> None:
    with pytest.raises(InvalidObject, match=f"annotation {c.ANNOTATION_FLAVOR_TOLERATIONS}: .*{why}"):
        parse_elastic_quota(quota({**SELECTS, c.ANNOTATION_FLAVOR_TOLERATIONS: value}))


def test_tolerations_on_a_quota_that_is_no_flavor_are_ignored_with_a_warning() -> None:
    parsed = parse_elastic_quota(quota({c.ANNOTATION_FLAVOR_TOLERATIONS: '[{"operator": "Exists"}]'}))
    assert parsed.quota.tolerations == ()
    assert len(parsed.warnings) == 1 and "read only on a flavor" in parsed.warnings[0], parsed.warnings
