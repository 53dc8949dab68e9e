"""The three stages (state, map, reduce): each a function, its event source and its grants.

The event source mappings share one rule: **retry a failed batch, unchanged, until it succeeds**.

* `retry_attempts=-1` and a maximum record age of -1 (infinite): a record is never
  discarded, so it cannot be lost; a poison record cannot exist either, because the state
  function quarantines invalid input instead of failing on it.
* `bisect_batch_on_error=False` and no `ReportBatchItemFailures`: nothing is gained by
  splitting a batch that fails as a whole. Exactness does not depend on it: map is
  idempotent per stream position, reduce per delta item, and the archive's readers count each
  delta item once, whatever a retry's boundaries (`ArchiveStage`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aws_cdk import Duration, Names
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from aggregation.names import MAP_SERVICE, REDUCE_SERVICE, STATE_SERVICE
from stacks.encryption import StackKeys
from stacks.functions import PipelineFunction, SharedFunctionAssets
from stacks.ingest import IngestStream
from stacks.settings import MAP_MEMORY_MB, STATE_MEMORY_MB, PipelineSettings
from stacks.tables import PipelineTables

STREAM_TYPE_CODES: Final[Mapping[dynamodb.AttributeType, str]] = {
    dynamodb.AttributeType.STRING: "S",
    dynamodb.AttributeType.NUMBER: "N",
    dynamodb.AttributeType.BINARY: "B",
}
"""A key attribute's type as stream records spell it (`{"S": "..."}`)."""

KINESIS_POLLING_ACTIONS: Final[tuple[str, ...]] = (
    "kinesis:DescribeStream",
    "kinesis:DescribeStreamSummary",
    "kinesis:GetRecords",
    "kinesis:GetShardIterator",
    "kinesis:ListShards",
)
"""What Lambda's poller calls on the stream for a standard (shared-throughput) mapping, with the
function's role (Lambda Developer Guide, "Kinesis execution role permissions")."""

RETRY_UNTIL_SUCCESS = -1
"""`MaximumRetryAttempts` / `MaximumRecordAgeInSeconds` value meaning "infinite"."""

STATE_TIMEOUT_SECONDS = 900
"""Lambda's longest, and sized by the worst event, not the typical one: a batch that times out is
retried whole, for ever (`RETRY_UNTIL_SUCCESS`), and would hold its shard. The worst is not valid
input but an attacker's: four 1 MiB KPL aggregates of empty user records, about 700,000 records
each quarantined on its own, about 320 to 370 s in a `STATE_MEMORY_MB` function at the planner's write
latency (`python -m benchmarks worst-event`, docs/benchmarks.md "The worst event fits its
timeout"), within half of it. The fullest batch of the smallest valid messages (about 41,000) takes
about 84 s (tests/stacks/test_stack_state_sizing.py). A timeout costs nothing until it is used:
every request has its own connect and read timeouts, so only real work runs this long."""


def retry_until_record_expires(function: lambda_.Function) -> None:
    """Write `MaximumRecordAgeInSeconds: -1` on the function's mappings explicitly.

    -1 (infinite) is CloudFormation's default, but CDK's `max_record_age` only accepts 60 s to
    7 days; spelling -1 out keeps the contract visible in the template, which the local
    runner reads.
    """
    for child in function.node.children:
        if isinstance(child, lambda_.EventSourceMapping):
            cfn_mapping = child.node.default_child
            assert isinstance(cfn_mapping, lambda_.CfnEventSourceMapping)
            cfn_mapping.maximum_record_age_in_seconds = RETRY_UNTIL_SUCCESS


SHARD_ID_WINDOW = Duration.seconds(900)
"""The map mapping's tumbling window. The function keeps no window state: a tumbling window
is the documented way for a DynamoDB stream event to carry its `shardId`, which the map
function's per-position idempotency needs. The longest window (15 minutes) adds the fewest
closing invocations and cuts the fewest batches at window ends."""


def new_items_filter(table: dynamodb.Table) -> dict[str, Any]:
    """The filter pattern passing records whose new image holds the table's partition key.

    Lambda's event filtering for DynamoDB streams filters only on the record's `dynamodb` key
    (Lambda Developer Guide, "Using event filtering with a DynamoDB event source"), so the
    pattern cannot name `eventName`. `exists` matches leaf values only, hence the key's type
    (`S`) in the path. An INSERT always carries a new image with the key; a REMOVE (such as a
    TTL expiry) carries none and is dropped. A MODIFY of a stream whose view has the new image
    would pass, but nothing modifies these items (conditional puts only), and the handlers skip
    any record that is not an INSERT all the same.
    """
    (key,) = table.schema_v2().partition_keys
    type_code = STREAM_TYPE_CODES[key.type]
    return {"dynamodb": {"NewImage": {key.name: {type_code: lambda_.FilterRule.exists()}}}}


def consume_table_stream(
    handler: PipelineFunction,
    table: dynamodb.Table,
    *,
    batch_size: int,
    inserts_only: bool,
    tumbling_window: Duration | None = None,
    max_batching_window: Duration | None = None,
    parallelization_factor: int | None = None,
) -> sources.DynamoEventSource:
    """Attach `table`'s stream with the settings every idempotent stage depends on.

    Retries until success (a record is never discarded, so never lost), never bisected and
    never partially acknowledged. `inserts_only` filters to new items (`new_items_filter`:
    TTL expiry produces REMOVE records, which are not new deltas). `max_batching_window`
    lets a batch wait to fill up (the planner asks for one on the map mapping at high
    rates). `parallelization_factor` runs that many batches of one stream shard at once, records
    of one partition key still in order (reduce, and the archive, which order does not concern;
    unset is Lambda's 1: map's batches must be runs of consecutive records of a shard). Grants
    read of the stream only, not of the table; the one wildcard that grant carries
    (`dynamodb:ListStreams`) is the cdk-nag finding accepted here.
    """
    function = handler.function
    source = sources.DynamoEventSource(
        table,
        starting_position=lambda_.StartingPosition.TRIM_HORIZON,
        batch_size=batch_size,
        max_batching_window=max_batching_window,
        parallelization_factor=parallelization_factor,
        retry_attempts=RETRY_UNTIL_SUCCESS,
        bisect_batch_on_error=False,
        report_batch_item_failures=False,
        tumbling_window=tumbling_window,
        filters=[lambda_.FilterCriteria.filter(new_items_filter(table))] if inserts_only else None,
    )
    function.add_event_source(source)
    NagSuppressions.add_resource_suppressions(
        handler.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                applies_to=["Resource::*"],
                reason=(
                    "dynamodb:ListStreams on '*' comes from CDK's grantStreamRead for the "
                    "DynamoDB Streams event source mapping (Lambda documents it as a required "
                    "execution-role permission; AWSLambdaDynamoDBExecutionRole grants it the "
                    "same way). It lists stream ARNs and reads no data: DescribeStream, "
                    "GetRecords and GetShardIterator stay scoped to the one table's StreamArn."
                ),
            )
        ],
        apply_to_children=True,
    )
    retry_until_record_expires(function)
    return source


class StateStage(Construct):
    """Kinesis -> state function -> versioned conditional update of StateTable."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        assets: SharedFunctionAssets,
        ingest: IngestStream,
        tables: PipelineTables,
        keys: StackKeys,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = PipelineFunction(
            self,
            "StateFunction",
            settings=settings,
            assets=assets,
            service=STATE_SERVICE,
            handler="state_function.handler.lambda_handler",
            description="Validates trade messages and keeps the highest version of each trade",
            # Up to `stateWriteConcurrency` conditional updates in flight: more memory buys CPU
            # for JSON parsing and exact decimal conversion of a 100-record batch.
            memory_size=STATE_MEMORY_MB,
            timeout=Duration.seconds(STATE_TIMEOUT_SECONDS),
            environment={
                "STATE_TABLE": tables.state_table.table_name,
                "QUARANTINE_TABLE": tables.quarantine_table.table_name,
                "QUARANTINE_TTL_DAYS": str(settings.quarantine_ttl_days),
                "HIERARCHY_LEVELS": ",".join(settings.hierarchy_levels),
                "STATE_WRITE_CONCURRENCY": str(settings.state_write_concurrency),
                "VALUE_INTEGER_DIGITS": str(settings.value_domain.integer_digits),
                "VALUE_FRACTION_DIGITS": str(settings.value_domain.fraction_digits),
                "STATE_VERSION_CACHE_SIZE": str(settings.state_version_cache_size),
                **settings.fault_injection_environment("STATE"),
            },
        )
        function = self.handler.function
        # The mapping itself rather than `KinesisEventSource`, whose `grantRead` adds the enhanced
        # fan-out actions (SubscribeToShard, DescribeStreamConsumer) and ListStreams that a shared-
        # throughput mapping never uses. Same construct id as `KinesisEventSource` gives it, so
        # the mapping keeps its logical id (a new mapping would start again at TRIM_HORIZON).
        self.event_source = function.add_event_source_mapping(
            f"KinesisEventSource:{Names.node_unique_id(ingest.stream.node)}",
            event_source_arn=ingest.stream.stream_arn,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=settings.state_batch_size,
            parallelization_factor=settings.state_parallelization_factor,
            retry_attempts=RETRY_UNTIL_SUCCESS,
            bisect_batch_on_error=False,
            report_batch_item_failures=False,
        )
        ingest.stream.grant(function, *KINESIS_POLLING_ACTIONS)
        retry_until_record_expires(function)
        keys.allow_roles([self.handler.role], ["kinesis", "dynamodb"], sid="StateFunction")
        # Only PartiQL INSERT and conditional UPDATE statements (BatchExecuteStatement is authorised per
        # statement): no reads, no deletes, no transactions.
        tables.state_table.grant(function, "dynamodb:PartiQLInsert", "dynamodb:PartiQLUpdate")
        # A quarantined record is inserted once (a PartiQL INSERT never replaces evidence already
        # there), 25 to a BatchExecuteStatement, and never read back. No BatchWriteItem: IAM cannot
        # tell its puts from its deletes.
        tables.quarantine_table.grant(function, "dynamodb:PartiQLInsert")


class MapStage(Construct):
    """StateTable stream -> map function -> one conditional put of a delta item per batch."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        assets: SharedFunctionAssets,
        tables: PipelineTables,
        keys: StackKeys,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = PipelineFunction(
            self,
            "MapFunction",
            settings=settings,
            assets=assets,
            service=MAP_SERVICE,
            handler="map_function.handler.lambda_handler",
            description="Turns a batch of state changes into one idempotent delta item",
            memory_size=MAP_MEMORY_MB,
            timeout=Duration.seconds(60),
            environment={
                "DELTA_TABLE": tables.delta_table.table_name,
                "HIERARCHY_LEVELS": ",".join(settings.hierarchy_levels),
                "DELTA_TTL_DAYS": str(settings.delta_ttl_days),
                **settings.fault_injection_environment("MAP"),
            },
        )
        function = self.handler.function
        # No filter: a batch must be a run of consecutive records of its shard
        # (`aggregation.stream_positions`).
        self.event_source = consume_table_stream(
            self.handler,
            tables.state_table,
            batch_size=settings.map_batch_size,
            inserts_only=False,
            tumbling_window=SHARD_ID_WINDOW,
            max_batching_window=Duration.seconds(settings.map_batching_window_seconds)
            if settings.map_batching_window_seconds
            else None,
        )
        # Query reads which stream positions earlier items cover; PutItem writes the rest.
        tables.delta_table.grant(function, "dynamodb:Query", "dynamodb:PutItem")
        keys.allow_roles([self.handler.role], ["dynamodb"], sid="MapFunction")


class ReduceStage(Construct):
    """DeltaTable stream (INSERTs) -> reduce function -> transactions on AggregateTable."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        assets: SharedFunctionAssets,
        tables: PipelineTables,
        keys: StackKeys,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = PipelineFunction(
            self,
            "ReduceFunction",
            settings=settings,
            assets=assets,
            service=REDUCE_SERVICE,
            handler="reduce_function.handler.lambda_handler",
            description="Applies delta items to the aggregates exactly once",
            # CPU scales with memory, and each reducer's CPU work is on its lane's critical path.
            memory_size=settings.reduce_memory_mb,
            # A batch may need several transactions, each possibly retried after cancellation.
            timeout=Duration.seconds(120),
            environment={
                "AGGREGATE_TABLE": tables.aggregate_table.table_name,
                "REDUCE_IDEMPOTENCY": settings.reduce_idempotency,
                "MARKER_TTL_DAYS": str(settings.marker_ttl_days),
                # Several reducers run at once (one per DeltaTable stream shard and parallelization
                # lane, no reservation): each transaction adds to the slice its token names
                # (`aggregation.transactions.transaction_slice`; in `crt`, a delta item to the slice
                # of its StateTable shard), so they share no hot item, and a transaction that still
                # meets another is resent identically.
                "AGGREGATE_SLICES": str(settings.aggregate_slices),
                **settings.fault_injection_environment("REDUCE"),
            },
        )
        function = self.handler.function
        # A parallelization factor above 1 runs that many lanes per DeltaTable stream shard; Lambda
        # keeps order per item only, so lanes may write one slice at once (a conflict is resent).
        self.event_source = consume_table_stream(
            self.handler,
            tables.delta_table,
            batch_size=settings.reduce_batch_size,
            inserts_only=True,
            parallelization_factor=settings.reduce_parallelization_factor,
        )
        # TransactWriteItems has no IAM action of its own: it is authorised per contained action
        # (Update of aggregates and #stats, Put of markers; no ConditionCheck is ever sent).
        # BatchGetItem: the strongly consistent read of markers that decides an
        # IdempotentParameterMismatchException (evidence, never an assumption).
        tables.aggregate_table.grant(
            function,
            "dynamodb:UpdateItem",
            "dynamodb:PutItem",
            "dynamodb:BatchGetItem",
        )
        keys.allow_roles([self.handler.role], ["dynamodb"], sid="ReduceFunction")
