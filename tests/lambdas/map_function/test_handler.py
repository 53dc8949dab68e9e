"""Map function against real stream records: deltas, idempotent put, TTL, latency data."""

import time
from decimal import Decimal

import pytest

from tests.lambdas.conftest import Pipeline, trade_message


def test_batch_becomes_one_delta_item_with_net_node_deltas(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 1, "0.1", timestamp="100.25"), trade_message("b", 1, "0.2")])
    summary = pipeline.run_map(pipeline.new_stream_records("state"))
    assert summary["written"] is True
    (item,) = pipeline.scan("delta")
    assert item["BatchHash"] == summary["batch_hash"]
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


def test_batch_retried_after_post_commit_failure_writes_nothing_new(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline.run_state([trade_message("a", 1, "5")])
    records = pipeline.new_stream_records("state")
    monkeypatch.setenv("FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT", "100")
    with pytest.raises(RuntimeError, match="injected MAP failure"):
        pipeline.run_map(records)
    monkeypatch.setenv("FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT", "0")
    assert pipeline.run_map(records)["written"] is False
    assert len(pipeline.scan("delta")) == 1
    assert [r["eventName"] for r in pipeline.new_stream_records("delta")] == ["INSERT"]


def test_batch_of_unchanged_values_still_records_its_messages(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 1, "5")])
    pipeline.new_stream_records("state")
    pipeline.run_state([trade_message("a", 2, "5")])
    pipeline.run_map(pipeline.new_stream_records("state"))
    (item,) = pipeline.scan("delta")
    assert item["Deltas"] == {}
    assert item["RecordCount"] == 1
