"""The body of ``koord-queue simulate``: load, run, print."""

from __future__ import annotations

import gc
import sys

from .report import json_chunks, render_summary
from .simulator import simulate_file


def simulate_command(path: str, as_json: bool) -> None:
    """Print the result of a trace; warnings go to stderr when stdout carries JSON.

    Raises ``TraceError`` when the file cannot be used at all.
    """
    # A run makes next to no reference cycles (40 objects in a 20,000-job run with
    # preemptions), while the cyclic collector's passes over the job records, growing
    # with the run, took 6-12 % of it (the more, the more of the trace is read whole).
    collecting = gc.isenabled()
    gc.disable()
    try:
        result, _ = simulate_file(path)
    finally:
        if collecting:
            gc.enable()
    if as_json:
        for warning in result.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        sys.stdout.writelines(json_chunks(result))
        sys.stdout.write("\n")
    else:
        print(render_summary(result))
