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


def test_a_job_is_charged_per_pod_for_templates_and_once_for_a_shared_claim() -> None:
    """A claim named directly is shared by the pods naming it (they share its devices): the
    job is charged it once, whichever roles name it; a template, once per pod (the caller
    multiplies by the replicas)."""
    from koordqueue.api.dra import PodClaims, job_claim_charges, pod_claims

    templates = {"two": template({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}})}
    claims = {"shared": {"spec": {"devices": {"requests": [
        {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}}}
    roles = {"master": pod_claims(pod("two", named="shared"), "m"), "worker": pod_claims(pod(named="shared"), "w")}
    assert roles["worker"] == PodClaims((), ("shared",))
    charges = job_claim_charges(roles, templates, claims, MAPPINGS, "job")
    assert charges.per_pod == {"master": {"nvidia.com/gpu": 2000}, "worker": {}}
    assert charges.shared == {"nvidia.com/gpu": 4000}
    assert charges.classes == {"nvidia.com/gpu": ("gpu.nvidia.com",)}
    assert charges.missing == ()
    missing = job_claim_charges({"w": PodClaims(("gone",), ("away",))}, {}, {}, MAPPINGS, "job").missing
    assert missing == ("ResourceClaimTemplate gone", "ResourceClaim away")


def test_a_claim_naming_both_or_neither_is_refused() -> None:
    from koordqueue.api.dra import pod_claims

    with pytest.raises(UncountedClaim, match="neither exactly one"):
        pod_claims({"resourceClaims": [{"name": "x", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]},
                   "p")


def test_the_controller_refuses_to_start_with_a_bad_mapping() -> None:
    """Admin input (the chart's deviceClassMappings, `koord-queue up --device-class-mappings`):
    the controller's config is not made with a mapping it cannot read."""
    from koordqueue.controller.config import ControllerConfig

    with pytest.raises(ValueError, match="--device-class-mappings: 'gpu.nvidia.com' is not deviceclass="):
        ControllerConfig(device_class_mappings="gpu.nvidia.com")
    assert ControllerConfig(device_class_mappings="a=b:2@d").dra_mappings == {"a": DeviceClassMapping("b", 2, "d")}


def test_mappings_with_a_driver() -> None:
    assert parse_mappings("g=example.com/gpu@gpu.example.com") == {
        "g": DeviceClassMapping("example.com/gpu", 1, "gpu.example.com")}
    with pytest.raises(ValueError):
        parse_mappings("g=example.com/gpu@")


def test_koord_queue_up_takes_the_mappings_and_refuses_bad_ones() -> None:
    import click

    from koordqueue.cli import up
    from koordqueue.up import controller_config

    with up.make_context("up", ["--device-class-mappings=g=example.com/gpu:2"]) as ctx:
        assert ctx.params["device_class_mappings"] == "g=example.com/gpu:2"
    with pytest.raises(click.BadParameter, match="is not deviceclass=resource"):
        up.make_context("up", ["--device-class-mappings=g"])
    assert controller_config(0, 0, 0, "g=example.com/gpu").dra_mappings == {"g": DeviceClassMapping("example.com/gpu")}
