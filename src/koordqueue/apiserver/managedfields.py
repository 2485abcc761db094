"""Field ownership (metadata.managedFields), as kube-apiserver keeps it (structured-merge-diff).

Every write records which manager set which fields, in FieldsV1 (`{"f:spec": {"f:replicas":
{}}}`; a `"."` key or an empty dict marks the node itself as owned). An `Update` (create,
update, patch; the manager is the `fieldManager` parameter, else the User-Agent up to its
first `/`) takes the fields it changed from everyone else and adds them to its own entry; a
server-side `Apply` owns exactly what its configuration sets, shares the fields it sets to
the value they already have, and is refused (409, "Apply failed with N conflict(s)") when it
would change a field another manager owns, unless forced (`force=true`,
`kubectl apply --server-side --force-conflicts`), which takes those fields over. Entries are
per (manager, operation, subresource), with the API version and the time of their last
change; an entry left with no fields goes. Writes to `status` of a kind with that
subresource are entries of the subresource `status`, owning only status.
"""

from __future__ import annotations

import json
from typing import Any

from koordqueue.apiserver import apply as ssa
from koordqueue.apiserver import errors, openapi
from koordqueue.apiserver.registry import ResourceType

FieldSet = dict[str, Any]
Entry = dict[str, Any]
APPLY, UPDATE = "Apply", "Update"
MAX_MANAGER = 128


def manager_name(field_manager: str, user_agent: str) -> str:
    """kube-apiserver's managerOrUserAgent: the parameter, else the User-Agent's product name."""
    if field_manager:
        return field_manager
    return "".join(ch for ch in user_agent.split("/")[0] if ch.isprintable())[:MAX_MANAGER]


def check_manager(name: str) -> None:
    if len(name) > MAX_MANAGER:
        raise errors.unprocessable(f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Too long: may not be '
                                   f"more than {MAX_MANAGER} bytes")


# --- field-set algebra ----------------------------------------------------------------------------

def _member(node: FieldSet) -> bool:
    return not node or "." in node


def _children(node: FieldSet) -> FieldSet:
    return {k: v for k, v in node.items() if k != "."}


def _node(member: bool, children: FieldSet) -> FieldSet | None:
    if member:
        return {".": {}, **children} if children else {}
    return children or None


def union(a: FieldSet, b: FieldSet) -> FieldSet:
    out = dict(a)
    for key, sub in b.items():
        if key == ".":
            out["."] = {}
        elif key not in out:
            out[key] = sub
        else:
            node = _node(_member(out[key]) or _member(sub), union(_children(out[key]), _children(sub)))
            out[key] = node if node is not None else {}
    return out


def subtract(a: FieldSet, b: FieldSet) -> FieldSet:
    out: FieldSet = {}
    for key, sub in a.items():
        if key == ".":
            if "." not in b:
                out["."] = {}
            continue
        other = b.get(key)
        if other is None:
            out[key] = sub
            continue
        node = _node(_member(sub) and not _member(other), subtract(_children(sub), _children(other)))
        if node is not None:
            out[key] = node
    if list(out) == ["."]:
        return {}
    return out


def intersect(a: FieldSet, b: FieldSet) -> FieldSet:
    out: FieldSet = {}
    for key, sub in a.items():
        if key == "." or key not in b:
            continue
        other = b[key]
        node = _node(_member(sub) and _member(other), intersect(_children(sub), _children(other)))
        if node is not None:
            out[key] = node
    return out


def paths(fields: FieldSet, prefix: str = "") -> list[str]:
    """The owned paths, written as structured-merge-diff prints them (`.spec.containers[name="c"].image`)."""
    out: list[str] = []
    for key in sorted(k for k in fields if k != "."):
        sub = fields[key]
        here = prefix + _element(key)
        if _member(sub):
            out.append(here)
        out += paths(_children(sub), here)
    return out


def _element(key: str) -> str:
    kind, _, rest = key.partition(":")
    if kind == "f":
        return "." + rest
    if kind == "k":
        values = json.loads(rest)
        return "[" + ",".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sorted(values.items())) + "]"
    if kind == "v":
        return "[=" + rest + "]"
    return "[" + rest + "]"


# --- what a write changed -----------------------------------------------------------------------

_SKIPPED_META = frozenset({"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation",
                           "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "name", "namespace"})


def changes(old: dict[str, Any] | None, new: dict[str, Any], rt: ResourceType, subresource: str) -> tuple[
        FieldSet, FieldSet]:
    """(fields added or changed, fields removed) from `old` to `new`; with a status subresource,
    only status for a status write and all but status otherwise."""
    schema = openapi.schema_for(rt)
    changed: FieldSet = {}
    removed: FieldSet = {}
    old = old or {}
    for key in old.keys() | new.keys():
        if key in ("apiVersion", "kind") or (rt.has_status and (key == "status") != (subresource == "status")):
            continue
        before, after = old.get(key), new.get(key)
        if before is after or before == after:
            continue
        if key == "metadata":
            before = {k: v for k, v in (before or {}).items() if k not in _SKIPPED_META}
            after = {k: v for k, v in (after or {}).items() if k not in _SKIPPED_META}
        _diff_value(f"f:{key}", before, after, openapi.child_schema(schema, key), changed, removed)
    return changed, removed


def _whole(value: Any, schema: Any, item: bool) -> FieldSet:
    """The fields a value sets (an associative list's item is itself owned, as a node)."""
    inner = ssa.fields_of(value, schema)
    return {".": {}, **inner} if item and inner else inner


def _diff_value(key: str, before: Any, after: Any, schema: Any, changed: FieldSet, removed: FieldSet,
                item: bool = False) -> None:
    if before == after:
        return
    if after is None:
        removed[key] = _whole(before, schema, item)
        return
    if before is None:
        changed[key] = _whole(after, schema, item)
        return
    if isinstance(before, dict) and isinstance(after, dict) and not ssa.atomic_map(schema):
        sub_changed: FieldSet = {}
        sub_removed: FieldSet = {}
        for name in before.keys() | after.keys():
            was, now = before.get(name), after.get(name)
            if was is not now and was != now:  # most fields are unchanged: no schema looked up for them
                _diff_value(f"f:{name}", was, now, openapi.child_schema(schema, name), sub_changed, sub_removed)
        if sub_changed:
            changed[key] = sub_changed
        if sub_removed:
            removed[key] = sub_removed
        return
    if isinstance(before, list) and isinstance(after, list):
        kind, keys = ssa.list_type(schema)
        if kind in ("map", "set"):
            items = openapi.item_schema(schema)
            olds = {ssa.item_key(i, keys) if kind == "map" else ssa.value_key(i): i for i in before}
            news = {ssa.item_key(i, keys) if kind == "map" else ssa.value_key(i): i for i in after}
            sub_changed, sub_removed = {}, {}
            for item_key in set(olds) | set(news):
                if kind == "map":
                    _diff_value(item_key, olds.get(item_key), news.get(item_key), items, sub_changed, sub_removed,
                                item=True)
                elif item_key not in olds:
                    sub_changed[item_key] = {}
                elif item_key not in news:
                    sub_removed[item_key] = {}
            if sub_changed:
                changed[key] = sub_changed
            if sub_removed:
                removed[key] = sub_removed
            return
    changed[key] = {}  # a scalar, an atomic list or map, or a change of type: the field as a whole


# --- managers -------------------------------------------------------------------------------------

def _is(entry: Any, manager: str, operation: str, subresource: str) -> bool:
    return isinstance(entry, dict) and entry.get("manager") == manager and entry.get("operation") == operation \
        and (entry.get("subresource") or "") == subresource


def _entry(manager: str, operation: str, api_version: str, subresource: str, fields: FieldSet, now: str) -> Entry:
    out: Entry = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now,
                  "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        out["subresource"] = subresource
    return out


def _fields(entry: Entry) -> FieldSet:
    fields = entry.get("fieldsV1")
    return fields if isinstance(fields, dict) else {}


def record_update(entries: list[Entry] | None, manager: str, api_version: str, subresource: str,
                  changed: FieldSet, removed: FieldSet, now: str) -> list[Entry] | None:
    """managedFields after an Update by `manager`: it takes what it changed, from everyone; what
    it removed is nobody's. None when nothing changed hands."""
    if not changed and not removed:
        return None
    taken = union(changed, removed)
    out: list[Entry] = []
    mine: FieldSet = {}
    for entry in entries or ():
        if _is(entry, manager, UPDATE, subresource):
            mine = subtract(_fields(entry), removed)
            continue
        left = subtract(_fields(entry), taken)
        if left:
            out.append(entry if left == _fields(entry) else {**entry, "fieldsV1": left})
    mine = union(mine, changed)
    if mine:
        out.append(_entry(manager, UPDATE, api_version, subresource, mine, now))
    return out


def record_apply(entries: list[Entry] | None, manager: str, api_version: str, applied: FieldSet,
                 changed: FieldSet, removed: FieldSet, force: bool, now: str) -> list[Entry]:
    """managedFields after an Apply by `manager` of the fields `applied`, which changed `changed`
    and removed `removed` of the live object: 409 when another manager owns a changed field,
    unless `force` takes it."""
    conflicts: list[tuple[Entry, FieldSet]] = []
    for entry in entries or ():
        if _is(entry, manager, APPLY, ""):
            continue
        overlap = intersect(_fields(entry), changed)
        if overlap:
            conflicts.append((entry, overlap))
    if conflicts and not force:
        raise conflict_error(conflicts)
    out: list[Entry] = []
    placed = False
    for entry in entries or ():
        if _is(entry, manager, APPLY, ""):  # in its place; a repeated apply changes nothing, not even the time
            same = _fields(entry) == applied and entry.get("apiVersion") == api_version and not changed
            if applied:
                out.append(entry if same else _entry(manager, APPLY, api_version, "", applied, now))
            placed = True
            continue
        left = subtract(subtract(_fields(entry), changed), removed) if force else subtract(_fields(entry), removed)
        if left:
            out.append(entry if left == _fields(entry) else {**entry, "fieldsV1": left})
    if not placed and applied:
        out.append(_entry(manager, APPLY, api_version, "", applied, now))
    return out


def conflict_error(conflicts: list[tuple[Entry, FieldSet]]) -> errors.APIError:
    """kube-apiserver's NewConflictError: 409 Conflict, one FieldManagerConflict cause per field."""
    found = sorted(((_who(entry), path) for entry, fields in conflicts for path in paths(fields)),
                   key=lambda conflict: conflict[0])  # by manager, as the message lists them
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {who}", "field": path}
              for who, path in found]
    if len(found) == 1:
        message = f"Apply failed with 1 conflict: conflict with {found[0][0]}: {found[0][1]}"
    else:
        lines: list[str] = []
        for who in sorted({who for who, _ in found}):
            lines.append(f"conflicts with {who}:")
            lines += [f"- {path}" for other, path in found if other == who]
        message = f"Apply failed with {len(found)} conflicts: " + "\n".join(lines)
    return errors.APIError(409, "Conflict", message, {"causes": causes})


def _who(entry: Entry) -> str:
    """printManager: the name quoted, its subresource, and for an Update the API version."""
    out = json.dumps(str(entry.get("manager", "")))
    if entry.get("subresource"):
        out += f" with subresource {json.dumps(str(entry['subresource']))}"
    if entry.get("operation") == UPDATE:
        out += f" using {entry.get('apiVersion', '')}"
    return out
