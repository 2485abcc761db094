"""Issue 29, item 7: the chart's ClusterRoles for people (docs/security.md). ElasticQuotas and
Queues are policy, written by cluster admins only (<release>-admin, never aggregated into the
namespace roles); a tenant (<release>-user, aggregated into admin and edit as Kueue's are) gets
the jobs of the enabled kinds and reads its QueueUnits, Queues and ElasticQuotas."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.jobs import KINDS
from tests.chart.helmtool import render
from tests.chart.kube import KUBECTL, Cluster, embedded_cluster

ADMIN, USER, VIEWER = "koord-queue-admin", "koord-queue-user", "koord-queue-viewer"
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
POLICY_GROUPS = {"scheduling.sigs.k8s.io", "scheduling.x-k8s.io"}


def roles(values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in render(values) if o["kind"] == "ClusterRole"
            and o["metadata"]["name"] in (ADMIN, USER, VIEWER)}


def grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def aggregated_to(role: dict[str, Any]) -> set[str]:
    return {k.removeprefix(AGGREGATE) for k, v in role["metadata"]["labels"].items()
            if k.startswith(AGGREGATE) and v == "true"}


def test_the_roles_and_where_they_are_aggregated() -> None:
    found = roles()
    assert set(found) == {ADMIN, USER, VIEWER}
    assert aggregated_to(found[ADMIN]) == set()  # quotas and Queues never reach namespace admins
    assert aggregated_to(found[USER]) == {"admin", "edit"}
    assert aggregated_to(found[VIEWER]) == {"view"}


def test_a_user_writes_jobs_and_only_reads_units_queues_and_quotas() -> None:
    found = roles({"extension": {k.extension: {"enable": True} for k in KINDS}})
    user, viewer, admin = grants(found[USER]), grants(found[VIEWER]), grants(found[ADMIN])
    for kind in KINDS:
        assert {(kind.group, kind.plural, verb) for verb in WRITES | {"get", "list", "watch"}} <= user, kind.kind
        assert {(kind.group, kind.plural, verb) for verb in ("get", "list", "watch")} <= viewer, kind.kind
    for group, resource in (("scheduling.x-k8s.io", "queueunits"), ("scheduling.x-k8s.io", "queues"),
                            ("scheduling.sigs.k8s.io", "elasticquotas")):
        assert {(group, resource, verb) for verb in ("get", "list", "watch")} <= user & viewer, resource
    assert not {g for g in user | viewer if g[0] in POLICY_GROUPS and g[2] in WRITES}, "policy is admins' only"
    assert not {g for g in viewer if g[2] in WRITES}
    for resource in ("elasticquotas", "elasticquotatrees"):
        assert ("scheduling.sigs.k8s.io", resource, "create") in admin
    assert ("scheduling.x-k8s.io", "queues", "create") in admin
    # Units are the controller's, even for an admin: read and delete, no write.
    assert {v for g, r, v in admin if r == "queueunits"} == {"get", "list", "watch", "delete"}


def test_only_the_enabled_kinds_are_granted() -> None:
    found = roles({"extension": {"pytorch": {"enable": True}, "batchjob": {"enable": False}, "tf": {"enable": False},
                                 "mpi": {"enable": False}, "ray": {"enable": False}, "raycluster": {"enable": False},
                                 "spark": {"enable": False}, "argo": {"enable": False}}})
    jobs = {(g, r) for g, r, _ in grants(found[USER]) if g not in POLICY_GROUPS}
    assert jobs == {("kubeflow.org", "pytorchjobs")}


def test_the_switches() -> None:
    assert roles({"rbac": {"userRoles": {"enable": False}}}) == {}
    found = roles({"rbac": {"userRoles": {"enable": True, "aggregateToDefaultRoles": False}}})
    assert set(found) == {ADMIN, USER, VIEWER}
    assert all(aggregated_to(role) == set() for role in found.values())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with embedded_cluster(tmp_path) as running:
        yield running


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_a_tenant_bound_to_the_user_role_cannot_write_policy(cluster: Cluster) -> None:
    """On a server that enforces RBAC: a ServiceAccount of namespace t1 bound there to the user
    role may queue jobs and read units, and may write no quota, Queue or unit."""
    objects = [role for role in roles().values()]
    objects += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t1"}},
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant", "namespace": "t1"}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "tenant-user", "namespace": "t1"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER},
                 "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": "t1"}]}]
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    tenant = "--as=system:serviceaccount:t1:tenant"

    def can(*args: str) -> str:
        return cluster.kubectl("auth", "can-i", *args, tenant, check=False).stdout.strip()

    assert can("create", "pytorchjobs.kubeflow.org", "-n", "t1") == "yes"
    assert can("patch", "pytorchjobs.kubeflow.org", "-n", "t1") == "yes"
    assert can("list", "queueunits.scheduling.x-k8s.io", "-n", "t1") == "yes"
    assert can("get", "elasticquotas.scheduling.sigs.k8s.io", "-n", "t1") == "yes"
    for verb, resource in (("create", "elasticquotas.scheduling.sigs.k8s.io"),
                           ("patch", "elasticquotas.scheduling.sigs.k8s.io"),
                           ("create", "queues.scheduling.x-k8s.io"), ("patch", "queues.scheduling.x-k8s.io"),
                           ("patch", "queueunits.scheduling.x-k8s.io"), ("create", "queueunits.scheduling.x-k8s.io")):
        assert can(verb, resource, "-n", "t1") == "no", (verb, resource)
    assert can("create", "pytorchjobs.kubeflow.org", "-n", "t2") == "no"  # its own namespace only
