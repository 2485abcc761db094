"""The flavor annotations of an ElasticQuota (docs/gpus.md), read from a tenant's object:
a node selector that is not label equality terms makes the quota unusable (InvalidObject:
the controller says why in a Warning event); a fungibility term that is not Kueue's falls
back to its default with a warning; a flavor order is names, kept in order, once each."""

from __future__ import annotations

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
