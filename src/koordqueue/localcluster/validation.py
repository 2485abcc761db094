"""Object-metadata validation: names, labels, annotations, finalizers.

The checks and messages follow the Kubernetes API conventions (DNS-1123 names,
qualified label keys), so a manifest our server accepts is one a real cluster accepts.
Each check returns (field, message) causes for a 422 `Invalid`.
"""

from __future__ import annotations

import re
from typing import Any

Cause = tuple[str, str]

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


def _quote(value: str) -> str:
    return '"' + value.replace('"', '\\"') + '"'


def check_name(name: str, rule: str, field: str = "metadata.name") -> list[Cause]:
    if rule == LABEL:
        limit, regex, what, example = 63, _DNS1123_LABEL, "a lowercase RFC 1123 label", "'my-name', or '123-abc'"
        chars = "lower case alphanumeric characters or '-'"
    elif rule == DNS1035:
        limit, regex, what, example = 63, _DNS1035_LABEL, "a DNS-1035 label", "'my-name', or 'abc-123'"
        chars = "lower case alphanumeric characters or '-'"
    else:
        limit, regex, what, example = 253, _DNS1123_SUBDOMAIN, "a lowercase RFC 1123 subdomain", "'example.com'"
        chars = "lower case alphanumeric characters, '-' or '.'"
    causes: list[Cause] = []
    if len(name) > limit:
        causes.append((field, f"Invalid value: {_quote(name)}: must be no more than {limit} characters"))
    if not _RE[rule].match(name):
        start = "start with an alphabetic character" if rule == DNS1035 else "start"
        end = "end with an alphanumeric character"
        causes.append((
            field,
            f"Invalid value: {_quote(name)}: {what} must consist of {chars}, and must {start} and {end} "
            f"(e.g. {example}, regex used for validation is '{regex}')",
        ))
    return causes


def _check_qualified_key(key: str, field: str) -> list[Cause]:
    prefix, _, name = key.rpartition("/")
    causes: list[Cause] = []
    if "/" in key and not prefix:
        return [(field, f"Invalid value: {_quote(key)}: prefix part must be non-empty")]
    if prefix:
        causes += [(field, m.replace("metadata.name", field)) for _, m in check_name(prefix, SUBDOMAIN)]
    if not name or len(name) > 63 or not _RE["qualified"].match(name):
        causes.append((
            field,
            f"Invalid value: {_quote(key)}: name part must consist of alphanumeric characters, '-', '_' or '.', "
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
            causes.append((f"metadata.{attr}", f"Invalid value: {_quote(str(value))}: must be a {kind}"))
    if causes:
        return causes
    for key, value in (meta.get("labels") or {}).items():
        causes += _check_qualified_key(key, "metadata.labels")
        if not isinstance(value, str):
            causes.append(("metadata.labels", f"Invalid value: {value!r}: must be a string"))
        elif len(value) > 63 or not _RE["value"].match(value):
            causes.append((
                "metadata.labels",
                f"Invalid value: {_quote(value)}: a valid label must be an empty string or consist of "
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
        causes.append(("metadata.annotations", f"Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"))
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
