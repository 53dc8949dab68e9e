"""Stream retention (`moto_compat.fix_stream_records_expire_after_the_retention_period`) and the
runner's recovery from expired iterators (`moto_compat.fix_kinesis_iterators_expire`), over HTTP.

This module advances its own emulator's clock by days, so it has an emulator of its own
(`module_emulator`): no other module's iterators, tokens or records are aged by it.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models import DynamoDBBackend

from benchmarks.emulator_transactions import scratch_table
from local.emulator import moto_compat, speedups
from local.emulator.control import advance_clock
from local.emulator.moto_compat import DYNAMODB_STREAM_RETENTION_SECONDS, TRIM_GRANULARITY_SECONDS
from local.runner.checkpoints import CheckpointStore
from local.runner.discovery import MappingConfig
from local.runner.execution_environment import InvocationResult
from local.runner.expiry import STREAM_CHECK_AFTER_FAILURES
from local.runner.pollers import DynamoDBShardReader, KinesisShardReader, ShardPoller
from local.runner.stats import RunnerStats
from tests.local.runner.runner_harness import wait_for

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_kinesis import KinesisClient

AwsClientFactory = Callable[[str], Any]
PAST_RETENTION = DYNAMODB_STREAM_RETENTION_SECONDS + TRIM_GRANULARITY_SECONDS + 1
"""Enough for every record written before the advance to be trimmed."""


class StreamTable:
    """A new table with a NEW_AND_OLD_IMAGES stream of one shard, and helpers to write and read it."""

    def __init__(self, dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient) -> None:
        self.dynamodb, self.streams = dynamodb, streams
        self.name = f"retention-{uuid.uuid4().hex[:12]}"
        self.stream_arn = dynamodb.create_table(
            TableName=self.name,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )["TableDescription"]["LatestStreamArn"]
        self.shard = self.describe_shard()

    def describe_shard(self) -> Any:
        return self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"][0]

    def put(self, *keys: str) -> None:
        for key in keys:
            self.dynamodb.put_item(TableName=self.name, Item={"pk": {"S": key}, "amount": {"N": "1"}})

    def iterator(self, kind: str, sequence_number: str | None = None) -> str:
        arguments: dict[str, Any] = {
            "StreamArn": self.stream_arn,
            "ShardId": self.shard["ShardId"],
            "ShardIteratorType": kind,
        }
        if sequence_number is not None:
            arguments["SequenceNumber"] = sequence_number
        return str(self.streams.get_shard_iterator(**arguments)["ShardIterator"])

    def read(self, iterator: str | None = None) -> list[Any]:
        """Every record from `iterator` (default: TRIM_HORIZON) to the tip."""
        iterator = iterator or self.iterator("TRIM_HORIZON")
        records: list[Any] = []
        while True:
            page = self.streams.get_records(ShardIterator=iterator)
            records.extend(page["Records"])
            if not page["Records"]:
                return records
            iterator = page["NextShardIterator"]


def keys_of(records: list[Any]) -> list[str]:
    return [r["dynamodb"]["Keys"]["pk"]["S"] for r in records]


def sequence_numbers_of(records: list[Any]) -> list[int]:
    return [int(r["dynamodb"]["SequenceNumber"]) for r in records]


def error_code(raised: pytest.ExceptionInfo[ClientError]) -> str:
    return str(raised.value.response["Error"]["Code"])


def test_dynamodb_stream_records_are_trimmed_24_hours_after_they_are_written(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient, emulator_endpoint: str
) -> None:
    table = StreamTable(dynamodb, streams)
    table.put("old-1", "old-2", "old-3")
    old = table.read()
    advance_clock(emulator_endpoint, DYNAMODB_STREAM_RETENTION_SECONDS - 2 * TRIM_GRANULARITY_SECONDS)
    assert keys_of(table.read()) == ["old-1", "old-2", "old-3"], "kept for 24 hours"
    table.put("young-1", "young-2")
    at_old_horizon = table.iterator("TRIM_HORIZON")  # made before the trim, used after it

    advance_clock(emulator_endpoint, 3 * TRIM_GRANULARITY_SECONDS + 1)  # old-*: 24 h + 1 min + 1 s
    assert keys_of(table.read()) == ["young-1", "young-2"], "TRIM_HORIZON starts after the trimmed records"
    with pytest.raises(ClientError) as raised:
        streams.get_records(ShardIterator=at_old_horizon)
    assert error_code(raised) == "TrimmedDataAccessException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    for kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
        with pytest.raises(ClientError) as raised:
            table.iterator(kind, old[0]["dynamodb"]["SequenceNumber"])
        assert error_code(raised) == "TrimmedDataAccessException"

    table.put("later")
    everything = [*old, *table.read()]
    assert sequence_numbers_of(everything) == sorted(set(sequence_numbers_of(everything))), "unique, increasing"
    assert table.describe_shard() == table.shard, "a shard's StartingSequenceNumber does not move"


def test_a_cancelled_transaction_that_trimmed_the_stream_still_restores_it_exactly(
    dynamodb: DynamoDBClient, streams: DynamoDBStreamsClient, emulator_endpoint: str
) -> None:
    """The transaction's own first record trims the expired ones: the rollback must drop only its own."""
    table = StreamTable(dynamodb, streams)
    table.put("expiring-1", "expiring-2", "bystander")
    last_before = sequence_numbers_of(table.read())[-1]
    items_before = dynamodb.scan(TableName=table.name, ConsistentRead=True)["Items"]
    advance_clock(emulator_endpoint, PAST_RETENTION)  # nothing has looked at the stream since: not trimmed yet

    with pytest.raises(ClientError, match="TransactionCanceledException"):
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table.name, "Item": {"pk": {"S": "new"}}}},
                {"Delete": {"TableName": table.name, "Key": {"pk": {"S": "bystander"}}}},
                {
                    "ConditionCheck": {
                        "TableName": table.name,
                        "Key": {"pk": {"S": "missing"}},
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )

    assert table.read() == [], "the expired records are trimmed and the cancelled ones gone"
    assert dynamodb.scan(TableName=table.name, ConsistentRead=True)["Items"] == items_before
    table.put("after")
    after = table.read()
    assert keys_of(after) == ["after"] and sequence_numbers_of(after)[0] > last_before


def test_kinesis_records_are_trimmed_after_the_stream_s_retention_period(
    kinesis: KinesisClient, emulator_endpoint: str
) -> None:
    short, long = (f"retention-{uuid.uuid4().hex[:12]}" for _ in range(2))
    for name in (short, long):
        kinesis.create_stream(StreamName=name, ShardCount=1)
    kinesis.increase_stream_retention_period(StreamName=long, RetentionPeriodHours=48)

    def put(stream: str, data: str) -> int:
        return int(kinesis.put_record(StreamName=stream, Data=data.encode(), PartitionKey="p")["SequenceNumber"])

    def read(stream: str, kind: str = "TRIM_HORIZON", sequence_number: int | None = None) -> list[str]:
        arguments: dict[str, Any] = {"StreamName": stream, "ShardId": "shardId-000000000000", "ShardIteratorType": kind}
        if sequence_number is not None:
            arguments["StartingSequenceNumber"] = str(sequence_number)
        iterator = kinesis.get_shard_iterator(**arguments)["ShardIterator"]
        return [r["Data"].decode() for r in kinesis.get_records(ShardIterator=iterator)["Records"]]

    first = [put(name, "old") for name in (short, long)]
    advance_clock(emulator_endpoint, PAST_RETENTION)
    assert read(short) == [], "every record trimmed"
    assert read(long) == ["old"], "RetentionPeriodHours=48 keeps it"
    newer = put(short, "new")
    assert newer > first[0], "numbering continues after the trimmed records"
    assert read(short) == ["new"]
    assert read(short, "AT_SEQUENCE_NUMBER", first[0]) == ["new"], "below the horizon: from the oldest record kept"


def mapping_of(stream_arn: str) -> MappingConfig:
    return MappingConfig(
        uuid="retention",
        function_name="f",
        event_source_arn=stream_arn,
        batch_size=10,
        maximum_batching_window_seconds=0.0,
        starting_position="TRIM_HORIZON",
        maximum_retry_attempts=-1,
        bisect_batch_on_function_error=False,
        report_batch_item_failures=False,
        filter_patterns=(),
        parallelization_factor=1,
        tumbling_window_seconds=0,
        enabled=True,
    )


def test_a_poller_whose_position_was_trimmed_goes_on_from_trim_horizon_and_says_what_was_lost(
    dynamodb: DynamoDBClient,
    streams: DynamoDBStreamsClient,
    emulator_endpoint: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Lambda discards expired records and continues from the stream: the runner does too, loudly."""
    table = StreamTable(dynamodb, streams)
    table.put("processed", "expired-unread")
    processed = table.read()[0]["dynamodb"]["SequenceNumber"]
    checkpoints = CheckpointStore(tmp_path / "checkpoints.json")
    mapping = mapping_of(table.stream_arn)
    checkpoints.commit(mapping.uuid, table.shard["ShardId"], processed)  # a runner stopped a day ago
    advance_clock(emulator_endpoint, PAST_RETENTION)
    table.put("fresh")

    delivered: list[list[str]] = []

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        delivered.append([r["dynamodb"]["Keys"]["pk"]["S"] for r in event["Records"]])
        return InvocationResult(payload=None)

    stop = threading.Event()
    poller = ShardPoller(
        mapping=mapping,
        shard_id=table.shard["ShardId"],
        reader=DynamoDBShardReader(streams, table.stream_arn, "us-east-1"),
        invoke=invoke,
        checkpoints=checkpoints,
        stats=RunnerStats(None),
        stop=stop,
        poll_interval_seconds=0.01,
    )
    with caplog.at_level(logging.ERROR, logger="local.runner.pollers"):
        poller.start()
        try:
            wait_for(lambda: delivered == [["fresh"]], timeout_seconds=5, what="the record written after the trim")
        finally:
            stop.set()
            poller.join(timeout=5)
    assert any(f"LOST records after {processed}" in message for message in caplog.messages)


def test_a_batch_that_keeps_failing_is_discarded_once_the_stream_s_retention_trims_its_records(
    dynamodb: DynamoDBClient,
    streams: DynamoDBStreamsClient,
    emulator_endpoint: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """MaximumRecordAgeInSeconds -1, as the stack's mappings have it: Lambda retries "until the record
    expires", here when the stream's 24 hours trim it while its batch is still failing. The batch
    is then discarded, loudly, and the records written since are delivered."""
    table = StreamTable(dynamodb, streams)
    table.put("failing-1", "failing-2")
    attempts: list[list[str]] = []

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        keys = [r["dynamodb"]["Keys"]["pk"]["S"] for r in event["Records"]]
        attempts.append(keys)
        if keys == ["fresh"]:
            return InvocationResult(payload=None)
        if len(attempts) == STREAM_CHECK_AFTER_FAILURES:  # asked before the next retry: kept until now
            advance_clock(emulator_endpoint, PAST_RETENTION)
            table.put("fresh")  # its write trims the failing records
        return InvocationResult(error={"errorType": "Planned", "errorMessage": "always"})

    stop = threading.Event()
    stats = RunnerStats(None)
    checkpoints = CheckpointStore(tmp_path / "checkpoints.json")
    poller = ShardPoller(
        mapping=mapping_of(table.stream_arn),
        shard_id=table.shard["ShardId"],
        reader=DynamoDBShardReader(streams, table.stream_arn, "us-east-1"),
        invoke=invoke,
        checkpoints=checkpoints,
        stats=stats,
        stop=stop,
        poll_interval_seconds=0.01,
        retry_backoff_start_seconds=0.01,
    )
    with caplog.at_level(logging.ERROR, logger="local.runner.expiry"):
        poller.start()
        try:
            wait_for(lambda: ["fresh"] in attempts, timeout_seconds=10, what="the record written after the trim")
        finally:
            stop.set()
            poller.join(timeout=5)
    assert attempts == [["failing-1", "failing-2"]] * STREAM_CHECK_AFTER_FAILURES + [["fresh"]]
    [lost] = caplog.messages
    assert "LOST 2 record(s)" in lost and "(RecordAgeExceeded: trimmed from the stream by its retention" in lost
    assert stats.function("f").records_dropped == 2
    fresh = table.read()[0]["dynamodb"]["SequenceNumber"]
    wait_for(lambda: checkpoints.get("retention", table.shard["ShardId"]) == fresh, what="the checkpoint past it all")


def test_a_poller_whose_kinesis_iterator_expired_goes_on_at_once_from_the_last_record_read(
    kinesis: KinesisClient, emulator_endpoint: str, tmp_path: Path
) -> None:
    """A batch that holds the poller past the iterator's 5 minutes: the next read gets a new iterator
    after the last record read, at once (not after the idle pause), and delivers every record once, in order."""
    stream = f"expiry-{uuid.uuid4().hex[:12]}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    for number in range(5):
        kinesis.put_record(StreamName=stream, Data=str(number).encode(), PartitionKey="p")
    stream_arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    shard_id = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    delivered: list[list[str]] = []

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        if not delivered:  # the first batch outlives the iterator the poller holds
            advance_clock(emulator_endpoint, moto_compat.KINESIS_ITERATOR_LIFETIME_SECONDS + 1)
        delivered.append([base64.b64decode(r["kinesis"]["data"]).decode() for r in event["Records"]])
        return InvocationResult(payload=None)

    stop = threading.Event()
    poller = ShardPoller(
        mapping=dataclasses.replace(mapping_of(stream_arn), batch_size=2),
        shard_id=shard_id,
        reader=KinesisShardReader(kinesis, stream_arn, "us-east-1"),
        invoke=invoke,
        checkpoints=CheckpointStore(tmp_path / "checkpoints.json"),
        stats=RunnerStats(None),
        stop=stop,
        poll_interval_seconds=60.0,  # an idle pause this long would outlast the wait below
    )
    poller.start()
    try:
        wait_for(lambda: len(delivered) == 3, timeout_seconds=10, what="every record after the expiry")
    finally:
        stop.set()
        poller.wake()
        poller.join(timeout=5)
    assert delivered == [["0", "1"], ["2", "3"], ["4"]]


def test_every_shard_of_a_stream_is_trimmed_and_keeps_its_numbering(monkeypatch: pytest.MonkeyPatch) -> None:
    """With several shards (`EMULATOR_STREAM_SHARDS`), each shard trims its own front; in-process moto."""
    clock = moto_compat.CompatClock()
    monkeypatch.setattr(moto_compat, "clock", clock)
    monkeypatch.setenv(moto_compat.STREAM_SHARDS_VARIABLE, "3")
    moto_compat.fix_dynamodb_streams_have_several_shards()
    moto_compat.fix_stream_records_expire_after_the_retention_period()
    table = scratch_table(DynamoDBBackend("us-east-1", "123456789012"), "t", "NEW_AND_OLD_IMAGES")
    shards = moto_compat.table_stream_shards(table)
    described = [shard.to_json() for shard in shards]
    for index in range(30):
        table.put_item({"pk": {"S": f"old-{index}"}})
    written = {shard.id: len(shard.items) for shard in shards}
    assert len(shards) == 3 and all(written.values()), "every shard has records"
    next_numbers = {shard.id: shard.starting_sequence_number + len(shard.items) for shard in shards}

    clock.advance(PAST_RETENTION)
    for index in range(30):
        table.put_item({"pk": {"S": f"new-{index}"}})  # each shard trims when it is next appended to
    for shard in shards:
        moto_compat.trim_stream_shard(shard)
        assert shard.starting_sequence_number == next_numbers[shard.id], "exactly the old records went"
        numbers = [int(record.record["dynamodb"]["SequenceNumber"]) for record in shard.items]
        assert numbers == list(range(shard.starting_sequence_number, shard.starting_sequence_number + len(numbers)))
    assert sum(len(shard.items) for shard in shards) == 30
    assert [shard.to_json() for shard in shards] == described, "DescribeStream's StartingSequenceNumber stays"


def test_a_record_whose_write_trims_the_shard_is_still_stored_compact(monkeypatch: pytest.MonkeyPatch) -> None:
    """`speedups` finds the records an add appended by sequence number, so a trim inside the add misses none."""
    clock = moto_compat.CompatClock()
    monkeypatch.setattr(moto_compat, "clock", clock)
    moto_compat.fix_stream_records_expire_after_the_retention_period()
    speedups.store_stream_records_as_json()
    table = scratch_table(DynamoDBBackend("us-east-1", "123456789012"), "t", "NEW_IMAGE")
    table.put_item({"pk": {"S": "old"}})
    clock.advance(PAST_RETENTION)
    table.put_item({"pk": {"S": "new"}})  # its append trims "old"
    (kept,) = table.stream_shard.items
    assert isinstance(kept, speedups.CompactStreamRecord) and kept.to_json()["dynamodb"]["Keys"] == {"pk": {"S": "new"}}


def test_every_shard_of_a_stream_stores_its_records_compact(monkeypatch: pytest.MonkeyPatch) -> None:
    """With several shards a record is appended to its item's shard, not the first: each is compacted."""
    monkeypatch.setenv(moto_compat.STREAM_SHARDS_VARIABLE, "4")
    moto_compat.fix_dynamodb_streams_have_several_shards()
    speedups.store_stream_records_as_json()
    table = scratch_table(DynamoDBBackend("us-east-1", "123456789012"), "t", "NEW_AND_OLD_IMAGES")
    for index in range(40):
        table.put_item({"pk": {"S": f"item-{index}"}})
    shards = moto_compat.table_stream_shards(table)
    assert len(shards) == 4 and all(shard.items for shard in shards[1:]), "records went to the other shards"
    assert all(isinstance(record, speedups.CompactStreamRecord) for shard in shards for record in shard.items)


def test_a_deep_copied_table_keeps_its_records_and_their_write_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's own rollback deep-copies a table: the copy's records are not appended (and noted) again."""
    clock = moto_compat.CompatClock()
    monkeypatch.setattr(moto_compat, "clock", clock)
    moto_compat.fix_stream_records_expire_after_the_retention_period()
    table = scratch_table(DynamoDBBackend("us-east-1", "123456789012"), "t", "NEW_IMAGE")
    for index in range(5):
        table.put_item({"pk": {"S": f"item-{index}"}})
    copied = copy.deepcopy(table)
    original_items, copied_items = table.stream_shard.items, copied.stream_shard.items
    assert len(copied_items) == len(original_items) == 5 and copied_items is not original_items
    assert copied_items.written.marks == original_items.written.marks
    assert copied_items.shard is copied.stream_shard
    clock.advance(PAST_RETENTION)
    copied.put_item({"pk": {"S": "new"}})
    assert len(copied.stream_shard.items) == 1 and len(table.stream_shard.items) == 5
