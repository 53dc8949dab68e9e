"""Number formatting: every digit, thousands separators, no float anywhere."""

from __future__ import annotations

from decimal import Decimal

import pytest

from frontend.formatting import format_count, format_decimal, format_rate, format_seconds


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("1234567.891234", "1,234,567.891234"),
        ("-1234567.891234", "-1,234,567.891234"),
        ("-0.000001", "-0.000001"),
        ("0", "0"),
        ("-0", "0"),
        ("0.000", "0.000"),
        ("999", "999"),
        ("1000", "1,000"),
        ("1E+3", "1,000"),
        ("1.5E-7", "0.00000015"),
        ("12345678901234567890.123456789012345678", "12,345,678,901,234,567,890.123456789012345678"),
        ("-99999999999999999999999999999999999999", "-99,999,999,999,999,999,999,999,999,999,999,999,999"),
    ],
)
def test_format_decimal_keeps_every_digit(value: str, shown: str) -> None:
    assert format_decimal(Decimal(value)) == shown


def test_decimal_sum_is_exact_where_a_float_is_not() -> None:
    assert 0.1 + 0.2 != 0.3  # why values never become floats
    assert format_decimal(Decimal("0.1") + Decimal("0.2")) == "0.3"


def test_format_decimal_refuses_non_finite() -> None:
    with pytest.raises(ValueError, match="not a finite decimal"):
        format_decimal(Decimal("NaN"))


def test_counts_rates_and_latency_for_people() -> None:
    assert format_count(1234567) == "1,234,567"
    assert format_count(-3) == "-3"
    assert format_rate(None) == "—"
    assert format_rate(1234.56) == "1,234.6/s"
    assert format_seconds(None) == "—"
    assert format_seconds(0.8404) == "840 ms"
    assert format_seconds(2.345) == "2.35 s"  # binary 2.345 is just below, so it rounds down
