"""Transaction planning: node groups, action budget, deterministic splitting and tokens."""

import random
from collections import Counter
from dataclasses import replace
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.aggregate_items import MAX_SLICES
from aggregation.deltas import NodeDelta
from aggregation.transactions import (
    MAX_NODES_PER_UNIT,
    MAX_TRANSACTION_ACTIONS,
    NODE_GROUPS,
    DeltaBatch,
    DeltaUnit,
    PlannedTransaction,
    client_request_token,
    node_group,
    plan_transactions,
    split_into_units,
    transaction_slice,
)

# The standard workload's hierarchy: 5 risk types x 5 desks x 3 regions = 106 nodes.
STANDARD_NODES = [
    key
    for risk in range(5)
    for key in [f"R{risk}"]
    + [f"R{risk}:D{desk}" for desk in range(5)]
    + [f"R{risk}:D{desk}:G{region}" for desk in range(5) for region in range(3)]
]


def batch(batch_hash: str, node_count: int, records: int = 3) -> DeltaBatch:
    deltas = {f"N{i:04d}": NodeDelta(Decimal(i + 1), 1) for i in range(node_count)}
    return DeltaBatch(batch_hash, deltas, records, (Decimal(1), Decimal(2)), created_at=1_000)


def batch_over(batch_hash: str, keys: list[str], records: int = 100) -> DeltaBatch:
    return DeltaBatch(batch_hash, {key: NodeDelta(Decimal("0.5"), 1) for key in keys}, records, (Decimal(1),), 1_000)


def standard_invocation(batches: int = 10, seed: int = 3) -> list[DeltaBatch]:
    """Delta batches as map batches of 100 changes give them: each touches about 80 of the 106 nodes."""
    chooser = random.Random(seed)
    return [batch_over(f"b{i}", chooser.sample(STANDARD_NODES, 80)) for i in range(batches)]


def units_of(batches: list[DeltaBatch]) -> list[DeltaUnit]:
    return [unit for b in batches for unit in split_into_units(b)]


def action_count(plan: PlannedTransaction, with_markers: bool) -> int:
    return len(plan.node_deltas) + (len(plan.units) if with_markers else 0) + 1


def test_small_batch_is_one_unit_per_touched_group_and_carries_its_record_count_once() -> None:
    units = split_into_units(batch("h", 5))
    groups = sorted({node_group(f"N{i:04d}") for i in range(5)})
    assert [u.node_group for u in units] == groups
    assert [u.marker_id for u in units] == [f"h/{group}of{NODE_GROUPS}/0" for group in groups]
    assert [u.record_count for u in units] == [3] + [0] * (len(units) - 1)
    assert sum(len(u.deltas) for u in units) == 5


def test_node_groups_come_from_a_stable_hash_of_the_key() -> None:
    assert node_group("Delta") == node_group("Delta")
    assert node_group("Delta", 1) == 0
    counts = Counter(node_group(key) for key in STANDARD_NODES)
    assert set(counts) == set(range(NODE_GROUPS)) and min(counts.values()) > len(STANDARD_NODES) // 4


def test_large_group_part_splits_deterministically_counting_records_once() -> None:
    units = split_into_units(batch("h", 500))
    assert all(len(u.deltas) <= MAX_NODES_PER_UNIT for u in units)
    assert sum(u.record_count for u in units) == 3 and units[0].record_count == 3
    assert units == split_into_units(batch("h", 500))
    for group in range(NODE_GROUPS):
        keys = [key for u in units if u.node_group == group for key, _ in u.deltas]
        assert keys == sorted(keys) and all(node_group(key) == group for key in keys)
    assert len({key for u in units for key, _ in u.deltas}) == 500
    assert len({u.marker_id for u in units}) == len(units)


def test_empty_batch_still_has_a_unit_so_its_messages_are_counted() -> None:
    units = split_into_units(batch("h", 0))
    assert len(units) == 1 and units[0].deltas == () and units[0].record_count == 3
    assert units[0].marker_id == f"h/0of{NODE_GROUPS}/0"


def test_a_units_marker_id_and_content_do_not_depend_on_its_neighbours() -> None:
    alone = split_into_units(batch_over("a", STANDARD_NODES[:40]))
    for neighbours in ([], standard_invocation(3), standard_invocation(9, seed=8)):
        together = units_of([*neighbours[:1], batch_over("a", STANDARD_NODES[:40]), *neighbours[1:]])
        assert [u for u in together if u.marker_id.startswith("a/")] == alone


@pytest.mark.parametrize("with_markers", [True, False])
def test_every_planned_transaction_fits_in_100_actions_and_plans_every_unit_once(with_markers: bool) -> None:
    batches = [batch(f"b{i}", 40 + i * 37) for i in range(12)] + standard_invocation() + [batch("empty", 0)]
    units = units_of(batches)
    plans = plan_transactions(units, with_markers)
    assert all(action_count(plan, with_markers) <= MAX_TRANSACTION_ACTIONS for plan in plans)
    assert sorted(u.marker_id for plan in plans for u in plan.units) == sorted(u.marker_id for u in units)
    assert sum(plan.record_count for plan in plans) == sum(b.record_count for b in batches)


def test_a_standard_invocation_writes_each_node_once() -> None:
    """Ten delta batches over the standard hierarchy: one update per node, not one per batch."""
    batches = standard_invocation()
    plans = plan_transactions(units_of(batches), with_markers=True)
    writes = Counter(key for plan in plans for key in plan.node_deltas)
    assert set(writes) == {key for b in batches for key in b.deltas}
    assert set(writes.values()) == {1}
    assert len(plans) <= NODE_GROUPS
    assert sum(len(plan.units) for plan in plans) <= len(batches) * NODE_GROUPS


def test_units_sharing_nodes_are_summed_into_one_action_per_node() -> None:
    first = split_into_units(DeltaBatch("a", {"X": NodeDelta(Decimal("0.1"), 1)}, 1, (), 1_000))
    second = split_into_units(DeltaBatch("b", {"X": NodeDelta(Decimal("0.2"), 1)}, 1, (), 1_000))
    (plan,) = plan_transactions(first + second, with_markers=True)
    assert plan.node_deltas == {"X": NodeDelta(Decimal("0.3"), 2)}
    group = node_group("X")
    assert plan.marker_ids == (f"a/{group}of{NODE_GROUPS}/0", f"b/{group}of{NODE_GROUPS}/0")
    assert plan.record_count == 2


def test_planning_is_deterministic_and_keeps_stream_order_within_a_group() -> None:
    units = units_of(standard_invocation())
    plans = plan_transactions(units, with_markers=True)
    assert plans == plan_transactions(list(units), with_markers=True)
    for plan in plans:
        for group in {u.node_group for u in plan.units}:
            in_plan = [u.marker_id for u in plan.units if u.node_group == group]
            assert in_plan == [u.marker_id for u in units if u.marker_id in set(in_plan)]


def test_tokens_are_36_characters_and_name_exactly_the_units() -> None:
    token = client_request_token(["a/0of2/0", "b/0of2/0"])
    assert len(token) == 36
    assert token == client_request_token(["a/0of2/0", "b/0of2/0"])
    assert token != client_request_token(["a/0of2/0"])
    units = split_into_units(batch("a", 3))
    (plan,) = plan_transactions(units, with_markers=True)
    assert plan.client_request_token == client_request_token([u.marker_id for u in units])


def test_in_crt_a_transaction_writes_its_items_slice_and_the_marker_ids_do_not_depend_on_it() -> None:
    """Mode `crt` (no markers): units of items of different StateTable shards add to their items'
    slices, never mixed in one transaction (one `#stats` slice each), as every earlier release
    formed them; the units' identity is the same whatever the slice."""
    first = split_into_units(batch_over("a", STANDARD_NODES[:20]), aggregate_slice=3)
    second = split_into_units(batch_over("b", STANDARD_NODES[:20]), aggregate_slice=5)
    third = split_into_units(batch_over("c", STANDARD_NODES[:20]), aggregate_slice=3)
    assert [u.marker_id for u in first] == [u.marker_id for u in split_into_units(batch_over("a", STANDARD_NODES[:20]))]
    plans = plan_transactions(first + second + third, with_markers=False, slices=8)
    assert sorted((p.aggregate_slice, len(p.units)) for p in plans) == sorted(
        [(3, len(first) + len(third)), (5, len(second))]
    )
    for plan in plans:
        assert {unit.aggregate_slice for unit in plan.units} == {plan.aggregate_slice}
        assert plan.client_request_token == client_request_token(plan.marker_ids)
    by_slice = {p.aggregate_slice: p for p in plans}
    assert by_slice[3].node_deltas[STANDARD_NODES[0]] == NodeDelta(Decimal("1.0"), 2)  # a and c summed


def test_with_markers_every_item_of_an_invocation_is_planned_together_in_the_slice_its_token_names() -> None:
    """Mode `crt+marker`: items of many StateTable shards (their own slices 0 to 9) share their node
    updates exactly as items of one shard do, and each transaction writes `transaction_slice` of
    its token: the same transactions, tokens and node updates whatever the items' slices."""
    batches = standard_invocation(20)
    spread = [u for i, b in enumerate(batches) for u in split_into_units(b, aggregate_slice=i % 10)]
    plans = plan_transactions(spread, with_markers=True, slices=128)
    alike = plan_transactions(units_of(batches), with_markers=True, slices=128)
    assert [(p.client_request_token, p.node_deltas, p.marker_ids) for p in plans] == [
        (p.client_request_token, p.node_deltas, p.marker_ids) for p in alike
    ]
    assert len(plans) == NODE_GROUPS, "one transaction per node group, not one per item slice"
    for plan in plans:
        assert plan.aggregate_slice == transaction_slice(plan.client_request_token, 128)
        assert plan.client_request_token == client_request_token(plan.marker_ids, 128)
    writes = Counter(key for plan in plans for key in plan.node_deltas)
    assert set(writes.values()) == {1}


def test_over_several_slices_the_token_names_the_slice_count_and_over_one_it_is_the_marker_ids() -> None:
    """Over one slice a transaction of the same units is the request every release sent (slice 0):
    the same token. Over several it writes the slice its token names, so a transaction of the same
    units under another count, or formed by a release that sliced by delta item, is another request:
    another token, and the markers decide, never a token refused as reused with other parameters."""
    ids = ["a/0of2/0", "b/0of2/0"]
    assert client_request_token(ids, 1) == client_request_token(ids)
    tokens = {client_request_token(ids, slices) for slices in (1, 2, 3, 128)}
    assert len(tokens) == 4 and all(len(token) == 36 for token in tokens)
    units = units_of(standard_invocation(3))
    for plan in plan_transactions(units, with_markers=True, slices=1):
        assert plan.client_request_token == client_request_token(plan.marker_ids)
    for slices in (2, 128):
        for plan in plan_transactions(units, with_markers=True, slices=slices):
            assert plan.client_request_token == client_request_token(plan.marker_ids, slices)
    for plan in plan_transactions(units, with_markers=False, slices=128):
        assert plan.client_request_token == client_request_token(plan.marker_ids), "crt: as every release"


def test_the_transaction_slice_is_a_pure_function_of_the_token_and_spreads_evenly() -> None:
    tokens = [client_request_token([f"batch-{i}/0of2/0"]) for i in range(8000)]
    assert [transaction_slice(t, 16) for t in tokens] == [transaction_slice(t, 16) for t in tokens]
    counts = Counter(transaction_slice(t, 16) for t in tokens)
    assert set(counts) == set(range(16)) and max(counts.values()) < 1.2 * 8000 / 16
    assert {transaction_slice(t, 1) for t in tokens} == {0}
    for bad in (0, MAX_SLICES + 1):
        with pytest.raises(ValueError, match="slices must be between"):
            transaction_slice(tokens[0], bad)


def test_with_markers_at_one_slice_every_transaction_is_the_one_earlier_releases_sent() -> None:
    """At one slice every item was in slice 0, so earlier releases planned an invocation's units all
    together too: the same packing, slice 0, and the token of the marker ids, whatever slice the
    units carry. A stack upgraded in place at one slice resends identical requests."""
    units = units_of(standard_invocation(60))
    plans = plan_transactions(units, with_markers=True, slices=1)
    assert len(plans) > NODE_GROUPS, "the premise: groups too large for one transaction each"
    assert {p.aggregate_slice for p in plans} == {0}
    assert all(p.client_request_token == client_request_token(p.marker_ids) for p in plans)
    elsewhere = [replace(u, aggregate_slice=7) for u in units]
    assert plan_transactions(elsewhere, with_markers=True, slices=1) == [
        replace(p, units=tuple(replace(u, aggregate_slice=7) for u in p.units)) for p in plans
    ]


@settings(max_examples=60, deadline=None)
@given(
    node_sets=st.lists(st.lists(st.sampled_from(STANDARD_NODES), max_size=60, unique=True), min_size=1, max_size=30),
    item_slices=st.lists(st.integers(0, 9), min_size=30, max_size=30),
    slices=st.integers(1, 300),
    with_markers=st.booleans(),
)
def test_any_items_in_any_slices_plan_every_unit_once_within_the_action_limit(
    node_sets: list[list[str]], item_slices: list[int], slices: int, with_markers: bool
) -> None:
    """Whatever items, whatever their slices: every unit planned once, each transaction within 100
    actions and in one slice below the count, the node updates summing to the items' deltas."""
    batches = [batch_over(f"h{i}", nodes, records=i + 1) for i, nodes in enumerate(node_sets)]
    units = [u for i, b in enumerate(batches) for u in split_into_units(b, aggregate_slice=item_slices[i])]
    plans = plan_transactions(units, with_markers, slices)
    assert sorted(u.marker_id for p in plans for u in p.units) == sorted(u.marker_id for u in units)
    assert all(action_count(p, with_markers) <= MAX_TRANSACTION_ACTIONS for p in plans)
    assert sum(p.record_count for p in plans) == sum(b.record_count for b in batches)
    totals: Counter[str] = Counter()
    for plan in plans:
        assert 0 <= plan.aggregate_slice < (slices if with_markers else 10)
        for key, delta in plan.node_deltas.items():
            totals[key] += delta.trade_count
    assert +totals == +Counter(key for b in batches for key in b.deltas)
