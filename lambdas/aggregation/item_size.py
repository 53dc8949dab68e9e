"""DynamoDB item sizes, by the developer guide's rules ("DynamoDB item sizes and formats").

An item over DynamoDB's limit is refused on every attempt, so a stream batch that
writes one retries for ever: the quarantine sizes its payload with these rules, and
the settings refuse a map batch size whose delta item could outgrow the limit.
The benchmarks price writes with the same rules.

The rules: attribute names count (UTF-8 bytes); strings are their UTF-8 bytes;
binary values their raw bytes (not their base64 form); numbers about one byte per
two significant digits plus one; booleans and nulls one byte; lists and maps 3 bytes
plus one per element (and a map element's name).
"""

import math
from collections.abc import Mapping
from typing import Any

MAX_ITEM_BYTES = 400_000
"""DynamoDB's item limit, 400 KB, read as 400,000 bytes: AWS counts 409,600, so the 9,600
bytes between are headroom for the guide's approximate number sizes."""

LIST_OR_MAP_OVERHEAD_BYTES = 3


def number_bytes(significant_digits: int) -> int:
    """Stored size of a number with that many significant digits."""
    return math.ceil(significant_digits / 2) + 1


def number_size_bytes(text: str) -> int:
    """Stored size of a DynamoDB number written as `text`: leading and trailing zeros don't count."""
    digits = text.lstrip("+-").lower().split("e", 1)[0].replace(".", "")
    significant = digits.strip("0") or "0"
    return number_bytes(len(significant))


def attribute_value_size_bytes(value: Mapping[str, Any]) -> int:
    """Size of one attribute value in DynamoDB's wire format ({"S": ...}, {"N": ...}, ...)."""
    ((kind, content),) = value.items()
    if kind == "S":
        return len(str(content).encode("utf-8"))
    if kind == "N":
        return number_size_bytes(str(content))
    if kind == "B":
        return len(content)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        sizes = {
            "SS": lambda item: len(str(item).encode("utf-8")),
            "NS": lambda item: number_size_bytes(str(item)),
            "BS": len,
        }[kind]
        return sum(sizes(item) for item in content)
    if kind == "L":
        return LIST_OR_MAP_OVERHEAD_BYTES + sum(1 + attribute_value_size_bytes(item) for item in content)
    if kind == "M":
        return LIST_OR_MAP_OVERHEAD_BYTES + sum(
            1 + len(name.encode("utf-8")) + attribute_value_size_bytes(item) for name, item in content.items()
        )
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size_bytes(item: Mapping[str, Mapping[str, Any]]) -> int:
    """Size of an item: every attribute's name plus its value."""
    return sum(len(name.encode("utf-8")) + attribute_value_size_bytes(value) for name, value in item.items())
