"""Map function: turn a batch of state changes into one DeltaTable item.

Every INSERT, MODIFY and REMOVE record of the StateTable stream is a trade's
state going from its old image to its new one; the batch's net node deltas are
written as ONE item keyed by the batch identity with `attribute_not_exists`, so
a retried batch (Lambda retries with the identical records) writes nothing new.
The item records the invocation that wrote it, so a put whose response was lost
and that the SDK retried is still reported as this invocation's write.
"""

import time
from decimal import Decimal
from typing import Any, cast

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from aggregation.batches import batch_identity
from aggregation.deltas import TradeState, sum_state_changes
from aggregation.exact import dynamodb_number
from aggregation.hierarchy import hierarchy_path
from function_support.aws import dynamodb_client, error_code, serializer
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.settings import METRICS_NAMESPACE, hierarchy_levels, required_setting, ttl_seconds

STAGE = "MAP"
DEFAULT_DELTA_TTL_DAYS = 7

SERVICE = "map"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)


def trade_state(image: dict[str, Any], levels: tuple[str, ...]) -> TradeState | None:
    """The aggregate-relevant state in a stream image; None for an absent image."""
    if not image:
        return None
    return TradeState(value=Decimal(image["Value"]), path=hierarchy_path(image["Hierarchy"], levels))


def delta_item(event: DynamoDBStreamEvent, levels: tuple[str, ...], now: float, ttl: int) -> dict[str, Any]:
    """The DeltaTable item of one batch (docs/architecture.md, "DeltaTable")."""
    event_ids: list[str] = []
    changes: list[tuple[TradeState | None, TradeState | None]] = []
    timestamps: list[Decimal] = []
    for record in event.records:
        stream_record = record.dynamodb
        if record.event_id is None or stream_record is None:
            raise ValueError("stream record without eventID or dynamodb payload")
        event_ids.append(record.event_id)
        new_image = stream_record.new_image
        changes.append((trade_state(stream_record.old_image, levels), trade_state(new_image, levels)))
        if new_image.get("Timestamp") is not None:
            timestamps.append(Decimal(new_image["Timestamp"]))
    deltas = sum_state_changes(changes)
    return {
        "BatchHash": batch_identity(event_ids),
        "Deltas": {
            key: {"Value": dynamodb_number(delta.value), "TradeCount": delta.trade_count}
            for key, delta in sorted(deltas.items())
        },
        "RecordCount": len(event_ids),
        "ProducerTimestamps": timestamps,
        "CreatedAt": int(now),
        "ExpiresAt": int(now) + ttl,
    }


def write_delta_item(table_name: str, item: dict[str, Any], request_id: str) -> bool:
    """Conditional put; False when an earlier invocation already wrote this batch's item."""
    try:
        dynamodb_client().put_item(
            TableName=table_name,
            Item={
                key: serializer.serialize(value) for key, value in (item | {"WrittenByRequestId": request_id}).items()
            },
            ConditionExpression="attribute_not_exists(BatchHash)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ClientError as error:
        if error_code(error) != "ConditionalCheckFailedException":
            raise
        stored: dict[str, Any] = cast(dict[str, Any], error.response).get("Item", {})  # ALL_OLD
        return bool(stored.get("WrittenByRequestId", {}).get("S") == request_id)
    return True


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    maybe_inject_failure(STAGE, FailurePoint.BEFORE_WRITE)
    stream_event = DynamoDBStreamEvent(event)
    if not event.get("Records"):
        return {"records": 0, "written": False}
    item = delta_item(
        stream_event, hierarchy_levels(), time.time(), ttl_seconds("DELTA_TTL_DAYS", DEFAULT_DELTA_TTL_DAYS)
    )
    written = write_delta_item(required_setting("DELTA_TABLE"), item, context.aws_request_id)
    summary = {
        "records": item["RecordCount"],
        "nodes": len(item["Deltas"]),
        "batch_hash": item["BatchHash"],
        "written": written,
    }
    metrics.add_metric(name="StateChangesMapped", unit=MetricUnit.Count, value=item["RecordCount"])
    outcome_metric = "DeltaBatchesWritten" if written else "DeltaBatchesAlreadyWritten"
    metrics.add_metric(name=outcome_metric, unit=MetricUnit.Count, value=1)
    logger.info("map batch done", extra=summary)
    maybe_inject_failure(STAGE, FailurePoint.AFTER_WRITE)
    return summary
