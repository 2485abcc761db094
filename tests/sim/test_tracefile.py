"""Reading trace files: YAML built from libyaml's events as PyYAML builds it, JSON by the
C scanner, large traces read as the clock reaches their jobs, and everything streaming
cannot take read whole with the same results."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.sim import tracefile
from koordqueue.sim.report import render_json, render_summary
from koordqueue.sim.simulator import Simulator, simulate, simulate_file
from koordqueue.sim.trace import JobEntry, TraceError, parse_trace
from koordqueue.sim.tracefile import ReadWhole, load_trace

from .builders import GPU, elastic_quota, job, pytorch_job, simulated_whole

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "traces").glob("*.yaml"))

SCALARS = """\
plain: [word, 12, -0x1A, 0o17, 1_000, 190:20:30, 1.5, -.inf, .Inf, 6.8523015e+5, 685_230.15, 1e3]
bools: [yes, No, on, OFF, true, False, y, n]
nulls: [~, null, Null, "null"]
empty:
dates: [2002-12-14, 2001-12-14t21:59:43.10-05:00, 2001-12-14 21:59:43.10]
quoted: ['12', "1.5", 'yes', "tab\\there", "\\u00e9t\\u00e9"]
tagged: [!!str 123, !!int "7", !!float '1', !!bool "true", !!null "", ! 12]
binary: !!binary aGVsbG8=
block: |
  two
  lines
folded: >
  one
  line
keys: {1: int, 2.5: float, ~: null, true: bool, 2002-12-14: date, "": empty}
anchors:
  - &scalar 42
  - *scalar
  - &map {a: [1, 2], b: {c: d}}
  - *map
  - &list [x, y]
  - [*list, *map]
unicode: "日本語 ✓"
"""


def read_events(text: str, tmp_path: Path) -> Any:
    path = tmp_path / "doc.yaml"
    path.write_text(text, encoding="utf-8")
    with path.open("rb") as file:
        return tracefile._YamlStream(file, path).document()


def test_yaml_built_from_events_is_what_pyyaml_builds(tmp_path: Path) -> None:
    built = read_events(SCALARS, tmp_path)
    assert built == yaml.safe_load(SCALARS) == yaml.load(SCALARS, Loader=yaml.CSafeLoader)
    assert [type(v) for v in built["plain"]] == [type(v) for v in yaml.safe_load(SCALARS)["plain"]]
    assert built["anchors"][2] is built["anchors"][3]  # an alias is the same object, as PyYAML makes it


def test_not_a_number_is_read_as_pyyaml_reads_it(tmp_path: Path) -> None:
    assert math.isnan(read_events("x: .NaN\n", tmp_path)["x"])


@pytest.mark.parametrize("trace", EXAMPLES, ids=lambda path: path.stem)
def test_every_example_reads_as_pyyaml_reads_it(trace: Path) -> None:
    with trace.open("rb") as file:
        assert tracefile._YamlStream(file, trace).document() == yaml.safe_load(trace.read_text())


@pytest.mark.parametrize(
    "text",
    [
        "base: &b {a: 1}\nmerged: {<<: *b, c: 2}\n",  # merge keys
        "s: !!set {a, b}\n",
        "o: !!omap [a: 1, b: 2]\n",
        "r: &r [1, *r]\n",  # an alias inside its own anchor
        "? [1, 2]\n: unhashable\n",
        "'=': value key\n",
    ],
)
def test_rare_yaml_is_left_to_pyyaml(text: str, tmp_path: Path) -> None:
    with pytest.raises(ReadWhole):
        read_events(text, tmp_path)


def write_trace(tmp_path: Path, document: dict[str, Any], as_json: bool = False, name: str = "trace") -> Path:
    path = tmp_path / (name + (".json" if as_json else ".yaml"))
    text = json.dumps(document, ensure_ascii=False) if as_json else yaml.dump(
        document, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True)
    path.write_text(text, encoding="utf-8")
    return path


def old_run(path: Path) -> str:
    """What the simulator printed when every trace was read whole by PyYAML."""
    result = simulated_whole(path) if path.parent == EXAMPLES[0].parent else \
        simulate(parse_trace(yaml.safe_load(path.read_text())))
    return render_json(result) + render_summary(result)


def new_run(path: Path) -> str:
    result, _ = simulate_file(str(path))
    return render_json(result) + render_summary(result)


TEAM = elastic_quota("team", {GPU: "0"}, {GPU: "8"})


def jobs(count: int, descending: bool = False) -> list[dict[str, Any]]:
    times = [count - i if descending else i // 3 for i in range(count)]
    return [job(at, pytorch_job(f"job-{i}", "team", {GPU: str(1 + i % 4)}), runtime=5 + i % 7)
            for i, at in enumerate(times)]


@pytest.mark.parametrize("as_json", [False, True], ids=["yaml", "json"])
@pytest.mark.parametrize(
    "document",
    [
        {"objects": [TEAM], "jobs": jobs(60)},  # streamed
        {"objects": [TEAM], "jobs": jobs(60, descending=True)},  # out of time order: read whole
        {"jobs": jobs(60), "objects": [TEAM], "until": 30},  # keys after the jobs: read whole
        {"objects": [TEAM], "until": 12, "jobs": jobs(60), "x-after": 1},  # ends before the last job
        {"objects": [TEAM], "jobs": [], "events": []},
        {"objects": [TEAM], "jobs": "not a list"},
        {"objects": [TEAM], "jobs": jobs(5) + [None, {"at": -1, "manifest": 3}], "mystery": 1},
    ],
    ids=["in-order", "out-of-order", "jobs-first", "until", "empty", "not-a-list", "bad-entries"],
)
def test_a_streamed_trace_gives_what_reading_it_whole_gave(
    document: dict[str, Any], as_json: bool, tmp_path: Path
) -> None:
    path = write_trace(tmp_path, document, as_json)
    assert new_run(path) == old_run(path)


@pytest.mark.parametrize("trace", EXAMPLES, ids=lambda path: path.stem)
def test_every_example_as_json_gives_what_it_gives_as_yaml(trace: Path, tmp_path: Path) -> None:
    as_json = write_trace(tmp_path, yaml.safe_load(trace.read_text()), as_json=True)
    assert new_run(as_json) == new_run(trace) == old_run(trace)


def test_yaml_in_braces_is_read_as_yaml(tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text(yaml.safe_dump({"objects": [TEAM], "jobs": jobs(5)}, default_flow_style=True))
    assert path.read_text().startswith("{") and not path.read_text().startswith('{"')
    assert new_run(path) == old_run(path)
    commented = tmp_path / "commented.yaml"
    commented.write_text('{"objects": [], "jobs": [] # a comment\n}\n')
    assert new_run(commented) == old_run(commented)


def test_json_is_read_in_chunks_cut_anywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Chunks of a few bytes cut numbers, strings and two-byte characters in two."""
    document = {"objects": [TEAM], "until": 123456.75, "jobs": jobs(12)}
    for entry in document["jobs"]:
        entry["manifest"]["metadata"]["annotations"] = {"note": "été ✓ 日本"}
    path = write_trace(tmp_path, document, as_json=True)
    monkeypatch.setattr(tracefile, "CHUNK", 3)
    trace = load_trace(path)
    assert trace.until == 123456.75
    assert [entry.manifest for entry in trace.jobs] == [entry["manifest"] for entry in document["jobs"]]


@pytest.mark.parametrize("as_json", [False, True], ids=["yaml", "json"])
def test_a_large_trace_is_read_as_the_clock_reaches_its_jobs(
    as_json: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the keys before the jobs are read at first, and the jobs a few at a time."""
    monkeypatch.setattr(tracefile, "CHUNK", 1 << 16)
    document = {"objects": [TEAM], "jobs": jobs(9000)}
    path = write_trace(tmp_path, document, as_json=True)
    if not as_json:  # YAML with each entry in flow style (JSON is YAML), written fast
        path = tmp_path / "trace.yaml"
        path.write_text(f"objects: {json.dumps(document['objects'])}\njobs:\n"
                        + "".join(f"- {json.dumps(entry)}\n" for entry in document["jobs"]))
    size = path.stat().st_size
    trace = load_trace(path)
    file = trace.jobs.gi_frame.f_locals["self"].file  # type: ignore[attr-defined]
    assert file.tell() < size / 2
    first = next(iter(trace.jobs))
    assert first.manifest["metadata"]["name"] == "job-0" and file.tell() < size / 2
    if as_json:  # what is buffered stays about a chunk, however far the file is read
        reader = trace.jobs.gi_frame.f_locals["self"]  # type: ignore[attr-defined]
        buffered = [len(reader.text) for _ in trace.jobs]
        assert len(buffered) == 8999 and max(buffered) <= 2 * tracefile.CHUNK < size


def test_a_syntax_error_after_the_jobs_is_still_an_error(tmp_path: Path) -> None:
    path = write_trace(tmp_path, {"objects": [TEAM], "until": 1, "jobs": jobs(30)})
    path.write_text(path.read_text() + "  - {at: [\n")
    with pytest.raises(TraceError, match="is not valid YAML"):
        simulate_file(str(path))


def test_the_simulator_takes_jobs_as_the_clock_reaches_them() -> None:
    """It asks for the next job only when the one before arrives."""
    taken: list[float] = []
    entries = [JobEntry(i, float(i * 10), 5.0, pytorch_job(f"job-{i}", "team", {GPU: "1"})) for i in range(20)]

    def source() -> Iterator[JobEntry]:
        for entry in entries:
            taken.append(entry.at)
            yield entry

    trace = parse_trace({"objects": [TEAM]})
    trace.jobs = source()
    simulator = Simulator(trace)
    seen: list[tuple[float, int]] = []
    cycle = simulator._cycle

    def watched_cycle() -> float | None:
        seen.append((simulator.now, len(taken)))
        return cycle()

    simulator._cycle = watched_cycle  # type: ignore[method-assign]
    result = simulator.run()
    assert all(job.finished is not None for job in result.jobs) and len(result.jobs) == 20
    arrivals = [(now, count) for now, count in seen if now % 10 == 0]
    assert arrivals and all(count <= now / 10 + 2 for now, count in arrivals), arrivals


def test_a_streamed_trace_out_of_time_order_is_read_whole(tmp_path: Path) -> None:
    path = write_trace(tmp_path, {"objects": [TEAM], "jobs": jobs(10, descending=True)})
    with pytest.raises(ReadWhole):
        simulate(load_trace(path))
    result, _ = simulate_file(str(path))
    assert [job.name for job in result.jobs] == [f"job-{i}" for i in reversed(range(10))]
