"""The phase table (controller/phases.py) against the code: every row's writer calls its
status.py function with its phase, every phase-writing call in the controller is a row, and
every phase is reached."""

from __future__ import annotations

import ast
from pathlib import Path

from koordqueue.api import constants as c
from koordqueue.controller import status as st
from koordqueue.controller.phases import NEW, TRANSITIONS, markdown

CONTROLLER = Path(st.__file__).parent
# The status.py functions that set a phase, and the phases each can set.
FIXED = {
    "enqueued": {st.enqueued("why")["phase"]},
    "admitted": {st.admitted({}, "q", "ns/q", checks, 1, 0.0, None)["phase"] for checks in ([], ["check"])},
    "checks_passed": {st.checks_passed(["check"])["phase"]},
    "running": {st.running()["phase"]},
    "finished": {st.finished(True)["phase"], st.finished(False)["phase"]},
}
PATCHES = {*FIXED, "sent_back"}


def _phase_named(node: ast.expr) -> str | None:
    """``c.Phase.PREEMPTED`` -> "Preempted"."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "Phase":
        return c.Phase[node.attr].value
    return None


def phase_writes(sources: dict[str, str] | None = None) -> set[tuple[str, str, str]]:
    """(controller file, status.py function, phase) for every phase the controller writes
    (``sources``: file name -> text, else the controller's files). sent_back's phase is its
    caller's: c.Phase.X passed to it, or to Scheduler.send_back."""
    if sources is None:
        sources = {path.name: path.read_text() for path in sorted(CONTROLLER.glob("*.py"))}
    out = set()
    for name, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            func = node.func
            if isinstance(func.value, ast.Name) and func.value.id == "st" and func.attr in FIXED:
                out |= {(name, func.attr, phase) for phase in FIXED[func.attr]}
            elif func.attr == "sent_back" and isinstance(func.value, ast.Name) and func.value.id == "st":
                phase = _phase_named(node.args[0])
                if phase is not None:  # (else the phase Scheduler.send_back was given: below)
                    out.add((name, "sent_back", phase))
            elif func.attr == "send_back" and len(node.args) > 2:
                phase = _phase_named(node.args[2])
                assert phase is not None, f"{name}:{node.lineno}: send_back's phase as c.Phase.X"
                out.add(("scheduler.py", "sent_back", phase))  # (Scheduler.send_back writes it)
    return out


def test_every_phase_write_of_the_controller_is_in_the_table_and_back() -> None:
    table = {(t.writer, t.patch, t.after.value) for t in TRANSITIONS}
    code = phase_writes()
    assert code - table == set(), "phase writes the table does not show: add rows to controller/phases.py"
    assert table - code == set(), "rows of controller/phases.py no code writes"


def test_every_phase_is_reached_and_only_from_where_it_can_be() -> None:
    assert {t.after for t in TRANSITIONS} == set(c.Phase)
    for t in TRANSITIONS:
        assert t.patch in PATCHES and (CONTROLLER / t.writer).exists()
        assert not (t.before & c.PHASES_FINISHED), f"{t.event}: a finished unit moves no more"
    assert any(NEW in t.before for t in TRANSITIONS)


def test_the_walker_sees_each_way_a_phase_is_written() -> None:
    source = """
async def f(self):
    await self.status.write(k, st.running())
    await self.status.write(k, st.sent_back(c.Phase.PREEMPTED, why, 1, 0.0))
    await self.scheduler.send_back(unit, job, c.Phase.ENQUEUED, why)
    await self.status.write(k, {"message": why})
"""
    assert phase_writes({"jobswitch.py": source}) == {
        ("jobswitch.py", "running", "Running"),
        ("jobswitch.py", "sent_back", "Preempted"),
        ("scheduler.py", "sent_back", "Enqueued"),
    }
    assert ("jobswitch.py", "running", "Running") not in {(t.writer, t.patch, t.after.value) for t in TRANSITIONS}


def test_the_docs_show_the_table() -> None:
    page = (CONTROLLER.parents[2] / "docs" / "architecture.md").read_text()
    assert markdown() in page, "docs/architecture.md's phase table drifted: run make generate"
