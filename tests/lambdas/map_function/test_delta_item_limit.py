"""A map batch whose one delta item would exceed DynamoDB's item limit is written as several that fit.

Worst-case valid messages (every level value at its byte limit, every trade moving between
paths no other trade touches, the widest values and timestamps) go through the real state
and map handlers against the emulator, whose item-size check follows DynamoDB's rules. A
batch a fifth larger than the worst case one item holds would be refused on every retry,
as AWS would refuse it: the map function splits it, each part fits, and the totals are exact.
"""

from decimal import Decimal

from aggregation.delta_item_size import max_records_per_delta_item
from aggregation.item_size import MAX_ITEM_BYTES, item_size_bytes
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN
from local.runner.inprocess import LEVELS, Pipeline, expected_totals, trade_message
from tests.lambdas.aggregation.test_delta_item_size import LARGEST_VALUE, LONGEST_TIMESTAMP, distinct_path


def test_a_batch_too_large_for_one_item_is_split_into_items_that_fit(pipeline: Pipeline) -> None:
    largest = max_records_per_delta_item(len(LEVELS), DEFAULT_VALUE_DOMAIN)
    trades = range(largest * 6 // 5)
    timestamp = str(LONGEST_TIMESTAMP)

    def messages(version: int, side: str, value: Decimal) -> list[bytes]:
        return [
            trade_message(f"t{t}", version, str(value), path=distinct_path(t, side, len(LEVELS)), timestamp=timestamp)
            for t in trades
        ]

    assert pipeline.run_state(messages(1, "old", LARGEST_VALUE))["written"] == len(trades)
    pipeline.run_map(pipeline.new_stream_records("state"))
    assert pipeline.run_state(messages(2, "new", -LARGEST_VALUE))["written"] == len(trades)
    moves = pipeline.new_stream_records("state")
    assert [r["eventName"] for r in moves] == ["MODIFY"] * len(trades)

    pipeline.run_map(moves)

    stored = pipeline.dynamodb.scan(TableName=pipeline.names["delta"])["Items"]
    sizes = sorted(item_size_bytes(item) for item in stored)
    assert len(stored) == 3, "the inserts' item, then the moves in two halves"
    assert max(sizes) <= MAX_ITEM_BYTES and max(sizes) > 0.5 * MAX_ITEM_BYTES
    pipeline.run_reduce(pipeline.new_stream_records("delta"))
    final = {f"t{t}": (-LARGEST_VALUE, distinct_path(t, "new", len(LEVELS))) for t in trades}
    emptied = {key for key, total in pipeline.aggregates().items() if total == (Decimal(0), 0)}
    assert len(emptied) == len(trades) * len(LEVELS), "every old path was left"
    assert {k: v for k, v in pipeline.aggregates().items() if k not in emptied} == expected_totals(final)
