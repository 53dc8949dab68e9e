"""Quarantine: invalid records are kept with their reason, never lost, never retried.

Items are keyed by the Kinesis event ID and written by PartiQL `INSERT`, which creates an item
only where none exists yet (``DuplicateItem`` otherwise), so a retried batch finds its items
already there instead of adding new ones, and the function can never replace (or, with only the
`PartiQLInsert` grant, delete) evidence already stored. Up to 25 inserts go in one
`BatchExecuteStatement`, and the calls run in the state function's write lanes: one 1 MiB KPL
aggregate can carry about 175,000 empty user records, each quarantined on its own, and one put at
a time that would outlast the function's timeout on every retry and stall the shard
(docs/benchmarks.md, "The worst event"). Each item
carries `ExpiresAt`, `QUARANTINE_TTL_DAYS` after it was written: the table's TTL removes it then
(a producer cannot fill the table without bound, and personal data in a bad record does not
stay for ever).

A user record of a KPL aggregate is quarantined on its own, keyed by its aggregate's event ID
and its sub-sequence number (`RecordOrigin`); an aggregate that cannot be read is quarantined
whole, keyed by its own event ID.

A Kinesis record holds up to 1 MiB and a DynamoDB item 400 KB, and an item over the
limit would be refused on every retry of the batch. So every part of the item a sender
controls is bounded: the reason (`MAX_REASON_CHARACTERS`: it may quote the record), the
partition key (`MAX_PARTITION_KEY_CHARACTERS`, Kinesis's own bound, which a KPL aggregate's key
table does not obey), and the payload, stored as much as fits the item
(`aggregation.item_size`): as text (`Payload`, cut on a character boundary) when the whole
record is UTF-8, else as its raw bytes (`PayloadBinary`, a binary attribute: no base64
inflation); with the length and SHA-256 of the whole record, and `PayloadTruncated` when it was
cut.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from aggregation.item_size import MAX_ITEM_BYTES, number_size_bytes
from aggregation.names import (
    EXPIRES_AT,
    QUARANTINE_BINARY_PAYLOAD,
    QUARANTINE_PAYLOAD_TRUNCATED,
    QUARANTINE_REASON,
    QUARANTINE_RECORD_ID,
    QUARANTINE_TEXT_PAYLOAD,
)
from aggregation.state_statements import (
    MAX_STATEMENTS_PER_CALL,
    THROTTLING_CODES,
    StatementFailed,
    error_code,
    insert_text,
)
from function_support.aws import state_update_client
from function_support.settings import ttl_seconds
from state_function.resends import MAX_RESENDS, resend_pause

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import BatchStatementRequestTypeDef

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


MAX_REASON_CHARACTERS = 1_000
"""A reason may quote the record (an exception's text is not ours to bound at all), and a reason
that outgrew the item would make the quarantine write itself fail on every retry."""
MAX_PARTITION_KEY_CHARACTERS = 256
"""Kinesis bounds a record's partition key to 256 characters; a KPL aggregate's key table is
bounded only by the record's 1 MiB."""
MAX_CALL_ITEM_BYTES = 4_000_000
"""Item bytes per `BatchExecuteStatement` (with at most 25 statements): a quarter of the 16 MB a
`BatchWriteItem` request may carry, which leaves room for binary payloads' base64 on the wire."""


class QuarantineUnsettled(RuntimeError):
    """Quarantine inserts still throttled after every resend: the batch fails and is retried."""


def bounded(text: str, characters: int) -> str:
    """`text` cut to at most `characters`, saying how long it was when it was cut."""
    if len(text) <= characters:
        return text
    return f"{text[:characters]}… (cut: {len(text)} characters)"


def quarantine_reason(error: Exception) -> str:
    """The reason of a record quarantined because reading it raised `error` (not a rule it
    broke, a defect): the exception named (its text is bounded with every reason's)."""
    return f"unexpected {type(error).__name__} while reading the record: {error}"


def _character_boundary(text: bytes, cut: int) -> int:
    """The largest position <= `cut` that does not split a UTF-8 character of `text`."""
    while 0 < cut < len(text) and text[cut] & 0xC0 == 0x80:  # a continuation byte
        cut -= 1
    return cut


def _string_bytes(name: str, text: str) -> int:
    """A string attribute's share of an item's size (`aggregation.item_size`'s rule, inlined: a
    quarantine item is built per bad user record, and an event may carry hundreds of thousands)."""
    return len(name) + len(text.encode("utf-8"))


def quarantine_item(record: QuarantinedRecord, now: float, ttl: int) -> tuple[dict[str, Any], int]:
    """The QuarantineTable item of one invalid record (docs/architecture.md), in DynamoDB's
    wire format, never over `MAX_ITEM_BYTES`, expiring `ttl` seconds after `now`; and its size.

    Built directly, as `TypeSerializer` would build it (a test holds them equal), and sized as it
    is built: both were most of the CPU of an event of empty user records."""
    origin = record.origin
    payload = origin.payload
    try:
        payload.decode("utf-8")
        attribute = QUARANTINE_TEXT_PAYLOAD
    except UnicodeDecodeError:
        attribute = QUARANTINE_BINARY_PAYLOAD
    texts = {
        QUARANTINE_RECORD_ID: origin.event_id,
        QUARANTINE_REASON: bounded(record.reason, MAX_REASON_CHARACTERS),
        "PayloadSha256": hashlib.sha256(payload).hexdigest(),
        "PartitionKey": bounded(origin.partition_key, MAX_PARTITION_KEY_CHARACTERS),
        "SequenceNumber": origin.sequence_number,
        "ShardId": origin.shard_id,
    }
    numbers = {"PayloadBytes": len(payload), "QuarantinedAt": int(now), EXPIRES_AT: int(now) + ttl}
    if origin.sub_sequence_number is not None:
        numbers["SubSequenceNumber"] = origin.sub_sequence_number
    item: dict[str, Any] = {name: {"S": text} for name, text in texts.items()}
    size = sum(_string_bytes(name, text) for name, text in texts.items())
    for name, number in numbers.items():
        digits = str(number)
        item[name] = {"N": digits}
        size += len(name) + number_size_bytes(digits)
    size += len(QUARANTINE_PAYLOAD_TRUNCATED) + 1 + len(attribute)  # the flag, a BOOL; the payload's name
    cut = min(len(payload), max(0, MAX_ITEM_BYTES - size))
    if attribute == QUARANTINE_TEXT_PAYLOAD:
        cut = _character_boundary(payload, cut)
        item[QUARANTINE_TEXT_PAYLOAD] = {"S": payload[:cut].decode("utf-8")}
    else:
        item[QUARANTINE_BINARY_PAYLOAD] = {"B": payload[:cut]}
    item[QUARANTINE_PAYLOAD_TRUNCATED] = {"BOOL": cut < len(payload)}
    return item, size + cut


@cache
def _insert_text(table_name: str, attribute_names: tuple[str, ...]) -> str:
    """One text per table and attribute set: a quarantine item has one of four."""
    return insert_text(table_name, attribute_names)


def quarantine_calls(
    table_name: str, records: Sequence[QuarantinedRecord], now: float, ttl: int
) -> list[list[BatchStatementRequestTypeDef]]:
    """The INSERT statements quarantining `records`, grouped into `BatchExecuteStatement` calls of at
    most `MAX_STATEMENTS_PER_CALL` statements and `MAX_CALL_ITEM_BYTES` of items."""
    calls: list[list[BatchStatementRequestTypeDef]] = []
    call: list[BatchStatementRequestTypeDef] = []
    call_bytes = 0
    for record in records:
        item, size = quarantine_item(record, now, ttl)
        if call and (len(call) == MAX_STATEMENTS_PER_CALL or call_bytes + size > MAX_CALL_ITEM_BYTES):
            calls.append(call)
            call, call_bytes = [], 0
        call.append({"Statement": _insert_text(table_name, tuple(item)), "Parameters": list(item.values())})
        call_bytes += size
    if call:
        calls.append(call)
    return calls


def insert_quarantine_items(statements: Sequence[BatchStatementRequestTypeDef]) -> None:
    """Send one call's inserts; resend the throttled ones, each at most `MAX_RESENDS` times.

    ``DuplicateItem`` is the item already there: a retried batch, or a throttled answer to an
    insert that was applied. Any other error raises `StatementFailed` and fails the batch.
    """
    pending = list(statements)
    resends = 0
    while pending:
        responses = state_update_client().batch_execute_statement(Statements=pending)["Responses"]
        throttled = []
        for statement, response in zip(pending, responses, strict=True):
            error = response.get("Error")
            if error is None or error_code(error) == "DuplicateItem":
                continue
            if error_code(error) not in THROTTLING_CODES:
                raise StatementFailed(
                    f"INSERT of a quarantine item failed: {error_code(error)}: {error.get('Message', '')}"
                )
            throttled.append(statement)
        pending = throttled
        if pending:
            resends += 1
            if resends > MAX_RESENDS:
                raise QuarantineUnsettled(
                    f"{len(pending)} quarantine inserts still throttled after {MAX_RESENDS} resends"
                )
            time.sleep(resend_pause(resends))


def quarantine_now(table_name: str, records: Sequence[QuarantinedRecord]) -> list[list[BatchStatementRequestTypeDef]]:
    """`quarantine_calls` for `records` quarantined now, expiring after `QUARANTINE_TTL_DAYS`."""
    return quarantine_calls(
        table_name, records, time.time(), ttl_seconds("QUARANTINE_TTL_DAYS", DEFAULT_QUARANTINE_TTL_DAYS)
    )
