"""Quarantine: invalid records are kept with their reason, never lost, never retried.

Items are keyed by the Kinesis event ID and put only where none exists yet, so a retried batch
finds its items already there instead of adding new ones, and the function can never replace
(or, with no `BatchWriteItem` or `DeleteItem` grant, delete) evidence already stored. Each item
carries `ExpiresAt`, `QUARANTINE_TTL_DAYS` after it was written: the table's TTL removes it then
(a producer cannot fill the table without bound, and personal data in a bad record does not
stay for ever).

A user record of a KPL aggregate is quarantined on its own, keyed by its aggregate's event ID
and its sub-sequence number (`RecordOrigin`); an aggregate that cannot be read is quarantined
whole, keyed by its own event ID.

A Kinesis record holds up to 1 MiB and a DynamoDB item 400 KB, and an item over the
limit would be refused on every retry of the batch. So the payload is stored as
much as fits the item (`aggregation.item_size`): as text (`Payload`, cut on a
character boundary) when the whole record is UTF-8, else as its raw bytes
(`PayloadBinary`, a binary attribute: no base64 inflation); with the length and
SHA-256 of the whole record, and `PayloadTruncated` when it was cut.
"""

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from aggregation.item_size import MAX_ITEM_BYTES, item_size_bytes
from aggregation.names import (
    EXPIRES_AT,
    QUARANTINE_BINARY_PAYLOAD,
    QUARANTINE_PAYLOAD_TRUNCATED,
    QUARANTINE_REASON,
    QUARANTINE_RECORD_ID,
    QUARANTINE_TEXT_PAYLOAD,
)
from function_support.aws import dynamodb_client, error_code, serializer
from function_support.settings import ttl_seconds

DEFAULT_QUARANTINE_TTL_DAYS = 30
"""`quarantineTtlDays`'s default (`stacks/settings.py`), for a function run without the variable."""


@dataclass(frozen=True)
class RecordOrigin:
    """Where a Kinesis record, or one user record of a KPL aggregate, came from, and its raw bytes.

    A user record's `event_id` is its aggregate's followed by ``:<sub-sequence number>``, so
    each user record has its own quarantine item and its own `WrittenByEventId`.
    """

    event_id: str
    shard_id: str
    sequence_number: str
    partition_key: str
    payload: bytes
    sub_sequence_number: int | None = None


@dataclass(frozen=True)
class QuarantinedRecord:
    origin: RecordOrigin
    reason: str


MAX_UNEXPECTED_REASON_CHARACTERS = 1_000
"""An exception's text is not ours to bound (it may quote the whole record), and a reason that
outgrew the item would make the quarantine write itself fail on every retry."""


def quarantine_reason(error: Exception) -> str:
    """The reason of a record quarantined because reading it raised `error` (not a rule it
    broke, a defect): the exception named, its text cut to a bounded length."""
    reason = f"unexpected {type(error).__name__} while reading the record: {error}"
    return reason[:MAX_UNEXPECTED_REASON_CHARACTERS]


def _character_boundary(text: bytes, cut: int) -> int:
    """The largest position <= `cut` that does not split a UTF-8 character of `text`."""
    while 0 < cut < len(text) and text[cut] & 0xC0 == 0x80:  # a continuation byte
        cut -= 1
    return cut


def quarantine_item(record: QuarantinedRecord, now: float, ttl: int) -> dict[str, Any]:
    """The QuarantineTable item of one invalid record (docs/architecture.md), in DynamoDB's
    wire format, never over `MAX_ITEM_BYTES`, expiring `ttl` seconds after `now`."""
    origin = record.origin
    payload = origin.payload
    try:
        payload.decode("utf-8")
        attribute = QUARANTINE_TEXT_PAYLOAD
    except UnicodeDecodeError:
        attribute = QUARANTINE_BINARY_PAYLOAD
    described = {
        QUARANTINE_RECORD_ID: origin.event_id,
        QUARANTINE_REASON: record.reason,
        "PayloadBytes": len(payload),
        "PayloadSha256": hashlib.sha256(payload).hexdigest(),
        QUARANTINE_PAYLOAD_TRUNCATED: False,
        "PartitionKey": origin.partition_key,
        "SequenceNumber": origin.sequence_number,
        "ShardId": origin.shard_id,
        "QuarantinedAt": int(now),
        EXPIRES_AT: int(now) + ttl,
    }
    if origin.sub_sequence_number is not None:
        described["SubSequenceNumber"] = origin.sub_sequence_number
    item = {name: serializer.serialize(value) for name, value in described.items()}
    room = max(0, MAX_ITEM_BYTES - item_size_bytes(item) - len(attribute))
    cut = min(len(payload), room)
    if attribute == QUARANTINE_TEXT_PAYLOAD:
        cut = _character_boundary(payload, cut)
        item[QUARANTINE_TEXT_PAYLOAD] = {"S": payload[:cut].decode("utf-8")}
    else:
        item[QUARANTINE_BINARY_PAYLOAD] = {"B": payload[:cut]}
    item[QUARANTINE_PAYLOAD_TRUNCATED] = {"BOOL": cut < len(payload)}
    return item


def quarantine_records(table_name: str, records: Sequence[QuarantinedRecord]) -> None:
    """Put every record in the quarantine table unless its item is already there (a retried batch).

    One conditional `PutItem` each rather than `BatchWriteItem`: a batch write cannot be
    conditional, and IAM cannot grant its puts without its deletes. Quarantined records are rare,
    so the extra requests cost nothing that matters; any other error fails the batch, which is
    retried.
    """
    now = time.time()
    ttl = ttl_seconds("QUARANTINE_TTL_DAYS", DEFAULT_QUARANTINE_TTL_DAYS)
    for record in records:
        try:
            dynamodb_client().put_item(
                TableName=table_name,
                Item=quarantine_item(record, now, ttl),
                ConditionExpression="attribute_not_exists(#id)",
                ExpressionAttributeNames={"#id": QUARANTINE_RECORD_ID},
            )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise
