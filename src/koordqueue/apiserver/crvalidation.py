"""Custom resources checked against their CRD, as kube-apiserver does it for structural schemas.

A write of a custom resource goes as in k8s.io/apiextensions-apiserver: `prepare` prunes it
(fields the schema does not know are dropped unless under x-kubernetes-preserve-unknown-fields,
so are nulls of fields that are neither nullable nor defaulted) and fills in the schema's
defaults; mutating admission runs; then `validate` checks it: the metadata causes found before,
the schema with kube-openapi's validators (type and format, pattern, enum, required, bounds,
lengths, item and property counts, anyOf/allOf/oneOf/not), the scale subresource's replica
paths, the uniqueness of x-kubernetes-list-type map and set lists, and the
x-kubernetes-validations rules. Field paths, values and messages are kube-apiserver's
(`spec.x in body should match '...'`, `must be of type integer: "string"`, `Required value`).
An update ratchets as CRDValidationRatcheting does: an error in a part the update left as it
was is not an error.

Rules (CEL): only `self == oldSelf`, a field that may not change once set, is evaluated; our
CRDs and the training operator's use no other. Any other rule is not evaluated (logged once).
As in kube-apiserver, a CRD that has rules reports "some validation rules were not checked"
instead of running them when a blocking error (required, unsupported, too long, too many,
wrong type) was found.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import ipaddress
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from koordqueue.apiserver.registry import ResourceType
from koordqueue.apiserver.validation import (
    DUPLICATE,
    FORBIDDEN,
    INVALID,
    NO_FIELD,
    NOT_SUPPORTED,
    OMIT,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    TYPE_INVALID,
    Cause,
    FieldError,
    go_float,
    go_json,
    go_quote,
    invalid,
    too_long,
    too_many,
)

log = logging.getLogger(__name__)

Schema = dict[str, Any]
PRESERVE = "x-kubernetes-preserve-unknown-fields"
RULES = "x-kubernetes-validations"
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
NOT_CHECKED = ("some validation rules were not checked because the object was invalid; correct the existing "
               "errors to complete validation")
_BLOCKING = {NOT_SUPPORTED, REQUIRED, TOO_LONG, TOO_MANY, TYPE_INVALID}
_TYPE_META = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True, slots=True)
class _Problem:
    """One kube-openapi error before it becomes a field error (see `_field_error`)."""

    code: str  # type, required, enum, too_long, max_items, max_properties, other, plain
    name: str  # kube-openapi's path ("" at the root; "spec.x", "spec.m.key", "spec.l[0]")
    message: str
    value: Any = None
    valid: Any = None  # the bound, for too_long / max_items / max_properties
    values: tuple[Any, ...] = ()  # an enum's values


# --- the schema, compiled --------------------------------------------------------------------


class _Node:
    """One schema node, read once: what every write checks against it, and what lies below it."""

    __slots__ = ("schema", "types", "format", "nullable", "has_default", "default", "preserve", "embedded",
                 "props", "extra", "extra_allowed", "items", "any_of", "one_of", "all_of", "not_", "required",
                 "pattern", "regex", "enum", "list_type", "list_keys", "rules", "format_check", "defaulted",
                 "rules_below", "lists_below")

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.types = _types(schema)
        self.format = _format(schema)
        self.nullable = bool(schema.get("nullable"))
        self.has_default = "default" in schema
        self.default = schema.get("default")
        self.preserve = bool(schema.get(PRESERVE))
        self.embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        self.props = {k: _Node(v) for k, v in (schema.get("properties") or {}).items() if isinstance(v, dict)}
        extra = schema.get("additionalProperties")
        self.extra = _Node(extra) if isinstance(extra, dict) else None
        self.extra_allowed = extra is True
        items = schema.get("items")
        self.items = _Node(items) if isinstance(items, dict) else None
        self.any_of = [_Node(x) for x in schema.get("anyOf") or () if isinstance(x, dict)]
        self.one_of = [_Node(x) for x in schema.get("oneOf") or () if isinstance(x, dict)]
        self.all_of = [_Node(x) for x in schema.get("allOf") or () if isinstance(x, dict)]
        self.not_ = _Node(schema["not"]) if isinstance(schema.get("not"), dict) else None
        self.required = tuple(schema.get("required") or ())
        pattern = schema.get("pattern")
        self.pattern = pattern if isinstance(pattern, str) and pattern else ""
        self.regex = _regex(self.pattern) if self.pattern else None
        enum = schema.get("enum")
        self.enum = enum if isinstance(enum, list) and enum else None
        self.list_type = schema.get("x-kubernetes-list-type")
        self.list_keys = list(schema.get("x-kubernetes-list-map-keys") or ())
        self.rules = tuple(r for r in schema.get(RULES) or () if isinstance(r, dict))
        self.format_check = _FORMAT_CHECKS.get(self.format.replace("-", "")) if self.format else None
        self.defaulted = [(k, node) for k, node in self.props.items() if node.has_default]
        below = [*self.props.values(), *(n for n in (self.extra, self.items) if n is not None)]
        self.rules_below: bool = bool(self.rules) or any(n.rules_below for n in below)
        self.lists_below: bool = self.list_type in ("set", "map") or any(n.lists_below for n in below)

    def child(self, key: str) -> _Node | None:
        """The schema of field `key` (a property, else additionalProperties)."""
        return self.props.get(key) or self.extra


# --- prune and default ---------------------------------------------------------------------------

_DROP = object()


def _same(value: Any, old: Any) -> bool:
    """The same JSON (true is not 1, 1.0 is not 1, as Python's == would have them): a part
    equal to the stored one needs no pruning, and its problems, if any, were old's (ratcheting)."""
    if value is old:
        return True
    try:
        return orjson.dumps(value) == orjson.dumps(old)
    except (TypeError, orjson.JSONEncodeError):
        return False


def _prune(node: _Node, value: Any, stored: Any, root: bool = False) -> Any:
    """`value` pruned and defaulted; parts shared with `stored` (a patch left them alone) are kept
    as they are, and nothing is changed in place: a changed part is a new copy."""
    if stored is not None and _same(value, stored):  # as stored: pruned when it was written
        return stored
    if value is None:
        return value if node.nullable or node.has_default else _DROP
    if isinstance(value, list):
        if node.items is None:
            return value
        earlier = stored if isinstance(stored, list) else []
        new_items = []
        for i, item in enumerate(value):
            pruned = _prune(node.items, item, earlier[i] if i < len(earlier) else None)
            new_items.append(None if pruned is _DROP else pruned)  # a list keeps its nulls
        return value if all(a is b for a, b in zip(new_items, value, strict=True)) else new_items
    if not isinstance(value, dict):
        return value
    before = stored if isinstance(stored, dict) else {}
    changed: dict[str, Any] = {}
    dropped: list[str] = []
    for key, child in value.items():
        sub = node.child(key)
        if sub is None:
            if not (node.preserve or node.extra_allowed or ((root or node.embedded) and key in _TYPE_META)):
                dropped.append(key)
            continue
        if root and key == "metadata":
            continue
        pruned = _prune(sub, child, before.get(key))
        if pruned is _DROP:
            dropped.append(key)
        elif pruned is not child:
            changed[key] = pruned
    missing = [k for k, sub in node.defaulted if k not in value or (value[k] is None and not sub.nullable)]
    if not changed and not dropped and not missing:
        return value
    out = {k: changed.get(k, v) for k, v in value.items() if k not in dropped}
    for key, sub in node.defaulted:
        if key not in out or (out[key] is None and not sub.nullable):
            out[key] = _prune(sub, copy.deepcopy(sub.default), None)
    return out


# --- kube-openapi's validators -------------------------------------------------------------------


def _types(schema: Schema) -> list[str]:
    if schema.get("x-kubernetes-int-or-string"):
        return ["integer", "string"]
    kind = schema.get("type")
    return [kind] if isinstance(kind, str) and kind else []


_STRING_FORMATS = {"bsonobjectid", "uri", "email", "hostname", "ipv4", "ipv6", "cidr", "mac", "uuid", "uuid3",
                   "uuid4", "uuid5", "isbn", "isbn10", "isbn13", "creditcard", "ssn", "hexcolor", "rgbcolor",
                   "byte", "password", "date", "duration", "datetime", "k8s-short-name", "k8s-long-name"}


def _format(schema: Schema) -> str:
    """The format kube-apiserver keeps: the ones it knows for the type, others dropped."""
    fmt = schema.get("format")
    if not isinstance(fmt, str) or not fmt:
        return ""
    types = _types(schema)
    kind = types[0] if len(types) == 1 else ""
    if kind in ("", "string"):
        return fmt if fmt.replace("-", "") in _STRING_FORMATS or fmt in _STRING_FORMATS else ""
    if kind == "integer":
        return fmt if fmt in ("int32", "int64") else ""
    if kind == "number":
        return fmt if fmt in ("float", "double") else ""
    return ""


def _as_go(value: Any) -> Any:
    """What Go's JSON decoding makes of a number: ints beyond int64 are float64."""
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        return float(value)
    return value


def _json_type(value: Any) -> tuple[str, str]:
    """kube-openapi's schemaInfoForType: (JSON type, format) of a value."""
    if isinstance(value, bool):
        return "boolean", ""
    if isinstance(value, str):
        return "string", ""
    if isinstance(value, int):
        return "integer", "int64"
    if isinstance(value, float):
        return "number", "float64"
    if isinstance(value, list):
        return "array", ""
    if isinstance(value, dict):
        return "object", ""
    return "", ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def go_regex(pattern: str) -> re.Pattern[str]:
    """A Go (RE2) pattern in Python: `$` is the end of the text, not also before a final newline."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "$":
            ch = r"\Z"
        out.append(ch)
        i += 1
    return re.compile("".join(out))


_REGEX_CACHE: dict[str, re.Pattern[str] | None] = {}


def _regex(pattern: str) -> re.Pattern[str] | None:
    if pattern not in _REGEX_CACHE:
        try:
            _REGEX_CACHE[pattern] = go_regex(pattern)
        except re.error:
            _REGEX_CACHE[pattern] = None
    return _REGEX_CACHE[pattern]


_DATE_TIME_RE = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
_UUID_RE = {
    "uuid": r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
    "uuid3": r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
    "uuid4": r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
    "uuid5": r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
}


def _is_date(text: str) -> bool:
    try:
        dt.datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        return False
    return bool(re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text))


def _is_date_time(text: str) -> bool:
    """strfmt.IsDateTime."""
    if len(text) < 4:
        return False
    parts = text.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _DATE_TIME_RE.match(parts[1])
    if m is None:
        return False
    return m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _is_byte(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _is_ip(version: int) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            return ipaddress.ip_address(text).version == version
        except ValueError:
            return False
    return check


def _matching(pattern: str) -> Callable[[str], bool]:
    rx = re.compile(pattern)
    return lambda text: bool(rx.match(text))


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


# The formats checked (strfmt's); the others kube-apiserver knows are accepted as they are.
_FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "datetime": _is_date_time,
    "date": _is_date,
    "byte": _is_byte,
    "ipv4": _is_ip(4),
    "ipv6": _is_ip(6),
    "cidr": _is_cidr,
    **{name: _matching(rx) for name, rx in _UUID_RE.items()},
}


class _Walk:
    """One validation of a value against a schema: kube-openapi's SchemaValidator, with ratcheting."""

    def node(self, node: _Node, value: Any, path: str, old: Any = None, has_old: bool = False) -> list[_Problem]:
        """Problems of `value` at `path` (kube-openapi's name); none where it equals `old` (ratcheting)."""
        if has_old and _same(value, old):  # ratcheted: its problems, if any, were old's
            return []
        found = self._node(node, _as_go(value), path, old, has_old)
        if found and has_old and value == old:
            return []
        return found

    def _node(self, node: _Node, value: Any, path: str, old: Any, has_old: bool) -> list[_Problem]:
        out: list[_Problem] = []

        def add(problems: list[_Problem]) -> None:
            for p in problems:
                if all((q.name, q.message) != (p.name, p.message) for q in out):
                    out.append(p)

        if value is None:
            if node.types and "null" not in node.types and not node.nullable:
                add([_type_problem(path, ",".join(node.types), "null")])
            add(_enum(node, value, path))
            return out
        if node.types or node.format:
            add(_type(node.types, node.format, value, path))
        if node.any_of or node.one_of or node.all_of or node.not_:
            add(self._combinators(node, value, path, old, has_old))
        if isinstance(value, str):
            add(_string(node, value, path))
            if node.format_check is not None and not node.format_check(value):
                add([_type_problem(path, node.format, value)])
        elif isinstance(value, list):
            add(self._slice(node, value, path, old, has_old))
        elif _is_number(value):
            add(_number(node, value, path))
        if node.enum is not None:
            add(_enum(node, value, path))
        if isinstance(value, dict):
            add(self._object(node, value, path, old, has_old))
        return out

    def _combinators(self, node: _Node, value: Any, path: str, old: Any, has_old: bool) -> list[_Problem]:
        out: list[_Problem] = []
        if node.any_of:  # the first that passes ends it; else the failures of the one that failed least
            failures: list[list[_Problem]] = []
            for option in node.any_of:
                found = self.node(option, value, path, old, has_old)
                if not found:
                    break
                failures.append(found)
            else:
                out.append(_Problem("plain", path, f"{go_quote(path)} must validate at least one schema (anyOf)"))
                out += _fewest(failures)
        if node.one_of:
            results: list[list[_Problem]] = [self.node(option, value, path, old, has_old)
                                             for option in node.one_of]
            valid = sum(1 for r in results if not r)
            if valid != 1:
                more = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
                out.append(_Problem("plain", path,
                                    f"{go_quote(path)} must validate one and only one schema (oneOf). {more}"))
                if valid == 0:
                    out += _fewest(results)
        if node.all_of:
            every = [self.node(option, value, path, old, has_old) for option in node.all_of]
            for r in every:
                out += r
            valid = sum(1 for r in every if not r)
            if valid != len(node.all_of):
                more = ". None validated" if valid == 0 else ""
                out.append(_Problem("plain", path, f"{go_quote(path)} must validate all the schemas (allOf){more}"))
        if node.not_ is not None and not self.node(node.not_, value, path, old, has_old):
            out.append(_Problem("plain", path, f"{go_quote(path)} must not validate the schema (not)"))
        return out

    def _slice(self, node: _Node, value: list[Any], path: str, old: Any, has_old: bool) -> list[_Problem]:
        out: list[_Problem] = []
        schema = node.schema
        if node.items is not None:
            olds = _correlated_items(node, value, old) if has_old else {}
            for i, item in enumerate(value):
                out += self.node(node.items, item, f"{path}[{i}]", olds.get(i), i in olds)
        size = len(value)
        if isinstance(schema.get("minItems"), int) and size < schema["minItems"]:
            out.append(_Problem("other", path, f"{_name(path)} should have at least {schema['minItems']} items",
                                value=size))
        if isinstance(schema.get("maxItems"), int) and size > schema["maxItems"]:
            out.append(_Problem("max_items", path, f"{_name(path)} should have at most {schema['maxItems']} items",
                                value=size, valid=schema["maxItems"]))
        if schema.get("uniqueItems"):
            seen: list[Any] = []
            for item in value:
                if item in seen:
                    out.append(_Problem("other", path, f"{_name(path)} shouldn't contain duplicates"))
                    break
                seen.append(item)
        return out

    def _object(self, node: _Node, value: dict[str, Any], path: str, old: Any, has_old: bool) -> list[_Problem]:
        out: list[_Problem] = []
        schema = node.schema
        size = len(value)
        if isinstance(schema.get("minProperties"), int) and size < schema["minProperties"]:
            out.append(_Problem("other", path,
                                f"{_name(path)} should have at least {schema['minProperties']} properties",
                                value=size))
        if isinstance(schema.get("maxProperties"), int) and size > schema["maxProperties"]:
            out.append(_Problem("max_properties", path,
                                f"{_name(path)} should have at most {schema['maxProperties']} properties",
                                value=size, valid=schema["maxProperties"]))
        before = old if has_old and isinstance(old, dict) else None
        if node.extra is not None:
            for key, child in value.items():
                if key not in node.props:
                    out += self.node(node.extra, child, f"{path}.{key}", *_child(before, key))
        for key, child in value.items():
            sub = node.props.get(key)
            if sub is not None:
                out += self.node(sub, child, f"{path}.{key}" if path else key, *_child(before, key))
        for key in node.required:
            if key not in value:
                out.append(_Problem("required", f"{path}.{key}", f"{path}.{key} in body is required"))
        return out


def _fewest(results: list[list[_Problem]]) -> list[_Problem]:
    """The failures of the alternative that failed least (the first of them)."""
    best = results[0]
    for found in results[1:]:
        if len(found) < len(best):
            best = found
    return best


def _child(old: dict[str, Any] | None, key: str) -> tuple[Any, bool]:
    if old is None or key not in old:
        return None, False
    return old[key], True


def _correlated_items(node: _Node, value: list[Any], old: Any) -> dict[int, Any]:
    """Old items of a list-type map, by the index of the new item with the same keys (only
    such lists are ratcheted item by item)."""
    if node.list_type != "map" or not node.list_keys or not isinstance(old, list):
        return {}
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for item in old:
        if isinstance(item, dict):
            by_key.setdefault(tuple(_hashable(item.get(k)) for k in node.list_keys), item)
    out = {}
    for i, item in enumerate(value):
        if isinstance(item, dict):
            match = by_key.get(tuple(_hashable(item.get(k)) for k in node.list_keys))
            if match is not None:
                out[i] = match
    return out


def _hashable(value: Any) -> Any:
    return go_json(value) if isinstance(value, (dict, list)) else value


def _name(path: str) -> str:
    """kube-openapi's error subject: `path in body`."""
    return f"{path} in body"


def _type_problem(path: str, wanted: str, got: str) -> _Problem:
    return _Problem("type", path, f"{_name(path)} must be of type {wanted}: {go_quote(got)}", value=got)


def _type(types: list[str], fmt: str, value: Any, path: str) -> list[_Problem]:
    """kube-openapi's typeValidator."""
    kind, data_format = _json_type(value)
    float_int = kind == "number" and float(value).is_integer() and "integer" in types
    int_float = kind == "integer" and "number" in types
    lower = (fmt == "int64" and data_format == "int32") or (fmt == "float64" and data_format == "float32")
    if not isinstance(value, (str, list)) and fmt and not (
            kind in types or data_format == fmt or float_int or int_float or lower):
        return [_type_problem(path, fmt, data_format)]
    if not ("number" in types or "integer" in types) and fmt and isinstance(value, (str, list)):
        return []
    if not (kind in types or float_int or int_float):
        return [_type_problem(path, ",".join(types), kind)]
    return []


def _string(node: _Node, value: str, path: str) -> list[_Problem]:
    """kube-openapi's stringValidator: the first of maxLength, minLength, pattern that fails."""
    schema = node.schema
    if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
        return [_Problem("too_long", path, f"{_name(path)} should be at most {schema['maxLength']} chars long",
                         value=value, valid=schema["maxLength"])]
    if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
        return [_Problem("other", path, f"{_name(path)} should be at least {schema['minLength']} chars long",
                         value=value)]
    if node.pattern:
        if node.regex is None:
            return [_Problem("other", path, f"{_name(path)} should match '{node.pattern}, but pattern is invalid'",
                             value=value)]
        if not node.regex.search(value):
            return [_Problem("other", path, f"{_name(path)} should match '{node.pattern}'", value=value)]
    return []


def _number_text(bound: float, value: Any) -> str:
    """A bound as kube-openapi prints it: as an integer for an integer value, else as a float."""
    return str(int(bound)) if isinstance(value, int) else go_float(float(bound))


def _number(node: _Node, value: float, path: str) -> list[_Problem]:
    """kube-openapi's numberValidator: the type's range (int32, int64), multipleOf, minimum, maximum."""
    out: list[_Problem] = []
    schema, types = node.schema, node.types
    kind = types[0] if len(types) == 1 else ""
    fmt = schema.get("format") if kind == "integer" and schema.get("format") in ("int32", "int64") else ""
    if kind == "integer":
        low, high = (INT32_MIN, INT32_MAX) if fmt == "int32" else (INT64_MIN, INT64_MAX)
        whole = isinstance(value, int) or (float(value).is_integer() and abs(value) < 2.0 ** 63)
        if not whole or not low <= int(value) <= high:
            wanted = f"with format {fmt}" if fmt else "(default format)"
            out.append(_Problem("plain", path, f"Checked value must be of type integer {wanted} in {path}"))
    factor = _bound(schema, "multipleOf")
    if factor is not None:
        if factor <= 0:
            out.append(_Problem("other", path, f"factor MultipleOf declared for {path} must be positive: "
                                               f"{_number_text(factor, value)}", value=factor))
        elif isinstance(value, int):
            if value % int(factor) != 0:
                out.append(_Problem("other", path, f"{_name(path)} should be a multiple of {int(factor)}",
                                    value=value))
        elif not (value / factor if factor >= 1 else 1 / factor * value).is_integer():
            out.append(_Problem("other", path, f"{_name(path)} should be a multiple of {go_float(factor)}",
                                value=value))
    for key, below in (("minimum", True), ("maximum", False)):
        limit = _bound(schema, key)
        if limit is None:
            continue
        exclusive = bool(schema.get("exclusiveMinimum" if below else "exclusiveMaximum"))
        bound = int(limit) if isinstance(value, int) else limit
        if (value < bound if below else value > bound) or (exclusive and value == bound):
            words = ("greater than" if below else "less than") + ("" if exclusive else " or equal to")
            out.append(_Problem("other", path, f"{_name(path)} should be {words} {_number_text(limit, value)}",
                                value=value))
    return out


def _bound(schema: Schema, key: str) -> float | None:
    value = schema.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _enum(node: _Node, value: Any, path: str) -> list[_Problem]:
    allowed = node.enum
    if allowed is None:
        return []
    for option in allowed:
        if option == value and isinstance(option, bool) == isinstance(value, bool) and (
                isinstance(option, str) == isinstance(value, str)):
            return []
    shown = "[" + " ".join(str(v) for v in allowed) + "]"
    return [_Problem("enum", path, f"{_name(path)} should be one of {shown}", value=value, values=tuple(allowed))]


def _field_error(problem: _Problem, prefix: str) -> FieldError:
    """kube-apiserver's kubeOpenAPIResultToFieldErrors: a kube-openapi error as a field error."""
    if problem.code == "plain":  # not a validation error of a field: reported at the validated root
        return invalid(prefix or NO_FIELD, "", problem.message)
    name = problem.name.lstrip(".")
    field = ".".join(p for p in (prefix, name) if p) or NO_FIELD
    if problem.code == "required":
        return FieldError(REQUIRED, field)
    if problem.code == "enum":
        shown = [v if isinstance(v, str) else go_json(v) for v in problem.values]
        return FieldError(NOT_SUPPORTED, field, problem.value,
                          "supported values: " + ", ".join(go_quote(v) for v in shown))
    if problem.code == "too_long":
        return too_long(field, int(problem.valid))
    if problem.code in ("max_items", "max_properties"):
        return too_many(field, int(problem.value), int(problem.valid))
    value = "" if problem.value is None else problem.value
    return FieldError(TYPE_INVALID if problem.code == "type" else INVALID, field, value, problem.message)


# --- the scale subresource's paths ---------------------------------------------------------------


def _go_type(value: Any) -> str:
    if value is None:
        return "<nil>"
    return {bool: "bool", str: "string", int: "int64", float: "float64", dict: "map[string]interface {}",
            list: "[]interface {}"}.get(type(value), type(value).__name__)


def _go_v(value: Any) -> str:
    """Go's `%v` of an unstructured value."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_v(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_v(v) for v in value) + "]"
    return str(value)


def _nested(obj: dict[str, Any], path: str, want: str) -> tuple[Any, str | None]:
    """unstructured.NestedInt64 / NestedString: (value or None when absent, accessor error)."""
    fields = path.lstrip(".").split(".")
    value: Any = obj
    for i, name in enumerate(fields):
        if value is None:
            return None, None
        if not isinstance(value, dict):
            where = "." + ".".join(fields[:i + 1])
            return None, (f"{where} accessor error: {_go_v(value)} is of the type {_go_type(value)}, "
                          "expected map[string]interface{}")
        if name not in value:
            return None, None
        value = value[name]
    value = _as_go(value)
    ok = isinstance(value, str) if want == "string" else isinstance(value, int) and not isinstance(value, bool)
    if not ok:
        return None, f".{'.'.join(fields)} accessor error: {_go_v(value)} is of the type {_go_type(value)}, expected {want}"
    return value, None


def _replicas(obj: dict[str, Any], path: str) -> list[FieldError]:
    value, error = _nested(obj, path, "int64")
    if error is not None:
        return [invalid(path, 0, error)]
    if value is not None and value < 0:
        return [invalid(path, value, "should be a non-negative integer")]
    if value is not None and value > INT32_MAX:
        return [invalid(path, value, f"should be less than or equal to {INT32_MAX}")]
    return []


# --- list types ------------------------------------------------------------------------------------


def _list_types(node: _Node, value: Any, path: str, old: Any = None) -> list[FieldError]:
    """structurallisttype.ValidateListSetsAndMaps: duplicates in list-type set and map lists
    (parts the same object as in `old` are skipped: their errors, if any, were old's too)."""
    if not node.lists_below or (old is not None and _same(value, old)):
        return []
    out: list[FieldError] = []
    before = old if isinstance(old, dict) else {}
    if isinstance(value, dict):
        for key, child in value.items():
            if node.extra is not None:
                out += _list_types(node.extra, child, f"{path}[{key}]", before.get(key))
            sub = node.props.get(key)
            if sub is not None:
                out += _list_types(sub, child, f"{path}.{key}" if path else key, before.get(key))
    elif isinstance(value, list):
        if node.list_type == "set":
            out += [FieldError(DUPLICATE, f"{path}[{i}]", value[i]) for i in _repeated(value)]
        elif node.list_type == "map":
            out += _map_list(node, value, path)
        if node.items is not None:
            for i, item in enumerate(value):
                out += _list_types(node.items, item, f"{path}[{i}]")
    return out


def _repeated(values: list[Any]) -> list[int]:
    """Indexes of the second occurrence of each repeated value."""
    counts: dict[Any, int] = {}
    out = []
    for i, v in enumerate(values):
        key = _hashable(v)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] == 2:
            out.append(i)
    return out


def _map_list(node: _Node, value: list[Any], path: str) -> list[FieldError]:
    for i, item in enumerate(value):
        if item is not None and not isinstance(item, dict):
            return [invalid(f"{path}[{i}]", item, "must be an object for an array of list-type map")]
    if len(value) <= 1:
        return []
    names = node.list_keys
    keys = [{k: item[k] for k in names if k in item} if isinstance(item, dict) else {} for item in value]
    if len(names) == 1:
        singles = [k.get(names[0], _UNSET) for k in keys]
        return [FieldError(DUPLICATE, f"{path}[{i}]", {} if singles[i] is _UNSET else {names[0]: singles[i]})
                for i in _repeated(singles)]
    return [FieldError(DUPLICATE, f"{path}[{i}]", keys[i]) for i in _repeated(keys)]


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


# --- rules -------------------------------------------------------------------------------------------

_IMMUTABLE = re.compile(r"^\s*self\s*==\s*oldSelf\s*$")
_warned: set[str] = set()


def _rules(node: _Node, value: Any, path: str, old: Any, has_old: bool) -> list[FieldError]:
    """x-kubernetes-validations: `self == oldSelf` evaluated where there is an old value."""
    if not node.rules_below or (has_old and value is old):
        return []
    out: list[FieldError] = []
    for rule in node.rules:
        text = str(rule.get("rule", ""))
        if not _IMMUTABLE.match(text):
            if text not in _warned:
                _warned.add(text)
                log.warning("validation rule %r is not evaluated by the embedded API server", text)
            continue
        if not has_old or value == old:
            continue
        where = path or NO_FIELD
        if rule.get("fieldPath"):
            where = f"{path}.{str(rule['fieldPath']).lstrip('.')}" if path else str(rule["fieldPath"]).lstrip(".")
        detail = str(rule.get("message") or "").strip() or f"failed rule: {text.strip()}"
        shown = OMIT if isinstance(value, (dict, list)) else value
        reason = rule.get("reason")
        if reason == FORBIDDEN:
            out.append(FieldError(FORBIDDEN, where, OMIT, detail))
        elif reason == REQUIRED:
            out.append(FieldError(REQUIRED, where, OMIT, detail))
        elif reason == DUPLICATE:
            out.append(FieldError(DUPLICATE, where, shown))
        else:
            out.append(FieldError(INVALID, where, shown, detail))
    if isinstance(value, dict):
        before = old if has_old and isinstance(old, dict) else None
        for key, child in value.items():
            sub = node.props.get(key)
            if sub is not None:
                out += _rules(sub, child, f"{path}.{key}" if path else key, *_child(before, key))
            elif node.extra is not None:
                out += _rules(node.extra, child, f"{path}[{key}]", *_child(before, key))
    elif isinstance(value, list) and node.items is not None:
        olds = _correlated_items(node, value, old) if has_old else {}
        for i, item in enumerate(value):
            out += _rules(node.items, item, f"{path}[{i}]", olds.get(i), i in olds)
    return out


# --- the validator of one kind -----------------------------------------------------------------


class Validator:
    """The checks of one custom resource kind: its schema, scale paths and rules."""

    def __init__(self, schema: Schema, scale: dict[str, str] | None) -> None:
        self.root = _Node(schema)
        self.status = self.root.props.get("status")
        self.scale = scale or {}

    def prepare(self, obj: dict[str, Any], stored: Any = None) -> dict[str, Any]:
        """`obj` as kube-apiserver stores what it was sent: pruned, nulls dropped, defaulted."""
        out: dict[str, Any] = _prune(self.root, obj, stored, root=True)
        return out

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None,
                 metadata: list[Cause]) -> list[Cause | FieldError]:
        """The errors of a create (`old` None) or an update of the object, after `metadata`'s."""
        errs: list[Cause | FieldError] = list(metadata)
        errs += [_field_error(p, "") for p in _Walk().node(self.root, obj, "", old, old is not None)]
        if self.scale.get("specReplicasPath"):
            errs += _replicas(obj, self.scale["specReplicasPath"])
        errs += self._scale_status(obj)
        errs += self._new_list_errors(obj, old)
        return self._with_rules(errs, obj, old)

    def validate_status(self, obj: dict[str, Any], old: dict[str, Any],
                        metadata: list[Cause]) -> list[Cause | FieldError]:
        """The errors of a write to the status subresource: the status against its own schema."""
        errs: list[Cause | FieldError] = list(metadata)
        if "status" in obj and self.status is not None:
            found = _Walk().node(self.status, obj["status"], "", old.get("status"), "status" in old)
            errs += [_field_error(p, "status") for p in found]
        errs += self._scale_status(obj)
        errs += self._new_list_errors(obj, old)
        return self._with_rules(errs, obj, old)

    def _new_list_errors(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
        """List-type errors, ratcheted as kube-apiserver does: none when the old object had some."""
        found = _list_types(self.root, obj, "", old)
        if found and old is not None and _list_types(self.root, old, ""):
            return []
        return found

    def _scale_status(self, obj: dict[str, Any]) -> list[FieldError]:
        errs: list[FieldError] = []
        if self.scale.get("statusReplicasPath"):
            errs += _replicas(obj, self.scale["statusReplicasPath"])
        if self.scale.get("labelSelectorPath"):
            _, error = _nested(obj, self.scale["labelSelectorPath"], "string")
            if error is not None:
                errs.append(invalid(self.scale["labelSelectorPath"], "", error))
        return errs

    def _with_rules(self, errs: list[Cause | FieldError], obj: dict[str, Any],
                    old: dict[str, Any] | None) -> list[Cause | FieldError]:
        if not self.root.rules_below:
            return errs
        if any(_blocking(e) for e in errs):
            return [*errs, invalid(NO_FIELD, None, NOT_CHECKED)]
        return errs + _rules(self.root, obj, "", old, old is not None)


def _blocking(error: Cause | FieldError) -> bool:
    """kube-apiserver's hasBlockingErr: an error after which the rules are not run."""
    if isinstance(error, FieldError):
        return error.type in _BLOCKING
    return error[1].startswith(("Required value", "Too long", "Too many", "Unsupported value"))


# A kind's validator, built once per registered type: id(rt) -> (rt, validator); holding rt
# keeps its id from being reused.
_VALIDATORS: dict[int, tuple[ResourceType, Validator | None]] = {}


def validator_for(rt: ResourceType) -> Validator | None:
    """The checks of a custom resource kind; None for a built-in kind or a CRD without a schema."""
    cached = _VALIDATORS.get(id(rt))
    if cached is not None and cached[0] is rt:
        return cached[1]
    if len(_VALIDATORS) >= 1024:
        _VALIDATORS.clear()
    validator = Validator(rt.schema, rt.scale) if rt.from_crd and rt.schema else None
    _VALIDATORS[id(rt)] = (rt, validator)
    return validator
