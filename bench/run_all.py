"""`make bench`: the benchmarks that take minutes, one after another, each printing its
figures as it runs, then a summary (each one's exit status and wall time).

Each runs as the command bench/RESULTS.md shows, in a process of its own. The others are
in LEFT_OUT with the reason; run them by hand (their docstrings give the commands).

    .venv/bin/python bench/run_all.py                    # all of BENCHMARKS (some 10 minutes on a quiet machine)
    .venv/bin/python bench/run_all.py kueue_sim placement # only these
    .venv/bin/python bench/run_all.py --list
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).parent


@dataclass(frozen=True)
class Bench:
    script: str
    args: tuple[str, ...]
    what: str

    @property
    def name(self) -> str:
        return self.script.removesuffix(".py")


BENCHMARKS = (
    Bench("engine_runtime_quota.py", (), "runtime-quota refresh, 10,020 quotas (engine only)"),
    Bench("engine_cycle.py", (), "cycles with 100,000 pending units over 1,000 quotas (engine only)"),
    Bench("engine_baseline.py", (), "Kueue's baseline shape through the engine"),
    Bench("kueue_sim.py", (), "Kueue's baseline shape through the simulator"),
    Bench("visibility_answer.py", (), "one visibility request over 100,000 pending units"),
    Bench("placement.py", ("--cycles", "30", "--rounds", "1"), "placement on and off, 1,000 nodes"),
    Bench("apiserver_throughput.py", (), "the embedded API server's writes/s (10 s)"),
    Bench("sim_speed.py", ("--rounds", "1"), "`koord-queue simulate` against a greedy loop, 4 trace files"),
    Bench("kueue_baseline.py", (), "Kueue's baseline shape through the whole system (about 1.5 minutes)"),
    Bench("gated_workloads.py", ("--n", "60", "--rounds", "2"),
          "Deployments queued by gate beside PyTorchJobs: requests per unit, CPU per pod"),
    Bench("fair_over_weeks.py", (), "four weeks, a bursty and a steady team: usage-history fair sharing off vs on"),
    Bench("forecast.py", ("speed", "--rounds", "1"), "one start-time forecast at 1,000 and 10,000 pending"),
)

# Every other script in bench/, and why `make bench` does not run it.
LEFT_OUT = {
    "chaos.py": "a fault-injection run with a checker (2,000 jobs, controller kills), not a figure",
    "chaos_soak.py": "chaos.py over many seeds, an hour by default",
    "scale.py": "100,000 preloaded jobs: several minutes before the first figure",
    "sim_scale.py": "a generated 1,000,000-job trace",
    "versus_kueue.py": "needs the real control plane and Kueue, built from Go (make e2e-tools)",
    "versus_kueue_scale.py": "needs the real control plane and Kueue, built from Go (make e2e-tools)",
    "greedy_sim.py": "the yardstick sim_speed.py runs, not a benchmark",
    "harness.py": "the processes the whole-system benchmarks start, not a benchmark",
    "run_all.py": "this file",
    "floor.py": "the floor runner versus_kueue.py starts (the plainest queue), not a benchmark",
    "forecast_accuracy.py": "the traces `forecast.py accuracy` plays (some 7 minutes), not run alone",
    "engine_flavors.py": "an A/B pair (--flavors 3 against --flavors 0) run alternating, as bench/RESULTS.md says",
    "hold_timeline.py": "reads the audit log a versus_kueue.py --trace run kept, not a benchmark",
    "first_admission.py": "an A/B of two builds' src (--a, --b) over a copied state, as bench/RESULTS.md says",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="run only these (names without .py)")
    parser.add_argument("--list", action="store_true", help="print what would run, and what is left out")
    args = parser.parse_args(argv)
    known = {b.name: b for b in BENCHMARKS}
    unknown = [n for n in args.only if n not in known]
    if unknown:
        parser.error(f"not among the benchmarks make bench runs: {', '.join(unknown)} (see --list)")
    chosen = [known[n] for n in args.only] if args.only else list(BENCHMARKS)
    if args.list:
        for b in chosen:
            print(f"run   {b.script} {' '.join(b.args)}".rstrip() + f"  # {b.what}")
        for script, why in LEFT_OUT.items():
            print(f"skip  {script}  # {why}")
        return 0
    results: list[tuple[Bench, int, float]] = []
    for b in chosen:
        command = [sys.executable, str(BENCH / b.script), *b.args]
        print(f"\n=== {' '.join((b.script, *b.args))}: {b.what}", flush=True)
        start = time.monotonic()
        # Unbuffered: its figures show as they come, in a terminal or a log file alike.
        code = subprocess.run(command, env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode
        results.append((b, code, time.monotonic() - start))
    print("\n=== summary")
    for b, code, seconds in results:
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"{b.name:24} {status:16} {seconds:7.1f} s  {' '.join(b.args)}")
    failed = [b.name for b, code, _ in results if code != 0]
    print(f"{len(results) - len(failed)} of {len(results)} ran to the end" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
