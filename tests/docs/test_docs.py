"""Every shell command in README.md and docs/*.md, run for real (see harness.py)."""

from __future__ import annotations

import os
import re
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from koordqueue.manifests import operator_crds
from tests.chart.helmtool import helm
from tests.chart.kube import KUBECTL, embedded_cluster
from tests.docs.harness import (
    ROOT,
    Background,
    Block,
    CommandFailed,
    Shell,
    blocks,
    documents,
    iter_commands,
    make_recipe,
    parse_marker,
    rel,
    split_commands,
    start_make_run,
)

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

# The only commands the docs may show without running them, and why. A new skip has to
# be added here on purpose.
ALLOWED_SKIPS = {
    "make test": "it is this test suite",
    "docker build -t koord-queue:0.1.0 .": "no Docker engine where the tests run",
    "make run-kube": "needs Go and a first build; tests/kubecluster/test_up_kube.py runs koord-queue up --control-plane kube",
    "make test-kube": "it is the real-cluster suite, which CI runs",
}


def bare(command: str) -> str:
    """A one-line command without its trailing comment."""
    return re.sub(r"\s+#.*$", "", command.strip()) if "\n" not in command else command


def _helm_on_path(bin_dir: Path) -> None:
    """`helm` on PATH: the fetched helm itself, given every argument as the reader types it
    (the embedded API server serves what helm 4 asks for, server-side apply included)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "helm").symlink_to(helm())


def _sandbox(tmp: Path) -> tuple[Path, dict[str, str]]:
    work = tmp / "work"
    work.mkdir(parents=True)
    for name in ("charts", "examples"):
        (work / name).symlink_to(ROOT / name)
    home = tmp / "home"
    home.mkdir()
    bin_dir = tmp / "bin"
    _helm_on_path(bin_dir)
    path = [str(bin_dir), str(Path(sys.executable).parent)]
    if KUBECTL:
        path.append(str(Path(KUBECTL).parent))
    path += ["/usr/local/bin", "/usr/bin", "/bin"]
    env = {"HOME": str(home), "PATH": os.pathsep.join(path), "LANG": "C.UTF-8", "TERM": "dumb",
           "HELM_CACHE_HOME": str(home / ".cache/helm"), "HELM_CONFIG_HOME": str(home / ".config/helm"),
           "HELM_DATA_HOME": str(home / ".local/share/helm")}
    return work, env


def run_document(path: Path, tmp: Path) -> list[str]:
    """Run every block of ``path``; returns a transcript (command, exit code, output)."""
    transcript: list[str] = []
    with ExitStack() as stack:
        shells: dict[str, Shell] = {}
        background: list[Background] = []
        stack.callback(lambda: [b.stop() for b in background])
        stack.callback(lambda: [s.close() for s in shells.values()])

        def shell(block: Block) -> Shell:
            if block.context not in shells:
                work, env = _sandbox(tmp / block.context)
                if block.context == "cluster":
                    # "A real cluster": an API server with the training operator's CRDs and
                    # none of ours, which KUBECONFIG already points at.
                    cluster = stack.enter_context(embedded_cluster(tmp / "cluster-server", crds=operator_crds()))
                    env["KUBECONFIG"] = str(cluster.kubeconfig)
                shells[block.context] = Shell(work, env)
            return shells[block.context]

        for block in blocks(path):
            if block.context == "skip":
                for command in block.commands:
                    assert ALLOWED_SKIPS.get(bare(command.text)) is not None, (
                        f"{block.where}: `{command.text}` is skipped ({block.skip_reason}) but not allowed to be")
                continue
            sh = shell(block)
            output = []
            for command in block.commands:
                if re.fullmatch(r"make run(\s+#.*)?", command.text.strip()):
                    # One `make run` per terminal session: a page that shows it twice means
                    # the one the reader has running.
                    if any(b.proc.poll() is None for b in background):
                        continue
                    background.append(start_make_run(sh.cwd, sh.env))
                    output.append(background[-1].log.read_text())
                    transcript.append(f"$ make run  (in the background)\n{output[-1]}")
                    continue
                code, out = sh.run(command.text)
                transcript.append(f"$ {command.text}\n{out}\n[exit {code}]")
                if code != 0:
                    raise CommandFailed(f"{rel(path)}:{command.line}: exit {code}\n$ {command.text}\n"
                                        f"{out}")
                output.append(out)
            for expect in block.expects:
                assert re.search(expect, "\n".join(output)), (
                    f"{block.where}: output does not match {expect!r}:\n" + "\n".join(output))
    return transcript


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of(path: Path, tmp_path: Path) -> None:
    transcript = run_document(path, tmp_path)
    (tmp_path / "transcript.txt").write_text("\n".join(transcript))
    commands = [c for b in blocks(path) if b.context != "skip" for c in b.commands
                if not re.fullmatch(r"make run(\s+#.*)?", c.text.strip())]
    assert len([t for t in transcript if not t.startswith("$ make run")]) == len(commands)


def test_the_docs_show_commands_and_the_harness_sees_them() -> None:
    found = {p.name: len(list(iter_commands(blocks(p)))) for p in documents()}
    assert found["README.md"] >= 10, found
    assert sum(found.values()) >= 20, found
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme and "make test" in readme  # the two commands


def test_skips_are_exactly_the_allowed_ones() -> None:
    skipped = {bare(c.text) for p in documents() for b in blocks(p) if b.context == "skip" for c in b.commands}
    assert skipped <= set(ALLOWED_SKIPS)


def test_make_run_is_koord_queue_up_with_the_example() -> None:
    (recipe,) = make_recipe("run")
    assert recipe.endswith("koord-queue up --state-dir .koord-queue --example")


# --- the harness itself ------------------------------------------------------------

def test_split_commands() -> None:
    lines = [
        "# a comment",
        "kubectl get pods \\",
        "  -A",
        "",
        "cat > f.yaml <<'EOF'",
        "a: 1",
        "# not a comment: inside the heredoc",
        "EOF",
        "echo done",
    ]
    commands = split_commands(lines, 10)
    assert [c.text for c in commands] == [
        "kubectl get pods \\\n  -A",
        "cat > f.yaml <<'EOF'\na: 1\n# not a comment: inside the heredoc\nEOF",
        "echo done",
    ]
    assert [c.line for c in commands] == [11, 14, 18]


def test_markers() -> None:
    assert parse_marker("") == ("embedded", "", [])
    assert parse_marker("cluster expect='Running' expect=\"x y\"") == ("cluster", "", ["Running", "x y"])
    assert parse_marker("skip needs a real cluster") == ("skip", "needs a real cluster", [])
    with pytest.raises(ValueError, match="must say why"):
        parse_marker("skip")
    with pytest.raises(ValueError, match="unknown doctest context"):
        parse_marker("somewhere")


def test_a_failing_command_fails_the_document(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- doctest: cluster -->\n```sh\necho fine\nfalse\necho never\n```\n")
    with pytest.raises(CommandFailed, match="doc.md:4: exit 1"):
        run_document(doc, tmp_path / "run")


def test_state_carries_over_between_blocks_and_expect_is_checked(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- doctest: cluster -->\n```sh\nexport GREETING=hello\ncat > x.txt <<'EOF'\nworld\nEOF\n```\n\n"
        "<!-- doctest: cluster expect='hello world' -->\n```bash\necho \"$GREETING $(cat x.txt)\"\n```\n"
        "<!-- doctest: cluster expect='nope' -->\n```sh\necho something else\n```\n"
    )
    with pytest.raises(AssertionError, match="does not match 'nope'"):
        run_document(doc, tmp_path / "run")
