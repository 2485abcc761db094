"""Who writes the engine, as scripts/engine_writers.py reads it from the code's syntax trees."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "engine_writers.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("engine_writers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module


W = load_script()
METHODS = W.engine_methods()


def test_the_script_runs_and_prints_the_graph_and_the_writers() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "  engine         -> api\n" in out  # the pure core, as tests/test_layering.py holds it
    assert "mutators (units)" in out and "controller/quotasync.py" in out
    assert "files that change units in the engine: " in out


def test_every_public_method_of_the_engine_is_a_mutator_or_a_view() -> None:
    unclassified = [m for m in METHODS if W.kind_of(m) == "unclassified"]
    assert unclassified == [], "say in scripts/engine_writers.py (MUTATORS or VIEWS) what these change"
    assert {"set_unit", "remove_unit", "requeue", "revert_admission"} <= set(W.UNIT_MUTATORS) <= set(METHODS)
    assert METHODS["koordinator"] is True and METHODS["set_unit"] is False  # a property, a method


def test_the_walker_sees_calls_on_the_engine_and_nothing_else() -> None:
    source = '''
"""engine.set_unit(x) in a docstring is not a call"""
class Part:
    def a(self):
        self.engine.set_unit(u)  # engine.remove_unit(k) in a comment is not one either
        snap.engine.remove_unit(k)
        self.shared.engine.requeue(k, 0.0, "why")
    async def b(self):
        if self.engine.koordinator:
            engine.revert_admission(k)
        self.other.set_unit(u)
        f(self.engine.set_unit)
def c(engine):
    return engine.unit(k)
'''
    found = [(call.function, call.method, call.kind) for call in W.calls_in(source, "controller/x.py", METHODS)]
    assert found == [
        ("Part.a", "set_unit", "units"),
        ("Part.a", "remove_unit", "units"),
        ("Part.a", "requeue", "units"),
        ("Part.b", "koordinator", "view"),
        ("Part.b", "revert_admission", "units"),
        ("c", "unit", "view"),
    ]


def test_the_import_graph_has_every_part() -> None:
    graph = W.import_graph()
    assert {"engine", "controller", "api", "kube"} <= graph.keys()
    assert graph["engine"] <= {"api"}
    assert "engine" in graph["controller"]


# The unit mutators each part other than unitsync.py may call, and why: the engine's own
# decisions about units, applied or undone by the part that writes them out. What the
# objects say about a unit (set_unit, remove_unit, set_pods_running, set_unit_pods) reaches
# the engine through controller/unitsync.py alone.
ONE_WRITER = "controller/unitsync.py"
DECISIONS_APPLIED = {
    ("controller/scheduler.py", "revert_admission"): "a cycle's admission whose write failed, undone",
    ("controller/scheduler.py", "requeue"): "a send-back (timeout, failed check, growth) decided and written",
    ("controller/loading.py", "revert_admission"): "look_now: a snapshot's what-if cycle undone, never written",
}


def unit_writes_outside(calls: list) -> list[tuple[str, int, str, str]]:
    return [(call.file, call.line, call.function, call.method) for call in calls
            if call.method in W.UNIT_MUTATORS and call.file != ONE_WRITER
            and (call.file, call.method) not in DECISIONS_APPLIED]


def test_only_unitsync_writes_units_into_the_engine() -> None:
    calls = W.engine_calls(under=None)  # every part of src/, not only the controller
    assert unit_writes_outside(calls) == [], "write units through controller/unitsync.py's functions"
    used = {(call.file, call.method) for call in calls}
    assert set(DECISIONS_APPLIED) <= used, "an allowance no longer used: take it out"
    assert {"set_unit", "remove_unit", "set_pods_running", "set_unit_pods"} <= \
        {call.method for call in calls if call.file == ONE_WRITER}


def test_a_unit_write_elsewhere_would_be_caught() -> None:
    source = "class Reconciler:\n    def finish(self, key):\n        self.engine.remove_unit(key)\n"
    calls = W.calls_in(source, "controller/reconciler.py", METHODS)
    assert unit_writes_outside(calls) == [("controller/reconciler.py", 3, "Reconciler.finish", "remove_unit")]


def test_the_reconciler_reads_where_a_unit_stands_in_one_place() -> None:
    """JobReconciler.reconcile branches on UnitSync.situation, not on the engine directly,
    and its steps are numbered 1, 2, 3... as Kueue's ReconcileGenericJob's."""
    import inspect
    import re

    from koordqueue.controller.reconciler import JobReconciler

    calls = W.engine_calls(under="controller")
    direct = [(c.function, c.method) for c in calls if c.file == "controller/reconciler.py"
              and c.function in ("JobReconciler.reconcile", "JobReconciler._reconcile_bare")]
    assert direct == [], "read the unit's standing through self.unit_sync.situation(...)"
    source = inspect.getsource(JobReconciler.reconcile)
    assert "self.unit_sync.situation(" in source
    steps = [int(n) for n in re.findall(r"^\s*# (\d+)\. ", source, re.M)]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 10
