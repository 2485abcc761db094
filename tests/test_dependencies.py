"""The runtime dependencies pyproject.toml declares are the ones the package imports:
each one installed in every image and venv is there because some module uses it."""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).parents[1]


def imported_modules() -> set[str]:
    """The top-level names every module of src/koordqueue imports."""
    names: set[str] = set()
    for path in (ROOT / "src" / "koordqueue").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_declared_dependency_is_imported() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    distributions = {normalized(re.split(r"[=<>!~ \[;]", spec, maxsplit=1)[0]) for spec in declared}
    providers = packages_distributions()  # module -> the distributions that install it
    used = {normalized(dist) for module in imported_modules() for dist in providers.get(module, [])}
    assert distributions - used == set(), "declared in pyproject.toml but imported nowhere in src/koordqueue"
