"""The worst-case DeltaTable item: an upper bound of the real worst item, by DynamoDB's size rules.

The item is built as the map stage writes it (docs/architecture.md, "DeltaTable", with the
stream-position identity: `StreamShard`, `FirstSequenceNumber`, `LastSequenceNumber`), every
part as large as validation lets it be, and serialised as boto3 sends it.
"""

from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer

from aggregation.delta_item_size import max_records_per_delta_item, worst_case_delta_item_bytes
from aggregation.exact import is_dynamodb_number
from aggregation.hierarchy import MAX_LEVEL_VALUE_BYTES, aggregate_keys
from aggregation.item_size import MAX_ITEM_BYTES, item_size_bytes
from aggregation.messages import parse_trade_message
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN

LARGEST_VALUE = Decimal("-999999999999999999.9999999999")
LONGEST_TIMESTAMP = Decimal("99999999999.999999999999999999999999999")  # 38 digits, kept by validation
serializer = TypeSerializer()


def longest_level_value(tag: str) -> str:
    """A distinct level value of exactly the byte limit, mostly 3-byte characters."""
    room = MAX_LEVEL_VALUE_BYTES - len(tag)
    value = tag + "€" * (room // 3) + "x" * (room % 3)
    assert len(value.encode("utf-8")) == MAX_LEVEL_VALUE_BYTES
    return value


def distinct_path(record: int, side: str, levels: int) -> tuple[str, ...]:
    return tuple(longest_level_value(f"{record}{side}{depth}") for depth in range(levels))


def worst_case_item(records: int, levels: int) -> dict[str, Any]:
    """Every record moves a trade between two paths no other record touches."""
    deltas: dict[str, dict[str, Any]] = {}
    for record in range(records):
        for side, sign in (("old", -1), ("new", 1)):
            for key in aggregate_keys(distinct_path(record, side, levels)):
                deltas[key] = {"Value": sign * LARGEST_VALUE, "TradeCount": sign}
    assert len(deltas) == 2 * levels * records
    item = {
        "StreamShard": "2026-11-22T10:11:12.123/" + "shardId-" + "9" * 57,
        "FirstSequenceNumber": "1" * 40,
        "LastSequenceNumber": "9" * 40,
        "BatchHash": "f" * 64,
        "Deltas": deltas,
        "RecordCount": records,
        "ProducerTimestamps": [LONGEST_TIMESTAMP] * records,
        "CreatedAt": 99_999_999_999,
        "ExpiresAt": 99_999_999_999,
        "WrittenByRequestId": "0" * 36,
    }
    return {name: serializer.serialize(value) for name, value in item.items()}


def test_the_worst_case_item_is_made_of_valid_messages() -> None:
    message = (
        '{"TradeID": "t", "Version": 1, "Value": ' + str(LARGEST_VALUE) + ', "Timestamp": '
        f'{LONGEST_TIMESTAMP}, "Hierarchy": {{"A": "{longest_level_value("1old0")}"}}}}'
    ).encode()
    parsed = parse_trade_message(message, ("A",))
    assert parsed.timestamp == LONGEST_TIMESTAMP
    assert parsed.value == LARGEST_VALUE
    assert is_dynamodb_number(LONGEST_TIMESTAMP)


@pytest.mark.parametrize(("records", "levels"), [(1, 1), (10, 3), (100, 3), (217, 3), (50, 6), (12, 15)])
def test_the_estimate_is_an_upper_bound_and_a_close_one(records: int, levels: int) -> None:
    actual = item_size_bytes(worst_case_item(records, levels))
    estimate = worst_case_delta_item_bytes(records, levels, DEFAULT_VALUE_DOMAIN)
    assert actual <= estimate
    assert estimate - actual <= 0.05 * estimate + 200  # counts what is there, not a loose guess


def test_the_largest_accepted_batch_fits_and_the_next_does_not() -> None:
    largest = max_records_per_delta_item(3, DEFAULT_VALUE_DOMAIN)
    assert worst_case_delta_item_bytes(largest, 3, DEFAULT_VALUE_DOMAIN) <= MAX_ITEM_BYTES
    assert worst_case_delta_item_bytes(largest + 1, 3, DEFAULT_VALUE_DOMAIN) > MAX_ITEM_BYTES
    assert item_size_bytes(worst_case_item(largest, 3)) <= MAX_ITEM_BYTES
    assert item_size_bytes(worst_case_item(largest + 30, 3)) > MAX_ITEM_BYTES  # a real item, not a guess


def test_the_bound_grows_with_every_input() -> None:
    base = worst_case_delta_item_bytes(100, 3, DEFAULT_VALUE_DOMAIN)
    assert worst_case_delta_item_bytes(101, 3, DEFAULT_VALUE_DOMAIN) > base
    assert worst_case_delta_item_bytes(100, 4, DEFAULT_VALUE_DOMAIN) > base
    assert max_records_per_delta_item(3, DEFAULT_VALUE_DOMAIN, limit=base) == 100
