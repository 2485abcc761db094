"""Real helm for the tests: fetched by scripts/fetch_helm.py (as `make test` does), and
``render`` to turn the chart and some values into the objects helm would install."""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from koordqueue.jobs import KINDS

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "koord-queue"
KUBE_VERSION = "1.32.0"
NAMESPACE = "koord-queue"
RELEASE = "koord-queue"

Obj = dict[str, Any]


@functools.cache
def helm() -> Path:
    """The pinned helm binary (fetched on first use, then reused)."""
    spec = importlib.util.spec_from_file_location("fetch_helm", ROOT / "scripts" / "fetch_helm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path: Path = module.ensure_helm()
    return path


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(helm()), *args], capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def _sets(values: dict[str, Any]) -> list[str]:
    """``--set-json`` for each top-level key: exact types, no string guessing."""
    return [arg for key, value in values.items() for arg in ("--set-json", f"{key}={json.dumps(value)}")]


@functools.cache
def _render(values_json: str, include_crds: bool) -> str:
    values = json.loads(values_json)
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    if include_crds:
        args.append("--include-crds")
    return run_helm(*args, *_sets(values)).stdout


def render(values: dict[str, Any] | None = None, include_crds: bool = False) -> list[Obj]:
    """The objects ``helm template`` renders for ``values`` (nested dicts merged by helm)."""
    text = _render(json.dumps(values or {}, sort_keys=True), include_crds)
    return [obj for obj in yaml.safe_load_all(text) if obj]


def render_error(values: dict[str, Any]) -> str:
    """helm's error when the chart refuses ``values``."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *_sets(values)]
    result = run_helm(*args, check=False)
    assert result.returncode != 0, f"helm rendered {values} without complaint"
    return result.stderr


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kinds(objects: list[Obj]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def container(objects: list[Obj]) -> Obj:
    deployment = one(objects, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    c: Obj = containers[0]
    return c


def args(objects: list[Obj]) -> list[str]:
    a: list[str] = container(objects)["args"]
    return a


def flag(objects: list[Obj], name: str) -> list[str]:
    """Every value given to ``--name=value`` in the controller's args."""
    prefix = f"--{name}="
    return [a[len(prefix):] for a in args(objects) if a.startswith(prefix)]


ALL_EXTENSIONS = {kind.extension: {"enable": True} for kind in KINDS}
