"""KPL aggregates as real producers make them: packed by awslabs' `aws-kinesis-agg`, never by our code."""

from __future__ import annotations

from collections.abc import Sequence

from aws_kinesis_agg.aggregator import RecordAggregator


def kpl_aggregate(messages: Sequence[bytes], partition_key: str = "pk") -> bytes:
    """One Kinesis record's data holding `messages`, in order, as `aws-kinesis-agg` aggregates them."""
    aggregator = RecordAggregator()
    for message in messages:
        assert aggregator.add_user_record(partition_key, message) is None, "the messages overflow one aggregate"
    record = aggregator.clear_and_get()
    assert record is not None, "an aggregate needs at least one message"
    _, _, data = record.get_contents()
    assert isinstance(data, bytes)
    return data
