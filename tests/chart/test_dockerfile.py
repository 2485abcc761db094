"""The Dockerfile (no Docker engine here): hadolint, its parsed instructions, and its build
stage's recipe run for real to show the wheel it installs carries the ENTRYPOINT's command."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from tests.chart.helmtool import ROOT, one, render

DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"


def parsed() -> DockerfileParser:
    parser = DockerfileParser(fileobj=DOCKERFILE.open("rb"))
    return parser


def final_stage() -> list[dict[str, str]]:
    instructions = parsed().structure
    last_from = max(i for i, ins in enumerate(instructions) if ins["instruction"] == "FROM")
    return instructions[last_from:]


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run([str(HADOLINT), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_hadolint_does_find_things() -> None:
    """The linter runs and fails a bad file (so the test above can fail)."""
    bad = "FROM python:latest\nUSER root\nRUN pip install flask\n"
    result = subprocess.run([str(HADOLINT), "--no-color", "-"], input=bad, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    assert {"DL3007", "DL3002", "DL3013"} <= {line.split()[1] for line in result.stdout.splitlines()}


def test_two_stages_on_slim_python_3_11() -> None:
    froms = [ins["value"] for ins in parsed().structure if ins["instruction"] == "FROM"]
    assert len(froms) == 2
    for image in froms:
        name = image.split()[0]
        assert name.startswith("python:3.11-slim"), image
    assert froms[0].split()[-1] == "build"


def test_runs_as_a_non_root_numeric_user_the_chart_agrees_with() -> None:
    users = [ins["value"] for ins in final_stage() if ins["instruction"] == "USER"]
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["securityContext"]["runAsGroup"] == int(gid)


def test_entrypoint_is_the_console_script_with_controller() -> None:
    entrypoint = [ins["value"] for ins in final_stage() if ins["instruction"] == "ENTRYPOINT"]
    assert entrypoint == ['["koord-queue", "controller"]']  # exec form: signals reach the process
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"koord-queue": "koordqueue.cli:main"}


def test_the_wheel_from_the_build_stage_is_what_gets_installed() -> None:
    stages = parsed().structure
    runs = [ins["value"] for ins in stages if ins["instruction"] == "RUN"]
    assert any("pip wheel" in r and "--wheel-dir /dist" in r for r in runs[:1]), runs
    final = final_stage()
    copies = [ins["value"] for ins in final if ins["instruction"] == "COPY"]
    assert copies == ["--from=build /dist /dist"]  # nothing of the source tree reaches the image
    (install,) = [ins["value"] for ins in final if ins["instruction"] == "RUN"]
    assert "pip install --no-cache-dir /dist/koord_queue-*.whl" in install


def test_exposed_ports_are_the_charts_defaults() -> None:
    exposed = [p for ins in final_stage() if ins["instruction"] == "EXPOSE" for p in ins["value"].split()]
    ports = {p["name"]: p["containerPort"] for p in
             one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert sorted(int(p) for p in exposed) == sorted(ports.values())


def _build_context(tmp: Path) -> Path:
    """The files .dockerignore lets into the build (its `*` then `!` rules, as Docker reads them)."""
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    context = tmp / "context"
    for dirpath, _dirs, files in os.walk(ROOT):
        rel_dir = Path(dirpath).relative_to(ROOT)
        if rel_dir.parts and rel_dir.parts[0] in {".git", ".venv", ".tools", "node_modules"}:
            continue
        for name in files:
            rel = (rel_dir / name).as_posix()
            included = True
            for rule in rules:
                negate = rule.startswith("!")
                pattern = rule.lstrip("!").rstrip("/")
                parts = rel.split("/")
                hit = any(fnmatch.fnmatch("/".join(parts[:i]), pattern) for i in range(1, len(parts) + 1))
                if hit:
                    included = negate
            if included:
                (context / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, context / rel)
    return context


def test_dockerignore_lets_in_only_what_the_build_needs(tmp_path: Path) -> None:
    context = _build_context(tmp_path)
    top = sorted(p.name for p in context.iterdir())
    assert top == ["README.md", "pyproject.toml", "src"]
    assert not list(context.rglob("__pycache__")) and not list(context.rglob("*.egg-info"))


@pytest.mark.slow
def test_the_build_stage_recipe_makes_a_working_wheel(tmp_path: Path) -> None:
    """Stage 1's `pip wheel` run on the build context; the wheel's console script then
    answers `koord-queue controller --help` from the wheel, not from the source tree."""
    context = _build_context(tmp_path)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-cache-dir", "--no-deps", "--wheel-dir",
                    str(dist), "."], cwd=context, check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("koord_queue-*.whl")
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    env = {"PATH": f"{target / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(target),
           "HOME": str(tmp_path)}
    where = subprocess.run([sys.executable, "-c", "import koordqueue; print(koordqueue.__file__)"], env=env,
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert where.startswith(str(target)), where
    assert (target / "koordqueue" / "examples" / "seed.yaml").exists()  # package data made it
    result = subprocess.run([str(target / "bin" / "koord-queue"), "controller", "--help"], env=env,
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--job-kinds" in result.stdout and "--webhook-cert-dir" in result.stdout
