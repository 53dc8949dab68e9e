"""The quarantine stores every invalid record, of any size and encoding, in an item DynamoDB accepts.

An item over the limit would be refused on every retry and stall the shard, so these run the
state handler against the emulator (whose item-size check follows AWS's rules) with the worst
payloads: binary and non-ASCII text just under and over the cut, multi-byte characters
straddling it, and Kinesis' largest record.
"""

import hashlib
from decimal import Decimal
from typing import Any

import botocore.session
import pytest
from boto3.dynamodb.types import Binary, TypeSerializer
from botocore.validate import validate_parameters
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.item_size import MAX_ITEM_BYTES, item_size_bytes
from aggregation.state_statements import MAX_STATEMENTS_PER_CALL
from local.runner.inprocess import Pipeline
from state_function.quarantine import (
    QuarantinedRecord,
    RecordOrigin,
    insert_quarantine_items,
    quarantine_calls,
    quarantine_item,
    quarantine_now,
)

KINESIS_MAX_RECORD_BYTES = 1024 * 1024 - len("pk")
"""1 MiB, data and partition key together."""
LONGEST_UTF8_CHARACTER = 4


def stored_items(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    """The quarantine table as DynamoDB holds it (wire format: sizes count as DynamoDB counts)."""
    pages = pipeline.dynamodb.get_paginator("scan").paginate(TableName=pipeline.names["quarantine"])
    return {item["RecordId"]["S"]: item for page in pages for item in page["Items"]}


def quarantine_one(pipeline: Pipeline, payload: bytes) -> dict[str, Any]:
    before = set(stored_items(pipeline))
    summary = pipeline.run_state([payload])
    assert summary["quarantined"] == 1
    (new,) = [item for key, item in stored_items(pipeline).items() if key not in before]
    return new


def stored_payload(item: dict[str, Any]) -> bytes:
    """The stored bytes, whichever attribute holds them (never both)."""
    assert ("Payload" in item) != ("PayloadBinary" in item), item.keys()
    if "Payload" in item:
        text: str = item["Payload"]["S"]
        return text.encode("utf-8")
    binary: bytes = item["PayloadBinary"]["B"]
    return binary


def check_stored(item: dict[str, Any], payload: bytes, *, as_text: bool) -> bool:
    """Everything a stored record must satisfy; returns whether it was truncated."""
    size = item_size_bytes(item)
    assert size <= MAX_ITEM_BYTES
    assert ("Payload" in item) is as_text
    stored = stored_payload(item)
    truncated: bool = item["PayloadTruncated"]["BOOL"]
    assert payload.startswith(stored)
    assert truncated is (len(stored) < len(payload))
    if truncated:  # cut only as far as the item needs, at most a partial character short of the limit
        assert size > MAX_ITEM_BYTES - LONGEST_UTF8_CHARACTER
    assert int(item["PayloadBytes"]["N"]) == len(payload)
    assert item["PayloadSha256"]["S"] == hashlib.sha256(payload).hexdigest()
    return truncated


def binary_payload(size: int) -> bytes:
    """Not UTF-8 from its first byte, every byte value present."""
    return (b"\xff" + bytes(range(256)) * (size // 256 + 1))[:size]


def text_payload(size: int, character: str, ascii_prefix: int = 0) -> bytes:
    """Valid UTF-8 of exactly `size` bytes (padded with ASCII), not JSON: `x` then `character`s."""
    body = ("x" * (1 + ascii_prefix)).encode() + character.encode() * size
    body = body[:size]
    while True:  # drop a partial last character, then pad back to size with ASCII
        try:
            body.decode("utf-8")
            break
        except UnicodeDecodeError:
            body = body[:-1]
    return body + b"y" * (size - len(body))


def the_cut(pipeline: Pipeline, make: Any) -> int:
    """How many payload bytes fit the item for this kind of record: stored from the largest."""
    return len(stored_payload(quarantine_one(pipeline, make(KINESIS_MAX_RECORD_BYTES))))


def test_binary_records_are_stored_raw_up_to_the_item_limit_from_just_under_the_cut_to_1_mib(
    pipeline: Pipeline,
) -> None:
    cut = the_cut(pipeline, binary_payload)
    assert cut > 390_000  # raw bytes, not a third of the room lost to base64
    outcomes = []
    for size in (cut - 2, cut - 1, cut, cut + 1, cut + 2, KINESIS_MAX_RECORD_BYTES):
        payload = binary_payload(size)
        outcomes.append(check_stored(quarantine_one(pipeline, payload), payload, as_text=False))
    assert outcomes[0] is False and outcomes[-1] is True  # both sides of the cut were exercised


@pytest.mark.parametrize("character", ["é", "€", "😀"])
def test_non_ascii_text_is_cut_on_a_character_boundary_wherever_the_cut_falls(
    pipeline: Pipeline, character: str
) -> None:
    cut = the_cut(pipeline, lambda size: text_payload(size, character))
    outcomes = []
    for ascii_prefix in range(LONGEST_UTF8_CHARACTER):  # every offset of the cut inside a character
        for size in (cut - 1, cut + 1, KINESIS_MAX_RECORD_BYTES):
            payload = text_payload(size, character, ascii_prefix)
            item = quarantine_one(pipeline, payload)
            outcomes.append(check_stored(item, payload, as_text=True))
            assert item["Reason"]["S"].startswith("record is not JSON")
    assert False in outcomes and True in outcomes


def test_text_with_an_invalid_byte_beyond_the_cut_is_stored_as_binary(pipeline: Pipeline) -> None:
    payload = text_payload(KINESIS_MAX_RECORD_BYTES - 1, "€") + b"\xc3"
    item = quarantine_one(pipeline, payload)
    assert check_stored(item, payload, as_text=False)
    assert item["Reason"]["S"] == f"record is not UTF-8 (byte {len(payload) - 1})"


def test_small_records_are_stored_whole(pipeline: Pipeline) -> None:
    text = "{ «not JSON» 😀".encode()
    binary = b"\xfe\x00\x01 binary"
    assert not check_stored(quarantine_one(pipeline, text), text, as_text=True)
    assert not check_stored(quarantine_one(pipeline, binary), binary, as_text=False)


def test_items_expire_quarantine_ttl_days_after_they_were_written(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUARANTINE_TTL_DAYS", "9")
    item = quarantine_one(pipeline, b"not JSON")
    assert int(item["ExpiresAt"]["N"]) == int(item["QuarantinedAt"]["N"]) + 9 * 86_400


def test_a_retried_record_never_replaces_the_evidence_already_stored(pipeline: Pipeline) -> None:
    """The insert fails where the item exists: a retry (or anything the role could send) finds the first item kept."""
    origin = RecordOrigin("shardId-000000000000:retried", "shardId-000000000000", "1", "pk", b"first bytes")
    for call in quarantine_now(pipeline.names["quarantine"], [QuarantinedRecord(origin, "first reason")]):
        insert_quarantine_items(call)
    forged = RecordOrigin(origin.event_id, origin.shard_id, "2", "pk", b"other bytes")
    for call in quarantine_now(pipeline.names["quarantine"], [QuarantinedRecord(forged, "other reason")]):
        insert_quarantine_items(call)
    item = stored_items(pipeline)[origin.event_id]
    assert (item["Reason"]["S"], item["Payload"]["S"], item["SequenceNumber"]["S"]) == (
        "first reason",
        "first bytes",
        "1",
    )


hostile_text = st.one_of(
    st.text(max_size=50),
    st.builds(lambda c, n: c * n, st.sampled_from(["k", "\u202e", "😀", "\\xff"]), st.integers(0, 600_000)),
)
hostile_origins = st.builds(
    RecordOrigin,
    event_id=st.just("shardId-000000000000:49590338271490256608559692538361571095921575989136588898"),
    shard_id=st.just("shardId-000000000000"),
    sequence_number=st.just("49590338271490256608559692538361571095921575989136588898"),
    partition_key=hostile_text,
    payload=st.one_of(
        st.binary(max_size=100), st.builds(lambda b, n: b * n, st.sampled_from([b"x", b"\xff"]), st.integers(0, 2**20))
    ),
    sub_sequence_number=st.one_of(st.none(), st.integers(0, 200_000)),
)


@settings(max_examples=80)
@given(records=st.lists(st.builds(QuarantinedRecord, hostile_origins, hostile_text), min_size=1, max_size=30))
def test_every_quarantine_item_fits_is_what_boto3_would_send_and_passes_botocores_checks(
    records: list[QuarantinedRecord],
) -> None:
    """The inserts go out on the unvalidated client (`state_update_client`): here is where they are
    validated, over hostile origins (huge keys and reasons, 1 MiB payloads, text and binary)."""
    serializer = TypeSerializer()
    for record in records:
        item, size = quarantine_item(record, 1_700_000_000.0, 86_400)
        assert size == item_size_bytes(item) <= MAX_ITEM_BYTES
        assert item == {name: serializer.serialize(serializer_value(value)) for name, value in item.items()}
    calls = quarantine_calls("Quarantine-1", records, 1_700_000_000.0, 86_400)
    assert sum(len(call) for call in calls) == len(records)
    shape = botocore.session.get_session().get_service_model("dynamodb").operation_model("BatchExecuteStatement")
    assert shape.input_shape is not None
    for call in calls:
        assert 1 <= len(call) <= MAX_STATEMENTS_PER_CALL
        validate_parameters({"Statements": call}, shape.input_shape)


def serializer_value(value: dict[str, Any]) -> Any:
    """The Python value `TypeSerializer` turns into `value` (its one type and content)."""
    ((kind, content),) = value.items()
    return Decimal(content) if kind == "N" else Binary(content) if kind == "B" else content
