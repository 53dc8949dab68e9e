"""The archive stage: DeltaTable stream -> archive function -> one S3 object per delta item.

Per invocation (`lambdas/archive_function`): a compare-and-swap update of one registry shard
``metastore/registry/<k>.json`` to claim the batch's items (GET, then PUT with If-Match), a
conditional PUT per item (eight at a time), and a second update of the same shard to settle
them. `archiveParallelizationFactor` archive lanes per DeltaTable stream shard (the object PUTs
bound a lane: eight at a time, a round trip each).

What it costs: the object PUTs, the registry's GETs and PUTs (and their resends when another
invocation's update came first), the objects' storage, which grows for ever (the archive is
the audit trail: nothing expires), and the server access logs (one record per request, kept
`archiveAccessLogRetentionDays`). A lifecycle rule (`archiveLifecycle`) moves objects to a
cheaper class after some days, but S3 does not transition objects below 128 KB by default,
and the infrequent-access and Glacier classes bill small objects as larger ones: for delta
objects of a few KB it moves nothing.

The registry is `archiveRegistryShards` keys: every invocation updates one of them twice
(`registry_shard_for`: a hash of the batch, so invocations spread evenly over the shards),
each update a GET and a PUT that fails if another update of the same shard landed in
between. So a shard's updates a second, times the two round trips an update takes, is how
busy that key is; past 1 it cannot keep up whatever the batch size. The plan holds the
busiest shard (the average one times `SHARD_SKEW`) to the same 70 % as every stage: no hot
object. A retry whose other boundaries hash to another shard settles in two: rare (only
after a failed invocation), so not modelled.
"""

from __future__ import annotations

import math

from aggregation.archive import MAX_REGISTRY_SHARDS
from planner.inputs import (
    GIGABYTE,
    MAX_PARALLELIZATION_FACTOR,
    STREAM_POLLS_PER_SECOND,
    ArchiveLifecycle,
    ServiceTimes,
    Settings,
    lambda_monthly_usd,
    steady_batch,
)
from planner.plan import STAGE_BUSY_TARGET, Component, DesignPlan, Flag, StageTiming
from planner.prices import PriceTable

ARCHIVE_MEMORY_MB = 256  # stacks/archive.py
ARCHIVE_WRITE_CONCURRENCY = 8  # the archive handler's DEFAULT_WRITE_CONCURRENCY
REGISTRY_UPDATES_PER_INVOCATION = 2  # claim, then settle
ACCESS_LOG_RECORD_BYTES = 400  # one server access log line, an estimate (they run 300-500 bytes)
DAYS_PER_MONTH = 30.4
YEAR_MONTHS = 12


SHARD_SKEW = 1.25
"""The busiest registry shard's load over the average one's: invocations hash to shards at
random, so some take more than their share (a margin, as the slices' hottest item has)."""


def registry_attempts(updates_per_second: float, update_seconds: float, lanes: int, shards: int = 1) -> float:
    """Tries per registry update: it fails when another lane's update of the same shard lands
    within its GET-to-PUT window (Poisson arrivals, as for the reducers' transactions; each
    update picks one of `shards` at random); one lane's never overlap."""
    others = updates_per_second * (lanes - 1) / lanes / shards
    return math.exp(min(others * update_seconds, 50.0))


def registry_busy(updates_per_second: float, update_seconds: float, lanes: int, shards: int) -> float:
    """How busy the busiest of `shards` registry keys is (`plan_archive`'s figure)."""
    tries = registry_attempts(updates_per_second, update_seconds, lanes, shards)
    return updates_per_second / shards * (SHARD_SKEW if shards > 1 else 1.0) * tries * update_seconds


def suggested_registry_shards(updates_per_second: float, update_seconds: float, lanes: int) -> int:
    """The fewest registry shards (a power of two) that keep the busiest within `STAGE_BUSY_TARGET`."""
    shards = 1
    while shards < MAX_REGISTRY_SHARDS and registry_busy(updates_per_second, update_seconds, lanes, shards) > (
        STAGE_BUSY_TARGET
    ):
        shards *= 2
    return shards


def registry_shards_needed(plan: DesignPlan, times: ServiceTimes) -> int:
    """The fewest registry shards that keep `plan`'s busiest within the target (its updates as planned)."""
    update_seconds = 2 * times.s3_round_trip_ms / 1e3
    (archive,) = [timing for timing in plan.timings if timing.stage == "archive"]
    return suggested_registry_shards(plan.archive_registry_updates_per_second, update_seconds, archive.lanes)


def archive_factor_needed(lane_busy: float, settings: Settings) -> int:
    """The archive parallelization factor that brings lanes `lane_busy` busy now within the target
    (lanes share a shard's objects evenly; capped at Lambda's 10)."""
    needed = math.ceil(settings.archive_parallelization_factor * lane_busy / STAGE_BUSY_TARGET)
    return min(MAX_PARALLELIZATION_FACTOR, max(1, needed))


def monthly_storage_usd(gb: float, object_bytes: float, lifecycle: ArchiveLifecycle, prices: PriceTable) -> float:
    """A month of `gb` of archived objects of `object_bytes` each, in the class the rule moved them to.

    Objects below 128 KB stay in Standard (S3's default minimum for transitions).
    """
    if not lifecycle.transitions or object_bytes < 128 * 1024:
        return gb * prices.s3_standard_gb_month
    price = prices.s3_storage_classes[lifecycle.storage_class]
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
    plan: DesignPlan, *, object_bytes: float, settings: Settings, times: ServiceTimes, prices: PriceTable
) -> list[Component]:
    """The archive's invocations, requests, registry, storage and logs into `plan`; its lines of the plan."""
    objects = plan.delta_batches_per_second * plan.delta_items_per_batch
    lanes = plan.delta_stream_shards * settings.archive_parallelization_factor
    round_trip = times.s3_round_trip_ms / 1e3
    update_seconds = 2 * round_trip  # GET, then the conditional PUT

    shards = settings.archive_registry_shards

    def invocation_seconds(batch: float) -> float:
        updates = objects / batch * REGISTRY_UPDATES_PER_INVOCATION
        tries = registry_attempts(updates, update_seconds, lanes, shards)
        puts = math.ceil(batch / ARCHIVE_WRITE_CONCURRENCY)
        return (REGISTRY_UPDATES_PER_INVOCATION * tries * 2 + puts) * round_trip

    per_lane = objects / lanes
    batch = steady_batch(settings.archive_batch_size, per_lane, 1.0 / STREAM_POLLS_PER_SECOND, invocation_seconds)
    invocations = objects / batch
    updates = invocations * REGISTRY_UPDATES_PER_INVOCATION
    tries = registry_attempts(updates, update_seconds, lanes, shards)
    plan.archive_objects_per_second = objects
    plan.archive_registry_updates_per_second = updates
    plan.archive_registry_conflicts_per_second = updates * (tries - 1)
    plan.archive_registry_shards = shards
    # How busy the busiest registry shard is: the share of each second an update holds it open.
    hottest_shard_updates = updates / shards * (SHARD_SKEW if shards > 1 else 1.0)
    plan.archive_registry_busy = hottest_shard_updates * tries * update_seconds
    full = settings.archive_batch_size
    lane_busy = per_lane / full * invocation_seconds(full)
    plan.archive_lane_busy = lane_busy
    plan.timings.append(
        StageTiming(
            "archive",
            lanes=lanes,
            batch=batch,
            interval_seconds=batch / per_lane,
            invocation_seconds=invocation_seconds(batch),
            busy=max(lane_busy, plan.archive_registry_busy),
            on_latency_path=False,
        )
    )
    if lane_busy > 1:
        plan.flags.append(
            Flag(
                f"each of {lanes} archive lanes would be {lane_busy:.0%} busy writing "
                f"{per_lane:,.0f} delta objects a second",
                f"set archiveParallelizationFactor to {archive_factor_needed(lane_busy, settings)}",
                side_stage=True,
            )
        )
    if plan.archive_registry_busy > 1:
        plan.flags.append(
            Flag(
                f"the busiest of {shards} registry shards would take {hottest_shard_updates:,.0f} "
                f"compare-and-swap updates a second, {plan.archive_registry_busy:.0%} of what one S3 key "
                f"serialises at a {times.s3_round_trip_ms:g} ms round trip",
                f"raise archiveRegistryShards to {suggested_registry_shards(updates, update_seconds, lanes)}",
                side_stage=True,
            )
        )
    gets = updates * tries
    puts = objects + updates * tries
    seconds = prices.seconds_per_month
    gb_per_month = objects * object_bytes * seconds / GIGABYTE
    plan.archive_gb_per_month = gb_per_month
    plan.archive_storage_after_year_usd = storage_after_months_usd(
        gb_per_month, object_bytes, settings.archive_lifecycle, prices, YEAR_MONTHS
    )
    log_gb = (gets + puts) * ACCESS_LOG_RECORD_BYTES * settings.archive_access_log_retention_days * 86_400 / GIGABYTE
    executions = invocations * invocation_seconds(batch)
    return [
        Component(
            "archive λ",
            f"{lanes} lanes, {invocations:,.1f} invocations/s of {batch:,.0f} delta items",
            lambda_monthly_usd(executions, ARCHIVE_MEMORY_MB, invocations, prices),
        ),
        Component(
            "archive S3 requests",
            f"{objects:,.0f} object PUTs/s, {updates:,.1f} registry updates/s over {shards} shards",
            (puts * prices.s3_put_request + gets * prices.s3_get_request) * seconds,
        ),
        Component(
            "archive S3 storage",
            f"+{gb_per_month / 1024:,.2f} TB a month, each month's kept for ever (this month's shown)",
            monthly_storage_usd(gb_per_month, object_bytes, settings.archive_lifecycle, prices),
        ),
        Component(
            "archive access logs",
            f"{log_gb / 1024:,.2f} TB held ({settings.archive_access_log_retention_days} days of logs)",
            log_gb * prices.s3_standard_gb_month,
        ),
    ]
