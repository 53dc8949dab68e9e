"""The ingest stage: the Kinesis data stream's shards and what it costs."""

from __future__ import annotations

import math

from planner.inputs import GIGABYTE, Workload
from planner.plan import Component, DesignPlan
from planner.prices import PriceTable

SHARD_RECORDS_PER_SECOND = 1000
SHARD_BYTES_PER_SECOND = 1024 * 1024


def kinesis_shards(workload: Workload) -> int:
    by_records = workload.rate / SHARD_RECORDS_PER_SECOND
    by_bytes = workload.rate * workload.record_bytes / SHARD_BYTES_PER_SECOND
    return max(1, math.ceil(max(by_records, by_bytes)))


def kinesis_monthly_usd(workload: Workload, prices: PriceTable) -> float:
    """On-demand: the stream-hour, data in at 1-KB-rounded records, one consumer reading it back."""
    increment = prices.kinesis_record_increment_bytes
    billed_bytes = math.ceil(workload.record_bytes / increment) * increment
    seconds = prices.seconds_per_month
    ingest = workload.rate * billed_bytes * seconds / GIGABYTE * prices.kinesis_ingest_per_gb
    retrieval = workload.rate * workload.record_bytes * seconds / GIGABYTE * prices.kinesis_retrieval_per_gb
    return prices.hours_per_month * prices.kinesis_stream_hour + ingest + retrieval


def plan_ingest(plan: DesignPlan, workload: Workload, prices: PriceTable) -> Component:
    """The stream's shards into `plan`; its line of the plan."""
    plan.kinesis_shards = kinesis_shards(workload)
    return Component(
        "Kinesis (on-demand)",
        f"{plan.kinesis_shards} shards' worth of writes",
        kinesis_monthly_usd(workload, prices),
    )
