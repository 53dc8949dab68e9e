"""Quarantine: invalid records are kept with their reason, never lost, never retried.

Items are keyed by the Kinesis event ID, so a retried batch rewrites the same
items instead of adding new ones.
"""

import base64
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from function_support.aws import dynamodb_client, serializer

# DynamoDB items hold at most 400 KB; a longer payload is stored truncated, with the
# length and SHA-256 of the whole record so it can still be identified.
MAX_STORED_PAYLOAD_BYTES = 300 * 1024
BATCH_WRITE_LIMIT = 25
MAX_UNPROCESSED_ROUNDS = 8


@dataclass(frozen=True)
class RecordOrigin:
    """Where a Kinesis record came from, and its raw bytes."""

    event_id: str
    shard_id: str
    sequence_number: str
    partition_key: str
    payload: bytes


@dataclass(frozen=True)
class QuarantinedRecord:
    origin: RecordOrigin
    reason: str


def quarantine_item(record: QuarantinedRecord, now: float) -> dict[str, Any]:
    """The QuarantineTable item of one invalid record (docs/architecture.md)."""
    origin = record.origin
    stored = origin.payload[:MAX_STORED_PAYLOAD_BYTES]
    item: dict[str, Any] = {
        "RecordId": origin.event_id,
        "Reason": record.reason,
        "PayloadBytes": len(origin.payload),
        "PayloadSha256": hashlib.sha256(origin.payload).hexdigest(),
        "PayloadTruncated": len(stored) < len(origin.payload),
        "PartitionKey": origin.partition_key,
        "SequenceNumber": origin.sequence_number,
        "ShardId": origin.shard_id,
        "QuarantinedAt": int(now),
    }
    try:
        item["Payload"] = stored.decode("utf-8")
    except UnicodeDecodeError:
        item["PayloadBase64"] = base64.b64encode(stored).decode("ascii")
    return item


def quarantine_records(table_name: str, records: Sequence[QuarantinedRecord]) -> None:
    """Write every record to the quarantine table; raise if any could not be written."""
    now = time.time()
    requests = [
        {"PutRequest": {"Item": {k: serializer.serialize(v) for k, v in quarantine_item(r, now).items()}}}
        for r in records
    ]
    for start in range(0, len(requests), BATCH_WRITE_LIMIT):
        pending: list[Any] = requests[start : start + BATCH_WRITE_LIMIT]
        for _ in range(MAX_UNPROCESSED_ROUNDS):
            response = dynamodb_client().batch_write_item(RequestItems={table_name: pending})
            pending = response.get("UnprocessedItems", {}).get(table_name, [])
            if not pending:
                break
            time.sleep(0.05)
        if pending:
            raise RuntimeError(f"{len(pending)} quarantine writes stayed unprocessed")
