"""PyTorchJob (kubeflow.org/v1): Master and Worker replicas."""

from __future__ import annotations

from koordqueue.api.constants import PYTORCH_JOB_KIND, UNIT_SUFFIX_PYTORCH
from koordqueue.jobs.kubeflow import KubeflowAdapter


class PyTorchJobAdapter(KubeflowAdapter):
    kind = PYTORCH_JOB_KIND
    unit_suffix = UNIT_SUFFIX_PYTORCH
    replica_specs_key = "pytorchReplicaSpecs"
    leader_roles = ("Master",)
