"""`koord-queue simulate TRACE --html FILE [--compare OTHER]`: the run as one HTML page.

One self-contained file (inline CSS, JS and SVG; nothing fetched) that an
administrator can mail around: usage of each resource per quota over time, the wait
to first admission per quota and per priority, and the queue length over time. With
``--compare`` two traces (say, two quota settings) stand side by side on shared axes.
With nodes, the fragmentation of the cluster (the room left on one node against the room
left on all of them) and the topology domains the engine gave to jobs.

The job records keep the first admission and the end of each job, not every spell
of holding quota a preempted job had; so the simulator is asked to keep every
admission and release (``keep_holdings``), which is exactly what its own usage book
is charged with. Every plotted series carries its numbers (``data-points``,
``data-wait``) and the page embeds them as JSON, so they can be checked against
``--json``.
"""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from koordqueue.api.constants import PODS
from koordqueue.api.quantity import format_quantity

from .report import percentile, render_json, render_summary
from .simulator import Holding, JobRecord, SimResult, simulate_file

ASSETS = Path(__file__).resolve().parent
QUANTITY_JS = ASSETS.parent / "dashboard" / "static" / "quantity.js"
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B")
DASHES = ("", "2 3", "8 3 2 3")  # after the colours run out; "6 3" marks parent quotas
PARENT_DASH = "6 3"
WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 12, 34
CHAR_WIDTH = 6.5  # of an 11px label, to leave room for lane names
BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)

Points = list[list[float]]  # [[time, value], ...], a step function: value holds until the next time


@dataclass
class Run:
    """One simulated trace and the series drawn from it."""

    label: str
    result: SimResult
    usage: dict[str, dict[str, Points]] = field(default_factory=dict)  # quota -> resource -> milli-units
    queue_length: dict[str, Points] = field(default_factory=dict)  # queue key (or "all queues") -> units waiting
    waits: list[dict[str, Any]] = field(default_factory=list)  # one per submitted job
    node_resource: str | None = None  # the resource whose room on the nodes is drawn (the GPUs)
    node_room: dict[str, Points] = field(default_factory=dict)  # see node_room_series


def simulate_run(path: str) -> Run:
    result, kept = simulate_file(path, keep_holdings=True)
    holdings = kept or []
    run = Run(Path(path).name, result)
    run.usage = usage_series(holdings, result)
    run.queue_length = queue_length_series(holdings, result)
    run.waits = wait_rows(result.jobs)
    run.node_resource, run.node_room = node_room_series(result)
    return run


def _step(points: Points, time: float, value: float) -> None:
    """Append a step, folding changes at one instant into one point."""
    if points and points[-1][0] == time:
        points[-1][1] = value
    else:
        points.append([time, value])


def usage_series(holdings: Sequence[Holding], result: SimResult) -> dict[str, dict[str, Points]]:
    """Per quota and resource, what its admitted jobs hold over time (milli-units), 0 to the end."""
    names = list(result.quotas) + sorted({q for h in holdings for q in h.quotas} - set(result.quotas))
    resources = {r for quota in result.quotas.values() for r in (*quota.min, *quota.max)}
    resources |= {r for h in holdings for r in h.record.request}
    levels = {(q, r): 0 for q in names for r in resources}
    series: dict[str, dict[str, Points]] = {q: {r: [[0.0, 0]] for r in sorted(resources)} for q in names}
    for holding in holdings:
        for quota in holding.quotas:
            for resource, amount in (holding.held or holding.record.request).items():
                levels[quota, resource] += holding.sign * amount
                _step(series[quota][resource], holding.time, levels[quota, resource])
    for quota in names:
        for resource, points in series[quota].items():
            _step(points, result.end, levels[quota, resource])
    return series


MOST_ON_ONE = "most free on one node"
ALL_FREE = "free on all nodes"
NODE_LINES = 8  # nodes drawn one by one up to this many; beyond, only the two summaries


def node_room_series(result: SimResult) -> tuple[str | None, dict[str, Points]]:
    """The room left on the nodes over time, of the resource that matters most (the GPUs):
    on all of them, on the one with the most (a gang's pod needs it on one), and, on a
    small cluster, on each. Far apart, the cluster is fragmented."""
    rooms = result.node_free_at
    resources = {r for room in rooms for r in room.free} - {PODS}
    if not resources:
        return None, {}
    resource = min(resources, key=_resource_order)
    one_by_one = len({room.node for room in rooms}) <= NODE_LINES
    free: dict[str, int] = {}
    series: dict[str, Points] = {MOST_ON_ONE: [], ALL_FREE: []}
    for room in rooms:  # in time order, each the room left on a node from then on
        free[room.node] = room.free.get(resource, 0)
        if one_by_one:
            _step(series.setdefault(room.node, []), room.time, free[room.node])
        _step(series[MOST_ON_ONE], room.time, max(free.values()))
        _step(series[ALL_FREE], room.time, sum(free.values()))
    for points in series.values():
        if points[-1][0] < result.end:
            points.append([result.end, points[-1][1]])
    return resource, series


def domain_rows(jobs: Iterable[JobRecord]) -> list[dict[str, Any]]:
    """The jobs given a topology domain or admitted in part (at their last admission)."""
    rows = []
    for job in jobs:
        if job.domains or job.counts:
            rows.append({"job": f"{job.namespace}/{job.name}", "quota": job.quota,
                         "domains": [f"{pod_set}: {level}={domain}" for pod_set, level, domain in job.domains],
                         "admitted": [f"{pod_set} {count} of {_asked(job, pod_set)}" for pod_set, count in job.counts]})
    return rows


def _asked(job: JobRecord, pod_set: str) -> int:
    return next((ps.count for ps in job.pod_sets if ps.name == pod_set), 0)


def queue_length_series(holdings: Sequence[Holding], result: SimResult) -> dict[str, Points]:
    """How many submitted jobs wait (not holding quota) over time, per queue and in all."""
    changes: list[tuple[float, int, str]] = []
    waiting: dict[int, JobRecord] = {}
    for record in result.jobs:
        if record.submitted is not None:
            changes.append((record.submitted, 1, record.queue or "(no queue)"))
            waiting[id(record)] = record
    for holding in holdings:
        queue = holding.record.queue or "(no queue)"
        if holding.sign > 0:
            changes.append((holding.time, -1, queue))
            waiting.pop(id(holding.record), None)
        elif holding.requeued:
            changes.append((holding.time, 1, queue))
            waiting[id(holding.record)] = holding.record
    for record in waiting.values():  # deleted while waiting
        if record.deleted is not None:
            changes.append((record.deleted, -1, record.queue or "(no queue)"))
    changes.sort(key=lambda change: change[0])
    keys = sorted({queue for _, _, queue in changes})
    counts = dict.fromkeys([*keys, "all queues"], 0)
    series: dict[str, Points] = {key: [[0.0, 0]] for key in counts}
    for time, delta, queue in changes:
        for key in (queue, "all queues"):
            counts[key] += delta
            _step(series[key], time, counts[key])
    for key, points in series.items():
        _step(points, result.end, counts[key])
    return series


def wait_rows(jobs: Iterable[JobRecord]) -> list[dict[str, Any]]:
    """Each submitted job's wait to first admission (None: never admitted), as in --json."""
    rows = []
    for record in jobs:
        if record.submitted is None:
            continue
        wait = None if record.admitted is None else round(record.admitted - record.submitted, 6)
        rows.append({"job": f"{record.namespace}/{record.name}", "quota": record.quota, "priority": record.priority,
                     "wait": wait})
    return rows


# --- drawing -----------------------------------------------------------------------------


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def format_seconds(seconds: float, step: float) -> str:
    """A tick's time in the unit its axis steps in (30 min, not 1800 s)."""
    if step >= 3600:
        return f"{seconds / 3600:g} h"
    if step >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def time_ticks(end: float) -> tuple[float, list[float]]:
    """0 to a round top at or above ``end`` in at most 6 steps a clock reads (5 min, 1 h)."""
    step = next((s for s in TIME_STEPS if s * 6 >= end), TIME_STEPS[-1] * (int(end // (TIME_STEPS[-1] * 6)) + 1))
    top = max(step, -(-end // step) * step)
    return top, [i * step for i in range(int(top // step) + 1)]


def amount_ticks(peak: float, binary: bool = False) -> tuple[float, list[float]]:
    """0 to a round top at or above ``peak`` in at most 5 steps: 1, 2 or 5 times a power of
    ten, or a power of two of whole units when the amounts are binary (memory: ticks at
    64Gi, not 50G)."""
    if peak <= 0:
        return 1.0, [0.0, 1.0]
    if binary:
        step = 1000.0  # one unit, in milli-units
        while step * 5 < peak:
            step *= 2
    else:
        magnitude = 10 ** (len(str(int(peak / 4))) - 1) if peak >= 4 else 1
        step = next(m * magnitude for m in (1, 2, 5, 10, 20) if m * magnitude * 5 >= peak)
    top = -(-peak // step) * step
    return top, [i * step for i in range(int(top // step) + 1)]


def is_binary(milli: int) -> bool:
    """Whether an amount reads best with a binary suffix (memory, storage)."""
    return format_quantity(milli).endswith(BINARY_SUFFIXES)


def approximate_quantity(milli: float, binary: bool) -> str:
    """A non-integral amount (an average) in three figures, in the suffix its peers are written in."""
    units = milli / 1000
    if binary:
        for power, suffix in reversed(list(enumerate(BINARY_SUFFIXES, start=1))):
            if units >= 1024**power:
                return f"{units / 1024**power:.3g}{suffix}"
    return f"{units:.3g}"


class Chart:
    """An SVG frame with axes: maps time (x) and an amount (y) onto the plot area."""

    def __init__(self, chart_id: str, title: str, description: str, x_top: float, y_top: float,
                 left: float = LEFT) -> None:
        self.chart_id, self.title, self.description = chart_id, title, description
        self.x_top, self.y_top = x_top or 1.0, y_top or 1.0
        self.left = left
        self.parts: list[str] = []

    def x(self, value: float) -> float:
        return round(self.left + (WIDTH - self.left - RIGHT) * value / self.x_top, 2)

    def y(self, value: float) -> float:
        return round(HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * value / self.y_top, 2)

    def axes(self, x_ticks: Sequence[tuple[float, str]], y_ticks: Sequence[tuple[float, str]], x_name: str) -> None:
        for value, label in y_ticks:
            y = self.y(value)
            self.parts.append(f'<line class="grid" x1="{self.left}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}"/>'
                              f'<text class="tick" x="{self.left - 6}" y="{y + 4}" text-anchor="end">'
                              f"{_esc(label)}</text>")
        for value, label in x_ticks:
            x = self.x(value)
            self.parts.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>'
                              f'<text class="tick" x="{x}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                              f'{_esc(label)}</text>')
        self.parts.append(f'<text class="axis-name" x="{WIDTH - RIGHT}" y="{HEIGHT - 2}" text-anchor="end">'
                          f'{_esc(x_name)}</text>')

    def svg(self, kind: str, height: float = HEIGHT) -> str:
        return (f'<svg class="plot" viewBox="0 0 {WIDTH} {height}" role="img" '
                f'aria-labelledby="{self.chart_id}-t {self.chart_id}-d" data-kind="{kind}" '
                f'data-x-top="{self.x_top}" data-left="{self.left}" data-right="{WIDTH - RIGHT}">'
                f'<title id="{self.chart_id}-t">{_esc(self.title)}</title>'
                f'<desc id="{self.chart_id}-d">{_esc(self.description)}</desc>' + "".join(self.parts) + "</svg>")


def step_path(chart: Chart, points: Points) -> str:
    d = [f"M{chart.x(points[0][0])},{chart.y(points[0][1])}"]
    for time, value in points[1:]:
        d.append(f"H{chart.x(time)}V{chart.y(value)}")
    return "".join(d)


@dataclass(frozen=True)
class Line:
    name: str
    color: str
    dash: str
    points: Points
    note: str  # the legend's text after the name


def _stroke(line: Line) -> str:
    return f'stroke="{line.color}"' + (f' stroke-dasharray="{line.dash}"' if line.dash else "")


def step_chart(chart_id: str, title: str, lines: Sequence[Line], x_top: float, y_top: float, y_format: str,
               kind: str, attrs: str) -> str:
    """A figure with one step line per series, its legend, and a readout the script fills on hover.

    ``y_format``: "quantity" (milli-units, labelled as the CLI writes them) or "count".
    """
    x_top, x_ticks = time_ticks(x_top)
    binary = y_format == "quantity" and is_binary(int(y_top))
    y_top, y_ticks = amount_ticks(y_top, binary)
    chart = Chart(chart_id, title, "; ".join(f"{line.name}: {line.note}" for line in lines), x_top, y_top)
    label = format_quantity if y_format == "quantity" else (lambda v: f"{v:g}")
    step = x_ticks[1] if len(x_ticks) > 1 else 1
    chart.axes([(t, format_seconds(t, step)) for t in x_ticks], [(v, label(int(v))) for v in y_ticks], "time")
    for line in lines:
        chart.parts.append(
            f'<path class="series" d="{step_path(chart, line.points)}" {_stroke(line)} '
            f'data-series="{_esc(line.name)}" data-points="{_esc(json.dumps(line.points))}"><title>'
            f"{_esc(line.name)}: {_esc(line.note)}</title></path>")
    legend = "".join(
        f'<li><svg class="key" viewBox="0 0 24 10" aria-hidden="true"><line x1="0" x2="24" y1="5" y2="5" '
        f"{_stroke(line)}/></svg><strong>{_esc(line.name)}</strong> {_esc(line.note)}</li>" for line in lines)
    return (f'<figure class="chart" {attrs} data-format="{y_format}">{chart.svg(kind)}'
            f'<figcaption><ul class="legend">{legend}</ul>'
            f'<p class="readout" data-hint="Point at the plot to read the values at a moment."></p>'
            f"</figcaption></figure>")


def _wait_note(waits: Sequence[float], never: int) -> str:
    parts = [f"{len(waits)} admitted"]
    if waits:
        parts += [f"p50 {percentile(waits, 0.5):g} s", f"p90 {percentile(waits, 0.9):g} s", f"max {max(waits):g} s"]
    if never:
        parts.append(f"{never} never admitted")
    return ", ".join(parts)


def wait_chart(chart_id: str, title: str, lanes: Sequence[tuple[str, list[dict[str, Any]]]], x_top: float,
               left: float, attrs: str) -> str:
    """A strip plot: one lane per group, a dot per admitted job, ticks at the median and the 90th percentile."""
    lane_height = 34
    height = TOP + lane_height * max(1, len(lanes)) + BOTTOM
    top, ticks = amount_ticks(x_top)
    chart = Chart(chart_id, title, "", top, 1.0, left)
    step = ticks[1] if len(ticks) > 1 else 1
    notes = []
    for index, (name, rows) in enumerate(lanes):
        center = TOP + lane_height * index + lane_height / 2
        waits = [row["wait"] for row in rows if row["wait"] is not None]
        never = sum(1 for row in rows if row["wait"] is None)
        note = _wait_note(waits, never)
        notes.append(f"{name}: {note}")
        chart.parts.append(f'<g class="lane" data-lane="{_esc(name)}">'
                           f'<text class="lane-name" x="{left - 6}" y="{center + 4}" text-anchor="end">'
                           f"{_esc(name)}</text>")
        for number, row in enumerate(r for r in rows if r["wait"] is not None):
            jitter = ((number * 7919) % 13 - 6) * 1.6
            chart.parts.append(f'<circle cx="{chart.x(row["wait"])}" cy="{round(center + jitter, 2)}" r="3.5" '
                               f'data-job="{_esc(row["job"])}" data-wait="{row["wait"]}">'
                               f'<title>{_esc(row["job"])}: {row["wait"]:g} s</title></circle>')
        for fraction, css in ((0.5, "p50"), (0.9, "p90")):
            if waits:
                x = chart.x(percentile(waits, fraction))
                chart.parts.append(f'<line class="{css}" x1="{x}" x2="{x}" y1="{center - 14}" y2="{center + 14}"/>')
        chart.parts.append("</g>")
    for value in ticks:
        x = chart.x(value)
        chart.parts.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{TOP}" y2="{height - BOTTOM}"/>'
                           f'<text class="tick" x="{x}" y="{height - BOTTOM + 16}" text-anchor="middle">'
                           f"{_esc(format_seconds(value, step))}</text>")
    chart.parts.append(f'<text class="axis-name" x="{WIDTH - RIGHT}" y="{height - 2}" text-anchor="end">'
                       "wait to first admission</text>")
    chart.description = "; ".join(notes)
    svg = chart.svg("waits", height)
    legend = "".join(f"<li>{_esc(note)}</li>" for note in notes)
    return (f'<figure class="chart" {attrs}>{svg}<figcaption><ul class="legend plain">{legend}</ul>'
            '<p class="muted">Each dot is a job; the long tick is the median, the short one the 90th '
            "percentile.</p></figcaption></figure>")


# --- the page ----------------------------------------------------------------------------


def wait_lanes(waits: Sequence[dict[str, Any]], group: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """The lanes of a wait plot: one per quota (by name), or per priority (highest first)."""
    if group == "priority":
        priorities = sorted({row["priority"] for row in waits}, key=lambda p: (p is None, -(p or 0)))
        return [(f"priority {p}", [row for row in waits if row["priority"] == p]) for p in priorities]
    quotas = sorted({row["quota"] for row in waits}, key=lambda q: (q is None, q or ""))
    return [(q or "(no quota)", [row for row in waits if row["quota"] == q]) for q in quotas]


def _resource_order(resource: str) -> tuple[int, str]:
    return (0 if "gpu" in resource else 1 if resource == "cpu" else 2 if resource == "memory" else 3, resource)


def _mean(points: Points, end: float) -> float:
    area = sum(value * (points[i + 1][0] - time) for i, (time, value) in enumerate(points[:-1]))
    return area / end if end > 0 else 0.0


def _quota_note(run: Run, quota: str, resource: str, points: Points) -> str:
    info = run.result.quotas.get(quota)
    limits = []
    if info is not None:
        if resource in info.min:
            limits.append(f"min {format_quantity(info.min[resource])}")
        if resource in info.max:
            limits.append(f"max {format_quantity(info.max[resource])}")
        if info.is_parent:
            limits.append("parent")
    peak = max(int(value) for _, value in points)
    mean = approximate_quantity(_mean(points, run.result.end), is_binary(peak))
    prefix = f"({', '.join(limits)}) " if limits else ""
    return f"{prefix}peak {format_quantity(peak)}, time average {mean}"


def _runs_grid(cells: Sequence[str]) -> str:
    return f'<div class="runs runs-{len(cells)}">' + "".join(f'<div class="run">{cell}</div>' for cell in cells) + "</div>"


def _run_heading(run: Run, runs: int) -> str:
    """The trace's name above each plot, when runs stand side by side."""
    return f'<h4 class="run-name">{_esc(run.label)}</h4>' if runs > 1 else ""


def render_html(runs: Sequence[Run]) -> str:
    """The report page for one run, or for runs side by side on shared axes."""
    end = max(run.result.end for run in runs) or 1.0
    quotas = sorted({q for run in runs for q in run.usage})
    color = {q: COLORS[i % len(COLORS)] for i, q in enumerate(quotas)}
    dash = {q: DASHES[(i // len(COLORS)) % len(DASHES)] for i, q in enumerate(quotas)}
    parents = {name for run in runs for name, info in run.result.quotas.items() if info.is_parent}
    resources = sorted({r for run in runs for series in run.usage.values() for r, points in series.items()
                        if any(value for _, value in points)}, key=_resource_order)
    sections: list[str] = []

    summary = []
    for run in runs:
        jobs = run.result.jobs
        finished = sum(1 for job in jobs if job.finished is not None)
        summary.append(
            f"{_run_heading(run, len(runs))}<p>{_esc(run.result.end)} s simulated, {len(jobs)} jobs, "
            f"{finished} finished, {sum(job.preemptions for job in jobs)} preemptions.</p>"
            f'<pre class="summary" tabindex="0">{_esc(render_summary(run.result))}</pre>')
    sections.append('<section aria-labelledby="summary"><h2 id="summary">Summary</h2>'
                    '<p class="muted">As <code>koord-queue simulate</code> prints it.</p>' + _runs_grid(summary) + "</section>")

    usage = ['<section aria-labelledby="usage"><h2 id="usage">Usage per quota over time</h2>'
             '<p class="muted">What the jobs each quota admitted hold, from admission to their end or preemption '
             "(a parent quota counts its children's). Dashed lines are parent quotas.</p>"]
    for resource in resources:
        peak = max(max(value for _, value in points)
                   for run in runs for series in run.usage.values() for r, points in series.items() if r == resource)
        cells = []
        for index, run in enumerate(runs):
            lines = [Line(quota, color[quota], PARENT_DASH if quota in parents else dash[quota],
                          run.usage[quota][resource], _quota_note(run, quota, resource, run.usage[quota][resource]))
                     for quota in run.usage if resource in run.usage[quota]]
            attrs = f'data-chart="usage" data-run="{index}" data-resource="{_esc(resource)}"'
            cells.append(_run_heading(run, len(runs)) + (step_chart(
                f"usage-{index}-{resources.index(resource)}", f"{resource} used per quota over time ({run.label})",
                lines, end, peak, "quantity", "usage", attrs) if lines else
                f'<p class="muted" {attrs}>No quota of this run limits or uses {_esc(resource)}.</p>'))
        usage.append(f"<h3>{_esc(resource)}</h3>" + _runs_grid(cells))
    sections.append("".join(usage) + "</section>")

    longest = max([row["wait"] for run in runs for row in run.waits if row["wait"] is not None] or [0.0])
    waits = ['<section aria-labelledby="waits"><h2 id="waits">Wait to first admission</h2>'
             '<p class="muted">From submission to the first admission, per job.</p>']
    for group in ("quota", "priority"):
        lanes_of_runs = [wait_lanes(run.waits, group) for run in runs]
        # one left margin for all runs, wide enough for the longest lane name: the axes line up
        left = max([LEFT] + [12 + CHAR_WIDTH * len(lane) for lanes in lanes_of_runs for lane, _ in lanes])
        cells = [_run_heading(run, len(runs)) + wait_chart(
            f"waits-{group}-{index}", f"Wait to first admission by {group} ({run.label})", lanes, longest, left,
            f'data-chart="waits-by-{group}" data-run="{index}"')
            for index, (run, lanes) in enumerate(zip(runs, lanes_of_runs, strict=True))]
        waits.append(f"<h3>By {group}</h3>" + _runs_grid(cells))
    sections.append("".join(waits) + "</section>")

    most = max(max(value for _, value in points) for run in runs for points in run.queue_length.values()) \
        if any(run.queue_length for run in runs) else 0
    queue_keys = sorted({key for run in runs for key in run.queue_length} - {"all queues"})
    queue_color = {key: COLORS[i % len(COLORS)] for i, key in enumerate(queue_keys)} | {"all queues": "#000000"}
    queue_dash = {key: DASHES[(i // len(COLORS)) % len(DASHES)] for i, key in enumerate(queue_keys)}
    queue_dash["all queues"] = "2 3"
    cells = []
    for index, run in enumerate(runs):
        queues = [key for key in run.queue_length if key != "all queues"]
        shown = queues + (["all queues"] if len(queues) > 1 or not queues else [])
        lines = [Line(key, queue_color[key], queue_dash[key], run.queue_length[key],
                      f"at most {max(int(v) for _, v in run.queue_length[key])} waiting") for key in shown]
        cells.append(_run_heading(run, len(runs)) + step_chart(
            f"queue-{index}", f"Jobs waiting per queue over time ({run.label})", lines, end, most, "count",
            "queue", f'data-chart="queue-length" data-run="{index}"'))
    sections.append('<section aria-labelledby="queue"><h2 id="queue">Queue length over time</h2>'
                    '<p class="muted">Submitted jobs not holding quota: waiting, or backing off after a preemption.</p>'
                    + _runs_grid(cells) + "</section>")

    if any(run.node_room for run in runs):
        sections.append(_nodes_section(runs, end))

    warnings = [(run, run.result.warnings) for run in runs if run.result.warnings]
    if warnings:
        sections.append('<section aria-labelledby="warnings"><h2 id="warnings">Warnings</h2>' + "".join(
            f"<h3>{_esc(run.label)}</h3><ul>" + "".join(f"<li>{_esc(w)}</li>" for w in items) + "</ul>"
            for run, items in warnings) + "</section>")

    data = [{"label": run.label, "result": json.loads(render_json(run.result)), "usage": run.usage,
             "queue_length": run.queue_length, "waits": run.waits, "node_resource": run.node_resource,
             "node_room": run.node_room, "domains": domain_rows(run.result.jobs)} for run in runs]
    title = "Simulation report: " + " vs ".join(run.label for run in runs)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{_esc(title)}</title><link rel="icon" href="data:,">'
        f"<style>{(ASSETS / 'htmlreport.css').read_text()}</style></head><body>"
        f"<header><h1>{_esc(title)}</h1><p class=\"muted\">Made by <code>koord-queue simulate --html</code>"
        f"{' --compare' if len(runs) > 1 else ''}: every job replayed against the production scheduler on a "
        "virtual clock.</p>"
        '<nav aria-label="Sections"><a href="#summary">Summary</a> <a href="#usage">Usage</a> '
        '<a href="#waits">Waits</a> <a href="#queue">Queue length</a>'
        + (' <a href="#nodes">Nodes</a>' if any(run.node_room for run in runs) else "") + "</nav></header>"
        "<main>" + "".join(sections) + "</main>"
        '<script type="application/json" id="report-data">'
        + json.dumps(data, separators=(",", ":")).replace("</", "<\\/") + "</script>"
        f"<script>{QUANTITY_JS.read_text()}</script><script>{(ASSETS / 'htmlreport.js').read_text()}</script>"
        "</body></html>\n"
    )


DOMAIN_ROWS = 200  # jobs listed in the table of domains, per run


def _nodes_section(runs: Sequence[Run], end: float) -> str:
    """The room left on the nodes over time, and the domains given to jobs."""
    peak = max((max(value for _, value in points) for run in runs for points in run.node_room.values()), default=0)
    cells = []
    for index, run in enumerate(runs):
        if not run.node_room:
            cells.append(_run_heading(run, len(runs)) + '<p class="muted">This run has no nodes.</p>')
            continue
        names = [MOST_ON_ONE, ALL_FREE] + sorted(set(run.node_room) - {MOST_ON_ONE, ALL_FREE})
        lines = [Line(name, "#000000" if name == ALL_FREE else COLORS[i % len(COLORS)],
                      "2 3" if name == ALL_FREE else "" if i < len(COLORS) else DASHES[1], run.node_room[name],
                      f"mean {approximate_quantity(_mean(run.node_room[name], run.result.end), False)}")
                 for i, name in enumerate(names)]
        resource = run.node_resource or ""
        cells.append(_run_heading(run, len(runs)) + step_chart(
            f"nodes-{index}", f"Free {resource} on the nodes over time ({run.label})", lines, end, peak, "quantity",
            "nodes", f'data-chart="node-room" data-run="{index}" data-resource="{_esc(resource)}"'))
    tables = []
    for index, run in enumerate(runs):
        rows = domain_rows(run.result.jobs)
        if not rows:
            tables.append(_run_heading(run, len(runs)) + '<p class="muted">No job asked for a topology domain or '
                          "was admitted in part.</p>")
            continue
        body = "".join(f"<tr><td>{_esc(row['job'])}</td><td>{_esc(row['quota'] or '')}</td>"
                       f"<td>{_esc('; '.join(row['domains']))}</td><td>{_esc('; '.join(row['admitted']))}</td></tr>"
                       for row in rows[:DOMAIN_ROWS])
        more = f'<p class="muted">and {len(rows) - DOMAIN_ROWS} more jobs.</p>' if len(rows) > DOMAIN_ROWS else ""
        tables.append(_run_heading(run, len(runs)) + f'<table class="domains" data-run="{index}"><thead><tr>'
                      "<th>job</th><th>quota</th><th>domain (pod set: level=domain)</th><th>admitted in part</th>"
                      f"</tr></thead><tbody>{body}</tbody></table>{more}")
    return ('<section aria-labelledby="nodes"><h2 id="nodes">Nodes</h2>'
            '<p class="muted">The room left on the nodes: on the node with the most, against all of them. Far '
            "apart, the cluster is fragmented: a pod that needs more than the first has no node, however much is "
            "free in all.</p>" + _runs_grid(cells)
            + "<h3>Topology domains and admissions in part</h3>"
              '<p class="muted">The domain the engine gave each job that asked for one (its last admission), and '
              "the workers of elastic jobs admitted with fewer than they asked for.</p>" + _runs_grid(tables)
            + "</section>")


def html_report_command(path: str, as_json: bool, html_path: str, compare: str | None) -> None:
    """Print as `koord-queue simulate` does, and write the HTML report (raises TraceError)."""
    runs = [simulate_run(path)] + ([simulate_run(compare)] if compare else [])
    first = runs[0].result
    if as_json:
        for warning in first.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        print(render_json(first))
    else:
        print(render_summary(first))
    Path(html_path).write_text(render_html(runs), encoding="utf-8")
    print(f"wrote {html_path}", file=sys.stderr)
