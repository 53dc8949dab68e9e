"""Proving the pipeline exact: the tables against the ledger, node by node, trade by trade.

The comparison itself (``compare_aggregates``, ``compare_trades``) is pure, so
a dashboard badge or a demo can reuse it on whatever snapshot it holds. The
rest reads DynamoDB with the low-level client (numbers arrive as strings and
become Decimals directly: no float) and waits for the pipeline to drain.

Equality is exact: ``Decimal`` equality of every ``Value`` and integer equality
of every ``TradeCount``. A node present on one side only is a mismatch, except
that a node with ``TradeCount`` 0 and ``Value`` 0 equals an absent one (the
reduce step may leave emptied nodes behind).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from random import Random
from typing import TYPE_CHECKING, Protocol, cast

from aggregation.aggregate_items import combined_stats, sum_node_slices
from aggregation.names import MARKER_PREFIX
from producer.ledger import Ledger, LedgerCounts
from producer.model import AggregateNode, TradeState
from toolkit.ledger import DEFAULT_LEDGER_PATH, differing_keys, node_keys
from toolkit.pipeline import PipelineTarget

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, KeysAndAttributesTypeDef

BATCH_GET_LIMIT = 100
MISSING_LEVEL = "<missing>"


# -- pure comparison ------------------------------------------------------------------


@dataclass(frozen=True)
class NodeMismatch:
    """One node whose totals differ; ``None`` on the side where it is absent."""

    key: str
    expected: AggregateNode | None
    actual: AggregateNode | None

    @property
    def value_difference(self) -> Decimal:
        """Actual minus expected (an absent side counts as zero)."""
        expected = self.expected.value if self.expected else Decimal(0)
        actual = self.actual.value if self.actual else Decimal(0)
        return actual - expected

    @property
    def count_difference(self) -> int:
        expected = self.expected.trade_count if self.expected else 0
        actual = self.actual.trade_count if self.actual else 0
        return actual - expected


@dataclass(frozen=True)
class AggregateComparison:
    """The outcome of comparing two sets of nodes."""

    mismatches: tuple[NodeMismatch, ...]
    expected_nodes: int
    actual_nodes: int
    matching_nodes: int

    @property
    def exact(self) -> bool:
        return not self.mismatches


def compare_aggregates(
    expected: Mapping[str, AggregateNode], actual: Mapping[str, AggregateNode]
) -> AggregateComparison:
    """Compare node totals exactly (`toolkit.ledger`'s rule), node path by node path. Empty nodes are ignored."""
    wanted, found = _nodes(expected), _nodes(actual)
    mismatches = tuple(NodeMismatch(key, wanted.get(key), found.get(key)) for key in differing_keys(wanted, found))
    return AggregateComparison(mismatches, len(wanted), len(found), len(node_keys(wanted, found)) - len(mismatches))


def _nodes(nodes: Mapping[str, AggregateNode]) -> dict[str, AggregateNode]:
    return {key: node for key, node in nodes.items() if not node.is_empty}


@dataclass(frozen=True)
class TradeMismatch:
    """A trade whose stored state is not the ledger's final state (``actual`` None: missing)."""

    trade_id: str
    expected: TradeState
    actual: TradeState | None

    @property
    def problem(self) -> str:
        if self.actual is None:
            return "missing"
        if self.actual.version != self.expected.version:
            return "wrong version"
        if self.actual.value != self.expected.value:
            return "wrong value"
        return "wrong hierarchy"


def compare_trades(expected: Mapping[str, TradeState], actual: Mapping[str, TradeState]) -> tuple[TradeMismatch, ...]:
    """Every expected trade must be stored with its final version, value and hierarchy."""
    mismatches: list[TradeMismatch] = []
    for trade_id, want in expected.items():
        got = actual.get(trade_id)
        if got is None or got.version != want.version or got.value != want.value or got.hierarchy != want.hierarchy:
            mismatches.append(TradeMismatch(trade_id, want, got))
    return tuple(mismatches)


@dataclass(frozen=True)
class VerificationReport:
    """The verdict and everything needed to explain it."""

    aggregates: AggregateComparison
    trade_mismatches: tuple[TradeMismatch, ...]
    trades_checked: int
    settled: bool
    """The table stopped changing (or matched) before the timeout."""
    waited_seconds: float
    messages_applied: int | None
    """The pipeline's own ``#stats`` counter, when present (informational)."""
    ledger_counts: LedgerCounts
    ledger_path: Path | None = None

    @property
    def exact(self) -> bool:
        return self.aggregates.exact and not self.trade_mismatches

    @property
    def uncertain_messages(self) -> int:
        """Messages of aborted runs that may or may not have reached the stream."""
        return self.ledger_counts.uncertain


# -- reading the tables -------------------------------------------------------------------


@dataclass(frozen=True)
class AggregateSnapshot:
    """The aggregate table at one moment: the nodes, and the pipeline's applied-message counter."""

    nodes: dict[str, AggregateNode]
    messages_applied: int | None


def _number(attribute: Mapping[str, object] | None, default: str = "0") -> Decimal:
    raw = attribute.get("N", default) if attribute else default
    return Decimal(str(raw))


def read_aggregate_table(client: DynamoDBClient, table: str) -> AggregateSnapshot:
    """Every node, the sum of its slices, and ``MessagesApplied`` summed over the stats slices
    (the markers filtered out server-side).

    The table's key layout is decoded by the domain's one reader (``aggregation.aggregate_items``):
    reading what the pipeline wrote, not computing what it should hold, which stays the ledger's.
    """
    slices: list[tuple[str, Decimal, int]] = []
    stats_slices: list[dict[str, object]] = []
    paginator = client.get_paginator("scan")
    pages = paginator.paginate(
        TableName=table,
        ConsistentRead=True,
        FilterExpression="NOT begins_with(#key, :marker)",
        ExpressionAttributeNames={"#key": "AggregateKey"},
        ExpressionAttributeValues={":marker": {"S": MARKER_PREFIX}},
    )
    for page in pages:
        for item in page.get("Items", []):
            key = item["AggregateKey"]["S"]
            if "MessagesApplied" in item:
                stats_slices.append({"AggregateKey": key, "MessagesApplied": _number(item["MessagesApplied"])})
            slices.append((key, _number(item.get("Value")), int(_number(item.get("TradeCount")))))
    nodes = {
        path_key: AggregateNode(value=total.value, trade_count=total.trade_count)
        for path_key, total in sum_node_slices(slices).items()
    }
    stats = combined_stats(stats_slices)
    return AggregateSnapshot(nodes, int(stats["MessagesApplied"]) if stats is not None else None)


def _trade_state(item: Mapping[str, AttributeValueTypeDef], levels: Sequence[str]) -> TradeState:
    hierarchy = item.get("Hierarchy", {}).get("M", {})
    return TradeState(
        version=int(_number(item.get("Version"), "-1")),
        value=_number(item.get("Value")),
        hierarchy=tuple(str(hierarchy.get(level, {}).get("S", MISSING_LEVEL)) for level in levels),
    )


def read_trade_states(
    client: DynamoDBClient,
    table: str,
    trade_ids: Iterable[str],
    levels: Sequence[str],
    *,
    workers: int = 8,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, TradeState]:
    """The stored state of each trade (absent ones are left out), via batch_get_item.

    100 keys per call; ``UnprocessedKeys`` are retried with backoff and jitter.
    """
    ids = list(dict.fromkeys(trade_ids))
    batches = [ids[start : start + BATCH_GET_LIMIT] for start in range(0, len(ids), BATCH_GET_LIMIT)]

    def fetch(batch: list[str]) -> dict[str, TradeState]:
        found: dict[str, TradeState] = {}
        request: dict[str, KeysAndAttributesTypeDef] = {
            table: {
                "Keys": [{"TradeID": {"S": trade_id}} for trade_id in batch],
                "ConsistentRead": True,
                "ProjectionExpression": "#id, #version, #value, #hierarchy",
                "ExpressionAttributeNames": {
                    "#id": "TradeID",
                    "#version": "Version",
                    "#value": "Value",
                    "#hierarchy": "Hierarchy",
                },
            }
        }
        jitter = Random()
        attempt = 0
        while request:
            response = client.batch_get_item(RequestItems=request)
            for item in response.get("Responses", {}).get(table, []):
                found[str(item["TradeID"]["S"])] = _trade_state(item, levels)
            unprocessed = response.get("UnprocessedKeys", {})
            request = {
                name: cast("KeysAndAttributesTypeDef", keys) for name, keys in unprocessed.items() if keys.get("Keys")
            }
            if request:
                sleep(jitter.uniform(0, min(5.0, 0.05 * 2**attempt)))
                attempt += 1
        return found

    states: dict[str, TradeState] = {}
    if not batches:
        return states
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(batches)))) as executor:
        for found in executor.map(fetch, batches):
            states.update(found)
    return states


# -- waiting and verifying -----------------------------------------------------------------


@dataclass(frozen=True)
class DrainStatus:
    """One poll of the aggregate table while waiting, for a progress display."""

    matching_nodes: int
    expected_nodes: int
    messages_applied: int | None
    unchanged_seconds: float
    elapsed_seconds: float
    timeout_seconds: float


def wait_for_drain(
    read: Callable[[], AggregateSnapshot],
    expected: Mapping[str, AggregateNode],
    *,
    timeout: float,
    settle_seconds: float,
    poll_interval: float,
    on_poll: Callable[[DrainStatus], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[AggregateSnapshot, bool, float]:
    """Poll until the table equals ``expected``, stops changing for ``settle_seconds``, or times out.

    Returns the last snapshot, whether it settled (matched or stopped changing)
    before the timeout, and the seconds waited.
    """
    started = clock()
    last_change = started
    previous: AggregateSnapshot | None = None
    while True:
        snapshot = read()
        now = clock()
        comparison = compare_aggregates(expected, snapshot.nodes)
        if comparison.exact:
            return snapshot, True, now - started
        if previous is None or snapshot != previous:
            last_change = now
            previous = snapshot
        if now - last_change >= settle_seconds:
            return snapshot, True, now - started
        if now - started >= timeout:
            return snapshot, False, now - started
        if on_poll is not None:
            on_poll(
                DrainStatus(
                    comparison.matching_nodes,
                    comparison.expected_nodes,
                    snapshot.messages_applied,
                    now - last_change,
                    now - started,
                    timeout,
                )
            )
        sleep(max(0.0, min(poll_interval, started + timeout - now)))


class DrainProgress(Protocol):
    """Someone showing the wait (the CLI's spinner); the verifier only reports to it."""

    def update(self, status: DrainStatus) -> None:
        """One poll of the aggregate table while it is still changing."""

    def message(self, text: str) -> None:
        """The step the verification is at."""


def verify_pipeline(
    target: PipelineTarget,
    ledger_path: Path = DEFAULT_LEDGER_PATH,
    timeout: float = 300.0,
    *,
    settle_seconds: float = 20.0,
    poll_interval: float = 1.0,
    progress: DrainProgress | None = None,
    dynamodb_client: DynamoDBClient | None = None,
) -> VerificationReport:
    """Wait for the pipeline to drain, then compare every node and every trade with the ledger.

    ``progress`` hears of every poll and step (the CLI shows them). Raises LedgerError
    when the ledger cannot be read; AWS errors propagate.
    """
    ledger = Ledger.load(ledger_path)
    expected = ledger.aggregates()
    client = dynamodb_client or target.dynamodb()
    snapshot, settled, waited = wait_for_drain(
        lambda: read_aggregate_table(client, target.aggregate_table),
        expected,
        timeout=timeout,
        settle_seconds=settle_seconds,
        poll_interval=poll_interval,
        on_poll=progress.update if progress is not None else None,
    )
    if progress is not None:
        progress.message("reading trade states")
    stored = read_trade_states(client, target.state_table, ledger.trades, ledger.hierarchy_levels)
    return VerificationReport(
        aggregates=compare_aggregates(expected, snapshot.nodes),
        trade_mismatches=compare_trades(ledger.trades, stored),
        trades_checked=len(ledger.trades),
        settled=settled,
        waited_seconds=waited,
        messages_applied=snapshot.messages_applied,
        ledger_counts=ledger.counts,
        ledger_path=ledger_path,
    )
