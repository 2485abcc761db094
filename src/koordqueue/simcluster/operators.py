"""The simulated job operators, run on one work queue: each job is reconciled level-triggered
from the informers' caches, as the real controllers do, by the operator of its kind.

While a job is suspended (`scheduling.x-k8s.io/suspend: "true"`, or the kind's own field) it
has no pods, and a running job suspended again loses them; otherwise its pods are created, and
its status is computed from its pods and written only when it changed. Pods are owned by their
job (controller reference, so the garbage collector removes them with it) and carry the job's
simulation annotations (`koord-queue.sim/duration`, `koord-queue.sim/fail`).

One file per operator: kubeflow.py (PyTorchJob, TFJob, MPIJob), ray.py (RayJob),
applications.py (SparkApplication, Workflow, RayCluster, v1alpha1 MPIJob), batch.py (Job);
what they share is in jobloop.py.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any

from koordqueue.jobs import KINDS
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.events import EventRecorder
from koordqueue.kube.informer import Informer, key_of
from koordqueue.kube.workqueue import WorkQueue
from koordqueue.simcluster.applications import ApplicationOperator
from koordqueue.simcluster.background import Background, serve, stop_serving
from koordqueue.simcluster.batch import BatchJobController
from koordqueue.simcluster.jobloop import Item, JobOperator, Object, Shared, SimKind, controller_of
from koordqueue.simcluster.kubeflow import KubeflowOperator
from koordqueue.simcluster.ray import RayJobOperator


def job_kinds() -> list[SimKind]:
    """The kinds the simulated operators run: those registered as simulated (jobs/__init__.py):
    the training operator's, KubeRay's, Spark's, Argo's and batch Job."""
    return [SimKind(k.kind, Resource.of(k.api_version, k.plural), k.adapter) for k in KINDS if k.simulated]


class SimOperator:
    def __init__(
        self,
        client: KubeClient,
        pods: Informer[Object],
        jobs: dict[str, tuple[SimKind, Informer[Object]]],
        background: Background,
        record_events: bool = True,
        workers: int = 8,
        services: Informer[Object] | None = None,
    ) -> None:
        """`jobs`: kind -> (kind, informer of its jobs), for the kinds whose API is served;
        `services`: an informer of Services (None: the training operator makes none)."""
        self.client = client
        self.pods = pods
        self.jobs = jobs
        self.background = background
        self.workers = workers
        self.queue: WorkQueue[Item] = WorkQueue()
        self._pods_of: dict[Item, set[str]] = {}  # job -> keys of the pods it controls
        self._job_of_pod: dict[str, Item] = {}
        self._expected: dict[Item, tuple[int, float]] = {}  # job -> (pods created, not yet seen; since)
        shared = Shared(client, background, {}, self._expected)
        # In this order: the first that runs a job runs it (a v1alpha1 MPIJob is an application's).
        self.operators: list[JobOperator] = [ApplicationOperator(shared),
                                             KubeflowOperator(shared, services, self._job_item),
                                             RayJobOperator(shared), BatchJobController(shared)]
        self._operator_of = {kind: self._first_handling(job_kind) for kind, (job_kind, _) in jobs.items()}
        # Events come from each kind's controller, as on a cluster: pytorchjob-controller, job-controller...
        if record_events:
            shared.recorders.update({kind: EventRecorder(client, self._operator_of[kind].event_source(job_kind))
                                     for kind, (job_kind, _) in jobs.items()})
        self.recorders = shared.recorders
        self._tasks: list[asyncio.Task[None]] = []
        pods.on_add(self._on_pod_added)
        pods.on_update(lambda _old, new: self._on_pod(new))
        pods.on_delete(self._on_pod_gone)
        for kind, (_, informer) in jobs.items():
            informer.on_add(functools.partial(self._on_job, kind))
            informer.on_update(functools.partial(self._on_job_update, kind))
            informer.on_delete(functools.partial(self._on_job_gone, kind))

    def _first_handling(self, kind: SimKind) -> JobOperator:
        return next(operator for operator in self.operators if operator.handles(kind))

    def operator_for(self, kind: str) -> JobOperator:
        """The operator of a kind (whose name its jobs' events carry)."""
        return self._operator_of[kind]

    def start(self) -> None:
        self._tasks = serve(self.queue, self.sync, "simulated operator", "simoperator", self.workers)

    async def stop(self) -> None:
        await stop_serving(self.queue, self._tasks)
        self._tasks = []

    # --- informer handlers ------------------------------------------------------------

    def _job_item(self, pod: Mapping[str, Any]) -> Item | None:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") not in self.jobs:
            return None
        kind = self.jobs[str(ref["kind"])][0]
        if ref.get("apiVersion") != kind.resource.api_version:
            return None
        return kind.kind, f"{(pod.get('metadata') or {}).get('namespace', '')}/{ref.get('name', '')}"

    def _on_pod_added(self, pod: Object) -> None:
        item = self._job_item(pod)
        if item is not None and item in self._expected:
            count, since = self._expected[item]
            if count <= 1:
                del self._expected[item]
            else:
                self._expected[item] = (count - 1, since)
        self._on_pod(pod)

    def _on_pod(self, pod: Object) -> None:
        item = self._job_item(pod)
        if item is None:
            return
        key = key_of(pod)
        self._job_of_pod[key] = item
        self._pods_of.setdefault(item, set()).add(key)
        self.queue.add(item)

    def _on_pod_gone(self, pod: Object) -> None:
        key = key_of(pod)
        item = self._job_of_pod.pop(key, None)
        if item is None:
            return
        keys = self._pods_of.get(item)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._pods_of[item]
        self.queue.add(item)

    def _on_job(self, kind: str, job: Object) -> None:
        self.queue.add((kind, key_of(job)))

    def _on_job_update(self, kind: str, _old: Object, new: Object) -> None:
        self.queue.add((kind, key_of(new)))

    def _on_job_gone(self, kind: str, job: Object) -> None:
        item = (kind, key_of(job))
        self._expected.pop(item, None)  # its pods (and Services) go with it (garbage collector)
        for operator in self.operators:
            operator.forget(item)

    # --- reconcile --------------------------------------------------------------------

    async def sync(self, item: Item) -> None:
        kind_name, key = item
        kind, informer = self.jobs[kind_name]
        job = informer.get(key)
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            return
        uid = job["metadata"].get("uid")
        pods = [pod for pod_key in sorted(self._pods_of.get(item, ()))
                if (pod := self.pods.get(pod_key)) is not None and (controller_of(pod) or {}).get("uid") == uid]
        operator = next((op for op in self.operators if op.runs(kind, job)), self._operator_of[kind_name])
        await operator.sync(item, kind, job, pods)

