"""DynamoDB item sizes by the developer guide's rules (what the quarantine, the settings and the
benchmarks size items with)."""

from typing import Any

import pytest

from aggregation.item_size import attribute_value_size_bytes, item_size_bytes, number_size_bytes


@pytest.mark.parametrize(
    ("text", "size"),
    [("0", 2), ("7", 2), ("123", 3), ("0.001", 2), ("-12.50", 3), ("1E+3", 2), ("12345678901234567890", 11)],
)
def test_a_number_takes_a_byte_per_two_significant_digits_plus_one(text: str, size: int) -> None:
    assert number_size_bytes(text) == size


def test_item_size_counts_attribute_names_and_values() -> None:
    item: dict[str, dict[str, Any]] = {"TradeID": {"S": "abc"}, "Version": {"N": "3"}, "Flag": {"BOOL": True}}
    assert item_size_bytes(item) == (7 + 3) + (7 + 2) + (4 + 1)


def test_maps_and_lists_cost_three_bytes_plus_one_per_element() -> None:
    assert attribute_value_size_bytes({"L": [{"N": "1"}, {"N": "2"}]}) == 3 + (1 + 2) * 2
    assert attribute_value_size_bytes({"M": {"Value": {"N": "5"}}}) == 3 + 1 + 5 + 2


def test_an_unknown_attribute_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown"):
        attribute_value_size_bytes({"X": "?"})


def test_binary_values_count_their_raw_bytes() -> None:
    assert item_size_bytes({"PayloadBinary": {"B": b"\xff" * 1000}}) == len("PayloadBinary") + 1000
