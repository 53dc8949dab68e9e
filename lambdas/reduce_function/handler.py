"""Reduce function: apply each delta item to the AggregateTable exactly once.

The mapping delivers only INSERT records of the DeltaTable (event filter). The items'
units (per node group, `aggregation.transactions`) are applied in the transactions planned
there: one update per node per group transaction, however many items touch it; every
transaction carries a ClientRequestToken derived from its units and, in mode `crt+marker`,
a conditional Put of each unit's marker.

Every parameter of a tokened transaction is a pure function of its units (marker expiry
counts from the delta item's `CreatedAt`; the wall-clock `LastUpdated` and latency figures
are written after the transactions, outside them, where a repeat is harmless). So a retry,
by the SDK or by Lambda, re-sends the identical request, and nothing relies on what
DynamoDB does with a token whose first use was cancelled. Outcomes:
- a cancellation whose only failed conditions are markers: those units were applied before
  (alone, with other neighbours, or by an earlier attempt that failed further on); they are
  dropped and every remaining unit is planned again;
- IdempotentParameterMismatchException is an anomaly, never taken as "applied": in mode
  `crt+marker` a strongly consistent read of the units' markers decides (present: applied,
  dropped; the rest planned again under a new token); with no marker found, or in mode
  `crt`, the invocation fails and the batch is retried;
- TransactionInProgressException (the same token still being applied), or a cancellation
  whose reasons include `TransactionConflict` (another reducer writing the same item at the
  same moment): the identical request, same token, is sent again after a jittered pause,
  and the conflicts are counted (`TransactionConflictsRetried`). Identical, so a retry is
  never a token reused with other parameters, whatever DynamoDB did with the first attempt.

A transaction writes one slice of the totals (`aggregation.aggregate_items`): in mode
`crt+marker` the slice its token hashes to among `AGGREGATE_SLICES`
(`aggregation.transactions.transaction_slice`), so every delta item of an invocation is
planned together and the transactions of all reducers spread evenly over the slices; in mode
`crt` the slice of each unit's delta item (`slice_of` its `StreamShard`), each slice planned
apart, as every earlier release formed them. Reducers rarely write the same item at once, and
when they do, DynamoDB's conflict detection serialises them and the identical resend above
applies the loser's units once.
"""

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from aggregation import names
from aggregation.aggregate_items import node_item_key, slice_of, stats_item_key
from aggregation.delta_items import decode_delta_batch, decode_stream_run
from aggregation.deltas import NodeDelta
from aggregation.exact import dynamodb_number
from aggregation.latency import bucket_attribute, histogram, latency_seconds, milliseconds
from aggregation.names import (
    AGGREGATE_KEY,
    END_TO_END_LATENCY,
    LAST_LATENCY_MAX_SECONDS,
    LAST_LATENCY_MEAN_SECONDS,
    LAST_UPDATED,
    MARKER_PREFIX,
    MESSAGES_APPLIED,
    NODE_TRADE_COUNT,
    NODE_VALUE,
    NON_INSERT_RECORDS_SKIPPED,
    REDUCE_SERVICE,
    TRANSACTION_CONFLICTS_RETRIED,
)
from aggregation.transactions import (
    DEFAULT_MARKER_TTL_DAYS,
    DeltaUnit,
    PlannedTransaction,
    marker_expires_at,
    marker_item,
    marker_key,
    plan_transactions,
    split_into_units,
)
from function_support.aws import dynamodb_client, error_code, prevalidated_write_client, serializer
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.metrics import publish_metric_values
from function_support.settings import int_setting, optional_setting, required_setting, ttl_seconds
from function_support.stream_records import is_insert

STAGE = "REDUCE"
IN_PROGRESS_ATTEMPTS = 6
CONFLICT_ATTEMPTS = 10
"""Identical resends of a transaction cancelled by a conflict before the invocation fails (and
Lambda retries the batch): with jittered pauses that double up to `MAX_RETRY_PAUSE_SECONDS`,
about 10 s, far beyond the milliseconds a competing transaction holds an item."""
UNPROCESSED_KEY_ATTEMPTS = 6
BATCH_GET_MAX_KEYS = 100  # DynamoDB's limit of keys per BatchGetItem request
RETRY_PAUSE_SECONDS = 0.1
MAX_RETRY_PAUSE_SECONDS = 2.0

SERVICE = REDUCE_SERVICE

logger = Logger(service=SERVICE)
# The namespace is the stack's own, from POWERTOOLS_METRICS_NAMESPACE (`aggregation.names.stack_metrics_namespace`).
metrics = Metrics(service=SERVICE)


class IdempotencyMode(Enum):
    """`crt`: the original design, safe for 10 minutes; `crt+marker`: safe for ever.

    `unsafe-add` is the chaos suite's negative control and nothing else: plain atomic
    ADDs with neither token nor marker, so every retry is applied again. The stack's
    settings refuse it; only the local runtime can set it, to prove the verifier
    catches the over-count.
    """

    TOKEN_ONLY = names.TOKEN_ONLY
    TOKEN_AND_MARKERS = names.TOKEN_AND_MARKERS
    UNSAFE_ADD = names.UNSAFE_ADD


def idempotency_mode() -> IdempotencyMode:
    raw = optional_setting("REDUCE_IDEMPOTENCY", IdempotencyMode.TOKEN_AND_MARKERS.value)
    try:
        return IdempotencyMode(raw)
    except ValueError:
        modes = ", ".join(mode.value for mode in IdempotencyMode)
        raise RuntimeError(f"REDUCE_IDEMPOTENCY={raw!r} is not one of {modes}") from None


def _mean_and_max(latencies: Sequence[Decimal]) -> tuple[Decimal, Decimal] | None:
    if not latencies:
        return None
    mean = sum(latencies, Decimal(0)) / len(latencies)
    return mean.quantize(Decimal("0.001")), max(latencies).quantize(Decimal("0.001"))


def node_update(table: str, path_key: str, delta: NodeDelta, aggregate_slice: int) -> dict[str, Any]:
    """The atomic ADD of one node's delta (a transaction's Update, or an `update_item` call),
    to one slice of the node in the table's node key space (`aggregation.aggregate_items`)."""
    return {
        "TableName": table,
        "Key": {AGGREGATE_KEY: {"S": node_item_key(path_key, aggregate_slice)}},
        "UpdateExpression": "ADD #value :value, #count :count",
        "ExpressionAttributeNames": {"#value": NODE_VALUE, "#count": NODE_TRADE_COUNT},
        "ExpressionAttributeValues": {
            ":value": serializer.serialize(dynamodb_number(delta.value)),
            ":count": serializer.serialize(delta.trade_count),
        },
    }


def stats_update(table: str, record_count: int, aggregate_slice: int) -> dict[str, Any]:
    """The atomic ADD of applied messages to one slice's `#stats` (a transaction's Update, or an
    `update_item` call)."""
    return {
        "TableName": table,
        "Key": {AGGREGATE_KEY: {"S": stats_item_key(aggregate_slice)}},
        "UpdateExpression": "ADD #applied :applied",
        "ExpressionAttributeNames": {"#applied": MESSAGES_APPLIED},
        "ExpressionAttributeValues": {":applied": serializer.serialize(record_count)},
    }


def transaction_items(
    plan: PlannedTransaction, table: str, mode: IdempotencyMode, marker_ttl: int
) -> list[dict[str, Any]]:
    """The TransactItems of one planned transaction: nodes, markers, then `#stats`.

    A pure function of the plan's units (module docstring): the same units always give the
    identical request, so its token can never be reused with other parameters.
    """
    items: list[dict[str, Any]] = [
        {"Update": node_update(table, key, delta, plan.aggregate_slice)}
        for key, delta in sorted(plan.node_deltas.items())
    ]
    if mode is IdempotencyMode.TOKEN_AND_MARKERS:
        items.extend(
            {
                "Put": {
                    "TableName": table,
                    "Item": marker_item(unit.marker_id, marker_expires_at(unit.created_at, marker_ttl)),
                    "ConditionExpression": f"attribute_not_exists({AGGREGATE_KEY})",
                }
            }
            for unit in plan.units
        )
    items.append({"Update": stats_update(table, plan.record_count, plan.aggregate_slice)})
    return items


def record_progress(table: str, latencies: Sequence[Decimal], now: float, aggregate_slice: int) -> None:
    """`#stats` bookkeeping that depends on the clock, written after the transactions (to the
    stats item of a slice they wrote): `LastUpdated`, the mean and max latency of this
    invocation's messages, and their latency histogram ADDed to the slice's
    (`aggregation.latency`).

    Outside any tokened transaction, so a retry's new clock reading never changes a
    transaction's parameters. The histogram is a figure, never a total: which retries measure a
    message again is `aggregation.latency`'s docstring.
    """
    update = "SET #updated = :updated"
    names = {"#updated": LAST_UPDATED}
    values: dict[str, Any] = {":updated": serializer.serialize(Decimal(repr(now)).quantize(Decimal("0.001")))}
    latency = _mean_and_max(latencies)
    if latency is not None:
        update += ", #mean = :mean, #max = :max"
        names |= {"#mean": LAST_LATENCY_MEAN_SECONDS, "#max": LAST_LATENCY_MAX_SECONDS}
        values |= {":mean": serializer.serialize(latency[0]), ":max": serializer.serialize(latency[1])}
        additions = []
        for bucket, count in sorted(histogram(latencies).items()):
            additions.append(f"#b{bucket} :b{bucket}")
            names[f"#b{bucket}"] = bucket_attribute(bucket)
            values[f":b{bucket}"] = serializer.serialize(count)
        update += " ADD " + ", ".join(additions)
    dynamodb_client().update_item(
        TableName=table,
        Key={AGGREGATE_KEY: {"S": stats_item_key(aggregate_slice)}},
        UpdateExpression=update,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )


def already_applied_markers(error: ClientError, items: Sequence[dict[str, Any]]) -> set[str] | None:
    """Marker ids whose condition failed, if markers are the ONLY reason for the cancellation.

    None means the cancellation had another cause (a conflict, throttling, a bad
    request): that is a real failure and the batch must be retried.
    """
    reasons = error.response.get("CancellationReasons", [])
    if len(reasons) != len(items):
        return None
    applied: set[str] = set()
    for reason, item in zip(reasons, items, strict=True):
        code = reason.get("Code", "None")
        if code in ("None", None):
            continue
        key = item.get("Put", {}).get("Item", {}).get(AGGREGATE_KEY, {}).get("S", "")
        if code != "ConditionalCheckFailed" or not key.startswith(MARKER_PREFIX):
            return None
        applied.add(key.removeprefix(MARKER_PREFIX))
    return applied or None


def apply_unsafely(units: Sequence[DeltaUnit], table: str) -> dict[str, int]:
    """The negative control: one plain ADD per node and per `#stats`, no token, no marker."""
    for unit in units:
        for key, delta in unit.deltas:
            dynamodb_client().update_item(**node_update(table, key, delta, unit.aggregate_slice))
        dynamodb_client().update_item(**stats_update(table, unit.record_count, unit.aggregate_slice))
    return {"transactions": 0, "units_applied": len(units)}


class TokenMismatchWithoutEvidence(RuntimeError):
    """A ClientRequestToken was refused as reused with other parameters, and no marker shows
    its units applied: failing the invocation is the only safe answer (the batch is retried;
    the token expires within 10 minutes)."""


def markers_present(table: str, marker_ids: Sequence[str]) -> set[str]:
    """Which of these markers exist, by strongly consistent reads (the evidence of an apply)."""
    present: set[str] = set()
    for start in range(0, len(marker_ids), BATCH_GET_MAX_KEYS):
        request: dict[str, Any] = {
            table: {
                "Keys": [marker_key(marker_id) for marker_id in marker_ids[start : start + BATCH_GET_MAX_KEYS]],
                "ConsistentRead": True,
                "ProjectionExpression": AGGREGATE_KEY,
            }
        }
        for attempt in range(UNPROCESSED_KEY_ATTEMPTS):
            response = dynamodb_client().batch_get_item(RequestItems=request)
            present.update(
                item[AGGREGATE_KEY]["S"].removeprefix(MARKER_PREFIX) for item in response["Responses"].get(table, [])
            )
            request = response.get("UnprocessedKeys") or {}
            if not request:
                break
            time.sleep(min(RETRY_PAUSE_SECONDS * 2**attempt, MAX_RETRY_PAUSE_SECONDS))
        else:
            raise RuntimeError("markers could not be read (unprocessed keys); retrying the batch")
    return present


@dataclass
class ApplyOutcome:
    transactions: int = 0
    units_applied: int = 0
    units_already_applied: int = 0
    conflicts_retried: int = 0
    messages_applied: int = 0  # the `RecordCount` of the units applied now
    latencies: list[Decimal] = field(default_factory=list)
    """Seconds from each producer timestamp of the units applied now to their transaction's commit."""
    slices_written: set[int] = field(default_factory=set)


def is_conflict(error: ClientError) -> bool:
    """A cancellation because another request was writing one of the items (and nothing else)."""
    if error_code(error) != "TransactionCanceledException":
        return False
    codes = {reason.get("Code") for reason in error.response.get("CancellationReasons", [])} - {"None", None}
    return codes == {"TransactionConflict"}


def commit_transaction(items: Sequence[dict[str, Any]], token: str, outcome: ApplyOutcome) -> None:
    """TransactWriteItems; the identical request again while DynamoDB reports it in progress or
    cancels it for a conflict (module docstring), each conflict counted in `outcome`."""
    in_progress = conflicts = 0
    while True:
        try:
            prevalidated_write_client().transact_write_items(
                TransactItems=items,  # type: ignore[arg-type]
                ClientRequestToken=token,
            )
            return
        except ClientError as error:
            if error_code(error) == "TransactionInProgressException" and in_progress < IN_PROGRESS_ATTEMPTS - 1:
                in_progress += 1
                time.sleep(min(RETRY_PAUSE_SECONDS * 2**in_progress, MAX_RETRY_PAUSE_SECONDS))
            elif is_conflict(error) and conflicts < CONFLICT_ATTEMPTS:
                conflicts += 1
                outcome.conflicts_retried += 1
                time.sleep(random.uniform(0, min(RETRY_PAUSE_SECONDS * 2**conflicts, MAX_RETRY_PAUSE_SECONDS)))
            else:
                raise


def units_applied_elsewhere(
    error: ClientError, plan: PlannedTransaction, items: Sequence[dict[str, Any]], table: str, mode: IdempotencyMode
) -> set[str]:
    """Marker ids of the plan's units that evidence shows applied; raises when there is none."""
    code = error_code(error)
    if code == "TransactionCanceledException" and (applied := already_applied_markers(error, items)):
        return applied
    if code != "IdempotentParameterMismatchException":
        raise error
    applied = markers_present(table, plan.marker_ids) if mode is IdempotencyMode.TOKEN_AND_MARKERS else set()
    logger.warning(
        "token refused as reused with other parameters",
        extra={"token": plan.client_request_token, "units": len(plan.units), "markers_found": len(applied)},
    )
    if not applied:
        raise TokenMismatchWithoutEvidence(
            f"ClientRequestToken {plan.client_request_token} mismatched and no marker of its units exists"
        ) from error
    return applied


def apply_delta_units(units: Sequence[DeltaUnit], table: str, mode: IdempotencyMode, slices: int = 1) -> ApplyOutcome:
    """Apply every unit exactly once (module docstring), in transactions over `slices` slices."""
    marker_ttl = ttl_seconds("MARKER_TTL_DAYS", DEFAULT_MARKER_TTL_DAYS)
    with_markers = mode is IdempotencyMode.TOKEN_AND_MARKERS
    planned = plan_transactions(units, with_markers, slices)
    outcome = ApplyOutcome()
    while planned:
        plan = planned[0]
        items = transaction_items(plan, table, mode, marker_ttl)
        try:
            commit_transaction(items, plan.client_request_token, outcome)
        except ClientError as error:
            applied = units_applied_elsewhere(error, plan, items, table, mode)
            outcome.units_already_applied += len(applied)
            remaining = [unit for later in planned for unit in later.units if unit.marker_id not in applied]
            planned = plan_transactions(remaining, with_markers, slices)
            continue
        committed_at = Decimal(repr(time.time()))
        outcome.transactions += 1
        outcome.units_applied += len(plan.units)
        outcome.messages_applied += plan.record_count
        outcome.latencies.extend(latency_seconds(committed_at, plan.producer_timestamps))
        outcome.slices_written.add(plan.aggregate_slice)
        planned = planned[1:]
    return outcome


def report_applied(outcome: ApplyOutcome) -> None:
    """`MessagesApplied` and one `EndToEndLatency` value (ms) per message measured, as
    high-resolution metrics (1 s), so that CloudWatch computes p50, p99 and the maximum and
    `producer send` can read them back within seconds (`aggregation.latency`).

    The same messages as the histogram in `#stats` (`aggregation.latency`: once each, save a
    rare retry). The latencies go out in documents of 100 values at once
    (`function_support.metrics`: one `add_metric` per value cost more than the rest of the
    message's work).
    """
    metrics.add_metric(
        name=MESSAGES_APPLIED, unit=MetricUnit.Count, value=outcome.messages_applied, resolution=MetricResolution.High
    )
    publish_metric_values(
        metrics,
        name=END_TO_END_LATENCY,
        unit=MetricUnit.Milliseconds,
        resolution=MetricResolution.High,
        values=[milliseconds(latency) for latency in outcome.latencies],
    )


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    maybe_inject_failure(STAGE, FailurePoint.BEFORE_WRITE)
    table = required_setting("AGGREGATE_TABLE")
    mode = idempotency_mode()
    slices = int_setting("AGGREGATE_SLICES", 1, minimum=1)
    units: list[DeltaUnit] = []
    non_inserts = 0
    for record in DynamoDBStreamEvent(event).records:
        if not is_insert(record):
            non_inserts += 1
            continue
        if record.dynamodb is None:
            raise ValueError(f"stream record {record.event_id} has no dynamodb payload")
        image = record.dynamodb.raw_event.get("NewImage") or {}
        aggregate_slice = slice_of(decode_stream_run(image).stream_shard, slices)
        units.extend(split_into_units(decode_delta_batch(image), aggregate_slice=aggregate_slice))
    if not units:
        counts = {"transactions": 0}
    elif mode is IdempotencyMode.UNSAFE_ADD:
        counts = apply_unsafely(units, table)
    else:
        outcome = apply_delta_units(units, table, mode, slices)
        if outcome.slices_written:  # one slice's figures suffice: readers take the latest (`combined_stats`)
            record_progress(table, outcome.latencies, time.time(), min(outcome.slices_written))
        report_applied(outcome)
        counts = {
            "transactions": outcome.transactions,
            "units_applied": outcome.units_applied,
            "units_already_applied": outcome.units_already_applied,
            "conflicts_retried": outcome.conflicts_retried,
        }
    metrics.add_metric(name=NON_INSERT_RECORDS_SKIPPED, unit=MetricUnit.Count, value=non_inserts)
    metrics.add_metric(name="TransactionsCommitted", unit=MetricUnit.Count, value=counts["transactions"])
    metrics.add_metric(
        name="DeltaUnitsAlreadyApplied", unit=MetricUnit.Count, value=counts.get("units_already_applied", 0)
    )
    metrics.add_metric(
        name=TRANSACTION_CONFLICTS_RETRIED, unit=MetricUnit.Count, value=counts.get("conflicts_retried", 0)
    )
    logger.info("reduce batch done", extra=counts)
    maybe_inject_failure(STAGE, FailurePoint.AFTER_WRITE)
    return counts
