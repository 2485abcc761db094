"""Small builders of simulation traces: quotas, jobs and nodes as a user writes them."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from koordqueue.api.constants import (
    ANNOTATION_PRIORITY,
    ANNOTATION_SHARED_WEIGHT,
    ELASTIC_QUOTA_KIND,
    KUBEFLOW_API_VERSION,
    LABEL_ALLOW_LENT_RESOURCE,
    LABEL_QUEUE_POLICY,
    LABEL_QUOTA_IS_PARENT,
    LABEL_QUOTA_PARENT,
    PYTORCH_JOB_KIND,
    QUOTA_API_VERSION,
)
from koordqueue.engine.model import EngineConfig
from koordqueue.sim.simulator import SimResult, simulate
from koordqueue.sim.trace import parse_trace

GPU = "nvidia.com/gpu"


def elastic_quota(
    name: str,
    min_: dict[str, str],
    max_: dict[str, str],
    parent: str | None = None,
    is_parent: bool = False,
    policy: str | None = None,
    weight: str | None = None,
    lend: bool = True,
    namespace: str | None = None,
) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if parent:
        labels[LABEL_QUOTA_PARENT] = parent
    if is_parent:
        labels[LABEL_QUOTA_IS_PARENT] = "true"
    if policy:
        labels[LABEL_QUEUE_POLICY] = policy
    if not lend:
        labels[LABEL_ALLOW_LENT_RESOURCE] = "false"
    annotations = {ANNOTATION_SHARED_WEIGHT: weight} if weight else {}
    return {
        "apiVersion": QUOTA_API_VERSION,
        "kind": ELASTIC_QUOTA_KIND,
        "metadata": {"name": name, "namespace": namespace or name, "labels": labels, "annotations": annotations},
        "spec": {"min": min_, "max": max_},
    }


def pytorch_job(
    name: str,
    namespace: str,
    pod: dict[str, str],
    workers: int = 0,
    priority: int | None = None,
    quota: str | None = None,
) -> dict[str, Any]:
    """A PyTorchJob with one Master and ``workers`` Workers, each pod requesting ``pod``."""
    template = {"spec": {"containers": [{"name": "pytorch", "image": "pytorch", "resources": {"requests": pod}}]}}
    specs: dict[str, Any] = {"Master": {"replicas": 1, "template": template}}
    if workers:
        specs["Worker"] = {"replicas": workers, "template": template}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if priority is not None:
        metadata["annotations"] = {ANNOTATION_PRIORITY: str(priority)}
    if quota is not None:
        metadata["labels"] = {"quota.scheduling.koordinator.sh/name": quota}
    return {"apiVersion": KUBEFLOW_API_VERSION, "kind": PYTORCH_JOB_KIND, "metadata": metadata,
            "spec": {"pytorchReplicaSpecs": specs}}


def job(at: float, manifest: dict[str, Any], runtime: float | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"at": at, "manifest": manifest}
    if runtime is not None:
        entry["runtime"] = runtime
    return entry


def run(document: dict[str, Any], config: EngineConfig | None = None) -> SimResult:
    return simulate(parse_trace(document), config)


def by_name(result: SimResult) -> dict[str, Any]:
    """The jobs of a result by name (names are unique in these tests)."""
    return {record.name: record for record in result.jobs}


@functools.cache
def simulated_whole(path: Path) -> SimResult:
    """``path`` read whole by PyYAML and simulated, once per session: examples/traces/
    fair-over-weeks.yaml takes seconds a run, and test_tracefile and test_fairness both
    need its run as it stands. Callers read the result; none changes it."""
    return simulate(parse_trace(yaml.safe_load(path.read_text())))
