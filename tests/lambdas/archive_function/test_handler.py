"""Archive function against the emulator's S3: one batch object and its receipt per invocation.

Every test runs with the `wire` fixture, which asserts at teardown that each PutObject the
function sent carried `If-None-Match: *` and created a batch object or a receipt, and that it
read nothing.
"""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse

from aggregation.archive import (
    BATCH_DOCUMENT_FORMAT,
    batch_object_id,
    batch_object_key,
    parse_batch_document,
    parse_receipt,
    receipt_key,
)
from aggregation.names import NON_INSERT_RECORDS_SKIPPED
from archive_function.store import (
    MAX_CONFLICT_RETRIES,
    ArchiveStore,
    ConditionalWriteFailed,
    WriteStats,
    backoff_seconds,
)
from function_support import aws
from function_support.faults import InjectedFailure
from tests.lambdas.archive_function.archive_helpers import (
    WireRecorder,
    batch_hash,
    conflict_response,
    delta_event,
    delta_keys,
    receipt_keys,
    run,
)
from tests.lambdas.metrics_helpers import emitted_metric


def object_id(*seeds: str) -> str:
    return batch_object_id(batch_hash(seed) for seed in seeds)


def test_an_invocation_writes_one_batch_object_and_its_receipt_with_exact_decimal_strings(wire: WireRecorder) -> None:
    summary = run(delta_event(["a", "b", "c"]))

    identity = object_id("a", "b", "c")
    assert (summary["items"], summary["object_created"], summary["receipt_created"]) == (3, 1, 1)
    assert delta_keys(wire.bucket) == [batch_object_key(identity)]
    assert receipt_keys(wire.bucket) == [receipt_key(identity)]
    assert [put.key for put in wire.puts] == [batch_object_key(identity), receipt_key(identity)], "object first"
    s3 = boto3.client("s3")
    stored = s3.get_object(Bucket=wire.bucket, Key=batch_object_key(identity))
    body = stored["Body"].read()
    document = json.loads(body)  # floats would show up as float here
    assert document["Format"] == BATCH_DOCUMENT_FORMAT and document["ObjectId"] == identity
    assert [item["BatchHash"] for item in document["Items"]] == sorted(batch_hash(seed) for seed in "abc")
    item = document["Items"][0]
    assert item["Deltas"]["Delta"] == {"Value": "10.5", "TradeCount": 1}
    assert item["ProducerTimestamps"] == ["1616413258.8997078"]
    assert item["RecordCount"] == 2 and isinstance(item["CreatedAt"], int)
    assert set(item["Stream"]) == {"EventSourceARN", "EventID", "SequenceNumber"}
    assert len(parse_batch_document(body, identity).items) == 3
    receipt = parse_receipt(s3.get_object(Bucket=wire.bucket, Key=receipt_key(identity))["Body"].read(), identity)
    assert dict(receipt.items) == {batch_hash(seed): 2 for seed in "abc"} and receipt.state_changes == 6


def test_a_redelivered_batch_writes_nothing_new(wire: WireRecorder) -> None:
    event = delta_event(["a", "b"])
    run(event)
    replay = run(event)

    assert (replay["object_created"], replay["receipt_created"]) == (0, 0)
    assert len(delta_keys(wire.bucket)) == 1 and len(receipt_keys(wire.bucket)) == 1
    assert len(wire.puts) == 4, "both tried again, refused by S3 with 412"


def test_a_reordered_batch_is_the_same_object(wire: WireRecorder) -> None:
    event = delta_event(["a", "b", "c"])
    run(event)
    reordered = run({"Records": list(reversed(event["Records"]))})

    assert reordered["object_created"] == 0 and delta_keys(wire.bucket) == [batch_object_key(object_id("a", "b", "c"))]


def test_a_record_delivered_twice_in_one_batch_is_one_item(wire: WireRecorder) -> None:
    event = delta_event(["a", "b"])
    summary = run({"Records": [*event["Records"], event["Records"][0]]})

    assert summary["items"] == 2 and summary["records"] == 3
    assert delta_keys(wire.bucket) == [batch_object_key(object_id("a", "b"))]


def test_after_write_fault_then_the_identical_retry_writes_nothing_new(
    wire: WireRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = delta_event(["a", "b", "c"])
    monkeypatch.setenv("FAILURE_ARCHIVE_LAMBDA_AFTER_WRITE_PCT", "100")
    for _ in range(3):  # Lambda retries the identical batch
        with pytest.raises(InjectedFailure):
            run(event)
    monkeypatch.setenv("FAILURE_ARCHIVE_LAMBDA_AFTER_WRITE_PCT", "0")
    summary = run(event)
    assert (summary["object_created"], summary["receipt_created"]) == (0, 0)
    assert len(delta_keys(wire.bucket)) == 1 and len(receipt_keys(wire.bucket)) == 1


def test_before_write_fault_writes_nothing(wire: WireRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILURE_ARCHIVE_LAMBDA_PCT", "100")
    with pytest.raises(InjectedFailure):
        run(delta_event(["a"]))
    assert wire.puts == [] and delta_keys(wire.bucket) == []


def test_409_is_retried_with_bounded_jittered_backoff(wire: WireRecorder) -> None:
    conflicts_left = [3]

    def conflict_three_times(request: AWSPreparedRequest, recorder: WireRecorder) -> AWSResponse | None:
        if conflicts_left[0] > 0:
            conflicts_left[0] -= 1
            return conflict_response(request)
        return None

    wire.responder = conflict_three_times
    slept: list[float] = []
    store = ArchiveStore(aws.s3_client(), wire.bucket, sleep=slept.append)
    stats = WriteStats()
    assert store.put_once("deltas/ab/x.batch.json", b"{}", stats)

    assert len(slept) == 3 and stats.conflict_retries == 3 and stats.created == 1
    for retry, delay in enumerate(slept, start=1):
        assert 0 <= delay <= min(2.0, 0.05 * 2**retry)
    assert [put.key for put in wire.puts] == ["deltas/ab/x.batch.json"] * 4  # the same request, sent again


def test_409_past_the_bound_fails_the_invocation_and_writes_nothing(wire: WireRecorder) -> None:
    wire.responder = lambda request, recorder: conflict_response(request)
    store = ArchiveStore(aws.s3_client(), wire.bucket, sleep=lambda _seconds: None)
    with pytest.raises(ConditionalWriteFailed, match="409"):
        store.put_once("deltas/ab/x.batch.json", b"{}", WriteStats())
    assert len(wire.puts) == MAX_CONFLICT_RETRIES + 1
    assert delta_keys(wire.bucket) == []


def test_412_is_success_and_other_errors_fail(wire: WireRecorder) -> None:
    store = ArchiveStore(aws.s3_client(), wire.bucket)
    stats = WriteStats()
    assert store.put_once("deltas/ab/x.batch.json", b"{}", stats)
    assert not store.put_once("deltas/ab/x.batch.json", b"{}", stats)
    assert (stats.created, stats.already_there) == (1, 1)
    missing = ArchiveStore(boto3.client("s3"), f"{wire.bucket}-missing")  # unhooked: not an archive write
    with pytest.raises(missing.s3.exceptions.NoSuchBucket):
        missing.put_once("deltas/ab/y.batch.json", b"{}", stats)


def test_backoff_grows_exponentially_and_is_capped() -> None:
    class Highest:
        def uniform(self, low: float, high: float) -> float:
            return high

    ceilings = [backoff_seconds(retry, Highest()) for retry in range(1, 8)]  # type: ignore[arg-type]
    assert ceilings == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


def test_records_other_than_inserts_are_skipped_and_counted(
    wire: WireRecorder, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mapping's filter passes any record with a new image; only INSERTs are archived."""
    event = delta_event(["a", "b"])
    modify = {**delta_event(["c"], first_sequence=200)["Records"][0], "eventName": "MODIFY"}
    capsys.readouterr()

    summary = run({"Records": [modify, *event["Records"]]})

    assert (summary["records"], summary["items"]) == (2, 2)
    assert delta_keys(wire.bucket) == [batch_object_key(object_id("a", "b"))]
    out = capsys.readouterr().out
    assert emitted_metric(out, NON_INSERT_RECORDS_SKIPPED) == [1.0]
    assert emitted_metric(out, "BatchObjectsCreated") == [1.0]
    assert emitted_metric(out, "DeltaItemsArchived") == [2.0]


def test_a_batch_of_only_non_inserts_archives_nothing(wire: WireRecorder, capsys: pytest.CaptureFixture[str]) -> None:
    modify = {**delta_event(["a"])["Records"][0], "eventName": "MODIFY"}
    capsys.readouterr()

    assert run({"Records": [modify]}) == {"records": 0}
    assert delta_keys(wire.bucket) == [] and wire.puts == []
    assert emitted_metric(capsys.readouterr().out, NON_INSERT_RECORDS_SKIPPED) == [1.0]
