"""Helpers for the dashboard tests: writing AggregateTable items as the pipeline does, running a dashboard."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from aggregation.aggregate_items import node_item_key
from frontend.ledger import LedgerWatcher
from frontend.snapshot import SnapshotBuilder, StatsHistory
from frontend.table_reader import AggregateTableReader, QuarantineReader
from frontend.web import DashboardServer, SnapshotPublisher
from toolkit.ledger import NodeTotals

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource, Table

#: A hierarchy name an attacker could send: must be shown as text, never run.
HOSTILE_NAME = "<img src=x onerror=alert(1)>"


def put_node(table: Table, key: str, value: str, trade_count: int) -> None:
    """Writes one hierarchy node as the reduce stage does: into its slice 0."""
    table.put_item(Item={"AggregateKey": node_item_key(key), "Value": Decimal(value), "TradeCount": trade_count})


def put_leaf_with_parents(table: Table, leaf_key: str, value: str, trade_count: int) -> None:
    """Writes a leaf and every ancestor with the same totals (a hierarchy holding one leaf per branch)."""
    levels = leaf_key.split(":")
    for depth in range(1, len(levels) + 1):
        put_node(table, ":".join(levels[:depth]), value, trade_count)


def put_stats(table: Table, messages_applied: int, last_updated: float, mean: str, maximum: str) -> None:
    """Writes the ``#stats`` bookkeeping item."""
    table.put_item(
        Item={
            "AggregateKey": "#stats",
            "MessagesApplied": messages_applied,
            "LastUpdated": Decimal(str(round(last_updated, 3))),
            "LastLatencyMeanSeconds": Decimal(mean),
            "LastLatencyMaxSeconds": Decimal(maximum),
        }
    )


def put_marker(table: Table, marker_id: str) -> None:
    """Writes an ``#applied#…`` idempotency marker, which the dashboard must ignore."""
    table.put_item(Item={"AggregateKey": f"#applied#{marker_id}", "ExpiresAt": 4_102_444_800})


def create_quarantine_table(dynamodb: DynamoDBServiceResource, name: str) -> Table:
    """A QuarantineTable (schema of docs/architecture.md) on the moto server."""
    return dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "RecordId", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "RecordId", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def put_quarantined(table: Table, record_id: str, reason: str, at: int) -> None:
    """Writes a QuarantineTable item as the state function does (the attributes the dashboard reads)."""
    table.put_item(Item={"RecordId": record_id, "Reason": reason, "QuarantinedAt": at, "Payload": "{not json"})


def totals(value: str, trade_count: int) -> NodeTotals:
    """Shorthand for exact node totals."""
    return NodeTotals(Decimal(value), trade_count)


@dataclass
class RunningDashboard:
    """A dashboard serving on a free loopback port in this process."""

    url: str
    server: DashboardServer
    publisher: SnapshotPublisher
    thread: threading.Thread

    def stop(self) -> None:
        """Stops serving and publishing."""
        self.server.shutdown()
        self.server.server_close()
        self.publisher.stop()
        self.thread.join(timeout=5)


@dataclass
class DashboardLauncher:
    """Starts dashboards on the test's moto server; the fixture stops them all."""

    dynamodb: DynamoDBServiceResource
    running: list[RunningDashboard] = field(default_factory=list)

    def start(
        self,
        table_name: str,
        ledger_path: Path | None = None,
        interval: float = 0.2,
        quarantine_table: str | None = None,
    ) -> RunningDashboard:
        """A dashboard of ``table_name`` (and ``quarantine_table``) refreshing every ``interval`` seconds."""
        builder = self.builder(table_name, ledger_path, quarantine_table)
        publisher = SnapshotPublisher(builder, interval)
        server = DashboardServer(("127.0.0.1", 0), publisher)
        publisher.start()
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        dashboard = RunningDashboard(server.url, server, publisher, thread)
        self.running.append(dashboard)
        return dashboard

    def builder(
        self, table_name: str, ledger_path: Path | None = None, quarantine_table: str | None = None
    ) -> SnapshotBuilder:
        """What a dashboard of these tables builds its snapshots with (the terminal view uses one alike)."""
        return SnapshotBuilder(
            table_name,
            AggregateTableReader(self.dynamodb, table_name),
            LedgerWatcher(ledger_path) if ledger_path else None,
            read_quarantine=QuarantineReader(self.dynamodb, quarantine_table, refresh_seconds=0.2)
            if quarantine_table
            else None,
            history=StatsHistory(rate_window_seconds=2.0),
        )
