"""Strategic merge patch: the cases kubectl sends, checked against apimachinery's rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from koordqueue.apiserver.builtin import BUILTIN_TYPES
from koordqueue.apiserver.patch import PatchError, PatchFormatError
from koordqueue.apiserver.registry import ResourceType
from koordqueue.apiserver.strategic import apply_strategic_merge

POD_TYPE = next(rt for rt in BUILTIN_TYPES if rt.kind == "Pod" and rt.group == "")
DEPLOYMENT_TYPE = next(rt for rt in BUILTIN_TYPES if rt.kind == "Deployment")


def pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y"]},
            "spec": {"containers": [{"name": "c1", "image": "busybox", "env": [{"name": "A", "value": "1"}]},
                                    {"name": "c2", "image": "alpine"}], **spec}}


def patched(patch: dict[str, Any], original: dict[str, Any] | None = None, rt: ResourceType = POD_TYPE) -> Any:
    return apply_strategic_merge(original or pod(), patch, rt)


def test_maps_merge_recursively_and_null_deletes() -> None:
    out = patched({"metadata": {"labels": {"b": None, "c": "3"}, "annotations": {"n": "v", "gone": None}}})
    assert out["metadata"]["labels"] == {"a": "1", "c": "3"}
    assert out["metadata"]["annotations"] == {"n": "v"}  # a null for an absent key is dropped
    assert out["spec"]["containers"][0]["image"] == "busybox"


def test_inputs_are_not_modified() -> None:
    original, patch = pod(), {"spec": {"containers": [{"name": "c1", "image": "new"}]}}
    before = (copy.deepcopy(original), copy.deepcopy(patch))
    patched(patch, original)
    assert (original, patch) == before


def test_containers_merge_by_name_keeping_order_and_the_others() -> None:
    out = patched({"spec": {"containers": [{"name": "c2", "image": "alpine:3"}, {"name": "c3", "image": "x"}]}})
    assert [(c["name"], c["image"]) for c in out["spec"]["containers"]] == [
        ("c1", "busybox"), ("c2", "alpine:3"), ("c3", "x")]


def test_nested_merge_lists_merge_too() -> None:
    out = patched({"spec": {"containers": [{"name": "c1", "env": [{"name": "B", "value": "2"},
                                                                  {"name": "A", "value": "9"}]}]}})
    assert out["spec"]["containers"][0]["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}]


def test_lists_without_a_strategy_are_replaced() -> None:
    original = pod(tolerations=[{"key": "a", "operator": "Exists"}])
    out = patched({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}],
                            "containers": [{"name": "c1", "command": ["sh"]}]}}, original)
    assert out["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]
    out = patched({"spec": {"containers": [{"name": "c1", "command": ["a", "b"]}]}}, out)
    assert out["spec"]["containers"][0]["command"] == ["a", "b"]


def test_primitive_merge_list_is_a_set_and_delete_from_primitive_list() -> None:
    out = patched({"metadata": {"finalizers": ["y", "z"]}})
    assert out["metadata"]["finalizers"] == ["x", "y", "z"]
    out = patched({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x", "nope"]}})
    assert out["metadata"]["finalizers"] == ["y"]
    assert "$deleteFromPrimitiveList/finalizers" not in out["metadata"]


def test_owner_references_merge_by_uid() -> None:
    original = pod()
    original["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1"}]
    out = patched({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2"},
                                                    {"uid": "1", "controller": True}]}}, original)
    # the patch's order wins for the elements it names
    assert [(o["uid"], o.get("controller")) for o in out["metadata"]["ownerReferences"]] == [("2", None), ("1", True)]


def test_status_conditions_merge_by_type() -> None:
    original = pod()
    original["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    out = patched({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}, original)
    # a new element goes before server-only ones it cannot be ordered against (apimachinery's mergeSortedSlice)
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]
    assert out["status"]["phase"] == "Running"


def test_patch_delete_element_and_replace_element() -> None:
    out = patched({"spec": {"containers": [{"name": "c1", "$patch": "delete"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["c2"]
    out = patched({"spec": {"containers": [{"name": "only", "image": "i"}, {"$patch": "replace"}]}})
    assert out["spec"]["containers"] == [{"name": "only", "image": "i"}]


def test_patch_replace_and_delete_on_maps() -> None:
    out = patched({"metadata": {"labels": {"$patch": "replace", "z": "26"}}})
    assert out["metadata"]["labels"] == {"z": "26"}
    out = patched({"metadata": {"labels": {"$patch": "delete"}}})
    assert out["metadata"]["labels"] == {}
    with pytest.raises(PatchFormatError):
        patched({"metadata": {"labels": {"$patch": "bogus"}}})
    with pytest.raises(PatchError, match="cannot yet be specified"):
        patched({"spec": {"containers": [{"name": "c1", "$patch": "merge"}]}})


def test_set_element_order_reorders_and_keeps_server_only_items() -> None:
    original = pod()
    original["spec"]["containers"].append({"name": "sidecar", "image": "s"})  # e.g. added by a webhook
    out = patched({"spec": {"$setElementOrder/containers": [{"name": "c2"}, {"name": "c1"}],
                            "containers": [{"name": "c1", "image": "busybox:2"}]}}, original)
    assert [(c["name"], c["image"]) for c in out["spec"]["containers"]] == [
        ("c2", "alpine"), ("c1", "busybox:2"), ("sidecar", "s")]
    assert not any(k.startswith("$") for k in out["spec"])


def test_retain_keys_clears_the_other_keys() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}
    out = patched({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}, deployment,
                  DEPLOYMENT_TYPE)
    assert out["spec"]["strategy"] == {"type": "Recreate"}
    with pytest.raises(PatchError):
        patched({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}, deployment, DEPLOYMENT_TYPE)


def test_volumes_merge_by_name_with_retain_keys() -> None:
    original = pod(volumes=[{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}])
    out = patched({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"],
                                         "hostPath": {"path": "/d"}}]}}, original)
    assert out["spec"]["volumes"] == [{"name": "data", "hostPath": {"path": "/d"}},
                                      {"name": "cfg", "configMap": {"name": "c"}}]


def test_merge_list_element_without_its_key_is_refused() -> None:
    with pytest.raises(PatchError, match="merge key"):
        patched({"spec": {"containers": [{"image": "nameless"}]}})
    with pytest.raises(PatchFormatError):
        apply_strategic_merge(pod(), [], POD_TYPE)  # type: ignore[arg-type]


def test_crd_kinds_have_no_merge_keys_so_lists_are_replaced() -> None:
    rt = ResourceType("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", "pytorchjob", True, from_crd="x")
    job = {"spec": {"list": [{"name": "a"}, {"name": "b"}], "keep": 1}}
    assert apply_strategic_merge(job, {"spec": {"list": [{"name": "c"}]}}, rt) == {
        "spec": {"list": [{"name": "c"}], "keep": 1}}


def test_a_pod_disruption_budgets_selector_is_replaced_whole() -> None:
    """PodDisruptionBudgetSpec.selector has patchStrategy=replace; other maps merge."""
    pdb_type = next(rt for rt in BUILTIN_TYPES if rt.kind == "PodDisruptionBudget")
    original = {"metadata": {"name": "b", "labels": {"a": "1"}},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web", "tier": "front"}}}}
    out = patched({"metadata": {"labels": {"b": "2"}}, "spec": {"selector": {"matchLabels": {"app": "web"}}}},
                  original, pdb_type)
    assert out["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    assert out["metadata"]["labels"] == {"a": "1", "b": "2"}
