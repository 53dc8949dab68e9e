"""Reading the AggregateTable: hierarchy nodes (the sums of their slices) and ``#stats``, never the
``#applied#`` markers; and the QuarantineTable: how many records, and why the latest were set aside.

The table also holds one ``#applied#…`` marker per applied delta unit (kept
for days), so under a long load test markers vastly outnumber nodes. A scan
reads (and bills) them all even when a filter drops them, so once a scan
shows the table is large the reader fetches the nodes it already knows by key
on most refreshes and rescans only every ``rescan_interval_seconds`` to find
new ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.conditions import Attr
from botocore.exceptions import BotoCoreError, ClientError

from aggregation.aggregate_items import combined_stats, is_stats_key, node_path_of, sum_node_slices
from aggregation.names import (
    AGGREGATE_KEY,
    LAST_LATENCY_MAX_SECONDS,
    LAST_LATENCY_MEAN_SECONDS,
    LAST_UPDATED,
    MARKER_PREFIX,
    MESSAGES_APPLIED,
    NODE_TRADE_COUNT,
    NODE_VALUE,
    QUARANTINE_REASON,
    QUARANTINE_RECORD_ID,
    STATS_KEY,
)
from frontend.snapshot import (
    QuarantinedRecord,
    QuarantineSummary,
    StatsRecord,
    TableReadError,
    TableReading,
)
from toolkit.ledger import NodeTotals

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource

#: DynamoDB's BatchGetItem limit.
_BATCH_GET_LIMIT = 100


def parse_item(item: Mapping[str, Any]) -> tuple[str, NodeTotals | StatsRecord | None]:
    """One table item as the dashboard sees it: a slice of a node, a slice of the stats, or nothing
    (other bookkeeping).

    boto3's resource layer already turns DynamoDB numbers into exact
    ``Decimal``; values stay that way. Only latency and timestamps become floats.
    """
    key = str(item[AGGREGATE_KEY])
    if is_stats_key(key):
        return key, StatsRecord(
            messages_applied=_whole(item.get(MESSAGES_APPLIED)),
            last_updated=_seconds(item.get(LAST_UPDATED)),
            latency_mean_seconds=_seconds(item.get(LAST_LATENCY_MEAN_SECONDS)),
            latency_max_seconds=_seconds(item.get(LAST_LATENCY_MAX_SECONDS)),
        )
    if node_path_of(key) is None:
        return key, None
    value = item.get(NODE_VALUE, Decimal(0))
    if not isinstance(value, Decimal):
        raise TableReadError(f"item {key!r} has a non-numeric Value")
    return key, NodeTotals(value=value, trade_count=_whole(item.get(NODE_TRADE_COUNT)))


def _whole(raw: object) -> int:
    return int(raw) if isinstance(raw, Decimal | int) else 0


def _seconds(raw: object) -> float | None:
    return float(raw) if isinstance(raw, Decimal | int) else None


class AggregateTableReader:
    """Callable returning a :class:`TableReading`; raises :class:`TableReadError` on any AWS failure."""

    def __init__(
        self,
        dynamodb: DynamoDBServiceResource,
        table_name: str,
        *,
        large_table_items: int = 2_000,
        rescan_interval_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dynamodb = dynamodb
        self._table_name = table_name
        self._table = dynamodb.Table(table_name)
        self._large_table_items = large_table_items
        self._rescan_interval_seconds = rescan_interval_seconds
        self._clock = clock
        self._known_keys: list[str] | None = None
        self._scanned_at = 0.0
        self._last_messages_applied = -1
        self.full_scans = 0
        """How many full scans ran (the tests check the large-table path)."""

    def __call__(self) -> TableReading:
        """Reads the current nodes and stats."""
        try:
            if self._known_keys is None or self._clock() - self._scanned_at >= self._rescan_interval_seconds:
                reading = self._scan()
            else:
                reading = self._get_known()
                if reading.stats and reading.stats.messages_applied < self._last_messages_applied:
                    reading = self._scan()  # the tables were cleared: find out what is left
        except (BotoCoreError, ClientError) as error:
            raise TableReadError(describe_read_error(self._table_name, error)) from None
        if reading.stats:
            self._last_messages_applied = reading.stats.messages_applied
        return reading

    def _scan(self) -> TableReading:
        """Every item except markers (which are still read and billed, hence the large-table mode)."""
        items: list[dict[str, Any]] = []
        scanned = 0
        arguments: dict[str, Any] = {"FilterExpression": ~Attr(AGGREGATE_KEY).begins_with(MARKER_PREFIX)}
        while True:
            page = self._table.scan(**arguments)
            items.extend(page.get("Items", []))
            scanned += page.get("ScannedCount", 0)
            if "LastEvaluatedKey" not in page:
                break
            arguments["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        self.full_scans += 1
        reading, item_keys = _reading_from(items)
        if scanned >= self._large_table_items:
            self._known_keys = item_keys
            self._scanned_at = self._clock()
        else:
            self._known_keys = None  # small table: a scan is the cheapest way to see everything
        return reading

    def _get_known(self) -> TableReading:
        """The node and stats items (slices) found by the last scan, and ``#stats``, by key."""
        keys = sorted({STATS_KEY, *(self._known_keys or [])})
        items: list[dict[str, Any]] = []
        for start in range(0, len(keys), _BATCH_GET_LIMIT):
            request: dict[str, Any] = {
                self._table_name: {"Keys": [{AGGREGATE_KEY: key} for key in keys[start : start + _BATCH_GET_LIMIT]]}
            }
            while request:
                response = self._dynamodb.batch_get_item(RequestItems=request)
                items.extend(response.get("Responses", {}).get(self._table_name, []))
                request = dict(response.get("UnprocessedKeys") or {})
                if request:
                    time.sleep(0.05)  # throttled: back off briefly before asking for the rest
        return _reading_from(items)[0]


def _reading_from(items: list[dict[str, Any]]) -> tuple[TableReading, list[str]]:
    """The reading (each node the sum of its slices, the stats of every slice as one) and the
    keys of the node and stats items read, sorted."""
    slices: list[tuple[str, Decimal, int]] = []
    stats_items: list[dict[str, Any]] = []
    for item in items:
        if is_stats_key(str(item[AGGREGATE_KEY])):
            stats_items.append(item)  # combined below, then parsed once
            continue
        key, parsed = parse_item(item)
        if isinstance(parsed, NodeTotals):
            slices.append((key, parsed.value, parsed.trade_count))
    nodes = {
        path_key: NodeTotals(total.value, total.trade_count) for path_key, total in sum_node_slices(slices).items()
    }
    combined = combined_stats(stats_items)
    stats = parse_item(combined)[1] if combined is not None else None
    keys = sorted([key for key, _, _ in slices] + [str(item[AGGREGATE_KEY]) for item in stats_items])
    return TableReading(nodes, stats if isinstance(stats, StatsRecord) else None), keys


def describe_read_error(table_name: str, error: BotoCoreError | ClientError) -> str:
    """One line naming the table once: botocore's own message for a missing table names it again."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        code = details.get("Code", "error")
        if code == "ResourceNotFoundException":
            return f"cannot read table {table_name}: it does not exist ({code})"
        return f"cannot read table {table_name}: {code}: {details.get('Message', error)}"
    return f"cannot read table {table_name}: {error}"


#: When the state function set a record aside (epoch seconds): `state_function/quarantine.py` writes it.
QUARANTINED_AT = "QuarantinedAt"


class QuarantineReader:
    """Callable returning a :class:`QuarantineSummary` of the QuarantineTable.

    Quarantine is rare (an alarm fires on any), so a scan of three small attributes (never
    the payloads) is cheap; it still runs at most every ``refresh_seconds`` whatever the
    dashboard's interval, and returns the previous summary in between.
    """

    def __init__(
        self,
        dynamodb: DynamoDBServiceResource,
        table_name: str,
        *,
        latest: int = 3,
        refresh_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._table_name = table_name
        self._table = dynamodb.Table(table_name)
        self._latest = latest
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._summary: QuarantineSummary | None = None
        self._read_at = 0.0

    def __call__(self) -> QuarantineSummary:
        """The count and the latest records (newest first); raises :class:`TableReadError`."""
        if self._summary is not None and self._clock() - self._read_at < self._refresh_seconds:
            return self._summary
        records: list[QuarantinedRecord] = []
        arguments: dict[str, Any] = {
            "ProjectionExpression": "#id, #reason, #at",
            "ExpressionAttributeNames": {
                "#id": QUARANTINE_RECORD_ID,
                "#reason": QUARANTINE_REASON,
                "#at": QUARANTINED_AT,
            },
        }
        try:
            while True:
                page = self._table.scan(**arguments)
                records.extend(
                    QuarantinedRecord(
                        record_id=str(item.get(QUARANTINE_RECORD_ID, "")),
                        reason=str(item.get(QUARANTINE_REASON, "")),
                        quarantined_at=_seconds(item.get(QUARANTINED_AT)),
                    )
                    for item in page.get("Items", [])
                )
                if "LastEvaluatedKey" not in page:
                    break
                arguments["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        except (BotoCoreError, ClientError) as error:
            raise TableReadError(describe_read_error(self._table_name, error)) from None
        records.sort(key=lambda record: (record.quarantined_at or 0.0, record.record_id), reverse=True)
        self._summary = QuarantineSummary(len(records), tuple(records[: self._latest]))
        self._read_at = self._clock()
        return self._summary
