"""Map function: sum each state change of the StateTable stream into a DeltaTable item, once.

Every INSERT, MODIFY and REMOVE record of the stream is a trade's state going from its old
image to its new one, each counted at the nodes of the path it stored (`NodePath`), never at
nodes computed from the levels configured now (`aggregation.deltas.image_node_path`). The map
function is idempotent per stream position
(`aggregation.stream_positions`): a delta item is keyed by the batch's shard and first
sequence number and records its last one. Before writing, a strongly consistent Query of
the shard's items finds the records earlier items already cover; those are skipped and
only the rest (usually the whole batch) is written, one conditional put per run of
uncovered records (split further if an item would exceed DynamoDB's size limit). So a
retried batch changes nothing whatever its new boundaries, and exactness never depends
on Lambda retrying the identical batch.

The mapping has a tumbling window only because its events then carry `shardId`; the
function keeps no window state and answers every invocation with an empty `state`.
A put whose condition fails means another invocation wrote at that position meanwhile
(a timed-out attempt still in flight): coverage is read again and the rest written. The
item records the invocation that wrote it, so a put whose response was lost and that the
SDK retried is still reported as this invocation's write.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from aggregation.delta_items import (
    DEFAULT_DELTA_TTL_DAYS,
    FIRST_SEQUENCE_NUMBER,
    LAST_SEQUENCE_NUMBER,
    STREAM_SHARD,
    WRITTEN_BY_REQUEST_ID,
    DeltaItem,
    decode_stream_run,
    encode_delta_item,
    fits_item_limit,
)
from aggregation.deltas import TradeState, image_node_path, sum_state_changes
from aggregation.names import MAP_SERVICE, STATE_CHANGES_MAPPED, TRADE_TIMESTAMP, TRADE_VALUE
from aggregation.stream_images import decode_image
from aggregation.stream_positions import (
    COVERAGE_QUERY_PAGE_ITEMS,
    StreamRun,
    sequence_key,
    sequence_number,
    stream_shard_key,
    uncovered_runs,
)
from aggregation.transactions import DeltaBatch
from function_support.aws import dynamodb_client, error_code, prevalidated_write_client
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.settings import hierarchy_levels, required_setting, ttl_seconds

STAGE = "MAP"
SERVICE = MAP_SERVICE
MAX_COVERAGE_READS = 5
"""Coverage is read again after each put another writer beat; more than a few rounds means
something keeps writing this shard concurrently, which one mapping never does: fail loudly."""

logger = Logger(service=SERVICE)
# The namespace is the stack's own, from POWERTOOLS_METRICS_NAMESPACE (`aggregation.names.stack_metrics_namespace`).
metrics = Metrics(service=SERVICE)


@dataclass(frozen=True)
class StateChange:
    """One StateTable stream record, as far as the aggregates care."""

    sequence_number: int
    old: TradeState | None
    new: TradeState | None
    producer_timestamp: Decimal | None
    unplaced_images: int = 0  # images present but counted in no node (`aggregation.deltas.image_node_path`)


@dataclass
class MapOutcome:
    records: int = 0
    unplaced_images: int = 0
    records_written: int = 0  # the rest were covered already (by an earlier attempt or batch)
    items_written: int = 0
    lost_races: int = 0  # puts another writer beat at the same position


def tumbling_window_response() -> dict[str, Any]:
    """Lambda treats a tumbling-window invocation whose response has no `state` as failed."""
    return {"state": {}}


def trade_state(image: dict[str, Any], levels: tuple[str, ...]) -> TradeState | None:
    """The aggregate-relevant state in a decoded stream image; None for an absent image, or one
    counted in no node (its path, never the current levels when it stored one: `image_node_path`)."""
    path = image_node_path(image, levels) if image else None
    return None if path is None else TradeState(value=image[TRADE_VALUE], path=path)


def state_change(record: DynamoDBRecord, levels: tuple[str, ...]) -> StateChange:
    stream_record = record.dynamodb
    if stream_record is None or stream_record.sequence_number is None:
        raise ValueError(f"stream record {record.event_id} has no dynamodb payload or sequence number")
    old_image = decode_image(stream_record.raw_event.get("OldImage"))
    new_image = decode_image(stream_record.raw_event.get("NewImage"))
    old, new = trade_state(old_image, levels), trade_state(new_image, levels)
    timestamp = new_image.get(TRADE_TIMESTAMP)
    return StateChange(
        sequence_number=sequence_number(stream_record.sequence_number),
        old=old,
        new=new,
        producer_timestamp=timestamp if isinstance(timestamp, Decimal) else None,
        unplaced_images=sum(bool(image) and state is None for image, state in ((old_image, old), (new_image, new))),
    )


def delta_item(stream_shard: str, changes: Sequence[StateChange], now: float, ttl: int) -> DeltaItem:
    """The DeltaTable item of one run of consecutive, not yet covered state changes."""
    run = StreamRun(stream_shard, changes[0].sequence_number, changes[-1].sequence_number)
    batch = DeltaBatch(
        batch_hash=run.batch_hash,
        deltas=sum_state_changes((change.old, change.new) for change in changes),
        record_count=len(changes),
        producer_timestamps=tuple(c.producer_timestamp for c in changes if c.producer_timestamp is not None),
        created_at=int(now),
    )
    return DeltaItem(run=run, batch=batch, expires_at=int(now) + ttl)


def delta_items(
    stream_shard: str, changes: Sequence[StateChange], now: float, ttl: int
) -> list[tuple[DeltaItem, dict[str, Any]]]:
    """The run's item and its encoding (measured, then put as it is), or the run split in
    halves until every part's item fits DynamoDB's limit.

    Items of one shard cover disjoint runs of records, so a run may be cut anywhere: a
    retry finds every part by its position. Usually the whole run fits in one item (its
    node deltas are netted), so splitting costs nothing until a batch is extreme.
    """
    item = delta_item(stream_shard, changes, now, ttl)
    encoded = encode_delta_item(item)
    if len(changes) == 1 or fits_item_limit(encoded):
        return [(item, encoded)]
    middle = len(changes) // 2
    return delta_items(stream_shard, changes[:middle], now, ttl) + delta_items(stream_shard, changes[middle:], now, ttl)


def covered_runs(table: str, stream_shard: str, first: int, last: int) -> list[StreamRun]:
    """Runs of this shard's existing items that overlap [first, last] (strongly consistent).

    Items of one shard never overlap, so reading them newest first by their first record,
    every item that starts at or before `last` is a candidate until one ends before `first`.
    """
    runs: list[StreamRun] = []
    arguments: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "#shard = :shard AND #first <= :last",
        "ExpressionAttributeNames": {
            "#shard": STREAM_SHARD,
            "#first": FIRST_SEQUENCE_NUMBER,
            "#last": LAST_SEQUENCE_NUMBER,
        },
        "ExpressionAttributeValues": {":shard": {"S": stream_shard}, ":last": {"S": sequence_key(last)}},
        "ProjectionExpression": "#shard, #first, #last",
        "ScanIndexForward": False,
        "ConsistentRead": True,
        "Limit": COVERAGE_QUERY_PAGE_ITEMS,
    }
    while True:
        page = dynamodb_client().query(**arguments)
        for item in page.get("Items", []):
            run = decode_stream_run(item)
            if run.last_sequence_number < first:
                return runs
            runs.append(run)
        if "LastEvaluatedKey" not in page:
            return runs
        arguments["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def delta_item_put(table: str, encoded: dict[str, Any], request_id: str) -> dict[str, Any]:
    """The `put_item` arguments writing an encoded item unless an item exists at its position."""
    return {
        "TableName": table,
        "Item": encoded | {WRITTEN_BY_REQUEST_ID: {"S": request_id}},
        "ConditionExpression": "attribute_not_exists(#first)",
        "ExpressionAttributeNames": {"#first": FIRST_SEQUENCE_NUMBER},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def put_delta_item(table: str, encoded: dict[str, Any], request_id: str) -> bool:
    """Conditional put of an encoded item; False when another invocation wrote an item at this position first.

    Sent without botocore's parameter validation (`function_support.aws.prevalidated_write_client`):
    `delta_item_put` of `encode_delta_item` is validated by a test instead.
    """
    try:
        prevalidated_write_client().put_item(**delta_item_put(table, encoded, request_id))
    except ClientError as error:
        if error_code(error) != "ConditionalCheckFailedException":
            raise
        stored: dict[str, Any] = error.response.get("Item", {})  # type: ignore[assignment]  # ALL_OLD
        return bool(stored.get(WRITTEN_BY_REQUEST_ID, {}).get("S") == request_id)  # our own put, response lost
    return True


def map_state_changes(
    table: str, stream_shard: str, changes: Sequence[StateChange], *, request_id: str, now: float, ttl: int
) -> MapOutcome:
    """Write every change no item of the shard covers yet, once (module docstring)."""
    by_position = {change.sequence_number: change for change in changes}
    ordered = [by_position[number] for number in sorted(by_position)]
    numbers = [change.sequence_number for change in ordered]
    outcome = MapOutcome(records=len(ordered))
    for _ in range(MAX_COVERAGE_READS):
        covered = covered_runs(table, stream_shard, numbers[0], numbers[-1])
        items = [
            item
            for run in uncovered_runs(numbers, covered)
            for item in delta_items(stream_shard, [by_position[number] for number in run], now, ttl)
        ]
        for item, encoded in items:
            if not put_delta_item(table, encoded, request_id):
                outcome.lost_races += 1
                break
            outcome.items_written += 1
            outcome.records_written += item.batch.record_count
        else:
            return outcome
    raise RuntimeError(f"shard {stream_shard}: other writers kept covering this batch's records; retrying the batch")


def batch_stream_shard(event: dict[str, Any], records: Sequence[DynamoDBRecord]) -> str:
    """The shard of the batch, from the tumbling-window fields of the event."""
    source_arn = event.get("eventSourceARN") or records[0].event_source_arn or ""
    return stream_shard_key(source_arn, str(event.get("shardId") or ""))


def map_event(event: dict[str, Any], request_id: str) -> MapOutcome:
    """Parse, map and write one invocation's batch; what it did, for the log and metrics.

    An event without a `Records` key, or with `"Records": null`, is an empty batch (a window
    invocation with nothing to map): it is answered like any other window invocation, not
    with an exception that Lambda would retry for ever.
    """
    records = list(DynamoDBStreamEvent(event).records) if event.get("Records") else []
    if not records:  # the tumbling window's closing invocation, or nothing to do
        return MapOutcome()
    levels = hierarchy_levels()
    changes = [state_change(record, levels) for record in records]
    outcome = map_state_changes(
        required_setting("DELTA_TABLE"),
        batch_stream_shard(event, records),
        changes,
        request_id=request_id,
        now=time.time(),
        ttl=ttl_seconds("DELTA_TTL_DAYS", DEFAULT_DELTA_TTL_DAYS),
    )
    outcome.unplaced_images = sum(change.unplaced_images for change in changes)
    return outcome


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    maybe_inject_failure(STAGE, FailurePoint.BEFORE_WRITE)
    outcome = map_event(event, context.aws_request_id)
    metrics.add_metric(name=STATE_CHANGES_MAPPED, unit=MetricUnit.Count, value=outcome.records_written)
    already_mapped = outcome.records - outcome.records_written
    metrics.add_metric(name="StateChangesAlreadyMapped", unit=MetricUnit.Count, value=already_mapped)
    metrics.add_metric(name="DeltaItemsWritten", unit=MetricUnit.Count, value=outcome.items_written)
    metrics.add_metric(name="StateImagesCountedInNoNode", unit=MetricUnit.Count, value=outcome.unplaced_images)
    logger.info("map batch done", extra={"shard": event.get("shardId"), **vars(outcome)})
    maybe_inject_failure(STAGE, FailurePoint.AFTER_WRITE)
    return tumbling_window_response()
