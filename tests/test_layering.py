"""The layering of src/koordqueue, as a contract the imports are checked against.

Every import counts, wherever it is written (inside a function, under TYPE_CHECKING):
a lazy import is still a dependency. A part is a package (``engine``) or a top-level
module (``up``) of koordqueue.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "koordqueue"

ENGINE_MAY_IMPORT = {"engine", "api"}  # the functional core: the API's strings and types, nothing of a shell
API_MAY_IMPORT = {"api"}  # the bottom layer: strings, quantities, typed views of our objects, CRD schemas
# The embedded control plane (the API server and the simulated cluster) is started by
# `koord-queue up` only (cli.py starts `up`, it does not import either itself); the product
# never reaches for it otherwise.
EMBEDDED = {"apiserver", "simcluster"}
EMBEDDED_IMPORTED_BY = {*EMBEDDED, "up"}


def part_of(module: str) -> str | None:
    """The part of koordqueue a dotted module name is in (None: not ours)."""
    names = module.split(".")
    return names[1] if names[0] == "koordqueue" and len(names) > 1 else None


def imports(source: str, module: str) -> Iterator[str]:
    """The dotted names of what the source of ``module`` imports (relative imports resolved)."""
    package = module.split(".")[:-1]  # what a relative import starts from (of __init__ too: its package)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            yield ".".join([*base, *([node.module] if node.module else [])])


def module_name(path: Path) -> str:
    return ".".join(("koordqueue", *path.relative_to(SRC).with_suffix("").parts))


def edges() -> set[tuple[str, str, str]]:
    """(importing part, imported part, importing file) for every import of one part by another."""
    out = set()
    for path in SRC.rglob("*.py"):
        module = module_name(path)
        source_part = part_of(module)
        for imported in imports(path.read_text(), module):
            target = part_of(imported)
            if source_part is not None and target is not None and target != source_part:
                out.add((source_part, target, str(path.relative_to(SRC))))
    return out


EDGES = edges()


def test_the_engine_imports_nothing_of_a_shell() -> None:
    wrong = sorted((f, t) for s, t, f in EDGES if s == "engine" and t not in ENGINE_MAY_IMPORT)
    assert wrong == [], "the engine is pure: no kube, controller, apiserver, simcluster, sim, jobs..."


def test_api_imports_nothing_above_it() -> None:
    """engine imports api; api importing engine (or jobs, which imports both) would make a circle."""
    wrong = sorted((f, t) for s, t, f in EDGES if s == "api" and t not in API_MAY_IMPORT)
    assert wrong == []
    assert ("engine", "api") in {(s, t) for s, t, _ in EDGES}  # the direction that is allowed is seen


# The embedded API server serves our API (its strings, our CRDs) and knows nothing else of
# ours: not the simulated cluster, which is its client over HTTP as it would be of
# kube-apiserver, and no shell of the product. The simulated cluster, in turn, reaches the
# server only over HTTP; of its code it takes the field validation alone (the training
# operator's webhook words its refusals with it, as the real one uses apimachinery's).
APISERVER_MAY_IMPORT = {"apiserver", "api", "aio", "manifests"}
SIMCLUSTER_MAY_IMPORT_OF_APISERVER = {"koordqueue.apiserver.validation"}
# Of the engine, the simulated kubelet takes the model and kube-scheduler's node filters
# (so that it binds where the engine plans), never the engine's decisions.
SIMCLUSTER_MAY_IMPORT_OF_ENGINE = {"koordqueue.engine.model", "koordqueue.engine.nodefilter"}


def test_only_up_starts_the_embedded_control_plane() -> None:
    wrong = sorted((s, f) for s, t, f in EDGES if t in EMBEDDED and s not in EMBEDDED_IMPORTED_BY)
    assert wrong == []
    assert {("up", "apiserver"), ("up", "simcluster")} <= {(s, t) for s, t, _ in EDGES}


def test_the_api_server_imports_nothing_of_the_simulated_cluster() -> None:
    wrong = sorted((f, t) for s, t, f in EDGES if s == "apiserver" and t not in APISERVER_MAY_IMPORT)
    assert wrong == [], "the API server imports our API and CRDs only: the simulated cluster is its client"
    assert ("simcluster", "apiserver") in {(s, t) for s, t, _ in EDGES}  # the parts are seen by these names


def test_the_simulated_cluster_reaches_the_api_server_over_http() -> None:
    wrong = []
    for path in (SRC / "simcluster").rglob("*.py"):
        module = module_name(path)
        wrong += [(str(path.relative_to(SRC)), name) for name in imports(path.read_text(), module)
                  if part_of(name) == "apiserver" and name not in SIMCLUSTER_MAY_IMPORT_OF_APISERVER
                  or part_of(name) == "engine" and name not in SIMCLUSTER_MAY_IMPORT_OF_ENGINE]
    assert wrong == []


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("import koordqueue.kube.client", "koordqueue.engine.core", ["koordqueue.kube.client"]),
        ("from koordqueue.api import constants as c", "koordqueue.engine.core", ["koordqueue.api"]),
        ("def f():\n    from koordqueue.sim import x", "koordqueue.engine.core", ["koordqueue.sim"]),
        ("from .trace import NodeGroup", "koordqueue.sim.nodes", ["koordqueue.sim.trace"]),
        ("from ..kube import client", "koordqueue.engine.core", ["koordqueue.kube"]),
        ("from . import model", "koordqueue.engine.__init__", ["koordqueue.engine"]),
    ],
)
def test_the_walker_sees_every_kind_of_import(source: str, module: str, expected: list[str]) -> None:
    assert list(imports(source, module)) == expected


def test_a_forbidden_import_would_be_caught() -> None:
    found = {part_of(name) for name in imports("from ..apiserver.server import APIServer", "koordqueue.engine.x")}
    assert found == {"apiserver"} and not found <= ENGINE_MAY_IMPORT


# Inside the engine: the front door (core) runs cycles (cycle) over the accounting
# (ledger); a cycle tells units why they wait (waits, views) and preempts (preemption);
# kube-scheduler's node filters (nodefilter) are below placement, which uses them. The
# room on the nodes is itself a stack: the arrays over the nodes (nodearrays), the gang
# search that reads them (gangsearch), the failed checks that read both (failedplacements),
# and NodeRoom (placement) on top. The quota tree's nodes (quotanode) are below the tree
# that keeps their figures (tree), and both below whatever reads them (fit and up). Each
# may import only what is below it, so that moving
# a method cannot close a circle: the ledger knows none of the others, waits and
# preemption know neither the cycle nor the Engine, the cycle not the Engine.
_CORE, _CYCLE, _PACKAGE = "koordqueue.engine.core", "koordqueue.engine.cycle", "koordqueue.engine"
_VIEWS = "koordqueue.engine.views"
_PLACEMENT = "koordqueue.engine.placement"
_ABOVE_PLACEMENT = {_PLACEMENT, "koordqueue.engine.ledger", _CYCLE, _CORE, _PACKAGE, _VIEWS,
                    "koordqueue.engine.waits", "koordqueue.engine.preemption", "koordqueue.engine.messages"}
_FAILEDPLACEMENTS, _GANGSEARCH = "koordqueue.engine.failedplacements", "koordqueue.engine.gangsearch"
_QUOTANODE, _TREE = "koordqueue.engine.quotanode", "koordqueue.engine.tree"
_ABOVE_TREE = {"koordqueue.engine.fit", *_ABOVE_PLACEMENT}
ENGINE_ABOVE = {
    _QUOTANODE: {_TREE, *_ABOVE_TREE},
    _TREE: _ABOVE_TREE,
    "koordqueue.engine.nodefilter": {"koordqueue.engine.nodearrays", _GANGSEARCH, _FAILEDPLACEMENTS, *_ABOVE_PLACEMENT},
    "koordqueue.engine.nodearrays": {_GANGSEARCH, _FAILEDPLACEMENTS, *_ABOVE_PLACEMENT},
    _GANGSEARCH: {_FAILEDPLACEMENTS, *_ABOVE_PLACEMENT},
    _FAILEDPLACEMENTS: _ABOVE_PLACEMENT,
    "koordqueue.engine.ledger": {_CORE, _CYCLE, _PACKAGE, _VIEWS, "koordqueue.engine.waits",
                                 "koordqueue.engine.preemption"},
    _VIEWS: {_CORE, _CYCLE, _PACKAGE},
    "koordqueue.engine.waits": {_CORE, _CYCLE, _PACKAGE},
    "koordqueue.engine.preemption": {_CORE, _CYCLE, _PACKAGE},
    "koordqueue.engine.cycle": {_CORE, _PACKAGE},
    "koordqueue.engine.flavors": {_CORE, _CYCLE, _PACKAGE, _VIEWS, "koordqueue.engine.waits"},
    "koordqueue.engine.flavorsets": {"koordqueue.engine.flavors", "koordqueue.engine.ledger", _CORE, _CYCLE,
                                     _PACKAGE, _VIEWS, "koordqueue.engine.placement", "koordqueue.engine.fit"},
}


def engine_modules_imported(source: str, module: str) -> set[str]:
    """The engine modules ``module`` imports, ``from koordqueue.engine import core`` as
    ``koordqueue.engine.core`` (and the package itself only by ``import koordqueue.engine``
    or an imported name that is not a module: its __init__ imports core)."""
    package = module.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{name}.{alias.name}"
                is_module = (SRC.parent / Path(*full.split("."))).with_suffix(".py").exists()
                out.add(full if is_module else name)
    return {name for name in out if name.startswith("koordqueue.engine")}


def test_the_ledger_the_cycle_and_their_helpers_import_nothing_above_them() -> None:
    wrong = []
    for module, above in ENGINE_ABOVE.items():
        path = SRC.parent / Path(*module.split("."))
        imported = engine_modules_imported(path.with_suffix(".py").read_text(), module)
        wrong += [(module, name) for name in sorted(imported & above)]
    assert wrong == []
    core = engine_modules_imported((SRC / "engine" / "core.py").read_text(), "koordqueue.engine.core")
    assert {"koordqueue.engine.ledger", "koordqueue.engine.cycle"} <= core  # the allowed direction is seen


def test_an_import_of_the_engine_from_below_would_be_caught() -> None:
    assert engine_modules_imported("from koordqueue.engine import core", "koordqueue.engine.ledger") \
        == {"koordqueue.engine.core"}
    assert engine_modules_imported("from . import cycle", "koordqueue.engine.ledger") == {"koordqueue.engine.cycle"}
    assert engine_modules_imported("from koordqueue.engine import Engine", "koordqueue.engine.cycle") \
        == {"koordqueue.engine"}


# No engine file past this many lines, no class past the other (issue 31: a file a reader
# holds in their head; split by responsibility, as placement and tree were, when one grows;
# the Engine class, 449 lines after the fairness and flavors work, is the next to split).
ENGINE_FILE_LINES, ENGINE_CLASS_LINES = 650, 500


def engine_sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines per engine file, and per class (``file:Class``)."""
    files, classes = {}, {}
    for path in sorted((SRC / "engine").glob("*.py")):
        source = path.read_text()
        files[path.name] = len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                classes[f"{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return files, classes


def test_no_engine_file_or_class_grows_past_its_bound() -> None:
    files, classes = engine_sizes()
    assert "core.py" in files and "core.py:Engine" in classes  # the walk sees the engine
    assert {name: n for name, n in files.items() if n > ENGINE_FILE_LINES} == {}
    assert {name: n for name, n in classes.items() if n > ENGINE_CLASS_LINES} == {}
