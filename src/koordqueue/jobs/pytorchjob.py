"""PyTorchJob (kubeflow.org/v1): Master and Worker replicas; with ``spec.elasticPolicy``,
Workers may be admitted in part, down to ``minReplicas``."""

from __future__ import annotations

from dataclasses import replace

from koordqueue.api.constants import PYTORCH_JOB_KIND, PYTORCH_JOB_PLURAL, UNIT_SUFFIX_PYTORCH
from koordqueue.api.meta import read_int, section
from koordqueue.jobs.base import Job, Role
from koordqueue.jobs.kind import JobKind
from koordqueue.jobs.kubeflow import KubeflowAdapter, kubeflow_crd

ELASTIC_ROLE = "Worker"
# The scale subresource of the training operator's PyTorchJob CRD.
SCALE = {"labelSelectorPath": ".status.replicaStatuses.Worker.selector",
         "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
         "statusReplicasPath": ".status.replicaStatuses.Worker.active"}


class PyTorchJobAdapter(KubeflowAdapter):
    kind = PYTORCH_JOB_KIND
    unit_suffix = UNIT_SUFFIX_PYTORCH
    replica_specs_key = "pytorchReplicaSpecs"
    leader_roles = ("Master",)

    def roles(self, job: Job) -> list[Role]:
        roles = super().roles(job)
        where = f"{self.meta(job).describe()}: spec.elasticPolicy"
        least = section(section(job, "spec", where), "elasticPolicy", where).get("minReplicas")
        if least is None:
            return roles
        least = read_int(least, f"{where}.minReplicas", minimum=1)
        return [replace(role, min_count=min(least, role.replicas)) if role.name == ELASTIC_ROLE else role
                for role in roles]


ADAPTER = PyTorchJobAdapter()
KIND = JobKind(ADAPTER, PYTORCH_JOB_PLURAL, "pytorch", crd=kubeflow_crd(ADAPTER, PYTORCH_JOB_PLURAL, SCALE),
               scale_role=ELASTIC_ROLE)
