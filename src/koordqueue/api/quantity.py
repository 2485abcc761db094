"""Kubernetes resource quantities as exact integers of milli-units.

Kubernetes writes amounts as strings (``"100m"``, ``"8"``, ``"200Gi"``, ``"2e3"``).
We keep them as ``int`` milli-units so that sums and comparisons are exact: no
float ever touches a quota. Parsing follows ``k8s.io/apimachinery`` ``resource.Quantity``
(grammar, suffixes, and rounding up to a whole milli-unit like ``MilliValue()``).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction

ResourceList = dict[str, int]
"""Resource name -> amount in milli-units (same alias as ``engine.model``)."""

MAX_MILLI = 2**63 - 1
"""The largest amount we accept, in milli-units (what fits an int64 MilliValue)."""

_MAX_TEXT = 256  # longer strings are rejected before any arithmetic

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}  # powers of 1024
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_OUT = ("k", "M", "G", "T", "P", "E")  # powers of 1000, in order, for formatting

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>[KMGTPE]i|[numkMGTPE]?))"
)


class QuantityError(ValueError):
    """A resource amount that is not a valid, acceptable Kubernetes quantity."""


def parse_quantity(value: str | int | float, *, allow_negative: bool = False) -> int:
    """Return ``value`` in milli-units, rounded up to a whole milli-unit.

    Negative amounts are refused unless ``allow_negative`` (requests and quotas are
    never negative).
    """
    if isinstance(value, str):
        return _parse_text_once(value, allow_negative)
    return _milli(value, allow_negative)


@functools.lru_cache(maxsize=1024)
def _parse_text_once(value: str, allow_negative: bool) -> int:
    """The same few texts come again and again (every pod of a kind asks for "4"): each is
    parsed once. Errors are not kept: they are raised again, with the same message."""
    return _milli(value, allow_negative)


def _milli(value: str | int | float, allow_negative: bool) -> int:
    milli = _exact_value(value) * 1000
    result = math.ceil(milli)
    if result < 0 and not allow_negative:
        raise QuantityError(f"quantity {value!r} is negative; only amounts >= 0 are allowed")
    if abs(result) > MAX_MILLI:
        raise QuantityError(f"quantity {value!r} is too large (more than {MAX_MILLI} milli-units)")
    return result


def _exact_value(value: object) -> Fraction:
    """The exact amount ``value`` stands for, in whole units."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is a boolean, not an amount")
    if isinstance(value, int):
        if abs(value) > MAX_MILLI // 1000:
            raise QuantityError(f"quantity {value!r} is too large (more than {MAX_MILLI} milli-units)")
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"quantity {value!r} is not a finite number")
        return _parse_text(repr(value), value)
    if isinstance(value, str):
        return _parse_text(value.strip(), value)
    raise QuantityError(f"quantity {value!r} is a {type(value).__name__}, not a string or number")


def _parse_text(text: str, original: object) -> Fraction:
    if not text:
        raise QuantityError("quantity is empty")
    if len(text) > _MAX_TEXT:
        raise QuantityError(f"quantity {text[:32]!r}... is too long ({len(text)} characters)")
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(
            f"quantity {original!r} is not a number with an optional suffix "
            "(examples: 100m, 8, 1.5, 2e3, 200Gi)"
        )
    digits = (match["int"] or "") + (match["frac"] or "")
    mantissa = int(digits) if digits else 0
    if match["sign"] == "-":
        mantissa = -mantissa
    exp10 = -len(match["frac"] or "")
    exp2 = 0
    if match["exp"]:
        exp10 += int(match["exp"][1:])
    elif match["suffix"] in _BINARY:
        exp2 = 10 * _BINARY[match["suffix"]]
    else:
        exp10 += _DECIMAL[match["suffix"] or ""]
    if mantissa == 0:
        return Fraction(0)
    if exp10 > 40:  # a non-zero mantissa times 10**41 is beyond any int64 of milli-units
        raise QuantityError(f"quantity {original!r} is too large (more than {MAX_MILLI} milli-units)")
    if exp10 < -(len(digits) + 40):  # so small that it rounds up to 1m (or down to 0)
        return Fraction(1 if mantissa > 0 else 0, 10**6)
    scale10 = Fraction(10**exp10) if exp10 >= 0 else Fraction(1, 10**-exp10)
    return Fraction(mantissa * 2**exp2) * scale10


def format_quantity(milli: int) -> str:
    """The short form a person reads: ``1500m``, ``8``, ``200Gi``, ``4k``.

    Fractions of a unit are written in ``m``; whole amounts in the shortest of plain
    digits, the largest exact binary suffix (Ki..Ei) and the largest exact decimal one
    (k..E), binary first on a tie. ``parse_quantity(format_quantity(x)) == x``.
    """
    if isinstance(milli, bool) or not isinstance(milli, int):
        raise QuantityError(f"amount {milli!r} is not an integer of milli-units")
    sign = "-" if milli < 0 else ""
    milli = abs(milli)
    if milli % 1000:
        return f"{sign}{milli}m"
    units = milli // 1000
    if units == 0:
        return "0"
    candidates = [_with_suffix(units, 1024, _BINARY), _with_suffix(units, 1000, _DECIMAL_OUT), str(units)]
    return sign + min(candidates, key=len)


def _with_suffix(units: int, base: int, suffixes: Iterable[str]) -> str:
    """``units`` with the largest suffix (powers of ``base``) that divides it exactly."""
    best = str(units)
    for power, suffix in enumerate(suffixes, start=1):
        if units % base**power:
            break
        best = f"{units // base**power}{suffix}"
    return best


def parse_resource_list(mapping: object, *, allow_negative: bool = False) -> ResourceList:
    """A resource list (``{cpu: "4", memory: 8Gi}``) in milli-units; ``None`` is empty."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise QuantityError(f"resource list must be a mapping of name to quantity, got {mapping!r}")
    result: ResourceList = {}
    for name, value in mapping.items():
        if not isinstance(name, str) or not name:
            raise QuantityError(f"resource name {name!r} is not a non-empty string")
        try:
            result[name] = parse_quantity(value, allow_negative=allow_negative)
        except QuantityError as err:
            raise QuantityError(f"{name}: {err}") from None
    return result


def format_resource_list(resources: Mapping[str, int]) -> dict[str, str]:
    """The inverse of ``parse_resource_list``, in the short forms of ``format_quantity``."""
    return {name: format_quantity(amount) for name, amount in resources.items()}


def add(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Per-resource sum; a resource missing on one side counts as 0."""
    result = dict(a)
    for name, amount in b.items():
        result[name] = result.get(name, 0) + amount
    return result


def sub(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Per-resource difference ``a - b`` (may be negative)."""
    result = dict(a)
    for name, amount in b.items():
        result[name] = result.get(name, 0) - amount
    return result


def scale(a: Mapping[str, int], factor: int) -> ResourceList:
    """Every amount times ``factor`` (replicas times the per-pod request)."""
    return {name: amount * factor for name, amount in a.items()}


def maximum(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    """Per-resource maximum (a pod's request against one init container's)."""
    result = dict(a)
    for name, amount in b.items():
        result[name] = max(result.get(name, 0), amount)
    return result


def less_equal(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """Whether every amount of ``a`` is at most ``b``'s (missing in ``b`` counts as 0)."""
    return all(amount <= b.get(name, 0) for name, amount in a.items())
