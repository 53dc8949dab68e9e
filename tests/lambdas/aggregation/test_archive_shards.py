"""The sharded registry: keys, the shard an invocation claims in, settle routes, totals, and the
claim -> write -> settle protocol over concurrent invocations on different shards (a property)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.archive import (
    LEGACY_SHARD,
    MAX_REGISTRY_SHARDS,
    ArchivedDelta,
    ClaimRef,
    ObservedObject,
    Registry,
    claim_objects,
    registry_key,
    registry_shard_for,
    registry_shard_of_key,
    registry_totals,
    settle_objects,
    settle_routes,
)
from tests.lambdas.aggregation.test_archive import delta


def test_shard_keys_round_trip_and_the_legacy_key_is_a_shard_of_its_own() -> None:
    assert registry_key(0) == "metastore/registry/0.json"
    assert registry_key(LEGACY_SHARD) == "metastore/registry.json"
    for shard in (LEGACY_SHARD, 0, 7, MAX_REGISTRY_SHARDS - 1):
        assert registry_shard_of_key(registry_key(shard)) == shard
    for other in ("metastore/registry/07.json", "metastore/registry/x.json", "metastore/other.json", "deltas/ab/x"):
        assert registry_shard_of_key(other) is None, other


def test_an_invocation_claims_in_one_shard_chosen_by_its_content_and_shards_share_the_load() -> None:
    hashes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(4096)]
    assert registry_shard_for(["b" * 64, "a" * 64], 64) == registry_shard_for(["a" * 64, "b" * 64], 64)
    assert registry_shard_for(hashes[:10], 1) == 0
    counts = [0] * 16
    for start in range(0, 4096, 8):  # 512 invocations of 8 items each
        counts[registry_shard_for(hashes[start : start + 8], 16)] += 1
    assert min(counts) >= 16 and max(counts) <= 56  # 32 each on average


def _seen(item: ArchivedDelta, shard: int, generation: int) -> ObservedObject:
    return ObservedObject(item, ClaimRef(shard, generation))


def test_settle_routes_every_object_to_its_own_shard_and_to_its_creator_claims_shard() -> None:
    a, b, c = delta("a"), delta("b"), delta("c")
    routes = settle_routes(2, [_seen(a, 2, 5), _seen(b, 7, 1), ObservedObject(c, None), _seen(c, LEGACY_SHARD, 3)])
    assert {shard: [seen.delta.batch_hash for seen in objects] for shard, objects in routes.items()} == {
        2: [a.batch_hash, b.batch_hash, c.batch_hash, c.batch_hash],
        7: [b.batch_hash],
        LEGACY_SHARD: [c.batch_hash],
    }


def test_an_object_counts_only_in_the_shard_of_its_creator_claim() -> None:
    """A retry that chose shard 1 closes its own claim there without counting; shard 0, whose
    claim created the object, counts it."""
    a = delta("a")
    first = claim_objects(Registry(), [a.batch_hash], "t")
    retry = claim_objects(Registry(), [a.batch_hash], "t")
    assert first is not None and retry is not None
    seen = _seen(a, 0, first.claims[a.batch_hash])
    in_retry_shard = settle_objects(retry, 1, [seen], "t")
    in_creator_shard = settle_objects(first, 0, [seen], "t")
    assert in_retry_shard is not None and in_creator_shard is not None
    assert (in_retry_shard.objects_archived, dict(in_retry_shard.claims)) == (0, {})
    assert (in_creator_shard.objects_archived, dict(in_creator_shard.claims)) == (1, {})


def test_totals_sum_the_shards_and_pool_their_claims() -> None:
    shards = [
        Registry(objects_archived=2, state_changes_archived=6, claims={"h1": 3}),
        Registry(objects_archived=5, state_changes_archived=9, claims={"h1": 1, "h2": 4}),
        Registry(),
    ]
    totals = registry_totals(shards)
    assert (totals.shards, totals.objects_archived, totals.state_changes_archived) == (3, 7, 15)
    assert (totals.claims, totals.open_claims) == (frozenset({"h1", "h2"}), 3)
    assert registry_totals([]).shards == 0


# --- the protocol over interleavings ---------------------------------------------------------------
#
# A model of the bucket that applies the domain's functions as the archive function does: each
# registry change is applied atomically to the shard's current version (compare-and-swap plus
# redrive), each delta object is created once (If-None-Match) with its creator claim. Invocations
# advance one step at a time in an order Hypothesis chooses, claim in whichever shard they are
# given (other boundaries, another `archiveRegistryShards`, the legacy registry), and may die
# after any step; a step may also be applied twice (a redrive after a lost response).

ITEMS = [replace(delta(f"item-{i}"), record_count=2**i) for i in range(6)]
"""Record counts are distinct powers of two: the state changes counted name the objects counted."""
SHARDS = (LEGACY_SHARD, 0, 1, 2)


@dataclass
class Bucket:
    registries: dict[int, Registry] = field(default_factory=lambda: {shard: Registry() for shard in SHARDS})
    objects: dict[str, ClaimRef] = field(default_factory=dict)  # batch hash -> creator claim

    def update(self, shard: int, change: object) -> Registry:
        assert callable(change)
        updated = change(self.registries[shard])
        if updated is not None:
            self.registries[shard] = updated
        return self.registries[shard]

    def settle(self, shard: int, observed: list[ObservedObject]) -> None:
        for target, objects in settle_routes(shard, observed).items():
            self.update(target, lambda registry, t=target, o=objects: settle_objects(registry, t, o, "t"))

    def counted(self) -> tuple[int, int]:
        totals = registry_totals(self.registries.values())
        return totals.objects_archived, totals.state_changes_archived


@dataclass
class Invocation:
    items: list[ArchivedDelta]
    shard: int
    step: int = 0  # 0: claim, 1..n: write item step-1, n+1: settle, then done
    held: dict[str, ClaimRef] = field(default_factory=dict)
    observed: list[ObservedObject] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.step > len(self.items) + 1

    def advance(self, bucket: Bucket) -> None:
        hashes = [item.batch_hash for item in self.items]
        if self.step == 0:
            claimed = bucket.update(self.shard, lambda registry: claim_objects(registry, hashes, "t"))
            self.held = {batch_hash: ClaimRef(self.shard, claimed.claims[batch_hash]) for batch_hash in hashes}
        elif self.step <= len(self.items):
            item = self.items[self.step - 1]
            creator = bucket.objects.setdefault(item.batch_hash, self.held[item.batch_hash])
            self.observed.append(ObservedObject(item, creator))
        else:
            bucket.settle(self.shard, self.observed)
        self.step += 1


def sweep(bucket: Bucket, shard: int) -> None:
    """Any invocation's sweep of `shard`: read the objects of its open claims, settle them."""
    claims = bucket.registries[shard].claims
    observed = [
        ObservedObject(item, bucket.objects[item.batch_hash])
        for item in ITEMS
        if item.batch_hash in claims and item.batch_hash in bucket.objects
    ]
    bucket.settle(shard, observed)


@settings(max_examples=300)
@given(st.data())
def test_every_object_counts_exactly_once_whatever_the_interleaving_shards_and_deaths(data: st.DataObject) -> None:
    bucket = Bucket()
    invocations = [
        Invocation(
            data.draw(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=4, unique_by=lambda item: item.batch_hash)),
            data.draw(st.sampled_from(SHARDS)),
        )
        for _ in range(data.draw(st.integers(1, 5)))
    ]
    running = list(invocations)
    while running:
        action = data.draw(st.sampled_from(["step", "step", "step", "redo settle", "die", "sweep"]))
        invocation = data.draw(st.sampled_from(running))
        if action == "die":
            running.remove(invocation)
            continue
        if action == "sweep":
            sweep(bucket, data.draw(st.sampled_from(SHARDS)))
        else:
            invocation.advance(bucket)
            if action == "redo settle" and invocation.done:  # a lost response: the settle redriven
                bucket.settle(invocation.shard, invocation.observed)
        if invocation.done:
            running.remove(invocation)
        # At most once, at every moment: what counts is a subset of the objects, none twice.
        objects, changes = bucket.counted()
        created = {item.batch_hash for item in ITEMS if item.batch_hash in bucket.objects}
        counted_items = {item.batch_hash for item in ITEMS if changes & item.record_count}
        assert counted_items <= created and objects == len(counted_items)

    # Lambda redelivers every item until a batch holding it succeeds: one more successful
    # invocation with every item delivered (in any shard but the legacy one, where nothing new
    # claims), then a sweep of each shard, leaves every object counted once and no claim open.
    delivered = {item.batch_hash: item for invocation in invocations for item in invocation.items}
    final = Invocation(list(delivered.values()), data.draw(st.sampled_from(SHARDS[1:])))
    while not final.done:
        final.advance(bucket)
    for shard in SHARDS:
        sweep(bucket, shard)
    assert bucket.counted() == (
        len(bucket.objects),
        sum(i.record_count for i in ITEMS if i.batch_hash in bucket.objects),
    )
    assert registry_totals(bucket.registries.values()).open_claims == 0
