"""A tenant's fairness annotations (api/fairness.py): good ones read, bad ones ignored and said."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.api.objects import parse_elastic_quota
from koordqueue.jobs.unit import expected_runtime


def elastic_quota(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": c.QUOTA_API_VERSION, "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": "team", "namespace": "team", "annotations": annotations},
            "spec": {"min": {c.GPU: "4"}, "max": {c.GPU: "8"}}}


def test_the_annotations_are_read() -> None:
    parsed = parse_elastic_quota(elastic_quota({c.ANNOTATION_FAIR_SHARING: "usage-history",
                                                c.ANNOTATION_USAGE_HALF_LIFE: "72h",
                                                c.ANNOTATION_BUDGET: "nvidia.com/gpu=2000h/720h"}))
    quota = parsed.quota
    assert quota.fair_sharing is True and quota.usage_half_life == 72 * 3600
    assert [b.describe() for b in quota.budgets] == ["nvidia.com/gpu=2000h/720h"]
    assert parsed.warnings == ()


@pytest.mark.parametrize(("key", "value", "said"), [
    (c.ANNOTATION_FAIR_SHARING, "always", "known values are usage-history and none"),
    (c.ANNOTATION_USAGE_HALF_LIFE, "1s", "a half-life must be from 1m"),
    (c.ANNOTATION_USAGE_HALF_LIFE, "9" * 400 + "h", "a half-life must be from 1m"),
    (c.ANNOTATION_BUDGET, "nvidia.com/gpu=lots", "is not resource=AMOUNT/WINDOW"),
    (c.ANNOTATION_BUDGET, ",".join(f"r{i}=1h/1h" for i in range(40)), "at most 16"),
    (c.ANNOTATION_BUDGET, "nvidia.com/gpu=-5h/1h", "not a duration"),
])
def test_a_bad_value_is_ignored_and_said(key: str, value: str, said: str) -> None:
    parsed = parse_elastic_quota(elastic_quota({key: value}))
    assert parsed.quota.fair_sharing is None and parsed.quota.usage_half_life is None and parsed.quota.budgets == ()
    assert len(parsed.warnings) == 1
    assert f"annotation {key}" in parsed.warnings[0] and said in parsed.warnings[0], parsed.warnings[0]


def test_expected_runtime_from_the_annotation_else_the_maximum_execution_time() -> None:
    assert expected_runtime({c.ANNOTATION_EXPECTED_RUNTIME: "90m"}, 60) == 5400.0
    assert expected_runtime({}, 60) == 60.0
    assert expected_runtime({}, None) is None
    for bad in ("soon", "0", "-1h", "1e9h", "9" * 400):  # ignored, as the forecast ignores them
        assert expected_runtime({c.ANNOTATION_EXPECTED_RUNTIME: bad}, 60) == 60.0
        assert expected_runtime({c.ANNOTATION_EXPECTED_RUNTIME: bad}, None) is None
