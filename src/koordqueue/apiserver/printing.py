"""Server-side printing: objects as a `meta.k8s.io/v1` Table, as kube-apiserver prints them.

`kubectl get` asks for `application/json;as=Table;v=v1;g=meta.k8s.io` and prints the
cells it gets back, hiding columns of priority > 0 unless `-o wide`; it humanizes
nothing itself. So ages are computed here (`5m2s`), CRD `additionalPrinterColumns` are
evaluated here (a small JSONPath subset), and built-in kinds get kube-apiserver's
columns. The server always fills the wide cells, as kube-apiserver does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from koordqueue.api.constants import BATCH_CONDITION_FAILURE_TARGET, BATCH_CONDITION_SUCCESS_CRITERIA_MET
from koordqueue.apiserver.registry import ResourceType

Obj = dict[str, Any]
TABLE_GROUP = "meta.k8s.io"
INCLUDE_OBJECT_VALUES = ("None", "Metadata", "Object")
_NAME_DOC = "Name must be unique within a namespace."
_AGE_DOC = "CreationTimestamp is a timestamp representing the server time when this object was created."


def table_version(accept: str | None) -> str | None:
    """The Table version ("v1" or "v1beta1") an Accept header asks for first, or None for plain JSON."""
    for media_range in (accept or "").split(","):
        base, _, rest = media_range.strip().partition(";")
        params = dict(p.strip().split("=", 1) for p in rest.split(";") if "=" in p)
        if base.strip() == "application/json" and params.get("as") == "Table" and params.get("g") == TABLE_GROUP:
            if params.get("v") in ("v1", "v1beta1"):
                return params["v"]
        elif base.strip() in ("application/json", "*/*", "application/*"):
            return None
    return None


def table_content_type(version: str) -> str:
    return f"application/json;as=Table;v={version};g={TABLE_GROUP}"


# --- time ---------------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration: `45s`, `5m2s`, `3h4m`, `2d5h`, `3y20d`."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _since(value: Any, now: datetime) -> str:
    t = parse_time(value)
    return "<unknown>" if t is None else human_duration((now - t).total_seconds())


def _rfc3339(value: Any) -> str:
    t = parse_time(value)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if t else "0001-01-01T00:00:00Z"


# --- JSONPath subset ------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_$@-]+|\*)         # .field, .*
      | \[\s*(?P<quote>['"])(?P<key>.*?)(?P=quote)\s*\]   # ['key']
      | \[\s*(?P<index>-?\d+)\s*\]              # [0], [-1]
      | \[\s*(?P<start>-?\d*)\s*:\s*(?P<end>-?\d*)\s*\]   # [-1:], [0:2]
      | \[\s*\*\s*\]                           # [*]
      | \[\?\(\s*@(?P<fpath>(?:\.[A-Za-z0-9_-]+)+)\s*(?:(?P<op>==|!=)\s*(?P<lit>"[^"]*"|'[^']*'|-?\d+(?:\.\d+)?|true|false))?\s*\)\]
    """,
    re.VERBOSE,
)


def jsonpath(path: str, obj: Any) -> list[Any]:
    """Evaluate the JSONPath subset CRD printer columns use; every match, in order.

    `.a.b`, `['a.b']`, `[0]`, `[-1:]`, `[*]`, `.*` and filters `[?(@.type=="Ready")]`; `{...}` braces
    allowed (Kubeflow's job CRDs print `.status.conditions[-1:].type`).
    Raises ValueError on anything else.
    """
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1].strip()
    if path.startswith("$"):
        path = path[1:]
    current = [obj]
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m:
            raise ValueError(f"unsupported JSONPath {path!r} at {pos}")
        pos = m.end()
        current = [out for value in current for out in _step(m, value)]
    return current


def _step(m: re.Match[str], value: Any) -> list[Any]:
    field = m.group("field") if m.group("field") is not None else m.group("key")
    if field == "*" and m.group("field") == "*":
        return list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, list) else []
    if field is not None:
        return [value[field]] if isinstance(value, dict) and field in value else []
    if m.group("index") is not None:
        i = int(m.group("index"))
        return [value[i]] if isinstance(value, list) and -len(value) <= i < len(value) else []
    if m.group("start") is not None:
        start, end = (int(g) if g else None for g in (m.group("start"), m.group("end")))
        return list(value[start:end]) if isinstance(value, list) else []
    if m.group("fpath") is not None:
        items = value if isinstance(value, list) else []
        return [item for item in items if _matches(item, m.group("fpath"), m.group("op"), m.group("lit"))]
    return list(value) if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []


def _matches(item: Any, fpath: str, op: str | None, literal: str | None) -> bool:
    found = jsonpath(fpath, item)
    if op is None:
        return bool(found)
    assert literal is not None
    want: Any = literal[1:-1] if literal[0] in "'\"" else json.loads(literal)
    equal = bool(found) and found[0] == want and type(found[0]) is type(want)
    return equal if op == "==" else not equal


def _go_text(value: Any) -> str:
    """How kubectl's JSONPath printer writes a value: JSON for maps and lists, Go %v otherwise."""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _typed_cell(column_type: str, value: Any, now: datetime) -> Any:
    """apiextensions' cellForJSONValue: a value of the wrong type prints as <none>."""
    if value is None:
        return None
    if column_type == "string":
        return _go_text(value)
    if column_type == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if column_type == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if column_type == "boolean" and isinstance(value, bool):
        return value
    if column_type == "date" and isinstance(value, str):
        return "<invalid>" if parse_time(value) is None else _since(value, now)
    return None


# --- columns and rows -----------------------------------------------------------------------


def column(name: str, type_: str = "string", description: str = "", priority: int = 0, format_: str = "") -> Obj:
    return {"name": name, "type": type_, "format": format_, "description": description, "priority": priority}


NAME_COLUMN = column("Name", format_="name", description=_NAME_DOC)
AGE_COLUMN = column("Age", description=_AGE_DOC)
WIDE_TEMPLATE = [column("Containers", description="Names of each container in the template.", priority=1),
                 column("Images", description="Images referenced by each container in the template.", priority=1),
                 column("Selector", description="A label query over pods.", priority=1)]


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _get(obj: Any, dotted: str, default: Any = None) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return default
        obj = obj[part]
    return obj


def _age(obj: Obj, now: datetime) -> str:
    return _since(_meta(obj).get("creationTimestamp"), now)


def format_label_selector(selector: Obj | None) -> str:
    """metav1.FormatLabelSelector: `a=b,c in (x,y)`; `<none>` when empty."""
    if selector is None:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or ():
        op, key, values = expr.get("operator"), expr.get("key"), sorted(expr.get("values") or ())
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) or "<none>"


def _containers(pod_spec: Obj | None) -> list[str]:
    containers = (pod_spec or {}).get("containers") or []
    return [",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)]


def _has_condition(obj: Obj, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in _get(obj, "status.conditions", []) or [])


# A printer: its columns and the cells of one object. The built-in ones mirror pkg/printers/internalversion.
Cells = Callable[[Obj, datetime], list[Any]]
Printer = tuple[list[Obj], Cells]


def _named(columns: list[Obj], cells: Cells) -> Printer:
    """Most printers start with the Name column."""
    return [NAME_COLUMN, *columns], lambda obj, now: [_meta(obj).get("name", ""), *cells(obj, now)]


def _pod_cells(pod: Obj, now: datetime) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    phase = status.get("phase", "")
    reason = status.get("reason") or phase
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
           for c in status.get("conditions") or ()):
        reason = "SchedulingGated"
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or ()}
    sidecar = {n for n, c in init_specs.items() if c.get("restartPolicy") == "Always"}
    total = len(spec.get("containers") or ()) + len(sidecar)
    ready = restarts = 0
    last_restart: datetime | None = None

    def note_restart(cs: Obj) -> None:
        nonlocal restarts, last_restart
        restarts += int(cs.get("restartCount") or 0)
        finished = parse_time(_get(cs, "lastState.terminated.finishedAt"))
        if finished and (last_restart is None or finished > last_restart):
            last_restart = finished

    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        note_restart(cs)
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode", 0) == 0:
            continue
        if cs.get("name") in sidecar and cs.get("started"):
            ready += 1 if cs.get("ready") else 0
            continue
        if terminated:
            reason = ("Init:" + terminated["reason"] if terminated.get("reason")
                      else f"Init:Signal:{terminated['signal']}" if terminated.get("signal")
                      else f"Init:ExitCode:{terminated.get('exitCode', 0)}")
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in status.get("conditions") or ())
    if not initializing or initialized:
        restarts, last_restart = 0, None
        for cs in init_statuses:
            if cs.get("name") in sidecar:
                note_restart(cs)
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            note_restart(cs)
            state = cs.get("state") or {}
            terminated, waiting = state.get("terminated"), state.get("waiting")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                reason = (f"Signal:{terminated['signal']}" if terminated.get("signal")
                          else f"ExitCode:{terminated.get('exitCode', 0)}")
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _has_condition(pod, "Ready") else "NotReady"
    if _meta(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration((now - last_restart).total_seconds())} ago)"
    pod_ips = status.get("podIPs") or []
    gates = spec.get("readinessGates") or []
    gates_text = "<none>"
    if gates:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
        gates_text = f"{sum(conditions.get(g.get('conditionType')) == 'True' for g in gates)}/{len(gates)}"
    return [f"{ready}/{total}", reason, restarts_text, _age(pod, now),
            (pod_ips[0].get("ip") if pod_ips else status.get("podIP")) or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>", gates_text]


def _node_cells(node: Obj, now: datetime) -> list[Any]:
    ready = next((c for c in _get(node, "status.conditions", []) or [] if c.get("type") == "Ready"), None)
    status = ["Unknown"] if ready is None else ["Ready" if ready.get("status") == "True" else "NotReady"]
    if _get(node, "spec.unschedulable"):
        status.append("SchedulingDisabled")
    labels = _meta(node).get("labels") or {}
    roles = {k.removeprefix("node-role.kubernetes.io/") for k in labels if k.startswith("node-role.kubernetes.io/")}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    roles.discard("")
    info = _get(node, "status.nodeInfo", {}) or {}
    addresses = _get(node, "status.addresses", []) or []

    def address(kind: str) -> str:
        return next((a.get("address") for a in addresses if a.get("type") == kind), None) or "<none>"

    return [",".join(status), ",".join(sorted(roles)) or "<none>", _age(node, now), info.get("kubeletVersion", ""),
            address("InternalIP"), address("ExternalIP"), info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


def _event_cells(event: Obj, now: datetime) -> list[Any]:
    """core/v1 and events.k8s.io/v1 Events share one printer; the v1 names come first."""
    def first(*paths: str) -> Any:
        return next((v for p in paths if (v := _get(event, p)) not in (None, "", 0)), None)

    first_seen = _since(first("firstTimestamp", "deprecatedFirstTimestamp", "eventTime"), now)
    last_seen = _since(v, now) if (v := first("lastTimestamp", "deprecatedLastTimestamp")) else first_seen
    count = first("count", "deprecatedCount") or 1
    series = event.get("series")
    if series:
        last_seen = _since(series.get("lastObservedTime"), now)
        count = series.get("count", count)
    regarding = event.get("involvedObject") or event.get("regarding") or {}
    kind = str(regarding.get("kind", "")).lower()
    target = f"{kind}/{regarding['name']}" if regarding.get("name") else kind
    source = event.get("source") or {}
    component = source.get("component") or first("reportingComponent", "reportingController") or ""
    host = source.get("host") or first("reportingInstance") or ""
    source_text = f"{component}, {host}" if host else component
    message = str(first("message", "note") or "").strip()
    return [last_seen, event.get("type", ""), event.get("reason", ""), target, regarding.get("fieldPath", ""),
            source_text, message, first_seen, int(count), _meta(event).get("name", "")]


def _job_cells(job: Obj, now: datetime) -> list[Any]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = status.get("succeeded", 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    took = "" if start is None else human_duration(((end or now) - start).total_seconds())
    if _has_condition(job, "Complete"):
        phase = "Complete"
    elif _has_condition(job, "Failed"):
        phase = "Failed"
    elif _meta(job).get("deletionTimestamp"):
        phase = "Terminating"
    else:
        phase = next((c for c in ("Suspended", BATCH_CONDITION_FAILURE_TARGET, BATCH_CONDITION_SUCCESS_CRITERIA_MET)
                      if _has_condition(job, c)), "Running")
    return [phase, completions, took, _age(job, now), *_containers(_get(job, "spec.template.spec")),
            format_label_selector(spec.get("selector"))]


def _pdb_cells(pdb: Obj, now: datetime) -> list[Any]:
    spec = pdb.get("spec") or {}
    return [str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
            str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
            _get(pdb, "status.disruptionsAllowed", 0), _age(pdb, now)]


def _deployment_cells(d: Obj, now: datetime) -> list[Any]:
    spec, status = d.get("spec") or {}, d.get("status") or {}
    return [f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}", status.get("updatedReplicas", 0),
            status.get("availableReplicas", 0), _age(d, now), *_containers(_get(d, "spec.template.spec")),
            format_label_selector(spec.get("selector"))]


def _replica_set_cells(rs: Obj, now: datetime) -> list[Any]:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    return [spec.get("replicas", 1), status.get("replicas", 0), status.get("readyReplicas", 0), _age(rs, now),
            *_containers(_get(rs, "spec.template.spec")), format_label_selector(spec.get("selector"))]


def _service_cells(svc: Obj, now: datetime) -> list[Any]:
    spec = svc.get("spec") or {}
    kind = spec.get("type", "ClusterIP")
    ingress = _get(svc, "status.loadBalancer.ingress", []) or []
    external = list(spec.get("externalIPs") or [])
    if kind == "LoadBalancer":
        external += [i.get("ip") or i.get("hostname") for i in ingress]
        external_text = ",".join(external) or "<pending>"
    elif kind == "ExternalName":
        external_text = spec.get("externalName", "")
    else:
        external_text = ",".join(external) or "<none>"
    ports = []
    for p in spec.get("ports") or ():
        port = f"{p.get('port')}:{p['nodePort']}" if p.get("nodePort") else str(p.get("port"))
        ports.append(f"{port}/{p.get('protocol', 'TCP')}")
    selector = spec.get("selector") or {}
    return [kind, spec.get("clusterIP") or "<none>", external_text, ",".join(ports) or "<none>", _age(svc, now),
            ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"]


def _binding_cells(rb: Obj, now: datetime) -> list[Any]:
    subjects = rb.get("subjects") or []

    def names(kind: str) -> str:
        return ",".join(s.get("name", "") if kind != "ServiceAccount" else f"{s.get('namespace', '')}:{s.get('name', '')}"
                        for s in subjects if s.get("kind") == kind)

    role = rb.get("roleRef") or {}
    return [f"{role.get('kind', '')}/{role.get('name', '')}", _age(rb, now), names("User"), names("Group"),
            names("ServiceAccount")]


def _created_at(obj: Obj, now: datetime) -> list[Any]:
    return [_rfc3339(_meta(obj).get("creationTimestamp"))]


_CREATED_AT = column("Created At", "date", _AGE_DOC)
_BINDING = _named([
    column("Role", description="Role of the binding."), AGE_COLUMN,
    column("Users", description="Users in the binding.", priority=1),
    column("Groups", description="Groups in the binding.", priority=1),
    column("ServiceAccounts", description="ServiceAccounts in the binding.", priority=1),
], _binding_cells)
# An Event's Name is its last, wide, column.
_EVENT: Printer = ([
    column("Last Seen"), column("Type"), column("Reason"), column("Object"),
    column("Subobject", priority=1), column("Source", priority=1), column("Message"),
    column("First Seen", priority=1), column("Count", priority=1),
    column("Name", format_="name", description=_NAME_DOC, priority=1),
], _event_cells)
_WEBHOOKS = _named([column("Webhooks", "integer"), AGE_COLUMN],
                   lambda o, now: [len(o.get("webhooks") or ()), _age(o, now)])

_PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "Pod"): _named([
        column("Ready"), column("Status"), column("Restarts"), AGE_COLUMN, column("IP", priority=1),
        column("Node", priority=1), column("Nominated Node", priority=1), column("Readiness Gates", priority=1),
    ], _pod_cells),
    ("", "Node"): _named([
        column("Status"), column("Roles"), AGE_COLUMN, column("Version"),
        *(column(n, priority=1) for n in ("Internal-IP", "External-IP", "OS-Image", "Kernel-Version",
                                          "Container-Runtime")),
    ], _node_cells),
    ("", "Namespace"): _named([column("Status"), AGE_COLUMN],
                              lambda o, now: [_get(o, "status.phase", ""), _age(o, now)]),
    ("", "Event"): _EVENT,
    ("events.k8s.io", "Event"): _EVENT,
    ("", "ConfigMap"): _named([column("Data", "integer"), AGE_COLUMN],
                              lambda o, now: [len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                                              _age(o, now)]),
    ("", "Secret"): _named([column("Type"), column("Data", "integer"), AGE_COLUMN],
                           lambda o, now: [o.get("type", ""), len(o.get("data") or {}), _age(o, now)]),
    ("", "ServiceAccount"): _named([column("Secrets", "integer"), AGE_COLUMN],
                                   lambda o, now: [len(o.get("secrets") or ()), _age(o, now)]),
    ("", "Service"): _named([
        column("Type"), column("Cluster-IP"), column("External-IP"), column("Port(s)"), AGE_COLUMN,
        column("Selector", priority=1),
    ], _service_cells),
    ("coordination.k8s.io", "Lease"): _named([column("Holder"), AGE_COLUMN],
                                             lambda o, now: [_get(o, "spec.holderIdentity", ""), _age(o, now)]),
    ("policy", "PodDisruptionBudget"): _named(
        [column("Min Available"), column("Max Unavailable"), column("Allowed Disruptions", "integer"), AGE_COLUMN],
        _pdb_cells),
    ("scheduling.k8s.io", "PriorityClass"): _named(
        [column("Value", "integer"), column("Global-Default", "boolean"), AGE_COLUMN, column("PreemptionPolicy")],
        lambda o, now: [o.get("value", 0), bool(o.get("globalDefault")), _age(o, now),
                        o.get("preemptionPolicy", "PreemptLowerPriority")]),
    ("batch", "Job"): _named([column("Status"), column("Completions"), column("Duration"), AGE_COLUMN,
                              *WIDE_TEMPLATE], _job_cells),
    ("apps", "Deployment"): _named([column("Ready"), column("Up-to-date", "integer"),
                                    column("Available", "integer"), AGE_COLUMN, *WIDE_TEMPLATE],
                                   _deployment_cells),
    ("apps", "ReplicaSet"): _named([column("Desired", "integer"), column("Current", "integer"),
                                    column("Ready", "integer"), AGE_COLUMN, *WIDE_TEMPLATE], _replica_set_cells),
    ("apps", "StatefulSet"): _named([column("Ready"), AGE_COLUMN, *WIDE_TEMPLATE[:2]],
                                    lambda o, now: [f"{_get(o, 'status.readyReplicas', 0)}/{_get(o, 'spec.replicas', 0)}",
                                                    _age(o, now), *_containers(_get(o, "spec.template.spec"))]),
    ("rbac.authorization.k8s.io", "RoleBinding"): _BINDING,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _BINDING,
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): _WEBHOOKS,
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): _WEBHOOKS,
}
# Kinds without a printer of their own (Roles, LimitRanges, CRDs themselves, ...) print NAME and CREATED AT.
_DEFAULT_BUILTIN: Printer = _named([_CREATED_AT], _created_at)
_POD_DONE = {"Succeeded": "The pod has completed successfully.", "Failed": "The pod failed."}


def _crd_printer(rt: ResourceType) -> Printer:
    """apiextensions' table convertor: the CRD's additionalPrinterColumns, or Age when it has none."""
    specs = list(rt.printer_columns) or [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
                                          "description": _AGE_DOC}]
    columns = [column(c["name"], c.get("type", "string"), c.get("description", ""), int(c.get("priority", 0)),
                      c.get("format", "")) for c in specs]

    def cells(obj: Obj, now: datetime) -> list[Any]:
        out = []
        for spec in specs:
            try:
                found = jsonpath(spec.get("jsonPath", ""), obj)
            except ValueError:
                found = []
            out.append(_typed_cell(spec.get("type", "string"), found[0], now) if found else None)
        return out

    return _named(columns, cells)


def printer_for(rt: ResourceType) -> Printer:
    if rt.from_crd:
        return _crd_printer(rt)
    return _PRINTERS.get((rt.group, rt.kind), _DEFAULT_BUILTIN)


def _row_object(obj: Obj, include_object: str, version: str) -> Obj | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": f"{TABLE_GROUP}/{version}", "metadata": _meta(obj)}


def to_table(
    rt: ResourceType,
    objects: list[Obj],
    include_object: str = "Metadata",
    *,
    headers: bool = True,
    list_meta: Obj | None = None,
    version: str = "v1",
    now: datetime | None = None,
) -> Obj:
    """A Table of `objects` (one for a get, all items for a list, one per watch event).

    include_object is the request's `includeObject` ("" means Metadata); headers=False
    omits columnDefinitions, as kube-apiserver does after a watch's first event.
    Raises ValueError for an unknown includeObject (answer 400 BadRequest).
    """
    include_object = include_object or "Metadata"
    if include_object not in INCLUDE_OBJECT_VALUES:
        raise ValueError(f'unrecognized includeObject value: "{include_object}"')
    now = now or datetime.now(UTC)
    columns, cells = printer_for(rt)
    rows = []
    for obj in objects:
        row: Obj = {"cells": cells(obj, now),
                    "object": _row_object(obj, include_object, version)}
        phase = _get(obj, "status.phase")
        if (rt.group, rt.kind) == ("", "Pod") and phase in _POD_DONE:
            row["conditions"] = [{"type": "Completed", "status": "True", "reason": phase,
                                  "message": _POD_DONE[phase]}]
        rows.append(row)
    return {"kind": "Table", "apiVersion": f"{TABLE_GROUP}/{version}", "metadata": dict(list_meta or {}),
            "columnDefinitions": columns if headers else None, "rows": rows}
