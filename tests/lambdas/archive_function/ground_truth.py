"""A shard of the DeltaTable stream as the archive sees it, and what archiving it must leave behind.

The truth is computed from what was delivered, independently of the archive's and the reader's
code: every distinct delta item once, its node deltas summed with plain `Decimal` arithmetic, its
RecordCount once. `assert_archived_exactly` then reads the bucket as `audit` does and holds
`audit reconcile` to that truth, as if the aggregate table and the producer's ledger held it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

import boto3

from aggregation.deltas import NodeDelta
from archive_function import handler as archive_handler
from audit.aggregate_table import AggregateTableContents
from audit.archive_reader import ArchiveContents, read_archive
from audit.reconcile import ReconcileReport, reconcile_contents
from local.runner.inprocess import LambdaContextStub
from tests.lambdas.archive_function.archive_helpers import batch_hash, delta_record
from toolkit.ledger import NodeTotals

NODES = ("Delta", "Delta:FX", "Delta:FX:EMEA", "Vega:Rates")


def record_count(seed: str) -> int:
    """Every item its own RecordCount (1..5), so a state-change total is not just a multiple of the items."""
    return 1 + int(batch_hash(seed)[:4], 16) % 5


def node_deltas(seed: str) -> dict[str, tuple[str, int]]:
    """Two or three of `NODES`, each with a signed value of its own (some net to zero over a shard)."""
    digest = batch_hash(seed)
    chosen = [node for index, node in enumerate(NODES) if int(digest[8 + index], 16) % 3 != 0] or [NODES[0]]
    return {
        node: (str(Decimal(int(digest[16 + 4 * i : 20 + 4 * i], 16) - 32768) / 1000), 1 + i % 2)
        for i, node in enumerate(chosen)
    }


class ShardStream:
    """Items of one shard with fixed sequence numbers; `delivered` is every item an invocation got."""

    def __init__(self, seeds: Sequence[str]) -> None:
        self.seeds = list(seeds)
        self.records = {
            seed: delta_record(seed, 1000 + index, deltas=node_deltas(seed), record_count=record_count(seed))
            for index, seed in enumerate(seeds)
        }
        self.delivered: set[str] = set()

    def event(self, seeds: Sequence[str]) -> dict[str, Any]:
        self.delivered.update(seeds)
        return {"Records": [self.records[seed] for seed in seeds]}

    def invoke(self, seeds: Sequence[str]) -> dict[str, Any]:
        result: dict[str, Any] = archive_handler.lambda_handler(self.event(seeds), LambdaContextStub())
        return result


def truth(seeds: Iterable[str]) -> tuple[dict[str, tuple[Decimal, int]], int]:
    """Node totals and state changes of the distinct items of `seeds`, by plain arithmetic."""
    totals: dict[str, tuple[Decimal, int]] = {}
    changes = 0
    for seed in set(seeds):
        changes += record_count(seed)
        for node, (value, count) in node_deltas(seed).items():
            before = totals.get(node, (Decimal(0), 0))
            totals[node] = (before[0] + Decimal(value), before[1] + count)
    return totals, changes


def reconcile_with_truth(archive: ArchiveContents, seeds: Iterable[str]) -> ReconcileReport:
    """`audit reconcile` of `archive` against a table and a ledger holding the truth of `seeds`."""
    totals, changes = truth(seeds)
    table = AggregateTableContents(
        nodes={node: NodeDelta(value, count) for node, (value, count) in totals.items()},
        stats={"MessagesApplied": Decimal(changes)},
    )
    ledger = {node: NodeTotals(value, count) for node, (value, count) in totals.items()}
    return reconcile_contents(archive, table, ledger)


def assert_archived_exactly(stream: ShardStream, bucket: str) -> ArchiveContents:
    """Each delivered item archived (at least one copy), counted once, and reconcile exact against the truth."""
    archive = read_archive(boto3.client("s3"), bucket)
    assert archive.unreadable == []
    assert set(archive.items.items) == {batch_hash(seed) for seed in stream.delivered}
    assert archive.items.conflicts == ()
    report = reconcile_with_truth(archive, stream.delivered)
    assert report.ok, report.checks
    return archive
