"""The start-time forecast (engine/forecast.py): its speed, and how accurate it is.

Speed: a cluster of Q leaf quotas (8 GPUs each, full: eight 1-GPU jobs running, started
at random times), with P pending 1- to 4-GPU jobs spread over them; one forecast (three
plays: expected, optimistic, pessimistic) timed in CPU seconds (process time), the median
of ``--rounds``; with ``--ab`` each round also times the engine's own play (``fast=False``,
as before the fast play), alternating, and checks that both give the same forecast.

    .venv/bin/python bench/forecast.py speed                 # 1k and 10k pending over 1,000 quotas
    .venv/bin/python bench/forecast.py speed --pending 10000 --quotas 1000 --rounds 5 --ab

Accuracy: see ``accuracy`` (docs/forecast.md has the table and the command).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from koordqueue.api.constants import BASIS_DEFAULT  # noqa: E402
from koordqueue.engine import Engine  # noqa: E402
from koordqueue.engine.forecast import clone, forecast, snapshot  # noqa: E402
from koordqueue.engine.model import EngineConfig, QuotaInfo, UnitInfo, auto_queue_for  # noqa: E402
from koordqueue.engine.runtimes import Runtime  # noqa: E402

GPU = "nvidia.com/gpu"
G = 1000


def busy_cluster(quotas: int, pending: int, seed: int = 1) -> tuple[Engine, dict[str, Runtime], float]:
    """The engine of the speed figure, at t=now, and every unit's runtime."""
    rng = random.Random(seed)
    engine = Engine(EngineConfig(cluster_capacity={GPU: quotas * 8 * G}))
    runtimes: dict[str, Runtime] = {}
    for q in range(quotas):
        info = QuotaInfo(name=f"q{q}", namespace="default", min={GPU: 8 * G}, max={GPU: 8 * G})
        engine.set_quota(info)
        engine.set_queue(auto_queue_for(info))
    now = 10_000.0
    for q in range(quotas):
        for r in range(8):
            engine.set_unit(UnitInfo("default", f"run-{q}-{r}", 0, now - rng.uniform(0, 3600), {GPU: G},
                                     quota_name=f"q{q}"))
            runtimes[f"default/run-{q}-{r}"] = Runtime(rng.uniform(600, 7200), BASIS_DEFAULT)
    engine.schedule(now - 1)
    for p in range(pending):
        q = rng.randrange(quotas)
        key = f"default/wait-{p}"
        engine.set_unit(UnitInfo("default", f"wait-{p}", rng.choice((0, 0, 5)), now - rng.uniform(0, 600),
                                 {GPU: rng.choice((1, 1, 2, 4)) * G}, quota_name=f"q{q}"))
        runtimes[key] = Runtime(rng.uniform(300, 7200), BASIS_DEFAULT)
    engine.schedule(now)
    return engine, runtimes, now


def _timed(what: Any) -> tuple[float, Any]:
    start = time.process_time()
    out = what()
    return time.process_time() - start, out


def speed(quotas: int, pending: int, rounds: int, ab: bool = False) -> dict[str, Any]:
    engine, runtimes, now = busy_cluster(quotas, pending)
    default = Runtime(3600.0, BASIS_DEFAULT)
    # What the leader does on its event loop: the copy (the plays run in a thread): the fast
    # play's snapshot where it applies, else a clone of the engine.
    snaps = [_timed(lambda: snapshot(engine))[0] for _ in range(rounds)]
    clones = [_timed(lambda: clone(engine))[0] for _ in range(rounds)]
    times, engine_times = [], []
    result = None
    for _ in range(rounds):
        took, result = _timed(lambda: forecast(engine, now, runtimes, default))
        times.append(took)
        if ab:
            took, full = _timed(lambda: forecast(engine, now, runtimes, default, fast=False))
            engine_times.append(took)
            assert full.units == result.units and full.cycles == result.cycles, "the fast play differs"
    assert result is not None
    started = sum(1 for f in result.units.values() if f.start is not None)
    cpu = statistics.median(times)
    row = {"quotas": quotas, "pending": pending, "cpu_seconds": round(cpu, 3), "rounds": [round(t, 3) for t in times],
           "fast": result.fast, "cycles": result.cycles, "forecast_units": len(result.units), "with_a_start": started,
           "complete": result.complete, "us_per_cycle": round(cpu / max(1, result.cycles) * 1e6, 1),
           "snapshot_cpu_seconds": round(statistics.median(snaps), 3),
           "clone_cpu_seconds": round(statistics.median(clones), 3)}
    if ab:
        row["engine_play_cpu_seconds"] = round(statistics.median(engine_times), 3)
        row["engine_play_rounds"] = [round(t, 3) for t in engine_times]
        row["ratio"] = round(cpu / statistics.median(engine_times), 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("speed")
    s.add_argument("--quotas", type=int, default=1000)
    s.add_argument("--pending", type=int, action="append")
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--json", action="store_true")
    s.add_argument("--ab", action="store_true", help="also time the engine's own play, alternating")
    a = sub.add_parser("accuracy")
    a.add_argument("--json", action="store_true")
    a.add_argument("traces", nargs="*")
    args = parser.parse_args()
    if args.what == "speed":
        rows = [speed(args.quotas, p, args.rounds, args.ab) for p in (args.pending or [1000, 10000])]
        if args.json:
            print(json.dumps(rows, indent=1))
        else:
            for row in rows:
                engine = (f"; the engine's play {row['engine_play_cpu_seconds']:.3f} CPU-s "
                          f"{row['engine_play_rounds']} (ratio {row['ratio']})" if args.ab else "")
                print(f"{row['pending']:>6} pending over {row['quotas']} quotas: {row['cpu_seconds']:.3f} CPU-s "
                      f"(median of {args.rounds}: {row['rounds']}; {'fast play' if row['fast'] else 'engine play'}), "
                      f"{row['cycles']} cycles in 3 plays, {row['us_per_cycle']} us per cycle; the copy on the loop: "
                      f"snapshot {row['snapshot_cpu_seconds']:.3f}, clone {row['clone_cpu_seconds']:.3f} CPU-s; "
                      f"{row['with_a_start']} of {row['forecast_units']} "
                      f"with a start{'' if row['complete'] else ' (a bound was hit)'}{engine}")
    else:
        from forecast_accuracy import accuracy_main  # (beside this file)

        accuracy_main(args.traces, args.json)


if __name__ == "__main__":
    main()
