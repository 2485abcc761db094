"""Server-side apply: what `helm install` (helm 4's default) and `kubectl apply --server-side` need.

A PATCH of type `application/apply-patch+yaml` with a `fieldManager` sends an apply
configuration: the fields that manager wants set. The server:

- creates the object from it when there is none (authorized as `create` too);
- otherwise merges it into the live object: maps recursively, lists of list-type `map`
  item by item (by their keys), of list-type `set` as a union, every other list and
  atomic maps (`x-kubernetes-map-type: atomic`, patch strategy `replace`) whole;
- removes the fields that manager applied last time and no longer applies, unless
  another manager owns them too (so `helm upgrade` of a chart that dropped a field
  drops it);
- records and checks ownership in `metadata.managedFields` (managedfields.py): a field
  another manager owns and the configuration would change is a 409 conflict unless
  forced.

Left out: apply to subresources (415). A `null` in the configuration means "not applied".
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from koordqueue.apiserver import openapi
from koordqueue.apiserver.patch import deep_copy
from koordqueue.apiserver.registry import ResourceType

Schema = dict[str, Any] | None
FieldSet = dict[str, Any]  # FieldsV1: {"f:spec": {"f:replicas": {}}, ...}
APPLY = "Apply"
_TOP_LEVEL_SKIPPED = ("apiVersion", "kind")
_META_SKIPPED = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink",
                 "deletionTimestamp", "deletionGracePeriodSeconds")


# --- the schema's merge metadata --------------------------------------------------------

# What each schema says about merging, by id (schemas are long-lived and never changed; the
# schema is kept with its answer so that an id is never taken for another's): every write
# asks it of every field it walks.
_TRAITS: dict[int, tuple[Schema, tuple[str, list[str]], bool, bool]] = {}
_TRAITS_MAX = 20_000


def _traits(schema: Schema) -> tuple[tuple[str, list[str]], bool, bool]:
    """(list type, atomic map, granular map) of a schema."""
    cached = _TRAITS.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1], cached[2], cached[3]
    if len(_TRAITS) >= _TRAITS_MAX:
        _TRAITS.clear()
    answer = (_list_type(schema), _atomic_map(schema), _granular_map(schema))
    _TRAITS[id(schema)] = (schema, *answer)
    return answer


def list_type(schema: Schema) -> tuple[str, list[str]]:
    """("map", keys), ("set", []) or ("atomic", []) for a list field."""
    return _traits(schema)[0] if schema is not None else ("atomic", [])


def atomic_map(schema: Schema) -> bool:
    """A map set whole (a LabelSelector): `x-kubernetes-map-type: atomic` or patch strategy replace."""
    return _traits(schema)[1] if schema is not None else False


def granular_map(schema: Schema) -> bool:
    """A map of arbitrary keys (labels, data), as opposed to a struct of known fields."""
    return _traits(schema)[2] if schema is not None else True


def _list_type(schema: Schema) -> tuple[str, list[str]]:
    schema = openapi.resolve(schema) or {}
    kind = schema.get("x-kubernetes-list-type")
    keys = list(schema.get("x-kubernetes-list-map-keys") or ())
    if not keys and schema.get("x-kubernetes-patch-merge-key"):
        keys = [schema["x-kubernetes-patch-merge-key"]]
        kind = kind or "map"
    if kind == "map" and keys:
        return "map", keys
    return ("set", []) if kind == "set" else ("atomic", [])


def _atomic_map(schema: Schema) -> bool:
    schema = openapi.resolve(schema) or {}
    return schema.get("x-kubernetes-map-type") == "atomic" or \
        "replace" in str(schema.get("x-kubernetes-patch-strategy", "")).split(",")


def _granular_map(schema: Schema) -> bool:
    schema = openapi.resolve(schema) or {}
    return not schema.get("properties")


def item_key(item: Any, keys: list[str]) -> str:
    values = {k: item.get(k) for k in keys if isinstance(item, dict) and k in item}
    return "k:" + orjson.dumps(values, option=orjson.OPT_SORT_KEYS).decode()


def value_key(item: Any) -> str:
    return "v:" + orjson.dumps(item, option=orjson.OPT_SORT_KEYS).decode()


# --- field sets ---------------------------------------------------------------------------

def field_set(config: dict[str, Any], rt: ResourceType) -> FieldSet:
    """The FieldsV1 of the fields an apply configuration sets (a kind with a status
    subresource takes no status from it)."""
    fields = _fields_of_map(config, openapi.schema_for(rt), top=True)
    if rt.has_status:
        fields.pop("f:status", None)
    return fields


def _fields_of_map(value: dict[str, Any], schema: Schema, top: bool = False) -> FieldSet:
    out: FieldSet = {}
    for key, item in value.items():
        if item is None or top and key in _TOP_LEVEL_SKIPPED:
            continue
        if top and key == "metadata" and isinstance(item, dict):
            item = {k: v for k, v in item.items() if k not in _META_SKIPPED and k not in ("name", "namespace")}
            out["f:metadata"] = _fields_of_map(item, openapi.child_schema(schema, key))
            if not out["f:metadata"]:
                del out["f:metadata"]
            continue
        out[f"f:{key}"] = fields_of(item, openapi.child_schema(schema, key))
    return out


def fields_of(value: Any, schema: Schema) -> FieldSet:
    if isinstance(value, dict) and value and not atomic_map(schema):
        inner = _fields_of_map(value, schema)
        return {".": {}, **inner} if granular_map(schema) else inner
    if isinstance(value, list) and value:
        kind, keys = list_type(schema)
        if kind == "map":
            items = openapi.item_schema(schema)
            return {item_key(i, keys): {".": {}, **(_fields_of_map(i, items) if isinstance(i, dict) else {})}
                    for i in value}
        if kind == "set":
            return {value_key(i): {} for i in value}
    return {}


# --- removing what a manager stopped applying -----------------------------------------------

def _find(node: Any, key: str) -> tuple[Any, Any]:
    """(container, index or field name) of `key` in `node`, or (None, None)."""
    if key.startswith("f:") and isinstance(node, dict):
        name = key[2:]
        return (node, name) if name in node else (None, None)
    if key.startswith(("k:", "v:")) and isinstance(node, list):
        for index, item in enumerate(node):
            if key.startswith("k:"):
                wanted = json.loads(key[2:])
                if isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items()):
                    return node, index
            elif value_key(item) == key:
                return node, index
    return None, None


def remove_unapplied(live: dict[str, Any], old: FieldSet, new: FieldSet, others: FieldSet) -> None:
    """Delete from `live` what `old` has and `new` has not, except what `others` own."""
    removals: list[tuple[Any, Any]] = []
    for key, sub in old.items():
        if key == ".":
            continue
        container, where = _find(live, key)
        if container is None:
            continue
        if key in new:
            if sub:
                remove_unapplied(container[where], sub, new[key], others.get(key, {}))
        elif key in others:
            if sub:
                remove_unapplied(container[where], sub, {}, others[key])
        else:
            removals.append((container, where))
    for container, where in sorted(removals, key=lambda r: r[1] if isinstance(r[1], int) else 0, reverse=True):
        del container[where]


def union(sets: list[FieldSet]) -> FieldSet:
    out: FieldSet = {}
    for one in sets:
        for key, sub in one.items():
            out[key] = union([out.get(key, {}), sub])
    return out


# --- merging the configuration in ---------------------------------------------------------------

def merge(live: dict[str, Any], config: dict[str, Any], rt: ResourceType) -> dict[str, Any]:
    """`live` with `config` applied over it (both left untouched)."""
    return _merge_map(deep_copy(live), config, openapi.schema_for(rt))


def _merge_map(live: dict[str, Any], config: dict[str, Any], schema: Schema) -> dict[str, Any]:
    for key, value in config.items():
        if value is None:
            continue
        live[key] = _merge_value(live.get(key), value, openapi.child_schema(schema, key))
    return live


def _merge_value(current: Any, value: Any, schema: Schema) -> Any:
    if isinstance(value, dict) and isinstance(current, dict) and not atomic_map(schema):
        return _merge_map(current, value, schema)
    if isinstance(value, list) and isinstance(current, list):
        kind, keys = list_type(schema)
        if kind == "map":
            items = openapi.item_schema(schema)
            out = list(current)
            for item in value:
                key = item_key(item, keys)
                found = next((i for i, old in enumerate(out) if item_key(old, keys) == key), None)
                if found is None:
                    out.append(_without_nulls(item))
                else:
                    out[found] = _merge_value(out[found], item, items)
            return out
        if kind == "set":
            return list(current) + [_without_nulls(i) for i in value if i not in current]
    return _without_nulls(value)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


# --- managedFields ------------------------------------------------------------------------------

def applied_by(meta: dict[str, Any], manager: str) -> tuple[FieldSet | None, list[FieldSet]]:
    """(the fields `manager` applied last, the fields every other manager owns)."""
    mine: FieldSet | None = None
    others: list[FieldSet] = []
    for entry in meta.get("managedFields") or ():
        if not isinstance(entry, dict):
            continue
        fields: FieldSet = entry["fieldsV1"] if isinstance(entry.get("fieldsV1"), dict) else {}
        if entry.get("manager") == manager and entry.get("operation") == APPLY and not entry.get("subresource"):
            mine = fields
        else:
            others.append(fields)
    return mine, others
