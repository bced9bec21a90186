"""Numbers beyond float64's range in JSON text (formats/json_numbers.py), and how messages quote values
(terminal.excerpt / shorten): what each gives, and that neither costs more for a huge value than for a short one."""

from __future__ import annotations

import json
import math
import time

import pytest

from ptdbg_ascend.formats.json_numbers import HOOKS, OutOfRange
from ptdbg_ascend.terminal import excerpt, shorten

pytestmark = pytest.mark.torchfree


def loads(text):
    return json.loads(text, **HOOKS)


def test_numbers_within_float64_read_as_json_reads_them():
    largest = str(int(1.7976931348623157e308))  # 309 digits: float64's largest finite value, exactly
    values = loads(f"[0, -7, 1.5, -0.0, 1e308, -1.7976931348623157e308, 1e-400, NaN, Infinity, -Infinity, {largest}]")
    assert values[:7] == [0, -7, 1.5, -0.0, 1e308, -1.7976931348623157e308, 0.0]
    assert type(values[1]) is int and type(values[2]) is float
    assert math.isnan(values[7]) and values[8:10] == [math.inf, -math.inf]
    assert type(values[10]) is int and float(values[10]) == 1.7976931348623157e308  # 309 digits, still in range


@pytest.mark.parametrize("literal, description", [
    ("1e400", "1e400"), ("-2.5E+999", "-2.5E+999"), ("1" + "0" * 309, "a 310-digit integer"),
    ("-" + "9" * 5000, "a 5000-digit integer"), ("2" + "0" * 308, "a 309-digit integer"),
    ("1" + "0" * 400 + ".0", "a 403-character number"),
], ids=["1e400", "-2.5E+999", "310-digits", "5000-digits", "309-digits-beyond", "long-mantissa"])
def test_numbers_beyond_float64_read_as_out_of_range(literal, description):
    started = time.perf_counter()
    (value,) = loads(f"[{literal}]")
    assert time.perf_counter() - started < 1.0
    assert isinstance(value, OutOfRange) and not isinstance(value, (int, float))
    assert str(value) == description and repr(value) == f"<{description}, beyond float64's range>"


def test_excerpt_is_repr_when_short_and_bounded_when_not():
    for value in (1, "a\x1bb", [1, (2,), {"a": {3}}], frozenset(), (1,), {"k": []}, None, 1.5, [[[[[[[[1]]]]]]]]):
        assert excerpt(value) == repr(value)
    assert excerpt("x" * 1000) == repr("x" * 255) + "... (1000 characters)"
    assert excerpt(["y" * 1000], 20) == "['" + "y" * 18 + "..."
    assert excerpt(10 ** 5000) == "<an integer of about 5001 digits>"
    assert shorten("z" * 300, 10) == "zzzzzzzzzz... (300 characters)" and shorten("short") == "short"
    nested = []
    nested.append(nested)
    assert excerpt(nested).startswith("[[[[") and len(excerpt(nested)) < 300


def test_excerpt_of_a_billion_shared_items_formats_only_what_it_shows():
    level = ["lol"] * 9
    for _ in range(9):  # what YAML aliases build: 9**10 items through shared lists
        level = [level] * 9
    started = time.perf_counter()
    text = excerpt(level, 100)
    assert time.perf_counter() - started < 0.5
    assert text.startswith("[" * 10 + "'lol', 'lol'") and text.endswith("...") and len(text) == 103
