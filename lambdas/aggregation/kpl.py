"""Records in the KPL aggregated format, split into the user records they carry.

The Kinesis Producer Library, Flink's Kinesis sink, Fluent Bit (`aggregation true`) and
awslabs' `aws-kinesis-agg` pack many user records into one Kinesis record: the 4-byte magic
``F3 89 9A C2``, a protobuf ``AggregatedRecord`` (the format's published schema, `SCHEMA`),
then the MD5 digest of the protobuf bytes (awslabs/amazon-kinesis-producer,
``aggregation-format.md``).

Why our own reading of the frame rather than `aws_kinesis_agg.deaggregator`: that module
hands back a record whose digest or protobuf is bad as if it were a plain record (it would
then be quarantined as "not UTF-8", its reason lost), and when a user record cannot be built
(a partition key index outside the table) it prints to stderr and drops the rest of the
aggregate without a word. Here either is `CorruptAggregate` with its reason, so the state
function quarantines the aggregate whole and nothing is lost silently. The protobuf itself is
parsed by the `protobuf` runtime from the published schema; nothing is hand-decoded.

The schema's `string` fields (the key tables, a tag's key and value) are read as `bytes`, the
same wire type: what a `string` field holding invalid UTF-8 does depends on the implementation
(the pure-Python one the function asset carries raises `UnicodeDecodeError`, the compiled one
accepts it), and a record must be read the same way wherever it is read. Tags are not used; a
partition key is only where a user record came from, so one that is not UTF-8 is kept with its
bytes escaped (``\\xff``) rather than refusing the user record it names. Whatever else reading the
protobuf raises is `CorruptAggregate` too: an exception that escaped here would fail the whole
batch on every retry and stall the shard.

A record that starts with the magic is never a valid message on its own (those bytes are not
UTF-8), so the magic alone decides that a record is an aggregate.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory, text_format

MAGIC: Final[bytes] = b"\xf3\x89\x9a\xc2"
DIGEST_BYTES: Final[int] = 16  # MD5

SCHEMA: Final[str] = """
name: "kpl_aggregation.proto"
package: "aws.kinesis.protobuf"
message_type {
  name: "Tag"
  field { name: "key" number: 1 label: LABEL_REQUIRED type: TYPE_BYTES }
  field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_BYTES }
}
message_type {
  name: "Record"
  field { name: "partition_key_index" number: 1 label: LABEL_REQUIRED type: TYPE_UINT64 }
  field { name: "explicit_hash_key_index" number: 2 label: LABEL_OPTIONAL type: TYPE_UINT64 }
  field { name: "data" number: 3 label: LABEL_REQUIRED type: TYPE_BYTES }
  field { name: "tags" number: 4 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".aws.kinesis.protobuf.Tag" }
}
message_type {
  name: "AggregatedRecord"
  field { name: "partition_key_table" number: 1 label: LABEL_REPEATED type: TYPE_BYTES }
  field { name: "explicit_hash_key_table" number: 2 label: LABEL_REPEATED type: TYPE_BYTES }
  field { name: "records" number: 3 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".aws.kinesis.protobuf.Record" }
}
"""
"""The `Tag`, `Record` and `AggregatedRecord` messages of the KPL's ``messages.proto`` (proto2),
as a `FileDescriptorProto` in protobuf's text format: no `protoc` and no generated module. Its
`string` fields are declared `bytes` (the module docstring says why)."""


class CorruptAggregate(ValueError):
    """A record with the magic whose digest, protobuf or tables are not a valid aggregate."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class UserRecord:
    """One user record of an aggregate: its place in it (the sub-sequence number), key and bytes."""

    sub_sequence_number: int
    partition_key: str
    data: bytes


@cache
def aggregated_record_class() -> Any:
    """The `AggregatedRecord` message class, built once from `SCHEMA` in a private pool."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(text_format.Parse(SCHEMA, descriptor_pb2.FileDescriptorProto()))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("aws.kinesis.protobuf.AggregatedRecord"))


def is_aggregate(data: bytes) -> bool:
    """Whether a Kinesis record's data is in the aggregated format (starts with the magic)."""
    return data.startswith(MAGIC)


def user_records(data: bytes) -> list[UserRecord]:
    """The user records of an aggregate, in order; `CorruptAggregate` if any part of it is wrong.

    All or nothing: an aggregate is either read whole or refused whole, never cut short.
    """
    body = data[len(MAGIC) :]
    if len(body) < DIGEST_BYTES:
        raise CorruptAggregate(f"aggregated record of {len(data)} bytes is too short for its MD5 digest")
    protobuf, digest = body[:-DIGEST_BYTES], body[-DIGEST_BYTES:]
    if hashlib.md5(protobuf, usedforsecurity=False).digest() != digest:
        raise CorruptAggregate("aggregated record's MD5 digest does not match its contents")
    aggregate = aggregated_record_class()()
    try:
        aggregate.ParseFromString(protobuf)
    except message.DecodeError as error:
        raise CorruptAggregate(f"aggregated record is not a valid AggregatedRecord protobuf: {error}") from error
    except Exception as error:  # any implementation's surprise is this record's fault (module docstring)
        raise CorruptAggregate(
            f"aggregated record could not be read as an AggregatedRecord protobuf: {type(error).__name__}: {error}"
        ) from error
    missing = aggregate.FindInitializationErrors()
    if missing:
        raise CorruptAggregate(f"aggregated record lacks required fields: {', '.join(missing[:5])}")
    keys = [key.decode("utf-8", "backslashreplace") for key in aggregate.partition_key_table]
    found = []
    for position, record in enumerate(aggregate.records):
        if record.partition_key_index >= len(keys):
            raise CorruptAggregate(
                f"user record {position} names partition key {record.partition_key_index} of a table of {len(keys)}"
            )
        found.append(UserRecord(position, keys[record.partition_key_index], bytes(record.data)))
    if not found:
        raise CorruptAggregate("aggregated record holds no user records")
    return found
