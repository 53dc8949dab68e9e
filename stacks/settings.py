"""Every tunable of the pipeline, read once from the CDK context and validated.

`cdk.json` holds each setting with its default under `"context"`; `cdk deploy -c key=value`
overrides one. The CDK CLI hands command-line values over as strings, so every reader
below accepts the JSON type *and* its string spelling (``"100"``, ``'{"FAILURE_...": 5}'``).

A bad value stops synthesis with a one-line :class:`SettingsError` naming the setting, what
it must be and what it got, rather than a deploy that fails (or, worse, silently breaks
exactly-once) much later.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, cast

from aws_cdk import RemovalPolicy
from aws_cdk import aws_logs as logs

from aggregation.aggregate_items import MAX_SLICES
from aggregation.delta_items import DEFAULT_DELTA_TTL_DAYS, MIN_DELTA_TTL_DAYS
from aggregation.exact import DYNAMODB_MAX_DIGITS
from aggregation.hierarchy import LEVEL_LIST_SEPARATOR, hierarchy_levels_violation
from aggregation.names import TOKEN_AND_MARKERS, TOKEN_ONLY
from aggregation.setting_changes import StateSettings
from aggregation.transactions import DEFAULT_MARKER_TTL_DAYS, MIN_MARKER_TTL_DAYS
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN, ValueDomain
from planner.inputs import (
    ARCHIVE_STORAGE_CLASSES,
    ArchiveLifecycle,
    CapacityMode,
    ServiceTimes,
    StreamCapacity,
    TableCapacity,
    Workload,
)
from planner.inputs import Settings as PlannerSettings
from planner.load_profile import LOAD_PROFILES, CapacityChoice, LoadProfile
from planner.prices import load_price_table
from planner.scale_out import AUTO_REDUCE_MEMORY_CANDIDATES, REDUCE_BATCH_CANDIDATES, AutoSettings, settings_for_rate

ContextReader = Callable[[str], Any]
"""`node.try_get_context`: returns the raw context value for a key, or None when unset."""

ReduceIdempotency = Literal["crt+marker", "crt"]
CapacityCheck = Literal["refuse", "warn"]

FAULT_INJECTION_VARIABLES: Final[tuple[str, ...]] = (
    "FAILURE_STATE_LAMBDA_PCT",
    "FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT",
    "FAILURE_MAP_LAMBDA_PCT",
    "FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT",
    "FAILURE_REDUCE_LAMBDA_PCT",
    "FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT",
    "FAILURE_ARCHIVE_LAMBDA_PCT",
    "FAILURE_ARCHIVE_LAMBDA_AFTER_WRITE_PCT",
)
"""The fault-injection variables of the four functions this stack deploys (docs/design.md, "Fault injection")."""

REDUCE_IDEMPOTENCY_MODES: Final[tuple[ReduceIdempotency, ...]] = (TOKEN_AND_MARKERS, TOKEN_ONLY)
POWERTOOLS_LAYER_FROM_SSM: Final[str] = "ssm"
"""`powertoolsLayerVersion` value meaning "the layer ARN AWS publishes for our Powertools release"."""
REMOVAL_POLICIES: Final[Mapping[str, RemovalPolicy]] = {
    "retain": RemovalPolicy.RETAIN,
    "destroy": RemovalPolicy.DESTROY,
}

# CloudWatch Logs accepts only these retention periods (days).
_LOG_RETENTION_DAYS: Final[Mapping[int, logs.RetentionDays]] = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}

AUTO: Final = "auto"
"""The value of a setting left to the capacity planner: `stateParallelizationFactor`,
`reduceParallelizationFactor`, `aggregateSlices`, `reduceMemoryMb`, `reduceBatchSize` and
`archiveParallelizationFactor` default to it.
Synthesis replaces it with what `planner.scale_out.settings_for_rate` chooses for
`targetMessagesPerSecond` with the other settings as set: the least state parallelization that
keeps the state lanes within 70 % busy (1 with `producerAggregation`: the factor does not work
with Kinesis aggregation, and the capacity check asks for shards instead),
the cheapest slices, reduce parallelization, reduce memory (256 to 1,769 MB) and reduce batch size
(10 to 1,000, and the most full map batches one transaction per node group holds) that keep the
reducers within 70 % busy, the hottest aggregate item within 500 write
units a second (half a partition's 1,000, the margin for slices a hash loads unevenly) and, since a
larger batch gathers for longer, the modelled p50 within 1 s (batches of 10 when none does), and the
least archive parallelization that keeps the archive within 70 %. At the default 400 msg/s that is
state 2, reduce 1, one slice, 256 MB, batches of 10 and archive 1; at 50,000 msg/s state 3, reduce 1,
128 slices, 1,769 MB, batches of 46 and archive 2 (`python -m benchmarks.capacity --rate 50000`
prints the plan). With `loadProfile` steady the capacity settings left `auto` (`CAPACITY_SETTINGS`)
are chosen with them, and the reduce choices ranked at the provisioned prices. An integer sets it
instead. A new rate can change the slices, the reduce lanes and batch size of a deployed stack:
safe with `crt+marker` markers. In `crt` mode a reduce transaction's token is all that stops a
retried batch from being applied twice, and it names the units the batch's delta items make, so
there `auto` plans nothing that forms a transaction: one slice, one lane (parallelization factor 1)
and batches of 10 whatever the rate or the planner's service times (a release's defaults), and
the settings guard refuses a change of any of them over stored state
(`aggregation.setting_changes`): a new rate must not re-form the batches a deploy leaves in
flight (issue 32). A rate they cannot carry fails the capacity check: set them explicitly on a
new stack."""

TABLE_CAPACITY_SETTINGS: Final[Mapping[str, str]] = {
    "stateTableCapacity": "StateTable",
    "deltaTableCapacity": "DeltaTable",
    "aggregateTableCapacity": "AggregateTable",
}
"""The tables whose capacity mode is a setting, each to its table (`planner.tables.PIPELINE_TABLES`)."""

CAPACITY_SETTINGS: Final[frozenset[str]] = frozenset({*TABLE_CAPACITY_SETTINGS, "streamMode"})
"""The capacity settings `loadProfile` decides when they are `auto` (their default): on-demand for
`spiky`, the planner's cheaper mode at `targetMessagesPerSecond` for `steady` (`planner.load_profile`).
An object sets one instead, whatever the profile."""

TRANSACTION_SHAPING: Final[frozenset[str]] = frozenset(
    {"reduceParallelizationFactor", "aggregateSlices", "reduceBatchSize"}
)
"""The `auto` settings that decide which delta items one reduce transaction holds and where it
writes, hence its token: fixed in mode `crt` (`AUTO`), where `auto` means 1 lane, 1 slice and
batches of 10 (`REDUCE_BATCH_CANDIDATES[0]`), and carried by the settings guard."""

DEFAULT_ARCHIVE_BATCHING_WINDOW_SECONDS: Final[int] = 10
"""`archiveBatchingWindowSeconds` by default: how long the archive mapping lets a batch fill before
invoking (`MaximumBatchingWindowInSeconds`). An archive invocation makes two S3 requests whatever it
holds (its batch object and the object's receipt, `aggregation.archive`), so fuller batches are
fewer requests: at the default 400 msg/s one lane gathers about 40 delta items (some 4,000
messages) in 10 s, 0.0005 PUTs a message; at 50,000 msg/s and more a lane fills `archiveBatchSize`
well within it (`python -m benchmarks.capacity --rate R`, `planner.archive`). The archive is on no
total's way, so the wait costs no latency anyone sees; `audit reconcile` and `audit rebuild` wait
for a drained archive, at most this much longer."""

STATE_MEMORY_MB: Final = 512
MAP_MEMORY_MB: Final = 512
"""Fixed function sizes (the reduce's is `reduceMemoryMb`, `auto` by default); the capacity planner plans with them.

The map function's work is mostly CPU (decoding the stream records, summing node deltas): at
256 MB (about 0.14 vCPU) a batch of 100 state changes kept its lane 70 % busy at the planner's
default CPU figure, so any slower measurement left a map lane beyond the busy target at every
rate; 512 MB halves that CPU time for about the same GB-seconds, the lanes 58 % busy at the
default CPU figure ($14.6k a month at 1,000,000 msg/s)."""

_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
_ROLE_ARN = re.compile(r"^arn:aws:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")

DEFAULT_QUARANTINE_TTL_DAYS: Final[int] = 30
"""How long a quarantined record is kept (`quarantineTtlDays`): long enough to inspect it after the
alarm (which fires within minutes of the first one), short enough that a producer cannot fill the
table without bound and personal data in a bad record does not stay for ever."""

MIN_QUARANTINE_TTL_DAYS: Final[int] = 7
"""A week: a quarantine alarm raised on a Friday evening still finds its records on Monday."""

DELETION_PROTECTION_AUTO: Final[str] = "auto"
"""`tableDeletionProtection` value meaning "on when `removalPolicy` is `retain`"."""

MAX_OBJECT_LOCK_DAYS: Final[int] = 36500
"""S3's longest default retention (100 years)."""

DEFAULT_CONTEXT: Final[Mapping[str, Any]] = {
    "stackName": "ExactlyOnceAggregation",
    "hierarchyLevels": ["RiskType", "TradeDesk", "Region"],
    "valueIntegerDigits": DEFAULT_VALUE_DOMAIN.integer_digits,
    "valueFractionDigits": DEFAULT_VALUE_DOMAIN.fraction_digits,
    "stateBatchSize": 100,
    "stateParallelizationFactor": AUTO,
    "stateWriteConcurrency": 16,
    "mapBatchSize": 100,
    "reduceBatchSize": AUTO,
    "archiveBatchSize": 100,
    "archiveAccessLogRetentionDays": 365,
    "deltaTtlDays": DEFAULT_DELTA_TTL_DAYS,
    "markerTtlDays": DEFAULT_MARKER_TTL_DAYS,
    "reduceIdempotency": TOKEN_AND_MARKERS,
    "iteratorAgeAlarmMs": 60000,
    "logRetentionDays": 30,
    "powertoolsLayerVersion": POWERTOOLS_LAYER_FROM_SSM,
    "removalPolicy": "retain",
    "faultInjection": dict.fromkeys(FAULT_INJECTION_VARIABLES, 0),
    "loadProfile": LOAD_PROFILES[0],
    "stateTableCapacity": AUTO,
    "deltaTableCapacity": AUTO,
    "aggregateTableCapacity": AUTO,
    "mapBatchingWindowSeconds": 0,
    "reduceMemoryMb": AUTO,
    "stateVersionCacheSize": 100000,
    "targetMessagesPerSecond": 400,
    "capacityCheck": "refuse",
    "producerAggregation": False,
    "aggregateSlices": AUTO,
    "reduceParallelizationFactor": AUTO,
    "streamMode": AUTO,
    "archiveLifecycle": {"storageClass": "STANDARD"},
    "alarmEmail": "",
    "quarantineTtlDays": DEFAULT_QUARANTINE_TTL_DAYS,
    "tableDeletionProtection": DELETION_PROTECTION_AUTO,
    "breakGlassRoleArn": "",
    "archiveObjectLockDays": 0,
    "archiveBatchingWindowSeconds": DEFAULT_ARCHIVE_BATCHING_WINDOW_SECONDS,
    "archiveParallelizationFactor": AUTO,
    "customerManagedKey": False,
    "keyAdminRoleArn": "",
    "keyUserRoleArns": [],
    "upgradeDrained": False,
}
"""The defaults; `cdk.json` repeats them (a test keeps the two identical)."""

INTEGER_RANGES: Final[Mapping[str, tuple[int, int]]] = {
    "stateParallelizationFactor": (1, 10),
    "reduceParallelizationFactor": (1, 10),
    "aggregateSlices": (1, MAX_SLICES),
    "archiveParallelizationFactor": (1, 10),
    "reduceMemoryMb": (128, 10240),
    "reduceBatchSize": (1, 10000),
    "stateBatchSize": (1, 10000),
    "stateWriteConcurrency": (1, 256),
    "mapBatchSize": (1, 10000),
    "archiveBatchSize": (1, 10000),
    "archiveAccessLogRetentionDays": (1, 3653),
    "deltaTtlDays": (MIN_DELTA_TTL_DAYS, 365),
    "markerTtlDays": (MIN_MARKER_TTL_DAYS, 365),
    "iteratorAgeAlarmMs": (1000, 7 * 24 * 3600 * 1000),
    "mapBatchingWindowSeconds": (0, 300),
    "stateVersionCacheSize": (0, 10_000_000),
    "targetMessagesPerSecond": (1, 100_000_000),
    "quarantineTtlDays": (MIN_QUARANTINE_TTL_DAYS, 3650),
    "archiveObjectLockDays": (0, MAX_OBJECT_LOCK_DAYS),
    "archiveBatchingWindowSeconds": (0, 300),
    "valueIntegerDigits": (1, DYNAMODB_MAX_DIGITS),
    "valueFractionDigits": (0, DYNAMODB_MAX_DIGITS),
    "powertoolsLayerVersion": (1, 100000),
}
"""The lowest and highest value of each integer setting (`auto` aside): what synthesis accepts, and
what the settings reference (`python -m stacks.settings_reference`) prints."""


SETTING_MEANINGS: Final[Mapping[str, str]] = {
    "stackName": "CloudFormation stack name",
    "hierarchyLevels": (
        "hierarchy levels, root first; aggregate keys join them with `:`; at most 15 (the deepest key must fit "
        "DynamoDB's 2048-byte key); distinct names of 1 to 128 characters, no `:` or `,`, no surrounding whitespace "
        "(on the command line, `-c hierarchyLevels=Desk,Book`)"
    ),
    "valueIntegerDigits": (
        "a `Value` must be below 10^this in magnitude (the aggregatable domain, "
        "[Numbers](how-exactly-once-works.md#numbers))"
    ),
    "valueFractionDigits": (
        "a `Value` may have at most this many fraction digits; `valueIntegerDigits` + `valueFractionDigits` ≤ 29"
    ),
    "stateBatchSize": "Kinesis records per state invocation",
    "stateParallelizationFactor": (
        "concurrent state batches per shard; order per TradeID is kept because the partition key is the TradeID "
        "and versions are compared; `auto`: the least that keeps the state lanes within 70 % busy at "
        "`targetMessagesPerSecond`; with `producerAggregation` 1 (Lambda: the factor does not work with Kinesis "
        "aggregation; above 1 is refused)"
    ),
    "stateWriteConcurrency": (
        "bounded pool of concurrent `batch_execute_statement` calls (up to 25 conditional writes each) inside one "
        "state invocation"
    ),
    "mapBatchSize": (
        "StateTable stream records per map invocation; a batch whose delta item would exceed DynamoDB's item limit "
        "is written as several items"
    ),
    "reduceBatchSize": (
        "DeltaTable stream records (delta batches) per reduce invocation; in `crt+marker` each invocation folds "
        "them into one write of the totals per node group while a transaction holds them (in `crt`, per slice); "
        "`auto`: chosen with `aggregateSlices`, `reduceParallelizationFactor` and `reduceMemoryMb` from 10, 20, 50, "
        "100, 200, 500 and 1,000 and the most full map batches one transaction per node group holds (46 for the "
        "standard hierarchy), the modelled p50 held within 1 s (10 if none is)"
    ),
    "deltaTtlDays": "DeltaTable items expire after this many days (the stream keeps them 24 h)",
    "markerTtlDays": "reduce markers expire after this many days; must outlive the 24 h stream retention",
    "reduceIdempotency": (
        "[idempotency mode](how-exactly-once-works.md#idempotency-modes-reduceidempotency) of the reduce stage"
    ),
    "iteratorAgeAlarmMs": "alarm when a mapping's iterator age exceeds this",
    "logRetentionDays": "CloudWatch Logs retention of the functions' log groups",
    "powertoolsLayerVersion": (
        "`ssm`: the version of the layer ARN AWS publishes for the pinned Powertools "
        "(`/aws/service/powertools/python/arm64/python3.14/3.37.0`), resolved at deploy time; an integer: that "
        "version instead. Either way the layer is the publisher's `AWSLambdaPowertoolsPythonV3-python314-arm64` in "
        "the deployment's region"
    ),
    "aggregateSlices": (
        "slices of the totals: in `crt+marker` each reduce transaction adds to the slice its token names (in `crt` "
        "a delta item adds to the slice of its StateTable stream shard), so concurrent reducers write different "
        "items ([Several reducers](deploy-and-operate.md#several-reducers-aggregateslices-"
        "reduceparallelizationfactor)); `auto`: with `reduceParallelizationFactor`, `reduceMemoryMb` and "
        "`reduceBatchSize`, the cheapest that keep the reducers within 70 % busy and the hottest item within 500 "
        "write units a second at `targetMessagesPerSecond`"
    ),
    "reduceParallelizationFactor": (
        "concurrent reduce batches per DeltaTable stream shard, order kept per delta item; `auto`: chosen with "
        "`aggregateSlices`, `reduceMemoryMb` and `reduceBatchSize`"
    ),
    "streamMode": (
        "the Kinesis stream's capacity mode: provisioned for a fixed number of shards; `auto`: as `loadProfile` "
        "chooses ([Capacity](deploy-and-operate.md#capacity-the-target-rate-and-on-demand-or-provisioned-tables))"
    ),
    "removalPolicy": "what `cdk destroy` does to the tables and the stream key",
    "archiveBatchSize": "DeltaTable stream records per archive invocation",
    "archiveParallelizationFactor": (
        "concurrent archive batches per DeltaTable stream shard (the archive does not depend on order); `auto`: the "
        "least that keeps the archive's lanes within 70 % busy at `targetMessagesPerSecond`"
    ),
    "archiveBatchingWindowSeconds": (
        "`MaximumBatchingWindowInSeconds` of the archive mapping: fuller archive invocations, two S3 requests each "
        "whatever they hold, for at most this much more archive lag (`stacks/settings.py` says why)"
    ),
    "archiveAccessLogRetentionDays": "how long the archive bucket's server access logs are kept",
    "archiveLifecycle": (
        "moves archived batch objects of 128 KB and more to that class N days after they are written "
        "([Audit archive](how-exactly-once-works.md#audit-archive-s3))"
    ),
    "loadProfile": (
        "how the load behaves, which decides the capacity modes left `auto`: `spiky` (spiky or unknown load, a "
        "trial): every table and the stream on-demand, next to nothing billed at rest; `steady` (a "
        "rate that stays near `targetMessagesPerSecond` around the clock): each table and the stream in the "
        "cheaper mode at that rate, provisioned tables with auto scaling from minimums that carry it at 70 % "
        "utilisation ([Capacity](deploy-and-operate.md#capacity-the-target-rate-and-on-demand-or-provisioned-tables))"
    ),
    "stateTableCapacity": (
        "provisioned capacity with auto scaling, or on-demand; a provisioned table starts at its minimums; `auto`: "
        "as `loadProfile` chooses "
        "([Capacity](deploy-and-operate.md#capacity-the-target-rate-and-on-demand-or-provisioned-tables))"
    ),
    "deltaTableCapacity": "as `stateTableCapacity`, for the DeltaTable",
    "aggregateTableCapacity": "as `stateTableCapacity`, for the AggregateTable",
    "mapBatchingWindowSeconds": (
        "`MaximumBatchingWindowInSeconds` of the map mapping: fuller delta batches at high rates, at most this much "
        "latency"
    ),
    "reduceMemoryMb": (
        "memory of the reduce function; CPU scales with it and each reducer's CPU is on its lane's critical path; "
        "`auto`: chosen with `aggregateSlices`, `reduceParallelizationFactor` and `reduceBatchSize` from 256, 512, "
        "1,024 and 1,769 MB (faster reducers wait less, gather fewer delta batches an invocation and write the "
        "totals more often, so more memory is not always cheaper)"
    ),
    "stateVersionCacheSize": (
        "trades whose stored version each state execution environment remembers (0 off; "
        "[the version cache](how-exactly-once-works.md#fewer-state-writes-the-version-cache-stateversioncachesize))"
    ),
    "targetMessagesPerSecond": (
        "the rate the settings must carry; the `auto` settings are chosen for it, and the rest checked at synthesis "
        "with the planner's model ([Capacity](deploy-and-operate.md#capacity-the-target-rate-and-on-demand-or-"
        "provisioned-tables))"
    ),
    "capacityCheck": (
        "`refuse`: synthesis stops when a stage cannot keep up with the target; `warn`: CDK warnings instead"
    ),
    "producerAggregation": (
        "`true`: producers send KPL aggregates, so the capacity check plans full aggregates (shards by bytes, a state "
        "batch of aggregates holds thousands of messages) with one state lane a shard: Lambda's parallelization "
        "factor does not work with Kinesis aggregation, so `stateParallelizationFactor` is 1 and more shards "
        '(`streamMode` `{"mode": "provisioned", "shardCount": N}`) carry a higher rate'
    ),
    "alarmEmail": (
        "an address subscribed to the alarm topic (AWS mails a confirmation link first); empty: none (subscribe "
        "anything else to `AlarmTopicArn`)"
    ),
    "quarantineTtlDays": "quarantined records expire this many days after they were written",
    "tableDeletionProtection": "deletion protection of the four tables: `auto` (on when `removalPolicy` is `retain`)",
    "breakGlassRoleArn": (
        "an IAM role that may, besides the archive function, write and delete `deltas/` and the registry (receipts, "
        "and an earlier release's registry) (repairs)"
    ),
    "archiveObjectLockDays": (
        "above 0: the archive bucket has S3 Object Lock and each delta object is locked in governance mode for this "
        "many days"
    ),
    "customerManagedKey": (
        "`true`: one customer-managed KMS key (rotated) for the stream, tables, archive, log groups, the functions' "
        "environment variables and the alarm topic; needs `keyAdminRoleArn`"
    ),
    "keyAdminRoleArn": "the IAM role administering the customer-managed key",
    "keyUserRoleArns": (
        "IAM roles of producers and readers allowed to use the key through Kinesis, DynamoDB and S3 "
        "(`-c keyUserRoleArns=arn1,arn2`)"
    ),
    "upgradeDrained": (
        "`true` (`-c upgradeDrained=true`): you declare no reduce batch in flight, so the settings guard accepts mode "
        "`crt` over a stack a release before the guard deployed "
        "([Upgrading in place](deploy-and-operate.md#upgrading-in-place))"
    ),
    "faultInjection": (
        "percentages for `FAILURE_STATE_LAMBDA_PCT`, `FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT`, `FAILURE_MAP_…`, "
        "`FAILURE_REDUCE_…`, `FAILURE_ARCHIVE_…` ([design.md](design.md#fault-injection)): the invocation fails "
        "before committing, or after its writes were committed"
    ),
}
"""What each setting means, one table cell each: the settings reference (docs/settings.md, written by
`python -m stacks.settings_reference --write`) adds its default, its range, what `auto` chooses and what
the settings guard refuses, all from the code."""

REMOVED_SETTINGS: Final[Mapping[str, str]] = {
    "archiveRegistryShards": (
        "the archive no longer counts in compare-and-swap registry shards: each invocation writes one batch "
        "object and its receipt, each created once, so no key is shared and there is nothing to spread; the "
        "shards an earlier release wrote are still read by `audit`; remove the setting"
    ),
    "reduceReservedConcurrency": (
        "reduce no longer reserves concurrency: several reducers run at once, one per DeltaTable stream "
        "shard times reduceParallelizationFactor, each adding to slices of the totals (aggregateSlices), so "
        "the one-reducer reservation is gone; remove the setting"
    ),
}
"""Settings of earlier releases, refused with what replaced them. Refused rather than ignored: a
deploy that sets one was written for the old behaviour (a single reducer, or none reserved for a
small account), and a warning scrolls past in `cdk deploy`'s output while the stack it deploys
behaves otherwise."""

CAPACITY_MODES: Final[tuple[str, ...]] = ("on-demand", "provisioned")
CAPACITY_CHECKS: Final[tuple[str, ...]] = ("refuse", "warn")
MAX_TABLE_CAPACITY_UNITS = 1_000_000
"""A sanity bound: the per-table quota is 40,000 units a second by default and adjustable."""
TARGET_UTILIZATION_RANGE: Final[tuple[int, int]] = (20, 90)
"""`targetUtilizationPercent` of a provisioned table: what Application Auto Scaling tracks."""


class SettingsError(ValueError):
    """A context setting is missing its expected type or range; the message is one line."""


@dataclass(frozen=True)
class PipelineSettings:
    """The validated settings every construct of the stack reads (never the raw context)."""

    stack_name: str
    hierarchy_levels: tuple[str, ...]
    value_domain: ValueDomain
    state_batch_size: int
    state_parallelization_factor: int
    state_write_concurrency: int
    map_batch_size: int
    reduce_batch_size: int
    archive_batch_size: int
    archive_access_log_retention_days: int
    delta_ttl_days: int
    marker_ttl_days: int
    reduce_idempotency: ReduceIdempotency
    iterator_age_alarm_ms: int
    log_retention_days: int
    powertools_layer_version: int | None  # None: the public SSM parameter's ARN (`ssm`)
    removal_policy_name: str
    fault_injection: Mapping[str, float]
    load_profile: LoadProfile
    state_table_capacity: TableCapacity
    delta_table_capacity: TableCapacity
    aggregate_table_capacity: TableCapacity
    map_batching_window_seconds: int
    reduce_memory_mb: int
    state_version_cache_size: int
    target_messages_per_second: int
    capacity_check: CapacityCheck
    producer_aggregation: bool  # producers send KPL aggregates: the capacity check plans by bytes
    aggregate_slices: int
    reduce_parallelization_factor: int
    stream_mode: StreamCapacity
    archive_lifecycle: ArchiveLifecycle
    alarm_email: str | None
    quarantine_ttl_days: int
    table_deletion_protection: bool
    break_glass_role_arn: str | None
    archive_object_lock_days: int  # 0: no Object Lock
    archive_batching_window_seconds: int
    archive_parallelization_factor: int
    customer_managed_key: bool
    key_admin_role_arn: str | None
    key_user_role_arns: tuple[str, ...]
    # The operator declares no reduce batch in flight: the guard's Create then accepts mode `crt`
    # over a stack a release before the guard deployed (`aggregation.setting_changes.first_guard_refusal`).
    upgrade_drained: bool

    @property
    def state_settings(self) -> StateSettings:
        """The settings stored state depends on: a deploy over state compares them (`aggregation.setting_changes`)."""
        return StateSettings(
            hierarchy_levels=self.hierarchy_levels,
            value_domain=self.value_domain,
            marker_ttl_days=self.marker_ttl_days,
            reduce_idempotency=self.reduce_idempotency,
            aggregate_slices=self.aggregate_slices,
            reduce_batch_size=self.reduce_batch_size,
            reduce_parallelization_factor=self.reduce_parallelization_factor,
        )

    @property
    def removal_policy(self) -> RemovalPolicy:
        """What CloudFormation does with the stream, tables and log groups on stack deletion."""
        return REMOVAL_POLICIES[self.removal_policy_name]

    @property
    def log_retention(self) -> logs.RetentionDays:
        """`logRetentionDays` as the CloudWatch Logs enum."""
        return _LOG_RETENTION_DAYS[self.log_retention_days]

    def fault_injection_environment(self, stage: str) -> dict[str, str]:
        """The two FAILURE_<STAGE>_* variables of one function (STATE, MAP, REDUCE or ARCHIVE)."""
        names = (f"FAILURE_{stage}_LAMBDA_PCT", f"FAILURE_{stage}_LAMBDA_AFTER_WRITE_PCT")
        return {name: _format_percentage(self.fault_injection[name]) for name in names}

    @classmethod
    def from_context(cls, read: ContextReader, service_times: ServiceTimes | None = None) -> PipelineSettings:
        """Read and validate every setting; unset ones take their `DEFAULT_CONTEXT` value, and `auto`
        ones the planner's choice with `service_times` (the planner's defaults unless given: a test
        passes another release's)."""
        for key, replaced_by in REMOVED_SETTINGS.items():
            if read(key) is not None:
                raise SettingsError(f"cdk.json context '{key}' is gone: {replaced_by}")

        def raw(key: str) -> Any:
            value = read(key)
            return DEFAULT_CONTEXT[key] if value is None else value

        planned = {
            "stateParallelizationFactor": _integer_or_auto(
                raw, "stateParallelizationFactor", *INTEGER_RANGES["stateParallelizationFactor"]
            ),
            "reduceParallelizationFactor": _integer_or_auto(
                raw, "reduceParallelizationFactor", *INTEGER_RANGES["reduceParallelizationFactor"]
            ),
            "aggregateSlices": _integer_or_auto(raw, "aggregateSlices", *INTEGER_RANGES["aggregateSlices"]),
            "archiveParallelizationFactor": _integer_or_auto(
                raw, "archiveParallelizationFactor", *INTEGER_RANGES["archiveParallelizationFactor"]
            ),
            # Lambda's memory range (MB).
            "reduceMemoryMb": _integer_or_auto(raw, "reduceMemoryMb", *INTEGER_RANGES["reduceMemoryMb"]),
            # Records a DynamoDB stream batch may hold.
            "reduceBatchSize": _integer_or_auto(raw, "reduceBatchSize", *INTEGER_RANGES["reduceBatchSize"]),
        }
        load_profile = _load_profile(raw("loadProfile"))
        capacities = {key: _table_capacity_or_auto(raw, key) for key in TABLE_CAPACITY_SETTINGS}
        stream_mode = None if raw("streamMode") == AUTO else _stream_mode(raw("streamMode"))
        settings = cls(
            stack_name=_stack_name(raw("stackName")),
            hierarchy_levels=_hierarchy_levels(raw("hierarchyLevels")),
            value_domain=_value_domain(raw),
            state_batch_size=_integer(raw, "stateBatchSize", *INTEGER_RANGES["stateBatchSize"]),
            # Lambda's range for ParallelizationFactor; `auto` (None) is planned below.
            state_parallelization_factor=planned["stateParallelizationFactor"] or 1,
            state_write_concurrency=_integer(raw, "stateWriteConcurrency", *INTEGER_RANGES["stateWriteConcurrency"]),
            map_batch_size=_integer(raw, "mapBatchSize", *INTEGER_RANGES["mapBatchSize"]),
            reduce_batch_size=planned["reduceBatchSize"] or REDUCE_BATCH_CANDIDATES[0],
            # Lambda's limit for DynamoDB stream batches.
            archive_batch_size=_integer(raw, "archiveBatchSize", *INTEGER_RANGES["archiveBatchSize"]),
            archive_access_log_retention_days=_integer(
                raw, "archiveAccessLogRetentionDays", *INTEGER_RANGES["archiveAccessLogRetentionDays"]
            ),
            # Both TTLs must outlive the 24-hour stream retention (the minimums say why).
            delta_ttl_days=_integer(raw, "deltaTtlDays", *INTEGER_RANGES["deltaTtlDays"]),
            marker_ttl_days=_integer(raw, "markerTtlDays", *INTEGER_RANGES["markerTtlDays"]),
            reduce_idempotency=_reduce_idempotency(raw("reduceIdempotency")),
            iterator_age_alarm_ms=_integer(raw, "iteratorAgeAlarmMs", *INTEGER_RANGES["iteratorAgeAlarmMs"]),
            log_retention_days=_log_retention_days(raw("logRetentionDays")),
            powertools_layer_version=_powertools_layer_version(raw("powertoolsLayerVersion")),
            removal_policy_name=_removal_policy(raw("removalPolicy")),
            fault_injection=_fault_injection(raw("faultInjection")),
            load_profile=load_profile,
            # `auto` (None): on-demand, unless a steady profile's planning below chooses otherwise.
            state_table_capacity=capacities["stateTableCapacity"] or TableCapacity(),
            delta_table_capacity=capacities["deltaTableCapacity"] or TableCapacity(),
            aggregate_table_capacity=capacities["aggregateTableCapacity"] or TableCapacity(),
            # Lambda's limit for MaximumBatchingWindowInSeconds.
            map_batching_window_seconds=_integer(
                raw, "mapBatchingWindowSeconds", *INTEGER_RANGES["mapBatchingWindowSeconds"]
            ),
            reduce_memory_mb=planned["reduceMemoryMb"] or AUTO_REDUCE_MEMORY_CANDIDATES[0],
            # Entries, not bytes: about 500 bytes each, so the default takes ~50 MB of the 512 MB function.
            state_version_cache_size=_integer(raw, "stateVersionCacheSize", *INTEGER_RANGES["stateVersionCacheSize"]),
            target_messages_per_second=_integer(
                raw, "targetMessagesPerSecond", *INTEGER_RANGES["targetMessagesPerSecond"]
            ),
            capacity_check=_capacity_check(raw("capacityCheck")),
            producer_aggregation=_boolean("producerAggregation", raw("producerAggregation")),
            aggregate_slices=planned["aggregateSlices"] or 1,
            reduce_parallelization_factor=planned["reduceParallelizationFactor"] or 1,
            stream_mode=stream_mode or StreamCapacity(),
            archive_lifecycle=_archive_lifecycle(raw("archiveLifecycle")),
            alarm_email=_optional_email(raw("alarmEmail")),
            quarantine_ttl_days=_integer(raw, "quarantineTtlDays", *INTEGER_RANGES["quarantineTtlDays"]),
            table_deletion_protection=_deletion_protection(raw("tableDeletionProtection"), raw("removalPolicy")),
            break_glass_role_arn=_optional_role_arn("breakGlassRoleArn", raw("breakGlassRoleArn")),
            archive_object_lock_days=_integer(raw, "archiveObjectLockDays", *INTEGER_RANGES["archiveObjectLockDays"]),
            # Lambda's limit for MaximumBatchingWindowInSeconds.
            archive_batching_window_seconds=_integer(
                raw, "archiveBatchingWindowSeconds", *INTEGER_RANGES["archiveBatchingWindowSeconds"]
            ),
            # Lambda's range for ParallelizationFactor.
            archive_parallelization_factor=planned["archiveParallelizationFactor"] or 1,
            **_customer_managed_key(raw),
            upgrade_drained=_boolean("upgradeDrained", raw("upgradeDrained")),
        )
        _refuse_a_state_factor_with_aggregation(settings)
        auto = {key for key, value in planned.items() if value is None}
        if load_profile == "steady":
            auto |= {key for key, value in capacities.items() if value is None}
            auto |= {"streamMode"} if stream_mode is None else set()
        return settings.planned_for_declared_rate(auto, service_times or ServiceTimes())

    def planned_for_declared_rate(self, auto: set[str], times: ServiceTimes) -> PipelineSettings:
        """These settings with the ones named in `auto` (cdk.json keys) chosen by the planner (`AUTO`)
        at `times`. In mode `crt` the ones that form a reduce transaction (`TRANSACTION_SHAPING`)
        keep their fixed values instead (`AUTO`'s docstring). The capacity settings (`CAPACITY_SETTINGS`)
        are in `auto` only with a steady `loadProfile`: each then takes the planner's cheaper mode."""
        if self.reduce_idempotency == TOKEN_ONLY:
            auto = auto - TRANSACTION_SHAPING
        if not auto:
            return self
        workload, settings, prices = declared_workload(self), planned_settings(self), load_price_table()
        key = (repr(workload), repr(settings), repr(times), repr(prices), *sorted(auto))
        if key not in _CHOSEN_FOR_RATE:
            _CHOSEN_FOR_RATE[key] = settings_for_rate(
                workload,
                settings,
                times,
                prices,
                auto=AutoSettings(
                    state_parallelization="stateParallelizationFactor" in auto,
                    reduce_parallelization="reduceParallelizationFactor" in auto,
                    slices="aggregateSlices" in auto,
                    archive_parallelization="archiveParallelizationFactor" in auto,
                    reduce_memory="reduceMemoryMb" in auto,
                    reduce_batch="reduceBatchSize" in auto,
                ),
                capacity=CapacityChoice(
                    tables=frozenset(table for name, table in TABLE_CAPACITY_SETTINGS.items() if name in auto),
                    stream="streamMode" in auto,
                ),
            )
        chosen = _CHOSEN_FOR_RATE[key]
        return replace(
            self,
            state_table_capacity=chosen.state_table,
            delta_table_capacity=chosen.delta_table,
            aggregate_table_capacity=chosen.aggregate_table,
            stream_mode=chosen.stream,
            state_parallelization_factor=chosen.state_parallelization_factor,
            reduce_parallelization_factor=chosen.reduce_parallelization_factor,
            aggregate_slices=chosen.aggregate_slices,
            archive_parallelization_factor=chosen.archive_parallelization_factor,
            reduce_memory_mb=chosen.reduce_memory_mb,
            reduce_batch_size=chosen.reduce_batch_size,
        )


_CHOSEN_FOR_RATE: dict[tuple[str, ...], PlannerSettings] = {}
"""`settings_for_rate`'s answers by their inputs (the reprs of the frozen workload, settings, service times and
prices, and the `auto` keys): a pure function, whose search (some 2,800 plans with the reduce batch
size among them, a few tenths of a second) every synthesis, settings read and capacity check of a
process would otherwise repeat for the same cdk.json. The inputs' dataclasses hold dicts, so they
are not hashable themselves; their reprs name every field."""


def _refuse_a_state_factor_with_aggregation(settings: PipelineSettings) -> None:
    """`stateParallelizationFactor` above 1 with `producerAggregation`: a setting Lambda does not honour.

    The Lambda Developer Guide's Kinesis page (`planner.state.KINESIS_AGGREGATION_RULE`): "Note
    that parallelization factor will not work if you are using Kinesis aggregation." A stack that
    counted on the factor's lanes would fall behind with no error anyone sees, so the factor is
    refused rather than deployed; `auto` plans 1 there, and the capacity check asks for shards.
    """
    factor = settings.state_parallelization_factor
    if settings.producer_aggregation and factor > 1:
        raise SettingsError(
            f"cdk.json context 'stateParallelizationFactor' must be 1 or {AUTO!r} with producerAggregation true "
            f"(Lambda: the parallelization factor does not work with Kinesis aggregation; add shards: streamMode "
            f'{{"mode": "provisioned", "shardCount": N}}), got {factor}'
        )


def declared_workload(settings: PipelineSettings) -> Workload:
    """What the stack is sized for: `targetMessagesPerSecond` of the planner's default workload."""
    return Workload(rate=settings.target_messages_per_second, aggregated=settings.producer_aggregation)


def planned_settings(settings: PipelineSettings) -> PlannerSettings:
    """The stack's settings as the planner's model takes them: one reading of cdk.json for both."""
    return PlannerSettings(
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
        archive_batching_window_seconds=settings.archive_batching_window_seconds,
        archive_parallelization_factor=settings.archive_parallelization_factor,
    )


def _fail(key: str, expected: str, got: Any) -> SettingsError:
    return SettingsError(f"cdk.json context '{key}' must be {expected}, got {got!r}")


def _integer_or_auto(raw: Callable[[str], Any], key: str, low: int, high: int) -> int | None:
    """An integer setting that may be left to the planner: None for `AUTO`."""
    if raw(key) == AUTO:
        return None
    try:
        return _integer(raw, key, low, high)
    except SettingsError:
        raise _fail(key, f"{AUTO!r} or an integer from {low} to {high}", raw(key)) from None


def _integer(raw: Callable[[str], Any], key: str, low: int, high: int) -> int:
    value = raw(key)
    expected = f"an integer from {low} to {high}"
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise _fail(key, expected, value)
    if not low <= number <= high:
        raise _fail(key, expected, value)
    return number


def _stack_name(value: Any) -> str:
    if not isinstance(value, str) or not _STACK_NAME.match(value):
        raise _fail("stackName", "a CloudFormation stack name (letter, then letters, digits, '-')", value)
    return value


def _hierarchy_levels(value: Any) -> tuple[str, ...]:
    """A JSON list, or on the command line its comma spelling (`-c hierarchyLevels=Desk,Book`, spaces
    after the commas allowed there only); the names are then checked by the functions' own rule."""
    if isinstance(value, str):
        value = _json_or(value, lambda text: [part.strip() for part in text.split(LEVEL_LIST_SEPARATOR)])
    levels = value if isinstance(value, list) else [value]
    violation = hierarchy_levels_violation(levels)
    if violation is not None:
        raise _fail("hierarchyLevels", violation, value)
    return tuple(cast(list[str], levels))


def _value_domain(raw: Callable[[str], Any]) -> ValueDomain:
    """`valueIntegerDigits` and `valueFractionDigits`: the Values the pipeline can sum exactly."""
    integer_digits = _integer(raw, "valueIntegerDigits", *INTEGER_RANGES["valueIntegerDigits"])
    fraction_digits = _integer(raw, "valueFractionDigits", *INTEGER_RANGES["valueFractionDigits"])
    try:
        return ValueDomain(integer_digits, fraction_digits)
    except ValueError as error:
        raise SettingsError(f"cdk.json context 'valueIntegerDigits' + 'valueFractionDigits': {error}") from None


def _reduce_idempotency(value: Any) -> ReduceIdempotency:
    if value not in REDUCE_IDEMPOTENCY_MODES:
        raise _fail("reduceIdempotency", " or ".join(repr(m) for m in REDUCE_IDEMPOTENCY_MODES), value)
    return cast(ReduceIdempotency, value)


def _powertools_layer_version(value: Any) -> int | None:
    if value == POWERTOOLS_LAYER_FROM_SSM:
        return None
    try:
        return _integer(lambda _key: value, "powertoolsLayerVersion", *INTEGER_RANGES["powertoolsLayerVersion"])
    except SettingsError:
        expected = f"{POWERTOOLS_LAYER_FROM_SSM!r} or a layer version from 1 to 100000"
        raise _fail("powertoolsLayerVersion", expected, value) from None


def _log_retention_days(value: Any) -> int:
    allowed = ", ".join(str(days) for days in _LOG_RETENTION_DAYS)
    days = _integer(lambda _key: value, "logRetentionDays", 1, max(_LOG_RETENTION_DAYS))
    if days not in _LOG_RETENTION_DAYS:
        raise _fail("logRetentionDays", f"one of {allowed}", value)
    return days


def _removal_policy(value: Any) -> str:
    name = value.lower() if isinstance(value, str) else value
    if name not in REMOVAL_POLICIES:
        raise _fail("removalPolicy", " or ".join(repr(p) for p in REMOVAL_POLICIES), value)
    return cast(str, name)


def _boolean(key: str, value: Any) -> bool:
    """true or false, or on the command line their spelling (`-c customerManagedKey=true`)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise _fail(key, "true or false", value)
    return value


def _deletion_protection(value: Any, removal_policy: Any) -> bool:
    """`auto` follows `removalPolicy`: a table CloudFormation is told to keep is also kept from deletion."""
    if value == DELETION_PROTECTION_AUTO:
        return _removal_policy(removal_policy) == "retain"
    try:
        return _boolean("tableDeletionProtection", value)
    except SettingsError:
        raise _fail("tableDeletionProtection", f"{DELETION_PROTECTION_AUTO!r}, true or false", value) from None


def _optional_role_arn(key: str, value: Any) -> str | None:
    """An IAM role ARN in the `aws` partition, or "" for none."""
    if value == "":
        return None
    if not isinstance(value, str) or not _ROLE_ARN.match(value):
        raise _fail(key, 'an IAM role ARN (arn:aws:iam::<account>:role/<name>) or ""', value)
    return value


def _optional_email(value: Any) -> str | None:
    if value == "":
        return None
    if not isinstance(value, str) or not _EMAIL.match(value):
        raise _fail("alarmEmail", 'an email address or ""', value)
    return value


def _customer_managed_key(raw: Callable[[str], Any]) -> dict[str, Any]:
    """`customerManagedKey`, `keyAdminRoleArn` and `keyUserRoleArns`, checked together.

    The key's policy names its principals instead of trusting the whole account, so a customer-managed
    key without an administrator role could never be managed again: the two go together.
    """
    enabled = _boolean("customerManagedKey", raw("customerManagedKey"))
    admin = _optional_role_arn("keyAdminRoleArn", raw("keyAdminRoleArn"))
    users = raw("keyUserRoleArns")
    if isinstance(users, str):
        users = _json_or(users, lambda text: [part.strip() for part in text.split(",") if part.strip()])
    if not isinstance(users, list):
        raise _fail("keyUserRoleArns", "a list of IAM role ARNs", users)
    user_arns = tuple(_optional_role_arn("keyUserRoleArns", user) or "" for user in users)
    if "" in user_arns:
        raise _fail("keyUserRoleArns", "a list of IAM role ARNs", users)
    if enabled and admin is None:
        raise SettingsError(
            "cdk.json context 'customerManagedKey' true needs 'keyAdminRoleArn', the IAM role ARN of the key's "
            "administrator (the key's policy trusts no one else to manage it)"
        )
    if not enabled and (admin is not None or user_arns):
        raise SettingsError(
            "cdk.json context 'keyAdminRoleArn' and 'keyUserRoleArns' apply only with customerManagedKey true"
        )
    return {"customer_managed_key": enabled, "key_admin_role_arn": admin, "key_user_role_arns": user_arns}


def _fault_injection(value: Any) -> Mapping[str, float]:
    if isinstance(value, str):
        value = _json_or(value, lambda _text: None)
    if not isinstance(value, dict):
        raise _fail("faultInjection", f"an object keyed by {', '.join(FAULT_INJECTION_VARIABLES)}", value)
    unknown = sorted(set(value) - set(FAULT_INJECTION_VARIABLES))
    if unknown:
        raise _fail("faultInjection", f"keyed only by {', '.join(FAULT_INJECTION_VARIABLES)}", unknown)
    percentages: dict[str, float] = {}
    for name in FAULT_INJECTION_VARIABLES:
        percentages[name] = _percentage(f"faultInjection.{name}", value.get(name, 0))
    return percentages


def _percentage(key: str, value: Any) -> float:
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not 0 <= number <= 100:  # NaN fails the range check too
        raise _fail(key, "a percentage from 0 to 100", value)
    return number


def _format_percentage(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _json_or(text: str, fallback: Callable[[str], Any]) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return fallback(text)


_TABLE_CAPACITY_FIELDS: Final[Mapping[str, str]] = {
    "minWriteCapacity": "min_write_capacity",
    "maxWriteCapacity": "max_write_capacity",
    "minReadCapacity": "min_read_capacity",
    "maxReadCapacity": "max_read_capacity",
    "targetUtilizationPercent": "target_utilization_percent",
}


def _load_profile(value: Any) -> LoadProfile:
    if value not in LOAD_PROFILES:
        raise _fail("loadProfile", " or ".join(repr(profile) for profile in LOAD_PROFILES), value)
    return cast(LoadProfile, value)


def _table_capacity_or_auto(raw: Callable[[str], Any], key: str) -> TableCapacity | None:
    """A table's capacity, or None for `AUTO` (as `loadProfile` chooses)."""
    if raw(key) == AUTO:
        return None
    try:
        return _table_capacity(raw, key)
    except SettingsError as error:
        raise SettingsError(str(error).replace(" must be an object", f" must be {AUTO!r} or an object", 1)) from None


def _table_capacity(raw: Callable[[str], Any], key: str) -> TableCapacity:
    """`{"mode": "on-demand"}`, or `{"mode": "provisioned", "minWriteCapacity": ..., ...}`.

    Unset figures take `TableCapacity`'s defaults. They are accepted with `on-demand` too,
    where they only tell the planner how to price the provisioned alternative.
    """
    value = raw(key)
    if isinstance(value, str):
        value = _json_or(value, lambda _text: None)
    expected = f"an object with 'mode' ({' or '.join(repr(m) for m in CAPACITY_MODES)}) and optionally " + ", ".join(
        _TABLE_CAPACITY_FIELDS
    )
    if not isinstance(value, dict) or value.get("mode") not in CAPACITY_MODES:
        raise _fail(key, expected, value)
    unknown = sorted(set(value) - {"mode", *_TABLE_CAPACITY_FIELDS})
    if unknown:
        raise _fail(key, expected, unknown)
    figures: dict[str, int] = {}
    for name, field_name in _TABLE_CAPACITY_FIELDS.items():
        if name in value:
            low, high = (
                TARGET_UTILIZATION_RANGE if name == "targetUtilizationPercent" else (1, MAX_TABLE_CAPACITY_UNITS)
            )
            figures[field_name] = _integer({f"{key}.{name}": value[name]}.get, f"{key}.{name}", low, high)
    capacity = TableCapacity(mode=cast(CapacityMode, value["mode"]), **figures)
    for kind, low, high in (
        ("Write", capacity.min_write_capacity, capacity.max_write_capacity),
        ("Read", capacity.min_read_capacity, capacity.max_read_capacity),
    ):
        if low > high:
            raise _fail(f"{key}.max{kind}Capacity", f"at least min{kind}Capacity ({low})", high)
    return capacity


MAX_STREAM_SHARDS = 10_000
"""A sanity bound on `streamMode`'s `shardCount` (Kinesis's own quota is per account and adjustable)."""


def _stream_mode(value: Any) -> StreamCapacity:
    """`{"mode": "on-demand"}`, or `{"mode": "provisioned", "shardCount": N}` (`auto` is read before).

    A shard count is required with `provisioned` (the stream has exactly that many shards
    until someone reshards) and refused with `on-demand`, where Kinesis chooses the shards:
    a count there would be silently ignored.
    """
    if isinstance(value, str):
        value = _json_or(value, lambda _text: None)
    expected = (
        f"{AUTO!r}, "
        + '{"mode": "on-demand"} or {"mode": "provisioned", "shardCount": 1 to '
        + f"{MAX_STREAM_SHARDS}}}"
    )
    if not isinstance(value, dict) or value.get("mode") not in CAPACITY_MODES or set(value) - {"mode", "shardCount"}:
        raise _fail("streamMode", expected, value)
    if value["mode"] == "on-demand":
        if "shardCount" in value:
            raise _fail("streamMode", f"{expected} (an on-demand stream chooses its own shards)", value)
        return StreamCapacity()
    if "shardCount" not in value:
        raise _fail("streamMode", expected, value)
    shards = _integer({"streamMode.shardCount": value["shardCount"]}.get, "streamMode.shardCount", 1, MAX_STREAM_SHARDS)
    return StreamCapacity(mode="provisioned", shard_count=shards)


MAX_TRANSITION_DAYS = 36_500
INFREQUENT_ACCESS_MIN_DAYS = 30
"""S3 refuses a transition to STANDARD_IA sooner than 30 days after creation."""


def _archive_lifecycle(value: Any) -> ArchiveLifecycle:
    """`{"storageClass": "STANDARD"}` (objects stay), or `{"storageClass": C, "afterDays": N}`.

    `afterDays` is required with a class to move to and refused with STANDARD, where it would
    be silently ignored.
    """
    if isinstance(value, str):
        value = _json_or(value, lambda _text: None)
    classes = ", ".join(ARCHIVE_STORAGE_CLASSES)
    expected = f'{{"storageClass": one of {classes}}} with "afterDays" (1 to {MAX_TRANSITION_DAYS}) unless STANDARD'
    if (
        not isinstance(value, dict)
        or value.get("storageClass") not in ARCHIVE_STORAGE_CLASSES
        or set(value) - {"storageClass", "afterDays"}
    ):
        raise _fail("archiveLifecycle", expected, value)
    storage_class = value["storageClass"]
    if storage_class == "STANDARD":
        if "afterDays" in value:
            raise _fail("archiveLifecycle", f"{expected} (STANDARD moves nothing)", value)
        return ArchiveLifecycle()
    if "afterDays" not in value:
        raise _fail("archiveLifecycle", expected, value)
    low = INFREQUENT_ACCESS_MIN_DAYS if storage_class == "STANDARD_IA" else 1
    days = _integer(
        {"archiveLifecycle.afterDays": value["afterDays"]}.get, "archiveLifecycle.afterDays", low, MAX_TRANSITION_DAYS
    )
    return ArchiveLifecycle(storage_class=storage_class, after_days=days)


def _capacity_check(value: Any) -> CapacityCheck:
    if value not in CAPACITY_CHECKS:
        raise _fail("capacityCheck", " or ".join(repr(c) for c in CAPACITY_CHECKS), value)
    return cast(CapacityCheck, value)
