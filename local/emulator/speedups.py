"""Faster ways for moto to give the very same answers: performance only, no behaviour change.

`local.emulator.moto_compat` corrects moto where it deviates from AWS; this module changes
nothing a client can observe, only what moto spends per request and keeps in memory while
a long load test runs. `apply()` installs every patch (idempotently) next to
`moto_compat.apply()` in `local.emulator.__main__.serve`. Each patch is one small function
whose docstring says what moto does, what is done instead and why the result is identical;
tests/local/emulator/test_speedups.py compares each against moto's own path.

Measured by the issue 22 profile (docs/design.md, "Local runtime"): moto's shape-driven
response serialiser spent about 1.8 ms per DynamoDB stream record in GetRecords, and each
record kept both item images as Python dicts (8.4 KB).
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
from collections.abc import Callable
from typing import Any

from moto.core.serialize import TimestampSerializer
from moto.dynamodb.models.table import StreamRecord, StreamShard
from moto.dynamodbstreams.models import DynamoDBStreamsBackend, ShardIterator
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

# ------------------------------------------------------ DynamoDB Streams records

_RECORD_MEMBERS = ("eventID", "eventName", "eventVersion", "eventSource", "awsRegion", "dynamodb", "userIdentity")
"""Members of the DynamoDB Streams `Record` shape, in the order of the service model (moto's output order)."""
_STREAM_RECORD_MEMBERS = (
    "ApproximateCreationDateTime",
    "Keys",
    "NewImage",
    "OldImage",
    "SequenceNumber",
    "SizeBytes",
    "StreamViewType",
)
"""Members of the `StreamRecord` shape, in service-model order."""
_IMAGES = ("Keys", "NewImage", "OldImage")
_EPOCH = datetime.datetime(1970, 1, 1)
"""moto's timestamps are naive UTC datetimes."""
_JSON_CONTENT_TYPE = "application/x-amz-json-1.0"
"""What moto's serialiser sends for DynamoDB Streams (the service model's jsonVersion 1.0)."""


def _wire_attribute_value(value: dict[str, Any]) -> dict[str, Any]:
    """One AttributeValue as moto's serialiser writes it: blobs base64 (str encoded first, as moto does)."""
    ((kind, content),) = value.items()
    if kind == "B":
        return {kind: _base64(content)}
    if kind == "BS":
        return {kind: [_base64(member) for member in content]}
    if kind == "M":
        return {kind: {name: _wire_attribute_value(member) for name, member in content.items()}}
    if kind == "L":
        return {kind: [_wire_attribute_value(member) for member in content]}
    return {kind: content}


def _base64(value: str | bytes) -> str:
    """moto's `ResponseSerializer._base64`: a str is encoded to UTF-8 and then base64-encoded."""
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return base64.b64encode(raw).strip().decode("utf-8")


def _native_attribute_value(value: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `_wire_attribute_value` for blobs moto stores as bytes."""
    ((kind, content),) = value.items()
    if kind == "B":
        return {kind: base64.b64decode(content)}
    if kind == "BS":
        return {kind: [base64.b64decode(member) for member in content]}
    if kind == "M":
        return {kind: {name: _native_attribute_value(member) for name, member in content.items()}}
    if kind == "L":
        return {kind: [_native_attribute_value(member) for member in content]}
    return {kind: content}


def wire_record(record: dict[str, Any]) -> dict[str, Any]:
    """A moto `StreamRecord.record` as GetRecords returns it: shape order, epoch timestamps, base64 blobs.

    The timestamp goes through moto's own `_timestamp_unixtimestamp` (seconds, truncated to
    milliseconds); members moto's serialiser would skip (None) are skipped.
    """
    stream: dict[str, Any] = record["dynamodb"]
    wire_stream: dict[str, Any] = {}
    for name in _STREAM_RECORD_MEMBERS:
        value = stream.get(name)
        if value is None:
            continue
        if name == "ApproximateCreationDateTime" and isinstance(value, datetime.datetime):
            value = TimestampSerializer._timestamp_unixtimestamp(value)
        elif name in _IMAGES:
            value = {attribute: _wire_attribute_value(member) for attribute, member in value.items()}
        wire_stream[name] = value
    wire: dict[str, Any] = {}
    for name in _RECORD_MEMBERS:
        value = wire_stream if name == "dynamodb" else record.get(name)
        if value is not None:
            wire[name] = value
    return wire


class CompactStreamRecord:
    """A stream record kept as the JSON text GetRecords sends (about 1 KB instead of 8.4 KB of dicts).

    `sequence_number` is kept apart so reads need not parse the text. `to_json()` (and
    `record`) rebuild moto's own form, so any moto code reading a shard's items still works.
    """

    __slots__ = ("sequence_number", "text")

    def __init__(self, record: dict[str, Any]) -> None:
        self.sequence_number = int(record["dynamodb"]["SequenceNumber"])
        self.text = json.dumps(wire_record(record))

    def to_json(self) -> dict[str, Any]:
        """moto's `StreamRecord.record`: a datetime (to the millisecond, as sent) and bytes for blobs."""
        record: dict[str, Any] = json.loads(self.text)
        stream = record["dynamodb"]
        seconds: float = stream["ApproximateCreationDateTime"]
        # moto writes an int for a whole second and a float otherwise, even for 1..999 microseconds.
        milliseconds = round(seconds * 1000)
        below_a_millisecond = 1 if isinstance(seconds, float) and milliseconds % 1000 == 0 else 0
        stream["ApproximateCreationDateTime"] = _EPOCH + datetime.timedelta(
            milliseconds=milliseconds, microseconds=below_a_millisecond
        )
        for image in _IMAGES:
            if image in stream:
                stream[image] = {name: _native_attribute_value(value) for name, value in stream[image].items()}
        return record

    @property
    def record(self) -> dict[str, Any]:
        return self.to_json()


def _compact(record: StreamRecord | CompactStreamRecord) -> CompactStreamRecord:
    return record if isinstance(record, CompactStreamRecord) else CompactStreamRecord(record.record)


def store_stream_records_as_json() -> None:
    """Each DynamoDB stream record is kept as its GetRecords JSON, made once when it is written.

    moto keeps a `StreamRecord` per change with both images as nested dicts (8.4 KB for a
    StateTable record; nothing is ever freed, 7 KB per message in a soak) and serialises
    them through its shape-driven serialiser on every GetRecords. Here `StreamShard.add`
    replaces each record it appends by a `CompactStreamRecord`, the same record as the
    JSON text moto's serialiser would produce for it. The list, its length and the
    sequence numbers are moto's own, so iterators, the transaction journal of
    `moto_compat` and every shard of a stream (whichever `StreamShard` appends) are
    unaffected.
    """
    original_add = StreamShard.add
    if getattr(original_add, "_speedup", False):
        return

    @functools.wraps(original_add)
    def add(self: StreamShard, old: Any, new: Any) -> None:
        before = len(self.items)
        original_add(self, old, new)
        items: list[Any] = self.items
        for index in range(before, len(items)):
            items[index] = _compact(items[index])

    add._speedup = True  # type: ignore[attr-defined]
    StreamShard.add = add  # type: ignore[method-assign]


def read_stream_records(backend: DynamoDBStreamsBackend, iterator_arn: str, limit: int) -> tuple[str, str]:
    """moto's `DynamoDBStreamsBackend.get_records` as (NextShardIterator, the records' JSON array).

    The same records and the same next iterator as `ShardIterator.get`: the slice of the
    iterator's own `StreamShard` from its sequence number, then AFTER the last record read
    or, when none, AT the same position. One slice of an append-only list, so a record is
    either in it whole or not at all.
    """
    iterator = backend.shard_iterators[iterator_arn]
    shard = iterator.stream_shard
    start = iterator.sequence_number - shard.starting_sequence_number
    assert start >= 0
    records = [_compact(record) for record in shard.items[start : start + limit]]
    if records:
        following = ShardIterator(backend, shard, "AFTER_SEQUENCE_NUMBER", records[-1].sequence_number)
    else:
        following = ShardIterator(backend, shard, "AT_SEQUENCE_NUMBER", iterator.sequence_number)
    backend.shard_iterators[following.arn] = following
    return following.arn, "[" + ", ".join(record.text for record in records) + "]"


def serve_stream_records_from_stored_json() -> None:
    """DynamoDB Streams GetRecords answers with the stored JSON of its records, joined.

    moto builds the reply with its generic `ResponseSerializer`, which walks the service
    model for every attribute of every image (about 1.8 ms per record, 22 % of the
    emulator's CPU in a demo, all under the DynamoDB lock). Here the handler writes
    ``{"Records": [...], "NextShardIterator": "..."}`` from the records'
    `CompactStreamRecord.text`: the same members in the same order, the same encoding
    (`json.dumps` defaults, as moto's serialiser uses), the same Content-Type.
    """
    original = DynamoDBStreamsHandler.get_records
    if getattr(original, "_speedup", False):
        return

    @functools.wraps(original)
    def get_records(self: DynamoDBStreamsHandler) -> tuple[str, dict[str, str]]:
        limit = self._get_param("Limit")
        next_iterator, records = read_stream_records(
            self.backend, self._get_param("ShardIterator"), 1000 if limit is None else limit
        )
        body = '{"Records": ' + records + ', "NextShardIterator": ' + json.dumps(next_iterator) + "}"
        return body, {"Content-Type": _JSON_CONTENT_TYPE}

    get_records._speedup = True  # type: ignore[attr-defined]
    DynamoDBStreamsHandler.get_records = get_records  # type: ignore[method-assign,assignment]


# ------------------------------------------------------------------------ apply

SPEEDUPS: tuple[Callable[[], None], ...] = (
    store_stream_records_as_json,
    serve_stream_records_from_stored_json,
)


def apply() -> None:
    """Install every speedup into the imported moto (idempotent; call before serving)."""
    for speedup in SPEEDUPS:
        speedup()
