"""Object validation as kube-apiserver words it: field errors, names, labels, annotations.

`FieldError` is Go's field.Error (k8s.io/apimachinery/pkg/util/validation/field): its
message is what `ErrorBody()` prints, values quoted and formatted as Go does, because
kubectl shows these messages as they are. The metadata checks follow the Kubernetes API
conventions (DNS-1123 names, qualified label keys), so a manifest our server accepts is
one a real cluster accepts. Each check returns (field, message) causes for a 422 `Invalid`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

Cause = tuple[str, str]

# Go's field.ErrorType values (the `reason` of a Status cause) and how ErrorBody() titles them.
INVALID = "FieldValueInvalid"
TYPE_INVALID = "FieldValueTypeInvalid"
REQUIRED = "FieldValueRequired"
NOT_SUPPORTED = "FieldValueNotSupported"
FORBIDDEN = "FieldValueForbidden"
DUPLICATE = "FieldValueDuplicate"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
_TITLES = {INVALID: "Invalid value", TYPE_INVALID: "Invalid value", REQUIRED: "Required value",
           NOT_SUPPORTED: "Unsupported value", FORBIDDEN: "Forbidden", DUPLICATE: "Duplicate value",
           TOO_LONG: "Too long", TOO_MANY: "Too many"}
_WITHOUT_VALUE = {REQUIRED, FORBIDDEN, TOO_LONG}
NO_FIELD = "<nil>"  # how Go prints a nil field path
OMIT = object()  # a FieldError value that is not shown


@dataclass(frozen=True, slots=True)
class FieldError:
    """One field error: its type, field path (as Go's field.Path prints it), value and detail."""

    type: str
    field: str
    value: Any = OMIT
    detail: str = ""

    @property
    def message(self) -> str:
        """Go's `ErrorBody()`: "Invalid value: \"x\": detail", "Required value", ..."""
        text = _TITLES[self.type]
        if self.type not in _WITHOUT_VALUE and self.value is not OMIT:
            text = f"{text}: {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(INVALID, field, value, detail)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(REQUIRED, field, OMIT, detail)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(FORBIDDEN, field, OMIT, detail)


def not_supported(field: str, value: Any, supported: list[str]) -> FieldError:
    return FieldError(NOT_SUPPORTED, field, value,
                      "supported values: " + ", ".join(go_quote(v) for v in supported) if supported else "")


def too_long(field: str, limit: int) -> FieldError:
    return FieldError(TOO_LONG, field, OMIT, f"may not be more than {limit} {'byte' if limit == 1 else 'bytes'}"
                      if limit >= 0 else "value is too long")


def too_many(field: str, actual: int, limit: int) -> FieldError:
    detail = f"must have at most {limit} {'item' if limit == 1 else 'items'}" if limit >= 0 else "has too many items"
    return FieldError(TOO_MANY, field, actual if actual >= 0 else OMIT, detail)


def aggregate(errs: list[FieldError]) -> str:
    """Go's `ErrorList.ToAggregate().Error()`: one message, or "[a, b]", duplicates dropped."""
    texts = list(dict.fromkeys(str(e) for e in errs))
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


def go_quote(text: str) -> str:
    """Go's `%q` (strconv.Quote): printable characters as they are, the rest escaped."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_float(x: float) -> str:
    """Go's `%v` of a float64 (strconv 'g', shortest): 1.5, 3, 1e+06, 2.147483647e+09."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "-0" if math.copysign(1, x) < 0 else "0"
    sign, digits, exp = Decimal(repr(x)).normalize().as_tuple()
    assert isinstance(exp, int)
    text = "".join(map(str, digits))
    point = len(text) + exp  # digits before the decimal point
    e = point - 1
    if e < -4 or e >= 6:  # shortest precision decides with 6, as strconv does
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        out = f"{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"
    elif point <= 0:
        out = "0." + "0" * -point + text
    elif point >= len(text):
        out = text + "0" * (point - len(text))
    else:
        out = text[:point] + "." + text[point:]
    return ("-" if sign else "") + out


def go_json(value: Any) -> str:
    """Go's json.Marshal: compact, map keys sorted, <, > and & escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_value(value: Any) -> str:
    """A value as Go's field.Error shows it: %v for numbers and booleans, %q for strings, else JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return go_json(value)


_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*"
_DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"

_RE = {k: re.compile(f"^{v}$") for k, v in {
    "label": _DNS1123_LABEL,
    "subdomain": _DNS1123_SUBDOMAIN,
    "dns1035": _DNS1035_LABEL,
    "qualified": _QUALIFIED_NAME,
    "value": _LABEL_VALUE,
}.items()}

SUBDOMAIN = "subdomain"  # most kinds
LABEL = "label"  # Namespace
DNS1035 = "dns1035"  # Service


_RULES = {  # rule: (most characters, Go's error message, examples)
    LABEL: (63, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                "start and end with an alphanumeric character", ("my-name", "123-abc")),
    DNS1035: (63, "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                  "alphabetic character, and end with an alphanumeric character", ("my-name", "abc-123")),
    SUBDOMAIN: (253, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                     "'.', and must start and end with an alphanumeric character", ("example.com",)),
}
_REGEX = {LABEL: _DNS1123_LABEL, DNS1035: _DNS1035_LABEL, SUBDOMAIN: _DNS1123_SUBDOMAIN}


def regex_error(message: str, regex: str, *examples: str) -> str:
    """Go's validation.RegexError (its odd double space between examples included)."""
    if not examples:
        return f"{message} (regex used for validation is '{regex}')"
    listed = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {listed}regex used for validation is '{regex}')"


def name_problems(name: str, rule: str) -> list[str]:
    """Go's IsDNS1123Label / IsDNS1035Label / IsDNS1123Subdomain: what is wrong with `name`."""
    limit, message, examples = _RULES[rule]
    problems = []
    if len(name) > limit:
        problems.append(f"must be no more than {limit} characters")
    if not _RE[rule].match(name):
        if rule == LABEL and _RE[SUBDOMAIN].match(name):
            problems.append("must not contain dots")
        else:
            problems.append(regex_error(message, _REGEX[rule], *examples))
    return problems


def check_name(name: str, rule: str, field: str = "metadata.name") -> list[Cause]:
    return [(field, invalid(field, name, problem).message) for problem in name_problems(name, rule)]


def _check_qualified_key(key: str, field: str) -> list[Cause]:
    prefix, _, name = key.rpartition("/")
    causes: list[Cause] = []
    if "/" in key and not prefix:
        return [(field, f"Invalid value: {go_quote(key)}: prefix part must be non-empty")]
    if prefix:
        causes += [(field, m.replace("metadata.name", field)) for _, m in check_name(prefix, SUBDOMAIN)]
    if not name or len(name) > 63 or not _RE["qualified"].match(name):
        causes.append((
            field,
            f"Invalid value: {go_quote(key)}: name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') "
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        ))
    return causes


TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024  # bytes of keys and values, as kube-apiserver counts them


def check_metadata(meta: dict[str, Any]) -> list[Cause]:
    """Labels, annotations, finalizers and ownerReferences of an object being written."""
    causes: list[Cause] = []
    for attr, kind in (("labels", "map"), ("annotations", "map"), ("finalizers", "list"),
                       ("ownerReferences", "list")):
        value = meta.get(attr)
        if value is None:
            continue
        want = dict if kind == "map" else list
        if not isinstance(value, want):
            causes.append((f"metadata.{attr}", f"Invalid value: {go_quote(str(value))}: must be a {kind}"))
    if causes:
        return causes
    for key, value in (meta.get("labels") or {}).items():
        causes += _check_qualified_key(key, "metadata.labels")
        if not isinstance(value, str):
            causes.append(("metadata.labels", f"Invalid value: {value!r}: must be a string"))
        elif len(value) > 63 or not _RE["value"].match(value):
            causes.append((
                "metadata.labels",
                f"Invalid value: {go_quote(value)}: a valid label must be an empty string or consist of "
                "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ))
    size = 0
    for key, value in (meta.get("annotations") or {}).items():
        causes += _check_qualified_key(key, "metadata.annotations")
        if not isinstance(value, str):
            causes.append(("metadata.annotations", f"Invalid value: {value!r}: must be a string"))
        else:
            size += len(key.encode()) + len(value.encode())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(("metadata.annotations", too_long("metadata.annotations", TOTAL_ANNOTATION_SIZE_LIMIT).message))
    for i, fin in enumerate(meta.get("finalizers") or []):
        if not isinstance(fin, str) or not fin:
            causes.append((f"metadata.finalizers[{i}]", "Required value: finalizer must be a non-empty string"))
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        if not isinstance(ref, dict):
            causes.append((f"metadata.ownerReferences[{i}]", "Invalid value: must be an object"))
            continue
        for attr in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(attr):
                causes.append((f"metadata.ownerReferences[{i}].{attr}", "Required value"))
    return causes
