"""Reading the parts every object shares (metadata), with errors a user can act on.

Objects arrive as raw dicts, from the API server or straight from a user's YAML. Anything
malformed becomes an ``InvalidObject`` whose message names the object and the field,
never a ``KeyError`` or ``TypeError`` from deep inside.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_NAMESPACE = "default"
INT32_MAX = 2**31 - 1
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")


class InvalidObject(ValueError):
    """An object we cannot use as written; ``reason`` says why, for a message or an event."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Meta:
    """The metadata fields we use, checked."""

    kind: str
    name: str
    namespace: str
    uid: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """``PyTorchJob default/train``: how messages name the object."""
        return f"{self.kind} {self.namespace}/{self.name}"


def read_meta(obj: object, kind: str) -> Meta:
    """The checked metadata of ``obj``; a missing namespace is ``default`` as kubectl does."""
    if not isinstance(obj, Mapping):
        raise InvalidObject(f"{kind}: the object must be a mapping, got {type(obj).__name__}")
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise InvalidObject(f"{kind}: metadata is missing or not a mapping")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObject(f"{kind}: metadata.name is missing or not a string")
    namespace = metadata.get("namespace") or DEFAULT_NAMESPACE
    if not isinstance(namespace, str):
        raise InvalidObject(f"{kind} {name}: metadata.namespace is not a string")
    where = f"{kind} {namespace}/{name}"
    uid = metadata.get("uid")
    return Meta(
        kind=kind,
        name=name,
        namespace=namespace,
        uid=uid if isinstance(uid, str) and uid else None,
        labels=_string_map(metadata.get("labels"), f"{where}: metadata.labels"),
        annotations=_string_map(metadata.get("annotations"), f"{where}: metadata.annotations"),
    )


def _string_map(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidObject(f"{where} must be a mapping of strings")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidObject(f"{where}[{key!r}] must be a string (quote it in YAML), got {item!r}")
    return dict(value)


def section(obj: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> Mapping[str, Any]:
    """The mapping ``obj[key]``; absent is empty unless ``required``."""
    value = obj.get(key)
    if value is None:
        if required:
            raise InvalidObject(f"{where}: {key} is missing")
        return {}
    if not isinstance(value, Mapping):
        raise InvalidObject(f"{where}: {key} must be a mapping, got {type(value).__name__}")
    return value


def read_int(value: object, where: str, *, minimum: int = -INT32_MAX - 1, maximum: int = INT32_MAX) -> int:
    """An integer field (int32 range unless told otherwise); strings are not integers here."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidObject(f"{where} must be an integer, got {value!r}")
    if not minimum <= value <= maximum:
        raise InvalidObject(f"{where} must be between {minimum} and {maximum}, got {value}")
    return value


def parse_int_text(text: str, where: str, *, minimum: int = -INT32_MAX - 1, maximum: int = INT32_MAX) -> int:
    """An integer written as text (an annotation value)."""
    stripped = text.strip()
    if not _INTEGER.fullmatch(stripped):
        raise InvalidObject(f"{where} must be an integer, got {text!r}")
    return read_int(int(stripped), where, minimum=minimum, maximum=maximum)
