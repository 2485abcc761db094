"""`koord-queue status` and `koord-queue explain`: the queue as text, from any cluster.

Both read the cluster's objects and the settings the controller published, load them
into an engine as the controller does (controller/loading.py, loader.py), run the
cycle it would run now (to know who blocks whom), and print the same overview and
explanation the dashboard shows, with reasons worked out now.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from koordqueue import aio
from koordqueue.api import constants as c
from koordqueue.api.quantity import format_quantity
from koordqueue.controller.dryrun import KIND_ALIASES, DryRunError, dry_run, parse_job
from koordqueue.controller.forecaster import estimate_runtimes, run_forecast
from koordqueue.controller.loading import Snapshot, look_now, take_snapshot
from koordqueue.controller.overview import Overview, explain, mode_text, overview
from koordqueue.controller.views import (
    JOB_PLURALS,
    adapter_of_kind,
)
from koordqueue.engine.forecast import Forecast
from koordqueue.engine.runtimes import RuntimeBook
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.config import load_config
from koordqueue.kube.errors import NotFound


class ReportError(Exception):
    """Something the user asked for that is not there, in words."""


def _q(amount: int | None) -> str:
    return "-" if amount is None else format_quantity(amount)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def status_text(view: Overview) -> str:
    lines = ["QUOTAS (amounts as in manifests; runtime is the share it may use now)"]
    rows = [["QUOTA", "PARENT", "POLICY", "RESOURCE", "MIN", "USED", "RUNTIME", "MAX"]]
    for quota in sorted(view["quotas"], key=lambda q: (q["parent"] or "", q["name"])):
        first = True
        for resource, amounts in quota["resources"].items():
            rows.append([
                quota["name"] if first else "", (quota["parent"] or "-") if first else "",
                quota["policy"] if first else "", resource, _q(amounts["min"]), _q(amounts["used"]),
                _q(amounts["runtime"]), _q(amounts["max"]),
            ])
            first = False
        if not quota["valid"]:
            rows.append(["", "", "", f"not used: {quota['reason']}", "", "", "", ""])
    lines += _table(rows)
    lines.append("")
    lines.append("QUEUES")
    for queue in view["queues"]:
        lines.append(f"{queue['key']} (quota {queue['quota'] or '-'}): {queue['pending_count']} pending")
        for item in queue["pending"][:20]:
            when = f"  [{_starts(item, view['time'])}]" if c.EXPECTED_START_FIELD in item else ""
            lines.append(f"  {item['position']:>3}. {item['unit']}  priority {item['priority']}{when}  "
                         f"{item['message']}")
        if queue["pending_count"] > 20:
            lines.append(f"  ... and {queue['pending_count'] - 20} more")
        for item in queue.get("backing_off", [])[:20]:
            lines.append(f"  backing off: {item['unit']} ({item['phase']})  priority {item['priority']}  "
                         f"{item['message']}")
    return "\n".join(lines)


def _starts(item: Mapping[str, Any], now: float) -> str:
    """The STARTS column of a pending unit: "~25m", "now", "never" or "later" (beyond the forecast)."""
    when = item.get("startsAt")
    if when is None:
        return "never" if item.get("basis") == c.BASIS_NEVER else "later"
    wait = when - now
    if wait < 60:
        return "starts ~now"
    return f"starts ~{wait / 60:.0f}m" if wait < 7200 else f"starts ~{wait / 3600:.1f}h"


def explain_text(why: Mapping[str, Any]) -> str:
    lines = [f"{why['job']} (QueueUnit {why['unit']}): {why['phase']}"]
    if why["admitted"]:
        lines.append(f"  It holds quota {why['quota']}: {why['message']}")
        return "\n".join(lines)
    lines.append(f"  Why: {why['message']}")
    if why.get("forecast"):
        lines.append(f"  When: {why['forecast']}")
    if why.get("runtimeProblem"):
        lines.append(f"  Note: {why['runtimeProblem']}")
    if why["queue"]:
        where = f"position {why['position']}" if why["position"] else "not in line (backing off or parked)"
        lines.append(f"  Queue: {why['queue']}, quota {why['quota']}, {where}, priority {why['priority']}")
    if why["request"]:
        asks = ", ".join(f"{r} {format_quantity(a)}" for r, a in sorted(why["request"].items()))
        lines.append(f"  Asks: {asks}")
    if why.get("flavors"):
        lines.append("  Flavors tried, in order:")
        lines += [f"    {t['flavor']} ({t['selects']}): {t['refused'] or 'fits now'}" for t in why["flavors"]]
    if why["ahead"]:
        lines.append("  Ahead of it:")
        for item in why["ahead"]:
            lines.append(f"    {item['unit']} (priority {item['priority']}): {item['message']}")
    lines.append("  What would let it in:")
    lines += [f"    {line}" for line in why["advice"]]
    return "\n".join(lines)


async def _snapshot(client: KubeClient, controller_namespace: str) -> tuple[Snapshot, dict[str, str], float]:
    """The objects loaded as the controller loads them, after the cycle it would run now."""
    snap = await take_snapshot(client, controller_namespace)
    now = time.time()
    return snap, look_now(snap, now), now


def snapshot_forecast(snap: Snapshot, now: float) -> tuple[Forecast, dict[str, str]]:
    """The start-time forecast from the snapshot (controller/forecaster.py): the jobs'
    annotations, else the controller's default runtime (the history of runtimes is the
    leader's, in its memory), and why an annotation was ignored."""
    default = snap.settings.default_expected_runtime
    runtimes, problems = estimate_runtimes(snap.engine, RuntimeBook(default), snap.job_runtimes.get)
    result, _ = run_forecast(snap.engine, now, runtimes, default)
    return result, problems


def _footer(snap: Snapshot) -> str:
    text = f"\n\nSettings: {snap.settings_source}. {mode_text(snap.engine.koordinator)}."
    if snap.problems:
        text += "\n\nObjects not used:\n" + "\n".join(f"  {p}" for p in snap.problems)
    return text


async def _status(kubeconfig: str | None, controller_namespace: str) -> str:
    async with KubeClient(load_config(kubeconfig)) as client:
        snap, told, now = await _snapshot(client, controller_namespace)
    result, _ = snapshot_forecast(snap, now)
    view = overview(snap.engine, snap.quotas, snap.units, snap.capacity, now, queue_quotas=snap.queue_quotas,
                    told=told, forecast=result)
    return status_text(view) + _footer(snap)


def _kind(target: str) -> tuple[str, str]:
    kind_text, _, name = target.partition("/")
    kind = KIND_ALIASES.get(kind_text.lower())
    if not name or kind is None:
        raise ReportError(f"give KIND/NAME with KIND one of {', '.join(sorted(JOB_PLURALS))} (got {target!r})")
    return kind, name


async def _explain(kubeconfig: str | None, target: str, namespace: str, controller_namespace: str,
                   as_json: bool = False) -> str:
    kind, name = _kind(target)
    adapter = adapter_of_kind(kind)
    async with KubeClient(load_config(kubeconfig)) as client:
        resource = Resource.of(adapter.api_version, JOB_PLURALS[kind])
        try:
            job = await client.get(resource, name, namespace=namespace)
        except NotFound:
            raise ReportError(f"{kind} {namespace}/{name} not found") from None
        snap, told, now = await _snapshot(client, controller_namespace)
    unit_key = f"{namespace}/{adapter.unit_name(job)}"
    unit = snap.units.get(unit_key)
    if unit is None:
        return (f"{kind}/{namespace}/{name} has no QueueUnit yet: the controller has not seen it, or the job "
                f"cannot be queued (see `kubectl describe {kind.lower()} {name} -n {namespace}` for InvalidJob events).")
    result, problems = snapshot_forecast(snap, now)
    why = explain(snap.engine, snap.quotas, unit, snap.capacity, told, forecast=result, now=now,
                  runtime_problem=problems.get(unit_key))
    if as_json:
        return json.dumps(why, indent=2, sort_keys=True)
    return explain_text(why) + _footer(snap)


async def _explain_file(kubeconfig: str | None, path: str, namespace: str | None, controller_namespace: str,
                        as_json: bool = False) -> str:
    """What a job not submitted yet would meet: its unit, quota and queue, its position, whether
    it could ever fit and when it would start, from the live state. Nothing is created: the
    job's unit is loaded into the snapshot's engine only."""
    try:
        with open(path) as f:
            text = f.read()
    except (OSError, ValueError) as err:
        raise ReportError(f"{path}: {err}") from None
    try:
        obj, kind = parse_job(text, namespace, path)
        async with KubeClient(load_config(kubeconfig)) as client:
            snap = await take_snapshot(client, controller_namespace)
        why = dry_run(snap, obj, kind, time.time(), RuntimeBook(snap.settings.default_expected_runtime),
                      snap.job_runtimes.get, path)
    except DryRunError as err:
        raise ReportError(str(err)) from None
    meta = obj["metadata"]
    if as_json:
        return json.dumps(why, indent=2, sort_keys=True)
    head = (f"If submitted now (nothing was created), {kind}/{meta['namespace']}/{meta['name']} would get "
            f"QueueUnit {why['unit']}.\n  Could it ever fit: {'yes' if why['couldEverFit'] else 'no'}\n")
    return head + explain_text(why) + _footer(snap)


def status_command(kubeconfig: str | None, controller_namespace: str = c.SYSTEM_NAMESPACE) -> str:
    return aio.run(_status(kubeconfig, controller_namespace))


def explain_command(kubeconfig: str | None, target: str, namespace: str,
                    controller_namespace: str = c.SYSTEM_NAMESPACE, as_json: bool = False) -> str:
    return aio.run(_explain(kubeconfig, target, namespace, controller_namespace, as_json))


def explain_file_command(kubeconfig: str | None, path: str, namespace: str | None,
                         controller_namespace: str = c.SYSTEM_NAMESPACE, as_json: bool = False) -> str:
    return aio.run(_explain_file(kubeconfig, path, namespace, controller_namespace, as_json))
