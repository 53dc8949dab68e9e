"""Transaction planning: action budget, deterministic splitting and tokens."""

from decimal import Decimal

from aggregation.deltas import NodeDelta
from aggregation.transactions import (
    MAX_TRANSACTION_ACTIONS,
    DeltaBatch,
    client_request_token,
    next_transaction,
    split_into_units,
)


def batch(batch_hash: str, node_count: int, records: int = 3) -> DeltaBatch:
    deltas = {f"N{i:04d}": NodeDelta(Decimal(i), 1) for i in range(node_count)}
    return DeltaBatch(batch_hash, deltas, records, (Decimal(1), Decimal(2)))


def test_small_batch_is_one_unit_carrying_its_record_count() -> None:
    units = split_into_units(batch("h", 5))
    assert [u.marker_id for u in units] == ["h/0"]
    assert units[0].record_count == 3


def test_large_batch_splits_deterministically_counting_records_once() -> None:
    units = split_into_units(batch("h", 250))
    assert [len(u.deltas) for u in units] == [98, 98, 54]
    assert [u.record_count for u in units] == [3, 0, 0]
    assert units == split_into_units(batch("h", 250))
    all_keys = [key for u in units for key, _ in u.deltas]
    assert all_keys == sorted(all_keys) and len(set(all_keys)) == 250


def test_empty_batch_still_has_a_unit_so_its_messages_are_counted() -> None:
    units = split_into_units(batch("h", 0))
    assert len(units) == 1 and units[0].deltas == ()


def test_every_planned_transaction_fits_in_100_actions() -> None:
    pending = [u for i in range(12) for u in split_into_units(batch(f"b{i}", 40 + i * 7))]
    while pending:
        plan = next_transaction(pending, with_markers=True)
        assert len(plan.node_deltas) + len(plan.units) + 1 <= MAX_TRANSACTION_ACTIONS
        pending = pending[len(plan.units) :]


def test_units_sharing_nodes_are_summed_into_one_action_per_node() -> None:
    first = split_into_units(DeltaBatch("a", {"X": NodeDelta(Decimal("0.1"), 1)}, 1, ()))
    second = split_into_units(DeltaBatch("b", {"X": NodeDelta(Decimal("0.2"), 1)}, 1, ()))
    plan = next_transaction(first + second, with_markers=True)
    assert plan.node_deltas == {"X": NodeDelta(Decimal("0.3"), 2)}
    assert plan.marker_ids == ("a/0", "b/0")
    assert plan.record_count == 2


def test_tokens_are_36_characters_and_name_exactly_the_units() -> None:
    token = client_request_token(["a/0", "b/0"])
    assert len(token) == 36
    assert token == client_request_token(["a/0", "b/0"])
    assert token != client_request_token(["a/0"])
    assert next_transaction(split_into_units(batch("a", 3)), with_markers=True).client_request_token == (
        client_request_token(["a/0"])
    )
