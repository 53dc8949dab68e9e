"""Reading the AggregateTable from a real moto server: nodes, #stats, markers ignored, large-table mode."""

from __future__ import annotations

import time
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest

from aggregation.aggregate_items import node_item_key
from frontend.snapshot import StatsRecord, TableReadError
from frontend.table_reader import AggregateTableReader, QuarantineReader
from tests.frontend.dashboard_helpers import (
    create_quarantine_table,
    put_leaf_with_parents,
    put_marker,
    put_node,
    put_stats,
    totals,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource, Table


def test_reads_nodes_as_exact_decimals_and_stats_and_never_markers(
    dynamodb: DynamoDBServiceResource, aggregate_table: Table
) -> None:
    put_leaf_with_parents(aggregate_table, "Delta:FXSpot:AMER", "12345678901234567890.123456789012345678", 3)
    put_stats(aggregate_table, messages_applied=42, last_updated=1700000000.5, mean="0.125", maximum="0.5")
    for marker in range(30):
        put_marker(aggregate_table, f"m{marker}")

    reading = AggregateTableReader(dynamodb, aggregate_table.name)()

    assert set(reading.nodes) == {"Delta", "Delta:FXSpot", "Delta:FXSpot:AMER"}
    value = reading.nodes["Delta:FXSpot:AMER"].value
    assert isinstance(value, Decimal)
    assert value == Decimal("12345678901234567890.123456789012345678")
    assert reading.stats == StatsRecord(42, 1700000000.5, 0.125, 0.5)


def test_large_table_reads_known_keys_and_rescans_for_new_ones(
    dynamodb: DynamoDBServiceResource, aggregate_table: Table
) -> None:
    put_leaf_with_parents(aggregate_table, "Delta:FXSpot:AMER", "1", 1)
    put_stats(aggregate_table, messages_applied=1, last_updated=time.time(), mean="0.1", maximum="0.2")
    for marker in range(12):
        put_marker(aggregate_table, f"m{marker}")
    now = [0.0]
    reader = AggregateTableReader(
        dynamodb, aggregate_table.name, large_table_items=10, rescan_interval_seconds=10, clock=lambda: now[0]
    )
    assert set(reader().nodes) == {"Delta", "Delta:FXSpot", "Delta:FXSpot:AMER"}
    assert reader.full_scans == 1

    put_node(aggregate_table, "Delta", "5", 2)
    put_node(aggregate_table, "Vega", "7", 1)  # a new node: found only by the next scan
    now[0] = 5.0
    reading = reader()
    assert reader.full_scans == 1
    assert reading.nodes["Delta"] == totals("5", 2)  # known nodes stay live
    assert "Vega" not in reading.nodes

    now[0] = 10.0
    assert reader().nodes["Vega"] == totals("7", 1)
    assert reader.full_scans == 2

    put_stats(aggregate_table, messages_applied=0, last_updated=time.time(), mean="0", maximum="0")
    aggregate_table.delete_item(Key={"AggregateKey": node_item_key("Vega")})
    now[0] = 11.0
    assert "Vega" not in reader().nodes  # the count went backwards: cleared, so rescan at once
    assert reader.full_scans == 3


def test_small_table_is_scanned_every_time(dynamodb: DynamoDBServiceResource, aggregate_table: Table) -> None:
    reader = AggregateTableReader(dynamodb, aggregate_table.name)
    assert reader().nodes == {}
    put_node(aggregate_table, "Delta", "1", 1)
    assert reader().nodes == {"Delta": totals("1", 1)}
    assert reader.full_scans == 2


def test_a_missing_table_is_a_read_error(dynamodb: DynamoDBServiceResource) -> None:
    with pytest.raises(TableReadError, match="cannot read table NoSuchTable"):
        AggregateTableReader(dynamodb, "NoSuchTable")()


def test_quarantine_is_counted_and_its_latest_reasons_come_newest_first(dynamodb: DynamoDBServiceResource) -> None:
    table = create_quarantine_table(dynamodb, f"Quarantine-{uuid.uuid4().hex[:8]}")
    try:
        for second, reason in enumerate(["not JSON", "Value is not a decimal", "conflicting duplicate", "no TradeID"]):
            table.put_item(
                Item={
                    "RecordId": f"event-{second}",
                    "Reason": reason,
                    "QuarantinedAt": 1_700_000_000 + second,
                    "Payload": "x" * 100,
                }
            )
        now = [0.0]
        reader = QuarantineReader(dynamodb, table.name, latest=3, refresh_seconds=5, clock=lambda: now[0])
        summary = reader()
        assert summary.count == 4
        assert [record.reason for record in summary.latest] == [
            "no TradeID",
            "conflicting duplicate",
            "Value is not a decimal",
        ]
        table.put_item(Item={"RecordId": "event-9", "Reason": "late", "QuarantinedAt": 1_700_000_009})
        assert reader().count == 4  # within refresh_seconds: the last summary, no scan
        now[0] = 5.0
        assert reader().latest[0].reason == "late"
    finally:
        table.delete()


def test_a_missing_table_is_named_once(dynamodb: DynamoDBServiceResource) -> None:
    with pytest.raises(TableReadError) as raised:
        AggregateTableReader(dynamodb, "NoSuchTable")()
    assert str(raised.value) == "cannot read table NoSuchTable: it does not exist (ResourceNotFoundException)"
    with pytest.raises(TableReadError) as raised:
        QuarantineReader(dynamodb, "NoSuchQuarantine")()
    assert str(raised.value).count("NoSuchQuarantine") == 1
