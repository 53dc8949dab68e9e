"""Stream positions: which records of a batch earlier delta items cover, whatever the boundaries."""

import pytest

from aggregation.stream_positions import (
    StreamRun,
    sequence_key,
    sequence_number,
    stream_shard_key,
    uncovered_runs,
)

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/State/stream/2026-11-23T10:04:45.637"


def run(first: int, last: int, shard: str = "s") -> StreamRun:
    return StreamRun(shard, first, last)


def test_a_fresh_batch_is_one_run() -> None:
    assert uncovered_runs([10, 20, 30], []) == [[10, 20, 30]]


def test_grown_shrunk_and_shifted_batches_keep_only_what_no_item_covers() -> None:
    covered = [run(10, 30)]
    assert uncovered_runs([10, 20, 30, 40, 50], covered) == [[40, 50]]  # grown
    assert uncovered_runs([10, 20], covered) == []  # shrunk
    assert uncovered_runs([20, 30, 40], covered) == [[40]]  # starts inside an item
    assert uncovered_runs([5, 10, 20], covered) == [[5]]  # replayed from earlier


def test_gaps_between_covered_records_become_separate_runs() -> None:
    covered = [run(20, 30), run(60, 60)]
    assert uncovered_runs([10, 20, 30, 40, 50, 60, 70], covered) == [[10], [40, 50], [70]]


def test_a_batch_must_be_in_stream_order() -> None:
    with pytest.raises(ValueError, match="increase"):
        uncovered_runs([20, 10], [])
    with pytest.raises(ValueError, match="increase"):
        uncovered_runs([10, 10], [])


def test_identity_depends_on_shard_and_first_record_only() -> None:
    assert run(1, 5).batch_hash == run(1, 9).batch_hash
    assert run(1, 5).batch_hash != run(2, 5).batch_hash
    assert run(1, 5, "a").batch_hash != run(1, 5, "b").batch_hash
    assert len(run(1, 5).batch_hash) == 64
    with pytest.raises(ValueError, match="before it starts"):
        run(5, 1)


def test_sequence_keys_sort_like_the_numbers() -> None:
    numbers = [5, 40, 300, 10**39 + 7, 21_000_000_000_000_000_000]
    assert sorted(numbers) == sorted(numbers, key=sequence_key)
    assert all(len(sequence_key(n)) == 40 and sequence_number(sequence_key(n)) == n for n in numbers)
    for bad in ("", "12a", "-1", "1" * 41):
        with pytest.raises(ValueError, match="sequence number"):
            sequence_number(bad)


def test_shard_key_names_stream_and_shard() -> None:
    assert stream_shard_key(ARN, "shardId-0001") == "2026-11-23T10:04:45.637/shardId-0001"
    with pytest.raises(ValueError, match="tumbling window"):
        stream_shard_key(ARN, "")
    with pytest.raises(ValueError, match="stream ARN"):
        stream_shard_key("arn:aws:kinesis:us-east-1:1:stream", "shardId-0001")
