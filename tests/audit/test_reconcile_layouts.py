"""`audit` on a bucket an earlier release archived into, upgraded in place: both layouts read, each item once.

The earlier release left per-item objects (`deltas/<hh>/<batch hash>.json`, each naming its creator
claim), registry shards that counted them (the single `metastore/registry.json` of the releases
before the shards among them), and what its last invocation left when it died between its writes
and its settle: an object written under a claim never closed, and a claim whose object it never
wrote. The new code then archives the redeliveries, which hold items the old code wrote too. The
truth is that of the records alone (`ground_truth`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent

from aggregation.archive import encode_delta_document
from aggregation.archive_legacy import (
    LEGACY_SHARD,
    ClaimRef,
    Registry,
    claim_metadata,
    encode_registry,
    item_object_key,
    registry_key,
)
from aggregation.deltas import NodeDelta
from archive_function.handler import archived_delta
from audit.aggregate_table import AggregateTableContents
from audit.archive_reader import read_archive
from audit.rebuild import plan_rebuild
from audit.reconcile import LEGACY_CLAIMS, LEGACY_COUNTS, TABLE, reconcile_contents
from tests.lambdas.archive_function.archive_helpers import WireRecorder, archive_bucket_environment, batch_hash
from tests.lambdas.archive_function.ground_truth import ShardStream, reconcile_with_truth, record_count, truth

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")

SEEDS = list("abcdefgh")


@pytest.fixture
def wire(aws_environment: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[WireRecorder]:
    with archive_bucket_environment(monkeypatch) as recorder:
        yield recorder


def write_earlier_layout(stream: ShardStream, bucket: str, *, counted_in_shard_0: int = 3) -> None:
    """What the earlier release left: a, b, e counted in shard 0, c in the single registry; d written
    under claim (1, 3), never settled; f claimed by the same write, never written."""
    s3 = boto3.client("s3")
    claims = {"a": ClaimRef(0, 1), "b": ClaimRef(0, 1), "e": ClaimRef(0, 3), "c": ClaimRef(LEGACY_SHARD, 5)}
    claims["d"] = ClaimRef(1, 3)
    for seed, claim in claims.items():
        (record,) = DynamoDBStreamEvent(stream.event([seed])).records
        s3.put_object(
            Bucket=bucket,
            Key=item_object_key(batch_hash(seed)),
            Body=encode_delta_document(archived_delta(record)),
            Metadata=claim_metadata(claim),
        )
    shards = {
        0: Registry(counted_in_shard_0, sum(record_count(seed) for seed in "abe"), generation=4),
        LEGACY_SHARD: Registry(1, record_count("c"), generation=6),
        1: Registry(claims={batch_hash("d"): 3, batch_hash("f"): 3}, generation=3),
    }
    for shard, registry in shards.items():
        s3.put_object(Bucket=bucket, Key=registry_key(shard), Body=encode_registry(registry))
    stream.delivered.add("f")  # delivered to the old code, which died before writing it


def test_both_layouts_are_read_and_each_item_counted_once(wire: WireRecorder) -> None:
    stream = ShardStream(SEEDS)
    write_earlier_layout(stream, wire.bucket)
    stream.invoke(["d", "e", "f", "g"])  # the old invocation's batch, retried by the new code, grown
    stream.invoke(["h"])
    stream.invoke(["a", "b"])  # a duplicate delivery of items the old code archived

    archive = read_archive(boto3.client("s3"), wire.bucket)
    assert (len(archive.item_objects), len(archive.batches), len(archive.registries)) == (5, 3, 3)
    assert set(archive.items.items) == {batch_hash(seed) for seed in SEEDS} and archive.items.copies == 12
    report = reconcile_with_truth(archive, SEEDS)
    assert report.ok, report.checks
    legacy = next(check for check in report.checks if check.name == LEGACY_COUNTS)
    assert "1 written under a claim never closed" in legacy.detail

    totals, changes = truth(SEEDS)
    table = AggregateTableContents(stats={"MessagesApplied": Decimal(changes)})
    plan = plan_rebuild(archive, table, time.time(), marker_window_hours=48, marker_ttl_days=7)
    assert {key: (node.value, node.trade_count) for key, node in plan.nodes.items()} == totals
    assert plan.messages_applied == changes


def test_a_claim_of_the_earlier_release_whose_item_is_archived_nowhere_fails(wire: WireRecorder) -> None:
    stream = ShardStream(SEEDS)
    write_earlier_layout(stream, wire.bucket)
    stream.invoke(["d", "e", "g", "h"])  # f never reaches the new code: the archive lacks it

    report = reconcile_with_truth(read_archive(boto3.client("s3"), wire.bucket), set(SEEDS) - {"f"})
    assert report.failed() == {LEGACY_CLAIMS}


def test_an_earlier_registry_that_miscounts_fails(wire: WireRecorder) -> None:
    stream = ShardStream(SEEDS)
    write_earlier_layout(stream, wire.bucket, counted_in_shard_0=4)
    stream.invoke(["d", "e", "f", "g", "h"])

    report = reconcile_with_truth(read_archive(boto3.client("s3"), wire.bucket), SEEDS)
    assert report.failed() == {LEGACY_COUNTS}


def test_a_table_node_the_archive_lacks_is_no_match(wire: WireRecorder) -> None:
    """The truth helper itself can fail: a node only in the table is a mismatch."""
    stream = ShardStream(SEEDS)
    stream.invoke(SEEDS)
    archive = read_archive(boto3.client("s3"), wire.bucket)
    totals, changes = truth(SEEDS)
    table = AggregateTableContents(
        nodes={**{k: NodeDelta(v, c) for k, (v, c) in totals.items()}, "Extra": NodeDelta(Decimal(1), 1)},
        stats={"MessagesApplied": Decimal(changes)},
    )
    assert reconcile_contents(archive, table).failed() == {TABLE}
