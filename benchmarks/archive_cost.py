"""Benchmark 1, the archive's part: S3 PUT requests per ingested message, counted.

The delta records of the write-cost run go through the real archive handler against the
emulator's S3, in invocations as large as the capacity plan's archive batch at each declared rate
(`DECLARED_RATES`, the `auto` settings `cdk synth` chooses there), and in invocations of
`SMALL_BATCH` for comparison. Every PutObject the handler sends is counted, whatever its outcome
(a 412 is billed too), by a botocore hook on its own client (`S3PutCounter`), as section 1 counts
DynamoDB's write units. Each run's archive is then read back as `audit` reads it: its distinct
items must be exactly the delta records, and their totals the generator's ground truth.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import boto3

from aggregation.archive import archived_totals
from archive_function import handler as archive_handler
from audit.archive_reader import read_archive
from benchmarks.capacity import pipeline_settings
from benchmarks.harness import chunks, environment
from function_support import aws
from local.runner.inprocess import LambdaContextStub
from planner.inputs import Workload
from planner.model import plan_capacity
from stacks.settings import planned_settings

DECLARED_RATES = (50_000, 250_000, 1_000_000)
SMALL_BATCH = 10
"""A quiet lane's invocations without a batching window: what fewer items an invocation cost."""
EARLIER_LAYOUT_PUTS_PER_INVOCATION = 2
"""The earlier layout's registry writes an invocation (claim, settle), besides one PUT per delta item."""

Progress = Callable[[str, float], None]


@dataclass
class S3PutCounter:
    """Every PutObject a botocore S3 client sends, with its outcome ("ok" or the error code)."""

    outcomes: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _after_call(self, parsed: Mapping[str, Any], **_: Any) -> None:
        with self._lock:
            self.outcomes.append(str(parsed.get("Error", {}).get("Code", "")) or "ok")

    def attach(self, client: Any) -> None:
        client.meta.events.register("after-call.s3.PutObject", self._after_call)

    def detach(self, client: Any) -> None:
        client.meta.events.unregister("after-call.s3.PutObject", self._after_call)


@dataclass(frozen=True)
class ArchiveRun:
    """The archive handler over the delta records, in invocations of `batch` records."""

    label: str
    batch: int
    invocations: int
    puts: int
    items: int
    exact: bool

    @property
    def earlier_layout_puts(self) -> int:
        """What the earlier layout sent for the same invocations: a PUT per item, and its registry writes."""
        return self.items + EARLIER_LAYOUT_PUTS_PER_INVOCATION * self.invocations


def planned_archive_batches(rates: Sequence[int] = DECLARED_RATES) -> dict[int, int]:
    """The archive batch (delta items an invocation) of the `auto` plan at each declared rate."""
    batches = {}
    for rate in rates:
        settings = planned_settings(pipeline_settings({"targetMessagesPerSecond": rate}))
        plan = plan_capacity(Workload(rate=rate), settings)
        (archive,) = [timing for timing in plan.ours.timings if timing.stage == "archive"]
        batches[rate] = round(archive.batch)
    return batches


def _archive_run(
    label: str,
    batch: int,
    records: Sequence[dict[str, Any]],
    expected: Mapping[str, tuple[Decimal, int]],
    progress: Progress,
) -> ArchiveRun:
    s3 = boto3.client("s3")
    bucket = f"bench-archive-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    counter = S3PutCounter()
    with environment({"ARCHIVE_BUCKET": bucket, "POWERTOOLS_METRICS_NAMESPACE": "ExactlyOnceAggregationBenchmark"}):
        aws.s3_client.cache_clear()
        counter.attach(aws.s3_client())
        invocations = chunks(records, batch)
        try:
            for index, invocation in enumerate(invocations, start=1):
                archive_handler.lambda_handler({"Records": invocation}, LambdaContextStub())
                progress(f"archive ({label})", index / len(invocations))
        finally:
            counter.detach(aws.s3_client())
            aws.s3_client.cache_clear()
    archive = read_archive(s3, bucket)
    nodes = archived_totals(archive.items.items.values())
    totals = {key: (node.value, node.trade_count) for key, node in nodes.items()}
    hashes = {record["dynamodb"]["NewImage"]["BatchHash"]["S"] for record in records}
    exact = (
        set(archive.items.items) == hashes
        and {key: value for key, value in totals.items() if value != (Decimal(0), 0)} == dict(expected)
        and not archive.unreadable
        and not archive.items.conflicts
    )
    return ArchiveRun(label, batch, len(invocations), len(counter.outcomes), len(hashes), exact)


def run_archive_cost(
    delta_records: Sequence[dict[str, Any]], expected: Mapping[str, tuple[Decimal, int]], progress: Progress
) -> list[ArchiveRun]:
    """The archive over `delta_records` at each declared rate's planned batch, and in small batches.

    Needs the emulator running and AWS_ENDPOINT_URL pointing at it (harness.running_emulator).
    """
    assert os.environ.get("AWS_ENDPOINT_URL"), "the archive benchmark runs against the emulator"
    inserts = [record for record in delta_records if record["eventName"] == "INSERT"]
    by_batch: dict[int, list[int]] = {}
    for rate, batch in planned_archive_batches().items():
        by_batch.setdefault(batch, []).append(rate)
    runs = [
        _archive_run(
            " / ".join(f"{rate:,}" for rate in rates) + " msg/s plan" + ("s" if len(rates) > 1 else ""),
            batch,
            inserts,
            expected,
            progress,
        )
        for batch, rates in sorted(by_batch.items())
    ]
    runs.append(_archive_run(f"batches of {SMALL_BATCH}", SMALL_BATCH, inserts, expected, progress))
    return runs
