"""Map function against real stream records: deltas, per-position idempotency, TTL, latency data."""

import hashlib
import time
from decimal import Decimal
from typing import Any

import pytest

from aggregation.stream_positions import sequence_key
from local.runner.inprocess import LambdaContextStub, Pipeline, expected_totals, trade_message
from map_function import handler as map_handler


def test_batch_becomes_one_delta_item_keyed_by_its_stream_position(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 1, "0.1", timestamp="100.25"), trade_message("b", 1, "0.2")])
    records = pipeline.new_stream_records("state")
    assert pipeline.run_map(records) == {"state": {}}, "a tumbling-window response, or Lambda counts a failure"
    (item,) = pipeline.scan("delta")
    first, last = (int(r["dynamodb"]["SequenceNumber"]) for r in (records[0], records[-1]))
    label = records[0]["eventSourceARN"].rpartition("/stream/")[2]
    assert item["StreamShard"] == f"{label}/{pipeline.shard_of_event[records[0]['eventID']]}"
    assert (item["FirstSequenceNumber"], item["LastSequenceNumber"]) == (sequence_key(first), sequence_key(last))
    position = f"{item['StreamShard']}\n{item['FirstSequenceNumber']}".encode()
    assert item["BatchHash"] == hashlib.sha256(position).hexdigest()
    assert item["RecordCount"] == 2
    assert item["Deltas"]["Delta"] == {"Value": Decimal("0.3"), "TradeCount": 2}
    assert set(item["Deltas"]) == {"Delta", "Delta:FXSpot", "Delta:FXSpot:AMER"}
    assert sorted(item["ProducerTimestamps"]) == [Decimal("1.5"), Decimal("100.25")]
    assert 7 * 86_400 - 60 < int(item["ExpiresAt"]) - time.time() <= 7 * 86_400


def test_modify_moving_a_trade_and_remove_are_netted(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 1, "5"), trade_message("b", 1, "7")])
    pipeline.new_stream_records("state")
    pipeline.run_state([trade_message("a", 2, "6", path=("Delta", "FXSpot", "EMEA"))])
    pipeline.dynamodb.delete_item(TableName=pipeline.names["state"], Key={"TradeID": {"S": "b"}})
    records = pipeline.new_stream_records("state")
    assert [r["eventName"] for r in records] == ["MODIFY", "REMOVE"]
    pipeline.run_map(records)
    (item,) = pipeline.scan("delta")
    assert item["Deltas"] == {
        "Delta": {"Value": Decimal("-6"), "TradeCount": -1},
        "Delta:FXSpot": {"Value": Decimal("-6"), "TradeCount": -1},
        "Delta:FXSpot:AMER": {"Value": Decimal("-12"), "TradeCount": -2},
        "Delta:FXSpot:EMEA": {"Value": Decimal("6"), "TradeCount": 1},
    }


def test_identical_retry_after_post_commit_failure_writes_nothing_new(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline.run_state([trade_message("a", 1, "5")])
    records = pipeline.new_stream_records("state")
    monkeypatch.setenv("FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT", "100")
    with pytest.raises(RuntimeError, match="injected MAP failure"):
        pipeline.run_map(records)
    monkeypatch.setenv("FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT", "0")
    pipeline.run_map(records)
    assert len(pipeline.scan("delta")) == 1
    assert [r["eventName"] for r in pipeline.new_stream_records("delta")] == ["INSERT"]


def ten_trades(pipeline: Pipeline) -> tuple[list[dict[str, Any]], dict[str, tuple[Decimal, tuple[str, str, str]]]]:
    trades = {f"t{i}": (Decimal(f"{i}.{i:02d}"), ("Delta", f"Desk{i % 3}", "AMER")) for i in range(10)}
    pipeline.run_state([trade_message(t, 1, str(value), path) for t, (value, path) in trades.items()])
    records = pipeline.new_stream_records("state")
    assert len(records) == 10
    return records, trades


def test_retries_in_any_boundaries_map_every_record_exactly_once(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed after writing, then re-delivered grown, shrunk, shifted back, and continued mid-item."""
    records, trades = ten_trades(pipeline)
    monkeypatch.setenv("FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT", "100")
    for attempt in (records[0:4], records[0:7], records[0:2], records[1:9]):  # first, grown, shrunk, shifted
        with pytest.raises(RuntimeError, match="injected MAP failure"):
            pipeline.run_map(attempt)
    monkeypatch.setenv("FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT", "0")
    pipeline.run_map(records[0:3])  # shrunk inside the first item: succeeds, checkpoint in mid-item
    pipeline.run_map(records[3:10])  # continues from the middle of an item
    items = sorted(pipeline.scan("delta"), key=lambda item: item["FirstSequenceNumber"])
    sequence_numbers = [int(r["dynamodb"]["SequenceNumber"]) for r in records]
    covered = [(int(i["FirstSequenceNumber"]), int(i["LastSequenceNumber"]), int(i["RecordCount"])) for i in items]
    assert covered == [
        (sequence_numbers[0], sequence_numbers[3], 4),
        (sequence_numbers[4], sequence_numbers[6], 3),
        (sequence_numbers[7], sequence_numbers[8], 2),
        (sequence_numbers[9], sequence_numbers[9], 1),
    ]
    pipeline.run_reduce(pipeline.new_stream_records("delta"))
    assert pipeline.aggregates() == expected_totals(trades)
    assert pipeline.stats()["MessagesApplied"] == 10


def test_a_writer_that_got_there_first_is_read_again_and_only_the_rest_is_written(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt still in flight (a timed-out invocation) writes between this one's read and put."""
    records, trades = ten_trades(pipeline)
    pipeline.run_map(records[0:6])  # the other writer's item
    reads: list[int] = []
    real_read = map_handler.covered_runs

    def stale_first_read(*arguments: Any) -> Any:
        reads.append(1)
        return [] if len(reads) == 1 else real_read(*arguments)

    monkeypatch.setattr(map_handler, "covered_runs", stale_first_read)
    pipeline.run_map(records)
    assert len(reads) == 2, "the lost race made it read coverage again"
    assert sorted(int(item["RecordCount"]) for item in pipeline.scan("delta")) == [4, 6]
    pipeline.run_reduce(pipeline.new_stream_records("delta"))
    assert pipeline.aggregates() == expected_totals(trades)


def test_batch_of_unchanged_values_still_records_its_messages(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 1, "5")])
    pipeline.new_stream_records("state")
    pipeline.run_state([trade_message("a", 2, "5")])
    pipeline.run_map(pipeline.new_stream_records("state"))
    (item,) = pipeline.scan("delta")
    assert item["Deltas"] == {}
    assert item["RecordCount"] == 1


def test_window_closing_invocation_without_records_writes_nothing(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 1, "5")])
    event = pipeline.map_event(pipeline.new_stream_records("state")) | {"Records": [], "isFinalInvokeForWindow": True}
    assert map_handler.lambda_handler(event, LambdaContextStub()) == {"state": {}}
    assert pipeline.scan("delta") == []


def test_window_invocation_without_records_key_or_with_null_records_writes_nothing(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 1, "5")])
    event = pipeline.map_event(pipeline.new_stream_records("state")) | {"isFinalInvokeForWindow": True}
    del event["Records"]
    assert map_handler.lambda_handler(event, LambdaContextStub()) == {"state": {}}
    assert map_handler.lambda_handler(event | {"Records": None}, LambdaContextStub()) == {"state": {}}
    assert pipeline.scan("delta") == []


def test_an_event_without_shard_id_is_refused_before_any_write(pipeline: Pipeline) -> None:
    """A mapping without its tumbling window cannot tell the shard: fail loudly, write nothing."""
    pipeline.run_state([trade_message("a", 1, "5")])
    records = pipeline.new_stream_records("state")
    with pytest.raises(ValueError, match="tumbling window"):
        map_handler.lambda_handler({"Records": records}, LambdaContextStub())
    assert pipeline.scan("delta") == []
