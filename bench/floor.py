"""The floor: the plainest queue that could work, for bench/versus_kueue.py's third runner.

It resumes each suspended batch Job the moment its quota has room, by a plain counter per
quota (the Job's leaf and its parent, both annotated on the Job), first come first served
(a Job that does not fit lets later ones that do go first: greedy), and counts the Job's CPU
free when the Job completes or fails. No policies, no preemption, no status writes, no
objects of its own: a run with it costs little more than the control plane itself, so
ours / floor and Kueue / floor say how close each queue comes to what the machine allows.

    python bench/floor.py --kubeconfig KUBECONFIG [--leaf-cpu 120] [--parent-cpu 120]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import OrderedDict
from typing import Any, NamedTuple

from koordqueue import aio
from koordqueue.api.quantity import parse_quantity
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.kube.informer import Informer

JOBS = Resource("batch", "v1", "jobs")
QUOTA = "bench.koord-queue.io/floor-quota"  # the Job's leaf quota
PARENT = "bench.koord-queue.io/floor-parent"  # the leaf's parent
READY = "floor: ready"  # printed once the Jobs are listed (the bench waits for it)


class Job(NamedTuple):
    key: str
    name: str
    namespace: str
    quotas: tuple[str, ...]
    cpu: int  # millicores: the pod template's requests times parallelism
    suspended: bool
    finished: bool


def project(obj: dict[str, Any]) -> Job | None:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    notes = meta.get("annotations") or {}
    if QUOTA not in notes:
        return None
    try:
        containers = (((spec.get("template") or {}).get("spec") or {}).get("containers")) or []
        cpu = sum(parse_quantity(((c.get("resources") or {}).get("requests") or {}).get("cpu", "0"))
                  for c in containers) * int(spec.get("parallelism", 1))
    except (ValueError, TypeError, AttributeError):
        print(f"floor: {meta.get('namespace')}/{meta.get('name')}: unreadable CPU request, left alone", flush=True)
        return None
    conditions = (obj.get("status") or {}).get("conditions") or []
    finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions)
    quotas = (notes[QUOTA], *([notes[PARENT]] if notes.get(PARENT) else []))
    return Job(f"{meta['namespace']}/{meta['name']}", meta["name"], meta["namespace"], quotas, cpu,
               bool(spec.get("suspend")), finished)


class Floor:
    def __init__(self, client: KubeClient, leaf_cpu: int, parent_cpu: int) -> None:
        self.client = client
        self.limit = {0: leaf_cpu, 1: parent_cpu}  # by place in Job.quotas
        self.used: dict[str, int] = {}
        self.pending: OrderedDict[str, Job] = OrderedDict()  # first seen, first served
        self.running: dict[str, Job] = {}
        self.writes: set[asyncio.Task[Any]] = set()

    def seen(self, job: Job) -> None:
        if job.finished:
            self.pending.pop(job.key, None)
            if self.running.pop(job.key, None) is not None:
                for q in job.quotas:
                    self.used[q] -= job.cpu
                self.admit()
        elif not job.suspended and job.key not in self.running:  # running before we started
            self.pending.pop(job.key, None)
            self.take(job)
        elif job.suspended and job.key not in self.running and job.key not in self.pending:
            self.pending[job.key] = job
            self.admit()

    def fits(self, job: Job) -> bool:
        return all(self.used.get(q, 0) + job.cpu <= self.limit[i] for i, q in enumerate(job.quotas))

    def take(self, job: Job) -> None:
        self.running[job.key] = job
        for q in job.quotas:
            self.used[q] = self.used.get(q, 0) + job.cpu

    def admit(self) -> None:
        for key, job in list(self.pending.items()):
            if self.fits(job):
                del self.pending[key]
                self.take(job)
                task = asyncio.create_task(self.client.patch(JOBS, job.name, {"spec": {"suspend": False}},
                                                             namespace=job.namespace))
                self.writes.add(task)
                task.add_done_callback(self.written)

    def written(self, task: asyncio.Task[Any]) -> None:
        self.writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            print(f"floor: resume failed: {task.exception()}", flush=True)


async def main_async(args: argparse.Namespace) -> None:
    client = KubeClient(load_config(args.kubeconfig), qps=args.qps, burst=args.burst, user_agent="koord-queue-floor")
    async with client:
        floor = Floor(client, parse_quantity(args.leaf_cpu), parse_quantity(args.parent_cpu))
        jobs = Informer(client, JOBS, project=project)
        jobs.on_add(floor.seen)
        jobs.on_update(lambda _old, new: floor.seen(new))
        jobs.start()
        await jobs.wait_synced()
        print(READY, flush=True)
        await asyncio.Event().wait()  # until SIGTERM


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--qps", type=float, default=5000)
    parser.add_argument("--burst", type=int, default=10000)
    parser.add_argument("--leaf-cpu", default="120", help="what a leaf quota's Jobs may hold at once")
    parser.add_argument("--parent-cpu", default="120", help="what a parent's leaves may hold at once")
    args = parser.parse_args(argv)
    aio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
