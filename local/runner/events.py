"""Stream records in the exact shape Lambda delivers them to a function.

Kinesis: https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html (event example).
DynamoDB Streams: https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html.
boto3 parses timestamps into datetimes and binary attributes into bytes; Lambda's JSON
has epoch seconds and base64 strings, so both are converted back here.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aggregation import kpl


def _epoch_seconds(value: Any) -> float:
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return float(value)


def kinesis_record(
    record: Mapping[str, Any], *, shard_id: str, stream_arn: str, region: str, role_arn: str = ""
) -> dict[str, Any]:
    """One Kinesis `get_records` record as an element of a Lambda event's `Records`."""
    sequence_number = str(record["SequenceNumber"])
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": record["PartitionKey"],
            "sequenceNumber": sequence_number,
            "data": base64.b64encode(bytes(record["Data"])).decode("ascii"),
            "approximateArrivalTimestamp": _epoch_seconds(record["ApproximateArrivalTimestamp"]),
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{shard_id}:{sequence_number}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": role_arn,
        "awsRegion": region,
        "eventSourceARN": stream_arn,
    }


def _attribute_json(value: Any) -> Any:
    """An AttributeValue as Lambda's JSON has it (bytes -> base64), recursively."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {key: _attribute_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_attribute_json(item) for item in value]
    return value


def dynamodb_record(record: Mapping[str, Any], *, stream_arn: str, region: str) -> dict[str, Any]:
    """One DynamoDB Streams `get_records` record as an element of a Lambda event's `Records`."""
    change = dict(record["dynamodb"])
    event_change: dict[str, Any] = {}
    if "ApproximateCreationDateTime" in change:
        event_change["ApproximateCreationDateTime"] = _epoch_seconds(change["ApproximateCreationDateTime"])
    for name in ("Keys", "NewImage", "OldImage"):
        if name in change:
            event_change[name] = _attribute_json(change[name])
    event_change["SequenceNumber"] = str(change["SequenceNumber"])
    event_change["SizeBytes"] = int(change.get("SizeBytes", 0))
    event_change["StreamViewType"] = change.get("StreamViewType", "")
    return {
        "eventID": record["eventID"],
        "eventName": record["eventName"],
        "eventVersion": record.get("eventVersion", "1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": record.get("awsRegion", region),
        "dynamodb": event_change,
        "eventSourceARN": stream_arn,
    }


def sequence_number_of(record: Mapping[str, Any]) -> str:
    """The shard sequence number of a Lambda-formatted record (the checkpoint unit)."""
    if "kinesis" in record:
        return str(record["kinesis"]["sequenceNumber"])
    return str(record["dynamodb"]["SequenceNumber"])


def is_kpl_aggregate(record: Mapping[str, Any]) -> bool:
    """Whether a Lambda-formatted record is a Kinesis record carrying a KPL aggregate: its data starts
    with the format's magic (`aggregation.kpl.is_aggregate`, which the state function splits by)."""
    kinesis = record.get("kinesis")
    if not isinstance(kinesis, Mapping):
        return False
    head = str(kinesis.get("data", ""))[:8]  # 8 base64 characters are the data's first 6 bytes
    try:
        return kpl.is_aggregate(base64.b64decode(head, validate=True))
    except binascii.Error:
        return False


def item_identifier_of(record: Mapping[str, Any]) -> str:
    """What a `batchItemFailures[].itemIdentifier` names: the record's sequence number."""
    return sequence_number_of(record)


def arrival_seconds(record: Mapping[str, Any]) -> float:
    """When the stream received the record (what Lambda assigns tumbling windows by)."""
    if "kinesis" in record:
        return float(record["kinesis"]["approximateArrivalTimestamp"])
    return float(record["dynamodb"].get("ApproximateCreationDateTime", 0.0))


@dataclass(frozen=True)
class TumblingWindow:
    """One window of a mapping's `TumblingWindowInSeconds`, aligned on the epoch."""

    start: float
    end: float

    @classmethod
    def containing(cls, seconds: float, length_seconds: int) -> TumblingWindow:
        start = seconds - seconds % length_seconds
        return cls(start, start + length_seconds)

    def as_json(self) -> dict[str, str]:
        def iso(value: float) -> str:
            return datetime.datetime.fromtimestamp(value, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        return {"start": iso(self.start), "end": iso(self.end)}


def invocation_event(
    records: Sequence[Mapping[str, Any]],
    *,
    shard_id: str,
    event_source_arn: str,
    window: TumblingWindow | None = None,
    state: Mapping[str, Any] | None = None,
    final: bool = False,
) -> dict[str, Any]:
    """The event of one invocation: `Records`, plus the tumbling-window fields when there is one.

    Lambda adds `shardId`, `eventSourceARN`, `window`, `state`, `isFinalInvokeForWindow` and
    `isWindowTerminatedEarly` only for mappings with a tumbling window (Lambda Developer
    Guide, "DynamoDB tumbling windows" / "Kinesis tumbling windows").
    """
    event: dict[str, Any] = {"Records": [dict(record) for record in records]}
    if window is not None:
        event |= {
            "shardId": shard_id,
            "eventSourceARN": event_source_arn,
            "window": window.as_json(),
            "state": dict(state or {}),
            "isFinalInvokeForWindow": final,
            "isWindowTerminatedEarly": False,
        }
    return event


INVOCATION_PAYLOAD_LIMIT_BYTES = 6 * 1024 * 1024
"""Lambda's limit on an invocation's payload: 6 MB for a synchronous request (Lambda Developer
Guide, "Lambda quotas", invocation payload), which is how a stream mapping invokes. A mapping
sends a batch when the batch size, the batching window or this payload limit is reached (the
Kinesis and DynamoDB Streams pages, on batching); the runner counts the event's JSON, compact
and UTF-8: what Lambda sends the function."""


def json_size(value: Any) -> int:
    """Bytes of `value` as compact UTF-8 JSON, the unit the payload limit counts."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def event_size(envelope_size: int, record_sizes: Sequence[int]) -> int:
    """Bytes of an event whose `Records` hold records of these sizes and whose JSON without any
    record (`json_size(invocation_event([], ...))`) is `envelope_size`: the records and the
    commas between them."""
    return envelope_size + sum(record_sizes) + max(0, len(record_sizes) - 1)


def window_state_of(payload: Any) -> dict[str, Any] | None:
    """The `state` a tumbling-window invocation returned; None when it returned none (a failure)."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("state"), Mapping):
        return None
    return dict(payload["state"])
