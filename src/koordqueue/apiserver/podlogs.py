"""Container logs: the `pods/log` subresource (`kubectl logs`), as kube-apiserver serves it.

kube-apiserver checks the container name, then proxies to the kubelet of the pod's node,
which reads the container's log file; the kubelet's refusals (a container still waiting,
no previous run) come back as 400s. The options are the kubelet's: `follow` streams until
the container ends, `tailLines`, `sinceSeconds`/`sinceTime`, `timestamps`, `limitBytes`,
`previous`.

The containers here are simulated, so what one "wrote" is told from its pod: a few lines
the simulated training prints as it starts (with its rank and master, from the env the
training operator gives a PyTorchJob's pods), one
per step while it runs, and as it ends. A real process that stands for a pod's container
(`koord-queue up`'s controller, for its Deployment's pod) attaches its own output instead
(`PodLogs.attach`, a `LogBuffer` fed by a logging handler).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.duration import parse_duration, parse_rfc3339
from koordqueue.apiserver import errors

Object = dict[str, Any]
STEPS = 10  # steps a simulated run of known duration logs
STEP_SECONDS = 10.0  # between steps when the run has no known end
WAITING_REASON = "ContainerCreating"  # what a bound container that has not started waits on


@dataclass(frozen=True, slots=True)
class LogLine:
    seq: int  # increasing along a container's output: a follower resumes after the last it sent
    at: float  # seconds since the epoch
    text: str


@dataclass(frozen=True, slots=True)
class Options:
    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since: float | None = None  # seconds since the epoch


def _flag(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name, "false")
    if value not in ("true", "false", "1", "0", "True", "False"):
        raise errors.bad_request(f'{name}: Invalid value: "{value}": strconv.ParseBool: parsing "{value}": '
                                 "invalid syntax")
    return value in ("true", "1", "True")


def _int(query: Mapping[str, str], name: str) -> int | None:
    if name not in query:
        return None
    try:
        return int(query[name])
    except ValueError:
        raise errors.bad_request(f'{name}: Invalid value: "{query[name]}": strconv.ParseInt: parsing '
                                 f'"{query[name]}": invalid syntax') from None


def parse_options(name: str, query: Mapping[str, str], now: float) -> Options:
    """PodLogOptions from the query, validated as kube-apiserver does (422 naming the field)."""
    tail, limit, since_seconds = _int(query, "tailLines"), _int(query, "limitBytes"), _int(query, "sinceSeconds")
    since_time = query.get("sinceTime")
    causes: list[tuple[str, str]] = []
    if tail is not None and tail < 0:
        causes.append(("tailLines", f"Invalid value: {tail}: must be greater than or equal to 0"))
    if limit is not None and limit < 1:
        causes.append(("limitBytes", f"Invalid value: {limit}: must be greater than 0"))
    if since_seconds is not None and since_time is not None:
        causes.append(("", "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"))
    if since_seconds is not None and since_seconds < 1:
        causes.append(("sinceSeconds", f"Invalid value: {since_seconds}: must be greater than 0"))
    if causes:
        raise errors.APIError(422, "Invalid", f'PodLogOptions "{name}" is invalid: ' + ", ".join(
            f"{field}: {why}" if field else why for field, why in causes))
    since = None
    if since_seconds is not None:
        since = now - since_seconds
    elif since_time is not None:
        since = parse_rfc3339(since_time)
        if since is None:
            raise errors.bad_request(f'sinceTime: Invalid value: "{since_time}": not an RFC 3339 time')
    return Options(query.get("container", ""), _flag(query, "follow"), _flag(query, "previous"),
                   _flag(query, "timestamps"), tail, limit, since)


def timestamp(at: float) -> str:
    """The kubelet's prefix with `timestamps=true`: RFC 3339 with nanoseconds, always 9 digits."""
    micros = round(at * 1e6)  # a float's last digits are noise: whole microseconds
    whole, fraction = divmod(micros, 1_000_000)
    return datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction * 1000:09d}Z"


# --- which container, and whether it has a log ----------------------------------------------

def _names(pod: Mapping[str, Any], key: str) -> list[str]:
    items = (pod.get("spec") or {}).get(key) or []
    return [str(item.get("name", "")) for item in items if isinstance(item, Mapping)]


def container_of(pod: Mapping[str, Any], wanted: str) -> str:
    """The container asked for, or the only one; 400 worded as kube-apiserver's otherwise."""
    name = pod["metadata"]["name"]
    containers, init = _names(pod, "containers"), _names(pod, "initContainers")
    if wanted:
        if wanted not in containers + init:
            raise errors.bad_request(f"container {wanted} is not valid for pod {name}")
        return wanted
    if len(containers) == 1:
        return containers[0]
    if not containers:
        raise errors.bad_request(f"a container name must be specified for pod {name}")
    message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
    if init:
        message += f" or one of the init containers: [{' '.join(init)}]"
    raise errors.bad_request(message)


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a container, from its status: when it started, and how it ended (if it did)."""

    started: float
    finished: float | None
    exit_code: int | None
    init: bool


def container_run(pod: Mapping[str, Any], container: str, previous: bool) -> Run:
    """The run whose log is asked for; 400 worded as the kubelet's when there is none."""
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    init = container in _names(pod, "initContainers") and container not in _names(pod, "containers")
    statuses = status.get("initContainerStatuses" if init else "containerStatuses") or []
    found = next((s for s in statuses if isinstance(s, Mapping) and s.get("name") == container), None)
    if previous:
        last = ((found or {}).get("lastState") or {}).get("terminated")
        if not last:
            raise errors.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        return _run(last, init)
    if found is None:
        raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {WAITING_REASON}')
    state = found.get("state") or {}
    for kind in ("running", "terminated"):
        if isinstance(state.get(kind), Mapping):
            return _run(state[kind], init)
    reason = (state.get("waiting") or {}).get("reason") or WAITING_REASON
    raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')


def _run(state: Mapping[str, Any], init: bool) -> Run:
    started = parse_rfc3339(state.get("startedAt")) or time.time()
    code = state.get("exitCode")
    return Run(started, parse_rfc3339(state.get("finishedAt")) if "exitCode" in state else None,
               int(code) if isinstance(code, int) else None, init)


# --- what a simulated container writes ----------------------------------------------------------

def _duration(pod: Mapping[str, Any]) -> float | None:
    """The run's length as the simulated kubelet reads it; None when it runs until deleted."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_SIM_DURATION)
    try:
        return parse_duration(str(text)) if text is not None else None
    except ValueError:
        return None


def _env(pod: Mapping[str, Any], container: str, name: str) -> str:
    """The value the container sees for `name`: the last entry of that name wins, as in Kubernetes
    (the training operator appends its RANK, MASTER_ADDR, ... after the template's own)."""
    found = ""
    for item in (pod.get("spec") or {}).get("containers") or []:
        if isinstance(item, Mapping) and item.get("name") == container:
            for var in item.get("env") or []:
                if isinstance(var, Mapping) and var.get("name") == name:
                    found = str(var["value"]) if isinstance(var.get("value"), str) else ""
    return found


def loss_at(step: int) -> float:
    """A loss that falls as training goes: what the simulated steps print."""
    return 0.1 + 2.2 * math.exp(-0.35 * step)


def simulated_output(pod: Mapping[str, Any], container: str, run: Run, now: float) -> tuple[list[LogLine], float | None]:
    """What the simulated training in `container` has written by `now`, and when it writes its
    next line (None: only when it ends). Lines: it started (where, which image), its rank and
    master (from the RANK and MASTER_ADDR its container sees: a PyTorchJob's), a step with its loss every tenth of its duration (or every
    STEP_SECONDS when it runs until deleted), and how it ended."""
    meta = pod.get("metadata") or {}
    node = (pod.get("spec") or {}).get("nodeName") or ""
    image = next((str(item.get("image", "")) for key in ("containers", "initContainers")
                  for item in (pod.get("spec") or {}).get(key) or []
                  if isinstance(item, Mapping) and item.get("name") == container), "")
    texts: list[tuple[float, str]] = [
        (run.started, f"started: container {container} of pod {meta.get('namespace')}/{meta.get('name')} "
                      f"on node {node}, image {image}")]
    rank = _env(pod, container, c.ENV_RANK)
    if rank and not run.init:
        master = _env(pod, container, c.ENV_MASTER_ADDR)
        port = _env(pod, container, c.ENV_MASTER_PORT)
        texts.append((run.started, f"rank {rank}: joining the group at {master}{':' + port if port else ''}"))
    end = run.finished if run.finished is not None else now
    due: float | None = None
    if not run.init:
        duration = _duration(pod)
        count = STEPS if duration is not None else math.inf
        every = duration / STEPS if duration is not None else STEP_SECONDS
        failed = run.exit_code not in (None, 0)
        step = 1
        while step <= count:
            at = run.started + step * every
            if at > end:
                if run.finished is None:
                    due = at
                    break
                if failed or duration is None:
                    break
                at = end  # a run of known length that succeeded logged all its steps
            label = f"{step}/{STEPS}" if duration is not None else str(step)
            texts.append((at, f"step {label}: loss {loss_at(step):.4f}"))
            step += 1
    if run.finished is not None:
        if run.exit_code:
            texts.append((run.finished, "error: the training failed (koord-queue.sim/fail)"))
        texts.append((run.finished, f"finished with exit code {run.exit_code}"))
    return [LogLine(i, at, text) for i, (at, text) in enumerate(texts)], due


# --- output a real process writes ---------------------------------------------------------------

class LogBuffer:
    """The last `limit` lines a process wrote, for the pods it stands for. Written from any
    thread (logging handlers are); followers are woken on their own loops."""

    def __init__(self, limit: int = 10_000) -> None:
        self._lines: deque[LogLine] = deque(maxlen=limit)
        self._seq = 0
        self._lock = threading.Lock()
        self._followers: set[Callable[[], None]] = set()

    def write(self, text: str, at: float | None = None) -> None:
        with self._lock:
            for part in text.splitlines() or [""]:
                self._lines.append(LogLine(self._seq, time.time() if at is None else at, part))
                self._seq += 1
            followers = list(self._followers)
        for wake in followers:
            wake()

    def lines(self) -> list[LogLine]:
        with self._lock:
            return list(self._lines)

    def follow(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake` (thread-safe on the caller's side) after each write; returns the undo."""
        with self._lock:
            self._followers.add(wake)

        def undo() -> None:
            with self._lock:
                self._followers.discard(wake)

        return undo


class BufferHandler(logging.Handler):
    """A logging handler that writes formatted records into a LogBuffer."""

    def __init__(self, buffer: LogBuffer, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.buffer = buffer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.buffer.write(self.format(record), record.created)
        except Exception:
            self.handleError(record)


@dataclass(frozen=True, slots=True)
class Attachment:
    namespace: str
    labels: dict[str, str]
    container: str
    buffer: LogBuffer

    def covers(self, pod: Mapping[str, Any], container: str) -> bool:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        return meta.get("namespace") == self.namespace and container == self.container and \
            all(labels.get(k) == v for k, v in self.labels.items())


class PodLogs:
    """Where each container's output comes from: an attached process, else the simulation."""

    def __init__(self) -> None:
        self._attached: list[Attachment] = []

    def attach(self, namespace: str, labels: dict[str, str], container: str, buffer: LogBuffer) -> None:
        """The container `container` of the pods in `namespace` carrying `labels` writes `buffer`."""
        self._attached.append(Attachment(namespace, dict(labels), container, buffer))

    def buffer_for(self, pod: Mapping[str, Any], container: str) -> LogBuffer | None:
        return next((a.buffer for a in self._attached if a.covers(pod, container)), None)


def select(lines: list[LogLine], opts: Options, after: int | None) -> list[LogLine]:
    """The lines to send: past the last sent (`after`), or on the first batch those since
    `since`, the last `tail_lines` of them."""
    if after is not None:
        return [line for line in lines if line.seq > after]
    if opts.since is not None:
        lines = [line for line in lines if line.at >= opts.since]
    if opts.tail_lines is not None:
        lines = lines[len(lines) - opts.tail_lines:] if opts.tail_lines else []
    return lines


def render(line: LogLine, opts: Options) -> bytes:
    return ((timestamp(line.at) + " " if opts.timestamps else "") + line.text + "\n").encode()
