"""MPIJob: the training operator's (kubeflow.org/v1: Launcher and Worker replica specs) and
the mpi-operator's older form (kubeflow.org/v1alpha1: ``spec.replicas`` pods of
``spec.template``), which Koord-Queue's "mpijob" extension queues.

One kind, two versions of one CRD (mpijobs.kubeflow.org): the API server stores both and
serves either as either (no conversion), so a job is read by its shape, not its apiVersion.
In the v1alpha1 form the demand is ``replicas`` times the template (the launcher is not
counted, as in Koord-Queue), and only the annotation holds it (it has no runPolicy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordqueue.api.constants import (
    LABEL_MPI_JOB_NAME_V1ALPHA1,
    LABEL_MPI_ROLE_V1ALPHA1,
    MPI_JOB_KIND,
    MPI_JOB_PLURAL,
    MPI_LAUNCHER_ACTIVE,
    MPI_LAUNCHER_FAILED,
    MPI_LAUNCHER_SUCCEEDED,
    MPI_V1ALPHA1_API_VERSION,
    UNIT_SUFFIX_MPI,
)
from koordqueue.api.meta import section
from koordqueue.jobs.base import Job, JobState, PodLabels, Role, replicas, template
from koordqueue.jobs.kind import JobKind, Manifest
from koordqueue.jobs.kubeflow import KubeflowAdapter, kubeflow_crd
from koordqueue.jobs.placement import template_patch

V1ALPHA1_ROLE = "worker"  # the v1alpha1 form's one role (lower case: v1's roles are Launcher, Worker)


def v1alpha1_form(job: Job) -> bool:
    """Whether the job is written in the v1alpha1 form (spec.template, no mpiReplicaSpecs)."""
    spec = job.get("spec")
    return isinstance(spec, Mapping) and "mpiReplicaSpecs" not in spec and "template" in spec


class MPIJobAdapter(KubeflowAdapter):
    kind = MPI_JOB_KIND
    unit_suffix = UNIT_SUFFIX_MPI
    replica_specs_key = "mpiReplicaSpecs"
    leader_roles = ("Launcher",)
    pod_labels = (*KubeflowAdapter.pod_labels, PodLabels(LABEL_MPI_JOB_NAME_V1ALPHA1, LABEL_MPI_ROLE_V1ALPHA1))

    def roles(self, job: Job) -> list[Role]:
        if not v1alpha1_form(job):
            return super().roles(job)
        where = f"{self.meta(job).describe()}: spec"
        spec = section(job, "spec", where, required=True)
        return [Role(V1ALPHA1_ROLE, replicas(spec.get("replicas"), where), template(spec.get("template"), where))]

    def role_patch(self, changes: Mapping[str, Mapping[str, Any]], job: Job | None = None) -> dict[str, Any] | None:
        if V1ALPHA1_ROLE not in changes:
            return super().role_patch(changes)
        fields = changes[V1ALPHA1_ROLE]
        spec: dict[str, Any] = {}
        if "replicas" in fields:
            spec["replicas"] = fields["replicas"]
        template = template_patch(fields)
        if template.get("spec"):  # (v1alpha1's single template: no metadata marks)
            spec["template"] = {"spec": template["spec"]}
        return {"spec": spec}

    def native_suspended(self, job: Job) -> bool:
        """The v1alpha1 form has no runPolicy: the annotation alone holds it, as in Koord-Queue."""
        return False if v1alpha1_form(job) else super().native_suspended(job)

    def has_native_suspend(self, job: Job) -> bool:
        return not v1alpha1_form(job)

    def status(self, job: Job) -> JobState:
        if not v1alpha1_form(job):
            return super().status(job)
        launcher = section(job, "status", self.meta(job).describe()).get("launcherStatus")
        return {MPI_LAUNCHER_SUCCEEDED: JobState.SUCCEEDED, MPI_LAUNCHER_FAILED: JobState.FAILED,
                MPI_LAUNCHER_ACTIVE: JobState.RUNNING}.get(str(launcher), JobState.PENDING)

    def api_version_of(self, job: Job) -> str:
        """A job in the v1alpha1 form is a v1alpha1 MPIJob, whichever version it was read in:
        the API server serves every stored MPIJob in either (no conversion)."""
        return MPI_V1ALPHA1_API_VERSION if v1alpha1_form(job) else super().api_version_of(job)

    def pod_selector(self, job: Job) -> dict[str, str]:
        if v1alpha1_form(job):
            return {LABEL_MPI_JOB_NAME_V1ALPHA1: self.meta(job).name}
        return super().pod_selector(job)


ADAPTER = MPIJobAdapter()


def mpi_job_crd() -> Manifest:
    """The MPIJob CRD serving v1 (stored) and the mpi-operator's v1alpha1 (schema left open).
    Both versions are one stored object (no conversion), so v1's spec keeps the fields of the
    v1alpha1 form (replicas, template; status.launcherStatus) and does not require
    mpiReplicaSpecs: a write through v1 (our patches, the operator's status) would otherwise
    prune or refuse a v1alpha1 job."""
    from koordqueue.api.crds import OPERATOR_SCHEMA  # pydantic: only when CRDs are wanted

    manifest = kubeflow_crd(ADAPTER, MPI_JOB_PLURAL)()
    stored = manifest["spec"]["versions"][0]
    v1_spec = stored["schema"]["openAPIV3Schema"]["properties"]["spec"]
    v1_spec.pop("required", None)
    for part in ("spec", "status"):  # status: launcherStatus, written through v1 too
        stored["schema"]["openAPIV3Schema"]["properties"][part]["x-kubernetes-preserve-unknown-fields"] = True
    version = MPI_V1ALPHA1_API_VERSION.rpartition("/")[2]
    schema = {**stored["schema"]["openAPIV3Schema"], "properties": {
        **{k: v for k, v in stored["schema"]["openAPIV3Schema"]["properties"].items() if k != "spec"},
        "spec": OPERATOR_SCHEMA["properties"]["spec"], "status": OPERATOR_SCHEMA["properties"]["status"]}}
    manifest["spec"]["versions"].append({**stored, "name": version, "storage": False,
                                         "schema": {"openAPIV3Schema": schema}})
    return manifest


KIND = JobKind(ADAPTER, MPI_JOB_PLURAL, "mpi", crd=mpi_job_crd,
               other_versions=(MPI_V1ALPHA1_API_VERSION.rpartition("/")[2],))
"""The mpi-operator's own CRD serves v1alpha1 alone: there the controller reads v1alpha1."""
