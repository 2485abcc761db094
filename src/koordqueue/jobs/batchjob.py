"""The Kubernetes batch Job (batch/v1): one template, ``parallelism`` pods, ``spec.suspend``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordqueue.api.constants import (
    BATCH_API_VERSION,
    BATCH_CONDITION_COMPLETE,
    BATCH_CONDITION_FAILED,
    BATCH_CONDITION_FAILURE_TARGET,
    BATCH_CONDITION_SUCCESS_CRITERIA_MET,
    BATCH_JOB_KIND,
    BATCH_JOB_PLURAL,
    LABEL_BATCH_JOB_NAME,
    RAY_JOB_KIND,
)
from koordqueue.api.meta import section
from koordqueue.jobs.base import (
    Job,
    JobState,
    PodLabels,
    Role,
    SpecSuspendAdapter,
    condition_true,
    replicas,
    template,
)
from koordqueue.jobs.kind import JobKind
from koordqueue.jobs.placement import template_patch

POD_SET_NAME = "main"


class BatchJobAdapter(SpecSuspendAdapter):
    api_version = BATCH_API_VERSION
    kind = BATCH_JOB_KIND
    unit_suffix = ""
    pod_labels = (PodLabels(LABEL_BATCH_JOB_NAME),)  # (no role: its one pod set)
    # KubeRay's submitter of a RayJob is part of that RayJob, queued once, through it (Kueue
    # skips it too; Koord-Queue queues only Jobs created suspended, which the submitter is not).
    parent_kinds = frozenset({RAY_JOB_KIND})

    def roles(self, job: Job) -> list[Role]:
        where = self.meta(job).describe()
        spec = section(job, "spec", where, required=True)
        parallelism = replicas(spec.get("parallelism"), f"{where}: spec.parallelism")
        completions = spec.get("completions")
        if completions is not None:  # never more pods at once than completions left to do
            parallelism = min(parallelism, replicas(completions, f"{where}: spec.completions"))
        return [Role(POD_SET_NAME, parallelism, template(spec.get("template"), f"{where}: spec"))]

    def role_patch(self, changes: Mapping[str, Mapping[str, Any]], job: Job | None = None) -> dict[str, Any] | None:
        fields = changes.get(POD_SET_NAME, {})
        spec: dict[str, Any] = {}
        if "replicas" in fields:
            spec["parallelism"] = fields["replicas"]
        template = template_patch(fields)
        if template:
            spec["template"] = template
        return {"spec": spec}

    def status(self, job: Job) -> JobState:
        """Ended once the Job controller has decided how (SuccessCriteriaMet, FailureTarget):
        Complete or Failed follows only when its last pods have stopped, a sync (1 s or more)
        later, and the pods still stopping are counted on their nodes until they are gone."""
        status = section(job, "status", self.meta(job).describe())
        conditions = status.get("conditions")
        if condition_true(conditions, BATCH_CONDITION_COMPLETE) or \
                condition_true(conditions, BATCH_CONDITION_SUCCESS_CRITERIA_MET):
            return JobState.SUCCEEDED
        if condition_true(conditions, BATCH_CONDITION_FAILED) or condition_true(conditions, BATCH_CONDITION_FAILURE_TARGET):
            return JobState.FAILED
        # status.ready counts pods that run; status.active counts pending ones too, so it
        # is used only where the API server writes no ready count (before Kubernetes 1.24).
        running = status.get("ready") if "ready" in status else status.get("active")
        if isinstance(running, int) and running > 0:
            return JobState.RUNNING
        return JobState.PENDING

    def finishes_once_resumed(self, job: Job) -> bool:
        """A Job whose pods did their work before a suspension of it landed (ours, preempting
        it, say): kube-controller-manager writes SuccessCriteriaMet or FailureTarget, but not
        Complete or Failed while it is suspended (it clears a suspended Job's startTime, and
        kube-apiserver refuses a finished Job without one). Resumed, it makes no pods for it
        (a Job with either condition has ended) and finishes it."""
        if not self.native_suspended(job):
            return False
        conditions = section(job, "status", self.meta(job).describe()).get("conditions")
        return (condition_true(conditions, BATCH_CONDITION_SUCCESS_CRITERIA_MET)
                or condition_true(conditions, BATCH_CONDITION_FAILURE_TARGET)) and not (
            condition_true(conditions, BATCH_CONDITION_COMPLETE) or condition_true(conditions, BATCH_CONDITION_FAILED))


KIND = JobKind(BatchJobAdapter(), BATCH_JOB_PLURAL, "batchjob")  # built into the API server: no CRD
