"""Human-readable numbers, computed in Python so no value ever passes through a float.

Aggregate values are exact decimals (DynamoDB numbers hold up to 38 significant
digits). The browser only ever receives the formatted strings, so a JavaScript
float can never round what the user reads.
"""

from __future__ import annotations

from decimal import Decimal


def format_decimal(value: Decimal) -> str:
    """Every digit of ``value`` with thousands separators, never in exponent form.

    ``Decimal('1234567.891234')`` becomes ``1,234,567.891234`` and
    ``Decimal('1E+3')`` becomes ``1,000``. Negative zero is shown as ``0``:
    a sum that cancels out is zero to the reader.
    """
    if not value.is_finite():
        raise ValueError(f"not a finite decimal: {value}")
    if value.is_zero():
        value = abs(value)
    return f"{value:,f}"


def format_count(count: int) -> str:
    """An integer count with thousands separators (``12,345``)."""
    return f"{count:,d}"


def format_seconds(seconds: float | None) -> str:
    """A latency for people: ``840 ms`` below a second, ``2.35 s`` above, ``—`` when unknown."""
    if seconds is None:
        return "—"
    if abs(seconds) < 1:
        return f"{seconds * 1000:,.0f} ms"
    return f"{seconds:,.2f} s"


def format_rate(per_second: float | None) -> str:
    """A throughput (messages applied per second) with one decimal, ``—`` when unknown."""
    if per_second is None:
        return "—"
    return f"{per_second:,.1f}/s"
