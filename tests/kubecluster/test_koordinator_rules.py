"""Our quota validation beside the real koord-manager's: the same ElasticQuotas are created
through kubectl, where koord-manager's webhooks take them or refuse them, and fed to our
validation directly (no webhook of ours), which must say the same. The rules side by side:
tests/engine/test_koordinator_rules.py and docs/quota-model.md."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest
import yaml

from koordqueue.api import constants as c
from koordqueue.api.objects import InvalidObject, is_koordinators_own, parse_elastic_quota
from koordqueue.engine.model import QuotaInfo
from koordqueue.engine.validation import validate_quotas
from koordqueue.realcluster.cluster import RealCluster
from tests.controller.conftest import kubectl
from tests.engine.test_koordinator_rules import eq

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]
NAMESPACES = ("kr-org", "kr-other")
GPU_CPU = {c.GPU: "8", "cpu": "32"}
ORG_MAX = {**GPU_CPU, "memory": "64Gi"}  # the parent limits memory, but guarantees none


def create(cluster: RealCluster, obj: dict[str, Any]) -> tuple[bool, str]:
    """kubectl create: whether the API server (and so koord-manager's webhooks) took it, and
    what kubectl said."""
    result = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig_path), "create", "-f", "-"],
                            input=yaml.safe_dump(obj), capture_output=True, text=True, timeout=60)
    return result.returncode == 0, result.stdout + result.stderr


def stored(cluster: RealCluster) -> list[dict[str, Any]]:
    """The teams' ElasticQuotas as stored: after koord-manager's mutating webhook."""
    items = json.loads(kubectl(cluster.kubeconfig_path, "get", "elasticquotas", "-A", "-o", "json"))["items"]
    return [obj for obj in items if not is_koordinators_own(obj)]


def ours(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Our reasons for not using quotas, as the controller would read ``objects``."""
    quotas: dict[str, QuotaInfo] = {}
    reasons: dict[str, str] = {}
    for obj in objects:
        try:
            quota = parse_elastic_quota(obj).quota
        except InvalidObject as err:
            reasons[obj["metadata"]["name"]] = err.reason
            continue
        quotas[quota.name] = quota
    return validate_quotas(quotas) | reasons


def org(name: str, **fields: Any) -> dict[str, Any]:
    return eq(name, ns="kr-org", **fields)


# A good tree first: a parent of 8 GPUs and 32 cores with two teams, one listing a namespace.
GOOD = [
    org("kr-org", min_=GPU_CPU, max_=ORG_MAX, is_parent="true", tree_id="kr-tree"),
    org("kr-a", min_={c.GPU: "4", "cpu": "16"}, max_=ORG_MAX, parent="kr-org"),
    org("kr-b", min_={c.GPU: "2"}, max_=ORG_MAX, parent="kr-org", namespaces=["kr-listed"]),
    eq("kr-solo", ns="kr-other", max_={"cpu": "4"}, parent=c.KOORDINATOR_ROOT_QUOTA),
]

# Then newcomers, each refused by both (koord-manager's words, ours), or taken by one only.
BAD = [
    (org("kr-orphan", max_=ORG_MAX, parent="kr-ghost"),
     "fill quota kr-orphan failed, parent not exist", "its parent quota kr-ghost does not exist"),
    (org("kr-under-leaf", max_=ORG_MAX, parent="kr-a"),
     "kr-under-leaf has parentName kr-a but the parentQuotaInfo's IsParent is false",
     'its parent quota kr-a is not marked as a parent (label is-parent: "true")'),
    (org("kr-system-child", max_=ORG_MAX, parent=c.KOORDINATOR_SYSTEM_QUOTA),
     "kr-system-child has parentName koordinator-system-quota but the parentQuotaInfo's IsParent is false",
     "its parent quota koordinator-system-quota is Koordinator's own, which has no children"),
    (org("kr-greedy", min_={"cpu": "40"}, max_=ORG_MAX, parent="kr-org"),
     "resourceKey cpu of quota kr-greedy min 40 > max 32", "min of cpu (40) is more than its max (32)"),
    (org("kr-weight", max_=ORG_MAX, parent="kr-org", shared_weight={"cpu": "-1"}),
     "kr-weight quota.Annotation[quota.scheduling.koordinator.sh/shared-weight]'s value < 0, in dimension :[cpu]",
     f"ElasticQuota kr-org/kr-weight: annotation {c.ANNOTATION_SHARED_WEIGHT}: cpu: quantity '-1' is negative; "
     "only amounts >= 0 are allowed"),
    (org("kr-disk", max_={**ORG_MAX, "ephemeral-storage": "1Ti"}, parent="kr-org"),
     "checkSubAndParentGroupQuotaKey failed: kr-org's max keys are not the same with kr-disk's",
     "its max names ephemeral-storage, which the max of its parent quota kr-org does not"),
    (org("kr-memory", min_={"memory": "1Gi"}, max_=ORG_MAX, parent="kr-org"),
     "checkSubAndParentGroupQuotaKey failed: kr-memory's min keys are not all included in kr-org's",
     "its min names memory, which the min of its parent quota kr-org does not"),
    (org("kr-c", min_={c.GPU: "4"}, max_=ORG_MAX, parent="kr-org"),
     "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: kr-org",
     f"the mins of the children of kr-org would add up to 10 of {c.GPU}, more than its min (8)"),
    (org("kr-listing", max_=ORG_MAX, parent="kr-org", namespaces=["kr-listed"]),
     "AddQuota quota kr-listing's annotation namespace kr-listed is already bound to quota kr-b",
     f"namespace kr-listed is already bound to quota kr-b (annotation {c.ANNOTATION_QUOTA_NAMESPACES}): "
     "a namespace is bound to one quota"),
    (org("kr-elsewhere", max_=ORG_MAX, parent="kr-org", tree_id="kr-other-tree"),
     "kr-elsewhere tree id is different from parent kr-org, [kr-other-tree] vs [kr-tree]",
     f"its label {c.LABEL_QUOTA_TREE_ID} (kr-other-tree) is not its parent quota kr-org's (kr-tree): "
     "a child is in its parent's tree"),
    # The difference we keep (docs/quota-model.md): koord-manager, at its default gates, wants
    # a child's max to name every resource of its parent's; we let the parent limit the rest.
    (org("kr-gpus-only", max_={c.GPU: "8"}, parent="kr-org"),
     "checkSubAndParentGroupQuotaKey failed: kr-org's max keys are not the same with kr-gpus-only's", None),
]


def wait_for_koordinators_quotas(cluster: RealCluster, timeout: float = 60.0) -> None:
    """Until koord-scheduler has made its own quotas (at its start): one row names its system quota."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = json.loads(kubectl(cluster.kubeconfig_path, "get", "elasticquotas", "-A", "-o", "json"))["items"]
        if {c.KOORDINATOR_SYSTEM_QUOTA, c.KOORDINATOR_ROOT_QUOTA} <= {q["metadata"]["name"] for q in items}:
            return
        time.sleep(0.3)
    raise AssertionError("koord-scheduler never made its own quotas")


def test_koord_manager_and_we_take_and_refuse_the_same_quotas(koordinator: RealCluster) -> None:
    wait_for_koordinators_quotas(koordinator)
    for namespace in (*NAMESPACES, "kr-listed"):
        kubectl(koordinator.kubeconfig_path, "create", "namespace", namespace)
    for obj in GOOD:
        taken, said = create(koordinator, obj)
        assert taken, said
    good = stored(koordinator)
    assert sorted(q["metadata"]["name"] for q in good) == sorted(q["metadata"]["name"] for q in GOOD)
    # koord-manager filled in its defaults; we read the stored objects as it left them, and
    # the objects as written, alike: all used.
    assert ours(good) == {} and ours(GOOD) == {}
    assert all(q["metadata"]["labels"][c.LABEL_QUOTA_PARENT] for q in good)

    for obj, theirs, why in BAD:
        name = obj["metadata"]["name"]
        taken, said = create(koordinator, obj)
        assert not taken and theirs in said, f"{name}: kubectl said {said!r}"
        assert ours([*good, obj]) == ({name: why} if why else {}), name
    assert sorted(q["metadata"]["name"] for q in stored(koordinator)) == sorted(
        q["metadata"]["name"] for q in GOOD), "koord-manager took none of them"

    # And one that both take: a third team whose min fills the parent's exactly.
    fills = org("kr-fills", min_={c.GPU: "2", "cpu": "16"}, max_=ORG_MAX, parent="kr-org")
    taken, said = create(koordinator, fills)
    assert taken, said
    assert ours(stored(koordinator)) == {}
    for name in ("kr-fills", "kr-a", "kr-b", "kr-org"):  # children first: koord-manager keeps parents that have some
        kubectl(koordinator.kubeconfig_path, "delete", "elasticquota", name, "-n", "kr-org")
