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

from planner.inputs import ServiceTimes
from planner.model import OURS, plan_design
from planner.plan import Flag
from planner.prices import load_price_table
from stacks.settings import PipelineSettings, SettingsError, declared_workload, planned_settings


def capacity_flags(settings: PipelineSettings) -> list[Flag]:
    """What the model flags for this pipeline at `targetMessagesPerSecond` with these settings."""
    plan = plan_design(
        declared_workload(settings),
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
