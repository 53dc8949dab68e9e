"""The archive stage: DeltaTable stream -> archive function -> one S3 object per invocation, and its receipt.

Per invocation (`lambdas/archive_function`): decode its delta items, write them as one batch object
(a conditional PUT), then the object's receipt (a second one): two PUTs whatever the batch holds,
no read, no compare-and-swap (`aggregation.archive`). `archiveParallelizationFactor` archive lanes
per DeltaTable stream shard, each invoked when its batch is full (`archiveBatchSize`, or the 6 MB
invocation payload) or `archiveBatchingWindowSeconds` after its first record.

What bounds a lane is CPU: decoding each delta item from the stream image and encoding it into the
object, about in proportion to the item's size (`ARCHIVE_CPU_US_PER_ITEM_KB`, on one full vCPU,
slower in the 256 MB function: `cpu_slowdown`), then the two round trips and the upload. Nothing is
shared between lanes: each key is written once (two attempts of one batch write the same bytes to
the same key, and one of them gets a 412), so no key is hot and no write waits for another lane's.

What it costs: the PUTs (two an invocation, so fewer the fuller the batches: `archive_puts_per_message`),
the objects' storage, which grows for ever (the archive is the audit trail: nothing expires), and
the server access logs (one record per request, kept `archiveAccessLogRetentionDays`). A lifecycle
rule (`archiveLifecycle`) moves batch objects to a cheaper class after some days; S3 does not
transition objects below 128 KB, and the infrequent-access and Glacier classes bill small objects as
larger ones, so it moves only objects of enough items (`monthly_storage_usd`); receipts stay in Standard.
"""

from __future__ import annotations

import math

from planner.inputs import (
    GIGABYTE,
    MAX_PARALLELIZATION_FACTOR,
    STREAM_POLLS_PER_SECOND,
    ArchiveLifecycle,
    ServiceTimes,
    Settings,
    cpu_slowdown,
    lambda_monthly_usd,
    steady_batch,
)
from planner.plan import STAGE_BUSY_TARGET, Component, DesignPlan, Flag, StageTiming
from planner.prices import PriceTable

ARCHIVE_MEMORY_MB = 256  # stacks/archive.py ARCHIVE_MEMORY_MB
PUTS_PER_INVOCATION = 2  # the batch object, then its receipt
ARCHIVE_CPU_US_PER_ITEM_KB = 250.0
"""Archive CPU per KB of delta item (DynamoDB's size), on one full vCPU: decoding the stream image
exactly and encoding the item into the batch object's canonical JSON. Measured 120 to 221 µs a KB
(0.7 to 1.27 ms for an item of 5.7 KB with 105 nodes and 90 timestamps, on a shared 2-core machine,
2026-11-27); the default covers the slowest with a margin, as the other CPU defaults do."""
EVENT_BYTES_PER_ITEM_BYTE = 2.2
"""The stream record of a delta item in Lambda's event (DynamoDB's typed JSON, with its keys and
position) against the item's size: 2.15 measured on the same items."""
OBJECT_BYTES_PER_ITEM_BYTE = 1.45
"""An item's share of the batch object (its canonical JSON document) against its size: 1.40 measured."""
RECEIPT_BYTES_PER_ITEM = 75  # a batch hash and its RecordCount in the receipt's JSON
INVOCATION_PAYLOAD_BYTES = 6 * 1024 * 1024
"""Lambda's invocation payload limit: a batch is cut where its event would pass it."""
UPLOAD_BYTES_PER_SECOND = 20e6
"""What one PUT of a batch object uploads a second from a small function (an assumption, conservative)."""
ACCESS_LOG_RECORD_BYTES = 400  # one server access log line, an estimate (they run 300-500 bytes)
DAYS_PER_MONTH = 30.4
YEAR_MONTHS = 12


def archive_factor_needed(lane_busy: float, settings: Settings) -> int:
    """The archive parallelization factor that brings lanes `lane_busy` busy now within the target
    (lanes share a shard's items evenly; capped at Lambda's 10)."""
    needed = math.ceil(settings.archive_parallelization_factor * lane_busy / STAGE_BUSY_TARGET)
    return min(MAX_PARALLELIZATION_FACTOR, max(1, needed))


def largest_batch(settings: Settings, item_bytes: float) -> float:
    """The most delta items one invocation can take: `archiveBatchSize`, or what fits the payload limit."""
    return max(
        1.0,
        min(float(settings.archive_batch_size), INVOCATION_PAYLOAD_BYTES / (EVENT_BYTES_PER_ITEM_BYTE * item_bytes)),
    )


def archive_invocation_seconds(batch: float, item_bytes: float, times: ServiceTimes) -> float:
    """One invocation of `batch` delta items: their CPU, two round trips, and the object's upload."""
    cpu = batch * item_bytes / 1024 * ARCHIVE_CPU_US_PER_ITEM_KB / 1e6 * cpu_slowdown(ARCHIVE_MEMORY_MB)
    upload = batch * item_bytes * OBJECT_BYTES_PER_ITEM_BYTE / UPLOAD_BYTES_PER_SECOND
    return cpu + PUTS_PER_INVOCATION * times.s3_round_trip_ms / 1e3 + upload


def monthly_storage_usd(gb: float, object_bytes: float, lifecycle: ArchiveLifecycle, prices: PriceTable) -> float:
    """A month of `gb` of archived objects of `object_bytes` each, in the class the rule moved them to.

    Objects below 128 KB stay in Standard (S3's default minimum for transitions).
    """
    if not lifecycle.transitions or object_bytes < 128 * 1024:
        return gb * prices.s3_standard_gb_month
    price = prices.storage_class(lifecycle.storage_class)
    objects = gb * GIGABYTE / object_bytes
    billed = max(object_bytes, price.minimum_object_bytes) + price.class_overhead_bytes
    return (
        objects * billed / GIGABYTE * price.gb_month
        + objects * price.standard_overhead_bytes / GIGABYTE * prices.s3_standard_gb_month
    )


def storage_after_months_usd(
    gb_per_month: float, object_bytes: float, lifecycle: ArchiveLifecycle, prices: PriceTable, months: int
) -> float:
    """The archive's storage bill in the month after `months` months at this rate."""
    moved_after_months = lifecycle.after_days / DAYS_PER_MONTH if lifecycle.transitions else math.inf
    young = min(float(months), moved_after_months)
    old = max(0.0, months - young)
    return gb_per_month * young * prices.s3_standard_gb_month + monthly_storage_usd(
        gb_per_month * old, object_bytes, lifecycle, prices
    )


def plan_archive(
    plan: DesignPlan, *, item_bytes: float, rate: float, settings: Settings, times: ServiceTimes, prices: PriceTable
) -> list[Component]:
    """The archive's invocations, requests, storage and logs into `plan`; its lines of the plan."""
    items = plan.delta_batches_per_second * plan.delta_items_per_batch
    lanes = plan.delta_stream_shards * settings.archive_parallelization_factor
    per_lane = items / lanes

    def invocation_seconds(batch: float) -> float:
        return archive_invocation_seconds(batch, item_bytes, times)

    full = largest_batch(settings, item_bytes)
    gather = max(1.0 / STREAM_POLLS_PER_SECOND, float(settings.archive_batching_window_seconds))
    batch = steady_batch(math.floor(full), per_lane, gather, invocation_seconds) if items else 1.0
    invocations = items / batch
    puts = invocations * PUTS_PER_INVOCATION
    lane_busy = per_lane / full * invocation_seconds(full)
    plan.archive_items_per_second = items
    plan.archive_objects_per_second = invocations
    plan.archive_puts_per_second = puts
    plan.archive_puts_per_message = puts / rate if rate else 0.0
    plan.archive_lane_busy = lane_busy
    plan.timings.append(
        StageTiming(
            "archive",
            lanes=lanes,
            batch=batch,
            interval_seconds=batch / per_lane if per_lane else 0.0,
            invocation_seconds=invocation_seconds(batch),
            busy=lane_busy,
            on_latency_path=False,
        )
    )
    if lane_busy > 1:
        plan.flags.append(
            Flag(
                f"each of {lanes} archive lanes would be {lane_busy:.0%} busy archiving "
                f"{per_lane:,.0f} delta items a second",
                f"set archiveParallelizationFactor to {archive_factor_needed(lane_busy, settings)}",
                side_stage=True,
            )
        )
    seconds = prices.seconds_per_month
    object_bytes = batch * item_bytes * OBJECT_BYTES_PER_ITEM_BYTE
    receipt_gb_per_month = invocations * batch * RECEIPT_BYTES_PER_ITEM * seconds / GIGABYTE
    gb_per_month = invocations * object_bytes * seconds / GIGABYTE
    plan.archive_gb_per_month = gb_per_month + receipt_gb_per_month
    plan.archive_storage_after_year_usd = (
        storage_after_months_usd(gb_per_month, object_bytes, settings.archive_lifecycle, prices, YEAR_MONTHS)
        + receipt_gb_per_month * YEAR_MONTHS * prices.s3_standard_gb_month
    )
    log_gb = puts * ACCESS_LOG_RECORD_BYTES * settings.archive_access_log_retention_days * 86_400 / GIGABYTE
    executions = invocations * invocation_seconds(batch)
    return [
        Component(
            "archive λ",
            f"{lanes} lanes, {invocations:,.1f} invocations/s of {batch:,.0f} delta items",
            lambda_monthly_usd(executions, ARCHIVE_MEMORY_MB, invocations, prices),
        ),
        Component(
            "archive S3 requests",
            f"{invocations:,.1f} batch objects/s with their receipts, {plan.archive_puts_per_message:.5f} PUTs/message",
            puts * prices.s3_put_request * seconds,
        ),
        Component(
            "archive S3 storage",
            f"+{plan.archive_gb_per_month / 1024:,.2f} TB a month in objects of {object_bytes / 1024:,.0f} KB, "
            "each month's kept for ever (this month's shown)",
            monthly_storage_usd(gb_per_month, object_bytes, settings.archive_lifecycle, prices)
            + receipt_gb_per_month * prices.s3_standard_gb_month,
        ),
        Component(
            "archive access logs",
            f"{log_gb / 1024:,.2f} TB held ({settings.archive_access_log_retention_days} days of logs)",
            log_gb * prices.s3_standard_gb_month,
        ),
    ]
