"""The pipeline driven in-process: the real handlers called directly against real tables.

Kinesis events are built in Lambda's event format; DynamoDB stream events are read from
the tables' real streams, so map and reduce see exactly the stream records the tables
produced. Point boto3 at the emulator (``AWS_ENDPOINT_URL``) and set the handlers'
environment (`handler_environment`) first. The tests prove the pipeline exact through
these helpers and the benchmarks measure it through them, so both exercise the same
code paths.
"""

import base64
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import boto3

from aggregation.aggregate_items import combined_stats, sum_node_slices
from aggregation.delta_items import FIRST_SEQUENCE_NUMBER, STREAM_SHARD
from aggregation.names import (
    AGGREGATE_KEY,
    NODE_TRADE_COUNT,
    NODE_VALUE,
    QUARANTINE_RECORD_ID,
    TRADE_ID,
)
from function_support import aws
from local.runner import events

IN_PROCESS_METRICS_NAMESPACE = "ExactlyOnceAggregation/in-process"
"""The handlers' metrics namespace here. Each handler's Powertools `Metrics` reads it from
`POWERTOOLS_METRICS_NAMESPACE` when the module is imported (Lambda sets the stack's before the
import), so it is set before the imports below; their EMF output reaches no CloudWatch anyway."""
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", IN_PROCESS_METRICS_NAMESPACE)

from map_function import handler as map_handler  # noqa: E402 (the namespace above first)
from reduce_function import handler as reduce_handler  # noqa: E402
from state_function import handler as state_handler  # noqa: E402

LEVELS = ("RiskType", "TradeDesk", "Region")


@dataclass
class LambdaContextStub:
    """The attributes Powertools reads from Lambda's context object."""

    function_name: str = "test-function"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:test-function"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def trade_message(
    trade_id: str, version: int, value: str, path: Sequence[str] = ("Delta", "FXSpot", "AMER"), timestamp: str = "1.5"
) -> bytes:
    """A message as the producer writes it: numbers as exact JSON literals."""
    hierarchy = json.dumps(dict(zip(LEVELS, path, strict=True)))
    return (
        f'{{"TradeID": "{trade_id}", "Value": {value}, "Version": {version}, '
        f'"Timestamp": {timestamp}, "Hierarchy": {hierarchy}}}'
    ).encode()


def expected_totals(trades: Mapping[str, tuple[Decimal, Sequence[str]]]) -> dict[str, tuple[Decimal, int]]:
    """Ground truth computed independently of the pipeline's own code."""
    totals: dict[str, tuple[Decimal, int]] = {}
    for value, path in trades.values():
        for depth in range(1, len(path) + 1):
            key = ":".join(path[:depth])
            old_value, old_count = totals.get(key, (Decimal(0), 0))
            totals[key] = (old_value + value, old_count + 1)
    return totals


class Pipeline:
    """Handles on the four tables and the three handlers."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.dynamodb = boto3.client("dynamodb")
        self.streams = boto3.client("dynamodbstreams")
        self._sequence = 0
        self._stream_positions: dict[tuple[str, str], str] = {}
        self.shard_of_event: dict[str, str] = {}  # stream record eventID -> its shard id

    def kinesis_event(self, payloads: Sequence[bytes], partition_keys: Sequence[str] | None = None) -> dict[str, Any]:
        """Lambda's event for `payloads`, each under its partition key (default ``pk``)."""
        records = []
        for position, payload in enumerate(payloads):
            self._sequence += 1
            sequence = f"{self._sequence:056d}"
            records.append(
                {
                    "kinesis": {
                        "kinesisSchemaVersion": "1.0",
                        "partitionKey": "pk" if partition_keys is None else partition_keys[position],
                        "sequenceNumber": sequence,
                        "data": base64.b64encode(payload).decode(),
                        "approximateArrivalTimestamp": 1.0,
                    },
                    "eventSource": "aws:kinesis",
                    "eventVersion": "1.0",
                    "eventID": f"shardId-000000000000:{sequence}",
                    "eventName": "aws:kinesis:record",
                    "awsRegion": "us-east-1",
                    "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/test",
                }
            )
        return {"Records": records}

    def run_state(self, payloads: Sequence[bytes], partition_keys: Sequence[str] | None = None) -> dict[str, int]:
        event = self.kinesis_event(payloads, partition_keys)
        summary: dict[str, int] = state_handler.lambda_handler(event, LambdaContextStub())
        return summary

    def new_stream_records(self, table: str) -> list[dict[str, Any]]:
        """Records the table's stream gained since the last call, in Lambda's event format."""
        arn = self.dynamodb.describe_table(TableName=self.names[table])["Table"]["LatestStreamArn"]
        records: list[dict[str, Any]] = []
        for shard in self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
            position = self._stream_positions.get((arn, shard["ShardId"]))
            iterator_args: dict[str, Any] = (
                {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": position}
                if position
                else {"ShardIteratorType": "TRIM_HORIZON"}
            )
            iterator = self.streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], **iterator_args)
            for record in self.streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]:
                records.append(events.dynamodb_record(record, stream_arn=arn, region="us-east-1"))
                self._stream_positions[(arn, shard["ShardId"])] = events.sequence_number_of(records[-1])
                self.shard_of_event[record["eventID"]] = shard["ShardId"]
        return records

    def map_event(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The event the map mapping (which has a tumbling window) delivers for `records`."""
        return events.invocation_event(
            records,
            shard_id=self.shard_of_event[records[0]["eventID"]],
            event_source_arn=records[0]["eventSourceARN"],
            window=events.TumblingWindow.containing(events.arrival_seconds(records[0]), 900),
        )

    def run_map(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        response: dict[str, Any] = map_handler.lambda_handler(self.map_event(records), LambdaContextStub())
        return response

    def run_reduce(self, records: Sequence[dict[str, Any]]) -> dict[str, int]:
        inserts = [r for r in records if r["eventName"] == "INSERT"]  # the mapping's event filter
        summary: dict[str, int] = reduce_handler.lambda_handler({"Records": inserts}, LambdaContextStub())
        return summary

    def run_all_stages(self, payloads: Sequence[bytes]) -> None:
        self.run_state(payloads)
        state_changes = self.new_stream_records("state")
        if state_changes:
            self.run_map(state_changes)
        delta_records = self.new_stream_records("delta")
        if delta_records:
            self.run_reduce(delta_records)

    def scan(self, table: str) -> list[dict[str, Any]]:
        paginator = self.dynamodb.get_paginator("scan")
        items = [item for page in paginator.paginate(TableName=self.names[table]) for item in page["Items"]]
        return [{k: aws.deserializer.deserialize(v) for k, v in item.items()} for item in items]

    def aggregates(self) -> dict[str, tuple[Decimal, int]]:
        """Each node path's totals, the sum of its slices."""
        slices = [
            (item[AGGREGATE_KEY], item.get(NODE_VALUE, Decimal(0)), int(item.get(NODE_TRADE_COUNT, 0)))
            for item in self.scan("aggregate")
        ]
        return {path_key: (total.value, total.trade_count) for path_key, total in sum_node_slices(slices).items()}

    def stats(self) -> dict[str, Any]:
        """`#stats`, every slice as one (`MessagesApplied` summed)."""
        stats = combined_stats(self.scan("aggregate"))
        assert stats is not None, "no #stats slice yet"
        return stats


def _create_table(client: Any, name: str, key: str, stream_view: str | None, sort_key: str | None = None) -> None:
    keys = [(key, "HASH")] + ([(sort_key, "RANGE")] if sort_key else [])
    arguments: dict[str, Any] = {
        "TableName": name,
        "KeySchema": [{"AttributeName": name_, "KeyType": kind} for name_, kind in keys],
        "AttributeDefinitions": [{"AttributeName": name_, "AttributeType": "S"} for name_, _ in keys],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if stream_view:
        arguments["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream_view}
    client.create_table(**arguments)


def create_pipeline_tables(
    prefix: str, aggregate_tables: Sequence[str] = ("aggregate",), extra_delta_tables: Sequence[str] = ()
) -> dict[str, str]:
    """Scratch tables shaped like the stack's (docs/architecture.md "Tables"); returns role -> name."""
    suffix = uuid.uuid4().hex[:8]
    roles = ("state", "delta", "quarantine", *aggregate_tables, *extra_delta_tables)
    names = {role: f"{prefix}{role}-{suffix}" for role in roles}
    client = boto3.client("dynamodb")
    _create_table(client, names["state"], TRADE_ID, "NEW_AND_OLD_IMAGES")
    for role in ("delta", *extra_delta_tables):
        _create_table(client, names[role], STREAM_SHARD, "NEW_IMAGE", sort_key=FIRST_SEQUENCE_NUMBER)
    _create_table(client, names["quarantine"], QUARANTINE_RECORD_ID, None)
    for role in aggregate_tables:
        _create_table(client, names[role], AGGREGATE_KEY, None)
    return names


def handler_environment(
    names: Mapping[str, str], service_name: str, aggregate_role: str = "aggregate"
) -> dict[str, str]:
    """The environment variables the stack gives the handlers, for the tables `names` (the metrics
    namespace is set once, before the handlers are imported: `IN_PROCESS_METRICS_NAMESPACE`)."""
    return {
        "STATE_TABLE": names["state"],
        "DELTA_TABLE": names["delta"],
        "AGGREGATE_TABLE": names[aggregate_role],
        "QUARANTINE_TABLE": names["quarantine"],
        "HIERARCHY_LEVELS": ",".join(LEVELS),
        "POWERTOOLS_SERVICE_NAME": service_name,
    }
