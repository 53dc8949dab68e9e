"""The largest map batch the settings accept writes a delta item DynamoDB accepts, whatever the input.

Worst-case valid messages (every level value at its byte limit, every trade moving between
paths no other trade touches, the widest values and timestamps) go through the real state
and map handlers against the emulator, whose item-size check follows DynamoDB's rules. A
batch one fifth larger than the settings allow writes an item the emulator refuses, as AWS
would on every retry: that is the poison batch the synth-time bound rules out.
"""

import pytest
from botocore.exceptions import ClientError

from aggregation.delta_item_size import max_records_per_delta_item, worst_case_delta_item_bytes
from aggregation.item_size import MAX_ITEM_BYTES, item_size_bytes
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN
from tests.lambdas.aggregation.test_delta_item_size import LARGEST_VALUE, LONGEST_TIMESTAMP, distinct_path
from tests.lambdas.conftest import LEVELS, Pipeline, trade_message


def test_the_largest_accepted_map_batch_fits_and_a_larger_one_is_refused(pipeline: Pipeline) -> None:
    largest = max_records_per_delta_item(len(LEVELS), DEFAULT_VALUE_DOMAIN)
    trades = range(largest * 6 // 5)
    timestamp = str(LONGEST_TIMESTAMP)

    def messages(version: int, side: str, value: str) -> list[bytes]:
        return [
            trade_message(f"t{t}", version, value, path=distinct_path(t, side, len(LEVELS)), timestamp=timestamp)
            for t in trades
        ]

    assert pipeline.run_state(messages(1, "old", str(LARGEST_VALUE)))["written"] == len(trades)
    pipeline.new_stream_records("state")
    assert pipeline.run_state(messages(2, "new", str(-LARGEST_VALUE)))["written"] == len(trades)
    moves = pipeline.new_stream_records("state")
    assert [r["eventName"] for r in moves] == ["MODIFY"] * len(trades)

    assert pipeline.run_map(moves[:largest])["nodes"] == 2 * len(LEVELS) * largest
    (stored,) = pipeline.dynamodb.scan(TableName=pipeline.names["delta"])["Items"]
    size = item_size_bytes(stored)
    assert size <= worst_case_delta_item_bytes(largest, len(LEVELS), DEFAULT_VALUE_DOMAIN) <= MAX_ITEM_BYTES
    assert size > 0.95 * MAX_ITEM_BYTES  # the worst case was really reached

    with pytest.raises(ClientError, match="Item size has exceeded"):
        pipeline.run_map(moves)
