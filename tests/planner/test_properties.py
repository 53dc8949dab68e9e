"""Promises of the planner's steady-state and conflict arithmetic, over all inputs (Hypothesis)."""

import math

from hypothesis import given
from hypothesis import strategies as st

from planner.inputs import Settings, Workload, steady_batch
from planner.model import plan_capacity
from planner.reduce import MAX_TRANSACTION_ATTEMPTS, ReduceSlicing, transaction_attempts

rates = st.floats(min_value=0.1, max_value=10_000.0, allow_nan=False)


@given(
    batch_size=st.integers(min_value=1, max_value=10_000),
    per_lane=rates,
    poll=st.sampled_from((0.2, 0.25, 1.0, 5.0)),
    fixed=st.floats(min_value=0.0, max_value=5.0),
    per_record=st.floats(min_value=0.0, max_value=0.05),
)
def test_a_steady_batch_is_within_the_cap_and_what_the_lane_gathered(
    batch_size: int, per_lane: float, poll: float, fixed: float, per_record: float
) -> None:
    def seconds(batch: float) -> float:
        return fixed + per_record * batch

    batch = steady_batch(batch_size, per_lane, poll, seconds)
    assert 1.0 <= batch <= batch_size
    gathered = per_lane * max(poll, seconds(batch))
    # Either the cap, at least one record, or (near enough) what arrived over one cycle.
    assert batch in {batch_size, 1.0} or math.isclose(batch, gathered, rel_tol=0.01)


@given(
    lanes=st.integers(min_value=1, max_value=200),
    slices=st.floats(min_value=1.0, max_value=128.0),
    transactions=st.floats(min_value=0.0, max_value=10_000.0),
    more=st.floats(min_value=0.0, max_value=1_000.0),
)
def test_conflicts_grow_with_the_load_and_stay_within_the_handlers_tries(
    lanes: int, slices: float, transactions: float, more: float
) -> None:
    slicing = ReduceSlicing(delta_stream_shards=1, lanes=lanes, slices_per_lane=min(slices, 4.0), slices_in_use=slices)
    attempts = transaction_attempts(slicing, transactions, 0.025)
    assert 1.0 <= attempts <= MAX_TRANSACTION_ATTEMPTS
    assert transaction_attempts(slicing, transactions + more, 0.025) >= attempts
    alone = ReduceSlicing(delta_stream_shards=1, lanes=1, slices_per_lane=1.0, slices_in_use=1.0)
    assert transaction_attempts(alone, transactions, 0.025) == 1.0


@given(rate=st.floats(min_value=100.0, max_value=300_000.0), slices=st.sampled_from((1, 4, 16, 128)))
def test_every_plan_adds_its_components_and_its_latency_covers_the_invocations(rate: float, slices: int) -> None:
    settings = Settings(state_parallelization_factor=10, reduce_parallelization_factor=10, aggregate_slices=slices)
    ours = plan_capacity(Workload(rate=rate), settings).ours
    assert ours.monthly_usd == sum(c.monthly_usd for c in ours.components)
    path = [t for t in ours.timings if t.on_latency_path]
    assert [t.stage for t in path] == ["state", "map", "reduce"]
    assert ours.latency_p50_seconds >= sum(t.invocation_seconds for t in path)
    assert ours.aggregate_write_units_per_second >= ours.reduce_transactions_per_second * 2
