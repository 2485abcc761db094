"""Annotations a tenant writes, read as YAML (JSON is YAML) without the ways a few bytes
become many.

An alias bomb ("billion laughs": nine anchors, each a list of ten aliases of the one
before) is a few hundred bytes that PyYAML loads as shared references; the first copy,
print or JSON dump unfolds it into tens of megabytes and the leader is OOM-killed, then
again on every re-list. So: no anchors or aliases at all (an annotation has no use for
them), at most `MAX_ANNOTATION_BYTES` of text, at most `MAX_DEPTH` levels of nesting (the
composer recurses), and no number Python refuses to convert (an int of 5000 digits raises
ValueError, not a YAML error). Every refusal is a `RefusedYAML`, a `yaml.YAMLError`, so a
caller's existing "not YAML" path turns it into a warning on the object.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

MAX_ANNOTATION_BYTES = 64 * 1024  # kube caps all of an object's annotations at 256 KiB together
MAX_DEPTH = 64


class RefusedYAML(yaml.YAMLError):
    """The text is refused before (or instead of) being expanded; the message says why."""


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer refuses anchors and aliases and deep nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise RefusedYAML("YAML anchors and aliases (&name, *name) are not accepted here: "
                              "write the value out in full")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise RefusedYAML(f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_annotation(text: str) -> Any:
    """The value of one annotation's YAML or JSON text; `RefusedYAML` (a `yaml.YAMLError`)
    when it is too long, uses anchors or aliases, nests too deep or holds an unreadable
    number, and other `yaml.YAMLError`s when it is not YAML."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ANNOTATION_BYTES:
        raise RefusedYAML(f"{size} bytes, more than the {MAX_ANNOTATION_BYTES} accepted")
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError:
        raise
    except (ValueError, RecursionError, OverflowError) as e:  # int() of thousands of digits, and the like
        raise RefusedYAML(f"a value cannot be read: {str(e).splitlines()[0]}") from None
    finally:
        loader.dispose()


def load_manifests(text: str, max_bytes: int) -> list[Any]:
    """The documents of a YAML stream a user pasted (the dashboard's dry run), refused as an
    annotation is: over ``max_bytes``, anchors or aliases, too deep, unreadable numbers."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise RefusedYAML(f"{size} bytes, more than the {max_bytes} accepted")
    loader = _Loader(text)
    try:
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            docs.append(loader.get_data())
        return docs
    except yaml.YAMLError:
        raise
    except (ValueError, RecursionError, OverflowError) as e:
        raise RefusedYAML(f"a value cannot be read: {str(e).splitlines()[0]}") from None
    finally:
        loader.dispose()


def load_json_annotation(text: str) -> Any:
    """The value of one annotation's JSON text; ValueError when it is not JSON or is refused
    (over `MAX_ANNOTATION_BYTES`, or nested so deep that `json.loads` runs out of stack: 100 KB
    of "[" raise RecursionError, which no caller expects)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ANNOTATION_BYTES:
        raise ValueError(f"{size} bytes, more than the {MAX_ANNOTATION_BYTES} accepted")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep") from None
