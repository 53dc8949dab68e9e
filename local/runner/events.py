"""Stream records in the exact shape Lambda delivers them to a function.

Kinesis: https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html (event example).
DynamoDB Streams: https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html.
boto3 parses timestamps into datetimes and binary attributes into bytes; Lambda's JSON
has epoch seconds and base64 strings, so both are converted back here.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping
from typing import Any


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


def item_identifier_of(record: Mapping[str, Any]) -> str:
    """What a `batchItemFailures[].itemIdentifier` names: the record's sequence number."""
    return sequence_number_of(record)
