"""Shared helpers for the reliability tests: bench/chaos.py loaded as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[2]


def load_chaos() -> ModuleType:
    """bench/chaos.py (bench is not a package): the run and its checker, as the CI test uses them."""
    name = "koordqueue_bench_chaos"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "chaos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
