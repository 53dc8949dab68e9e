"""Sending: every message reaches the stream at least once, whatever put_records rejects."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.awsrequest import AWSResponse, HTTPHeaders

from producer.generator import GeneratedMessage, MessageKind, generate_messages
from producer.ledger import Ledger
from producer.sender import (
    MAX_BYTES_PER_CALL,
    MAX_RECORDS_PER_CALL,
    RatePacer,
    RetryPolicy,
    SendOptions,
    chunk_messages,
    send_messages,
)
from toolkit.pipeline import PipelineTarget

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

FAST_RETRY = RetryPolicy(base_delay=0.001, max_delay=0.01, max_stall_seconds=30)


def read_stream(client: KinesisClient, stream: str) -> list[bytes]:
    """Every record in the stream, from the trim horizon."""
    records: list[bytes] = []
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while True:
            page = client.get_records(ShardIterator=iterator, Limit=10_000)
            records.extend(record["Data"] for record in page["Records"])
            if not page["Records"]:
                break
            iterator = page["NextShardIterator"]
    return records


class FaultInjector:
    """botocore hooks: rewrite some accepted records as failed, and throttle some whole calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.rewritten: list[bytes] = []
        self.throttled_calls = 0
        self._lock = threading.Lock()
        self._request = threading.local()  # the sender calls from several threads

    def remember_request(self, params: dict[str, Any], **_: Any) -> None:
        self._request.data = [record["Data"] for record in params["Records"]]

    def maybe_throttle(self, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        with self._lock:
            self.calls += 1
            if self.calls % 4 != 2:
                return None
            self.throttled_calls += 1
        error = {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded for stream"}
        return AWSResponse("", 400, HTTPHeaders(), None), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}

    def fail_some_records(self, parsed: dict[str, Any], **_: Any) -> None:
        if "Records" not in parsed:
            return
        failed = 0
        for index, result in enumerate(parsed["Records"]):
            if index % 7 == 3:
                code = "ProvisionedThroughputExceededException" if index % 2 else "InternalFailure"
                parsed["Records"][index] = {"ErrorCode": code, "ErrorMessage": "injected"}
                with self._lock:
                    self.rewritten.append(self._request.data[index])
                failed += 1
            else:
                assert "SequenceNumber" in result
        parsed["FailedRecordCount"] = failed

    def attach(self, client: KinesisClient) -> None:
        events = client.meta.events
        events.register("provide-client-params.kinesis.PutRecords", self.remember_request)
        events.register("before-call.kinesis.PutRecords", self.maybe_throttle)  # type: ignore[arg-type]
        events.register("after-call.kinesis.PutRecords", self.fail_some_records)


def test_failed_records_and_throttled_calls_are_retried_until_accepted(
    pipeline: PipelineTarget, tmp_path: Path
) -> None:
    client = pipeline.kinesis()
    injector = FaultInjector()
    injector.attach(client)
    options = SendOptions(
        count=1500, seed=17, concurrency=4, ledger_path=tmp_path / "ledger.json", timestamp_epoch_ms=1, retry=FAST_RETRY
    )
    summary = send_messages(pipeline, options, kinesis_client=client)

    expected = generate_messages(options.generator_config(17))
    arrived = Counter(read_stream(pipeline.kinesis(), pipeline.stream_name))
    wanted = Counter(message.data for message in expected)
    missing = [data for data in wanted if arrived[data] < wanted[data]]
    assert not missing, f"{len(missing)} messages never arrived"
    # Rewritten records really were accepted once and then resent: they arrive at least twice.
    assert injector.rewritten
    assert all(arrived[data] >= 2 for data in injector.rewritten)
    assert injector.throttled_calls > 0
    assert summary.messages_sent == 1500
    assert summary.retried_records >= len(injector.rewritten)
    assert summary.throttled_records > 0
    assert summary.uncertain == 0

    ledger = Ledger.load(tmp_path / "ledger.json")
    reference = Ledger()
    for message in expected:
        reference.record(message)
    assert ledger.aggregates() == reference.aggregates()
    assert ledger.trades == reference.trades
    assert ledger.counts.messages_sent == 1500
    assert ledger.runs[0]["seed"] == 17


def test_runs_merge_in_the_ledger_and_continue_versions(pipeline: PipelineTarget, tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.json"
    send_messages(pipeline, SendOptions(count=300, seed=1, ledger_path=ledger_path))
    first = Ledger.load(ledger_path)
    options = SendOptions(count=300, seed=1, ledger_path=ledger_path, modifications_pct=60, duplicates_pct=5, trades=20)
    send_messages(pipeline, options)
    merged = Ledger.load(ledger_path)
    assert merged.counts.messages_sent == 600
    assert len(merged.trades) == len(first.trades) + 20
    advanced = [trade for trade, state in first.trades.items() if merged.trades[trade].version > state.version]
    assert advanced  # run 2 sent new versions of run 1's trades
    assert len(merged.runs) == 2


def test_rate_is_held() -> None:
    clock = [0.0]
    pacer = RatePacer(1000.0, clock=lambda: clock[0])
    taken = 0
    while clock[0] < 10.0:
        delay = pacer.delay()
        if delay > 0:
            clock[0] += delay
        else:
            pacer.take()
            taken += 1
    assert abs(taken - 10_000) <= 51


def test_a_paced_send_never_exceeds_its_rate(pipeline: PipelineTarget) -> None:
    """400 messages at 400/s cannot take less than about a second (pacing is a limit, not a benchmark:
    how much longer a loaded machine takes is not asserted)."""
    started = time.monotonic()
    summary = send_messages(pipeline, SendOptions(count=400, rate=400, seed=2, ledger_path=None))
    elapsed = time.monotonic() - started
    assert summary.messages_sent == 400
    assert elapsed >= 0.85


def test_chunks_respect_kinesis_limits() -> None:
    small = generate_messages_of_size(1200, 100)
    assert [len(chunk) for chunk in chunk_messages(small)] == [MAX_RECORDS_PER_CALL, MAX_RECORDS_PER_CALL, 200]
    large = generate_messages_of_size(12, 900 * 1024)
    chunks = chunk_messages(large)
    assert all(sum(len(m.data) + len(m.partition_key) for m in chunk) <= MAX_BYTES_PER_CALL for chunk in chunks)
    assert [m for chunk in chunks for m in chunk] == large


def generate_messages_of_size(count: int, size: int) -> list[GeneratedMessage]:
    return [
        GeneratedMessage(index, b"x" * size, f"key-{index}", MessageKind.MALFORMED, None, None)
        for index in range(count)
    ]
