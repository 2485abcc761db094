"""`make lint` runs mypy --strict on the files pyproject names: every module of src/ must be among them."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_mypy_checks_every_module_of_src() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    checked = [ROOT / f for f in config["files"]]
    left_out = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "src").rglob("*.py"))
                if not any(p == f or f in p.parents for f in checked)]
    assert left_out == []
    # No module is let off strictness quietly: an override would have to be named here.
    assert [o for o in config.get("overrides", ()) if o.get("ignore_errors") or o.get("strict") is False] == []
