"""Chaos as a soak: the chaos run (bench/chaos.py) over many seeds and shapes, in bounded time.

A chaos run passed with a few chosen seeds says little: its checker finds an interleaving
only when the storm makes it. This draws a shape for each run (200-800 jobs, 2-10 % of
requests failing, 0-8 controller SIGKILLs, short or long leases, watch drops and history
compactions on or off, short or long jobs, slow or fast submission) and a seed, runs each
as its own process (two at a time by default), prints every violation with the seed, the
shape and the command that replays that storm, and ends with a summary table.

    .venv/bin/python bench/chaos_soak.py [--runs 30] [--budget 3600] [--parallel 2] [--seed N]

No run starts once `--budget` seconds have passed; runs under way finish (each has its
own timeout, `--run-timeout`). The soak's seed (printed) draws the same shapes and seeds
again; a run's seed replays its storm, not its interleaving.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHAOS = Path(__file__).resolve().with_name("chaos.py")
SHORT_LEASE = (3.0, 2.0, 0.5)
LONG_LEASE = (10.0, 7.0, 2.0)  # the chart's


@dataclass(frozen=True)
class SoakRun:
    seed: int
    jobs: int
    quotas: int
    parents: int
    error_rate: float
    kills: int
    lease: tuple[float, float, float]
    watch_drops: bool
    compactions: bool
    runtime: tuple[float, float]
    submit_per_second: float
    tenant_attacks: bool = False  # a tenant attacks quotas of its own meanwhile (chaos.py --tenant-attacks)

    def args(self) -> list[str]:
        """bench/chaos.py's options for this run."""
        out = ["--seed", str(self.seed), "--jobs", str(self.jobs), "--quotas", str(self.quotas),
               "--parents", str(self.parents), "--error-rate", f"{self.error_rate:g}", "--kills", str(self.kills),
               "--lease", *(f"{x:g}" for x in self.lease), "--runtime", *(f"{x:g}" for x in self.runtime),
               "--submit-per-second", f"{self.submit_per_second:g}"]
        if not self.watch_drops:
            out.append("--no-watch-drops")
        if not self.compactions:
            out.append("--no-compactions")
        if self.tenant_attacks:
            out.append("--tenant-attacks")
        return out

    def command(self) -> str:
        return " ".join([".venv/bin/python bench/chaos.py", *self.args()])

    def said(self) -> str:
        """The shape in a few words, for tables."""
        lease = "short" if self.lease == SHORT_LEASE else "long"
        faults = "+".join(f for f, on in (("drops", self.watch_drops), ("compactions", self.compactions),
                                          ("tenant attacks", self.tenant_attacks)) if on)
        return (f"{self.jobs} jobs/{self.quotas} quotas, {self.error_rate:.0%} errors, {self.kills} kills, "
                f"{lease} lease, {faults or 'no drops'}, jobs {self.runtime[0]:g}-{self.runtime[1]:g} s, "
                f"{self.submit_per_second:g}/s")


def draw_shape(rng: random.Random) -> SoakRun:
    return SoakRun(
        seed=rng.randrange(2**31),
        jobs=rng.randrange(200, 801, 50),
        quotas=rng.choice([8, 12, 20]),
        parents=rng.choice([2, 4]),
        error_rate=rng.choice([0.02, 0.04, 0.06, 0.08, 0.10]),
        kills=rng.randint(0, 8),
        lease=rng.choice([SHORT_LEASE, LONG_LEASE]),
        watch_drops=rng.random() < 0.75,
        compactions=rng.random() < 0.75,
        runtime=rng.choice([(0.3, 2.0), (0.5, 4.0)]),
        submit_per_second=rng.choice([25.0, 50.0]),
        tenant_attacks=rng.random() < 0.5,
    )


@dataclass
class Outcome:
    shape: SoakRun
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)  # chaos.py's --json object
    violations: list[str] = field(default_factory=list)
    log: str = ""

    @property
    def jobs(self) -> int:
        return int(self.figures.get("jobs", 0))

    @property
    def writes(self) -> int:
        return int(self.figures.get("writes_checked", 0))


async def run_one(shape: SoakRun, timeout: float, state_root: Path | None) -> Outcome:
    """One chaos run in a process of its own; its figures, or why there are none."""
    args = [sys.executable, str(CHAOS), *shape.args(), "--json", "--quiet", "--timeout", f"{timeout:g}"]
    if state_root is not None:
        args += ["--state-dir", str(state_root / f"run-{shape.seed}")]
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout + 300)
    except (TimeoutError, asyncio.CancelledError):
        os.killpg(process.pid, signal.SIGTERM)  # chaos.py stops its controller on SIGTERM
        await process.wait()
        outcome = Outcome(shape, time.monotonic() - started)
        outcome.violations.append(f"the run did not end within {timeout + 300:g} s")
        return outcome
    text = out.decode(errors="replace")
    outcome = Outcome(shape, time.monotonic() - started, log=text)
    figures = next((line for line in reversed(text.splitlines()) if line.startswith("{")), None)
    if figures is None:
        outcome.violations.append(f"the run ended ({process.returncode}) without its figures:\n"
                                  + "\n".join(text.splitlines()[-20:]))
        return outcome
    outcome.figures = json.loads(figures)
    outcome.violations = list(outcome.figures.get("violations") or [])
    return outcome


async def soak(runs: int, budget: float, parallel: int, seed: int, run_timeout: float,
               state_root: Path | None) -> list[Outcome]:
    rng = random.Random(seed)
    shapes = [draw_shape(rng) for _ in range(runs)]
    started = time.monotonic()
    outcomes: list[Outcome] = []
    slots = asyncio.Semaphore(parallel)

    async def one(i: int, shape: SoakRun) -> None:
        async with slots:
            if time.monotonic() - started > budget:
                return
            print(f"[soak {time.strftime('%H:%M:%S')}] run {i + 1}/{runs}: seed {shape.seed}, {shape.said()}",
                  flush=True)
            outcome = await run_one(shape, run_timeout, state_root)
        outcomes.append(outcome)
        print(f"[soak {time.strftime('%H:%M:%S')}] run {i + 1} (seed {shape.seed}) ended in {outcome.seconds:.0f} s: "
              f"{outcome.jobs} jobs, {outcome.writes} writes checked, {len(outcome.violations)} violations",
              flush=True)
        for violation in outcome.violations:
            print(f"  VIOLATION (seed {shape.seed}; {shape.said()}): {violation}\n"
                  f"    replay: {shape.command()}", flush=True)

    await asyncio.gather(*(one(i, shape) for i, shape in enumerate(shapes)))
    return outcomes


def table(outcomes: list[Outcome], seconds: float) -> str:
    rows = [("seed", "shape", "jobs", "writes", "used checked", "violations", "seconds")]
    for o in sorted(outcomes, key=lambda o: o.shape.seed):
        rows.append((str(o.shape.seed), o.shape.said(), str(o.jobs), str(o.writes),
                     str(o.figures.get("used_checked", 0)), str(len(o.violations)), f"{o.seconds:.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    total = (f"runs: {len(outcomes)}, jobs: {sum(o.jobs for o in outcomes)}, writes checked: "
             f"{sum(o.writes for o in outcomes)}, status.used writes checked: "
             f"{sum(int(o.figures.get('used_checked', 0)) for o in outcomes)}, violations: "
             f"{sum(len(o.violations) for o in outcomes)}, wall time: {seconds:.0f} s")
    return "\n".join([*lines, "", total])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--budget", type=float, default=3600.0, help="no run starts after this many seconds")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None, help="draw the same shapes again (default: random)")
    parser.add_argument("--run-timeout", type=float, default=1200.0, help="seconds a run may take")
    parser.add_argument("--state-dir", type=Path, default=None, help="keep each run's state (and controller log)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"[soak] seed {seed}: {args.runs} runs, {args.parallel} at a time, none started after "
          f"{args.budget:g} s", flush=True)
    started = time.monotonic()
    outcomes = asyncio.run(soak(args.runs, args.budget, args.parallel, seed, args.run_timeout, args.state_dir))
    print("\n" + table(outcomes, time.monotonic() - started))
    return 1 if any(o.violations for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
