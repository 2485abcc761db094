"""Quantities: Kubernetes grammar, exact milli-units, rounding up, clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koordqueue.api.quantity import (
    MAX_MILLI,
    QuantityError,
    add,
    format_quantity,
    format_resource_list,
    less_equal,
    maximum,
    parse_quantity,
    parse_resource_list,
    scale,
    sub,
)

GI = 2**30


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("100m", 100),
        ("8", 8000),
        ("0", 0),
        ("200Gi", 200 * GI * 1000),
        ("1.5", 1500),
        ("2e3", 2_000_000),
        ("2E3", 2_000_000),
        ("1e-3", 1),
        ("1Ki", 1024 * 1000),
        ("1Mi", 2**20 * 1000),
        ("1Ti", 2**40 * 1000),
        ("1k", 1_000_000),
        ("1M", 10**9),
        ("1G", 10**12),
        ("0.001E", 10**18),  # exa is recognised; 1E itself is beyond 2**63 milli-units
        ("1P", 10**18),
        ("0.1m", 1),  # rounds up to a whole milli-unit, like MilliValue()
        ("1n", 1),
        ("1500u", 2),
        ("0.5Ki", 512 * 1000),
        (".5", 500),
        ("5.", 5000),
        ("+3", 3000),
        ("-0", 0),
        ("0e999999", 0),
        ("1e-400", 1),
        (" 4 ", 4000),
        (8, 8000),
        (1.5, 1500),
        (0.1, 100),
        (2e3, 2_000_000),
    ],
)
def test_parse_quantity(text: str | int | float, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "not a number"),
        ("", "empty"),
        ("   ", "empty"),
        ("-1", "negative"),
        (-1, "negative"),
        ("1e400", "too large"),
        ("1E", "too large"),
        ("8Ei", "too large"),
        ("9223372036854776", "too large"),  # 2**63 milli and a bit
        (2**62, "too large"),
        (float("inf"), "not a finite number"),
        (float("nan"), "not a finite number"),
        (True, "boolean"),
        (None, "NoneType"),
        ([1], "list"),
        ("1K", "not a number"),  # the kilo suffix is lower-case k
        ("1e", "not a number"),
        ("1Gb", "not a number"),
        ("1.2.3", "not a number"),
        (".", "not a number"),
        ("m", "not a number"),
        ("1" * 300, "too long"),
    ],
)
def test_parse_quantity_rejects(value: object, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        parse_quantity(value)  # type: ignore[arg-type]


def test_negative_allowed_on_request() -> None:
    assert parse_quantity("-1500m", allow_negative=True) == -1500
    assert parse_quantity(-2, allow_negative=True) == -2000


def test_largest_amount() -> None:
    assert parse_quantity(f"{MAX_MILLI}m") == MAX_MILLI
    with pytest.raises(QuantityError, match="too large"):
        parse_quantity(f"{MAX_MILLI + 1}m")


@pytest.mark.parametrize(
    ("milli", "text"),
    [
        (0, "0"),
        (1, "1m"),
        (1500, "1500m"),
        (8000, "8"),
        (1_500_000, "1500"),
        (1_000_000, "1k"),
        (4 * 10**9, "4M"),
        (1024 * 1000, "1Ki"),
        (200 * GI * 1000, "200Gi"),
        (3 * 2**20 * 1000, "3Mi"),
        (10**18, "1P"),
        (10**18 * 9, "9P"),  # not 8789062500000Ki: the shortest form wins
        (2048 * 1000, "2Ki"),
        (1_024_000_000, "1024k"),  # shorter than 1000Ki
        (123_456_000, "123456"),
        (-1500, "-1500m"),
        (-8 * GI * 1000, "-8Gi"),
    ],
)
def test_format_quantity(milli: int, text: str) -> None:
    assert format_quantity(milli) == text


def test_format_rejects_non_integer() -> None:
    with pytest.raises(QuantityError, match="not an integer"):
        format_quantity(1.5)  # type: ignore[arg-type]


@given(st.integers(min_value=-MAX_MILLI, max_value=MAX_MILLI))
def test_round_trip(milli: int) -> None:
    assert parse_quantity(format_quantity(milli), allow_negative=True) == milli


@given(st.integers(min_value=0, max_value=2**23), st.sampled_from(["Ki", "Mi", "Gi", "k", "M", "m", ""]))
def test_round_trip_from_text(number: int, suffix: str) -> None:
    milli = parse_quantity(f"{number}{suffix}")
    assert parse_quantity(format_quantity(milli)) == milli


def test_resource_lists() -> None:
    parsed = parse_resource_list({"cpu": "100", "memory": "200Gi", "nvidia.com/gpu": "8"})
    assert parsed == {"cpu": 100_000, "memory": 200 * GI * 1000, "nvidia.com/gpu": 8000}
    assert format_resource_list(parsed) == {"cpu": "100", "memory": "200Gi", "nvidia.com/gpu": "8"}
    assert parse_resource_list(None) == {}


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"cpu": "abc"}, "cpu: quantity 'abc'"),
        ({"memory": "-1Gi"}, "memory: .*negative"),
        (["cpu"], "must be a mapping"),
        ({"": "1"}, "resource name"),
        ({3: "1"}, "resource name"),
    ],
)
def test_resource_list_rejects(mapping: object, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        parse_resource_list(mapping)


def test_arithmetic() -> None:
    a = {"cpu": 4000, "memory": 10}
    b = {"cpu": 1000, "nvidia.com/gpu": 2000}
    assert add(a, b) == {"cpu": 5000, "memory": 10, "nvidia.com/gpu": 2000}
    assert sub(a, b) == {"cpu": 3000, "memory": 10, "nvidia.com/gpu": -2000}
    assert scale(a, 3) == {"cpu": 12000, "memory": 30}
    assert maximum(a, b) == {"cpu": 4000, "memory": 10, "nvidia.com/gpu": 2000}
    assert less_equal({"cpu": 1000}, a)
    assert not less_equal({"cpu": 5000}, a)
    assert not less_equal({"nvidia.com/gpu": 1}, a)  # missing counts as 0
    assert a == {"cpu": 4000, "memory": 10}  # inputs untouched
