"""Reading KPL aggregates made by awslabs' `aws-kinesis-agg`: every user record, or a reason."""

import hashlib

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from google.protobuf.internal import api_implementation
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.kpl import MAGIC, CorruptAggregate, aggregated_record_class, is_aggregate, user_records
from tests.lambdas.kpl_helpers import kpl_aggregate

user_record_lists = st.lists(
    st.tuples(st.text(min_size=1, max_size=20), st.binary(max_size=300)), min_size=1, max_size=60
)


@settings(max_examples=60)
@given(user_record_lists)
def test_every_user_record_comes_back_in_order_with_its_key_and_sub_sequence_number(
    sent: list[tuple[str, bytes]],
) -> None:
    aggregator = RecordAggregator()
    for key, data in sent:
        assert aggregator.add_user_record(key, data) is None
    record = aggregator.clear_and_get()
    assert record is not None
    _, _, aggregate = record.get_contents()
    assert is_aggregate(aggregate)
    got = user_records(aggregate)
    assert [(r.partition_key, r.data) for r in got] == sent
    assert [r.sub_sequence_number for r in got] == list(range(len(sent)))


def framed(protobuf: bytes) -> bytes:
    """`protobuf` in the aggregate's frame with a correct digest (to reach the checks past the digest)."""
    return MAGIC + protobuf + hashlib.md5(protobuf, usedforsecurity=False).digest()


def without_required_index() -> bytes:
    aggregate = aggregated_record_class()()
    aggregate.partition_key_table.append(b"pk")
    aggregate.records.add().data = b"{}"
    serialized: bytes = aggregate.SerializePartialToString()
    return serialized


def outside_the_key_table() -> bytes:
    aggregate = aggregated_record_class()()
    aggregate.partition_key_table.append(b"pk")
    user = aggregate.records.add()
    user.partition_key_index, user.data = 3, b"{}"
    serialized: bytes = aggregate.SerializeToString()
    return serialized


def flipped(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1 :]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (flipped(kpl_aggregate([b'{"a": 1}', b'{"b": 2}']), 10), "MD5 digest does not match"),
        (MAGIC + b"short", "too short for its MD5 digest"),
        (framed(b"\x1a\x05garbage"), "not a valid AggregatedRecord protobuf"),
        (framed(without_required_index()), "lacks required fields: records[0].partition_key_index"),
        (framed(outside_the_key_table()), "names partition key 3 of a table of 1"),
        (framed(b""), "holds no user records"),
    ],
)
def test_a_corrupt_aggregate_is_refused_whole_with_its_reason(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptAggregate) as refused:
        user_records(data)
    assert reason in refused.value.reason


def test_a_plain_message_is_not_an_aggregate() -> None:
    assert not is_aggregate(b'{"TradeID": "t"}')
    assert not is_aggregate(MAGIC[:3])


def test_the_tests_read_aggregates_with_the_pure_python_protobuf_the_asset_carries() -> None:
    assert api_implementation.Type() == "python"


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_any_protobuf_under_a_right_digest_is_read_whole_or_refused_whole(protobuf: bytes) -> None:
    """Nothing but `CorruptAggregate` leaves `user_records`: anything else would fail the batch on
    every retry and stall the shard."""
    try:
        records = user_records(framed(protobuf))
    except CorruptAggregate as refused:
        assert refused.reason
    else:
        assert records
        assert all(isinstance(record.partition_key, str) for record in records)


def test_invalid_utf8_in_the_key_table_is_kept_escaped() -> None:
    aggregate = aggregated_record_class()()
    aggregate.partition_key_table.append(b"\xffkey")
    aggregate.records.add(partition_key_index=0, data=b"{}").tags.add(key=b"\xc3", value=b"\xfe")
    (record,) = user_records(framed(aggregate.SerializeToString()))
    assert (record.partition_key, record.data) == ("\\xffkey", b"{}")
