"""Archive function against the emulator's S3: write-once objects, exact registry counts.

Every test runs with the `wire` fixture, which asserts at teardown that each PutObject the
function sent carried `If-None-Match: *` (delta objects, registry creation) or `If-Match`
(registry updates).
"""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse

from aggregation.archive import ArchivedDelta, Registry, StreamPosition, claim_objects
from aggregation.deltas import NodeDelta
from aggregation.names import NON_INSERT_RECORDS_SKIPPED
from archive_function import handler as archive_handler
from archive_function.store import (
    MAX_CONFLICT_RETRIES,
    RegistryStore,
    RegistryUpdateFailed,
    RegistryUpdateStats,
    backoff_seconds,
)
from archive_function.store import read_registry as read_stored_registry
from function_support import aws
from function_support.faults import InjectedFailure
from tests.lambdas.archive_function.archive_helpers import (
    REGISTRY_KEY,
    WireRecorder,
    batch_hash,
    conflict_response,
    delta_event,
    delta_keys,
    no_sleep_store,
    read_registry,
    run,
    s3_error_response,
)
from tests.lambdas.metrics_helpers import emitted_metric


def test_each_delta_becomes_one_immutable_object_with_exact_decimal_strings(wire: WireRecorder) -> None:
    event = delta_event(["a", "b", "c"])
    summary = run(event)

    assert summary["objects_created"] == 3 and summary["objects_counted"] == 3
    hashes = sorted(batch_hash(seed) for seed in "abc")
    assert delta_keys(wire.bucket) == sorted(f"deltas/{h[:2]}/{h}.json" for h in hashes)
    stored = boto3.client("s3").get_object(Bucket=wire.bucket, Key=f"deltas/{hashes[0][:2]}/{hashes[0]}.json")
    assert stored["Metadata"] == {"archive-claim": "0:1"}, "tagged with the claim shard 0's first write opened"
    document = json.loads(stored["Body"].read())  # floats would show up as float here
    assert document["Deltas"]["Delta"] == {"Value": "10.5", "TradeCount": 1}
    assert document["ProducerTimestamps"] == ["1616413258.8997078"]
    assert document["RecordCount"] == 2 and isinstance(document["CreatedAt"], int)
    assert set(document["Stream"]) == {"EventSourceARN", "EventID", "SequenceNumber"}
    registry = read_registry(wire.bucket)
    assert (registry.objects_archived, registry.state_changes_archived, dict(registry.claims)) == (3, 6, {})
    assert registry.generation == 2  # claim, settle
    assert registry.streams[event["Records"][0]["eventSourceARN"]].highest_sequence_number == "102"
    # The registry was created with If-None-Match (first write) and updated with If-Match.
    conditions = [("If-None-Match" if put.if_none_match else "If-Match") for put in wire.registry_puts()]
    assert conditions == ["If-None-Match", "If-Match"]


def test_a_replayed_batch_creates_nothing_and_counts_nothing(wire: WireRecorder) -> None:
    event = delta_event(["a", "b"])
    run(event)
    before = read_registry(wire.bucket)
    puts_before = len(wire.puts)

    replay = run(event)

    assert (replay["objects_created"], replay["objects_already_archived"], replay["objects_counted"]) == (0, 2, 0)
    after = read_registry(wire.bucket)
    assert (after.objects_archived, after.state_changes_archived, dict(after.claims)) == (2, 4, {})
    assert after.streams == before.streams
    assert len(delta_keys(wire.bucket)) == 2
    assert [put.if_none_match for put in wire.delta_puts()[2:]] == ["*", "*"]  # tried again, refused by S3
    assert len(wire.puts) > puts_before


def test_a_batch_overlapping_an_archived_one_counts_only_its_new_deltas(wire: WireRecorder) -> None:
    run(delta_event(["a", "b"]))
    run(delta_event(["b", "c"], first_sequence=101))  # other batch identity, one delta shared
    registry = read_registry(wire.bucket)
    assert (registry.objects_archived, dict(registry.claims)) == (3, {})
    assert len(delta_keys(wire.bucket)) == 3


def test_after_write_fault_then_retry_counts_once(wire: WireRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    event = delta_event(["a", "b", "c"])
    monkeypatch.setenv("FAILURE_ARCHIVE_LAMBDA_AFTER_WRITE_PCT", "100")
    for _ in range(3):  # Lambda retries the identical batch
        with pytest.raises(InjectedFailure):
            run(event)
    monkeypatch.setenv("FAILURE_ARCHIVE_LAMBDA_AFTER_WRITE_PCT", "0")
    run(event)
    registry = read_registry(wire.bucket)
    assert (registry.objects_archived, registry.state_changes_archived, dict(registry.claims)) == (3, 6, {})


def test_before_write_fault_writes_nothing(wire: WireRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILURE_ARCHIVE_LAMBDA_PCT", "100")
    with pytest.raises(InjectedFailure):
        run(delta_event(["a"]))
    assert wire.puts == [] and delta_keys(wire.bucket) == []


def test_failure_between_objects_and_registry_count_is_recovered_by_the_retry(
    wire: WireRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects created, then the settle exhausts its 409 retries: the retry must count them.

    This is why counting only "objects this invocation created" would not do: the retry gets
    412 for every object; it counts them because their metadata names the claims it holds,
    which the failed attempt opened.
    """
    event = delta_event(["a", "b"])

    def conflict_on_settle(request: AWSPreparedRequest, recorder: WireRecorder) -> AWSResponse | None:
        if recorder.puts[-1].key == REGISTRY_KEY and recorder.delta_puts():
            return conflict_response(request)
        return None

    wire.responder = conflict_on_settle
    monkeypatch.setattr(archive_handler, "RegistryStore", no_sleep_store)
    with pytest.raises(RegistryUpdateFailed):
        run(event)
    assert len(delta_keys(wire.bucket)) == 2
    stuck = read_registry(wire.bucket)
    assert stuck.objects_archived == 0 and len(stuck.claims) == 2

    wire.responder = None
    summary = run(event)
    assert (summary["objects_created"], summary["objects_counted"]) == (2, 2)  # created under the claims it holds
    registry = read_registry(wire.bucket)
    assert (registry.objects_archived, registry.state_changes_archived, dict(registry.claims)) == (2, 4, {})


def test_409_is_retried_with_bounded_jittered_backoff(wire: WireRecorder) -> None:
    conflicts_left = [3]

    def conflict_three_times(request: AWSPreparedRequest, recorder: WireRecorder) -> AWSResponse | None:
        if recorder.puts[-1].key == REGISTRY_KEY and conflicts_left[0] > 0:
            conflicts_left[0] -= 1
            return conflict_response(request)
        return None

    wire.responder = conflict_three_times
    slept: list[float] = []
    store = RegistryStore(aws.s3_client(), wire.bucket, sleep=slept.append)
    delta = _delta("x")
    store.update(0, lambda registry: claim_objects(registry, [delta.batch_hash], "now"))

    assert len(slept) == 3
    for retry, delay in enumerate(slept, start=1):
        assert 0 <= delay <= min(2.0, 0.05 * 2**retry)
    registry_puts = wire.registry_puts()
    assert len(registry_puts) == 4  # the same conditional request, sent again after each 409
    assert {put.if_none_match for put in registry_puts} == {"*"}
    assert set(read_registry(wire.bucket).claims) == {delta.batch_hash}


def test_409_past_the_bound_fails_and_leaves_the_registry_alone(wire: WireRecorder) -> None:
    wire.responder = lambda request, recorder: (
        conflict_response(request) if recorder.puts[-1].key == REGISTRY_KEY else None
    )
    store = RegistryStore(aws.s3_client(), wire.bucket, sleep=lambda _seconds: None)
    with pytest.raises(RegistryUpdateFailed, match="409"):
        store.update(0, lambda registry: claim_objects(registry, [_delta("x").batch_hash], "now"))
    assert len(wire.registry_puts()) == MAX_CONFLICT_RETRIES + 1
    with pytest.raises(boto3.client("s3").exceptions.NoSuchKey):
        boto3.client("s3").get_object(Bucket=wire.bucket, Key=REGISTRY_KEY)


def test_backoff_grows_exponentially_and_is_capped() -> None:
    class Highest:
        def uniform(self, low: float, high: float) -> float:
            return high

    ceilings = [backoff_seconds(retry, Highest()) for retry in range(1, 8)]  # type: ignore[arg-type]
    assert ceilings == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


def test_412_redrives_and_keeps_the_other_writers_change(wire: WireRecorder) -> None:
    run(delta_event(["seed-registry"]))  # the registry exists; updates now use If-Match
    competitor = RegistryStore(boto3.client("s3"), wire.bucket)  # another writer, not hooked
    raced = [False]

    def competing_update_first(request: AWSPreparedRequest, recorder: WireRecorder) -> AWSResponse | None:
        if recorder.puts[-1].key == REGISTRY_KEY and not raced[0]:
            raced[0] = True  # between our read and our write, someone else commits a change
            competitor.update(0, lambda registry: claim_objects(registry, [_delta("y").batch_hash], "t"))
        return None

    wire.responder = competing_update_first
    stats = RegistryUpdateStats()
    store = RegistryStore(aws.s3_client(), wire.bucket)
    store.update(0, lambda registry: claim_objects(registry, [_delta("x").batch_hash], "t"), stats)

    assert stats.redrives == 1 and stats.writes == 1
    registry = read_registry(wire.bucket)
    # The competitor's claim kept, ours opened by the next generation: each write its own claim id.
    assert registry.claims == {_delta("y").batch_hash: 3, _delta("x").batch_hash: 4} and registry.generation == 4
    if_match = [put.if_match for put in wire.registry_puts()[-2:]]
    assert if_match[0] != if_match[1]  # the redrive used the ETag read after the competitor's write


def test_a_lost_response_after_a_committed_claim_does_not_count_a_replay_twice(wire: WireRecorder) -> None:
    """Our claim commits but we see 412 (as when the SDK resends after a lost response).

    The redrive then finds our own claims; they must not be taken for an earlier attempt's,
    or a replayed batch whose objects were counted long ago would be counted again.
    """
    event = delta_event(["a", "b"])
    run(event)
    other_client = boto3.client("s3")
    lost = [False]

    def commit_then_report_412(request: AWSPreparedRequest, recorder: WireRecorder) -> AWSResponse | None:
        put = recorder.puts[-1]
        if put.key == REGISTRY_KEY and not lost[0]:
            lost[0] = True
            body = _request_body(request)
            other_client.put_object(Bucket=recorder.bucket, Key=REGISTRY_KEY, Body=body, IfMatch=put.if_match or "")
            return _precondition_failed(request)
        return None

    wire.responder = commit_then_report_412
    run(event)
    registry = read_registry(wire.bucket)
    assert lost[0]
    assert (registry.objects_archived, registry.state_changes_archived, dict(registry.claims)) == (2, 4, {})


def _request_body(request: AWSPreparedRequest) -> bytes:
    body: Any = request.body
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    body.seek(0)
    return bytes(body.read())


def _precondition_failed(request: AWSPreparedRequest) -> AWSResponse:
    return s3_error_response(request, 412, "PreconditionFailed", "At least one of the preconditions did not hold")


def test_concurrent_writers_lose_no_update(wire: WireRecorder) -> None:
    """Eight writers archive 40 batches at once through the real CAS against the emulator."""
    writers, batches_per_writer, deltas_per_batch = 8, 5, 3
    barrier = threading.Barrier(writers)
    redrives: list[int] = []
    errors: list[BaseException] = []

    def slow_registry_writes(request: AWSPreparedRequest, recorder: WireRecorder) -> AWSResponse | None:
        if recorder.puts[-1].key == REGISTRY_KEY:
            time.sleep(0.005)  # widen the read-to-write window so that the writers do collide
        return None

    def writer(index: int) -> None:
        try:
            client = aws.s3_client()  # shared, hooked: every write is checked on the wire
            barrier.wait()
            for batch in range(batches_per_writer):
                deltas = [_delta(f"w{index}-b{batch}-d{d}", sequence=batch * 10 + d) for d in range(deltas_per_batch)]
                counts = archive_handler.archive_batch(deltas, RegistryStore(client, wire.bucket), 4)
                assert counts["objects_counted"] == deltas_per_batch
                redrives.append(counts["registry_redrives"])
        except BaseException as error:
            errors.append(error)

    wire.responder = slow_registry_writes
    threads = [threading.Thread(target=writer, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    registry = read_registry(wire.bucket)
    total = writers * batches_per_writer * deltas_per_batch
    assert (registry.objects_archived, registry.state_changes_archived, dict(registry.claims)) == (total, 2 * total, {})
    assert len(delta_keys(wire.bucket)) == total
    assert sum(redrives) > 0, "the writers never collided: the test proved nothing"


def _delta(seed: str, sequence: int = 1) -> ArchivedDelta:
    return ArchivedDelta(
        batch_hash=batch_hash(seed),
        deltas={"Delta": NodeDelta(Decimal("1.25"), 1)},
        record_count=2,
        producer_timestamps=(),
        created_at=1_700_000_000,
        stream=StreamPosition("arn:stream", f"event-{seed}", str(sequence)),
    )


def test_an_absent_registry_reads_as_empty(wire: WireRecorder) -> None:
    registry, etag = read_stored_registry(aws.s3_client(), wire.bucket, 0)
    assert registry == Registry() and etag is None


def test_records_other_than_inserts_are_skipped_and_counted(
    wire: WireRecorder, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mapping's filter passes any record with a new image; only INSERTs are archived."""
    event = delta_event(["a", "b"])
    modify = {**delta_event(["c"], first_sequence=200)["Records"][0], "eventName": "MODIFY"}
    capsys.readouterr()

    summary = run({"Records": [modify, *event["Records"]]})

    assert (summary["records"], summary["objects_created"], summary["objects_counted"]) == (2, 2, 2)
    assert delta_keys(wire.bucket) == sorted(f"deltas/{batch_hash(s)[:2]}/{batch_hash(s)}.json" for s in "ab")
    assert read_registry(wire.bucket).objects_archived == 2
    assert emitted_metric(capsys.readouterr().out, NON_INSERT_RECORDS_SKIPPED) == [1.0]


def test_a_batch_of_only_non_inserts_archives_nothing(wire: WireRecorder, capsys: pytest.CaptureFixture[str]) -> None:
    modify = {**delta_event(["a"])["Records"][0], "eventName": "MODIFY"}
    capsys.readouterr()

    assert run({"Records": [modify]}) == {"records": 0}
    assert delta_keys(wire.bucket) == [] and wire.puts == []
    assert emitted_metric(capsys.readouterr().out, NON_INSERT_RECORDS_SKIPPED) == [1.0]
