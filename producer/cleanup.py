"""Resetting the pipeline for a fresh load test: empty every table, forget the ledger.

Why both: the ledger is the ground truth for what is in the tables; clearing
one without the other makes the next verification meaningless. Like the
original clearTables.py this asks no questions (it runs in CI and the demo).
Run it while the pipeline is idle: records still in flight would land after.

Deleting state items is the one thing the state function's version cache does not
expect (a stored version never decreases otherwise): warm execution environments still
remember the versions they saw, so the clear says to restart them before the same
TradeIDs are sent again at the same or lower versions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import TYPE_CHECKING, cast

from toolkit.ledger import DEFAULT_LEDGER_PATH
from toolkit.pipeline import PipelineTarget

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, WriteRequestTypeDef

BATCH_WRITE_LIMIT = 25
RESTART_AFTER_CLEAR = (
    "warm state functions still remember the versions they wrote (stateVersionCacheSize): restart them "
    "(make down && make up; on AWS, deploy any change to the state function) before re-sending the same "
    "TradeIDs at the same or lower versions"
)


@dataclass
class ClearSummary:
    """Items deleted per table, the ledger removed (if there was one), and remarks."""

    deleted_items: dict[str, int] = field(default_factory=dict)
    ledger_deleted: Path | None = None
    notes: list[str] = field(default_factory=list)


def _delete_keys(
    client: DynamoDBClient,
    table: str,
    keys: Sequence[Mapping[str, AttributeValueTypeDef]],
    sleep: Callable[[float], None],
) -> None:
    """One batch_write_item of deletes, retrying UnprocessedItems with backoff and jitter."""
    requests: list[WriteRequestTypeDef] = [{"DeleteRequest": {"Key": dict(key)}} for key in keys]
    jitter = Random()
    attempt = 0
    while requests:
        response = client.batch_write_item(RequestItems={table: requests})
        requests = cast("list[WriteRequestTypeDef]", list(response.get("UnprocessedItems", {}).get(table, [])))
        if requests:
            sleep(jitter.uniform(0, min(5.0, 0.05 * 2**attempt)))
            attempt += 1


def empty_table(
    client: DynamoDBClient, table: str, workers: int = 8, sleep: Callable[[float], None] = time.sleep
) -> int:
    """Delete every item of a table (any key schema); returns how many were deleted.

    Each round scans one page of keys from the start and deletes it, so the
    scan never continues from a key that was just deleted.
    """
    key_schema = client.describe_table(TableName=table)["Table"]["KeySchema"]
    names = {f"#k{index}": key["AttributeName"] for index, key in enumerate(key_schema)}
    deleted = 0
    start_key: dict[str, AttributeValueTypeDef] | None = None
    with ThreadPoolExecutor(max_workers=workers) as executor:
        while True:
            if start_key is None:
                page = client.scan(
                    TableName=table,
                    ProjectionExpression=", ".join(names),
                    ExpressionAttributeNames=names,
                    ConsistentRead=True,
                )
            else:
                page = client.scan(
                    TableName=table,
                    ProjectionExpression=", ".join(names),
                    ExpressionAttributeNames=names,
                    ConsistentRead=True,
                    ExclusiveStartKey=start_key,
                )
            items = page.get("Items", [])
            if items:
                batches = [
                    items[start : start + BATCH_WRITE_LIMIT] for start in range(0, len(items), BATCH_WRITE_LIMIT)
                ]
                list(executor.map(lambda batch: _delete_keys(client, table, batch, sleep), batches))
                deleted += len(items)
                start_key = None
            elif "LastEvaluatedKey" in page:
                start_key = dict(page["LastEvaluatedKey"])
            else:
                return deleted


def clear_pipeline(
    target: PipelineTarget,
    ledger_path: Path | None = DEFAULT_LEDGER_PATH,
    *,
    dynamodb_client: DynamoDBClient | None = None,
) -> ClearSummary:
    """Empty the state, delta, aggregate and quarantine tables and delete the ledger."""
    client = dynamodb_client or target.dynamodb(max_pool_connections=16)
    summary = ClearSummary()
    tables = {
        "state table": target.state_table,
        "delta table": target.delta_table,
        "aggregate table": target.aggregate_table,
    }
    if target.quarantine:
        tables["quarantine table"] = target.quarantine
    for role, table in tables.items():
        if table:
            summary.deleted_items[f"{role} {table}"] = empty_table(client, table)
        else:
            summary.notes.append(f"no {role} in this pipeline's outputs; skipped")
    if target.state_table:
        summary.notes.append(RESTART_AFTER_CLEAR)
    if ledger_path is not None and ledger_path.exists():
        ledger_path.unlink()
        summary.ledger_deleted = ledger_path
    return summary
