"""TFJob (kubeflow.org/v1): Chief, Master, PS, Worker and Evaluator replicas."""

from __future__ import annotations

from koordqueue.api.constants import TF_JOB_KIND, TF_JOB_PLURAL, UNIT_SUFFIX_TF
from koordqueue.jobs.kind import JobKind
from koordqueue.jobs.kubeflow import KubeflowAdapter, kubeflow_crd


class TFJobAdapter(KubeflowAdapter):
    kind = TF_JOB_KIND
    unit_suffix = UNIT_SUFFIX_TF
    replica_specs_key = "tfReplicaSpecs"
    leader_roles = ("Chief", "Master")


ADAPTER = TFJobAdapter()
KIND = JobKind(ADAPTER, TF_JOB_PLURAL, "tf", crd=kubeflow_crd(ADAPTER, TF_JOB_PLURAL))
