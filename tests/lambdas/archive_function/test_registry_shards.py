"""The sharded registry against the emulator's S3: concurrent invocations on several shards, a
retry that hashes to another shard, and a bucket upgraded in place from the single registry."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from botocore.awsrequest import AWSPreparedRequest, AWSResponse

from aggregation.archive import (
    LEGACY_SHARD,
    ClaimRef,
    Registry,
    claim_metadata,
    encode_delta_document,
    encode_registry,
    registry_key,
    registry_shard_for,
    registry_shard_of_key,
)
from archive_function import handler as archive_handler
from archive_function.store import RegistryStore, RegistryUpdateFailed
from audit.archive_reader import read_archive
from function_support import aws
from tests.lambdas.archive_function.archive_helpers import (
    WireRecorder,
    batch_hash,
    conflict_response,
    delta_event,
    delta_keys,
    no_sleep_store,
    read_registry,
    run,
)


def _archived(event: dict[str, Any]) -> list[Any]:
    return [archive_handler.archived_delta(record) for record in DynamoDBStreamEvent(event).records]


def test_concurrent_invocations_on_several_shards_count_every_object_once(wire: WireRecorder) -> None:
    events = [delta_event([f"shards-{n}-{i}" for i in range(3)], first_sequence=100 + 10 * n) for n in range(8)]
    client = aws.s3_client()

    def archive(event: dict[str, Any]) -> dict[str, int]:
        return archive_handler.archive_batch(_archived(event), RegistryStore(client, wire.bucket, shards=4), 3)

    with ThreadPoolExecutor(max_workers=4) as pool:
        summaries = list(pool.map(archive, events))

    assert all(summary["registry_shards_settled"] == 1 for summary in summaries)
    used = {registry_shard_of_key(put.key) for put in wire.registry_puts()}
    assert len(used) > 1 and used <= {0, 1, 2, 3}
    contents = read_archive(boto3.client("s3"), wire.bucket)
    assert contents.registry is not None and len(contents.deltas) == 24
    assert (contents.registry.objects_archived, contents.registry.state_changes_archived) == (24, 48)
    assert contents.registry.open_claims == 0 and contents.registry.shards == len(used)


def _seeds_in_two_shards(shards: int) -> tuple[str, str, str]:
    """Seeds a, b, c with [a, b] and [b, c] claiming in different shards."""
    for a, b, c in itertools.permutations([f"cross-{i}" for i in range(12)], 3):
        first = registry_shard_for([batch_hash(a), batch_hash(b)], shards)
        if first != registry_shard_for([batch_hash(b), batch_hash(c)], shards):
            return a, b, c
    raise AssertionError("no seeds found")


def test_a_retry_in_other_boundaries_counts_in_the_shard_whose_claim_created_the_object(
    wire: WireRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt writes a and b under its shard's claims and dies before settling; a
    retry of [b, c] hashes to another shard, sees b's object name the first shard's claim, and
    settles there too, so b counts at once; a counts when it is redelivered."""
    monkeypatch.setenv("ARCHIVE_REGISTRY_SHARDS", "4")
    monkeypatch.setattr(archive_handler, "RegistryStore", no_sleep_store)
    a, b, c = _seeds_in_two_shards(4)
    first_shard = registry_shard_for([batch_hash(a), batch_hash(b)], 4)

    def conflict_on_settle(request: AWSPreparedRequest, recorder: WireRecorder) -> AWSResponse | None:
        if registry_shard_of_key(recorder.puts[-1].key) is not None and recorder.delta_puts():
            return conflict_response(request)
        return None

    wire.responder = conflict_on_settle
    with pytest.raises(RegistryUpdateFailed):
        run(delta_event([a, b]))
    wire.responder = None
    assert read_registry(wire.bucket, first_shard).objects_archived == 0

    retry = run(delta_event([b, c], first_sequence=101))
    assert (retry["objects_counted"], retry["registry_shards_settled"]) == (2, 2)
    assert retry["registry_shard"] != first_shard
    creator = read_registry(wire.bucket, first_shard)
    assert creator.objects_archived == 1 and set(creator.claims) == {batch_hash(a)}

    run(delta_event([a]))
    contents = read_archive(boto3.client("s3"), wire.bucket)
    assert contents.registry is not None and len(contents.deltas) == 3
    assert (contents.registry.objects_archived, contents.registry.state_changes_archived) == (3, 6)
    assert contents.registry.open_claims == 0


def test_a_bucket_of_the_single_registry_upgrades_in_place(wire: WireRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the previous release left: ``metastore/registry.json`` counting one object, an object
    its dead invocation wrote under an open claim, and an open claim whose object it never wrote.
    The new release settles the first in the legacy registry, writes the second under its own
    shard's claim and sweeps the legacy claim; every object counts once, no claim stays open."""
    s3 = boto3.client("s3")
    old, inflight, unwritten, new = (
        delta_event([seed])["Records"][0] for seed in ("old", "inflight", "unwritten", "new")
    )
    old_delta, inflight_delta = _archived({"Records": [old]})[0], _archived({"Records": [inflight]})[0]
    for delta, claim in ((old_delta, 1), (inflight_delta, 2)):
        s3.put_object(
            Bucket=wire.bucket,
            Key=delta.key,
            Body=encode_delta_document(delta),
            IfNoneMatch="*",
            Metadata=claim_metadata(ClaimRef(LEGACY_SHARD, claim)),
        )
    legacy = Registry(
        objects_archived=1,
        state_changes_archived=2,
        claims={batch_hash("inflight"): 2, batch_hash("unwritten"): 2},
        generation=3,
    )
    s3.put_object(Bucket=wire.bucket, Key=registry_key(LEGACY_SHARD), Body=encode_registry(legacy), IfNoneMatch="*")
    assert s3.head_object(Bucket=wire.bucket, Key=old_delta.key)["Metadata"] == {"archive-claim": "1"}
    monkeypatch.setenv("ARCHIVE_REGISTRY_SHARDS", "4")

    summary = run({"Records": [inflight, unwritten, new]})

    assert summary["objects_counted"] == 3 and summary["retired_claims_read"] == 1
    upgraded = read_registry(wire.bucket, LEGACY_SHARD)
    assert (upgraded.objects_archived, dict(upgraded.claims)) == (2, {})  # inflight counted where it was claimed
    assert not [put for put in wire.registry_puts() if put.key == registry_key(LEGACY_SHARD) and put.if_match is None]
    contents = read_archive(s3, wire.bucket)
    assert contents.registry is not None and len(delta_keys(wire.bucket)) == 4
    assert (contents.registry.objects_archived, contents.registry.state_changes_archived) == (4, 8)
    assert contents.registry.open_claims == 0 and contents.registry.shards == 2


def test_shards_above_a_lowered_count_are_swept_and_still_counted(
    wire: WireRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shard 5 of a deployment that had 8 holds an open claim whose object was written (its
    invocation died before settling, and the item is never delivered again); with 2 shards
    nothing claims in shard 5, yet the instance's periodic sweep closes the claim and counts it."""
    s3 = boto3.client("s3")
    orphan = _archived(delta_event(["orphan"]))[0]
    s3.put_object(
        Bucket=wire.bucket,
        Key=orphan.key,
        Body=encode_delta_document(orphan),
        IfNoneMatch="*",
        Metadata=claim_metadata(ClaimRef(5, 4)),
    )
    retired = Registry(claims={orphan.batch_hash: 4}, generation=4)
    s3.put_object(Bucket=wire.bucket, Key=registry_key(5), Body=encode_registry(retired), IfNoneMatch="*")
    monkeypatch.setenv("ARCHIVE_REGISTRY_SHARDS", "2")

    first = run(delta_event(["after-lowering"]))
    second = run(delta_event(["later"]))  # the same instance, within RETIRED_SWEEP_SECONDS: no sweep

    assert (first["retired_claims_read"], first["retired_objects_counted"]) == (1, 1)
    assert "retired_claims_read" not in second
    contents = read_archive(s3, wire.bucket)
    assert contents.registry is not None and len(contents.deltas) == 3
    assert (contents.registry.objects_archived, contents.registry.open_claims) == (3, 0)
