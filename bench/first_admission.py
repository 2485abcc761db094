"""First admission after a first start, on the embedded API server, A/B alternating (issue 36 item 4).

versus_kueue_scale.py's shape (`--quotas` leaves in cohorts of 10 under parent ElasticQuotas,
nominal 1 CPU, `--jobs` suspended batch Jobs round robin over the leaves, one namespace per
leaf) is made ONCE through HTTP on the embedded API server (`python -m koordqueue.apiserver`),
and its state directory copied afresh for every run: each run is a first start (no QueueUnit,
no Queue) on the same objects, cheap enough to alternate builds. A build is a `src` directory
(`--a DIR --b DIR`, e.g. `git archive` of two commits): the controller runs with
PYTHONPATH=DIR. Measured: from the controller's process start until the first Job is seen
unsuspended through a watch (no kube-controller-manager here: no pods are made), and the
controller's CPU seconds by then (less bent by a loaded machine than the wall time).

    .venv/bin/python bench/first_admission.py --a /tmp/base/src --b src --pairs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import versus_kueue as vk  # noqa: E402
import versus_kueue_scale as vks  # noqa: E402

from koordqueue import aio  # noqa: E402
from koordqueue.kube.client import KubeClient  # noqa: E402
from koordqueue.kube.config import load_config  # noqa: E402

JOBS = vk.JOBS


async def make_state(state: Path, quotas: int, jobs: int) -> None:
    server = harness.ServerProcess(state)
    server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig)), qps=5000, burst=10000, timeout=120) as client:
            system = vk.Ours(state.parent / "ours", vks.shape_of(quotas))
            await vks.create_all(client, ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                                          for ns in system.shape.namespaces()), parallel=32)
            await vks.create_all(client, vks.quota_objects(system), parallel=32)
            started = time.monotonic()
            made = await vks.create_all(client, vks.job_objects(system, jobs), parallel=32)
            print(f"state: {made} jobs in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    finally:
        server.stop()


async def one_run(state: Path, here: Path, src: str, timeout: float,
                  profile: Path | None = None) -> tuple[float, float]:
    """(seconds from the controller's start to the first admission, its CPU seconds by then)."""
    shutil.copytree(state, here / "state")
    server = harness.ServerProcess(here / "state")
    server.start()
    try:
        async with KubeClient(load_config(str(server.kubeconfig)), qps=5000, burst=10000, timeout=120) as client:
            released = asyncio.Event()

            def on_job(_kind: str, obj: dict[str, Any]) -> None:
                if not (obj.get("spec") or {}).get("suspend"):
                    released.set()

            watcher = asyncio.create_task(vks.follow(client, JOBS, on_job))
            await asyncio.sleep(0.5)
            process = harness.Process(
                [sys.executable, "-m", "koordqueue.cli", "controller", "--kubeconfig", str(server.kubeconfig),
                 "--no-leader-elect", "--metrics-port", str(harness.free_port()), "--job-kinds", "Job",
                 "--log-level", "warning", "--qps", "5000", "--burst", "10000"], here / "controller.log",
                env={**os.environ, "PYTHONPATH": src})
            process.start()
            t0 = time.monotonic()
            spy = harness.Profiler(process, profile, rate=100, idle=True) if profile is not None else None
            try:
                await asyncio.wait_for(released.wait(), timeout)
                took = time.monotonic() - t0
                return took, harness.cpu_seconds(process.pid)
            except TimeoutError:
                raise SystemExit(f"no admission after {timeout} s:\n{process.tail()}") from None
            finally:
                if spy is not None:
                    spy.stop()
                process.stop()
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
    finally:
        server.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="first-admission-") as tmp:
        base = Path(tmp)
        made = Path(args.state) if args.state else base / "made"
        if not (made / "state").exists():
            await make_state(made / "state", args.quotas, args.jobs)
        times: dict[str, list[float]] = {"a": [], "b": []}
        cpu: dict[str, list[float]] = {"a": [], "b": []}
        for i in range(args.pairs):
            for name in ("a", "b") if i % 2 == 0 else ("b", "a"):
                here = base / f"{i}-{name}"
                here.mkdir()
                profile = Path(args.profile) / f"{i}-{name}.collapsed" if args.profile else None
                took, used = await one_run(made / "state", here, getattr(args, name), args.timeout, profile)
                times[name].append(took)
                cpu[name].append(used)
                print(f"pair {i} {name}: first admission {took:.2f} s, controller CPU {used:.2f} s, "
                      f"load {harness.load_average()}",
                      file=sys.stderr, flush=True)
                shutil.rmtree(here, ignore_errors=True)
    out: dict[str, Any] = {"quotas": args.quotas, "jobs": args.jobs, "a": args.a, "b": args.b, "times": times,
                           "cpu": cpu}
    for name in ("a", "b"):
        out[f"{name}_median"] = statistics.median(times[name])
        out[f"{name}_cpu_median"] = statistics.median(cpu[name])
    out["ratios_per_pair"] = [b / a for a, b in zip(times["a"], times["b"], strict=True)]
    out["cpu_ratios_per_pair"] = [b / a for a, b in zip(cpu["a"], cpu["b"], strict=True)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="build A: a src directory (PYTHONPATH)")
    parser.add_argument("--b", required=True, help="build B: a src directory (PYTHONPATH)")
    parser.add_argument("--quotas", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--state", help="keep the objects made in DIR, and reuse them when there")
    parser.add_argument("--profile", help="py-spy (idle samples too) each start until its first admission into DIR")
    args = parser.parse_args()
    args.a, args.b = str(Path(args.a).resolve()), str(Path(args.b).resolve())
    print(json.dumps(aio.run(run(args)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
