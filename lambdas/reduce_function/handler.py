"""Reduce function: apply each delta batch to the AggregateTable exactly once.

The mapping delivers only INSERT records of the DeltaTable (event filter). The
batches' units (per node group, `aggregation.transactions`) are applied in the
transactions planned there: one update per node per group transaction, however
many batches touch it; every transaction carries a ClientRequestToken derived
from its units and, in mode `crt+marker`, a conditional Put of each unit's
marker. Outcomes that mean "already applied" are success:
- IdempotentParameterMismatchException: this token already committed within the
  last 10 minutes (a retry whose `#stats` timestamps differ; the token names the
  units, and a unit's deltas are fixed by its marker id, so nothing else can);
- a cancellation whose only failed conditions are markers: those units were
  applied before (alone, with other neighbours, or by an earlier attempt of this
  invocation that failed further on); they are dropped and every remaining unit
  is planned again.
"""

import time
from collections.abc import Sequence
from decimal import Decimal
from enum import Enum
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from aggregation.deltas import NodeDelta
from aggregation.exact import dynamodb_number, exact_difference
from aggregation.hierarchy import BOOKKEEPING_PREFIX
from aggregation.transactions import (
    DeltaBatch,
    DeltaUnit,
    PlannedTransaction,
    plan_transactions,
    split_into_units,
)
from function_support.aws import dynamodb_client, error_code, serializer
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.settings import METRICS_NAMESPACE, optional_setting, required_setting, ttl_seconds
from function_support.stream_records import NON_INSERT_RECORDS_SKIPPED, is_insert

STAGE = "REDUCE"
DEFAULT_MARKER_TTL_DAYS = 7
STATS_KEY = f"{BOOKKEEPING_PREFIX}stats"
MARKER_PREFIX = f"{BOOKKEEPING_PREFIX}applied#"

SERVICE = "reduce"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)


class IdempotencyMode(Enum):
    """`crt`: the original design, safe for 10 minutes; `crt+marker`: safe for ever.

    `unsafe-add` is the chaos suite's negative control and nothing else: plain atomic
    ADDs with neither token nor marker, so every retry is applied again. The stack's
    settings refuse it; only the local runtime can set it, to prove the verifier
    catches the over-count.
    """

    TOKEN_ONLY = "crt"
    TOKEN_AND_MARKERS = "crt+marker"
    UNSAFE_ADD = "unsafe-add"


def idempotency_mode() -> IdempotencyMode:
    raw = optional_setting("REDUCE_IDEMPOTENCY", IdempotencyMode.TOKEN_AND_MARKERS.value)
    try:
        return IdempotencyMode(raw)
    except ValueError:
        modes = ", ".join(mode.value for mode in IdempotencyMode)
        raise RuntimeError(f"REDUCE_IDEMPOTENCY={raw!r} is not one of {modes}") from None


def delta_batch(image: dict[str, Any]) -> DeltaBatch:
    """A DeltaTable item (deserialized stream image) as a domain object."""
    return DeltaBatch(
        batch_hash=str(image["BatchHash"]),
        deltas={
            key: NodeDelta(Decimal(node["Value"]), int(node["TradeCount"]))
            for key, node in image.get("Deltas", {}).items()
        },
        record_count=int(image.get("RecordCount", 0)),
        producer_timestamps=tuple(Decimal(ts) for ts in image.get("ProducerTimestamps", [])),
    )


def _latency_seconds(timestamps: Sequence[Decimal], now: Decimal) -> tuple[Decimal, Decimal] | None:
    if not timestamps:
        return None
    latencies = [exact_difference(now, ts) for ts in timestamps]
    mean = sum(latencies, Decimal(0)) / len(latencies)
    return mean.quantize(Decimal("0.001")), max(latencies).quantize(Decimal("0.001"))


def node_update(table: str, key: str, delta: NodeDelta) -> dict[str, Any]:
    """The atomic ADD of one node's delta (a transaction's Update, or an `update_item` call)."""
    return {
        "TableName": table,
        "Key": {"AggregateKey": {"S": key}},
        "UpdateExpression": "ADD #value :value, #count :count",
        "ExpressionAttributeNames": {"#value": "Value", "#count": "TradeCount"},
        "ExpressionAttributeValues": {
            ":value": serializer.serialize(dynamodb_number(delta.value)),
            ":count": serializer.serialize(delta.trade_count),
        },
    }


def transaction_items(
    plan: PlannedTransaction, table: str, mode: IdempotencyMode, now: float, marker_ttl: int
) -> list[dict[str, Any]]:
    """The TransactItems of one planned transaction: nodes, markers, then `#stats`."""
    items: list[dict[str, Any]] = [
        {"Update": node_update(table, key, delta)} for key, delta in sorted(plan.node_deltas.items())
    ]
    if mode is IdempotencyMode.TOKEN_AND_MARKERS:
        items.extend(
            {
                "Put": {
                    "TableName": table,
                    "Item": {
                        "AggregateKey": {"S": MARKER_PREFIX + marker_id},
                        "ExpiresAt": {"N": str(int(now) + marker_ttl)},
                    },
                    "ConditionExpression": "attribute_not_exists(AggregateKey)",
                }
            }
            for marker_id in plan.marker_ids
        )
    now_exact = Decimal(repr(now))
    stats_update = "ADD #applied :applied SET #updated = :updated"
    stats_values: dict[str, Any] = {
        ":applied": serializer.serialize(plan.record_count),
        ":updated": serializer.serialize(now_exact.quantize(Decimal("0.001"))),
    }
    stats_names = {"#applied": "MessagesApplied", "#updated": "LastUpdated"}
    latency = _latency_seconds(plan.producer_timestamps, now_exact)
    if latency is not None:
        stats_update += ", #mean = :mean, #max = :max"
        stats_names |= {"#mean": "LastLatencyMeanSeconds", "#max": "LastLatencyMaxSeconds"}
        stats_values |= {":mean": serializer.serialize(latency[0]), ":max": serializer.serialize(latency[1])}
    items.append(
        {
            "Update": {
                "TableName": table,
                "Key": {"AggregateKey": {"S": STATS_KEY}},
                "UpdateExpression": stats_update,
                "ExpressionAttributeNames": stats_names,
                "ExpressionAttributeValues": stats_values,
            }
        }
    )
    return items


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
        key = item.get("Put", {}).get("Item", {}).get("AggregateKey", {}).get("S", "")
        if code != "ConditionalCheckFailed" or not key.startswith(MARKER_PREFIX):
            return None
        applied.add(key.removeprefix(MARKER_PREFIX))
    return applied or None


def apply_unsafely(units: Sequence[DeltaUnit], table: str) -> dict[str, int]:
    """The negative control: one plain ADD per node and per `#stats`, no token, no marker."""
    for unit in units:
        for key, delta in unit.deltas:
            dynamodb_client().update_item(**node_update(table, key, delta))
        dynamodb_client().update_item(
            TableName=table,
            Key={"AggregateKey": {"S": STATS_KEY}},
            UpdateExpression="ADD #applied :applied",
            ExpressionAttributeNames={"#applied": "MessagesApplied"},
            ExpressionAttributeValues={":applied": serializer.serialize(unit.record_count)},
        )
    return {"transactions": 0, "units_applied": len(units)}


def apply_delta_units(units: Sequence[DeltaUnit], table: str, mode: IdempotencyMode) -> dict[str, int]:
    """Apply every unit exactly once; returns counts for the log and metrics."""
    marker_ttl = ttl_seconds("MARKER_TTL_DAYS", DEFAULT_MARKER_TTL_DAYS)
    with_markers = mode is IdempotencyMode.TOKEN_AND_MARKERS
    planned = plan_transactions(units, with_markers)
    counts = {"transactions": 0, "units_applied": 0, "units_already_applied": 0}
    while planned:
        plan = planned[0]
        items = transaction_items(plan, table, mode, time.time(), marker_ttl)
        try:
            dynamodb_client().transact_write_items(
                TransactItems=items,  # type: ignore[arg-type]
                ClientRequestToken=plan.client_request_token,
            )
        except ClientError as error:
            code = error_code(error)
            if code == "IdempotentParameterMismatchException":
                logger.info("token already committed", extra={"token": plan.client_request_token})
            elif code == "TransactionCanceledException" and (applied := already_applied_markers(error, items)):
                counts["units_already_applied"] += len(applied)
                remaining = [unit for later in planned for unit in later.units if unit.marker_id not in applied]
                planned = plan_transactions(remaining, with_markers)
                continue
            else:
                raise
        counts["transactions"] += 1
        counts["units_applied"] += len(plan.units)
        planned = planned[1:]
    return counts


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    maybe_inject_failure(STAGE, FailurePoint.BEFORE_WRITE)
    table = required_setting("AGGREGATE_TABLE")
    mode = idempotency_mode()
    units: list[DeltaUnit] = []
    non_inserts = 0
    for record in DynamoDBStreamEvent(event).records:
        if not is_insert(record):
            non_inserts += 1
            continue
        if record.dynamodb is None:
            raise ValueError(f"stream record {record.event_id} has no dynamodb payload")
        units.extend(split_into_units(delta_batch(record.dynamodb.new_image)))
    if not units:
        counts = {"transactions": 0}
    elif mode is IdempotencyMode.UNSAFE_ADD:
        counts = apply_unsafely(units, table)
    else:
        counts = apply_delta_units(units, table, mode)
    metrics.add_metric(name=NON_INSERT_RECORDS_SKIPPED, unit=MetricUnit.Count, value=non_inserts)
    metrics.add_metric(name="TransactionsCommitted", unit=MetricUnit.Count, value=counts["transactions"])
    metrics.add_metric(
        name="DeltaUnitsAlreadyApplied", unit=MetricUnit.Count, value=counts.get("units_already_applied", 0)
    )
    logger.info("reduce batch done", extra=counts)
    maybe_inject_failure(STAGE, FailurePoint.AFTER_WRITE)
    return counts
