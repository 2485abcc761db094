"""Run the shell commands of the README and docs/*.md as a reader would type them.

Every fenced block whose language is ``sh``/``bash``/``shell`` is split into commands
(a ``\\`` continues a line, a heredoc runs to its terminator, ``#`` lines are comments).
A block runs in a *context*, named by an HTML comment on the line before its fence:

    <!-- doctest: embedded -->         the default: the project's own control plane,
                                       started by the reader's `make run` (the Makefile's
                                       recipe, run for real in the background)
    <!-- doctest: cluster -->          "a real cluster": an embedded API server that
                                       KUBECONFIG already points at; helm installs into it
    <!-- doctest: skip REASON -->      not run; REASON is shown, and test_docs.py keeps
                                       the list of skipped commands to an allow-list
    <!-- doctest: ... expect=REGEX --> (repeatable) the block's output must match

Commands of one document run in one bash per context, in order, so `export` and files
written by heredocs carry over as they do in a reader's terminal. Each command must exit
0. The working directory is a scratch copy with `charts/` and `examples/` linked in, PATH
has the project's venv (koord-queue), the fetched helm and kubectl.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = {"sh", "bash", "shell"}
MARKER = re.compile(r"<!--\s*doctest:\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
SENTINEL = "__DOCTEST_RC__"


@dataclass
class Command:
    text: str
    line: int


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    context: str
    skip_reason: str
    expects: list[str]
    commands: list[Command]

    @property
    def where(self) -> str:
        return f"{rel(self.path)}:{self.line}"


def rel(path: Path) -> str:
    """A document's name as messages show it: relative to the repository when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def parse_marker(text: str) -> tuple[str, str, list[str]]:
    """(context, skip reason, expect regexes) of a marker's text."""
    expects = [m.group(2) for m in re.finditer(r"expect=(['\"])(.*?)\1", text)]
    rest = re.sub(r"expect=(['\"]).*?\1", "", text).strip()
    if rest.startswith("skip"):
        reason = rest[len("skip"):].strip()
        if not reason:
            raise ValueError("a doctest skip must say why")
        return "skip", reason, expects
    context = rest or "embedded"
    if context not in {"embedded", "cluster"}:
        raise ValueError(f"unknown doctest context {context!r}")
    return context, "", expects


HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


def complete(text: str) -> bool:
    """Whether ``text`` is a whole shell command: no trailing ``\\``, every heredoc closed
    by its terminator line, and bash parses it (without running it)."""
    if text.endswith("\\"):
        return False
    lines = text.split("\n")
    for n, line in enumerate(lines):
        for match in HEREDOC.finditer(line):
            if match.group(2) not in (other.strip() for other in lines[n + 1:]):
                return False
    return subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode == 0


def split_commands(lines: list[str], first_line: int) -> list[Command]:
    """Commands of a block: lines are joined until bash sees a whole command (so a ``\\``
    continuation, a heredoc, a loop or a quoted newline stays one command); lines that
    start with ``#`` between commands are comments."""
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip() or lines[i].lstrip().startswith("#"):
            i += 1
            continue
        start, text = i, lines[i]
        while not complete(text):
            i += 1
            if i == len(lines):
                raise ValueError(f"line {first_line + start}: the command never ends: {text}")
            text += "\n" + lines[i]
        commands.append(Command(text, first_line + start))
        i += 1
    return commands


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text().splitlines()
    marker: str | None = None
    i = 0
    while i < len(lines):
        found = MARKER.search(lines[i])
        if found:
            marker = found.group(1)
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if fence:
            ticks, lang = fence.group(2), fence.group(3).lower()
            body_start = i + 1
            j = body_start
            while j < len(lines) and not lines[j].strip().startswith(ticks):
                j += 1
            if lang in SHELL_LANGS:
                context, reason, expects = parse_marker(marker or "")
                body = [line[len(fence.group(1)):] for line in lines[body_start:j]]
                out.append(Block(path, i + 1, lang, context, reason, expects,
                                 split_commands(body, body_start + 1)))
            elif marker is not None:
                raise ValueError(f"{path}:{i + 1}: a doctest marker stands before a {lang or 'plain'} block")
            marker = None
            i = j + 1
            continue
        if lines[i].strip():
            marker = None  # a marker applies to the very next block only
        i += 1
    return out


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# --- running ------------------------------------------------------------------------

class CommandFailed(AssertionError):
    pass


@dataclass
class Shell:
    """One bash, fed commands one at a time; its stdout and stderr read together."""

    cwd: Path
    env: dict[str, str]
    proc: subprocess.Popen[str] = field(init=False)
    _lines: queue.Queue[str | None] = field(init=False, default_factory=queue.Queue)

    def __post_init__(self) -> None:
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=self.cwd, env=self.env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        self.run("set -o pipefail", timeout=10)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def run(self, command: str, timeout: float = 60) -> tuple[int, str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{command}\nprintf '\\n{SENTINEL}%s\\n' \"$?\"\n")
        self.proc.stdin.flush()
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise CommandFailed(f"timed out after {timeout} s: {command}\n{''.join(out)}") from None
            if line is None:
                raise CommandFailed(f"the shell ended during: {command}\n{''.join(out)}")
            if line.startswith(SENTINEL):
                text = "".join(out)
                return int(line[len(SENTINEL):]), text[:-1] if text.endswith("\n") else text
            out.append(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)


def make_recipe(target: str) -> list[str]:
    """The commands of a Makefile target, with $(BIN) as the venv's bin (as make would)."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert match, f"no {target} target in the Makefile"
    variables = {"BIN": str(ROOT / ".venv" / "bin"), "VENV": str(ROOT / ".venv")}
    recipe = []
    for line in match.group(1).splitlines():
        recipe.append(re.sub(r"\$\((\w+)\)", lambda m: variables[m.group(1)], line.strip()))
    return recipe


@dataclass
class Background:
    """`make run`: its recipe running in the background, as in the reader's first terminal."""

    proc: subprocess.Popen[str]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 2)  # Ctrl-C, as the README says
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)


def start_make_run(cwd: Path, env: dict[str, str], ready_text: str = "Press Ctrl-C", timeout: float = 60) -> Background:
    (recipe,) = make_recipe("run")
    log = cwd / "make-run.log"
    handle = log.open("w")
    proc = subprocess.Popen(shlex.split(recipe), cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready_text in log.read_text():
            return Background(proc, log)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    Background(proc, log).stop()
    raise CommandFailed(f"make run did not come up:\n{log.read_text()}")


def iter_commands(bs: list[Block]) -> Iterator[tuple[Block, Command]]:
    for block in bs:
        for command in block.commands:
            yield block, command
