"""The archive's documents and the claim/settle rules that make the registry count exact."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import pytest

from aggregation.archive import (
    KEY_PREFIX_HEX_CHARACTERS,
    LEGACY_SHARD,
    ArchivedDelta,
    ArchiveDocumentError,
    ClaimRef,
    ObservedObject,
    Registry,
    StreamPosition,
    StreamProgress,
    archived_totals,
    batch_hash_of_key,
    claim_metadata,
    claim_objects,
    creator_claim,
    delta_object_key,
    encode_delta_document,
    encode_registry,
    parse_delta_document,
    parse_registry,
    settle_objects,
    stale_claims,
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
    registry = Registry(objects_archived=3, state_changes_archived=9, claims={"h": 4}, generation=7, last_updated="t")
    assert parse_registry(encode_registry(registry)) == registry
    newer = json.loads(encode_registry(registry))
    newer["SchemaVersion"] = 3
    with pytest.raises(ArchiveDocumentError, match="newer"):
        parse_registry(json.dumps(newer).encode())


def test_a_drained_schema_1_registry_is_read_and_one_with_open_claims_is_refused() -> None:
    version_1 = {
        "SchemaVersion": 1,
        "ObjectsArchived": 5,
        "StateChangesArchived": 12,
        "Claims": {},
        "Streams": {"arn:stream": {"HighestSequenceNumber": "9", "ObjectsArchived": 5}},
        "LastUpdated": "t",
    }
    upgraded = parse_registry(json.dumps(version_1).encode())
    assert (upgraded.objects_archived, upgraded.generation, upgraded.schema_version) == (5, 0, 2)
    version_1["Claims"] = {"h": {"Owner": "batch", "RecordCount": 3}}
    with pytest.raises(ArchiveDocumentError, match="drain"):
        parse_registry(json.dumps(version_1).encode())


def test_claim_metadata_names_the_creator_claim_and_anything_else_names_none() -> None:
    assert claim_metadata(ClaimRef(3, 17)) == {"archive-claim": "3:17"}
    assert creator_claim(claim_metadata(ClaimRef(3, 17))) == ClaimRef(3, 17)
    assert creator_claim(claim_metadata(ClaimRef(0, 1))) == ClaimRef(0, 1)
    # The legacy single registry's claims: a bare generation, as the previous release wrote them.
    assert claim_metadata(ClaimRef(LEGACY_SHARD, 17)) == {"archive-claim": "17"}
    assert creator_claim({"archive-claim": "17"}) == ClaimRef(LEGACY_SHARD, 17)
    for value in ("", "017", "-1", "03:1", "3:", ":3", "3:0", "1:2:3", "12345:1"):
        assert creator_claim({"archive-claim": value}) is None, value
    assert creator_claim({"other": "1"}) is None


def test_claims_are_opened_once_with_the_generation_that_opens_them() -> None:
    first = claim_objects(Registry(), ["a", "b", "a"], "t1")
    assert first is not None and (dict(first.claims), first.generation) == ({"a": 1, "b": 1}, 1)
    # Open claims are kept, whoever opened them; only the missing one is opened, by the next generation.
    second = claim_objects(first, ["b", "c"], "t2")
    assert second is not None and dict(second.claims) == {"a": 1, "b": 1, "c": 2}
    assert claim_objects(second, ["a", "c"], "t3") is None  # nothing to write


def observed(item: ArchivedDelta, creator: int | None, shard: int = 0) -> ObservedObject:
    """`item`'s object, created under generation `creator` of `shard` (None: under no claim)."""
    return ObservedObject(item, None if creator is None else ClaimRef(shard, creator))


def test_settle_counts_an_object_once_when_its_creator_claim_closes() -> None:
    a, b = delta("a", sequence=5), delta("b", sequence=9)
    claimed = claim_objects(Registry(), [a.batch_hash, b.batch_hash], "t1")
    assert claimed is not None
    settled = settle_objects(claimed, 0, [observed(a, 1), observed(b, 1)], "t2")
    assert settled is not None
    assert (settled.objects_archived, settled.state_changes_archived, dict(settled.claims)) == (2, 6, {})
    assert settled.streams["arn:stream"] == StreamProgress("9", 2) and settled.generation == 2
    # Settling again (a redrive after our own write's response was lost) changes nothing.
    assert settle_objects(settled, 0, [observed(a, 1), observed(b, 1)], "t3") is None


def test_a_claim_that_did_not_create_its_object_closes_without_counting() -> None:
    """A replay of an archived item opens a new claim; the object names the old one."""
    a = delta("a")
    archived = settle_objects(_claimed(Registry(), a), 0, [observed(a, 1)], "t")
    assert archived is not None and archived.objects_archived == 1
    replay = _claimed(archived, a)
    assert replay.claims == {a.batch_hash: 3}
    closed = settle_objects(replay, 0, [observed(a, 1)], "t")
    assert closed is not None and (closed.objects_archived, dict(closed.claims)) == (1, {})
    unknown = settle_objects(_claimed(closed, a), 0, [observed(a, None)], "t")  # written without a claim tag
    assert unknown is not None and (unknown.objects_archived, dict(unknown.claims)) == (1, {})


def test_whoever_observes_the_object_closes_its_claim_and_counts_it() -> None:
    """A claim opened by one invocation is closed by another that saw the object (a re-formed
    retry, a sweep): the count does not depend on who settles."""
    a, b = delta("a"), delta("b")
    theirs = _claimed(Registry(), a)
    ours = claim_objects(theirs, [a.batch_hash, b.batch_hash], "t")
    assert ours is not None and dict(ours.claims) == {a.batch_hash: 1, b.batch_hash: 2}
    settled = settle_objects(ours, 0, [observed(a, 1), observed(b, 2)], "t")
    assert settled is not None and (settled.objects_archived, dict(settled.claims)) == (2, {})


def test_stale_claims_are_those_open_for_the_lag_outside_the_batch() -> None:
    registry = Registry(claims={"old": 1, "mine": 1, "recent": 9}, generation=10)
    assert stale_claims(registry, ["mine"], after_generations=5) == ["old"]
    assert stale_claims(registry, [], after_generations=1) == ["mine", "old", "recent"]
    assert stale_claims(registry, [], after_generations=10) == []


def _claimed(registry: Registry, item: ArchivedDelta) -> Registry:
    claimed = claim_objects(registry, [item.batch_hash], "t")
    assert claimed is not None
    return claimed
