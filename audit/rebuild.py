"""`rebuild`: restore the aggregate table from the archive (disaster recovery), idempotently.

What it writes, all as absolute values (PutItem / SET, never ADD), so running it twice leaves
the same table as running it once:

* every node the archive knows, with its exact total (`Value`, `TradeCount`);
* `#stats` `MessagesApplied` = the archived state changes (other `#stats` attributes kept);
* the reduce stage's idempotency markers of every delta created within `marker_window_hours`
  (default 48: beyond the 24-hour stream retention), so that a stream record still replayable
  after the rebuild is recognised as applied: one per delta unit,
  `#applied#<batch hash>/<group>of<groups>/<slice>` (`aggregation.names.marker_id`), split
  exactly as the reduce stage splits it (`aggregation.transactions.split_into_units`), and
  expiring when the reduce stage's would: `marker_ttl_days` (default 7, as `markerTtlDays`)
  after the delta item's `CreatedAt` (`aggregation.transactions.marker_expires_at`).

Each node is written whole into its slice 0 (`aggregation.aggregate_items`), and `#stats` into
its slice 0; every other node or stats item is deleted: the other slices, items of the layout
before slices, and nodes that no archived delta ever touched. After a rebuild the table's nodes
are exactly the archive's. Stop the reduce stage first (disable its event source mapping) so
that no transaction lands between the read and the writes.

**Refused while the archive lags behind reduce** (`archive_lag`). The archive function consumes
the DeltaTable stream beside reduce, so it may trail it; a rebuild then would leave the
deltas reduce applied but the archive does not yet hold out of the totals, while their markers
stay in the table, so no replay would ever apply them again: totals silently wrong for good.
Two facts of the table prove the lag, and either refuses the whole rebuild (one line, nothing
written, dry run included): a reduce marker naming a batch the archive lacks
(`aggregation.names.batch_hash_of_marker`; markers expire by TTL, archived objects never do, so
every live marker's batch must be archived), or `#stats` `MessagesApplied` above the state
changes archived (mode `crt` writes no markers; that counter covers it). Rebuilding only the
provable part instead would need the lagging deltas' markers removed, or they would stay
applied-but-absent; and a partial rebuild is easy to mistake for a finished one. Refusing costs
a wait: the archive catches up by itself (its mapping retries until success), or a deleted
object is restored (README, "Audit archive"). What no check can see: a table already wiped (no
markers, no `#stats`), which is the disaster rebuild is for; and in mode `crt` a replay after
the token window over-counts `MessagesApplied` too, which this refusal reads as lag: check
`audit reconcile`'s registry lines (the archive's own records) before concluding either way.

**Refused from a damaged archive** (`archive_damage`): an object that is not a valid document, two
copies of one delta item that differ, or a receipt whose batch object is missing or holds other
items (an object removed or altered: `aggregation.archive`). Each item counts once however many
objects hold it, so copies a retry wrote in other boundaries are no damage.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from boto3.dynamodb.types import TypeSerializer

from aggregation.aggregate_items import node_item_key
from aggregation.archive import archived_totals, check_registry
from aggregation.deltas import NodeDelta
from aggregation.exact import dynamodb_number
from aggregation.names import (
    AGGREGATE_KEY,
    MARKER_PREFIX,
    MESSAGES_APPLIED,
    NODE_TRADE_COUNT,
    NODE_VALUE,
    STATS_KEY,
    batch_hash_of_marker,
)
from aggregation.transactions import (
    DEFAULT_MARKER_TTL_DAYS,
    DeltaBatch,
    marker_expires_at,
    marker_item,
    split_into_units,
)
from audit.aggregate_table import AggregateTableContents, read_aggregate_table
from audit.archive_reader import ArchiveContents, read_archive
from audit.targets import AuditError, AuditTarget

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

SECONDS_PER_HOUR: Final = 3600
SECONDS_PER_DAY: Final = 86_400
DEFAULT_MARKER_WINDOW_HOURS: Final = 48
BATCH_WRITE_LIMIT: Final = 25
MAX_UNPROCESSED_ROUNDS: Final = 20

_serializer = TypeSerializer()


@dataclass
class RebuildPlan:
    """What the table will hold after the rebuild."""

    nodes: dict[str, NodeDelta]
    stale_items: list[str]
    """Items the rebuild deletes (`AggregateKey`s): nodes no archived delta touched, and every
    slice of a node or of `#stats` but the slice 0 it writes whole."""
    messages_applied: int
    markers: dict[str, int] = field(default_factory=dict)  # marker id -> its expiry (`ExpiresAt`)


def archive_lag(archive: ArchiveContents, table: AggregateTableContents) -> str | None:
    """Why the archive provably lacks deltas the table holds (module docstring), or None."""
    archived = archive.items.items
    unarchived = sorted(
        {
            batch_hash_of_marker(key)
            for key in table.bookkeeping_keys
            if key.startswith(MARKER_PREFIX) and batch_hash_of_marker(key) not in archived
        }
    )
    if unarchived:
        return f"{len(unarchived)} batch(es) the reduce markers name are not archived (first: {unarchived[0]})"
    applied = int(table.stats.get(MESSAGES_APPLIED, 0)) if table.stats else 0
    if applied > archive.state_changes:
        return f"#stats MessagesApplied is {applied}, but the archive holds {archive.state_changes} state changes"
    return None


def archive_damage(archive: ArchiveContents) -> str | None:
    """Why the archive cannot be trusted to rebuild from (module docstring), or None."""
    if archive.unreadable:
        key, reason = archive.unreadable[0]
        return f"{len(archive.unreadable)} archived object(s) are not valid documents (first: {key}: {reason})"
    conflicts = archive.items.conflicts
    if conflicts:
        return f"{len(conflicts)} delta item(s) have differing copies (first: {conflicts[0]})"
    registry = check_registry(archive.batches, archive.receipts)
    if registry.missing_objects:
        return f"{len(registry.missing_objects)} receipt(s) name a batch object that is missing"
    if registry.differing:
        return f"{len(registry.differing)} receipt(s) list other items than their batch object holds"
    return None


def plan_rebuild(
    archive: ArchiveContents,
    table: AggregateTableContents,
    now: float,
    marker_window_hours: int,
    marker_ttl_days: int,
) -> RebuildPlan:
    """The target state, from the archive alone (every delta item once); refuses a damaged or lagging archive."""
    damage = archive_damage(archive)
    if damage is not None:
        raise AuditError(f"{damage}; refusing to rebuild from a damaged archive")
    lag = archive_lag(archive, table)
    if lag is not None:
        raise AuditError(
            f"refusing to rebuild: the archive lags behind reduce: {lag}; wait for the archive function "
            "to catch up (or restore deleted objects) and run again"
        )
    deltas = list(archive.items.items.values())
    nodes = archived_totals(deltas)
    window_start = now - marker_window_hours * SECONDS_PER_HOUR
    marker_ttl = marker_ttl_days * SECONDS_PER_DAY
    markers = {
        unit.marker_id: marker_expires_at(unit.created_at, marker_ttl)
        for delta in deltas
        if delta.created_at >= window_start
        for unit in split_into_units(
            DeltaBatch(delta.batch_hash, delta.deltas, delta.record_count, delta.producer_timestamps, delta.created_at)
        )
    }
    return RebuildPlan(
        nodes=nodes,
        stale_items=sorted(
            (set(table.node_item_keys) - {node_item_key(path_key) for path_key in nodes})
            | (set(table.stats_item_keys) - {STATS_KEY})
        ),
        messages_applied=archive.state_changes,
        markers=dict(sorted(markers.items())),
    )


def _batch_write(dynamodb: DynamoDBClient, table: str, requests: Sequence[dict[str, Any]]) -> None:
    """BatchWriteItem in chunks of 25, resubmitting unprocessed items with a short backoff."""
    for start in range(0, len(requests), BATCH_WRITE_LIMIT):
        pending: list[dict[str, Any]] = list(requests[start : start + BATCH_WRITE_LIMIT])
        for round_number in range(MAX_UNPROCESSED_ROUNDS):
            response = dynamodb.batch_write_item(RequestItems={table: pending})  # type: ignore[dict-item]
            pending = [dict(request) for request in response.get("UnprocessedItems", {}).get(table, [])]
            if not pending:
                break
            time.sleep(min(2.0, 0.05 * 2**round_number))
        else:
            raise AuditError(f"DynamoDB left {len(pending)} writes unprocessed after {MAX_UNPROCESSED_ROUNDS} rounds")


def apply_rebuild(dynamodb: DynamoDBClient, table: str, plan: RebuildPlan) -> None:
    """Write the plan: absolute node totals, stale node item deletions, markers, `#stats`."""
    requests: list[dict[str, Any]] = [
        {
            "PutRequest": {
                "Item": {
                    AGGREGATE_KEY: {"S": node_item_key(path_key)},
                    NODE_VALUE: _serializer.serialize(dynamodb_number(node.value)),
                    NODE_TRADE_COUNT: _serializer.serialize(node.trade_count),
                }
            }
        }
        for path_key, node in sorted(plan.nodes.items())
    ]
    requests += [{"DeleteRequest": {"Key": {AGGREGATE_KEY: {"S": key}}}} for key in plan.stale_items]
    requests += [
        {"PutRequest": {"Item": marker_item(marker_id, expires_at)}} for marker_id, expires_at in plan.markers.items()
    ]
    _batch_write(dynamodb, table, requests)
    dynamodb.update_item(
        TableName=table,
        Key={AGGREGATE_KEY: {"S": STATS_KEY}},
        UpdateExpression="SET #applied = :applied",
        ExpressionAttributeNames={"#applied": MESSAGES_APPLIED},
        ExpressionAttributeValues={":applied": {"N": str(plan.messages_applied)}},
    )


def rebuild(
    target: AuditTarget,
    *,
    dry_run: bool = False,
    marker_window_hours: int = DEFAULT_MARKER_WINDOW_HOURS,
    marker_ttl_days: int = DEFAULT_MARKER_TTL_DAYS,
    now: float | None = None,
) -> RebuildPlan:
    """Plan from the archive and (unless `dry_run`) write the plan into the aggregate table."""
    moment = time.time() if now is None else now
    dynamodb = target.dynamodb()
    archive = read_archive(target.s3(), target.archive_bucket)
    table = read_aggregate_table(dynamodb, target.aggregate_table)
    plan = plan_rebuild(archive, table, moment, marker_window_hours, marker_ttl_days)
    if not dry_run:
        apply_rebuild(dynamodb, target.aggregate_table, plan)
    return plan
