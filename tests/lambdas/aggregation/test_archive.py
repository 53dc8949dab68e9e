"""The archive's documents and the claim/settle rules that make the registry count exact."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import pytest

from aggregation.archive import (
    KEY_PREFIX_HEX_CHARACTERS,
    ArchivedDelta,
    ArchiveDocumentError,
    Claim,
    Registry,
    StreamPosition,
    archived_totals,
    batch_hash_of_key,
    claim_objects,
    delta_object_key,
    encode_delta_document,
    encode_registry,
    parse_delta_document,
    parse_registry,
    settle_objects,
)
from aggregation.deltas import NodeDelta


def delta(seed: str, value: str = "0.1", count: int = 1, sequence: int = 7, key: str = "Delta") -> ArchivedDelta:
    return ArchivedDelta(
        batch_hash=hashlib.sha256(seed.encode()).hexdigest(),
        deltas={key: NodeDelta(Decimal(value), count), f"{key}:FX": NodeDelta(Decimal(value), count)},
        record_count=3,
        producer_timestamps=(Decimal("1616413258.8997078"),),
        created_at=1_700_000_000,
        stream=StreamPosition("arn:stream", f"event-{seed}", str(sequence)),
    )


def test_key_is_spread_by_the_hash_prefix_and_refuses_anything_but_a_hash() -> None:
    item = delta("a")
    assert item.key == f"deltas/{item.batch_hash[:2]}/{item.batch_hash}.json"
    assert batch_hash_of_key(item.key) == item.batch_hash
    assert batch_hash_of_key(f"deltas/zz/{item.batch_hash}.json") is None
    assert batch_hash_of_key(f"deltas/{item.batch_hash[2:4]}/{item.batch_hash}.json") in (None, item.batch_hash)
    for bad in ("../registry", "A" * 64, item.batch_hash[:-1]):
        with pytest.raises(ArchiveDocumentError):
            delta_object_key(bad)


def test_prefixes_spread_evenly() -> None:
    prefixes = [delta(str(i)).batch_hash[:KEY_PREFIX_HEX_CHARACTERS] for i in range(4096)]
    counts = {prefix: prefixes.count(prefix) for prefix in set(prefixes)}
    assert len(counts) == 256 and max(counts.values()) < 3 * 4096 / 256


def test_delta_document_round_trips_exactly_with_decimal_strings() -> None:
    item = delta("a", value="12345678901234567890.123456789012345678")
    body = encode_delta_document(item)
    document = json.loads(body, parse_float=lambda text: pytest.fail(f"float {text} in the document"))
    assert document["Deltas"]["Delta"]["Value"] == "12345678901234567890.123456789012345678"
    assert parse_delta_document(body) == item
    assert encode_delta_document(item) == body  # canonical: a retry writes identical bytes


@pytest.mark.parametrize(
    "mutation",
    [
        lambda d: d.update(Format="other"),
        lambda d: d["Deltas"]["Delta"].update(Value=0.1),
        lambda d: d["Deltas"]["Delta"].update(TradeCount="1"),
        lambda d: d.update(BatchHash="not-a-hash"),
        lambda d: d.pop("Stream"),
    ],
)
def test_parse_refuses_documents_it_did_not_write(mutation: object) -> None:
    document = json.loads(encode_delta_document(delta("a")))
    mutation(document)  # type: ignore[operator]
    with pytest.raises(ArchiveDocumentError):
        parse_delta_document(json.dumps(document).encode())


def test_archived_totals_are_exact_and_keep_nodes_that_net_to_zero() -> None:
    totals = archived_totals([delta("a", "0.1"), delta("b", "0.2"), delta("c", "-0.3", -2, key="Vega")])
    assert totals["Delta"] == NodeDelta(Decimal("0.3"), 2)
    assert totals["Vega"] == NodeDelta(Decimal("-0.3"), -2)
    netted = archived_totals([delta("a", "5"), delta("b", "-5", -1)])
    assert netted["Delta"] == NodeDelta(Decimal(0), 0)


def test_registry_round_trips_and_refuses_a_newer_schema() -> None:
    registry = Registry(objects_archived=3, state_changes_archived=9, claims={"h": Claim("o", 3)}, last_updated="t")
    assert parse_registry(encode_registry(registry)) == registry
    newer = json.loads(encode_registry(registry))
    newer["SchemaVersion"] = 2
    with pytest.raises(ArchiveDocumentError, match="newer"):
        parse_registry(json.dumps(newer).encode())


def test_claim_then_settle_counts_each_created_object_once() -> None:
    batch = [delta("a", sequence=5), delta("b", sequence=9)]
    claimed = claim_objects(Registry(), "owner", batch, "t1")
    assert claimed.registry is not None and claimed.claimed_earlier == frozenset()
    settled = settle_objects(claimed.registry, "owner", batch, frozenset(d.batch_hash for d in batch), "t2")
    assert settled is not None
    assert (settled.objects_archived, settled.state_changes_archived, dict(settled.claims)) == (2, 6, {})
    assert settled.streams["arn:stream"].highest_sequence_number == "9"
    # Settling again (a redrive after our own write's response was lost) changes nothing.
    assert settle_objects(settled, "owner", batch, frozenset(d.batch_hash for d in batch), "t3") is None


def test_a_retry_finds_its_earlier_claims() -> None:
    batch = [delta("a"), delta("b")]
    first = claim_objects(Registry(), "owner", batch, "t1").registry
    assert first is not None
    retry = claim_objects(first, "owner", batch, "t2")
    assert retry.registry is None  # nothing new to write
    assert retry.claimed_earlier == frozenset(d.batch_hash for d in batch)


def test_a_replay_after_settle_claims_again_and_releases_without_counting() -> None:
    batch = [delta("a")]
    claimed = claim_objects(Registry(), "owner", batch, "t").registry
    assert claimed is not None
    settled = settle_objects(claimed, "owner", batch, frozenset({batch[0].batch_hash}), "t")
    assert settled is not None
    replay = claim_objects(settled, "owner", batch, "t")
    assert replay.claimed_earlier == frozenset() and replay.registry is not None
    released = settle_objects(replay.registry, "owner", batch, frozenset(), "t")  # 412 and not claimed earlier
    assert released is not None
    assert (released.objects_archived, dict(released.claims)) == (1, {})


def test_another_owners_claim_is_left_alone() -> None:
    batch = [delta("a")]
    theirs = claim_objects(Registry(), "them", batch, "t").registry
    assert theirs is not None
    ours = claim_objects(theirs, "us", batch, "t")
    assert ours.registry is None and ours.claimed_earlier == frozenset()
    assert settle_objects(theirs, "us", batch, frozenset({batch[0].batch_hash}), "t") is None
