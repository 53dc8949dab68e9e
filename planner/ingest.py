"""The ingest stage: the Kinesis data stream's shards, in either capacity mode, and what it costs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.inputs import GIGABYTE, CapacityMode, Settings, Workload
from planner.plan import Component, DesignPlan, Flag
from planner.prices import PriceTable

SHARD_RECORDS_PER_SECOND = 1000
SHARD_BYTES_PER_SECOND = 1024 * 1024
PROVISIONED_SHARD_UTILIZATION = 0.7
"""The share of a provisioned shard's write limits the planner fills when it suggests a shard
count: TradeIDs hash evenly over the shards only on average, and a burst above a shard's limit
is throttled at the producer."""


def shards_filled(workload: Workload) -> float:
    """Shards' worth of writes, by the tighter of the per-shard limits.

    One record per message, 1,000 records/s binds below 1,049 bytes a message; aggregated,
    a record carries a shard's messages by the hundred, so 1 MiB/s binds. The bytes are the
    messages' either way: an aggregate's framing and key table are left out as a plain
    record's partition key is (both a few per cent of a 300-byte message).
    """
    by_records = workload.kinesis_records_per_second / SHARD_RECORDS_PER_SECOND
    by_bytes = workload.rate * workload.record_bytes / SHARD_BYTES_PER_SECOND
    return max(by_records, by_bytes)


def kinesis_shards(workload: Workload) -> int:
    """Shards the writes fill by the per-shard limits (what an on-demand stream grows to)."""
    return max(1, math.ceil(shards_filled(workload)))


def suggested_provisioned_shards(workload: Workload) -> int:
    """A provisioned shard count that fills each shard to `PROVISIONED_SHARD_UTILIZATION`."""
    return max(1, math.ceil(shards_filled(workload) / PROVISIONED_SHARD_UTILIZATION))


def on_demand_stream_monthly_usd(workload: Workload, prices: PriceTable) -> float:
    """On-demand: the stream-hour, data in at 1-KB-rounded records, one consumer reading it back.

    The rounding is per Kinesis record: an aggregate of ~50 KB rounds up by at most 1 KB,
    where a 300-byte message sent alone is billed as 1 KB.
    """
    increment = prices.kinesis_record_increment_bytes
    billed_bytes = math.ceil(workload.kinesis_record_bytes / increment) * increment
    seconds = prices.seconds_per_month
    records = workload.kinesis_records_per_second
    ingest = records * billed_bytes * seconds / GIGABYTE * prices.kinesis_ingest_per_gb
    retrieval = records * workload.kinesis_record_bytes * seconds / GIGABYTE * prices.kinesis_retrieval_per_gb
    return prices.hours_per_month * prices.kinesis_stream_hour + ingest + retrieval


def provisioned_stream_monthly_usd(workload: Workload, shards: int, prices: PriceTable) -> float:
    """Provisioned: every shard-hour, and each Kinesis record's PUT payload units (25 KB each, rounded up):
    a full aggregate of 50 KiB is 2 units for its ~150 messages of 300 bytes, a plain record 1 unit a message.

    Reading by the one shared-throughput consumer (the state function's mapping) is included.
    """
    units_per_record = math.ceil(workload.kinesis_record_bytes / prices.kinesis_put_payload_unit_bytes)
    puts = (
        workload.kinesis_records_per_second
        * units_per_record
        * prices.seconds_per_month
        * prices.kinesis_put_payload_unit
    )
    return shards * prices.kinesis_shard_hour * prices.hours_per_month + puts


@dataclass(frozen=True)
class StreamModes:
    """The stream priced in both capacity modes (`stream_modes`)."""

    on_demand_usd: float
    provisioned_shards: int  # the configured count when provisioned, else the suggested one
    provisioned_usd: float

    @property
    def cheaper(self) -> CapacityMode:
        return "provisioned" if self.provisioned_usd < self.on_demand_usd else "on-demand"


def stream_modes(workload: Workload, settings: Settings, prices: PriceTable) -> StreamModes:
    """On-demand against provisioned with the configured shard count, or the suggested one."""
    stream = settings.stream
    shards = stream.shard_count if stream.provisioned else suggested_provisioned_shards(workload)
    return StreamModes(
        on_demand_usd=on_demand_stream_monthly_usd(workload, prices),
        provisioned_shards=shards,
        provisioned_usd=provisioned_stream_monthly_usd(workload, shards, prices),
    )


def plan_ingest(plan: DesignPlan, workload: Workload, settings: Settings, prices: PriceTable) -> Component:
    """The stream's shards into `plan`, with a flag when provisioned shards are too few; its line of the plan."""
    needed = kinesis_shards(workload)
    stream = settings.stream
    if not stream.provisioned:
        plan.kinesis_shards = needed
        return Component(
            "Kinesis (on-demand)",
            f"{needed} shards' worth of writes",
            on_demand_stream_monthly_usd(workload, prices),
        )
    plan.kinesis_shards = stream.shard_count
    if stream.shard_count < needed:
        plan.flags.append(
            Flag(
                f"{stream.shard_count} provisioned Kinesis shards are too few: {workload.rate:,.0f} msg/s of "
                f"{workload.record_bytes} B{' in KPL aggregates' if workload.aggregated else ''} fill {needed} "
                "shards' write limits",
                f"raise streamMode shardCount to {suggested_provisioned_shards(workload)}",
            )
        )
    return Component(
        "Kinesis (provisioned)",
        f"{stream.shard_count} shards",
        provisioned_stream_monthly_usd(workload, stream.shard_count, prices),
    )
