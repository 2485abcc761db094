"""TFJob (kubeflow.org/v1): Chief, Master, PS, Worker and Evaluator replicas."""

from __future__ import annotations

from koordqueue.api.constants import TF_JOB_KIND, UNIT_SUFFIX_TF
from koordqueue.jobs.kubeflow import KubeflowAdapter


class TFJobAdapter(KubeflowAdapter):
    kind = TF_JOB_KIND
    unit_suffix = UNIT_SUFFIX_TF
    replica_specs_key = "tfReplicaSpecs"
    leader_roles = ("Chief", "Master")
