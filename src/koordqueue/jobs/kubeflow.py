"""What the kubeflow.org/v1 training jobs share: replica specs and ``runPolicy.suspend``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from koordqueue.api.constants import (
    KUBEFLOW_API_VERSION,
    KUBEFLOW_CONDITION_FAILED,
    KUBEFLOW_CONDITION_RESTARTING,
    KUBEFLOW_CONDITION_RUNNING,
    KUBEFLOW_CONDITION_SUCCEEDED,
    KUBEFLOW_CONDITION_SUSPENDED,
    LABEL_JOB_NAME,
    LABEL_REPLICA_TYPE,
)
from koordqueue.api.meta import InvalidObject, section
from koordqueue.jobs.base import (
    Job,
    JobAdapter,
    JobState,
    PodLabels,
    Role,
    condition_true,
    replicas,
    suspend_flag,
    template,
)
from koordqueue.jobs.kind import Manifest
from koordqueue.jobs.placement import template_patch


class KubeflowAdapter(JobAdapter):
    """A training-operator job: ``spec.<replicaSpecsKey>`` maps a role to replicas and a template."""

    api_version = KUBEFLOW_API_VERSION
    replica_specs_key: ClassVar[str]
    pod_labels: ClassVar[tuple[PodLabels, ...]] = (PodLabels(LABEL_JOB_NAME, LABEL_REPLICA_TYPE),)

    def roles(self, job: Job) -> list[Role]:
        where = self.meta(job).describe()
        spec = section(job, "spec", where, required=True)
        specs = section(spec, self.replica_specs_key, f"{where}: spec", required=True)
        if not specs:
            raise InvalidObject(f"{where}: spec.{self.replica_specs_key} has no replica spec")
        roles = []
        for name, replica_spec in specs.items():
            at = f"{where}: spec.{self.replica_specs_key}.{name}"
            if not isinstance(replica_spec, Mapping):
                raise InvalidObject(f"{at} must be a mapping with replicas and a template")
            count = replicas(replica_spec.get("replicas"), at)
            roles.append(Role(str(name), count, template(replica_spec.get("template"), at)))
        return roles

    def role_patch(self, changes: Mapping[str, Mapping[str, Any]], job: Job | None = None) -> dict[str, Any] | None:
        return {"spec": {self.replica_specs_key: {role: _role_fields(fields) for role, fields in changes.items()}}}

    def native_suspended(self, job: Job) -> bool:
        where = self.meta(job).describe()
        run_policy = section(section(job, "spec", where), "runPolicy", f"{where}: spec")
        return suspend_flag(run_policy.get("suspend"), f"{where}: spec.runPolicy")

    def native_suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return {"spec": {"runPolicy": {"suspend": suspend}}}

    def status(self, job: Job) -> JobState:
        conditions = section(job, "status", self.meta(job).describe()).get("conditions")
        if condition_true(conditions, KUBEFLOW_CONDITION_SUCCEEDED):
            return JobState.SUCCEEDED
        if condition_true(conditions, KUBEFLOW_CONDITION_FAILED):
            return JobState.FAILED
        if condition_true(conditions, KUBEFLOW_CONDITION_SUSPENDED):
            return JobState.PENDING
        if condition_true(conditions, KUBEFLOW_CONDITION_RUNNING) or condition_true(
            conditions, KUBEFLOW_CONDITION_RESTARTING
        ):
            return JobState.RUNNING
        return JobState.PENDING


def _role_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A replica spec's part of a merge patch: its replicas, its pod template's nodeSelector
    entries and metadata marks."""
    out: dict[str, Any] = {}
    if "replicas" in fields:
        out["replicas"] = fields["replicas"]
    template = template_patch(fields)
    if template:
        out["template"] = template
    return out


def kubeflow_crd(adapter: KubeflowAdapter, plural: str,
                 scale: dict[str, str] | None = None) -> Callable[[], Manifest]:
    """The training operator's CRD of a kind, printing its jobs as the operator's does."""
    def make() -> Manifest:
        from koordqueue.api.crds import (  # pydantic: only when CRDs are wanted
            age,
            column,
            crd,
            kubeflow_schema,
        )

        group, _, version = adapter.api_version.rpartition("/")
        return crd(group, version, adapter.kind, plural, kubeflow_schema(adapter.kind, adapter.replica_specs_key),
                   [column("State", ".status.conditions[-1:].type"), age()], scale=scale)
    return make
