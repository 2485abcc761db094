"""Label and field selectors, as in `?labelSelector=` / `?fieldSelector=` and LabelSelector objects.

The string grammar is the one of the Kubernetes API (`a=b`, `a==b`, `a!=b`,
`a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`); a malformed selector is the
client's error (400), never a silent match-all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        try:
            have, want = int(str(value)), int(self.values[0])
        except ValueError:
            return False
        return have > want if self.op == "gt" else have < want


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


EVERYTHING = LabelSelector()

_SPECIAL = set("!=,()<>")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c in _SPECIAL:
            two = text[i:i + 2]
            if two in ("==", "!="):
                out.append(two)
                i += 2
            else:
                out.append(c)
                i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _is_word(tok: str | None) -> bool:
    return tok is not None and tok not in _SPECIAL and tok not in ("==", "!=")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the `labelSelector` query string; raise SelectorError when it is malformed."""
    toks = _tokens(text)
    reqs: list[Requirement] = []
    pos = 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(toks):
            raise SelectorError(f"unable to parse requirement: unexpected end of selector {text!r}")
        pos += 1
        return toks[pos - 1]

    while pos < len(toks):
        tok = take()
        if tok == "!":
            key = take()
            if not _is_word(key):
                raise SelectorError(f"unable to parse requirement: found '{key}', expected: identifier")
            reqs.append(Requirement(key, "!"))
        elif _is_word(tok):
            key, nxt = tok, peek()
            if nxt is None or nxt == ",":
                reqs.append(Requirement(key, "exists"))
            elif nxt in ("=", "==", "!="):
                take()
                value = peek()
                if value is None or value == ",":
                    value = ""
                elif _is_word(value):
                    take()
                else:
                    raise SelectorError(f"unable to parse requirement: found '{value}', expected: identifier")
                reqs.append(Requirement(key, "!=" if nxt == "!=" else "=", (value,)))
            elif nxt in ("in", "notin"):
                take()
                if take() != "(":
                    raise SelectorError("unable to parse requirement: found '', expected: '('")
                values: list[str] = []
                while True:
                    v = take()
                    if v == ")":
                        break
                    if v == ",":
                        continue
                    if not _is_word(v):
                        raise SelectorError(f"unable to parse requirement: found '{v}', expected: ',', ')'")
                    values.append(v)
                if nxt == "in" and not values:
                    raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
                reqs.append(Requirement(key, nxt, tuple(values)))
            elif nxt in (">", "<"):
                take()
                value = take()
                if not value.lstrip("-").isdigit():
                    raise SelectorError(f"for 'Gt', 'Lt' operators, the value must be an integer: {value!r}")
                reqs.append(Requirement(key, "gt" if nxt == ">" else "lt", (value,)))
            else:
                raise SelectorError(
                    f"unable to parse requirement: found '{nxt}', expected: in, notin, =, ==, !=, gt, lt"
                )
        else:
            raise SelectorError(f"unable to parse requirement: found '{tok}', expected: !, identifier")
        nxt = peek()
        if nxt is not None:
            if nxt != ",":
                raise SelectorError(f"found '{nxt}', expected: ',' or 'end of string'")
            take()
            if peek() is None:
                raise SelectorError("found '', expected: identifier after ','")
    return LabelSelector(tuple(reqs))


def selector_from_object(sel: dict[str, Any] | None) -> LabelSelector | None:
    """A `metav1.LabelSelector` (matchLabels/matchExpressions). None (match nothing) if it is invalid."""
    if sel is None:
        return EVERYTHING
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (sel.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in sel.get("matchExpressions") or []:
        op = ops.get(expr.get("operator", ""))
        if op is None or not expr.get("key"):
            return None
        reqs.append(Requirement(expr["key"], op, tuple(str(v) for v in expr.get("values") or ())))
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    value: str
    negate: bool


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, fields: Callable[[str], str]) -> bool:
        return all((fields(r.field) == r.value) != r.negate for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            if text[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{text[i + 1]}")
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse_field_selector(text: str) -> FieldSelector:
    reqs: list[FieldRequirement] = []
    if not text.strip():
        return FieldSelector()
    for part in _split_unescaped(text, ","):
        for op, negate in (("!=", True), ("==", False), ("=", False)):
            idx = part.find(op)
            if idx > 0:
                reqs.append(FieldRequirement(part[:idx].strip(), _unescape(part[idx + len(op):]), negate))
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
    return FieldSelector(tuple(reqs))
