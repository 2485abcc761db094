"""MPIJob (kubeflow.org/v1 of the training operator): Launcher and Worker replicas."""

from __future__ import annotations

from koordqueue.api.constants import MPI_JOB_KIND, MPI_JOB_PLURAL, UNIT_SUFFIX_MPI
from koordqueue.jobs.kind import JobKind
from koordqueue.jobs.kubeflow import KubeflowAdapter, kubeflow_crd


class MPIJobAdapter(KubeflowAdapter):
    kind = MPI_JOB_KIND
    unit_suffix = UNIT_SUFFIX_MPI
    replica_specs_key = "mpiReplicaSpecs"
    leader_roles = ("Launcher",)


ADAPTER = MPIJobAdapter()
KIND = JobKind(ADAPTER, MPI_JOB_PLURAL, "mpi", crd=kubeflow_crd(ADAPTER, MPI_JOB_PLURAL))
