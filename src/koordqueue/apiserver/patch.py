"""JSON Patch (RFC 6902) and JSON Merge Patch (RFC 7386), as PATCH requests use them.

Both work on a copy and return the patched document. JSON Patch is also what
mutating admission webhooks answer with.
"""

from __future__ import annotations

from typing import Any

import orjson


class PatchError(ValueError):
    """The patch is well formed but cannot be applied to this document (422)."""


class PatchFormatError(ValueError):
    """The patch document itself is malformed (400)."""


class PatchTooLarge(ValueError):
    """More operations than kube-apiserver takes in one JSON patch (413)."""


class PatchCopyTooLarge(PatchError):
    """Copies adding more than kube-apiserver allows (422, answered in its generic words: it
    drops evanphx/json-patch's message, which this one repeats for callers in Python)."""


# kube-apiserver's bounds on a JSON patch: at most this many operations (handlers/patch.go),
# and `copy` operations adding at most this many bytes together (JSONPatchMaxCopyBytes,
# 3 MiB: twice etcd's 1.5 MiB request limit). Without the second, 30 copies of a path into
# itself double an object 30 times.
MAX_JSON_PATCH_OPERATIONS = 10_000
MAX_JSON_PATCH_COPY_BYTES = 3 * 1024 * 1024


def deep_copy(doc: Any) -> Any:
    return orjson.loads(orjson.dumps(doc))


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise PatchFormatError(f"path must be a string, got {path!r}")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchFormatError(f'JSON pointer must be empty or start with a "/": {path!r}')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(token: str, length: int, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"invalid array index: {token!r}")
    i = int(token)
    if i > length or (i == length and not allow_end):
        raise PatchError(f"array index out of bounds: {i}")
    return i


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for tok in tokens[:-1]:
        if isinstance(node, dict):
            if tok not in node:
                raise PatchError(f"doc is missing path: {path!r}")
            node = node[tok]
        elif isinstance(node, list):
            node = node[_index(tok, len(node), False)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    node = doc
    for tok in _pointer(path):
        if isinstance(node, dict) and tok in node:
            node = node[tok]
        elif isinstance(node, list):
            node = node[_index(tok, len(node), False)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return node


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), True), value)
    else:
        raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"remove operation does not apply: doc is missing path: {path!r}")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(last, len(parent), False))
    raise PatchError(f"remove operation does not apply: doc is missing path: {path!r}")


def apply_json_patch(doc: Any, patch: Any, copy_limit: int = MAX_JSON_PATCH_COPY_BYTES) -> Any:
    """Apply an RFC 6902 operation list to a copy of `doc`, within kube-apiserver's bounds."""
    if not isinstance(patch, list):
        raise PatchFormatError("json patch must be a list of operations")
    if len(patch) > MAX_JSON_PATCH_OPERATIONS:
        raise PatchTooLarge(f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, "
                            f"got {len(patch)}")
    doc = deep_copy(doc)
    copied = 0
    for op in patch:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchFormatError(f"invalid operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchFormatError(f"{kind} operation is missing 'value': {op!r}")
        if kind in ("move", "copy") and "from" not in op:
            raise PatchFormatError(f"{kind} operation is missing 'from': {op!r}")
        if kind == "add":
            doc = _add(doc, path, deep_copy(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            if not _pointer(path):
                doc = deep_copy(op["value"])
                continue
            _get(doc, path)  # must exist
            doc, _ = _remove(doc, path)
            doc = _add(doc, path, deep_copy(op["value"]))
        elif kind == "move":
            if path != op["from"] and path.startswith(op["from"] + "/"):
                raise PatchError(f"cannot move {op['from']!r} into its own child {path!r}")
            doc, value = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "copy":
            raw = orjson.dumps(_get(doc, op["from"]))
            copied += len(raw)
            if copied > copy_limit:  # evanphx/json-patch's words
                raise PatchCopyTooLarge(f"Unable to complete the copy, the accumulated size increase of copy is {copied}, "
                                 f"exceeding the limit {copy_limit}")
            doc = _add(doc, path, orjson.loads(raw))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(f"testing value {path!r} failed: test failed")
        else:
            raise PatchFormatError(f"unexpected kind of operation: {kind!r}")
    return doc


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces; the
    result shares nothing with ``doc`` or ``patch``."""
    return deep_copy(merged(doc, patch))


def merged(doc: Any, patch: Any) -> Any:
    """RFC 7386 as `apply_merge_patch`, without copying: the result shares what the patch leaves
    alone with `doc`, and takes the patch's own values. Neither is changed here, nor may be later:
    for stored objects, which are never mutated, and a patch just parsed for this write. A status
    patch on a QueueUnit copied its whole spec (pod templates) for nothing."""
    if not isinstance(patch, dict):
        return patch
    out = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


