"""Argo Workflow (argoproj.io/v1alpha1): ``spec.suspend``; its demand is the annotation
``koord-queue/min-resources`` (a ResourceList, JSON or YAML), as Koord-Queue reads it: a
workflow's steps are made as it runs, so what it needs cannot be read from its templates.
Queued under its own name (no suffix), as in Koord-Queue.

Without the annotation a Workflow asks for nothing, as in Koord-Queue; an annotation that
cannot be read makes the Workflow invalid (Koord-Queue logs it and asks for nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import yaml

from koordqueue.api.constants import (
    ANNOTATION_ARGO_MIN_RESOURCES,
    ARGO_API_VERSION,
    ARGO_PHASE_ERROR,
    ARGO_PHASE_FAILED,
    ARGO_PHASE_RUNNING,
    ARGO_PHASE_SUCCEEDED,
    ARGO_PLURAL,
    ARGO_WORKFLOW_KIND,
    LABEL_ARGO_WORKFLOW,
    UNIT_SUFFIX_ARGO,
)
from koordqueue.api.meta import InvalidObject, Meta, read_int, section
from koordqueue.api.safeyaml import load_annotation
from koordqueue.engine.model import PodSetInfo
from koordqueue.jobs.base import Job, JobState, PodLabels, PodSet, Role, SpecSuspendAdapter
from koordqueue.jobs.kind import JobKind, Manifest

POD_SET_NAME = "default"  # Koord-Queue's one pod set of a Workflow
# Argo makes each step's pod from its template: a template's own nodeSelector replaces the
# Workflow's spec.nodeSelector, and its podSpecPatch may rewrite any field, so nothing an
# admission writes on the Workflow holds its pods to a flavor's nodes.
UNPINNABLE = ("an Argo Workflow's pods cannot be held to a flavor's nodes (a template's own nodeSelector "
              "replaces the Workflow's, and podSpecPatch may rewrite it); send it to a quota without flavors")


def min_resources(meta: Meta) -> dict[str, Any]:
    """The annotation koord-queue/min-resources as a ResourceList ({} when absent)."""
    text = meta.annotations.get(ANNOTATION_ARGO_MIN_RESOURCES, "")
    if not text.strip():
        return {}
    where = f"{meta.describe()}: annotation {ANNOTATION_ARGO_MIN_RESOURCES}"
    try:
        value = load_annotation(text)  # JSON is YAML; no aliases, bounded
    except yaml.YAMLError as e:
        raise InvalidObject(f"{where} is neither JSON nor YAML: {e}") from None
    if not isinstance(value, Mapping):
        raise InvalidObject(f"{where} must be a resource list such as {{\"cpu\": \"2\", \"memory\": \"4Gi\"}}")
    return {str(name): amount if isinstance(amount, int | float) else str(amount) for name, amount in value.items()}


class WorkflowAdapter(SpecSuspendAdapter):
    api_version = ARGO_API_VERSION
    kind = ARGO_WORKFLOW_KIND
    unit_suffix = UNIT_SUFFIX_ARGO
    pod_labels = (PodLabels(LABEL_ARGO_WORKFLOW),)  # (a step's pod: the one pod set)

    def roles(self, job: Job) -> list[Role]:
        """One pod set asking for the annotation's resources."""
        request = min_resources(self.meta(job))
        template = {"spec": {"containers": [{"name": POD_SET_NAME,
                                             "resources": {"requests": request, "limits": request}}],
                             **self._entry_priority_class(job)}}
        return [Role(POD_SET_NAME, 1, template)]

    def pod_set_infos(self, sets: list[PodSet], meta: Meta) -> tuple[PodSetInfo, ...]:
        """Never admitted into a flavor: its pods cannot be pinned to its nodes (UNPINNABLE)."""
        return tuple(replace(info, unpinnable=UNPINNABLE) for info in super().pod_set_infos(sets, meta))

    def annotated_priority(self, job: Job, meta: Meta | None = None) -> int | None:
        """The annotation scheduling.x-k8s.io/priority, else the Workflow's ``spec.priority``."""
        annotated = super().annotated_priority(job, meta)
        if annotated is not None:
            return annotated
        where = (meta or self.meta(job)).describe()
        value = section(job, "spec", where).get("priority")
        return None if value is None else read_int(value, f"{where}: spec.priority")

    def status(self, job: Job) -> JobState:
        """A suspended Workflow waits whatever its phase (Argo keeps it Running), as in Koord-Queue."""
        phase = section(job, "status", self.meta(job).describe()).get("phase")
        if phase == ARGO_PHASE_SUCCEEDED:
            return JobState.SUCCEEDED
        if phase in (ARGO_PHASE_FAILED, ARGO_PHASE_ERROR):
            return JobState.FAILED
        if phase == ARGO_PHASE_RUNNING and not self.native_suspended(job):
            return JobState.RUNNING
        return JobState.PENDING

    def _entry_priority_class(self, job: Job) -> dict[str, str]:
        """The entrypoint template's priorityClassName (else the Workflow's podPriorityClassName)."""
        spec = section(job, "spec", self.meta(job).describe())
        templates = spec.get("templates")
        entry = spec.get("entrypoint")
        for tmpl in templates if isinstance(templates, list) else ():
            if isinstance(tmpl, Mapping) and tmpl.get("name") == entry and tmpl.get("priorityClassName"):
                return {"priorityClassName": str(tmpl["priorityClassName"])}
        name = spec.get("podPriorityClassName")
        return {"priorityClassName": str(name)} if name else {}


def workflow_crd() -> Manifest:
    """Argo's Workflow CRD, printing as Argo's does (its schema left open)."""
    from koordqueue.api.crds import OPERATOR_SCHEMA, age, column, crd  # pydantic: only when CRDs are wanted

    columns = [column("Status", ".status.phase"), age()]
    group, _, version = ARGO_API_VERSION.rpartition("/")
    return crd(group, version, ARGO_WORKFLOW_KIND, ARGO_PLURAL, OPERATOR_SCHEMA, columns, short_names=("wf",))


KIND = JobKind(WorkflowAdapter(), ARGO_PLURAL, "argo", crd=workflow_crd)
