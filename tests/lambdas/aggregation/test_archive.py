"""The archive's documents (batch object, receipt, item), how readers count items once, and how
they account for the earlier layout (per-item objects and a counting registry)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregation.archive import (
    KEY_PREFIX_HEX_CHARACTERS,
    ArchivedDelta,
    ArchiveDocumentError,
    Receipt,
    StreamPosition,
    archived_totals,
    batch_object_id,
    batch_object_key,
    batch_of,
    check_registry,
    distinct_items,
    encode_batch_document,
    encode_delta_document,
    encode_receipt,
    object_id_of_batch_key,
    object_id_of_receipt_key,
    parse_batch_document,
    parse_delta_document,
    parse_receipt,
    receipt_key,
)
from aggregation.archive_legacy import (
    LEGACY_SHARD,
    ClaimRef,
    ItemObject,
    Registry,
    account_for_legacy_objects,
    batch_hash_of_item_key,
    claim_metadata,
    creator_claim,
    encode_registry,
    item_object_key,
    parse_registry,
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


def test_the_object_id_is_the_set_of_items_whatever_their_order_or_repetition() -> None:
    a, b, c = (delta(seed).batch_hash for seed in "abc")
    assert batch_object_id([a, b, c]) == batch_object_id([c, a, b, a])
    assert batch_object_id([a, b]) != batch_object_id([a, b, c])
    assert batch_object_id([a]) != a, "an object of one item is not named like that item's per-item object"
    with pytest.raises(ArchiveDocumentError):
        batch_object_id([])
    with pytest.raises(ArchiveDocumentError):
        batch_object_id(["A" * 64])


def test_keys_are_spread_by_the_id_prefix_and_name_their_id() -> None:
    identity = batch_object_id([delta("a").batch_hash])
    assert batch_object_key(identity) == f"deltas/{identity[:2]}/{identity}.batch.json"
    assert receipt_key(identity) == f"metastore/receipts/{identity[:2]}/{identity}.json"
    assert object_id_of_batch_key(batch_object_key(identity)) == identity
    assert object_id_of_receipt_key(receipt_key(identity)) == identity
    assert object_id_of_batch_key(f"deltas/zz/{identity}.batch.json") is None
    assert object_id_of_batch_key(item_object_key(identity)) is None
    assert batch_hash_of_item_key(batch_object_key(identity)) is None
    for bad in ("../registry", "A" * 64, identity[:-1]):
        with pytest.raises(ArchiveDocumentError):
            batch_object_key(bad)


def test_prefixes_spread_evenly() -> None:
    prefixes = [batch_object_id([delta(str(i)).batch_hash])[:KEY_PREFIX_HEX_CHARACTERS] for i in range(4096)]
    counts = {prefix: prefixes.count(prefix) for prefix in set(prefixes)}
    assert len(counts) == 256 and max(counts.values()) < 3 * 4096 / 256


def test_a_batch_object_round_trips_exactly_and_is_the_same_bytes_in_any_order() -> None:
    items = [delta("a", value="12345678901234567890.123456789012345678"), delta("b"), delta("c")]
    batch = batch_of(items)
    body = encode_batch_document(batch)
    document = json.loads(body, parse_float=lambda text: pytest.fail(f"float {text} in the document"))
    first = next(item for item in document["Items"] if item["BatchHash"] == items[0].batch_hash)
    assert first["Deltas"]["Delta"]["Value"] == "12345678901234567890.123456789012345678"
    assert parse_batch_document(body, batch.object_id) == batch
    assert encode_batch_document(batch_of(reversed(items))) == body  # canonical: a reordered retry, same bytes
    assert encode_batch_document(batch_of([*items, items[1]])) == body  # a record delivered twice is one item
    # Each item is the very document a per-item object of earlier releases held.
    assert json.dumps(first, sort_keys=True, separators=(",", ":")).encode() == encode_delta_document(items[0])


def test_two_different_items_with_one_batch_hash_are_refused() -> None:
    with pytest.raises(ArchiveDocumentError, match="two different"):
        batch_of([delta("a", value="1"), delta("a", value="2")])


def _mutated_batch(mutation: Any) -> tuple[bytes, str]:
    batch = batch_of([delta("a"), delta("b")])
    document = json.loads(encode_batch_document(batch))
    mutation(document)
    return json.dumps(document).encode(), batch.object_id


@pytest.mark.parametrize(
    "mutation",
    [
        lambda d: d.update(Format="other"),
        lambda d: d.update(ObjectId="0" * 64),
        lambda d: d["Items"].pop(),  # an item removed: the id no longer matches
        lambda d: d["Items"].append(d["Items"][0]),  # an item repeated
        lambda d: d["Items"].reverse(),  # not sorted
        lambda d: d["Items"][0]["Deltas"]["Delta"].update(Value=0.1),
        lambda d: d["Items"][0]["Deltas"]["Delta"].update(TradeCount="1"),
        lambda d: d["Items"][0].update(BatchHash="not-a-hash"),
        lambda d: d["Items"][0].pop("Stream"),
        lambda d: d.update(Extra=1),
    ],
)
def test_parse_refuses_batch_objects_it_did_not_write(mutation: Any) -> None:
    body, identity = _mutated_batch(mutation)
    with pytest.raises(ArchiveDocumentError):
        parse_batch_document(body, identity)


def test_a_batch_object_under_another_items_key_is_refused() -> None:
    batch = batch_of([delta("a")])
    with pytest.raises(ArchiveDocumentError, match="differ from the key"):
        parse_batch_document(encode_batch_document(batch), batch_object_id([delta("b").batch_hash]))


def test_a_receipt_round_trips_and_must_agree_with_its_key() -> None:
    batch = batch_of([delta("a"), delta("b")])
    receipt = batch.receipt
    assert receipt.state_changes == 6 and receipt.object_key == batch.key
    body = encode_receipt(receipt)
    assert parse_receipt(body, batch.object_id) == receipt
    mutations: list[Callable[[dict[str, Any]], Any]] = [
        lambda d: d.update(ItemCount=3),
        lambda d: d.update(StateChanges=7),
        lambda d: d.update(ObjectKey="deltas/00/x.batch.json"),
        lambda d: d["Items"].pop(delta("a").batch_hash),
        lambda d: d.update(Format="x"),
        lambda d: d["Items"].update({delta("a").batch_hash: 1.5}),
    ]
    for mutation in mutations:
        document = json.loads(body, parse_float=Decimal)
        mutation(document)
        with pytest.raises(ArchiveDocumentError):
            parse_receipt(json.dumps(document, default=str).encode(), batch.object_id)
    with pytest.raises(ArchiveDocumentError):
        parse_receipt(body, batch_object_id([delta("c").batch_hash]))


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
def test_parse_refuses_per_item_documents_it_did_not_write(mutation: Any) -> None:
    document = json.loads(encode_delta_document(delta("a")))
    mutation(document)
    with pytest.raises(ArchiveDocumentError):
        parse_delta_document(json.dumps(document).encode())


def test_distinct_items_count_each_item_once_and_name_copies_that_differ() -> None:
    a, b = delta("a"), delta("b")
    counted = distinct_items([a, b, a, a])
    assert list(counted.items) == sorted([a.batch_hash, b.batch_hash]) and counted.copies == 4
    assert counted.conflicts == () and counted.state_changes == 6
    altered = distinct_items([a, b, delta("a", value="9")])
    assert altered.conflicts == (a.batch_hash,)


@given(st.lists(st.sampled_from("abcdefgh"), max_size=30))
def test_totals_of_distinct_items_do_not_depend_on_copies(seeds: list[str]) -> None:
    once = archived_totals(distinct_items(delta(seed) for seed in set(seeds)).items.values())
    with_copies = archived_totals(distinct_items(delta(seed) for seed in seeds).items.values())
    assert once == with_copies


def test_archived_totals_are_exact_and_keep_nodes_that_net_to_zero() -> None:
    totals = archived_totals([delta("a", "0.1"), delta("b", "0.2"), delta("c", "-0.3", -2, key="Vega")])
    assert totals["Delta"] == NodeDelta(Decimal("0.3"), 2)
    assert totals["Vega"] == NodeDelta(Decimal("-0.3"), -2)
    netted = archived_totals([delta("a", "5"), delta("b", "-5", -1)])
    assert netted["Delta"] == NodeDelta(Decimal(0), 0)


def test_the_registry_check_finds_removed_altered_and_uncovered_objects() -> None:
    ab, bc, cd = (
        batch_of([delta("a"), delta("b")]),
        batch_of([delta("b"), delta("c")]),
        batch_of([delta("c"), delta("d")]),
    )
    batches = {batch.object_id: batch for batch in (ab, bc, cd)}
    receipts = {batch.object_id: batch.receipt for batch in (ab, cd)}
    findings = check_registry(batches, receipts)
    assert findings.ok and findings.unreceipted == (bc.object_id,), "b and c are in receipted objects"

    only_ab = check_registry(batches, {ab.object_id: ab.receipt})
    assert only_ab.uncovered_items == tuple(sorted(delta(seed).batch_hash for seed in "cd")) and not only_ab.ok
    elsewhere = [delta(seed).batch_hash for seed in "cd"]  # in per-item objects of the earlier layout
    assert check_registry(batches, {ab.object_id: ab.receipt}, elsewhere).ok
    removed = check_registry({ab.object_id: ab}, receipts)
    assert removed.missing_objects == (cd.object_id,) and not removed.ok
    wrong = Receipt(ab.object_id, {delta("a").batch_hash: 3, delta("b").batch_hash: 4})
    altered = check_registry(batches, {**receipts, ab.object_id: wrong})
    assert altered.differing == (ab.object_id,) and not altered.ok


# --- the earlier layout -------------------------------------------------------------------------------


def test_claim_metadata_names_the_creator_claim_and_anything_else_names_none() -> None:
    assert claim_metadata(ClaimRef(3, 17)) == {"archive-claim": "3:17"}
    assert creator_claim(claim_metadata(ClaimRef(3, 17))) == ClaimRef(3, 17)
    # The single registry's claims: a bare generation, as the releases before the shards wrote them.
    assert claim_metadata(ClaimRef(LEGACY_SHARD, 17)) == {"archive-claim": "17"}
    assert creator_claim({"archive-claim": "17"}) == ClaimRef(LEGACY_SHARD, 17)
    for value in ("", "017", "-1", "03:1", "3:", ":3", "3:0", "1:2:3", "12345:1"):
        assert creator_claim({"archive-claim": value}) is None, value


def test_a_registry_shard_round_trips_and_a_newer_schema_or_open_schema_1_claims_are_refused() -> None:
    registry = Registry(objects_archived=3, state_changes_archived=9, claims={"h": 4}, generation=7)
    assert parse_registry(encode_registry(registry)) == registry
    newer = json.loads(encode_registry(registry))
    newer["SchemaVersion"] = 3
    with pytest.raises(ArchiveDocumentError, match="newer"):
        parse_registry(json.dumps(newer).encode())
    version_1 = {"SchemaVersion": 1, "ObjectsArchived": 5, "StateChangesArchived": 12, "Claims": {}}
    assert parse_registry(json.dumps(version_1).encode()).objects_archived == 5
    version_1["Claims"] = {"h": {"Owner": "batch"}}
    with pytest.raises(ArchiveDocumentError, match="open claims"):
        parse_registry(json.dumps(version_1).encode())


def test_the_earlier_registry_is_exact_when_it_counts_the_objects_whose_creator_claim_closed() -> None:
    """a and b were counted; c was written under claim (1, 5), still open (its invocation died before
    settling, and nothing settles any more); d's claim opened in the same write, but d was never written."""
    a, b, c, d = (delta(seed) for seed in "abcd")
    objects = [ItemObject(a, ClaimRef(0, 1)), ItemObject(b, ClaimRef(LEGACY_SHARD, 2)), ItemObject(c, ClaimRef(1, 5))]
    registries = {
        0: Registry(objects_archived=1, state_changes_archived=3, generation=2),
        LEGACY_SHARD: Registry(objects_archived=1, state_changes_archived=3, claims={a.batch_hash: 9}, generation=9),
        1: Registry(claims={c.batch_hash: 5, d.batch_hash: 5}, generation=5),
    }
    account = account_for_legacy_objects(registries, objects)
    assert account.exact, account
    assert (account.closed_objects, account.uncounted_objects, account.open_claims) == (
        2,
        1,
        frozenset({a.batch_hash, c.batch_hash, d.batch_hash}),
    )
    # Counting c too, or missing b, or an object written without a claim, is not exact.
    assert not account_for_legacy_objects({**registries, 0: Registry(objects_archived=2)}, objects).exact
    assert not account_for_legacy_objects(registries, objects[:1] + objects[2:]).exact
    assert not account_for_legacy_objects(registries, [*objects, ItemObject(d, None)]).exact
