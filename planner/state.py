"""The state stage: Kinesis -> state function -> StateTable, its executions and write units."""

from __future__ import annotations

import math

from planner.ingest import suggested_provisioned_shards
from planner.inputs import (
    KINESIS_POLL_SECONDS,
    KINESIS_READS_PER_SECOND,
    MAX_PARALLELIZATION_FACTOR,
    ServiceTimes,
    Settings,
    Workload,
    cpu_slowdown,
    lambda_monthly_usd,
    steady_batch,
)
from planner.map import write_units_of
from planner.plan import STAGE_BUSY_TARGET, Component, DesignPlan, Flag, PlanInputs, StageTiming

STATE_ITEM_OVERHEAD_BYTES = 110  # ContentDigest, attribute names, the Hierarchy map's overhead
KINESIS_AGGREGATION_RULE = "Note that parallelization factor will not work if you are using Kinesis aggregation."
"""The Lambda Developer Guide, "Using AWS Lambda with Amazon Kinesis" (the paragraph on
`ParallelizationFactor`), word for word: why a KPL-aggregating producer's state stage runs one
batch of a shard at a time (`state_lanes_per_shard`) and gets its concurrency from shards."""


def lambda_state_rate(times: ServiceTimes, settings: Settings) -> float:
    """Our state instance's messages/s in Lambda: the measured rate, its CPU part slowed down by memory."""
    batch = settings.state_batch_size
    measured_seconds = batch / times.state_messages_per_second
    extra_cpu = batch * times.state_cpu_us_per_message / 1e6 * (cpu_slowdown(settings.state_memory_mb) - 1.0)
    return batch / (measured_seconds + extra_cpu)


def original_state_rate(times: ServiceTimes, settings: Settings) -> float:
    """What the original's authors measured per instance, whatever the memory."""
    return times.original_state_messages_per_second


def state_lanes_per_shard(workload: Workload, settings: Settings) -> int:
    """The state batches one Kinesis shard runs at once: `stateParallelizationFactor`, or 1 when the
    producer sends KPL aggregates (`KINESIS_AGGREGATION_RULE`). Aggregated, the state stage's
    concurrency is the stream's shards, one lane each (`state_shards_needed`)."""
    return 1 if workload.aggregated else settings.state_parallelization_factor


def state_lane_busy(workload: Workload, lanes: int, instance_rate: float) -> float:
    """How busy each of `lanes` state lanes is: its Kinesis records' messages over what an instance does."""
    per_lane = workload.kinesis_records_per_second / lanes
    return per_lane * workload.messages_per_kinesis_record / instance_rate


def state_shards_needed(workload: Workload, instance_rate: float) -> int:
    """The fewest shards whose state lanes, one a shard (`state_lanes_per_shard` of an aggregating
    producer), are each within `STAGE_BUSY_TARGET`."""
    shards = max(1, math.ceil(workload.rate / (instance_rate * STAGE_BUSY_TARGET)))
    while state_lane_busy(workload, shards, instance_rate) > STAGE_BUSY_TARGET:  # a float's last digit
        shards += 1
    return shards


def _more_shards(given: PlanInputs, instance_rate: float) -> str:
    """The change that lets an aggregating producer's state stage keep up: shards, as many as its
    one lane a shard needs within the busy target, and at least what the writes fill."""
    shards = max(state_shards_needed(given.workload, instance_rate), suggested_provisioned_shards(given.workload))
    why = "KPL aggregates get no parallelization factor, one state lane a shard"
    if given.settings.stream.provisioned:
        return f"raise streamMode shardCount to {shards} ({why})"
    return f'set streamMode to {{"mode": "provisioned", "shardCount": {shards}}} ({why})'


def plan_state(
    plan: DesignPlan,
    given: PlanInputs,
) -> Component:
    """The state function's executions and StateTable writes into `plan`, with its flag; its line of the plan."""
    rate = given.workload.rate
    instance_rate = given.design.state_rate(given.times, given.settings)
    plan.state_executions = rate / instance_rate
    per_shard_rate = rate / plan.kinesis_shards
    lanes_per_shard = state_lanes_per_shard(given.workload, given.settings)
    plan.state_parallelization_needed = math.ceil(per_shard_rate / instance_rate)
    if plan.state_parallelization_needed > lanes_per_shard:
        if given.workload.aggregated:
            change = _more_shards(given, instance_rate)
        elif plan.state_parallelization_needed > MAX_PARALLELIZATION_FACTOR:
            change = "more shards (provisioned mode) or a faster state function: no factor up to 10 suffices"
        else:
            change = f"set stateParallelizationFactor to {plan.state_parallelization_needed}"
        plan.flags.append(
            Flag(
                f"one state instance does {instance_rate:,.0f} msg/s but a shard brings {per_shard_rate:,.0f} msg/s",
                change,
            )
        )
    state_item = write_units_of(given.workload.record_bytes + STATE_ITEM_OVERHEAD_BYTES)
    # One conditional write per message, duplicates included (a failed condition is billed),
    # except those an in-batch selection never sends.
    writes_per_message = given.workload.state_writes_per_message if given.design.selects_in_batch else 1.0
    plan.state_write_units_per_second = rate * writes_per_message * state_item
    # Batches, polls and invocations count Kinesis records; the work and the duration count
    # messages: a batch of full aggregates holds `messages_per_kinesis_record` times as many.
    messages_per_record = given.workload.messages_per_kinesis_record
    records = given.workload.kinesis_records_per_second
    full_batch = given.workload.records_per_invocation(given.settings.state_batch_size)
    state_invocations = records / full_batch
    lanes = plan.kinesis_shards * lanes_per_shard
    per_lane = records / lanes
    # Lambda reads a shard once a second, and again as soon as it has handed a batch over
    # while the shard fills batches faster (up to five reads a second).
    poll_seconds = max(1.0 / KINESIS_READS_PER_SECOND, min(KINESIS_POLL_SECONDS, full_batch / per_lane))
    batch = steady_batch(full_batch, per_lane, poll_seconds, lambda b: b * messages_per_record / instance_rate)
    plan.timings.append(
        StageTiming(
            "state",
            lanes=lanes,
            batch=batch,
            interval_seconds=batch / per_lane,
            invocation_seconds=batch * messages_per_record / instance_rate,
            busy=state_lane_busy(given.workload, lanes, instance_rate),
        )
    )
    return Component(
        "state λ",
        f"{plan.state_executions:,.1f} concurrent, {state_invocations:,.0f} invocations/s",
        lambda_monthly_usd(plan.state_executions, given.settings.state_memory_mb, state_invocations, given.prices),
    )
