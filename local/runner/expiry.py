"""Record expiry: when Lambda stops retrying a stream batch, discards it, and what it reports.

What AWS documents (Lambda Developer Guide, "Retain discarded batch records for a Kinesis Data
Streams event source in Lambda" and "Retain discarded records for a DynamoDB event source in
Lambda"; the parameter tables of both pages), and what this module and `local.runner.lanes`
do for each sentence:

- "If a Lambda event source mapping is unable to invoke the function ..., it retries until the
  records expire or exceed the maximum age configured on the event source mapping
  (MaximumRecordAgeInSeconds)", and "Maximum age of record - The maximum age of a record that
  Lambda sends to your function": before every attempt, the first one included, the records
  older than MaximumRecordAgeInSeconds (their age from `approximateArrivalTimestamp`, Kinesis, or
  `ApproximateCreationDateTime`, DynamoDB) are discarded unsent (`over_age`).
- "If the function is invoked but returns an error, Lambda retries until the records expire,
  exceed the maximum age (MaximumRecordAgeInSeconds), or reach the configured retry quota
  (MaximumRetryAttempts)"; MaximumRecordAgeInSeconds "-1 means infinite: Lambda doesn't discard
  records (Kinesis Data Streams data retention settings still apply)", and for DynamoDB "-1 means
  infinite: failed records are retried until the record expires. The data retention limit for
  DynamoDB Streams is 24 hours": a record the stream has trimmed (its retention passed) is
  expired too. A batch that keeps failing asks the stream for its oldest record kept
  (`ShardReader.oldest_kept`) before each retry from its `STREAM_CHECK_AFTER_FAILURES`-th failure
  on, and the records below it are discarded (`trimmed`).
- "If the error handling measures fail, Lambda discards the records and continues processing
  batches from the stream": the checkpoint moves to the last record discarded, and the batch's
  other records (younger ones) are sent on.
- "To retain records of failed event source mapping invocations, add a destination ... Each
  record sent to the destination is a JSON document with metadata about the failed invocation.
  For Amazon S3 destinations, Lambda also sends the entire invocation record along with the
  metadata"; "The actual records aren't included": `invocation_record` builds that document as
  the pages' example shows it, `OnFailureDestination` sends it to the SQS queue, SNS topic or S3
  bucket the mapping's `DestinationConfig.OnFailure` names, as the function's execution role ("Your
  execution role must have permissions for the destination": for SQS ``sqs:SendMessage``, for SNS
  ``sns:Publish``, for S3 ``s3:PutObject`` and ``s3:ListBucket``).

The `condition` of a batch discarded after its retries is the pages' `RetryAttemptsExhausted`;
the pages show no record of a batch discarded for its age, and `RecordAgeExceeded` is the name
used here for that (and for a record the stream trimmed). A batch discarded before any
invocation has no response to describe: its record has no `responseContext` (the pages'
example is of an invoked batch).
"""

from __future__ import annotations

import datetime
import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from local.runner import events
from local.runner.discovery import MappingConfig
from local.runner.execution_environment import InvocationResult
from local.runner.stats import RunnerStats

log = logging.getLogger(__name__)

Record = dict[str, Any]

RETRY_ATTEMPTS_EXHAUSTED = "RetryAttemptsExhausted"
"""The invocation record's `condition` for a batch whose MaximumRetryAttempts are spent (the pages' example)."""
RECORD_AGE_EXCEEDED = "RecordAgeExceeded"
"""The `condition` used for a batch discarded for its records' age, or because the stream trimmed them."""
STREAM_CHECK_AFTER_FAILURES = 3
"""A batch that has failed this many times in a row asks the stream, before each further retry,
whether it still holds the batch's records (one GetShardIterator and one GetRecords of one record).
Earlier retries do not: most failed batches succeed on their second or third attempt, and a
retention of hours is not measured to the second."""
BATCH_INFO_KEYS: Mapping[str, str] = {"kinesis": "KinesisBatchInfo", "dynamodb": "DDBStreamBatchInfo"}
"""The member of an invocation record that describes the discarded batch, per event source."""


def over_age(records: Sequence[Mapping[str, Any]], *, now: float, maximum_record_age_seconds: int) -> int:
    """How many of `records` (in sequence order), from the first, are older than MaximumRecordAgeInSeconds.

    -1 (infinite): none. A record is older when more than that many seconds passed since the
    stream received it. The count stops at the first younger record, so the records discarded
    are always the first ones and the checkpoint can move past them.
    """
    if maximum_record_age_seconds < 0:
        return 0
    return sum(
        1
        for _ in itertools.takewhile(
            lambda record: now - events.arrival_seconds(record) > maximum_record_age_seconds, records
        )
    )


def trimmed(records: Sequence[Mapping[str, Any]], oldest_kept: str | None) -> int:
    """How many of `records` (in sequence order), from the first, the stream no longer holds.

    `oldest_kept` is the sequence number of the oldest record the shard still holds (its
    TRIM_HORIZON); None when it holds none, so every record read from it has been trimmed.
    """
    if oldest_kept is None:
        return len(records)
    horizon = int(oldest_kept)
    return sum(1 for _ in itertools.takewhile(lambda r: int(events.sequence_number_of(r)) < horizon, records))


@dataclass(frozen=True)
class Discard:
    """A run of a shard's records that Lambda gives up on, and why."""

    records: Sequence[Record]  # in sequence order
    condition: str  # RETRY_ATTEMPTS_EXHAUSTED or RECORD_AGE_EXCEEDED
    invocations: int  # of the function with these records (the record's approximateInvokeCount)
    last_result: InvocationResult | None  # how the last of them ended; None: never invoked
    reason: str  # in words, for the log
    at: float = field(default_factory=time.time)


def _iso(seconds: float, *, milliseconds: bool) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    if milliseconds:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def invocation_record(discard: Discard, *, mapping: MappingConfig, shard_id: str) -> dict[str, Any]:
    """The document an on-failure destination gets for `discard`: the batch's bounds, not its records.

    As the pages' examples: `requestContext` (a request id, the function's ARN, the condition, the
    approximate invoke count), `responseContext` (of the last invocation: status 200, `$LATEST`,
    and `functionError` `Unhandled` when it failed; absent when the batch was never invoked),
    `version` 1.0, `timestamp`, and `KinesisBatchInfo` / `DDBStreamBatchInfo`: shard, first and
    last sequence numbers, the arrival of the first and last record (to the millisecond for
    Kinesis, to the second for DynamoDB, whose records carry whole seconds), the batch size and the
    stream's ARN.
    """
    first, last = discard.records[0], discard.records[-1]
    kinesis = mapping.source_kind == "kinesis"
    record: dict[str, Any] = {
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": mapping.function_arn,
            "condition": discard.condition,
            "approximateInvokeCount": discard.invocations,
        }
    }
    if discard.last_result is not None:
        response: dict[str, Any] = {"statusCode": 200, "executedVersion": "$LATEST"}
        if discard.last_result.failed:
            response["functionError"] = "Unhandled"
        record["responseContext"] = response
    record["version"] = "1.0"
    record["timestamp"] = _iso(discard.at, milliseconds=True)
    record[BATCH_INFO_KEYS[mapping.source_kind]] = {
        "shardId": shard_id,
        "startSequenceNumber": events.sequence_number_of(first),
        "endSequenceNumber": events.sequence_number_of(last),
        "approximateArrivalOfFirstRecord": _iso(events.arrival_seconds(first), milliseconds=kinesis),
        "approximateArrivalOfLastRecord": _iso(events.arrival_seconds(last), milliseconds=kinesis),
        "batchSize": len(discard.records),
        "streamArn": mapping.event_source_arn,
    }
    return record


def s3_object_key(mapping_uuid: str, shard_id: str, at: float) -> str:
    """Where an S3 destination gets the record (the Kinesis and DynamoDB pages, S3 destinations):
    `aws/lambda/<ESM-UUID>/<shardID>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<Random UUID>`."""
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return f"aws/lambda/{mapping_uuid}/{shard_id}/{moment:%Y/%m/%d}/{moment:%Y-%m-%dT%H.%M.%S}-{uuid.uuid4()}"


class OnFailureDestination:
    """The SQS queue, SNS topic or S3 bucket of a mapping's `DestinationConfig.OnFailure`.

    `client(service)` makes a client of the emulator for `sqs`, `sns` or `s3`; the runner's call as
    the function's execution role, as Lambda's do ("Your execution role must have permissions for
    the destination": ``sqs:SendMessage``, ``sns:Publish``, for S3 ``s3:PutObject`` and
    ``s3:ListBucket``), so the emulator's IAM check refuses a delivery the role may not make. SQS
    and SNS get the invocation record as the message; S3 gets it with `payload`, the invocation
    event of the discarded records, under `s3_object_key`, after a `HeadBucket` (authorised as
    ``s3:ListBucket``): a role granted only ``s3:PutObject`` fails here as the documentation says
    it would on AWS, not only there.
    """

    SERVICES = ("sqs", "sns", "s3")

    def __init__(self, arn: str, client: Callable[[str], Any]) -> None:
        self.arn = arn
        self.service = arn.split(":")[2]
        if self.service not in self.SERVICES:
            raise ValueError(f"on-failure destination {arn}: Lambda sends stream records to SQS, SNS or S3 only")
        self._client = client(self.service)

    def _url(self) -> str:
        """The queue's URL, ``<SQS endpoint>/<account>/<name>``, made from its ARN without a call:
        Lambda needs only ``sqs:SendMessage`` of the execution role, so no ``GetQueueUrl`` either."""
        _, _, _, _, account, name = self.arn.split(":", 5)
        return f"{self._client.meta.endpoint_url}/{account}/{name}"

    def send(
        self, record: Mapping[str, Any], *, event: Mapping[str, Any], mapping_uuid: str, shard_id: str, at: float
    ) -> None:
        """Deliver one invocation record; raises what the service raised."""
        if self.service == "sqs":
            self._client.send_message(QueueUrl=self._url(), MessageBody=json.dumps(record))
        elif self.service == "sns":
            self._client.publish(TopicArn=self.arn, Message=json.dumps(record))
        else:
            bucket = self.arn.split(":::", 1)[1]
            self._client.head_bucket(Bucket=bucket)
            body = json.dumps({**record, "payload": event}).encode()
            self._client.put_object(Bucket=bucket, Key=s3_object_key(mapping_uuid, shard_id, at), Body=body)


class DiscardReporter:
    """What a shard's lanes do with a discarded batch besides moving the checkpoint: one log line,
    the invocation record to the on-failure destination if the mapping has one, and the counters
    `make status` raises its alarm on (`FunctionStats.records_dropped`, `batches_expired`,
    `destination_delivery_failures`)."""

    def __init__(
        self,
        *,
        name: str,
        mapping: MappingConfig,
        shard_id: str,
        stats: RunnerStats,
        destination: OnFailureDestination | None = None,
    ) -> None:
        self.name = name
        self.mapping = mapping
        self.shard_id = shard_id
        self.stats = stats
        self.counters = stats.function(mapping.function_name)
        self.destination = destination

    def report(self, discard: Discard) -> None:
        record = invocation_record(discard, mapping=self.mapping, shard_id=self.shard_id)
        delivered = "no on-failure destination"
        if self.destination is not None:
            event = events.invocation_event(
                discard.records, shard_id=self.shard_id, event_source_arn=self.mapping.event_source_arn
            )
            try:
                self.destination.send(
                    record, event=event, mapping_uuid=self.mapping.uuid, shard_id=self.shard_id, at=discard.at
                )
            except Exception as error:  # any failure to deliver is counted and named, never raised
                delivered = f"its invocation record NOT delivered to {self.destination.arn}: {error}"
                with self.stats.lock:
                    self.counters.destination_delivery_failures += 1
            else:
                delivered = f"invocation record sent to {self.destination.arn}"
                with self.stats.lock:
                    self.counters.destination_deliveries += 1
        with self.stats.lock:
            self.counters.records_dropped += len(discard.records)
            if discard.condition == RECORD_AGE_EXCEEDED:
                self.counters.batches_expired += 1
        log.error(
            "%s: LOST %d record(s) %s..%s (%s: %s) after %d invocation(s); %s; the checkpoint moves past them, "
            "as Lambda discards them and goes on",
            self.name,
            len(discard.records),
            events.sequence_number_of(discard.records[0]),
            events.sequence_number_of(discard.records[-1]),
            discard.condition,
            discard.reason,
            discard.invocations,
            delivered,
        )
