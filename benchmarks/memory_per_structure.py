"""`python -m benchmarks.memory_per_structure`: bytes each long-lived structure of a soak keeps.

The soak (`make soak`, docs/benchmarks.md "Soak") says how much the processes grow per message;
this says where, one structure at a time, so a saving is measured before and after on its own:
Python's `tracemalloc` counts what N instances allocate and keep (the difference of two
snapshots, after a garbage collection), divided by N. Run by hand: its figures are kept in
docs/benchmarks.md ("Memory per structure").

- the state function's version cache: one entry as `StoredVersion` in an `OrderedDict` (how it
  was kept until the entries were packed) and as `VersionCache` keeps it, with a Kinesis event
  ID as long as AWS's (56-digit sequence numbers) and as the emulator's;
- moto's items, as the emulator stores them: a StateTable item and a DeltaTable item, with
  moto's own code and then with `moto_compat` and `speedups` applied (in that order, in this
  process: moto's own path is measured first);
- a Kinesis record written by PutRecords in calls of 100 (moto also stores two CloudWatch data
  points per call).
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import json
import random
import sys
import tracemalloc
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table
from moto.kinesis.models import KinesisBackend

from aggregation.versions import StoredVersion, VersionCache
from local.emulator import moto_compat, speedups

ACCOUNT, REGION = "123456789012", "us-east-1"
AWS_SEQUENCE_NUMBER = 49590338271490256608559692538361571095921575989136588898
"""A Kinesis sequence number as long as AWS's (56 digits); the emulator's count from 1."""


def bytes_each(count: int, make: Callable[[int], Any]) -> float:
    """Bytes allocated and still held after `make(0..count-1)`, per call (what `make` keeps alive)."""
    kept: list[Any] = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for number in range(count):
            kept.append(make(number))
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return held / count - sys.getsizeof(kept) / count  # the list holding the results is the harness's


def stored_version(number: int, sequence_base: int) -> tuple[str, StoredVersion]:
    digest = hashlib.sha256(str(number).encode()).hexdigest()
    return f"TRADE-{number:08d}", StoredVersion(
        number % 7 + 1, digest, f"shardId-000000000000:{sequence_base + number}"
    )


def version_cache_rows(count: int) -> list[tuple[str, float]]:
    rows = []
    for label, base in (("AWS", AWS_SEQUENCE_NUMBER), ("emulator", 1)):
        unpacked: OrderedDict[str, StoredVersion] = OrderedDict()
        packed = VersionCache(count)

        def keep_unpacked(number: int, base: int = base, entries: OrderedDict[str, StoredVersion] = unpacked) -> None:
            trade_id, stored = stored_version(number, base)
            entries[trade_id] = stored

        def keep_packed(number: int, base: int = base, cache: VersionCache = packed) -> None:
            cache.remember(*stored_version(number, base))

        entry = f"version cache entry, {label} event ID"
        rows.append((f"{entry}: `StoredVersion` in an `OrderedDict`", bytes_each(count, keep_unpacked)))
        rows.append((f"{entry}: `VersionCache` (packed)", bytes_each(count, keep_packed)))
    return rows


def table(name: str, hash_key: str, range_key: str | None = None) -> Table:
    """A table without a stream in an in-process moto backend (the emulator's structures, no HTTP)."""
    keys = [(hash_key, "HASH")] + ([(range_key, "RANGE")] if range_key else [])
    return DynamoDBBackend(REGION, ACCOUNT).create_table(
        name,
        schema=[{"AttributeName": key, "KeyType": kind} for key, kind in keys],
        throughput=None,
        attr=[{"AttributeName": key, "AttributeType": "S"} for key, _ in keys],
        global_indexes=None,
        indexes=None,
        streams=None,
        billing_mode="PAY_PER_REQUEST",
        sse_specification=None,
        tags=[],
        deletion_protection_enabled=False,
        warm_throughput=None,
    )


def state_item(number: int) -> dict[str, Any]:
    """A StateTable item as the state function writes it (`aggregation.state_statements`)."""
    hierarchy = [f"desk-{number % 5}", f"book-{number % 40}", ("EMEA", "APAC", "AMER")[number % 3]]
    return {
        "TradeID": {"S": f"TRADE-{number:08d}"},
        "Version": {"N": "3"},
        "Value": {"N": f"{number * 7 % 100_000}.{number % 100:02d}"},
        "Hierarchy": {"M": dict(zip(("Desk", "Book", "Region"), ({"S": level} for level in hierarchy), strict=True))},
        "NodePath": {"L": [{"S": level} for level in hierarchy]},
        "ContentDigest": {"S": hashlib.sha256(str(number).encode()).hexdigest()},
        "WrittenByEventId": {"S": f"shardId-000000000000:{number + 1}"},
        "ProducerTimestamp": {"N": f"1764100000.{number:06d}"},
    }


def delta_item(number: int, chooser: random.Random) -> dict[str, Any]:
    """A DeltaTable item of a 100-record map batch touching 60 nodes (`encode_delta_item`)."""
    nodes = [f"desk-{d}#book-{b}#{r}" for d in range(5) for b in range(20) for r in ("EMEA", "APAC")]
    return {
        "StreamShard": {"S": "shardId-00000001764100000000-abcdef12"},
        "FirstSequenceNumber": {"S": f"{number * 100:040d}"},
        "LastSequenceNumber": {"S": f"{number * 100 + 99:040d}"},
        "BatchHash": {"S": f"{chooser.getrandbits(256):064x}"},
        "Deltas": {
            "M": {
                node: {"M": {"Value": {"N": f"{chooser.randint(-(10**6), 10**6) / 100}"}, "TradeCount": {"N": "1"}}}
                for node in sorted(chooser.sample(nodes, 60))
            }
        },
        "RecordCount": {"N": "100"},
        "ProducerTimestamps": {"L": [{"N": f"1764100000.{chooser.randint(0, 999_999):06d}"} for _ in range(100)]},
        "CreatedAt": {"N": "1764100000"},
        "ExpiresAt": {"N": "1764700000"},
        "WrittenByRequestId": {"S": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"},
    }


def moto_rows(count: int, which: str, *, kinesis_too: bool = True) -> list[tuple[str, float]]:
    """moto's items and Kinesis records (`which`: whose code stores them, for the labels)."""
    states, deltas = table("state", "TradeID"), table("delta", "StreamShard", "FirstSequenceNumber")
    chooser = random.Random(7)
    kinesis = KinesisBackend(REGION, ACCOUNT)
    kinesis.create_stream("soak", shard_count=1, stream_mode={"StreamMode": "PROVISIONED"}, retention_period_hours=24)
    message = json.dumps({"TradeID": "TRADE-00001234", "Version": 3, "Value": "12345.67", "Desk": "desk-3"})
    data = base64.b64encode(message.encode()).decode()

    def put_state(number: int) -> None:
        states.put_item(json.loads(json.dumps(state_item(number))))  # parsed, as a request's body is

    def put_delta(number: int) -> None:
        deltas.put_item(json.loads(json.dumps(delta_item(number, chooser))))

    def put_records(number: int) -> None:
        records = [{"Data": data, "PartitionKey": f"TRADE-{number * 100 + index:08d}"} for index in range(100)]
        kinesis.put_records("", "soak", json.loads(json.dumps(records)))

    state_json, delta_json = (len(json.dumps(item)) for item in (state_item(0), delta_item(0, random.Random(7))))
    rows = [
        (f"StateTable item ({state_json:,} B of JSON) in moto, {which}", bytes_each(count, put_state)),
        (
            f"DeltaTable item ({delta_json:,} B of JSON: 60 nodes, 100 records) in moto, {which}",
            bytes_each(count // 20, put_delta),
        ),
    ]
    if kinesis_too:
        rows.append(
            (f"Kinesis record in moto (PutRecords of 100), {which}", bytes_each(count // 100, put_records) / 100)
        )
    return rows


def measure(count: int) -> list[tuple[str, float]]:
    """Every row: the version cache; moto's own path; with the compat fixes and every speedup but
    `share_equal_string_values`; then with it too."""
    rows = version_cache_rows(count)
    rows += moto_rows(count, "moto's own")
    moto_compat.apply()
    for speedup in speedups.SPEEDUPS:
        if speedup is not speedups.share_equal_string_values:
            speedup()
    rows += moto_rows(count, "compat fixes and speedups but `share_equal_string_values`")
    speedups.share_equal_string_values()
    rows += moto_rows(count, "compat fixes and every speedup", kinesis_too=False)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.memory_per_structure", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--count", type=int, default=20_000, help="instances per structure (default 20000)")
    arguments = parser.parse_args(argv)
    if arguments.count < 100:
        parser.error("--count must be at least 100")
    print("| structure | bytes each |\n| --- | ---: |")
    for label, size in measure(arguments.count):
        print(f"| {label} | {size:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
