#!/usr/bin/env python3
"""Who imports whom in src/koordqueue, and who calls the engine: read from the code's
syntax trees (ast), not grepped, so a comment or a string naming a method is not a call.

- the import graph between koordqueue's parts (a package such as ``engine``, or a
  top-level module such as ``up``), every import counted wherever it is written;
- the Engine's public methods (engine/*.py, ``class Engine``), each a mutator (by what it
  changes: units, quotas, nodes, the cycle) or a view, as listed below;
- for each controller file, the calls it makes on the engine, counted by method.

    python scripts/engine_writers.py [--json] [--all]

``--all``: the engine's callers in every part, not only controller/. The rule the counts
serve (tests/controller/test_one_writer.py): units are written into the engine by
controller/unitsync.py alone; docs/architecture.md says why and what else may.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "koordqueue"

# The Engine's public methods by what they change. A method in none of these is a view
# (it answers, changes nothing the shell could see); a new public method of the Engine
# that is neither listed here nor in VIEWS is printed as unclassified, and the test fails.
MUTATORS: dict[str, frozenset[str]] = {
    # a unit's standing: what its object says, or the engine's decision about it undone or made
    "units": frozenset({"set_unit", "remove_unit", "requeue", "revert_admission", "set_pods_running",
                        "set_unit_pods", "set_work_done"}),
    "quotas": frozenset({"set_quota", "remove_quota", "set_queue", "remove_queue", "set_cluster_capacity",
                         "set_koordinator"}),
    "nodes": frozenset({"set_node", "remove_node", "set_node_usage"}),
    "cycle": frozenset({"schedule"}),
    # what the engine has learnt over time, given back after a restart
    "history": frozenset({"load_usage_history"}),
}
VIEWS = frozenset({"unit", "standing", "quota_status", "queue_positions", "protect_wait", "named_quota",
                   "priority_cap", "validation_errors", "node_free", "koordinator", "usage_history",
                   "fairness_status", "flavor_problems", "flavor_of", "flavor_tolerations", "flavors_tried"})
UNIT_MUTATORS = MUTATORS["units"]


def part_of(module: str) -> str | None:
    """The part of koordqueue a dotted module name is in (None: not ours)."""
    names = module.split(".")
    return names[1] if names[0] == "koordqueue" and len(names) > 1 else None


def module_name(path: Path) -> str:
    return ".".join(("koordqueue", *path.relative_to(SRC).with_suffix("").parts))


def imports(tree: ast.AST, module: str) -> Iterator[str]:
    """The dotted names ``module`` imports (relative imports resolved)."""
    package = module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            yield ".".join([*base, *([node.module] if node.module else [])])


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Part -> the other parts of koordqueue it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(src.rglob("*.py")):
        module = module_name(path)
        part = part_of(module)
        if part is None:
            continue
        targets = graph.setdefault(part, set())
        for imported in imports(ast.parse(path.read_text()), module):
            target = part_of(imported)
            if target is not None and target != part:
                targets.add(target)
    return graph


def engine_methods(src: Path = SRC) -> dict[str, bool]:
    """The public methods of ``class Engine``, wherever in engine/ it is: name -> whether
    it is a property (read, not called)."""
    for path in sorted((src / "engine").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name == "Engine":
                return {item.name: any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list)
                        for item in node.body
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_")}
    raise SystemExit("class Engine not found under src/koordqueue/engine")


def kind_of(method: str) -> str:
    """'units', 'quotas', 'nodes', 'cycle', 'history' (a mutator), 'view', or 'unclassified'."""
    for kind, names in MUTATORS.items():
        if method in names:
            return kind
    return "view" if method in VIEWS else "unclassified"


@dataclass(frozen=True)
class Call:
    file: str  # relative to src/koordqueue, e.g. controller/scheduler.py
    line: int
    function: str  # where the call is written: Class.method, function, or <module>
    method: str  # the Engine's method called

    @property
    def kind(self) -> str:
        return kind_of(self.method)


def _is_engine(receiver: ast.expr) -> bool:
    """Whether an expression names the engine: ``engine``, ``self.engine``, ``snap.engine``,
    ``self.shared.engine``... (every caller in src/ holds it under that name)."""
    if isinstance(receiver, ast.Name):
        return receiver.id == "engine"
    return isinstance(receiver, ast.Attribute) and receiver.attr == "engine"


class _Calls(ast.NodeVisitor):
    def __init__(self, file: str, methods: dict[str, bool]) -> None:
        self.file, self.methods = file, methods
        self.where: list[str] = []
        self.found: list[Call] = []

    def _scoped(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.where.append(node.name)
        self.generic_visit(node)
        self.where.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and self.methods.get(func.attr) is False and _is_engine(func.value):
            self.found.append(Call(self.file, node.lineno, ".".join(self.where) or "<module>", func.attr))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # a property read (engine.koordinator) counts as a call; a method named but not called does not
        if self.methods.get(node.attr) is True and _is_engine(node.value):
            self.found.append(Call(self.file, node.lineno, ".".join(self.where) or "<module>", node.attr))
        self.generic_visit(node)


def calls_in(source: str, file: str, methods: dict[str, bool]) -> list[Call]:
    """The engine calls written in ``source`` (the file's path relative to src/koordqueue)."""
    visitor = _Calls(file, methods)
    visitor.visit(ast.parse(source))
    return visitor.found


def engine_calls(src: Path = SRC, under: str | None = "controller") -> list[Call]:
    """Every call on the engine in src/koordqueue (``under``: in that part only), engine/ left out."""
    methods = engine_methods(src)
    out: list[Call] = []
    for path in sorted(src.rglob("*.py")):
        file = str(path.relative_to(src))
        part = file.split("/")[0].removesuffix(".py")
        if part == "engine" or (under is not None and part != under):
            continue
        out += calls_in(path.read_text(), file, methods)
    return out


def report(calls: list[Call], graph: dict[str, set[str]], methods: dict[str, bool]) -> str:
    lines = ["import graph of src/koordqueue (part -> the parts it imports):"]
    lines += [f"  {part:<14} -> {', '.join(sorted(graph[part])) or '(nothing of ours)'}" for part in sorted(graph)]
    lines += ["", "the Engine's public methods:"]
    for kind in (*MUTATORS, "view", "unclassified"):
        names = [m for m in methods if kind_of(m) == kind]
        if names:
            label = f"mutators ({kind})" if kind in MUTATORS else kind + "s"
            lines.append(f"  {label:<18} {', '.join(names)}")
    lines += ["", "who calls the engine (mutator calls by method; views in all):"]
    by_file: dict[str, list[Call]] = {}
    for call in calls:
        by_file.setdefault(call.file, []).append(call)
    rows = []
    for file, found in by_file.items():
        mutating = Counter(c.method for c in found if c.kind in MUTATORS)
        views = sum(1 for c in found if c.kind == "view")
        units = sum(n for m, n in mutating.items() if m in UNIT_MUTATORS)
        rows.append((-sum(mutating.values()), file, mutating, views, units))
    for _, file, mutating, views, units in sorted(rows):
        said = ", ".join(f"{m} {n}" for m, n in sorted(mutating.items(), key=lambda x: (-x[1], x[0])))
        lines.append(f"  {file:<34} mutators {sum(mutating.values()):>3} (of units {units:>2})  views {views:>3}"
                     + (f"   {said}" if said else ""))
    unit_writers = sorted({c.file for c in calls if c.method in UNIT_MUTATORS})
    lines += ["", f"files that change units in the engine: {', '.join(unit_writers) or 'none'}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--all", action="store_true", help="callers in every part, not only controller/")
    args = parser.parse_args(argv)
    methods = engine_methods()
    calls = engine_calls(under=None if args.all else "controller")
    graph = import_graph()
    if args.json:
        print(json.dumps({
            "imports": {part: sorted(targets) for part, targets in sorted(graph.items())},
            "methods": {m: kind_of(m) for m in methods},
            "calls": [{"file": c.file, "line": c.line, "function": c.function, "method": c.method, "kind": c.kind}
                      for c in calls],
        }, indent=1))
    else:
        print(report(calls, graph, methods))
    return 1 if any(kind_of(m) == "unclassified" for m in methods) else 0


if __name__ == "__main__":
    sys.exit(main())
