"""No door stalls a shard: whatever a sender with put access to the stream writes, the state
function ends its batch, and every user record is written or quarantined in an item DynamoDB
accepts, with its reason and origin (docs/design.md, "The state function's door").

The aggregates are built here from the published schema's wire format, not by a KPL: a KPL never
writes invalid UTF-8 or a 500,000-character partition key, an attacker does. The handler runs with
the pure-Python protobuf the function asset carries (tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregation.item_size import MAX_ITEM_BYTES, item_size_bytes
from aggregation.kpl import DIGEST_BYTES, MAGIC
from function_support import aws
from local.runner.inprocess import Pipeline, trade_message
from producer.kpl import length_delimited, varint
from state_function.quarantine import MAX_PARTITION_KEY_CHARACTERS

TRADE_NUMBERS = itertools.count()


def user_record(key_index: int, data: bytes, tags: list[tuple[bytes, bytes]]) -> bytes:
    """A `Record` message: partition_key_index (1), data (3), tags (4: key 1, value 2)."""
    body = varint(1 << 3) + varint(key_index) + length_delimited(3, data)
    for key, value in tags:
        body += length_delimited(4, length_delimited(1, key) + length_delimited(2, value))
    return body


def aggregate(keys: list[bytes], records: list[bytes], *, digest_ok: bool = True) -> bytes:
    """An `AggregatedRecord` framed as the KPL frames it: magic, protobuf, MD5 (or a wrong one)."""
    protobuf = b"".join(length_delimited(1, key) for key in keys)
    protobuf += b"".join(length_delimited(3, record) for record in records)
    digest = hashlib.md5(protobuf, usedforsecurity=False).digest()
    if not digest_ok:
        digest = bytes(byte ^ 0xFF for byte in digest)
    return MAGIC + protobuf + digest


def hostile_text(length: int, invalid_utf8: bool) -> bytes:
    text = ("\u202e\x00'\"" * (length // 4 + 1))[:length].encode()
    return text + b"\xff\xfe" if invalid_utf8 else text


keys = st.builds(hostile_text, st.sampled_from([0, 1, 256, 257, 5_000, 500_000]), st.booleans())
tag_lists = st.lists(st.tuples(keys, keys), max_size=2)


@dataclass
class Batch:
    """Kinesis records to send, and what must come of them."""

    payloads: list[bytes] = field(default_factory=list)
    valid: dict[str, bytes] = field(default_factory=dict)  # TradeID -> the one message sent for it
    quarantined: int = 0  # records (plain, user or whole aggregates) that must be quarantined


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    batch = Batch()
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["plain", "aggregate", "corrupt", "wrong digest"]))
        if kind == "plain":
            trade = f"plain-{next(TRADE_NUMBERS)}"
            batch.valid[trade] = trade_message(trade, 1, "1.5")
            batch.payloads.append(batch.valid[trade])
        elif kind == "corrupt":  # random protobuf under a right digest: read whole or refused whole
            batch.payloads.append(aggregate([], [draw(st.binary(min_size=1, max_size=40))]))
            batch.quarantined += 1
        else:
            key_table = draw(st.lists(keys, min_size=1, max_size=3))
            records, valid, bad = [], {}, 0
            for _ in range(draw(st.integers(1, 5))):
                shape = draw(st.sampled_from(["valid", "empty", "nested", "garbage"]))
                if shape == "valid":
                    trade = f"user-{next(TRADE_NUMBERS)}"
                    data = valid[trade] = trade_message(trade, 1, "2.25")
                else:
                    nested = aggregate([b"pk"], [user_record(0, b"{}", [])])
                    data = {"empty": b"", "nested": nested, "garbage": b"\xff{not json"}[shape]
                    bad += 1
                records.append(user_record(draw(st.integers(0, len(key_table) - 1)), data, draw(tag_lists)))
            digest_ok = kind == "aggregate"
            batch.payloads.append(aggregate(key_table, records, digest_ok=digest_ok))
            if digest_ok:
                batch.valid.update(valid)
                batch.quarantined += bad
            else:
                batch.quarantined += 1  # the aggregate whole, its valid user records with it
    return batch


def stored(pipeline: Pipeline, table: str) -> list[dict[str, Any]]:
    paginator = pipeline.dynamodb.get_paginator("scan")
    return [item for page in paginator.paginate(TableName=pipeline.names[table]) for item in page["Items"]]


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=batches())
def test_every_hostile_batch_ends_and_every_record_is_written_or_quarantined_within_the_item_limit(
    pipeline: Pipeline, batch: Batch
) -> None:
    before = {item["RecordId"]["S"] for item in stored(pipeline, "quarantine")}
    summary = pipeline.run_state(batch.payloads)

    written = {item["TradeID"]["S"] for item in stored(pipeline, "state")}
    assert set(batch.valid) - written == set(), "a valid message beside hostile records was not written"
    new = [item for item in stored(pipeline, "quarantine") if item["RecordId"]["S"] not in before]
    assert len(new) == summary["quarantined"] + summary["conflicting_duplicates"]
    for item in new:
        assert item_size_bytes(item) <= MAX_ITEM_BYTES
        assert item["Reason"]["S"]
        assert len(item["PartitionKey"]["S"]) <= MAX_PARTITION_KEY_CHARACTERS + 40
        payload = item.get("Payload", {}).get("S", "").encode() or item.get("PayloadBinary", {}).get("B", b"")
        assert int(item["PayloadBytes"]["N"]) >= len(payload)
    assert (
        summary["received"]
        == summary["written"]
        + summary["duplicate_or_stale"]
        + summary["quarantined"]
        + (summary["conflicting_duplicates"])
    )
    assert summary["written"] == len(batch.valid)
    assert summary["quarantined"] >= batch.quarantined


def test_invalid_utf8_in_the_key_table_and_tags_does_not_stop_the_user_records(pipeline: Pipeline) -> None:
    """The pure-Python protobuf raised UnicodeDecodeError for these `string` fields, outside the
    per-record guard: the whole batch failed on every retry and the shard stalled."""
    good = trade_message("utf8-a", 1, "10")
    record = aggregate([b"\xff\xfe key"], [user_record(0, good, [(b"\xc3", b"\xff")]), user_record(0, b"", [])])
    summary = pipeline.run_state([record, trade_message("utf8-b", 1, "5")])
    assert (summary["written"], summary["quarantined"]) == (2, 1)
    (item,) = stored(pipeline, "quarantine")
    assert item["PartitionKey"]["S"] == "\\xff\\xfe key"
    assert item["SubSequenceNumber"]["N"] == "1"


def test_a_quarantined_user_record_under_a_huge_partition_key_fits_its_item(pipeline: Pipeline) -> None:
    """Kinesis bounds only the outer record's key: the user record's came from the aggregate's table."""
    huge = b"k" * 500_000
    record = aggregate([huge], [user_record(0, b"not json", []), user_record(0, trade_message("huge-a", 1, "1"), [])])
    summary = pipeline.run_state([record])
    assert (summary["written"], summary["quarantined"]) == (1, 1)
    (item,) = stored(pipeline, "quarantine")
    assert item["PartitionKey"]["S"].startswith("k" * MAX_PARTITION_KEY_CHARACTERS + "… (cut: 500000 characters)")
    assert item_size_bytes(item) <= MAX_ITEM_BYTES


def test_thousands_of_quarantined_user_records_go_out_in_batches_of_25(pipeline: Pipeline) -> None:
    """Each is its own item, written 25 to a call (one put at a time outlasted the timeout)."""
    calls: list[int] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        calls.append(len(params["Statements"]))

    events = aws.state_update_client().meta.events
    events.register("provide-client-params.dynamodb.BatchExecuteStatement", count)
    try:
        summary = pipeline.run_state([aggregate([b"pk"], [user_record(0, b"", [])] * 2_000)])
    finally:
        events.unregister("provide-client-params.dynamodb.BatchExecuteStatement", count)
    assert summary["quarantined"] == 2_000
    assert len(stored(pipeline, "quarantine")) == 2_000
    assert sorted(calls) == [25] * 80
    assert DIGEST_BYTES == 16
