"""State function: validate each Kinesis record, then write each trade's newest version.

Per batch: parse and validate every record (invalid ones are quarantined), keep
only the highest Version per TradeID, and issue one conditional `update_item` per
remaining message (`attribute_not_exists(TradeID) OR Version < :version`). A
failed condition means the table already holds this or a newer version: the
message is a duplicate or stale and changes nothing. Writes for distinct TradeIDs
are independent, so they run concurrently in a bounded pool.
"""

from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import KinesisStreamEvent
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from aggregation.batches import latest_versions
from aggregation.exact import dynamodb_number
from aggregation.messages import InvalidMessage, TradeMessage, parse_trade_message
from function_support.aws import dynamodb_client, error_code, serializer
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.settings import METRICS_NAMESPACE, hierarchy_levels, positive_int_setting, required_setting
from state_function.quarantine import QuarantinedRecord, quarantine_records

STAGE = "STATE"
DEFAULT_WRITE_CONCURRENCY = 16

SERVICE = "state"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)


@cache
def write_pool() -> ThreadPoolExecutor:
    """One bounded pool per execution environment."""
    workers = positive_int_setting("STATE_WRITE_CONCURRENCY", DEFAULT_WRITE_CONCURRENCY)
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="state-write")


def apply_state_change(table_name: str, message: TradeMessage, levels: tuple[str, ...]) -> bool:
    """Write `message` unless the table holds this or a newer version. True when written."""
    names = {
        "#trade_id": "TradeID",
        "#version": "Version",
        "#value": "Value",
        "#hierarchy": "Hierarchy",
        "#timestamp": "Timestamp",
    }
    values = {
        ":version": serializer.serialize(message.version),
        ":value": serializer.serialize(dynamodb_number(message.value)),
        ":hierarchy": serializer.serialize(dict(zip(levels, message.hierarchy, strict=True))),
    }
    assignments = "#value = :value, #version = :version, #hierarchy = :hierarchy"
    if message.timestamp is None:
        update = f"SET {assignments} REMOVE #timestamp"
    else:
        values[":timestamp"] = serializer.serialize(dynamodb_number(message.timestamp))
        update = f"SET {assignments}, #timestamp = :timestamp"
    try:
        dynamodb_client().update_item(
            TableName=table_name,
            Key={"TradeID": {"S": message.trade_id}},
            UpdateExpression=update,
            ConditionExpression="attribute_not_exists(#trade_id) OR #version < :version",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )
    except ClientError as error:
        if error_code(error) == "ConditionalCheckFailedException":
            return False
        raise
    return True


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    maybe_inject_failure(STAGE, FailurePoint.BEFORE_WRITE)
    state_table = required_setting("STATE_TABLE")
    quarantine_table = required_setting("QUARANTINE_TABLE")
    levels = hierarchy_levels()

    messages: list[TradeMessage] = []
    invalid: list[QuarantinedRecord] = []
    for record in KinesisStreamEvent(event).records:
        payload = record.kinesis.data_as_bytes()
        try:
            messages.append(parse_trade_message(payload, levels))
        except InvalidMessage as error:
            invalid.append(
                QuarantinedRecord(
                    event_id=record.event_id,
                    shard_id=record.event_id.split(":", 1)[0],
                    sequence_number=record.kinesis.sequence_number,
                    partition_key=record.kinesis.partition_key,
                    payload=payload,
                    reason=error.reason,
                )
            )
    if invalid:
        quarantine_records(quarantine_table, invalid)
        logger.warning("quarantined invalid records", extra={"reasons": [r.reason for r in invalid]})

    latest = latest_versions(messages)
    written = sum(write_pool().map(lambda m: apply_state_change(state_table, m, levels), latest))
    summary = {
        "received": len(messages) + len(invalid),
        "written": written,
        "duplicate_or_stale": len(messages) - written,
        "quarantined": len(invalid),
    }
    metrics.add_metric(name="MessagesReceived", unit=MetricUnit.Count, value=summary["received"])
    metrics.add_metric(name="MessagesWritten", unit=MetricUnit.Count, value=written)
    metrics.add_metric(name="DuplicateOrStaleMessages", unit=MetricUnit.Count, value=summary["duplicate_or_stale"])
    metrics.add_metric(name="QuarantinedRecords", unit=MetricUnit.Count, value=len(invalid))
    logger.info("state batch done", extra=summary)
    maybe_inject_failure(STAGE, FailurePoint.AFTER_WRITE)
    return summary
