"""Benchmark 4: the local pipeline end to end — throughput as a ratio, and latency p50 / p99.

A runtime of our own (`local.deploy.lifecycle.up` on a temporary state directory, so a `make up`
already running in `.local/` is left alone): emulator, the synthesized stack deployed
into it, the event-source runner invoking the deployed functions. Then, in the same run:

1. **Raw rate**: 16 threads issue conditional `UpdateItem`s (the state function's
   condition) on a scratch table of the same emulator for a few seconds: the rate the
   emulator itself sustains, which bounds everything on this machine.
2. **Pipeline**: the producer (`send_messages`, standard workload, no faults) sends the
   messages as fast as the stream takes them; `verify_pipeline` waits for the drain and
   proves the aggregates exact. Throughput = messages ÷ (last aggregate applied - first
   send), reported as a ratio to the raw rate, because absolute local figures say more
   about moto than about the pipeline.
3. **Latency**, then, with the producer paced at half that rate (steady state, not a
   queue draining; the burst's latencies are reported too): each applied unit of a delta
   batch (its part of one node group) leaves a marker `#applied#<BatchHash>/<group>…` in
   the AggregateTable; a poller records when each marker first appears (every 0.1 s, so
   a latency is overstated by at most that plus one scan). A message's latency is its
   producer `Timestamp` (kept in the delta item's `ProducerTimestamps`) to the moment the
   last marker of its delta batch appeared: all of the batch applied.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

from aggregation.delta_items import decode_delta_batch
from aggregation.names import AGGREGATE_KEY, MARKER_PREFIX, batch_hash_of_marker
from benchmarks import REPOSITORY_ROOT
from benchmarks.harness import DUMMY_CREDENTIALS, environment, percentile

MARKER_POLL_SECONDS = 0.1
"""The latency figures' resolution. Each poll is one filtered Scan (a few ms of emulator CPU once the
markers number in the thousands), so 0.1 s costs the pipeline a few per cent of one core; at 0.25 s
the poll alone added about 0.1 s to the median it measures (0.50 s against 0.39 s, two runs
back to back on main at 01:53)."""
VERIFY_POLL_SECONDS = 2.0
"""How often `verify_pipeline` reads the whole AggregateTable while waiting for the drain. It
decides only when a phase ends, never a figure (the rate and latencies come from the markers),
so it polls slowly: each of its reads is emulator work competing with the pipeline measured."""
RAW_RATE_THREADS = 16
PACED_SHARE_OF_BURST_RATE = 0.5  # latency is measured at half the drained rate: steady, not queueing
Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class EndToEndResult:
    messages: int
    raw_updates_per_second: float
    pipeline_messages_per_second: float
    burst_latency_p50_seconds: float
    burst_latency_p99_seconds: float
    paced_messages: int
    paced_rate: float
    latency_p50_seconds: float
    latency_p99_seconds: float
    latency_samples: int
    exact: bool
    elapsed_seconds: float

    @property
    def ratio(self) -> float:
        return self.pipeline_messages_per_second / self.raw_updates_per_second


@dataclass(frozen=True)
class EndToEndSkipped:
    reason: str


def runner_available() -> str | None:
    """None when `python -m local up` can run here; otherwise why not."""
    if not (REPOSITORY_ROOT / "local" / "__main__.py").exists():
        return "local/__main__.py (the `python -m local up` runner) is not in this checkout yet"
    if not (REPOSITORY_ROOT / "node_modules" / ".bin" / "cdk").exists():
        return "the CDK CLI is not installed (run `make install`)"
    return None


def measure_raw_conditional_updates(seconds: float) -> float:
    """Conditional updates per second the emulator sustains with 16 writers."""
    client = boto3.client("dynamodb")
    table = f"bench-raw-{uuid.uuid4().hex[:8]}"
    client.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "TradeID", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "TradeID", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()

    def writer(worker: int) -> int:
        own = boto3.client("dynamodb")
        done = 0
        while time.perf_counter() < deadline:
            own.update_item(
                TableName=table,
                Key={"TradeID": {"S": f"{worker}-{done}"}},
                UpdateExpression="SET #value = :value, #version = :version",
                ConditionExpression="attribute_not_exists(#trade_id) OR #version < :version",
                ExpressionAttributeNames={"#trade_id": "TradeID", "#version": "Version", "#value": "Value"},
                ExpressionAttributeValues={":value": {"N": "1.5"}, ":version": {"N": "1"}},
            )
            done += 1
        return done

    with ThreadPoolExecutor(RAW_RATE_THREADS) as pool:
        total = sum(pool.map(writer, range(RAW_RATE_THREADS)))
    rate = total / (time.perf_counter() - started)
    client.delete_table(TableName=table)
    return rate


class MarkerPoller:
    """Records when each reduce marker first appears in the AggregateTable."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.first_seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="marker-poller", daemon=True)
        self._client = boto3.client("dynamodb")

    def __enter__(self) -> MarkerPoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            seen_at = time.time()
            try:
                pages = self._client.get_paginator("scan").paginate(
                    TableName=self.table,
                    FilterExpression=f"begins_with({AGGREGATE_KEY}, :prefix)",
                    ExpressionAttributeValues={":prefix": {"S": MARKER_PREFIX}},
                    ProjectionExpression=AGGREGATE_KEY,
                )
                for page in pages:
                    for item in page["Items"]:
                        self.first_seen.setdefault(item[AGGREGATE_KEY]["S"], seen_at)
            except ClientError:
                pass  # a missed poll only coarsens the resolution
            self._stop.wait(MARKER_POLL_SECONDS)


def _producer_timestamps(table: str) -> dict[str, list[Decimal]]:
    client = boto3.client("dynamodb")
    batches: dict[str, list[Decimal]] = {}
    for page in client.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            batch = decode_delta_batch(item)
            batches[batch.batch_hash] = list(batch.producer_timestamps)
    return batches


def run_end_to_end(
    message_count: int, raw_seconds: float, paced_seconds: float, progress: Progress
) -> EndToEndResult | EndToEndSkipped:
    reason = runner_available()
    if reason:
        return EndToEndSkipped(reason)
    # Imported here: the local runtime is still being finished elsewhere, and the other
    # benchmarks must run without it.
    from local.deploy import lifecycle  # noqa: PLC0415
    from local.paths import LocalPaths  # noqa: PLC0415
    from producer.sender import SendOptions, send_messages  # noqa: PLC0415
    from producer.verifier import verify_pipeline  # noqa: PLC0415
    from toolkit.pipeline import target_from_outputs  # noqa: PLC0415

    started = time.perf_counter()
    paths = LocalPaths(Path(tempfile.mkdtemp(prefix="bench-local-")))
    runtime_environment = {k: v for k, v in os.environ.items() if not k.startswith("FAILURE_")}
    runtime_environment.pop("AWS_ENDPOINT_URL", None)
    progress("end to end: make up (emulator, synth, deploy, runner)", 0.05)
    try:
        lifecycle.up(paths, environment=runtime_environment, report=lambda _line: None)
        outputs: dict[str, Any] = json.loads(paths.outputs.read_text())
        with environment({**DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL": outputs["endpoint_url"]}):
            progress("end to end: raw conditional-update rate", 0.15)
            raw_rate = measure_raw_conditional_updates(raw_seconds)
            target = target_from_outputs(paths.outputs)
            ledger = paths.state_dir / "bench-ledger.json"

            def send_and_drain(count: int, rate: float, seed: int) -> bool:
                options = SendOptions(
                    count=count,
                    rate=rate,
                    duplicates_pct=10.0,
                    out_of_order_pct=5.0,
                    modifications_pct=20.0,
                    malformed_pct=0.0,
                    seed=seed,
                    ledger_path=ledger,
                )
                send_messages(target, options)
                report = verify_pipeline(
                    target, ledger, timeout=600.0, settle_seconds=3.0, poll_interval=VERIFY_POLL_SECONDS
                )
                time.sleep(2 * MARKER_POLL_SECONDS)
                return report.exact

            with MarkerPoller(outputs["aggregate_table"]) as poller:
                progress(f"end to end: burst of {message_count} messages", 0.25)
                burst_started = time.time()
                burst_exact = send_and_drain(message_count, 0.0, seed=23)
                burst_markers = dict(poller.first_seen)
                burst_rate = message_count / max(1e-9, max(burst_markers.values(), default=0.0) - burst_started)
                paced_rate = max(1.0, round(burst_rate * PACED_SHARE_OF_BURST_RATE))
                paced_count = max(1, round(paced_rate * paced_seconds))
                progress(f"end to end: {paced_count} messages paced at {paced_rate:g} msg/s", 0.6)
                paced_exact = send_and_drain(paced_count, paced_rate, seed=29)
            progress("end to end: latency", 0.95)
            timestamps = _producer_timestamps(outputs["delta_table"])
    finally:
        lifecycle.down(paths, report=lambda _line: None)
    burst_latencies = _latencies(timestamps, burst_markers)
    paced_markers = {k: v for k, v in poller.first_seen.items() if k not in burst_markers}
    paced_latencies = _latencies(timestamps, paced_markers)
    return EndToEndResult(
        messages=message_count,
        raw_updates_per_second=raw_rate,
        pipeline_messages_per_second=burst_rate,
        burst_latency_p50_seconds=percentile(burst_latencies, 0.50),
        burst_latency_p99_seconds=percentile(burst_latencies, 0.99),
        paced_messages=paced_count,
        paced_rate=paced_rate,
        latency_p50_seconds=percentile(paced_latencies, 0.50),
        latency_p99_seconds=percentile(paced_latencies, 0.99),
        latency_samples=len(paced_latencies),
        exact=burst_exact and paced_exact,
        elapsed_seconds=time.perf_counter() - started,
    )


def _latencies(timestamps: dict[str, list[Decimal]], first_seen: dict[str, float]) -> list[float]:
    """Seconds from each message's producer Timestamp to its delta batch being fully applied."""
    applied_at: dict[str, float] = {}
    for marker, seen in first_seen.items():
        batch_hash = batch_hash_of_marker(marker)
        applied_at[batch_hash] = max(seen, applied_at.get(batch_hash, seen))
    return [
        float(Decimal(repr(applied_at[batch_hash])) - stamp)
        for batch_hash, stamps in timestamps.items()
        if batch_hash in applied_at
        for stamp in stamps
    ]
