"""Can these settings carry `targetMessagesPerSecond`? The planner's model, run at synthesis.

A stage that cannot keep up does not fail: its iterator age grows until stream records
expire after 24 hours, and then they are lost. So `cdk synth` plans the declared target
rate with the capacity planner's own model (`planner.model`, the same one
`python -m benchmarks.capacity` prints) and the settings the stack is built from:

- `capacityCheck: refuse` (the default): any stage that cannot keep up stops synthesis
  with one line naming it and the setting to change;
- `capacityCheck: warn`: the same findings become CDK warnings and the stack synthesizes
  (for a deliberately undersized test deployment, say).

Findings that need an account-side action rather than a setting (a table over the default
40,000 write units a second quota) are always warnings.

The plan uses the planner's default workload (300-byte records, 10 % duplicates, 5 %
out-of-order, 20 % modifications, a 5 x 5 x 3 hierarchy; with `producerAggregation`, full KPL
aggregates: shards sized by bytes and state batches of aggregates) and default service times (a
20 ms write, a 25 ms transaction, the measured per-message CPU): a model, not a promise;
`python -m benchmarks.capacity` plans any other workload with the same settings.
"""

from __future__ import annotations

from aws_cdk import Annotations, Stack

from aggregation.names import TOKEN_AND_MARKERS
from planner.inputs import ServiceTimes, Settings, Workload
from planner.model import OURS, plan_design
from planner.plan import Flag
from planner.prices import load_price_table
from stacks.settings import PipelineSettings, SettingsError
from stacks.stages import MAP_MEMORY_MB, STATE_MEMORY_MB


def planned_settings(settings: PipelineSettings) -> Settings:
    """The stack's settings as the planner's model takes them: one reading of cdk.json for both."""
    return Settings(
        state_batch_size=settings.state_batch_size,
        state_parallelization_factor=settings.state_parallelization_factor,
        map_batch_size=settings.map_batch_size,
        map_batching_window_seconds=settings.map_batching_window_seconds,
        reduce_batch_size=settings.reduce_batch_size,
        markers=settings.reduce_idempotency == TOKEN_AND_MARKERS,
        state_memory_mb=STATE_MEMORY_MB,
        map_memory_mb=MAP_MEMORY_MB,
        reduce_memory_mb=settings.reduce_memory_mb,
        aggregate_slices=settings.aggregate_slices,
        reduce_parallelization_factor=settings.reduce_parallelization_factor,
        state_table=settings.state_table_capacity,
        delta_table=settings.delta_table_capacity,
        aggregate_table=settings.aggregate_table_capacity,
        stream=settings.stream_mode,
        archive_batch_size=settings.archive_batch_size,
        archive_lifecycle=settings.archive_lifecycle,
        archive_access_log_retention_days=settings.archive_access_log_retention_days,
        archive_registry_shards=settings.archive_registry_shards,
        archive_parallelization_factor=settings.archive_parallelization_factor,
    )


def capacity_flags(settings: PipelineSettings) -> list[Flag]:
    """What the model flags for this pipeline at `targetMessagesPerSecond` with these settings."""
    plan = plan_design(
        Workload(rate=settings.target_messages_per_second, aggregated=settings.producer_aggregation),
        planned_settings(settings),
        ServiceTimes(),
        load_price_table(),
        OURS,
    )
    return plan.flags


def check_capacity(stack: Stack, settings: PipelineSettings) -> None:
    """Refuse (`capacityCheck: refuse`) or warn about a target rate the settings cannot carry."""
    flags = capacity_flags(settings)
    stalls = [flag for flag in flags if flag.blocking]
    rate = f"{settings.target_messages_per_second:,} msg/s"
    if stalls and settings.capacity_check == "refuse":
        findings = "; ".join(f"{flag.problem} -> {flag.change}" for flag in stalls)
        raise SettingsError(
            f"cdk.json context 'targetMessagesPerSecond' ({rate}) is more than these settings carry "
            f"(capacity planner): {findings}. Change them, or set capacityCheck to 'warn' to synthesize anyway"
        )
    for index, flag in enumerate(flags, start=1):
        kind = "cannot keep up" if flag.blocking else "needs an account-side change"
        Annotations.of(stack).add_warning_v2(
            f"@exactly-once/capacity-{index}",
            f"at targetMessagesPerSecond {rate} the pipeline {kind}: {flag.problem} -> {flag.change}",
        )
