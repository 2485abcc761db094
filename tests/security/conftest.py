"""The adversarial tenant suite: a tenant with ordinary namespace rights tries to get past its
quota. The systems are the controller suite's (`system`, `start_system`, on both control planes).

What the suite adds:

- `tenant(system, namespace)`: a namespace and a tenant in it, who acts through kubectl as an
  impersonated user (`--as`, `--as-group`: the embedded API server and kube-apiserver both
  check that the admin may impersonate, then authorize the tenant by RBAC alone). The tenant
  is bound, by a RoleBinding in its namespace, to the ClusterRole `TENANT_ROLE`: Kubernetes'
  usual namespace edit rights on the job kinds we queue (create, patch, update, delete; not
  their status), read on pods and events, and read only on QueueUnits, ElasticQuotas and
  Queues. Anything it does is what a data scientist may do in its team's namespace.
- `GpuSampler`: samples, every `every` seconds while an attack runs, the GPUs asked by the
  bound pods of each watched quota's namespaces (its own and those its namespaces
  annotation lists), and the GPUs its status.used says are charged; `assert_within_max()`
  says when any sample was past the quota's max. A pod counts from the moment it is bound
  to a node (spec.nodeName) until it has ended or is gone: a pod being deleted still holds
  its devices. On the real control plane it also reads kube-apiserver's audit log: every
  pod bound (pods/binding created) in a quota's namespaces while it sampled, from its
  binding until its last delete, summed at each instant, is held to the max too (a pod
  that lived between two samples is seen there).
- `validating_webhook_off(system)`: the validating webhook unregistered, as when it is off or
  fails open (`failurePolicy: Ignore` and no replica up). With it registered (the systems
  register both webhooks on both planes), a tenant's UPDATE that unsuspends a queued job or
  grows a running one is refused, and bound pods are held to the max from the first sample.
  Without it the controller is the fallback: the tenant's write reaches the job's operator
  as it reaches the controller, and the operator makes pods before the controller's
  suspension lands (as beside Kueue with its webhook down). `assert_within_max(bound_after=t)`
  holds bound pods to the max only from `t` (seconds since sampling began; `now()`): only the
  fallback tests pass it, and say so. What is charged is held to the max over the whole run,
  always.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from koordqueue.api import constants as c
from koordqueue.api.objects import parse_elastic_quota
from koordqueue.api.quantity import parse_resource_list
from koordqueue.controller.resources import PODS, QUOTAS
from koordqueue.controller.webhook import VALIDATING_WEBHOOKS
from koordqueue.jobs import KINDS
from koordqueue.jobs.podrequest import pod_request
from koordqueue.kube.errors import NotFound
from koordqueue.realcluster.cluster import RealCluster
from koordqueue.up import WEBHOOK_CONFIG
from tests.controller.conftest import System, start_system, system

from . import audit

__all__ = ["TENANT_GROUP", "TENANT_ROLE", "GpuSampler", "Tenant", "refused", "sampling", "start_system", "system",
           "tenant", "tenant_role", "validating_webhook_off"]

TENANT_ROLE = "koord-queue-test-tenant"  # the ClusterRole every tenant is bound to in its namespace
TENANT_GROUP = "tenants"  # the group every tenant acts in (besides system:authenticated)
EDIT = ["create", "update", "patch", "delete", "deletecollection"]
READ = ["get", "list", "watch"]


def tenant_role() -> dict[str, Any]:
    """The rights a tenant has in its namespace (bound there by a RoleBinding): edit on the job
    kinds we queue (not their status: that is their operators'), read on pods, their logs and
    events, and read only on our objects."""
    groups = sorted({kind.group for kind in KINDS})
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": TENANT_ROLE},
            "rules": [
                {"apiGroups": groups, "resources": sorted({kind.plural for kind in KINDS}), "verbs": READ + EDIT},
                {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": READ},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": READ},
                {"apiGroups": [c.QUEUE_GROUP], "resources": [c.QUEUE_UNIT_PLURAL, c.QUEUE_PLURAL], "verbs": READ},
                {"apiGroups": [c.QUOTA_GROUP], "resources": [c.ELASTIC_QUOTA_PLURAL], "verbs": READ},
            ]}


@dataclass
class Tenant:
    """A user with `TENANT_ROLE` in `namespace`: its kubectl is the admin's, impersonating it."""

    system: System
    namespace: str
    user: str

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, namespace: str | None = None) -> str:
        """kubectl as the tenant, in its namespace (or `namespace`)."""
        return self.system.kubectl(f"--as={self.user}", f"--as-group={TENANT_GROUP}", "-n",
                                   namespace or self.namespace, *args, stdin=stdin, check=check)

    async def akubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                       namespace: str | None = None) -> str:
        return await asyncio.to_thread(self.kubectl, *args, stdin=stdin, check=check, namespace=namespace)

    async def apply(self, *objs: dict[str, Any]) -> str:
        return await self.akubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(list(objs)))

    async def patch(self, kind: str, name: str, patch: dict[str, Any]) -> str:
        """`kubectl patch <kind> <name> --type=merge -p <patch>`, as the tenant."""
        return await self.akubectl("patch", kind, name, "--type=merge", "-p", json.dumps(patch))

    async def try_patch(self, kind: str, name: str, patch: dict[str, Any]) -> str:
        """`patch`, its refusal returned rather than raised (see ``refused``)."""
        return await self.akubectl("patch", kind, name, "--type=merge", "-p", json.dumps(patch), check=False)

    async def may(self, verb: str, what: str, *flags: str, namespace: str | None = None) -> bool:
        """`kubectl auth can-i verb what [flags]` as the tenant, in its namespace (or `namespace`)."""
        answer = await self.akubectl("auth", "can-i", verb, what, *flags, check=False, namespace=namespace)
        return answer.strip().startswith("yes")


async def tenant(system: System, namespace: str, user: str | None = None) -> Tenant:
    """The namespace (made by the admin) and a tenant bound to `TENANT_ROLE` there."""
    user = user or f"{namespace}-user"
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": f"{TENANT_ROLE}-{user}", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TENANT_ROLE},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
    await system.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, tenant_role())
    await system.apply(binding)
    made = Tenant(system, namespace, user)

    async def bound() -> bool:  # (RBAC caches on kube-apiserver take the binding a moment later)
        return await made.may("patch", "pytorchjobs.kubeflow.org")

    await system.wait_for(bound, 10, f"{user}'s RoleBinding in {namespace} to take effect")
    return made


def refused(said: str) -> bool:
    """Whether kubectl's output says a webhook refused the request."""
    return "denied the request" in said


async def validating_webhook_off(system: System) -> None:
    """The validating webhook unregistered (the mutating one stays: new jobs are still made
    suspended). The next system started registers it again."""
    with contextlib.suppress(NotFound):
        await system.client.delete(VALIDATING_WEBHOOKS, WEBHOOK_CONFIG)


async def patch_through(system: System, team: Tenant, kind: str, name: str, patch: dict[str, Any]) -> None:
    """The tenant's patch, retried until it passes: kube-apiserver drops an unregistered
    webhook when its watch brings the deletion (validating_webhook_off)."""
    async def passed() -> bool:
        said = await team.try_patch(kind, name, patch)
        assert refused(said) or "patched" in said, said
        return not refused(said)

    await system.wait_for(passed, 15, f"{team.user}'s patch of {name} let through, the webhook gone")


def pod_gpus(pod: dict[str, Any]) -> int:
    """The GPUs (whole) a pod asks for, as kube-scheduler counts them."""
    return pod_request(pod, f"pod {pod.get('metadata', {}).get('name')}").get(c.GPU, 0) // 1000


def holds_devices(pod: dict[str, Any]) -> bool:
    """Bound to a node and not ended: it holds what it asks for there (while deleted too)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in (c.POD_SUCCEEDED, c.POD_FAILED)


@dataclass
class Sample:
    at: float  # seconds since the sampler started
    gpus: dict[str, int]  # quota -> GPUs asked by its namespaces' bound pods
    charged: dict[str, int]  # quota -> GPUs its status.used says


@dataclass
class GpuSampler:
    """Every `every` seconds, the GPUs asked by the bound pods of each quota in `quotas`
    ((namespace, name) of leaf ElasticQuotas, read as they are when sampling starts) and
    charged to it. `async with GpuSampler(system, [("t2", "q-t2")]) as sampler: ...attack...`,
    then `sampler.assert_within_max()`."""

    system: System
    quotas: list[tuple[str, str]]
    every: float = 1.0
    samples: list[Sample] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)  # quota -> its max in GPUs
    spaces: dict[str, frozenset[str]] = field(default_factory=dict)  # quota -> the namespaces it binds
    _task: asyncio.Task[None] | None = None
    _start: float = 0.0
    _epoch: tuple[float, float] = (0.0, 0.0)  # wall clock at its start and its end
    _log_from: int = 0  # where the audit log ended at its start
    _listed: float = 0.0  # wall clock when its first sample had listed the pods
    _pods_at_start: dict[audit.Name, tuple[int, bool]] = field(default_factory=dict)  # GPUs, holds devices

    async def __aenter__(self) -> GpuSampler:
        self._start = asyncio.get_running_loop().time()
        if self.audit_log is not None:
            self._log_from = audit.log_size(self.audit_log)
        self._epoch = (time.time(), 0.0)
        for namespace, name in self.quotas:
            parsed = parse_elastic_quota(await self.system.client.get(QUOTAS, name, namespace=namespace)).quota
            self.limits[name] = parsed.max.get(c.GPU, 0) // 1000
            self.spaces[name] = parsed.namespaces | {parsed.namespace}
        await self.sample(first=True)
        self._listed = time.time()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.sample()
        self._epoch = (self._epoch[0], time.time())

    @property
    def audit_log(self) -> Path | None:
        """kube-apiserver's audit log, on the real control plane when it keeps pods' creates."""
        server = self.system.server
        return server.audit_log if isinstance(server, RealCluster) and server.audit_pods else None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self.sample()

    def now(self) -> float:
        """Seconds since sampling began (for `bound_after`)."""
        return asyncio.get_running_loop().time() - self._start

    async def sample(self, first: bool = False) -> Sample:
        """One sample now (also taken at the start and at the end; the first one keeps every
        pod it lists, for the audit log's sums)."""
        at = self.now()
        gpus: dict[str, int] = {}
        charged: dict[str, int] = {}
        for (namespace, name), spaces in zip(self.quotas, self.spaces.values(), strict=True):
            total = 0
            for space in spaces:
                pods = (await self.system.client.list(PODS, namespace=space)).items
                total += sum(pod_gpus(pod) for pod in pods if holds_devices(pod))
                if first:
                    self._pods_at_start.update({(space, pod["metadata"]["name"]): (pod_gpus(pod), holds_devices(pod))
                                                for pod in pods})
            gpus[name] = total
            quota = await self.system.client.get(QUOTAS, name, namespace=namespace)
            used = ((quota.get("status") or {}).get("used") or {}).get(c.GPU, "0")
            charged[name] = parse_resource_list({c.GPU: used})[c.GPU] // 1000
        taken = Sample(at, gpus, charged)
        self.samples.append(taken)
        return taken

    def over_max(self, bound_after: float = 0.0) -> list[str]:
        """Every sample past a quota's max: bound pods (from `bound_after` on), or charged; and
        on the real control plane every binding in the audit log after which the quota's
        bound pods asked more than its max (from `bound_after` on too)."""
        sampled = [f"{what} {name} {n} GPUs at {s.at:.1f} s" for s in self.samples
                   for what, amounts in (("bound", s.gpus if s.at >= bound_after else {}), ("charged", s.charged))
                   for name, n in amounts.items() if n > self.limits[name]]
        return sampled + [f"bound {name} {n} GPUs at {at:.1f} s (audit log)"
                          for name, held in self.audit_peaks().items() for at, n in held
                          if at >= bound_after and n > self.limits[name]]

    def audit_peaks(self) -> dict[str, list[tuple[float, int]]]:
        """Per quota, (seconds since sampling began, GPUs its bound pods asked) at each binding
        in its namespaces the audit log has from the start to the end of sampling ({}: not on
        the real control plane)."""
        if self.audit_log is None:
            return {}
        start, end = self._epoch
        entries = [e for e in audit.read_entries(self.audit_log, self._log_from) if audit.when(e) <= (end or time.time())]
        out = {}
        for name, spaces in self.spaces.items():
            pods = audit.histories(entries, spaces)
            known = {pod: gpus for pod, (gpus, _) in self._pods_at_start.items() if pod[0] in spaces}
            alive = {pod: gpus for pod, (gpus, holds) in self._pods_at_start.items() if holds and pod[0] in spaces}
            spans = audit.intervals(pods, known, alive, start, self._listed)
            out[name] = [(at - start, held) for at, held in audit.peaks(spans)]
        return out

    def audit_peak(self, quota: str) -> int | None:
        """The most GPUs the quota's bound pods asked at once, as the audit log has it (None: no log)."""
        peaks = self.audit_peaks()
        return max((n for _, n in peaks.get(quota, [])), default=0) if peaks else None

    def peak(self, quota: str) -> int:
        return max((s.gpus.get(quota, 0) for s in self.samples), default=0)

    def assert_within_max(self, bound_after: float = 0.0) -> None:
        """No sample (nor, on the real control plane, any instant of the audit log) past a
        quota's max; and the audit log saw at least what the samples saw (it is read at all)."""
        over = self.over_max(bound_after)
        assert not over, f"past their quota's max ({self.limits}): " + ", ".join(over)
        for name, held in self.audit_peaks().items():
            seen = max((n for _, n in held), default=0)
            assert seen >= self.peak(name), f"the audit log saw {seen} GPUs bound in {name}, samples {self.peak(name)}"


@contextlib.asynccontextmanager
async def sampling(system: System, *quotas: tuple[str, str], every: float = 1.0) -> AsyncIterator[GpuSampler]:
    """`GpuSampler` as a context: asserts, on leaving, that no sample was past a quota's max."""
    async with GpuSampler(system, list(quotas), every) as sampler:
        yield sampler
    sampler.assert_within_max()
