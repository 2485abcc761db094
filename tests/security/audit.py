"""The GPUs bound pods asked for at each instant, read from kube-apiserver's audit log (the
real control plane's, `RealCluster(audit_pods=True)`): a check of the max that samples
cannot give, since a pod bound and gone between two samples is in the log.

A pod asks, from its binding (pods/binding created, as kube-scheduler writes it) until it is
gone, what its create's pod says (the log keeps the pod created, its generated name too). It
is gone at the earliest of: its status written Succeeded or Failed; the last delete of it
before it is made again under its name (a pod being deleted still holds its devices: only
the last delete, kwok's with no grace, removes it); or never, within the log read.
"""

from __future__ import annotations

import datetime as dt
import json
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.api.quantity import QuantityError
from koordqueue.jobs.podrequest import pod_request

Name = tuple[str, str]  # (namespace, name) of a pod


def log_size(path: Path) -> int:
    """Where the log ends now (read from here on later)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def read_entries(path: Path, offset: int = 0) -> list[dict[str, Any]]:
    """The audit entries of completed requests from byte `offset` on (a line cut at `offset`
    is skipped)."""
    entries = []
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("stage") == "ResponseComplete":
                    entries.append(entry)
    except FileNotFoundError:
        pass
    return entries


def when(entry: Mapping[str, Any]) -> float:
    """The time a request completed (epoch seconds)."""
    return dt.datetime.fromisoformat(str(entry["stageTimestamp"]).replace("Z", "+00:00")).timestamp()


def received(entry: Mapping[str, Any]) -> float:
    """The time a request was received (epoch seconds; its completion when not said)."""
    stamp = entry.get("requestReceivedTimestamp")
    return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() if stamp else when(entry)


def gpus_of(pod: object) -> int:
    """The whole GPUs a pod asks for (0 for one we cannot read)."""
    if not isinstance(pod, Mapping):
        return 0
    try:
        return pod_request(pod, "pod").get(c.GPU, 0) // 1000
    except (InvalidObject, QuantityError):
        return 0


@dataclass
class PodHistory:
    """One pod name's creates (time, GPUs), bindings, deletes and ends as the log has them."""

    creates: list[tuple[float, int]] = field(default_factory=list)
    bindings: list[float] = field(default_factory=list)
    deletes: list[float] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)


def histories(entries: Iterable[Mapping[str, Any]], namespaces: frozenset[str]) -> dict[Name, PodHistory]:
    """What the log says of each pod of `namespaces` (successful requests only)."""
    out: dict[Name, PodHistory] = {}
    for entry in entries:
        ref = entry.get("objectRef") or {}
        code = (entry.get("responseStatus") or {}).get("code", 0)
        if ref.get("resource") != "pods" or ref.get("namespace") not in namespaces or not 200 <= code < 300:
            continue
        verb, sub = entry.get("verb"), ref.get("subresource") or ""
        name = ref.get("name") or ((entry.get("responseObject") or {}).get("metadata") or {}).get("name")
        if not name:
            continue
        pod = out.setdefault((ref["namespace"], name), PodHistory())
        at = when(entry)
        if verb == "create" and sub == "":
            made = entry.get("responseObject") or entry.get("requestObject") or {}
            # (received: kube-scheduler may bind a pod, watched as it is stored, before the
            # create's response completes, so its completion may come after the binding's)
            pod.creates.append((received(entry), gpus_of(made)))
            if isinstance(made, Mapping) and (made.get("spec") or {}).get("nodeName"):
                pod.bindings.append(at)  # (made on its node: no binding of its own)
        elif verb == "create" and sub == "binding":
            pod.bindings.append(at)
        elif verb == "delete" and sub == "":
            pod.deletes.append(at)
        elif verb in ("update", "patch") and sub == "status":
            phase = ((entry.get("requestObject") or {}).get("status") or {}).get("phase")
            if phase in (c.POD_SUCCEEDED, c.POD_FAILED):
                pod.ended.append(at)
    for pod in out.values():
        pod.creates.sort()
        pod.bindings.sort()
        pod.deletes.sort()
        pod.ended.sort()
    return out


def intervals(pods: Mapping[Name, PodHistory], known: Mapping[Name, int],
              alive_at_start: Mapping[Name, int], start: float,
              listed_at: float | None = None) -> list[tuple[float, float, int, Name]]:
    """(from, until, GPUs, pod) of every pod holding devices: those bound in the log, and those
    bound already when they were listed at `listed_at` (`alive_at_start`, their GPUs), counted
    from `start` (where the log read begins) and gone at their first end or last delete in the
    log; a binding of one of those before `listed_at` is its own, counted once. `known`: the
    GPUs of pods created before the log read (listed at the start)."""
    listed = start if listed_at is None else listed_at
    out = []
    for name, pod in pods.items():
        for bound in pod.bindings:
            if name in alive_at_start and bound <= listed:
                continue  # (listed bound: counted from the start below)
            made = [gpus for at, gpus in pod.creates if at <= bound]
            gpus = made[-1] if made else known.get(name, 0)
            out.append((bound, _gone(pod, bound), gpus, name))
    for name, gpus in alive_at_start.items():
        pod = pods.get(name, PodHistory())
        first_bound = pod.bindings[0] if pod.bindings else float("inf")
        out.append((start, min(_gone(pod, start), first_bound), gpus, name))
    return out


def _gone(pod: PodHistory, since: float) -> float:
    """When a pod bound at `since` stopped holding its devices (inf: not within the log)."""
    remade = next((at for at, _ in pod.creates if at > since), float("inf"))
    ends = pod.ended[bisect_right(pod.ended, since):]
    deletes = pod.deletes[bisect_right(pod.deletes, since):bisect_left(pod.deletes, remade)]
    return min(ends[0] if ends else float("inf"), deletes[-1] if deletes else float("inf"), remade)


def peaks(spans: Iterable[tuple[float, float, int, Name]]) -> list[tuple[float, int]]:
    """(time, GPUs held then) at every binding: a binding counts before an end at the same instant."""
    events = sorted([(start, 0, gpus) for start, _, gpus, _ in spans] +
                    [(end, 1, -gpus) for _, end, gpus, _ in spans if end != float("inf")])
    held, out = 0, []
    for at, kind, change in events:
        held += change
        if kind == 0:
            out.append((at, held))
    return out
