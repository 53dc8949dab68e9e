"""Record expiry (`local.runner.expiry`): when a batch is discarded, what the destination gets, the checkpoint.

The decision alone (`over_age`, `trimmed`), the invocation record against the Lambda Developer
Guide's example and Powertools' model of it, and the real poller over a scripted shard with a
clock the test moves: a batch that always fails is discarded once its records are too old, or
once the stream has trimmed them, and the shard goes on; a batch whose retries are spent is
reported as `RetryAttemptsExhausted`. The same against the emulator: `tests/local/runner/test_runner.py`
(MaximumRecordAgeInSeconds, an SQS destination) and `tests/local/emulator/test_stream_retention.py`
(records trimmed by the stream's retention while their batch kept failing).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import DynamoDBStreamLambdaOnFailureDestinationModel

from local.runner.checkpoints import CheckpointStore
from local.runner.discovery import on_failure_destination_of
from local.runner.execution_environment import InvocationResult
from local.runner.expiry import (
    RECORD_AGE_EXCEEDED,
    RETRY_ATTEMPTS_EXHAUSTED,
    Discard,
    invocation_record,
    over_age,
    s3_object_key,
    trimmed,
)
from local.runner.lanes import lane_of
from local.runner.pollers import ShardPoller
from local.runner.redelivery import RedeliveryPolicy
from local.runner.stats import RunnerStats
from tests.local.runner.test_runner_pollers import ScriptedShard, mapping, record

KINESIS_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/ingest"
FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:state"


def kinesis_record(sequence_number: str, arrived_at: float) -> dict[str, Any]:
    return {
        "kinesis": {"sequenceNumber": sequence_number, "partitionKey": "p", "approximateArrivalTimestamp": arrived_at},
        "eventID": f"shardId-000000000000:{sequence_number}",
    }


# ------------------------------------------------------------------ the decision


def test_no_record_is_too_old_when_the_maximum_age_is_infinite() -> None:
    ancient = [record(n, created_at=0.0) for n in range(3)]
    assert over_age(ancient, now=1e10, maximum_record_age_seconds=-1) == 0


def test_the_records_past_the_maximum_age_are_counted_from_the_first_up_to_the_first_younger_one() -> None:
    now = 1_000.0
    records = [record(0, 900.0), record(1, 939.0), record(2, 940.0), record(3, 990.0)]
    assert over_age(records, now=now, maximum_record_age_seconds=60) == 2, "61 s and 100 s old; 60 s is not older"
    # A younger record before an older one (arrival times are approximate) ends the run: the
    # discarded records are always the first ones, so the checkpoint can pass them.
    skewed = [record(0, 990.0), record(1, 900.0)]
    assert over_age(skewed, now=now, maximum_record_age_seconds=60) == 0
    assert over_age([], now=now, maximum_record_age_seconds=60) == 0


def test_the_age_of_a_kinesis_record_is_its_approximate_arrival() -> None:
    assert over_age([kinesis_record("5", 100.0)], now=161.0, maximum_record_age_seconds=60) == 1
    assert over_age([kinesis_record("5", 100.0)], now=160.0, maximum_record_age_seconds=60) == 0


def test_records_below_the_oldest_one_kept_are_trimmed_and_all_are_when_none_is_kept() -> None:
    records = [record(n) for n in (8, 9, 10, 11)]
    assert trimmed(records, "10") == 2, "sequence numbers compare as numbers, not text ('9' > '10')"
    assert trimmed(records, "8") == 0
    assert trimmed(records, "12") == 4
    assert trimmed(records, None) == 4, "a shard that keeps no record has trimmed every record read from it"


def test_an_on_failure_destination_is_an_arn_or_nothing() -> None:
    assert on_failure_destination_of(None) is None
    assert on_failure_destination_of({}) is None
    assert on_failure_destination_of({"OnFailure": {}}) is None
    arn = "arn:aws:sqs:us-east-1:123456789012:failed"
    assert on_failure_destination_of({"OnFailure": {"Destination": arn}}) == arn
    with pytest.raises(ValueError, match="not an ARN"):
        on_failure_destination_of({"OnFailure": {"Destination": {"Fn::GetAtt": ["Queue", "Arn"]}}})


# ------------------------------------------------------------ the invocation record


def test_a_kinesis_invocation_record_has_the_shape_of_the_developer_guide_example() -> None:
    kinesis = mapping(event_source_arn=KINESIS_ARN, function_arn=FUNCTION_ARN)
    records = [kinesis_record("49601", 1_573_691_884.835), kinesis_record("49602", 1_573_691_885.58)]
    failure = InvocationResult(error={"errorType": "RuntimeError", "errorMessage": "boom"})
    discard = Discard(records, RETRY_ATTEMPTS_EXHAUSTED, 1, failure, "retries spent", at=1_573_691_886.021)
    document = invocation_record(discard, mapping=kinesis, shard_id="shardId-000000000001")

    # The keys and order of "Example invocation record" (Kinesis page, "Error handling").
    assert list(document) == ["requestContext", "responseContext", "version", "timestamp", "KinesisBatchInfo"]
    assert list(document["requestContext"]) == ["requestId", "functionArn", "condition", "approximateInvokeCount"]
    assert re.fullmatch(r"[0-9a-f-]{36}", document["requestContext"]["requestId"])
    assert document["requestContext"] | {"requestId": ""} == {
        "requestId": "",
        "functionArn": FUNCTION_ARN,
        "condition": "RetryAttemptsExhausted",
        "approximateInvokeCount": 1,
    }
    assert document["responseContext"] == {
        "statusCode": 200,
        "executedVersion": "$LATEST",
        "functionError": "Unhandled",
    }
    assert (document["version"], document["timestamp"]) == ("1.0", "2019-11-14T00:38:06.021Z")
    assert document["KinesisBatchInfo"] == {
        "shardId": "shardId-000000000001",
        "startSequenceNumber": "49601",
        "endSequenceNumber": "49602",
        "approximateArrivalOfFirstRecord": "2019-11-14T00:38:04.835Z",
        "approximateArrivalOfLastRecord": "2019-11-14T00:38:05.580Z",
        "batchSize": 2,
        "streamArn": KINESIS_ARN,
    }
    assert "Records" not in str(document) and "data" not in str(document), "the records themselves are not sent"


def test_a_dynamodb_invocation_record_parses_as_powertools_models_it() -> None:
    stream = mapping(function_arn=FUNCTION_ARN)
    records = [record(7, 1_700_000_000.0), record(8, 1_700_000_001.0), record(9, 1_700_000_002.0)]
    partial = InvocationResult(payload={"batchItemFailures": [{"itemIdentifier": "7"}]})  # not a function error
    document = invocation_record(
        Discard(records, RECORD_AGE_EXCEEDED, 4, partial, "too old"), mapping=stream, shard_id="shard-0"
    )
    parsed = DynamoDBStreamLambdaOnFailureDestinationModel.model_validate(document)
    info = document["DDBStreamBatchInfo"]
    assert (parsed.ddb_stream_batch_info.batch_size, info["startSequenceNumber"], info["endSequenceNumber"]) == (
        3,
        "7",
        "9",
    )
    assert info["approximateArrivalOfFirstRecord"] == "2023-11-14T22:13:20Z", "DynamoDB's whole seconds"
    assert parsed.request_context.condition == "RecordAgeExceeded"
    assert document["responseContext"] == {"statusCode": 200, "executedVersion": "$LATEST"}


def test_a_batch_discarded_before_any_invocation_has_no_response_context() -> None:
    document = invocation_record(
        Discard([record(1, 0.0)], RECORD_AGE_EXCEEDED, 0, None, "too old"), mapping=mapping(), shard_id="shard-0"
    )
    assert "responseContext" not in document
    assert document["requestContext"]["approximateInvokeCount"] == 0


def test_an_s3_destination_s_object_key_follows_lambda_s_naming() -> None:
    key = s3_object_key("uuid-1", "shardId-000000000000", 1_573_691_886.021)
    assert re.fullmatch(r"aws/lambda/uuid-1/shardId-000000000000/2019/11/14/2019-11-14T00\.38\.06-[0-9a-f-]{36}", key)


# ------------------------------------------------------------- the real poller


class Clock:
    """The wall clock the poller measures ages on, moved by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CapturingDestination:
    """An `OnFailureDestination` that keeps what it is sent (or fails to send, on request)."""

    arn = "arn:aws:sqs:us-east-1:123456789012:failed-batches"

    def __init__(self, fails: bool = False) -> None:
        self.sent: list[Mapping[str, Any]] = []
        self.events: list[Mapping[str, Any]] = []
        self.fails = fails

    def send(self, record: Mapping[str, Any], *, event: Mapping[str, Any], **_: Any) -> None:
        if self.fails:
            raise ConnectionError("the queue is not there")
        self.sent.append(record)
        self.events.append(event)


class Run:
    """A closed scripted shard polled to its end by the real poller, with the test's function and clock."""

    def __init__(self, tmp_path: Path, shard: ScriptedShard, clock: Clock, **settings: Any) -> None:
        self.shard, self.clock = shard, clock
        self.deliveries: list[list[int]] = []
        self.stats = RunnerStats(None)
        self.checkpoints = CheckpointStore(tmp_path / "checkpoints.json")
        self.destination = settings.pop("destination", CapturingDestination())
        self.fails: Any = settings.pop("fails", lambda numbers: True)
        self.seconds_per_invocation = settings.pop("seconds_per_invocation", 10.0)
        redelivery = settings.pop("redelivery", None)
        shard.closed = True
        self.poller = ShardPoller(
            mapping=mapping(function_arn=FUNCTION_ARN, **settings),
            shard_id="shard-0",
            reader=shard,
            invoke=self.invoke,
            checkpoints=self.checkpoints,
            stats=self.stats,
            stop=threading.Event(),
            poll_interval_seconds=0.005,
            min_read_interval_seconds=0.0,
            retry_backoff_start_seconds=0.001,
            on_failure_destination=self.destination,
            redelivery=redelivery,
            clock=clock,
        )

    def invoke(self, event: Mapping[str, Any]) -> InvocationResult:
        numbers = [int(r["dynamodb"]["SequenceNumber"]) for r in event["Records"]]
        self.deliveries.append(numbers)
        self.clock.now += self.seconds_per_invocation
        if self.fails(numbers):
            return InvocationResult(error={"errorType": "Planned", "errorMessage": "fails"})
        return InvocationResult(payload=None)

    def to_the_end(self) -> Run:
        self.poller.start()
        self.poller.join(30)
        assert self.poller.finished, "the shard is processed to its end, not retried for ever"
        return self

    @property
    def checkpoint(self) -> str | None:
        return self.checkpoints.get("m", "shard-0")

    @property
    def counters(self) -> Any:
        return self.stats.function("f")


def shard_of(*created_at: float) -> ScriptedShard:
    shard = ScriptedShard()
    shard.records.extend(record(n, at) for n, at in enumerate(created_at))
    return shard


def test_a_batch_that_always_fails_is_discarded_once_its_records_pass_the_maximum_age(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(1_000.0)
    run = Run(tmp_path, shard_of(1_000.0, 1_000.0, 1_000.0), clock, maximum_record_age_seconds=60)
    with caplog.at_level(logging.ERROR, logger="local.runner.expiry"):
        run.to_the_end()

    # Ten seconds an invocation: attempts at ages 0, 10, ... 60 (not older than 60), then 70: discarded unsent.
    assert run.deliveries == [[0, 1, 2]] * 7
    assert run.checkpoint == "2", "the checkpoint moves past the discarded batch"
    [sent] = run.destination.sent
    assert sent["requestContext"]["condition"] == "RecordAgeExceeded"
    assert sent["requestContext"]["approximateInvokeCount"] == 7
    assert sent["responseContext"]["functionError"] == "Unhandled"
    assert (sent["DDBStreamBatchInfo"]["startSequenceNumber"], sent["DDBStreamBatchInfo"]["endSequenceNumber"]) == (
        "0",
        "2",
    )
    assert (run.counters.records_dropped, run.counters.batches_expired, run.counters.batches_skipped) == (3, 1, 0)
    assert run.counters.destination_deliveries == 1
    [line] = caplog.messages
    assert "LOST 3 record(s) 0..2 (RecordAgeExceeded: older than MaximumRecordAgeInSeconds=60" in line
    assert f"invocation record sent to {CapturingDestination.arn}" in line


def test_records_older_than_the_maximum_age_are_never_sent_and_the_younger_ones_of_their_batch_are(
    tmp_path: Path,
) -> None:
    """A backlog read late: Lambda sends no record older than the maximum age, even the first time."""
    clock = Clock(1_000.0)
    run = Run(
        tmp_path, shard_of(800.0, 900.0, 950.0, 990.0), clock, maximum_record_age_seconds=60, fails=lambda _: False
    )
    run.to_the_end()
    assert run.deliveries == [[2, 3]]
    assert run.checkpoint == "3"
    [sent] = run.destination.sent
    assert sent["DDBStreamBatchInfo"]["batchSize"] == 2
    assert sent["requestContext"]["approximateInvokeCount"] == 0 and "responseContext" not in sent
    assert (run.counters.records_dropped, run.counters.records_processed) == (2, 2)


def test_without_a_maximum_age_a_failing_batch_is_kept_until_the_stream_trims_it_and_the_next_is_checked_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class TrimmingShard(ScriptedShard):
        """Keeps every record, but says it keeps none below `horizon` once the test trims it."""

        horizon: str | None = "0"

        def oldest_kept(self, shard_id: str) -> str | None:
            return self.horizon

    shard = TrimmingShard()
    shard.records.extend(record(n, 0.0) for n in range(6))
    clock = Clock(1_000.0)
    run = Run(tmp_path, shard, clock, batch_size=3, fails=lambda numbers: min(numbers) < 3)
    original_invoke = run.invoke

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        if len(run.deliveries) == 4:
            shard.horizon = "4"  # the retention passed meanwhile: records 0 to 3 are gone
        return original_invoke(event)

    run.poller.invoke = invoke
    with caplog.at_level(logging.ERROR, logger="local.runner.expiry"):
        run.to_the_end()

    # The stream is asked from the third failure in a row on: before the 4th and 5th attempts it
    # keeps the batch, before the 6th it has trimmed it. The next batch is asked before its first
    # attempt: record 3 is gone, 4 and 5 are sent.
    assert run.deliveries == [[0, 1, 2]] * 5 + [[4, 5]]
    assert run.checkpoint == "5"
    assert [s["DDBStreamBatchInfo"]["endSequenceNumber"] for s in run.destination.sent] == ["2", "3"]
    assert [s["requestContext"]["approximateInvokeCount"] for s in run.destination.sent] == [5, 0]
    assert all("trimmed from the stream by its retention, the oldest record kept 4" in m for m in caplog.messages)
    assert run.counters.records_dropped == 4


def test_a_batch_whose_retries_are_spent_is_reported_as_retry_attempts_exhausted(tmp_path: Path) -> None:
    run = Run(tmp_path, shard_of(1_000.0, 1_000.0), Clock(1_000.0), maximum_retry_attempts=2).to_the_end()
    assert run.deliveries == [[0, 1]] * 3
    [sent] = run.destination.sent
    assert (sent["requestContext"]["condition"], sent["requestContext"]["approximateInvokeCount"]) == (
        "RetryAttemptsExhausted",
        3,
    )
    assert (run.counters.batches_skipped, run.counters.batches_expired, run.counters.records_dropped) == (1, 0, 2)
    assert run.checkpoint == "1"


def test_a_bisected_batch_reports_each_half_it_gives_up_on(tmp_path: Path) -> None:
    run = Run(
        tmp_path,
        shard_of(*[1_000.0] * 4),
        Clock(1_000.0),
        maximum_retry_attempts=0,
        bisect_batch_on_function_error=True,
        fails=lambda numbers: 1 in numbers,
    ).to_the_end()
    assert run.deliveries == [[0, 1, 2, 3], [0, 1], [0], [1], [2, 3]]
    [sent] = run.destination.sent
    assert sent["DDBStreamBatchInfo"]["startSequenceNumber"] == sent["DDBStreamBatchInfo"]["endSequenceNumber"] == "1"
    assert sent["requestContext"]["approximateInvokeCount"] == 3, "the whole batch, its half, then itself"
    assert run.checkpoint == "3"


def test_a_destination_that_cannot_be_reached_is_counted_and_the_shard_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = Run(
        tmp_path, shard_of(1_000.0), Clock(1_000.0), maximum_retry_attempts=0, destination=CapturingDestination(True)
    )
    with caplog.at_level(logging.ERROR, logger="local.runner.expiry"):
        run.to_the_end()
    assert (run.counters.destination_delivery_failures, run.counters.destination_deliveries) == (1, 0)
    assert run.checkpoint == "0"
    assert "NOT delivered to arn:aws:sqs:" in caplog.messages[0] and "the queue is not there" in caplog.messages[0]


def test_a_success_delivered_again_is_never_discarded_as_expired(tmp_path: Path) -> None:
    """At least once: the duplicate of a success is sent even if its records aged meanwhile."""
    run = Run(
        tmp_path,
        shard_of(1_000.0, 1_000.0),
        Clock(1_000.0),
        maximum_record_age_seconds=60,
        seconds_per_invocation=100.0,
        fails=lambda _: False,
        redelivery=RedeliveryPolicy(frozenset(), again_after_success_pct=100.0),
    ).to_the_end()
    assert run.deliveries == [[0, 1], [0, 1]]
    assert (run.counters.records_dropped, run.counters.records_processed, run.checkpoint) == (0, 2, "1")


def test_a_lane_discards_its_own_expired_records_while_the_others_go_on_and_the_checkpoint_passes_them(
    tmp_path: Path,
) -> None:
    keys = ["a", next(k for k in "bcdefgh" if lane_of(item(0, k), 2) != lane_of(item(0, "a"), 2))]  # two lanes
    shard = ScriptedShard()
    # Records 0 and 2 (the first key's first batch) arrived 40 s before the clock; the rest after it.
    shard.records.extend(item(n, keys[n % 2], 1_000.0 if n in (0, 2) else 2_000.0) for n in range(8))
    run = Run(
        tmp_path,
        shard,
        Clock(1_040.0),
        parallelization_factor=2,
        batch_size=2,
        maximum_record_age_seconds=60,
        seconds_per_invocation=0.0,
        fails=lambda numbers: 0 in numbers,
    )
    original_invoke = run.invoke

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        result = original_invoke(event)
        run.clock.now += 40.0 if result.failed else 0.0  # only the failing batch's retries take time
        return result

    run.poller.invoke = invoke
    run.to_the_end()
    assert sorted(run.deliveries) == [[0, 2], [1, 3], [4, 6], [5, 7]], "tried once (aged 40 s), then 80 s: discarded"
    assert [
        (s["DDBStreamBatchInfo"]["startSequenceNumber"], s["DDBStreamBatchInfo"]["endSequenceNumber"])
        for s in run.destination.sent
    ] == [("0", "2")]
    assert run.checkpoint == "7", "every record finished: delivered, or discarded"
    assert (run.counters.records_dropped, run.counters.records_processed) == (2, 6)


def item(sequence_number: int, key: str, created_at: float = 0.0) -> dict[str, Any]:
    return {
        "eventID": f"shard-0:{sequence_number}",
        "eventName": "INSERT",
        "dynamodb": {
            "SequenceNumber": str(sequence_number),
            "Keys": {"pk": {"S": key}},
            "ApproximateCreationDateTime": created_at,
        },
    }
