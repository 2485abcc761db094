"""Strategic merge patch, as kube-apiserver applies it to built-in kinds.

What `kubectl patch` sends by default and `kubectl apply` sends to update a built-in
object. It is a JSON merge patch that knows, from each field's patch metadata
(`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key` in the schemas of
`openapi`), that `containers` merge by `name`, `ownerReferences` by `uid`, `finalizers`
as a set, and that other lists are replaced. Directives: `$patch: replace|delete`
(in maps and list elements), `$retainKeys`, `$setElementOrder/<list>`,
`$deleteFromPrimitiveList/<list>`. Follows apimachinery's strategicpatch with the
server's options (parallel lists merged, nulls for absent keys dropped).
"""

from __future__ import annotations

from typing import Any

from koordqueue.apiserver import openapi
from koordqueue.apiserver.patch import PatchError, PatchFormatError, deep_copy
from koordqueue.apiserver.registry import ResourceType

Schema = dict[str, Any] | None
DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
SET_ORDER = "$setElementOrder/"
DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


def apply_strategic_merge(original: dict[str, Any], patch: dict[str, Any], rt: ResourceType) -> dict[str, Any]:
    """`original` patched by `patch`; both left untouched.

    Raises PatchFormatError (400) for a malformed patch, PatchError (422) for one that
    cannot apply (a merge list element without its merge key, `$retainKeys` not covering the patch).
    """
    if not isinstance(patch, dict):
        raise PatchFormatError("strategic merge patch must be a JSON object")
    return _merge_map(deep_copy(original), deep_copy(patch), openapi.schema_for(rt))


def _strategy(schema: Schema) -> tuple[set[str], str]:
    """(strategies, merge key) of a field, e.g. ({"merge", "retainKeys"}, "name")."""
    if not schema:
        return set(), ""
    raw = schema.get("x-kubernetes-patch-strategy", "")
    return {s for s in raw.split(",") if s}, schema.get("x-kubernetes-patch-merge-key", "")


def _drop_nulls(value: Any) -> Any:
    """A new key's value keeps no nulls: they mean "delete" and there is nothing to delete."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def _merge_map(original: Any, patch: dict[str, Any], schema: Schema) -> dict[str, Any]:
    if DIRECTIVE in patch:
        directive = patch.pop(DIRECTIVE)
        if directive == "replace":
            return patch
        if directive == "delete":
            return {}
        raise PatchFormatError(f"unknown patch type: {directive!r} in map: {patch}")
    target: dict[str, Any] = original if isinstance(original, dict) else {}
    return _merge_into(target, patch, schema)


def _merge_into(original: dict[str, Any], patch: dict[str, Any], schema: Schema) -> dict[str, Any]:
    _apply_retain_keys(original, patch)
    _apply_element_orders(original, patch, schema)
    for key, value in patch.items():
        delete_list = key.startswith(DELETE_PRIMITIVES)
        if delete_list:
            key = key.removeprefix(DELETE_PRIMITIVES)
            if not key:
                raise PatchFormatError("invalid patch: $deleteFromPrimitiveList must name a list")
        if value is None:
            original.pop(key, None)
            continue
        if key not in original:
            if not delete_list:
                original[key] = _drop_nulls(value)
            continue
        current = original[key]
        field = openapi.child_schema(schema, key)
        strategies, merge_key = _strategy(field)
        if isinstance(current, dict) and isinstance(value, dict):
            original[key] = value if "replace" in strategies else _merge_map(current, value, field)
        elif isinstance(current, list) and isinstance(value, list):
            if "merge" in strategies:
                original[key] = _merge_list(current, value, openapi.item_schema(field), merge_key, delete_list)
            elif not delete_list:
                original[key] = value
        elif not delete_list:
            original[key] = _drop_nulls(value)
    return original


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if RETAIN_KEYS not in patch:
        return
    keep = patch.pop(RETAIN_KEYS)
    if not isinstance(keep, list):
        raise PatchFormatError("invalid patch: $retainKeys must be a list")
    for key, value in patch.items():
        if value is not None and not key.startswith(DELETE_PRIMITIVES) and key not in keep:
            raise PatchError(f"invalid patch: the field {key!r} is not in $retainKeys {keep}")
    for key in [k for k in original if k not in keep]:
        del original[key]


def _apply_element_orders(original: dict[str, Any], patch: dict[str, Any], schema: Schema) -> None:
    """Merge each list named by a `$setElementOrder/<list>` and put it in that order."""
    for directive in [k for k in patch if k.startswith(SET_ORDER)]:
        order = patch.pop(directive)
        key = directive.removeprefix(SET_ORDER)
        if not isinstance(order, list):
            raise PatchFormatError(f"invalid patch: {directive} must be a list")
        field = openapi.child_schema(schema, key)
        strategies, merge_key = _strategy(field)
        found = original.get(key)
        current: list[Any] = found if isinstance(found, list) else []
        changes = patch.pop(key, [])
        if changes is None:
            original.pop(key, None)
            continue
        if not isinstance(changes, list):
            raise PatchFormatError(f"invalid patch: {key} must be a list alongside {directive}")
        if not current and not changes:
            continue
        if current and changes and "merge" in strategies:
            merged = _merge_list(current, changes, openapi.item_schema(field), merge_key, False)
        else:
            merged = changes or list(current)
        ordered = [item for item in merged if _index(order, item, merge_key) >= 0]
        server_only = [item for item in merged if _index(order, item, merge_key) < 0]
        ordered.sort(key=lambda item: _index(order, item, merge_key))
        original[key] = _interleave(server_only, ordered, current, merge_key)


def _identity(item: Any, merge_key: str) -> Any:
    return item.get(merge_key) if merge_key and isinstance(item, dict) else item


def _index(items: list[Any], item: Any, merge_key: str) -> int:
    wanted = _identity(item, merge_key)
    for i, candidate in enumerate(items):
        if _identity(candidate, merge_key) == wanted:
            return i
    return -1


def _interleave(server_only: list[Any], patched: list[Any], server_order: list[Any], merge_key: str) -> list[Any]:
    """apimachinery's mergeSortedSlice: keep both lists' orders, server-only items where they were."""
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patched):
        if j >= len(patched):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patched[j])
            j += 1
        else:
            li, ri = _index(server_order, server_only[i], merge_key), _index(server_order, patched[j], merge_key)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patched[j])
                j += 1
    return out


def _merge_list(current: list[Any], patch: list[Any], items: Schema, merge_key: str, delete_list: bool) -> list[Any]:
    if not current and not patch:
        return current
    if not any(isinstance(x, dict) for x in current + patch):
        if delete_list:
            return [x for x in current if x not in patch]
        merged: list[Any] = []
        for x in current + patch:
            if x not in merged:
                merged.append(x)
    else:
        if not merge_key:
            raise PatchError("cannot merge lists without merge key")
        current, patch = _special_elements(current, patch, merge_key)
        merged = list(current)
        for element in patch:
            if not isinstance(element, dict) or merge_key not in element:
                raise PatchError(f"map: {element} does not contain declared merge key: {merge_key}")
            at = _index(merged, element, merge_key)
            if at >= 0:
                merged[at] = _merge_map(merged[at], element, items)
            else:
                merged.append(_drop_nulls(element))
    patched = [x for x in merged if _index(patch, x, merge_key) >= 0]
    patched.sort(key=lambda x: _index(patch, x, merge_key))
    server_only = [x for x in merged if _index(patch, x, merge_key) < 0]
    return _interleave(server_only, patched, current, merge_key)


def _special_elements(current: list[Any], patch: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    """Apply `$patch: delete` / `$patch: replace` elements; return (current, the plain elements)."""
    plain, replace = [], False
    for element in patch:
        directive = element.get(DIRECTIVE) if isinstance(element, dict) else None
        if directive is None:
            plain.append(element)
        elif directive == "delete":
            if merge_key not in element:
                raise PatchError("delete patch type with no merge key defined")
            current = [x for x in current if _identity(x, merge_key) != element[merge_key]]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError("merging lists cannot yet be specified in the patch")
        else:
            raise PatchFormatError(f"unknown patch type: {directive!r} in map: {element}")
    return (plain, []) if replace else (current, plain)
