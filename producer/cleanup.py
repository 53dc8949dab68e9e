"""Resetting the pipeline for a fresh load test, through the pipeline itself.

Why not empty every table: the state items clear deletes produce REMOVE records on the
StateTable stream, which the map stage turns into subtractions and the reduce stage applies.
Emptying the AggregateTable (or the DeltaTable) behind their back left those subtractions
to land on the next run's totals, which went negative. So ``clear`` deletes only the
StateTable's items and lets the pipeline take their totals away: it waits until every node
(the sum of its slices, `aggregation.aggregate_items.sum_node_slices`, read as the verifier
reads it) is back at zero value and zero trades. The delta items, the reduce markers and
``#stats`` stay, and so does the S3 archive, which keeps reconciling with the table: a node
at zero equals an absent one in every comparison (`toolkit.ledger.same_totals`).

When is it done: the StateTable is empty and every node is zero, and the StateTable is still
empty when checked again after the nodes were read. Every trade then left the totals: once the
pipeline drains, the totals are the sum of the StateTable's items, none, so anything still in
flight nets to zero node by node. A state item that appears meanwhile (a send still in
flight) is deleted in the next round; ``timeout`` bounds the wait (`ClearTimeout`, saying what
is left). Stop the senders first: records still on the Kinesis stream are written after clear
has returned.

The QuarantineTable is emptied outright (nothing consumes it) and the ledger deleted: it is the
ground truth of what the tables hold, and it stops being that the moment state items go.

Deleting state items is the one thing the state function's version cache does not expect (a
stored version never decreases otherwise): warm execution environments still remember the
versions they saw, so the clear says to restart them before the same TradeIDs are sent again
at the same or lower versions. Like the original clearTables.py it asks no questions (it runs
in CI and the demo).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import TYPE_CHECKING, Protocol, cast

from producer.journal import journals_of
from producer.verifier import read_aggregate_table
from toolkit.ledger import DEFAULT_LEDGER_PATH
from toolkit.pipeline import PipelineTarget

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, WriteRequestTypeDef

BATCH_WRITE_LIMIT = 25
DEFAULT_CLEAR_TIMEOUT_SECONDS = 300.0
RESTART_AFTER_CLEAR = (
    "warm state functions still remember the versions they wrote (stateVersionCacheSize): restart them "
    "(make down && make up; on AWS, deploy any change to the state function) before re-sending the same "
    "TradeIDs at the same or lower versions"
)


class ClearTimeout(Exception):
    """The pipeline did not bring every node to zero in time; the message says what is left, in one line."""


@dataclass
class ClearSummary:
    """Items deleted per table, the ledger removed (if there was one), and remarks."""

    deleted_items: dict[str, int] = field(default_factory=dict)
    ledger_deleted: Path | None = None
    notes: list[str] = field(default_factory=list)
    waited_seconds: float = 0.0
    """How long the pipeline took to bring every node to zero."""


@dataclass(frozen=True)
class ClearStatus:
    """One round of the wait, for a progress display."""

    state_items_deleted: int
    """State items deleted so far, every round together."""
    nonzero_nodes: int
    elapsed_seconds: float
    timeout_seconds: float


class ClearProgress(Protocol):
    """Someone showing the wait (the CLI's spinner); the clear only reports to it."""

    def update(self, status: ClearStatus) -> None:
        """One round: state items deleted so far, nodes not yet back at zero."""


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


def count_items(client: DynamoDBClient, table: str) -> int:
    """How many items the table holds now (a consistent ``Select=COUNT`` scan)."""
    return sum(
        page.get("Count", 0)
        for page in client.get_paginator("scan").paginate(TableName=table, Select="COUNT", ConsistentRead=True)
    )


def nonzero_nodes(client: DynamoDBClient, aggregate_table: str) -> list[str]:
    """The nodes whose slices do not sum to zero value and zero trades, sorted."""
    return sorted(key for key, node in read_aggregate_table(client, aggregate_table).nodes.items() if not node.is_empty)


def _what_is_left(nodes: Sequence[str], state_items: int) -> str:
    shown = ", ".join(nodes[:3]) + (", …" if len(nodes) > 3 else "")
    left = [f"{len(nodes):,} nodes not at zero ({shown})"] if nodes else []
    if state_items:
        left.append(f"{state_items:,} state items")
    return " and ".join(left)


def clear_pipeline(
    target: PipelineTarget,
    ledger_path: Path | None = DEFAULT_LEDGER_PATH,
    *,
    timeout: float = DEFAULT_CLEAR_TIMEOUT_SECONDS,
    poll_interval: float = 1.0,
    progress: ClearProgress | None = None,
    dynamodb_client: DynamoDBClient | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ClearSummary:
    """Delete every state item, wait until the pipeline has brought every node to zero, delete the ledger.

    Also empties the QuarantineTable. Raises ClearTimeout when nodes or state items are left
    after ``timeout`` seconds (the ledger is deleted all the same: the state items it
    described are gone). AWS errors propagate.
    """
    client = dynamodb_client or target.dynamodb(max_pool_connections=16)
    summary = ClearSummary()
    if target.quarantine:
        summary.deleted_items[f"quarantine table {target.quarantine}"] = empty_table(client, target.quarantine)
    else:
        summary.notes.append("no quarantine table in this pipeline's outputs; skipped")
    state_role = f"state table {target.state_table}"
    summary.deleted_items[state_role] = 0
    started = clock()
    while True:
        summary.deleted_items[state_role] += empty_table(client, target.state_table, sleep=sleep)
        if ledger_path is not None:
            for journal in journals_of(ledger_path):  # a killed run's: its trades are deleted too
                journal.unlink(missing_ok=True)
        if ledger_path is not None and ledger_path.exists():
            ledger_path.unlink()
            summary.ledger_deleted = ledger_path
        nodes = nonzero_nodes(client, target.aggregate_table)
        state_items = count_items(client, target.state_table)
        elapsed = clock() - started
        if not nodes and not state_items:
            break
        if elapsed >= timeout:
            raise ClearTimeout(
                f"the pipeline did not bring every node to zero within {timeout:g} s: "
                f"{_what_is_left(nodes, state_items)} left; is the pipeline running?"
            )
        if progress is not None:
            progress.update(ClearStatus(summary.deleted_items[state_role], len(nodes), elapsed, timeout))
        sleep(max(0.0, min(poll_interval, started + timeout - clock())))
    summary.waited_seconds = elapsed
    summary.notes.append(RESTART_AFTER_CLEAR)
    return summary
