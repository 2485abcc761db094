"""`koord-queue simulate` against a plain greedy loop (bench/greedy_sim.py), whole commands.

Kueue's baseline shape (bench/kueue_sim.py: 15,000 PyTorchJobs, 30 leaf quotas) is
written as trace files, YAML and JSON, in two layouts: jobs in the order of their
``at`` (as a generator writes them; the simulator streams these) and as kueue_sim
builds them, leaf after leaf (out of time order: the simulator reads those whole).
Each file is then run by both programs as a user runs them, a process each (start,
load, run, output to a file), alternating A and B so that both see the same load on a
shared machine. Per run: wall time, CPU time (user + system) and peak RSS.

    .venv/bin/python bench/sim_speed.py              # 3 rounds of A/B per file
    .venv/bin/python bench/sim_speed.py --rounds 5 --json
    .venv/bin/python bench/sim_speed.py --small      # 1/10 of the jobs (a smoke run)
    .venv/bin/python bench/sim_speed.py --keep DIR   # leave the trace files in DIR
    .venv/bin/python bench/sim_speed.py --baseline /work/main/.venv/bin/koord-queue
                                                     # another build of ours in the same rounds
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kueue_sim  # noqa: E402

BENCH = Path(__file__).resolve().parent
OURS = [str(Path(sys.executable).parent / "koord-queue"), "simulate", "--json"]
GREEDY = [sys.executable, str(BENCH / "greedy_sim.py")]
LAYOUTS = ("in time order", "leaf after leaf")


def write_traces(directory: Path, divisor: int) -> dict[tuple[str, str], Path]:
    """The baseline shape as four files: {yaml, json} x {in time order, leaf after leaf}."""
    built = kueue_sim.build_trace(divisor)
    paths = {}
    for layout in LAYOUTS:
        jobs = sorted(built.jobs, key=lambda job: job.at) if layout == LAYOUTS[0] else built.jobs
        document = {"objects": built.objects,
                    "jobs": [{"at": job.at, "runtime": job.runtime, "manifest": job.manifest} for job in jobs]}
        stem = "sorted" if layout == LAYOUTS[0] else "by-leaf"
        paths["yaml", layout] = directory / f"{stem}.yaml"
        paths["yaml", layout].write_text(yaml.dump(document, Dumper=yaml.CSafeDumper, sort_keys=False))
        paths["json", layout] = directory / f"{stem}.json"
        paths["json", layout].write_text(json.dumps(document))
    return paths


# A small process starts each run and reports its child's figures: a child forked straight
# from this one would count this process's memory in its peak RSS.
LAUNCHER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.run(sys.argv[1:], stderr=subprocess.DEVNULL).returncode
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": code, "wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
                  "rss_mib": usage.ru_maxrss / 1024}), file=sys.stderr)
"""


def run_once(command: list[str], trace: Path, out: Path) -> dict[str, float]:
    """One whole command: its wall and CPU time and peak RSS (its own, not this process's)."""
    with out.open("wb") as stdout:
        done = subprocess.run([sys.executable, "-c", LAUNCHER, *command, str(trace)], stdout=stdout,
                              stderr=subprocess.PIPE, text=True, check=True)
    figures: dict[str, float] = json.loads(done.stderr)
    if figures.pop("code") != 0:
        raise SystemExit(f"{command} {trace} failed")
    return figures


def admitted(out: Path) -> int:
    return sum(1 for job in json.loads(out.read_text())["jobs"] if job["admitted"] is not None)


def measure(paths: dict[tuple[str, str], Path], rounds: int, directory: Path,
            baseline: str | None = None) -> dict[str, Any]:
    commands = {"ours": OURS, "greedy": GREEDY}
    if baseline:
        commands["baseline"] = [baseline, *OURS[1:]]
    figures: dict[str, Any] = {}
    for (fmt, layout), trace in paths.items():
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
        outs = {name: directory / f"{name}.out" for name in runs}
        for index in range(rounds):
            order = list(commands) if index % 2 == 0 else list(reversed(commands))  # A B, then B A
            for name in order:
                runs[name].append(run_once(commands[name], trace, outs[name]))
        if baseline and outs["ours"].read_bytes() != outs["baseline"].read_bytes():
            raise SystemExit(f"{trace}: ours and the baseline printed different results")
        jobs = {name: admitted(out) for name, out in outs.items()}
        med = {name: {key: statistics.median(run[key] for run in rs) for key in ("wall", "cpu", "rss_mib")}
               for name, rs in runs.items()}
        figures[f"{fmt}, {layout}"] = {
            "trace_bytes": trace.stat().st_size,
            "runs": runs,
            "median": med,
            "ratio_ours_to_greedy": {key: med["ours"][key] / med["greedy"][key] for key in ("wall", "cpu")},
            "admitted": jobs,
        }
        if baseline:
            figures[f"{fmt}, {layout}"]["ratio_ours_to_baseline"] = {
                key: med["ours"][key] / med["baseline"][key] for key in ("wall", "cpu")}
    return figures


def render(figures: dict[str, Any], load: tuple[float, float]) -> str:
    lines = [f"load (1 min) before -> after: {load[0]:.2f} -> {load[1]:.2f}",
             f"{'trace':<28}{'program':<10}{'wall s, each run':<30}{'CPU s, each run':<30}{'peak RSS':>10}"]
    for name, f in figures.items():
        label = f"{name} ({f['trace_bytes'] / 1e6:.1f} MB)"
        for program in f["runs"]:
            walls = " ".join(f"{run['wall']:.2f}" for run in f["runs"][program])
            cpus = " ".join(f"{run['cpu']:.2f}" for run in f["runs"][program])
            lines.append(f"{label:<28}{program:<10}{walls:<30}{cpus:<30}{f['median'][program]['rss_mib']:>6.0f} MiB")
            label = ""
        r = f["ratio_ours_to_greedy"]
        lines.append(f"{'':<28}ours / greedy (medians): wall {r['wall']:.2f}, CPU {r['cpu']:.2f}; "
                     f"admitted {f['admitted']['ours']} / {f['admitted']['greedy']}")
        if "ratio_ours_to_baseline" in f:
            b = f["ratio_ours_to_baseline"]
            lines.append(f"{'':<28}ours / baseline (medians): wall {b['wall']:.2f}, CPU {b['cpu']:.2f}; same output")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds per trace file")
    parser.add_argument("--small", action="store_true", help="1/10 of the jobs (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--keep", metavar="DIR", help="write the trace files here and leave them")
    parser.add_argument("--baseline", metavar="KOORD_QUEUE",
                        help="another koord-queue executable (say, main's) run in the same rounds; "
                             "its output must be the same bytes")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(args.keep or scratch)
        directory.mkdir(parents=True, exist_ok=True)
        paths = write_traces(directory, 10 if args.small else 1)
        before = os.getloadavg()[0]
        figures = measure(paths, args.rounds, Path(scratch), args.baseline)
        load = (before, os.getloadavg()[0])
    print(json.dumps({"load": load, "traces": figures}, indent=2) if args.json else render(figures, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
