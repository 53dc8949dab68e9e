"""Load profiles: spiky keeps every capacity on-demand; steady takes each table's and the stream's cheaper mode."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.ingest import stream_modes, suggested_provisioned_shards
from planner.inputs import ServiceTimes, Settings, StreamCapacity, TableCapacity, Workload
from planner.load_profile import (
    EVERY,
    KEEP,
    MAXIMUM_HEADROOM,
    CapacityChoice,
    cheaper_stream,
    cheaper_table_capacity,
    monthly_usd_with_cheaper_tables,
    steady_break_even_share,
    steady_table_capacity,
    table_capacities,
    with_cheaper_tables,
)
from planner.model import OURS, plan_design
from planner.plan import DesignPlan
from planner.prices import load_price_table
from planner.scale_out import (
    AUTO_LATENCY_LIMIT_SECONDS,
    EVERY_SETTING_AUTO,
    cheapest_settings,
    describe_choice,
    settings_for_rate,
)
from planner.tables import PIPELINE_TABLES, break_even_utilization, table_monthly_usd

PRICES = load_price_table()
TIMES = ServiceTimes()


@functools.cache
def auto(rate: float, capacity: CapacityChoice) -> Settings:
    """Every setting cdk.json leaves `auto`, chosen for `rate`, with `capacity`'s modes the planner's too."""
    return settings_for_rate(
        Workload(rate=rate),
        Settings(),
        TIMES,
        PRICES,
        auto=EVERY_SETTING_AUTO,
        capacity=capacity,
    )


def plan(rate: float, chosen: Settings) -> DesignPlan:
    return plan_design(Workload(rate=rate), chosen, TIMES, PRICES, OURS)


def per_million(rate: float, monthly_usd: float) -> float:
    return monthly_usd / (PRICES.seconds_per_month * rate / 1e6)


def assert_each_mode_is_the_cheaper(chosen: Settings, steady: DesignPlan, workload: Workload) -> None:
    """Each table in the cheaper of its two modes at the plan's load and utilisation target; the stream
    provisioned only where that costs less (on-demand may be kept for the latency)."""
    for table in PIPELINE_TABLES:
        on_demand, provisioned = table_capacities(steady, table, TableCapacity())
        costs = {
            "on-demand": table_monthly_usd(steady, table, on_demand, PRICES),
            "provisioned": table_monthly_usd(steady, table, provisioned, PRICES),
        }
        capacity = chosen.table_capacity(table)
        assert costs[capacity.mode] == min(costs.values()), (table, costs)
        if capacity.provisioned:
            assert capacity == provisioned, "the minimums the plan sizes"
    if chosen.stream.provisioned:
        modes = stream_modes(workload, chosen, PRICES)
        assert modes.provisioned_usd < modes.on_demand_usd
        assert chosen.stream.shard_count == suggested_provisioned_shards(workload)


@settings(max_examples=12)
@given(rate=st.integers(min_value=1, max_value=300_000))
def test_for_any_rate_auto_steady_puts_each_capacity_in_its_cheaper_mode_and_never_costs_more(rate: int) -> None:
    """The invariant of `auto` with a steady profile: every table's mode is the cheaper of the two at the
    plan's utilisation target, and the plan costs no more than the same settings all on-demand."""
    workload = Workload(rate=rate)
    chosen = auto(rate, EVERY)
    steady = plan(rate, chosen)
    assert_each_mode_is_the_cheaper(chosen, steady, workload)
    all_on_demand = replace(
        chosen,
        stream=StreamCapacity(),
        state_table=TableCapacity(),
        delta_table=TableCapacity(),
        aggregate_table=TableCapacity(),
    )
    assert steady.monthly_usd <= plan(rate, all_on_demand).monthly_usd + 1e-6
    assert not [flag for flag in steady.flags if "provisioned maximum" in flag.problem]


@settings(max_examples=40)
@given(
    rate=st.floats(min_value=0.01, max_value=1_000_000.0),
    map_batch=st.sampled_from((1, 100, 1000)),
    slices=st.sampled_from((1, 16, 128)),
)
def test_for_any_plan_the_cheaper_tables_are_what_the_search_ranks_by(rate: float, map_batch: int, slices: int) -> None:
    """`monthly_usd_with_cheaper_tables` is the plan of `with_cheaper_tables`: what the searches rank a
    candidate by is what it costs once deployed; and each table's mode is the cheaper at its load."""
    workload = Workload(rate=rate)
    base = Settings(map_batch_size=map_batch, aggregate_slices=slices, reduce_parallelization_factor=10)
    before = plan_design(workload, base, TIMES, PRICES, OURS, suggest=False)
    tables = EVERY.tables
    chosen = with_cheaper_tables(base, before, PRICES, tables)
    after = plan_design(workload, chosen, TIMES, PRICES, OURS, suggest=False)
    assert after.monthly_usd == pytest.approx(monthly_usd_with_cheaper_tables(before, base, PRICES, tables))
    assert after.monthly_usd <= before.monthly_usd + 1e-6
    assert_each_mode_is_the_cheaper(chosen, after, workload)
    assert not [flag for flag in after.flags if "provisioned maximum" in flag.problem]


def test_the_minimums_carry_the_load_at_the_target_and_the_maximums_leave_room_to_double() -> None:
    capacity = steady_table_capacity(70_000.0, 700.0, TableCapacity())
    assert capacity.mode == "provisioned" and capacity.target_utilization_percent == 70
    assert (capacity.min_write_capacity, capacity.min_read_capacity) == (100_000, 1_000)
    assert (capacity.max_write_capacity, capacity.max_read_capacity) == (200_000, 2_000)
    assert capacity.max_write_capacity == MAXIMUM_HEADROOM * capacity.min_write_capacity
    small = steady_table_capacity(7.0, 0.0, TableCapacity())
    assert (small.min_write_capacity, small.min_read_capacity) == (10, 1), "exactly at the target, no extra unit"
    assert (small.max_write_capacity, small.max_read_capacity) == (40_000, 1000), "the defaults when larger"


def test_a_table_whose_load_fills_one_unit_below_break_even_stays_on_demand() -> None:
    """Capacity is bought in whole units: a load of a tenth of a write unit a second would hold one
    unit at 10 % utilisation, under the 29 % break-even, so on-demand is cheaper."""
    trickle = DesignPlan(design="test", state_write_units_per_second=0.1)
    assert break_even_utilization(PRICES) > 0.1
    assert cheaper_table_capacity(trickle, "StateTable", TableCapacity(), PRICES) == TableCapacity()
    steady = DesignPlan(design="test", state_write_units_per_second=1_000.0)
    assert cheaper_table_capacity(steady, "StateTable", TableCapacity(), PRICES).provisioned


def test_free_on_demand_writes_keep_every_table_on_demand() -> None:
    free = replace(PRICES, dynamodb_write_unit=0.0, dynamodb_read_unit=0.0)
    chosen = with_cheaper_tables(Settings(), plan(50_000, auto(50_000, KEEP)), free, EVERY.tables)
    assert all(not chosen.table_capacity(table).provisioned for table in PIPELINE_TABLES)


def test_the_stream_is_provisioned_only_where_shard_hours_cost_less() -> None:
    assert cheaper_stream(Workload(rate=50_000), Settings(), PRICES) == StreamCapacity("provisioned", 72)
    dear_shards = replace(PRICES, kinesis_shard_hour=10.0)
    assert cheaper_stream(Workload(rate=50_000), Settings(), dear_shards) == StreamCapacity()


def test_spiky_keeps_every_capacity_as_set() -> None:
    for rate in (400, 50_000):
        chosen = auto(rate, KEEP)
        assert chosen.stream == StreamCapacity()
        assert all(chosen.table_capacity(table) == TableCapacity() for table in PIPELINE_TABLES)


def test_at_50000_the_steady_plan_costs_under_35_cents_a_million_messages_within_1_s() -> None:
    """Issue 37: the cheapest steady-load plan `--scale-out` prints at 50,000 msg/s, p50 <= 1 s (model)."""
    choice = cheapest_settings(
        Workload(rate=50_000), Settings(), TIMES, PRICES, latency_limit_seconds=1.0, capacity=EVERY
    )
    assert choice is not None and not choice.plan.stalls
    assert choice.plan.latency_p50_seconds <= 1.0
    assert per_million(50_000, choice.plan.monthly_usd) <= 0.35
    spiky = cheapest_settings(Workload(rate=50_000), Settings(), TIMES, PRICES, latency_limit_seconds=1.0)
    assert spiky is not None and choice.plan.monthly_usd < spiky.plan.monthly_usd / 2
    assert describe_choice(Settings(), choice.settings)[0] == "streamMode provisioned with 72 shards"


def test_at_50000_auto_steady_is_less_than_half_the_spiky_plan_and_within_the_p50_bound() -> None:
    spiky, steady = plan(50_000, auto(50_000, KEEP)), plan(50_000, auto(50_000, EVERY))
    assert steady.monthly_usd < spiky.monthly_usd / 2
    assert steady.latency_p50_seconds <= AUTO_LATENCY_LIMIT_SECONDS and not steady.stalls


def test_the_break_even_share_is_where_the_two_stacks_cost_the_same() -> None:
    """Deployed for 50,000 msg/s, the steady stack costs less above the share of that rate, the spiky one below."""
    rate = 50_000.0
    spiky, steady = auto(rate, KEEP), auto(rate, EVERY)

    def monthly_usd(chosen: Settings, load: float) -> float:
        return plan_design(Workload(rate=load), chosen, TIMES, PRICES, OURS, suggest=False).monthly_usd

    share = steady_break_even_share(monthly_usd, spiky, steady, rate=rate)
    assert 0.2 < share < 0.7, "about the break-even utilisation over the 70 % target"
    assert monthly_usd(steady, rate * (share + 0.02)) < monthly_usd(spiky, rate * (share + 0.02))
    assert monthly_usd(steady, rate * (share - 0.02)) > monthly_usd(spiky, rate * (share - 0.02))
    assert steady_break_even_share(monthly_usd, spiky, spiky, rate=rate) == 1.0, "never cheaper than itself"


def test_provisioned_tables_over_the_account_quota_ask_for_an_increase_without_stopping_synthesis() -> None:
    """At 50,000 msg/s the steady tables hold some 83,600 write capacity units together, over the 80,000 an
    account may provision in a region by default: a warning, as the per-table quota's are."""
    steady = plan(50_000, auto(50_000, EVERY))
    (flag,) = [flag for flag in steady.flags if "default account quota" in flag.problem]
    assert (
        not flag.blocking and flag.change == "request an account-level write capacity quota increase before deploying"
    )
    state = [flag for flag in steady.flags if flag.problem.startswith("StateTable needs")]
    assert state and all(not flag.blocking and "refused at deploy" in flag.change for flag in state)
    spiky = plan(50_000, auto(50_000, KEEP))
    assert not [flag for flag in spiky.flags if "default account quota" in flag.problem]
