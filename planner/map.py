"""The map stage: StateTable stream -> map function -> DeltaTable, its batches, delta items and reads."""

from __future__ import annotations

import math

from aggregation.item_size import MAX_ITEM_BYTES
from planner.inputs import (
    KILOBYTE,
    PER_ITEM_WRITE_UNITS_PER_SECOND,
    STREAM_POLLS_PER_SECOND,
    Workload,
    cpu_slowdown,
    distinct_nodes,
    lambda_monthly_usd,
)
from planner.plan import Component, DesignPlan, Flag, PlanInputs, StageTiming

READ_UNIT_BYTES = 4 * KILOBYTE  # a strongly consistent read unit: up to 4 KB (a Query: the items read, summed)
# Sizes of a DeltaTable item's parts (bytes, DynamoDB's item size rules), fitted to the items
# the write-cost benchmark records: fixed attributes, one Deltas map entry, one producer timestamp.
DELTA_ITEM_FIXED_BYTES = 170
DELTA_NODE_BYTES = 43
DELTA_TIMESTAMP_BYTES = 10


def delta_item_bytes(workload: Workload, changes: float, *, with_timestamps: bool) -> float:
    timestamps = changes * DELTA_TIMESTAMP_BYTES if with_timestamps else 0.0
    return DELTA_ITEM_FIXED_BYTES + distinct_nodes(workload, changes) * DELTA_NODE_BYTES + timestamps


def write_units_of(size_bytes: float) -> int:
    return max(1, math.ceil(size_bytes / KILOBYTE))


def plan_map(
    plan: DesignPlan,
    given: PlanInputs,
) -> Component:
    """The map stage's batches, delta items and their reads into `plan`, with its flags; its line of the plan."""
    changes_per_second = given.workload.rate * given.workload.applied_share
    # Map: the StateTable stream has about one shard per 1,000 WCU/s partition.
    plan.state_stream_shards = max(1, math.ceil(plan.state_write_units_per_second / PER_ITEM_WRITE_UNITS_PER_SECOND))
    per_stream_shard = changes_per_second / plan.state_stream_shards
    fill_seconds = max(1.0 / STREAM_POLLS_PER_SECOND, given.settings.map_batching_window_seconds)
    plan.effective_map_batch = max(1.0, min(float(given.settings.map_batch_size), per_stream_shard * fill_seconds))
    plan.delta_batches_per_second = changes_per_second / plan.effective_map_batch
    map_cpu = (
        plan.effective_map_batch * given.times.map_cpu_us_per_record / 1e6 * cpu_slowdown(given.settings.map_memory_mb)
    )
    map_seconds = map_cpu + given.times.write_round_trip_ms / 1e3
    plan.map_executions = plan.delta_batches_per_second * map_seconds
    delta_bytes = delta_item_bytes(
        given.workload, plan.effective_map_batch, with_timestamps=given.design.timestamps_in_delta_items
    )
    if delta_bytes > MAX_ITEM_BYTES and not given.design.splits_delta_items:
        plan.flags.append(
            Flag(
                f"a delta item would be {delta_bytes / KILOBYTE:,.0f} KB, over DynamoDB's 400 KB item limit",
                "lower mapBatchSize",
            )
        )
    item_bytes = delta_bytes
    while given.design.splits_delta_items and item_bytes > MAX_ITEM_BYTES:  # halved, as `delta_items` does
        plan.delta_items_per_batch *= 2
        item_bytes = delta_item_bytes(
            given.workload,
            plan.effective_map_batch / plan.delta_items_per_batch,
            with_timestamps=given.design.timestamps_in_delta_items,
        )
    plan.delta_item_bytes = item_bytes
    plan.delta_write_units_per_second = (
        plan.delta_batches_per_second * plan.delta_items_per_batch * write_units_of(item_bytes)
    )
    # The coverage Query reads the shard's newest items, each as large as this batch's.
    query_bytes = given.design.coverage_query_items * item_bytes
    plan.delta_read_units_per_second = plan.delta_batches_per_second * math.ceil(query_bytes / READ_UNIT_BYTES)
    fill_seconds_per_batch = plan.effective_map_batch / per_stream_shard
    if map_seconds > fill_seconds_per_batch:
        plan.flags.append(
            Flag(
                f"a map invocation takes {map_seconds:.2f} s but its stream shard fills a batch every "
                f"{fill_seconds_per_batch:.2f} s",
                "give the map function more memory (CPU scales with it) or a longer batching window",
            )
        )
    plan.timings.append(
        StageTiming(
            "map",
            lanes=plan.state_stream_shards,
            batch=plan.effective_map_batch,
            interval_seconds=fill_seconds_per_batch,
            invocation_seconds=map_seconds,
            busy=map_seconds / fill_seconds_per_batch,
        )
    )
    return Component(
        "map λ",
        f"{plan.map_executions:,.1f} concurrent, {plan.delta_batches_per_second:,.1f} invocations/s",
        lambda_monthly_usd(
            plan.map_executions, given.settings.map_memory_mb, plan.delta_batches_per_second, given.prices
        ),
    )
