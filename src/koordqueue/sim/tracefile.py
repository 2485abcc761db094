"""Reading a trace file fast, and large ones as they are simulated.

A trace whose ``jobs`` list comes last is streamed: everything before it is read at
once, and its jobs are read one at a time as the simulated clock reaches them, so a
million-job trace never sits in memory. JSON (a file that starts with ``{``) is read by
the standard library's C scanner, one job at a time; YAML by libyaml's C parser, with
objects built straight from its events (PyYAML's own constructor, pure Python, took
most of the time).

Whatever streaming cannot take as it comes (a key after ``jobs``, jobs out of time
order, merge keys or other rare YAML, JSON that turns out to be YAML) raises
``ReadWhole``: the caller starts again with the file read whole (``stream=False``),
which gives exactly the old results, only slower and in more memory.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import ScalarNode

from .trace import ANCHOR_PREFIX, JobEntry, Trace, TraceError, job_entry, parse_trace

JOBS = "jobs"
CHUNK = 1 << 20  # bytes read at a time from a JSON trace (more only for a longer value)
SCALAR_CACHE = 4096  # distinct scalars kept resolved; cleared when full
_MAP_TAGS = (None, "!", "tag:yaml.org,2002:map")
_SEQ_TAGS = (None, "!", "tag:yaml.org,2002:seq")
_SPECIAL_KEYS = ("<<", "=")  # merge and value keys: PyYAML's own constructor handles them
_WHITESPACE = re.compile(r"[ \t\n\r]*")


class ReadWhole(Exception):
    """The trace cannot be streamed: read it whole and simulate it again."""


def load_trace(path: str | Path, stream: bool = True) -> Trace:
    """Read and check a trace file; raise ``TraceError`` only when it is unusable.

    With ``stream``, a trace whose jobs come last comes back with ``jobs`` an iterator
    that reads the file as it goes, and may raise ``ReadWhole`` while it does.
    """
    try:
        file = open(path, "rb")  # a streamed trace keeps it open until its last job
    except OSError as err:
        raise TraceError(f"cannot read trace {path}: {err}") from None
    try:
        start = file.read(1)
        while start in (b" ", b"\t", b"\r", b"\n"):
            start = file.read(1)
        file.seek(0)
        if not stream:
            with file:
                return parse_trace(_whole(file, path, start == b"{"))
        if start == b"{":
            return _JsonStream(file, path).trace()
        return _YamlStream(file, path).trace()
    except BaseException:
        file.close()
        raise


def _whole(file: IO[bytes], path: str | Path, json_first: bool) -> dict[str, Any]:
    document: Any = None
    if json_first:
        try:
            document = json.loads(_text(file, path))
        except ValueError:
            file.seek(0)  # YAML that looks like JSON at first
    if document is None:
        try:
            document = _YamlStream(file, path).document()
        except ReadWhole:
            file.seek(0)  # rare YAML: PyYAML's own constructor builds it, or says what is wrong
            try:
                document = yaml.load(_text(file, path), Loader=yaml.CSafeLoader)
            except yaml.YAMLError as err:
                raise TraceError(f"trace {path} is not valid YAML: {err}") from None
    if not isinstance(document, dict):
        raise TraceError(f"trace {path} must be a YAML mapping with nodes/objects/jobs/events/until")
    return document


def _text(file: IO[bytes], path: str | Path) -> str:
    try:
        return file.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TraceError(f"cannot read trace {path}: {err}") from None


def _streamed(head: dict[str, Any], jobs: Iterator[JobEntry] | None) -> Trace:
    """The trace of ``head`` (every key but the jobs, in file order) and the jobs still to read."""
    trace = parse_trace(head)
    if jobs is not None:
        trace.jobs = jobs
    return trace


class _JsonStream:
    """A JSON trace read value by value with ``json.JSONDecoder.raw_decode``'s scanner."""

    def __init__(self, file: IO[bytes], path: str | Path) -> None:
        self.file, self.path = file, path
        self.text = ""
        self.pos = 0
        self.decoder = json.JSONDecoder()
        self.utf8 = codecs.getincrementaldecoder("utf-8")()

    def trace(self) -> Trace:
        head: dict[str, Any] = {}
        self._expect("{")
        if self._peek() == "}":
            self._end()
            return _streamed(head, None)
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise ReadWhole()
            self._expect(":")
            if key == JOBS and key not in head and self._peek() == "[":
                head[JOBS] = []  # keeps its place among the keys, as a document would
                self.pos += 1
                return _streamed(head, self._jobs())
            head[key] = self._value()
            if self._separator("}"):
                self._end()
                return _streamed(head, None)

    def _jobs(self) -> Iterator[JobEntry]:
        with self.file:
            if self._peek() == "]":
                self.pos += 1
            else:
                index = 0
                while True:
                    yield job_entry(index, self._value())
                    index += 1
                    if self._separator("]"):
                        break
            while not self._separator("}"):
                key = self._value()
                if not (isinstance(key, str) and key.startswith(ANCHOR_PREFIX)):
                    raise ReadWhole()  # a key after the jobs: they could not be read as they came
                self._expect(":")
                self._value()
            self._end()

    # --- the text, a chunk at a time -----------------------------------------------
    def _more(self, size: int = 0) -> bool:
        """Read on, ``size`` bytes or a chunk; False at the end of the file."""
        data = self.file.read(size or CHUNK)
        try:
            text = self.utf8.decode(data, final=not data)
        except UnicodeDecodeError:
            raise ReadWhole() from None  # the whole read says where
        if not data:
            return False
        self.text = self.text[self.pos:] + text
        self.pos = 0
        return True

    def _peek(self) -> str:
        """The next character that is not whitespace ("" at the end)."""
        while True:
            self.pos = _WHITESPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text) or not self._more():
                return self.text[self.pos:self.pos + 1]

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            raise ReadWhole()
        self.pos += 1

    def _separator(self, close: str) -> bool:
        """Past a ``,`` (False) or ``close`` (True)."""
        char = self.text[self.pos:self.pos + 1]  # (right after a value, as a writer puts it)
        if char not in (",", close):
            char = self._peek()
            if char not in (",", close):
                raise ReadWhole()
        self.pos += 1
        return char == close

    def _value(self) -> Any:
        self._peek()
        # ``raw_decode``'s own scanner, less its frame (it raises StopIteration, not ValueError).
        scan = self.decoder.scan_once  # type: ignore[attr-defined]  # (set by JSONDecoder.__init__)
        while True:
            try:
                value, end = scan(self.text, self.pos)
            except (StopIteration, ValueError):
                if self._more(len(self.text) - self.pos):
                    continue  # the value may go on: read as much again (a long value takes few tries)
                raise ReadWhole() from None  # not JSON after all: PyYAML will say what it is
            if end == len(self.text) and self._more():
                continue  # a number may go on in the next chunk
            self.pos = end
            return value

    def _end(self) -> None:
        if self._peek() != "":
            raise ReadWhole()  # more after the document: let the whole read say what


class _YamlStream:
    """A YAML trace built from libyaml's events (``yaml.CSafeLoader`` parses).

    Scalars are resolved and built by PyYAML's own resolver and constructors, so they
    come out as ``yaml.safe_load`` makes them; each distinct one is built once.
    Mappings and sequences are built here. Anything else (tags on collections, merge
    keys, an alias to an unfinished node) raises ``ReadWhole``.
    """

    def __init__(self, file: IO[bytes], path: str | Path) -> None:
        self.file, self.path = file, path
        self.loader = yaml.CSafeLoader(file)
        self.anchors: dict[str, Any] = {}
        self.scalars: dict[tuple[Any, ...], Any] = {}

    def trace(self) -> Trace:
        try:
            self._expect(StreamStartEvent)
            event = self._next()
            if isinstance(event, StreamEndEvent):
                raise TraceError(f"trace {self.path} must be a YAML mapping with nodes/objects/jobs/events/until")
            event = self._next()  # past the DocumentStartEvent
            if not isinstance(event, MappingStartEvent):
                raise ReadWhole()  # not a mapping: the whole read says so in its words
            if event.tag not in _MAP_TAGS:
                raise ReadWhole()
            head: dict[str, Any] = {}
            while not isinstance(event := self._next(), MappingEndEvent):
                key = self._key(event)
                event = self._next()
                if key == JOBS and key not in head and isinstance(event, SequenceStartEvent) \
                        and event.tag in _SEQ_TAGS and event.anchor is None:
                    head[JOBS] = []  # keeps its place among the keys, as a document would
                    return _streamed(head, self._jobs())
                head[key] = self._value(event)
            self._end()
            return _streamed(head, None)
        except yaml.YAMLError as err:
            raise TraceError(f"trace {self.path} is not valid YAML: {err}") from None

    def document(self) -> Any:
        """The whole document, as ``yaml.load`` with ``CSafeLoader`` builds it."""
        try:
            self._expect(StreamStartEvent)
            event = self._next()
            if isinstance(event, StreamEndEvent):
                return None
            value = self._value(self._next())
            self._end()
            return value
        except yaml.YAMLError as err:
            raise TraceError(f"trace {self.path} is not valid YAML: {err}") from None

    def _jobs(self) -> Iterator[JobEntry]:
        with self.file:
            try:
                index = 0
                while not isinstance(event := self._next(), SequenceEndEvent):
                    yield job_entry(index, self._value(event))
                    index += 1
                while not isinstance(event := self._next(), MappingEndEvent):
                    key = self._key(event)
                    if not (isinstance(key, str) and key.startswith(ANCHOR_PREFIX)):
                        raise ReadWhole()  # a key after the jobs: they could not be read as they came
                    self._value(self._next())
                self._end()
            except yaml.YAMLError as err:
                raise TraceError(f"trace {self.path} is not valid YAML: {err}") from None

    def _next(self) -> Any:
        return self.loader.get_event()

    def _expect(self, kind: type) -> None:
        if not isinstance(self._next(), kind):
            raise ReadWhole()

    def _end(self) -> None:
        self._expect(DocumentEndEvent)
        if not isinstance(self._next(), StreamEndEvent):
            raise ReadWhole()  # a second document: the whole read refuses it in its words

    def _key(self, event: Any) -> Any:
        if isinstance(event, ScalarEvent) and event.value in _SPECIAL_KEYS:
            raise ReadWhole()
        key = self._value(event)
        if isinstance(key, dict | list):
            raise ReadWhole()  # an unhashable key: the whole read refuses it in its words
        return key

    def _value(self, event: Any) -> Any:
        kind = type(event)
        if kind is ScalarEvent:
            value = self._scalar(event)
        elif kind is MappingStartEvent:
            if event.tag not in _MAP_TAGS:
                raise ReadWhole()
            value = {}
            while not isinstance(key_event := self._next(), MappingEndEvent):
                key = self._key(key_event)
                value[key] = self._value(self._next())
        elif kind is SequenceStartEvent:
            if event.tag not in _SEQ_TAGS:
                raise ReadWhole()
            value = []
            while not isinstance(item := self._next(), SequenceEndEvent):
                value.append(self._value(item))
        elif kind is AliasEvent:
            if event.anchor not in self.anchors:
                raise ReadWhole()  # undefined, or an alias inside its own anchor
            return self.anchors[event.anchor]
        else:
            raise ReadWhole()
        if event.anchor is not None:
            self.anchors[event.anchor] = value
        return value

    def _scalar(self, event: ScalarEvent) -> Any:
        key = (event.tag, event.implicit, event.value)
        try:
            return self.scalars[key]
        except KeyError:
            pass
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
        constructor = self.loader.yaml_constructors.get(tag)
        if constructor is None:
            raise ReadWhole()  # an unknown tag: the whole read refuses it in its words
        # types-PyYAML types a node's marks as yaml.error.Mark; the C parser's are yaml._yaml.Mark, alike.
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)  # type: ignore[arg-type]
        value = constructor(self.loader, node)
        if len(self.scalars) >= SCALAR_CACHE:
            self.scalars.clear()
        self.scalars[key] = value
        return value
