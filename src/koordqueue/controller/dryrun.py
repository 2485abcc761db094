"""What a job not submitted yet would meet (`koord-queue explain -f job.yaml`, the
dashboard's "Will it run?"): its unit, quota and queue, its position, whether it could
ever fit and when it would start. Nothing is created: the job's unit is loaded into a
private copy of the engine (the CLI's snapshot, or a clone of the leader's) only.

The manifest is a user's text (the dashboard's is anyone's who may open it): read with
api/safeyaml.py (no anchors or aliases, bounded depth), at most MAX_MANIFEST_BYTES, and
exactly one document of a kind we queue; anything else is a DryRunError in words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import yaml

from koordqueue.api import constants as c
from koordqueue.api.safeyaml import load_manifests
from koordqueue.controller.forecaster import JobRuntime, estimate_runtimes, run_forecast
from koordqueue.controller.loading import Snapshot, look_now
from koordqueue.controller.overview import explain
from koordqueue.controller.unitsync import load_unit
from koordqueue.controller.views import (
    JOB_PLURALS,
    adapter_of_kind,
    job_view,
    queue_unit_manifest,
    rfc3339,
    unit_info,
    unit_view,
)
from koordqueue.engine.runtimes import RuntimeBook

MAX_MANIFEST_BYTES = 256 * 1024  # a job manifest is a few kB; kube refuses objects over ~1.5 MB

KIND_ALIASES = {plural: kind for kind, plural in JOB_PLURALS.items()} | {
    kind.lower(): kind for kind in JOB_PLURALS} | {"job": "Job", "pytorchjob": "PyTorchJob"}


class DryRunError(ValueError):
    """The manifest cannot be dry-run; the message says why (prefixed with where it came from)."""


def parse_job(text: str, namespace: str | None, where: str) -> tuple[dict[str, Any], str]:
    """The one job in ``text`` (its namespace: ``namespace``, else its own, else default) and its kind."""
    try:
        docs = [d for d in load_manifests(text, MAX_MANIFEST_BYTES) if d]
    except yaml.YAMLError as err:
        raise DryRunError(f"{where}: not readable YAML: {' '.join(str(err).split())}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise DryRunError(f"{where}: give one job (found {len(docs)} documents)" if len(docs) != 1
                          else f"{where}: give one job (a mapping with kind and metadata)")
    obj = docs[0]
    kind = KIND_ALIASES.get(str(obj.get("kind", "")).lower())
    if kind is None:
        raise DryRunError(f"{where}: kind {str(obj.get('kind'))[:64]!r} is not a job kind we queue "
                          f"({', '.join(sorted(JOB_PLURALS))})")
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise DryRunError(f"{where}: the job has no metadata.name")
    own = meta.get("namespace")
    meta["namespace"] = namespace or (own if isinstance(own, str) and own else "default")
    return obj, kind


def dry_run(snap: Snapshot, obj: dict[str, Any], kind: str, now: float, book: RuntimeBook,
            job_of: Callable[[str], JobRuntime | None], where: str) -> dict[str, Any]:
    """``explain``'s answer for the job as if submitted at ``now`` (plus ``dryRun`` and
    ``couldEverFit``). ``snap``'s engine is changed: give a copy."""
    meta = obj["metadata"]
    meta.setdefault("creationTimestamp", rfc3339(now))
    meta.setdefault("uid", "dry-run")
    view = snap.charged(job_view(obj, adapter_of_kind(kind), snap.priority_classes))  # its claims too (DRA)
    if view.unit_spec is None:
        raise DryRunError(f"{where}: this job cannot be queued: {view.invalid}")
    manifest = queue_unit_manifest(view)
    manifest["metadata"]["creationTimestamp"] = rfc3339(now)
    # The newest unit, behind its equals even when one was created in the same second
    # (timestamps are whole seconds, and the next tie-break is the name).
    newest = max((u.created for u in snap.units.values()), default=now)
    unit = dataclasses.replace(unit_view(manifest), created=max(now, newest + 1e-3))
    if unit.key in snap.units:
        raise DryRunError(f"{where}: a QueueUnit {unit.key} exists already: `koord-queue explain "
                          f"{kind.lower()}/{meta['name']} -n {meta['namespace']}` explains it")
    snap.units[unit.key] = unit
    mine: JobRuntime = (view.expected_runtime, view.max_execution_seconds)
    load_unit(snap.engine, unit, unit_info(unit, view), now)
    told = look_now(snap, now)
    runtimes, problems = estimate_runtimes(snap.engine, book, lambda key: mine if key == unit.key else job_of(key))
    result, _ = run_forecast(snap.engine, now, runtimes, book.default_seconds)
    why = explain(snap.engine, snap.quotas, unit, snap.capacity, told, forecast=result, now=now,
                  runtime_problem=problems.get(unit.key))
    why["dryRun"] = True
    why["couldEverFit"] = not any(line.startswith("it can never fit") for line in why["advice"]) and \
        why.get("basis") != c.BASIS_NEVER
    return why

