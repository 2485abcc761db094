"""A job's pod rules as node fit reads them, and what an admission changes on the job: its
pods pinned to a domain, an elastic role's replicas; put back on suspension, while the
job's unit stays as the user wrote it."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from koordqueue.api.constants import (
    ANNOTATION_GANG_MIN_AVAILABLE,
    ANNOTATION_GANG_NAME,
    ANNOTATION_PLACED,
    LABEL_QUOTA_NAME,
)
from koordqueue.api.meta import InvalidObject
from koordqueue.engine.model import Placement, Requirement, Toleration, TopologyRequest
from koordqueue.jobs import adapter_for
from koordqueue.jobs.placement import Written, admission_patch, koordinator_marks, originals, written_role
from koordqueue.jobs.unit import unit_info

from .helpers import load, merge_patch

RACK = "topology.koord-queue.io/rack"
ZONE = "topology.kubernetes.io/zone"


def job(**worker_spec: Any) -> dict[str, Any]:
    """The seed's PyTorchJob with some fields of its Worker's pod spec set."""
    manifest = load("seed-pytorchjob.yaml")
    spec = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec.update(worker_spec)
    return manifest


def worker(manifest: dict[str, Any]):  # type: ignore[no-untyped-def]
    info = unit_info(manifest, adapter_for(manifest["apiVersion"], manifest["kind"]), {}, 0.0)
    return next(ps for ps in info.pod_sets if ps.name == "worker")


def test_the_rules_of_a_pod_template() -> None:
    manifest = job(
        nodeSelector={"accelerator": "h100"},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"},
                     {"operator": "Exists"}],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}],
             "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-9"]}]}]}}},
    )
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"].setdefault("metadata", {})["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": RACK}
    ps = worker(manifest)
    assert ps.node_selector == (("accelerator", "h100"),)
    assert ps.tolerations == (Toleration("dedicated", "Equal", "train", "NoSchedule"), Toleration(operator="Exists"))
    assert ps.affinity == ((Requirement("pool", "In", ("a", "b")),
                            Requirement("metadata.name", "NotIn", ("gpu-9",), field=True)),)
    assert ps.topology == TopologyRequest(RACK, True)


def test_preferred_topology_and_elastic_workers() -> None:
    manifest = job()
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    manifest["spec"]["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 4}
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-preferred-topology": ZONE}}
    ps = worker(manifest)
    assert (ps.count, ps.min_count, ps.elastic) == (4, 2, True)
    assert ps.topology == TopologyRequest(ZONE, False)


@pytest.mark.parametrize(("field", "value", "said"), [
    ("nodeSelector", ["a"], "template.spec.nodeSelector must be a mapping of strings"),
    ("tolerations", [{"operator": "Sometimes"}], "tolerations[0].operator must be Equal or Exists"),
    ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "Near"}]}]}}}, "operator must be one of In, NotIn"),
])
def test_rules_that_cannot_be_read_say_where(field: str, value: Any, said: str) -> None:
    with pytest.raises(InvalidObject, match=re.escape(said)):
        worker(job(**{field: value}))


def test_both_topology_annotations_is_an_error() -> None:
    manifest = job()
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {"annotations": {
        "kueue.x-k8s.io/podset-required-topology": RACK, "kueue.x-k8s.io/podset-preferred-topology": ZONE}}
    with pytest.raises(InvalidObject, match="both given; name one level"):
        worker(manifest)


def written(manifest: dict[str, Any]) -> list[Written]:
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    return [written_role(ps.role, ps.count, ps.template) for ps in adapter.pod_sets(manifest)]


def test_an_admission_pins_and_scales_the_job_and_its_suspension_puts_it_back() -> None:
    manifest = job(nodeSelector={"accelerator": "h100", RACK: "mine"})
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    manifest["spec"]["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 4}
    original = copy.deepcopy(manifest)
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    before = unit_info(manifest, adapter, {}, 0.0)
    chain = ((ZONE, "a"), (RACK, "r2"))
    placement = Placement(counts=(("worker", 3),), domains=(("worker", RACK, chain), ("master", RACK, chain)))

    patch = admission_patch(adapter.role_patch, written(manifest), originals(adapter.meta(manifest)), placement)
    assert patch is not None
    placed = merge_patch(manifest, patch)
    workers = placed["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert workers["replicas"] == 3
    assert workers["template"]["spec"]["nodeSelector"] == {"accelerator": "h100", ZONE: "a", RACK: "r2"}
    assert placed["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] == {
        ZONE: "a", RACK: "r2"}
    # The unit is the same: made from the job as the user wrote it.
    assert unit_info(placed, adapter, {}, 0.0) == before

    # Admitted again elsewhere without a suspension between: the first changes go first.
    again = Placement(domains=(("worker", RACK, ((ZONE, "b"), (RACK, "r1"))),))
    patch = admission_patch(adapter.role_patch, written(placed), originals(adapter.meta(placed)), again)
    assert patch is not None
    moved = merge_patch(placed, patch)
    assert moved["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    assert moved["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {
        "accelerator": "h100", ZONE: "b", RACK: "r1"}
    assert "nodeSelector" not in moved["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]

    restore = admission_patch(adapter.role_patch, written(moved), originals(adapter.meta(moved)), None)
    assert restore is not None
    assert merge_patch(moved, restore) == original
    assert admission_patch(adapter.role_patch, written(original), {}, None) is None


def test_beside_koordinator_an_admission_marks_every_pod_with_its_quota_and_gang_and_a_suspension_unmarks() -> None:
    manifest = job()
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    manifest["spec"]["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 4}
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    # The user's own label of that name (another quota) is replaced while admitted, then put back.
    worker.setdefault("metadata", {}).setdefault("labels", {})[LABEL_QUOTA_NAME] = "theirs"
    worker["metadata"]["labels"]["team"] = "a"
    original = copy.deepcopy(manifest)
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    before = unit_info(manifest, adapter, {}, 0.0)
    placement = Placement(counts=(("worker", 3),))
    marks = koordinator_marks("team-a", "trainer", written(manifest), placement)
    assert dict(marks.annotations) == {ANNOTATION_GANG_NAME: "trainer", ANNOTATION_GANG_MIN_AVAILABLE: "4"}  # 1 + 3

    patch = admission_patch(adapter.role_patch, written(manifest), originals(adapter.meta(manifest)), placement, marks)
    assert patch is not None
    placed = merge_patch(manifest, patch)
    for role in ("Master", "Worker"):
        meta = placed["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]
        assert meta["labels"][LABEL_QUOTA_NAME] == "team-a"
        assert meta["annotations"] == {ANNOTATION_GANG_NAME: "trainer", ANNOTATION_GANG_MIN_AVAILABLE: "4"}
    assert placed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]["team"] == "a"
    assert unit_info(placed, adapter, {}, 0.0) == before  # the unit is made from the job as written

    restore = admission_patch(adapter.role_patch, written(placed), originals(adapter.meta(placed)), None)
    assert restore is not None
    unmarked = merge_patch(placed, restore)
    master = unmarked["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert master.pop("metadata") == {}  # the user wrote no metadata there: what we wrote is gone
    assert unmarked["spec"] == original["spec"]


def test_a_placed_annotation_we_did_not_write_is_refused() -> None:
    manifest = job()
    manifest["metadata"].setdefault("annotations", {})[ANNOTATION_PLACED] = "[1, 2]"
    with pytest.raises(InvalidObject, match="koord-queue/placed is not what koord-queue writes"):
        unit_info(manifest, adapter_for(manifest["apiVersion"], manifest["kind"]), {}, 0.0)


def test_a_job_is_never_asked_for_fewer_replicas_than_it_has_whatever_its_placed_annotation_says() -> None:
    """Issue 29: koord-queue/placed is on the job, which its tenant may edit. A job of 7 Workers
    saying it was written with 1 asks for 7; an elastic job admitted with 3 of 4 Workers whose
    tenant raises them to 6 asks for 6, and its suspension leaves it 6, as its tenant wants."""
    adapter = adapter_for("kubeflow.org/v1", "PyTorchJob")
    assert adapter is not None
    forged = job()
    forged["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 7
    forged["metadata"].setdefault("annotations", {})[ANNOTATION_PLACED] = '{"Worker": {"replicas": 1}}'
    assert worker(forged).count == 7

    manifest = job()
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    manifest["spec"]["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 8}
    patch = admission_patch(adapter.role_patch, written(manifest), {}, Placement(counts=(("worker", 3),)))
    assert patch is not None
    placed = merge_patch(manifest, patch)
    assert placed["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert worker(placed).count == 4  # as written
    raised = merge_patch(placed, {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 6}}}})
    assert worker(raised).count == 6
    restore = admission_patch(adapter.role_patch, written(raised), originals(adapter.meta(raised)), None)
    assert restore is not None
    assert merge_patch(raised, restore)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 6
