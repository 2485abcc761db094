"""DRA as quota sees it (api/dra.py): a pod's ResourceClaimTemplates charged per device class
through the mapping (Kueue's deviceClassMappings); what cannot be counted before
allocation, or that no mapping names, is refused with why, never charged nothing."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api.dra import DeviceClassMapping, UncountedClaim, parse_mappings, pod_claim_charges

MAPPINGS = {"gpu.nvidia.com": DeviceClassMapping("nvidia.com/gpu"),
            "mig-3g.nvidia.com": DeviceClassMapping("nvidia.com/mig-3g.40gb", 1)}


def template(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"spec": {"devices": {"requests": list(requests)}}}}


def pod(*templates: str, named: str | None = None) -> dict[str, Any]:
    claims: list[dict[str, Any]] = [{"name": f"c{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    if named:
        claims.append({"name": "shared", "resourceClaimName": named})
    return {"resourceClaims": claims, "containers": [{"name": "c", "resources": {"claims": [{"name": "c0"}]}}]}


def test_claims_from_templates_are_charged_per_device_class() -> None:
    templates = {
        "two-gpus": template({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}),
        "slice": template({"name": "m", "deviceClassName": "mig-3g.nvidia.com"}),  # v1beta1, count 1
    }
    assert pod_claim_charges(pod("two-gpus", "slice", named="someone-elses"), templates, MAPPINGS, "p") == {
        "nvidia.com/gpu": 2000, "nvidia.com/mig-3g.40gb": 1000}


@pytest.mark.parametrize(("request_", "why"), [
    ({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}, "allocationMode All"),
    ({"name": "g", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]}, "firstAvailable"),
    ({"name": "g", "exactly": {"deviceClassName": "tpu.example.com"}}, "mapped to no quota resource"),
    ({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 0}}, "at least 1"),
    ({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": True}}, "at least 1"),
    ({"name": "g"}, "no deviceClassName"),
])
def test_what_cannot_be_counted_is_refused_with_why(request_: dict[str, Any], why: str) -> None:
    with pytest.raises(UncountedClaim, match=why):
        pod_claim_charges(pod("t"), {"t": template(request_)}, MAPPINGS, "p")


def test_a_missing_template_is_refused() -> None:
    with pytest.raises(UncountedClaim, match="ResourceClaimTemplate gone not found"):
        pod_claim_charges(pod("gone"), {}, MAPPINGS, "p")


def test_mappings() -> None:
    assert parse_mappings("gpu.nvidia.com=nvidia.com/gpu, mig.nvidia.com=nvidia.com/mig-1g.10gb:2") == {
        "gpu.nvidia.com": DeviceClassMapping("nvidia.com/gpu", 1),
        "mig.nvidia.com": DeviceClassMapping("nvidia.com/mig-1g.10gb", 2)}
    for bad in ("gpu.nvidia.com", "=x", "a=b:0", "a=b:x", "a=b,a=c"):
        with pytest.raises(ValueError):
            parse_mappings(bad)
