"""SparkApplication (sparkoperator.k8s.io/v1beta2): a driver and ``executor.instances``
executors, described by cores and JVM memory rather than pod templates; queued as
``<name>-spark-qu``, as Koord-Queue's sparkapp extension names its units.

Suspended by the annotation ``scheduling.x-k8s.io/suspend`` (Koord-Queue's only hold, which
the Spark operator does not read) and ``spec.suspend``, which the Spark operator honours since
kubeflow/spark-operator#2387 (an older one prunes it: then nothing holds the application back
on a real cluster, as with Koord-Queue's annotation). Each role's pod is
made here from its fields as the operator makes it: cpu from ``coreRequest``, else
``cores``, else ``coreLimit``; memory ``memory`` plus ``memoryOverhead`` (JVM sizes: ``512m``
is 512Mi, a bare number MiB); ``gpu`` {name, quantity}. In ``client`` mode the driver runs
outside the cluster and is not counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from koordqueue.api.constants import (
    ANNOTATION_API_APPROVED,
    LABEL_SPARK_APP_NAME,
    LABEL_SPARK_ROLE,
    SPARK_API_APPROVAL,
    SPARK_API_VERSION,
    SPARK_APPLICATION_KIND,
    SPARK_MODE_CLIENT,
    SPARK_PLURAL,
    SPARK_ROLE_DRIVER,
    SPARK_ROLE_EXECUTOR,
    SPARK_STATE_COMPLETED,
    SPARK_STATE_FAILED,
    SPARK_STATE_FAILING,
    SPARK_STATE_RUNNING,
    SPARK_STATE_SUBMISSION_FAILED,
    SPARK_STATE_SUCCEEDING,
    UNIT_SUFFIX_SPARK,
)
from koordqueue.api.meta import InvalidObject, section
from koordqueue.api.quantity import QuantityError, parse_quantity
from koordqueue.jobs.base import (
    Job,
    JobState,
    PodLabels,
    Role,
    SpecSuspendAdapter,
    replicas,
)
from koordqueue.jobs.kind import JobKind, Manifest
from koordqueue.jobs.placement import template_patch

_JVM_SIZE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_JVM_UNITS = {"": "Mi", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti", "p": "Pi"}


def jvm_memory(value: object, where: str) -> str:
    """A Spark memory size (``512m``, ``2g``, ``4096``: MiB) as a Kubernetes quantity; a
    Kubernetes quantity (``2Gi``) is taken as it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value}Mi"
    if not isinstance(value, str) or not value.strip():
        raise InvalidObject(f"{where} must be a size such as 512m or 2g, got {value!r}")
    match = _JVM_SIZE.match(value)
    if match is None:
        return value.strip()  # a Kubernetes quantity, checked where the pod's request is read
    return f"{match.group(1)}{_JVM_UNITS[match.group(2).lower()]}"


class SparkApplicationAdapter(SpecSuspendAdapter):
    api_version = SPARK_API_VERSION
    kind = SPARK_APPLICATION_KIND
    unit_suffix = UNIT_SUFFIX_SPARK
    leader_roles = (SPARK_ROLE_DRIVER,)
    pod_labels = (PodLabels(LABEL_SPARK_APP_NAME, LABEL_SPARK_ROLE),)

    def roles(self, job: Job) -> list[Role]:
        where = self.meta(job).describe()
        spec = section(job, "spec", where, required=True)
        roles = []
        if spec.get("mode") != SPARK_MODE_CLIENT:
            driver = section(spec, "driver", f"{where}: spec", required=True)
            roles.append(Role(SPARK_ROLE_DRIVER, 1, _pod_template(spec, driver, f"{where}: spec.driver")))
        executor = section(spec, "executor", f"{where}: spec", required=True)
        at = f"{where}: spec.executor"
        count = executor.get("instances")
        if count is None:  # dynamic allocation: what it starts with
            count = section(spec, "dynamicAllocation", f"{where}: spec").get("initialExecutors")
        roles.append(Role(SPARK_ROLE_EXECUTOR, replicas(count, f"{at}.instances"), _pod_template(spec, executor, at)))
        return roles

    def role_patch(self, changes: Mapping[str, Mapping[str, Any]], job: Job | None = None) -> dict[str, Any] | None:
        """Each role's pod fields where the operator reads them (spec.driver, spec.executor):
        nodeSelector (over spec.nodeSelector's, key by key), tolerations, labels and annotations.
        The operator passes nodeSelector, labels and annotations to Spark's configuration;
        tolerations it sets only through its mutating webhook (docs/gpus.md)."""
        return {"spec": {role: _spark_role_fields(fields) for role, fields in changes.items()}}

    def status(self, job: Job) -> JobState:
        status = section(job, "status", self.meta(job).describe())
        state = section(status, "applicationState", "status").get("state")
        if state == SPARK_STATE_COMPLETED:
            return JobState.SUCCEEDED
        if state in (SPARK_STATE_FAILED, SPARK_STATE_SUBMISSION_FAILED):
            return JobState.FAILED
        if state in (SPARK_STATE_RUNNING, SPARK_STATE_SUCCEEDING, SPARK_STATE_FAILING):
            return JobState.RUNNING
        return JobState.PENDING  # new, SUBMITTED, SUSPENDING, SUSPENDED, RESUMING, PENDING_RERUN, ...


def _spark_role_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A SparkPodSpec's part of a merge patch: a pod template's patch, flattened as the
    SparkPodSpec has those fields (executor instances are never changed: not elastic here)."""
    template = template_patch(fields)
    return {**template.get("spec", {}), **template.get("metadata", {})}


def _pod_template(spec: Mapping[str, Any], role: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The pod the operator makes for a driver or executor spec (SparkPodSpec)."""
    cpu = next((role[key] for key in ("coreRequest", "cores", "coreLimit") if role.get(key) is not None), None)
    requests: dict[str, Any] = {}
    if cpu is not None:
        requests["cpu"] = str(cpu)
    if role.get("memory") is not None:
        memory = jvm_memory(role["memory"], f"{where}.memory")
        overhead = role.get("memoryOverhead")
        requests["memory"] = memory if overhead is None else _sum_memory(
            memory, jvm_memory(overhead, f"{where}.memoryOverhead"), where)
    limits: dict[str, Any] = {}
    gpu = section(role, "gpu", where)
    if gpu:
        name, quantity = gpu.get("name"), gpu.get("quantity")
        if not isinstance(name, str) or not name:
            raise InvalidObject(f"{where}.gpu: name is missing or not a string")
        limits[name] = quantity
    container: dict[str, Any] = {"name": "spark", "resources": {"requests": requests, "limits": limits}}
    image = role.get("image") or spec.get("image")
    if image:
        container["image"] = image
    pod_spec: dict[str, Any] = {"containers": [container]}
    node_selector = {**(spec.get("nodeSelector") or {}), **(role.get("nodeSelector") or {})}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    for key in ("affinity", "tolerations", "schedulerName"):
        if role.get(key) is not None:
            pod_spec[key] = role[key]
    priority_class = section(spec, "batchSchedulerOptions", "spec").get("priorityClassName")
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    metadata = {"labels": dict(role.get("labels") or {}), "annotations": dict(role.get("annotations") or {})}
    return {"metadata": metadata, "spec": pod_spec}


def _sum_memory(memory: str, overhead: str, where: str) -> str:
    """memory + memoryOverhead, in bytes (a quantity the pod's request is read from)."""
    try:
        total = parse_quantity(memory) + parse_quantity(overhead)
    except QuantityError as e:
        raise InvalidObject(f"{where}: memory: {e}") from None
    return f"{-(-total // 1000)}"


def spark_application_crd() -> Manifest:
    """The Spark operator's SparkApplication CRD, printing as the operator's does (schema left open)."""
    from koordqueue.api.crds import OPERATOR_SCHEMA, age, column, crd  # pydantic: only when CRDs are wanted

    columns = [column("Status", ".status.applicationState.state"),
               column("Attempts", ".status.submissionAttempts", "integer"),
               column("Start", ".status.lastSubmissionAttemptTime"),
               column("Finish", ".status.terminationTime"), age()]
    group, _, version = SPARK_API_VERSION.rpartition("/")
    manifest = crd(group, version, SPARK_APPLICATION_KIND, SPARK_PLURAL, OPERATOR_SCHEMA, columns,
                   short_names=("sparkapp",))
    manifest["metadata"]["annotations"] = {ANNOTATION_API_APPROVED: SPARK_API_APPROVAL}
    return manifest


KIND = JobKind(SparkApplicationAdapter(), SPARK_PLURAL, "spark", crd=spark_application_crd)
