"""`send --aggregate`: messages packed into KPL aggregated records, as the KPL itself packs them.

The format (magic, protobuf `AggregatedRecord`, MD5) and its schema are the state function's
(`aggregation.kpl`); the tests check what this writes with awslabs' `aws-kinesis-agg`
deaggregator. Two rules the KPL follows are kept:

- an aggregate is at most `AGGREGATE_MAX_BYTES` (the KPL's default `AggregationMaxSize`, 50 KiB),
  far inside the 1 MiB record limit, so a shard's 1 MiB/s holds 20 aggregates a second and
  one aggregate's retry costs little;
- an aggregate only holds messages of one shard (`ShardMap`), and is sent with its first
  message's partition key, so every message lands in the shard its own key maps to, in order
  behind the trade's earlier messages.

In the shard is not yet in order for the state function: with `stateParallelizationFactor` above
1, Lambda keeps order only per Kinesis partition key, and an aggregate's key is its first
message's. A conflicting duplicate is therefore sent in an aggregate of its own under the key of
the record that carried the version it repeats (`producer.sender.Carriers`), so it is still
applied after it, as the ledger expects.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aggregation.kpl import DIGEST_BYTES, MAGIC, aggregated_record_class

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

AGGREGATE_MAX_BYTES = 50 * 1024
HOSTILE_KEY_BYTES = 300_000
"""The length a hostile aggregate gives its first partition key: Kinesis bounds only the outer
record's key (256 characters), an aggregate's key table only by the record's 1 MiB."""


def varint(number: int) -> bytes:
    """`number` as a protobuf varint. With `length_delimited`, for frames the protobuf runtime will
    not build (keys that are not UTF-8 in a `string` field, user records with no key index): what
    the benchmarks and tests send as an attacker would."""
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def length_delimited(field_number: int, content: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2): tag, length, content."""
    return varint(field_number << 3 | 2) + varint(len(content)) + content


def varint_bytes(number: int) -> int:
    """Bytes of `number` as a protobuf varint."""
    return max(1, (number.bit_length() + 6) // 7)


def field_bytes(payload: int) -> int:
    """Bytes of a length-delimited protobuf field (one-byte tag) of `payload` bytes."""
    return 1 + varint_bytes(payload) + payload


class AggregateBuilder:
    """User records for one aggregate; knows its exact size before it is serialized."""

    def __init__(self) -> None:
        self.keys: dict[str, int] = {}
        self.records: list[tuple[int, bytes]] = []
        self.size = len(MAGIC) + DIGEST_BYTES

    def added_bytes(self, partition_key: str, data: bytes) -> int:
        """How much adding this user record grows the aggregate."""
        index = self.keys.get(partition_key, len(self.keys))
        key_bytes = 0 if partition_key in self.keys else field_bytes(len(partition_key.encode()))
        inner = 1 + varint_bytes(index) + field_bytes(len(data))
        return key_bytes + field_bytes(inner)

    def add(self, partition_key: str, data: bytes) -> None:
        self.size += self.added_bytes(partition_key, data)
        index = self.keys.setdefault(partition_key, len(self.keys))
        self.records.append((index, data))

    def __len__(self) -> int:
        return len(self.records)

    def build(self, hostile: bool = False) -> bytes:
        """The aggregate's bytes. `hostile`: what no KPL writes and an attacker with put access can,
        around the same user records (their data, hence the ledger, unchanged): the first partition
        key `HOSTILE_KEY_BYTES` long, every key and a tag on each record holding invalid UTF-8."""
        aggregate = aggregated_record_class()()
        keys = [key.encode() for key in self.keys]
        if hostile:
            keys = [b"\xc3" + key + (b"K" * HOSTILE_KEY_BYTES if index == 0 else b"") for index, key in enumerate(keys)]
        aggregate.partition_key_table.extend(keys)
        for index, data in self.records:
            record = aggregate.records.add(partition_key_index=index, data=data)
            if hostile:
                record.tags.add(key=b"\xff", value=b"\xfe\x00")
        body: bytes = aggregate.SerializeToString()
        return MAGIC + body + hashlib.md5(body, usedforsecurity=False).digest()


class ShardMap:
    """Which shard a partition key maps to: MD5 of the key into the shards' hash key ranges."""

    def __init__(self, starting_hash_keys: Sequence[int]) -> None:
        self._starts = sorted(starting_hash_keys) or [0]

    @classmethod
    def of_stream(cls, client: KinesisClient, stream_name: str) -> ShardMap:
        """The stream's open shards now (a resharding during the run only spoils the grouping's
        promise of order for the trades whose shard changed, as it does for the KPL)."""
        starts: list[int] = []
        arguments: dict[str, str] = {"StreamName": stream_name}
        while True:
            page = client.list_shards(**arguments)  # type: ignore[arg-type]
            starts.extend(
                int(shard["HashKeyRange"]["StartingHashKey"])
                for shard in page["Shards"]
                if "EndingSequenceNumber" not in shard["SequenceNumberRange"]
            )
            if "NextToken" not in page:
                return cls(starts)
            arguments = {"NextToken": page["NextToken"]}

    def shard_of(self, partition_key: str) -> int:
        hash_key = int.from_bytes(hashlib.md5(partition_key.encode(), usedforsecurity=False).digest())
        return bisect.bisect_right(self._starts, hash_key) - 1
