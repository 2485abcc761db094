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
