"""`make bench` runs bench/run_all.py: what it runs exists, and every script in bench/ is
either run or left out with a reason (a new benchmark has to be placed on purpose)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import run_all  # noqa: E402


def test_make_bench_runs_run_all() -> None:
    makefile = (BENCH.parent / "Makefile").read_text()
    assert "bench: venv\n\t$(BIN)/python bench/run_all.py\n" in makefile


def test_every_script_in_bench_is_run_or_left_out_with_a_reason() -> None:
    run = [b.script for b in run_all.BENCHMARKS]
    assert len(set(run)) == len(run)
    assert all((BENCH / script).is_file() for script in [*run, *run_all.LEFT_OUT])
    assert not set(run) & set(run_all.LEFT_OUT)
    assert set(run) | set(run_all.LEFT_OUT) == {p.name for p in BENCH.glob("*.py")}
    assert all(why for why in run_all.LEFT_OUT.values())


def test_the_arguments_it_passes_are_ones_each_script_takes() -> None:
    """Each script's --help names every option run_all gives it (a renamed option fails here, not at night)."""
    for bench in run_all.BENCHMARKS:
        options = [a for a in bench.args if a.startswith("--")]
        if not options:
            continue
        done = subprocess.run([sys.executable, str(BENCH / bench.script), "--help"], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert all(o in done.stdout for o in options), (bench.script, options)


def test_list_and_an_unknown_name() -> None:
    listed = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "--list"], capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0
    assert [line.split()[1] for line in listed.stdout.splitlines() if line.startswith("run ")] == \
        [b.script for b in run_all.BENCHMARKS]
    wrong = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "no_such_bench"], capture_output=True,
                           text=True, timeout=60)
    assert wrong.returncode == 2 and "no_such_bench" in wrong.stderr
