"""The capacity model's arithmetic, limits, flags and the two capacity modes' prices."""

import json
import math
import random
from dataclasses import replace
from decimal import Decimal

import pytest

from aggregation.deltas import TradeState, sum_state_changes
from aggregation.item_size import MAX_ITEM_BYTES
from aggregation.stream_positions import COVERAGE_QUERY_PAGE_ITEMS
from aggregation.transactions import DeltaBatch, plan_transactions, split_into_units
from planner.ingest import (
    kinesis_shards,
    on_demand_stream_monthly_usd,
    provisioned_stream_monthly_usd,
    suggested_provisioned_shards,
)
from planner.inputs import (
    ServiceTimes,
    Settings,
    StreamCapacity,
    TableCapacity,
    Workload,
    cpu_slowdown,
    distinct_nodes,
    lambda_monthly_usd,
    steady_batch,
)
from planner.map import delta_item_bytes, write_units_of
from planner.model import OURS, plan_capacity, reducers_that_keep_up
from planner.prices import DEFAULT_PRICE_TABLE, load_price_table
from planner.reduce import (
    BUSY_LIMIT,
    MAX_TRANSACTION_ATTEMPTS,
    ReduceSlicing,
    batches_in_one_transaction_per_group,
    transaction_attempts,
    transactions_per_delta_batch,
)
from planner.state import lambda_state_rate
from planner.tables import (
    break_even_utilization,
    provisioned_read_capacity,
    provisioned_write_capacity,
    writes_monthly_usd,
)
from reduce_function.handler import CONFLICT_ATTEMPTS

PRICES = load_price_table()
STANDARD = Workload(rate=50_000)


def test_the_price_table_is_dated_sourced_and_says_to_check_it() -> None:
    raw = json.loads(DEFAULT_PRICE_TABLE.read_text())
    assert raw["as_of"] and "check" in raw["notice"].lower() and "list price" in raw["notice"].lower()
    assert all(section["source"].startswith("https://") for section in (raw["dynamodb"], raw["kinesis"], raw["lambda"]))
    assert raw["dynamodb"]["provisioned_source"].startswith("https://aws.amazon.com/dynamodb/pricing/provisioned/")
    assert raw["kinesis"]["provisioned_source"].startswith("https://aws.amazon.com/kinesis/data-streams/pricing/")
    assert PRICES.kinesis_shard_hour == pytest.approx(0.015)
    assert PRICES.kinesis_put_payload_unit == pytest.approx(0.014e-6)
    assert PRICES.kinesis_put_payload_unit_bytes == 25 * 1024
    assert PRICES.dynamodb_write_unit == pytest.approx(0.625e-6)
    assert PRICES.dynamodb_read_unit == pytest.approx(0.125e-6)
    assert PRICES.dynamodb_write_capacity_unit_hour == pytest.approx(0.00065)
    assert PRICES.dynamodb_read_capacity_unit_hour == pytest.approx(0.00013)
    assert PRICES.seconds_per_month == 730 * 3600


def test_distinct_nodes_grow_from_none_to_every_node_of_the_hierarchy() -> None:
    assert distinct_nodes(STANDARD, 0) == 0
    assert distinct_nodes(STANDARD, 1) == pytest.approx(3 * STANDARD.paths_per_change, rel=0.05)
    assert distinct_nodes(STANDARD, 1_000_000) == pytest.approx(5 + 25 + 75)


def test_duplicates_and_stale_versions_do_not_change_state() -> None:
    assert STANDARD.applied_share == pytest.approx(0.85)
    assert STANDARD.nodes_per_level == (5, 25, 75)


def test_kinesis_shards_follow_the_tighter_of_the_record_and_byte_limits() -> None:
    assert kinesis_shards(Workload(rate=50_000, record_bytes=300)) == 50
    assert kinesis_shards(Workload(rate=2_000, record_bytes=1024)) == 2
    assert kinesis_shards(Workload(rate=1_000, record_bytes=4096)) == 4


def test_kinesis_bills_each_record_rounded_up_to_a_kilobyte() -> None:
    workload = Workload(rate=1_000, record_bytes=300)
    seconds = PRICES.seconds_per_month
    expected = (
        730 * 0.04
        + 1_000 * 1024 * seconds / 1024**3 * 0.08  # 300 B billed as 1 KB
        + 1_000 * 300 * seconds / 1024**3 * 0.04
    )
    assert on_demand_stream_monthly_usd(workload, PRICES) == pytest.approx(expected)


def test_provisioned_kinesis_bills_shard_hours_and_25_kb_put_payload_units() -> None:
    seconds = PRICES.seconds_per_month
    small, large = Workload(rate=1_000, record_bytes=300), Workload(rate=1_000, record_bytes=30_000)
    assert provisioned_stream_monthly_usd(small, 2, PRICES) == pytest.approx(
        2 * 0.015 * 730 + 1_000 * seconds * 0.014e-6
    )
    # A 30,000-byte record is two 25 KB payload units.
    assert provisioned_stream_monthly_usd(large, 2, PRICES) == pytest.approx(
        2 * 0.015 * 730 + 2 * 1_000 * seconds * 0.014e-6
    )


def test_at_50000_msg_s_provisioned_kinesis_is_priced_beside_on_demand_and_costs_less() -> None:
    plan = plan_capacity(STANDARD, prices=PRICES)
    assert plan.stream.provisioned_shards == suggested_provisioned_shards(STANDARD) == math.ceil(50 / 0.7)
    assert plan.stream.on_demand_usd == pytest.approx(on_demand_stream_monthly_usd(STANDARD, PRICES))
    assert plan.stream.cheaper == "provisioned" and plan.stream.provisioned_usd < plan.stream.on_demand_usd / 3
    (kinesis,) = [c for c in plan.ours.components if c.name.startswith("Kinesis")]
    assert kinesis.name == "Kinesis (on-demand)" and kinesis.monthly_usd == plan.stream.on_demand_usd


def test_a_provisioned_stream_is_billed_by_its_shards_and_flagged_when_they_are_too_few() -> None:
    enough = plan_capacity(STANDARD, Settings(stream=StreamCapacity("provisioned", 150)), prices=PRICES)
    (kinesis,) = [c for c in enough.ours.components if c.name.startswith("Kinesis")]
    assert kinesis.name == "Kinesis (provisioned)"
    assert kinesis.monthly_usd == pytest.approx(provisioned_stream_monthly_usd(STANDARD, 150, PRICES))
    assert enough.stream.provisioned_shards == 150 and enough.ours.kinesis_shards == 150
    assert not [f for f in enough.ours.flags if "Kinesis" in f.problem]
    # More shards than the writes need spread them: each state instance's shard brings less.
    assert enough.ours.state_parallelization_needed == 1
    few = plan_capacity(STANDARD, Settings(stream=StreamCapacity("provisioned", 40)), prices=PRICES)
    (flag,) = [f for f in few.ours.stalls if "Kinesis" in f.problem]
    assert flag.change == f"raise streamMode shardCount to {suggested_provisioned_shards(STANDARD)}"


def test_lambda_cost_is_gb_seconds_plus_requests() -> None:
    cost = lambda_monthly_usd(executions=2, memory_mb=512, invocations_per_second=10, prices=PRICES)
    seconds = PRICES.seconds_per_month
    assert cost == pytest.approx(1 * seconds * 0.0000133334 + 10 * seconds * 0.2e-6)


def test_few_nodes_put_a_whole_invocation_in_one_transaction() -> None:
    flat = Workload(rate=1, fan_out=(2,), modifications_pct=0)
    per_batch, actions = transactions_per_delta_batch(flat, changes=100, batches_per_invocation=10, markers=True)
    assert per_batch == pytest.approx(1 / 10)  # both groups: 2 nodes + 2 x 10 markers + #stats
    assert actions == pytest.approx(23)


def test_each_node_group_of_the_standard_hierarchy_takes_one_transaction() -> None:
    per_batch, actions = transactions_per_delta_batch(STANDARD, changes=10_000, batches_per_invocation=10, markers=True)
    assert per_batch == pytest.approx(2 / 10)  # 52.5 nodes + 10 markers + #stats per group
    assert actions == pytest.approx(105 / 2 + 10 + 1)


def test_token_only_mode_writes_no_markers() -> None:
    per_batch, actions = transactions_per_delta_batch(
        STANDARD, changes=10_000, batches_per_invocation=10, markers=False
    )
    assert per_batch == pytest.approx(2 / 10)  # 105 nodes + #stats exceed 100: one transaction per group
    assert actions == pytest.approx(105 / 2 + 1)


def test_50000_messages_per_second_with_the_defaults_in_one_slice() -> None:
    plan = plan_capacity(STANDARD, Settings(aggregate_slices=1), prices=PRICES)
    lambda_rate = lambda_state_rate(ServiceTimes(), Settings())
    assert lambda_rate < ServiceTimes().state_messages_per_second  # 512 MB is about 0.29 vCPU
    assert plan.ours.state_executions == pytest.approx(50_000 / lambda_rate)
    assert plan.original.state_executions == pytest.approx(500)  # the original's ~500 instances
    assert plan.ours.state_write_units_per_second == 50_000  # 300 B + overhead: 1 WRU each
    # 425 full delta batches of 100 changes a second; a reduce invocation of 10 of them
    # commits one transaction per node group (2): 85 a second, more than the 3 reducers (one
    # per DeltaTable stream shard, about 1,000 WCU/s each) commit at 25 ms each plus their CPU.
    assert plan.ours.delta_batches_per_second == pytest.approx(425)
    assert plan.ours.reduce_transactions_per_second == pytest.approx(425 / 10 * 2)
    assert plan.ours.delta_stream_shards == math.ceil(plan.ours.delta_write_units_per_second / 1000) == 3
    assert plan.ours.reduce_lanes == 3
    assert plan.ours.reduce_busy_fraction == pytest.approx(plan.ours.reduce_executions / 3)
    assert plan.ours.reduce_busy_fraction > 1
    assert plan.ours.hottest_item_write_units_per_second == pytest.approx(2 * 85)
    changes = " ".join(flag.change for flag in plan.ours.flags)
    assert f"stateParallelizationFactor to {math.ceil(1000 / lambda_rate)}" in changes
    # In one slice more reducers conflict on `#stats` and the roots (`transaction_attempts`): two
    # per shard are not enough, so fuller delta batches come with them.
    assert "set reduceParallelizationFactor to" in changes and "set mapBatchSize to" in changes
    assert "quota increase" in changes  # StateTable at 50,000 WRU/s is over the 40,000 default
    quota = next(flag for flag in plan.ours.flags if "quota" in flag.change)
    assert not quota.blocking and quota not in plan.ours.stalls, "a quota is raised by asking, not by a setting"
    original_changes = " ".join(flag.change for flag in plan.original.flags)
    assert "stateParallelizationFactor to 10" in original_changes
    assert plan.ours.monthly_usd == pytest.approx(sum(c.monthly_usd for c in plan.ours.components))


def test_more_reducers_per_shard_come_first_then_larger_map_batches() -> None:
    found = reducers_that_keep_up(STANDARD, Settings(aggregate_slices=16), ServiceTimes(), PRICES, OURS)
    assert found is not None and found.reduce_parallelization_factor > 1
    assert (found.map_batch_size, found.map_batching_window_seconds) == (100, 0)
    at_ten = Settings(reduce_parallelization_factor=10, reduce_batch_size=1)  # too busy even with 10 lanes
    assert plan_capacity(STANDARD, at_ten, prices=PRICES).ours.reduce_busy_fraction > BUSY_LIMIT
    batched = reducers_that_keep_up(STANDARD, at_ten, ServiceTimes(), PRICES, OURS)
    assert batched is not None and batched.map_batch_size > 100
    for settings in (found, batched):
        plan = plan_capacity(STANDARD, settings, prices=PRICES)
        assert plan.ours.reduce_busy_fraction <= BUSY_LIMIT
        assert not [f for f in plan.ours.flags if "reduce" in f.problem]


def test_cpu_slows_down_with_less_memory() -> None:
    assert cpu_slowdown(1769) == 1.0
    assert cpu_slowdown(3538) == 1.0  # more than one vCPU does not help one thread
    assert cpu_slowdown(256) == pytest.approx(1769 / 256)


def test_without_a_batching_window_a_stream_shard_fills_only_a_quarter_second_of_records() -> None:
    plan = plan_capacity(STANDARD, Settings(map_batch_size=10_000), prices=PRICES)
    per_shard_per_second = 50_000 * 0.85 / 50
    assert plan.ours.effective_map_batch == pytest.approx(per_shard_per_second / 4)


def test_an_item_over_1000_wcu_per_second_is_flagged() -> None:
    fast = replace(
        ServiceTimes(), transaction_round_trip_ms=0.1, reduce_cpu_us_per_action=0.01, reduce_cpu_us_per_message=0
    )
    # The root nodes take one write per node-group transaction: 2 per reduce invocation.
    plan = plan_capacity(Workload(rate=400_000), Settings(aggregate_slices=1), fast, PRICES)
    assert plan.ours.hottest_item_write_units_per_second > 1000
    flags = [f for f in plan.ours.flags if "hottest" in f.problem]
    assert flags and "raise aggregateSlices to" in flags[0].change and "mapBatchSize" in flags[0].change
    suggested = int(flags[0].change.split("raise aggregateSlices to ")[1].split(",")[0])
    sliced = plan_capacity(Workload(rate=400_000), Settings(aggregate_slices=suggested), fast, PRICES)
    assert sliced.ours.hottest_item_write_units_per_second <= 1000
    assert not [f for f in sliced.ours.flags if "hottest" in f.problem]


def test_a_reduce_batch_over_100_nodes_is_flagged_for_the_original() -> None:
    plan = plan_capacity(STANDARD, prices=PRICES)
    assert any("more than one transaction holds" in f.problem for f in plan.original.flags)


def test_in_batch_selection_lowers_our_state_writes_only() -> None:
    plan = plan_capacity(replace(STANDARD, state_writes_per_message=0.9), prices=PRICES)
    assert plan.ours.state_write_units_per_second == pytest.approx(45_000)
    assert plan.original.state_write_units_per_second == 50_000


def test_a_delta_item_over_400_kb_is_split_by_ours_and_flagged_for_the_original() -> None:
    large_batches = Settings(map_batch_size=10_000, map_batching_window_seconds=300)
    plan = plan_capacity(STANDARD, large_batches, prices=PRICES)
    assert plan.ours.effective_map_batch == 10_000  # fits in the item limit: 10,000 timestamps are ~100 KB
    assert plan.ours.delta_items_per_batch == 1
    huge = replace(STANDARD, fan_out=(30, 30, 30))  # 27,930 nodes
    whole_item = delta_item_bytes(huge, 10_000, with_timestamps=True)
    assert whole_item > MAX_ITEM_BYTES
    split = plan_capacity(huge, large_batches, prices=PRICES)
    assert not [f for f in split.ours.flags if "item limit" in f.problem], "map writes it as several items"
    assert split.ours.delta_items_per_batch == 2  # halved once, as map's `delta_items` does
    half = delta_item_bytes(huge, 5_000, with_timestamps=True)
    assert half <= MAX_ITEM_BYTES
    expected_units = split.ours.delta_batches_per_second * 2 * write_units_of(half)
    assert split.ours.delta_write_units_per_second == pytest.approx(expected_units)
    # Billed by bytes: two halves cost about what the one item would (fewer bytes: nodes net per half).
    unsplit_units = split.ours.delta_batches_per_second * write_units_of(whole_item)
    assert 1.0 < split.ours.delta_write_units_per_second / unsplit_units < 1.5
    assert [f for f in split.original.flags if "item limit" in f.problem], "the original writes one item a batch"


def test_map_reads_a_page_of_previous_delta_items_before_each_write() -> None:
    settings = Settings(map_batch_size=2000, map_batching_window_seconds=2, state_parallelization_factor=3)
    plan = plan_capacity(STANDARD, settings, prices=PRICES)
    item = delta_item_bytes(STANDARD, plan.ours.effective_map_batch, with_timestamps=True)
    per_query = math.ceil(COVERAGE_QUERY_PAGE_ITEMS * item / 4096)  # strongly consistent: 1 unit per 4 KB
    assert plan.ours.delta_read_units_per_second == pytest.approx(plan.ours.delta_batches_per_second * per_query)
    assert plan.original.delta_read_units_per_second == 0, "the original writes without reading"
    reads = next(c for c in plan.ours.components if c.name == "DeltaTable reads")
    assert "RRU/s, on-demand" in reads.detail
    expected = plan.ours.delta_read_units_per_second * PRICES.seconds_per_month * 0.125e-6
    assert reads.monthly_usd == pytest.approx(expected)
    assert plan.ours.monthly_usd == pytest.approx(sum(c.monthly_usd for c in plan.ours.components))


def test_provisioned_reads_are_held_at_the_target_from_the_minimum_up() -> None:
    table = TableCapacity(mode="provisioned", min_read_capacity=50, max_read_capacity=100_000)
    assert provisioned_read_capacity(0, table) == 50
    assert provisioned_read_capacity(700, table) == pytest.approx(1000)
    plan = plan_capacity(STANDARD, Settings(map_batch_size=2000, map_batching_window_seconds=2, delta_table=table))
    reads = plan.ours.delta_read_units_per_second
    component = {c.name: c.monthly_usd for c in plan.ours.components}
    above_minimum = (reads / 0.7 - 50) * 0.00013 * 730  # the minimum is billed with the writes
    assert component["DeltaTable reads"] == pytest.approx(above_minimum)
    delta = plan.modes[1]
    assert delta.read_units_per_second == reads and delta.provisioned_read_capacity == pytest.approx(reads / 0.7)
    assert component["DeltaTable writes"] + component["DeltaTable reads"] == pytest.approx(delta.provisioned_usd)
    assert delta.on_demand_usd == pytest.approx(
        writes_monthly_usd(delta.write_units_per_second, PRICES) + reads * PRICES.seconds_per_month * 0.125e-6
    )


def test_a_provisioned_read_maximum_below_the_coverage_queries_cannot_keep_up() -> None:
    small = TableCapacity(mode="provisioned", max_read_capacity=100)
    plan = plan_capacity(STANDARD, Settings(map_batch_size=2000, map_batching_window_seconds=2, delta_table=small))
    (flag,) = [f for f in plan.ours.stalls if "provisioned maximum" in f.problem]
    reads = plan.ours.delta_read_units_per_second
    assert flag.problem == f"DeltaTable needs {reads:,.0f} RCU/s, over its provisioned maximum of 100"
    wanted = math.ceil(reads / 0.7)
    assert (
        flag.change == f"raise maxReadCapacity of deltaTableCapacity to {wanted:,} (the load at its target utilisation)"
    )


def test_a_map_shard_that_cannot_keep_up_is_flagged() -> None:
    slow = replace(ServiceTimes(), map_cpu_us_per_record=2000)
    plan = plan_capacity(STANDARD, Settings(), slow, PRICES)
    assert [f for f in plan.ours.flags if "map invocation takes" in f.problem]


def test_when_reducers_and_batching_are_not_enough_the_reduce_gets_more_memory() -> None:
    # 42,500 msg/s x 200 µs x 6.9 = 59 s/s at 256 MB: more than 3 shards x 10 reducers carry.
    heavy = replace(ServiceTimes(), reduce_cpu_us_per_message=200.0)
    found = reducers_that_keep_up(STANDARD, Settings(), heavy, PRICES, OURS)
    assert found is not None and found.reduce_memory_mb > 256
    flag = next(f for f in plan_capacity(STANDARD, Settings(), heavy, PRICES).ours.flags if "reduce" in f.problem)
    assert f"set reduceMemoryMb to {found.reduce_memory_mb}" in flag.change
    assert f"set reduceParallelizationFactor to {found.reduce_parallelization_factor}" in flag.change


def test_with_markers_slices_spread_the_hottest_item_and_cost_no_packing() -> None:
    """Issue 37: in `crt+marker` an invocation plans its delta batches together whatever their slices,
    and each transaction writes the slice its token names: 16 slices leave the transactions as they
    are, take a sixteenth each of `#stats` and the roots, and spread the three reducers' transactions,
    which conflict far less than in one slice."""
    one, sixteen = (plan_capacity(STANDARD, Settings(aggregate_slices=n), prices=PRICES).ours for n in (1, 16))
    assert one.slices_per_invocation == 1 and one.slices_in_use == 1
    assert sixteen.slices_in_use == 16
    per_invocation = sixteen.reduce_transactions_per_second / sixteen.delta_batches_per_second * 10
    assert sixteen.slices_per_invocation == pytest.approx(16 * (1 - (15 / 16) ** per_invocation))
    assert sixteen.reduce_transactions_per_second == pytest.approx(one.reduce_transactions_per_second)
    assert sixteen.hottest_item_write_units_per_second == pytest.approx(one.hottest_item_write_units_per_second / 16)
    assert sixteen.reduce_conflicts_per_second < one.reduce_conflicts_per_second / 10
    assert sixteen.aggregate_write_units_per_second < one.aggregate_write_units_per_second
    quiet = plan_capacity(Workload(rate=400), Settings(aggregate_slices=16), prices=PRICES).ours
    assert (quiet.state_stream_shards, quiet.slices_in_use, quiet.reduce_conflicts_per_second) == (1, 16, 0)


def test_in_crt_slices_spread_the_hottest_item_and_cost_packing() -> None:
    """In `crt` each slice is planned apart, as before issue 37: 16 slices put ten delta batches in
    about 6.7 transactions' worth of slices at 50,000 msg/s (three reducers, 50 StateTable shards), so
    fewer batches share a transaction (more writes) while each slice's `#stats` and roots take a
    sixteenth."""
    one, sixteen = (
        plan_capacity(STANDARD, Settings(aggregate_slices=n, markers=False), prices=PRICES).ours for n in (1, 16)
    )
    assert one.slices_per_invocation == 1 and one.slices_in_use == 1
    assert sixteen.slices_in_use == pytest.approx(16 * (1 - (15 / 16) ** 50))
    assert 6 < sixteen.slices_per_invocation < 7
    assert sixteen.hottest_item_write_units_per_second < one.hottest_item_write_units_per_second / 2
    assert sixteen.reduce_transactions_per_second > 3 * one.reduce_transactions_per_second
    # Three lanes that cannot keep up take full batches: a larger reduceBatchSize packs them again.
    fuller = plan_capacity(
        STANDARD, Settings(aggregate_slices=16, reduce_batch_size=100, markers=False), prices=PRICES
    ).ours
    assert fuller.effective_reduce_batch == 100
    assert fuller.aggregate_write_units_per_second < one.aggregate_write_units_per_second / 2
    quiet = plan_capacity(Workload(rate=400), Settings(aggregate_slices=16, markers=False), prices=PRICES).ours
    assert (quiet.state_stream_shards, quiet.slices_in_use, quiet.slices_per_invocation) == (1, 1, 1)


def test_the_packing_model_counts_what_the_reduce_stage_plans() -> None:
    """`transactions_per_delta_batch` against `aggregation.transactions.plan_transactions` on delta
    batches drawn as the model assumes (100 state changes each, hierarchy values uniform, 30 % of
    modifications moving): the model's transactions and actions per invocation within 3 %, past the
    most batches one transaction per node group holds (46) too, where a group's nodes are written
    again in each of its transactions."""
    chooser = random.Random(5)
    workload = STANDARD

    def path() -> tuple[str, ...]:
        return tuple(f"L{level}-{chooser.randrange(values)}" for level, values in enumerate(workload.fan_out))

    def delta_batch(index: int) -> DeltaBatch:
        changes = [
            (TradeState(Decimal(1), path()), TradeState(Decimal(2), path()))
            if chooser.random() < workload.paths_per_change - 1
            else (None, TradeState(Decimal(3), path()))
            for _ in range(100)
        ]
        return DeltaBatch(f"b{index}", sum_state_changes(changes), 100, (), 1_000)

    assert batches_in_one_transaction_per_group(workload, 100.0, markers=True) == 46
    for batches in (1, 10, 35, 75, 100, 200, 500):
        units = [unit for index in range(batches) for unit in split_into_units(delta_batch(index))]
        plans = plan_transactions(units, with_markers=True, slices=64)
        actions = sum(len(plan.node_deltas) + len(plan.units) + 1 for plan in plans)
        per_batch, per_transaction = transactions_per_delta_batch(workload, 100.0, batches, markers=True)
        assert per_batch * batches == pytest.approx(len(plans), rel=0.03), batches
        assert per_batch * batches * per_transaction == pytest.approx(actions, rel=0.03), batches


def test_break_even_utilisation_is_where_both_modes_cost_the_same() -> None:
    break_even = break_even_utilization(PRICES)
    assert break_even == pytest.approx(0.00065 / 3600 / 0.625e-6)  # about 29 %
    units = 10_000.0
    at_break_even = TableCapacity(
        mode="provisioned", min_write_capacity=1, max_write_capacity=10**6, min_read_capacity=1
    )
    capacity_held = units / break_even
    provisioned = capacity_held * 0.00065 * 730 + 1 * 0.00013 * 730
    on_demand = writes_monthly_usd(units, PRICES)
    assert provisioned == pytest.approx(on_demand + 0.00013 * 730)  # equal but for the minimum read capacity
    assert provisioned_write_capacity(units, replace(at_break_even, target_utilization_percent=70)) == (
        pytest.approx(units / 0.7)
    )


def test_provisioned_capacity_follows_the_load_from_the_minimum_up() -> None:
    table = TableCapacity(mode="provisioned", min_write_capacity=100, max_write_capacity=1000)
    assert provisioned_write_capacity(7, table) == 100
    assert provisioned_write_capacity(70, table) == pytest.approx(100)
    assert provisioned_write_capacity(350, table) == pytest.approx(500)
    # Beyond the maximum the cost is what carrying the load takes; the plan flags the maximum.
    assert provisioned_write_capacity(5000, table) == pytest.approx(5000 / 0.7)


def test_both_modes_are_priced_side_by_side_and_the_cheaper_recommended() -> None:
    plan = plan_capacity(STANDARD, prices=PRICES)
    (state, delta, aggregate) = plan.modes
    assert [m.table for m in plan.modes] == ["StateTable", "DeltaTable", "AggregateTable"]
    assert state.write_units_per_second == plan.ours.state_write_units_per_second
    assert state.on_demand_usd == pytest.approx(50_000 * PRICES.seconds_per_month * 0.625e-6)
    assert state.provisioned_write_capacity == pytest.approx(50_000 / 0.7)
    assert state.provisioned_usd == pytest.approx((50_000 / 0.7 * 0.00065 + 1 * 0.00013) * 730)
    assert state.cheaper == "provisioned"  # 70 % utilisation is far above the ~29 % break-even
    assert delta.cheaper == aggregate.cheaper == "provisioned"
    # A table so idle that its minimum capacity (5 WCU) is mostly unused is cheaper on demand.
    idle = plan_capacity(Workload(rate=1), prices=PRICES).modes[0]
    assert idle.write_units_per_second == 1 and idle.provisioned_write_capacity == 5
    assert idle.cheaper == "on-demand"


def test_a_provisioned_table_is_billed_by_the_hour_in_the_plan() -> None:
    provisioned = TableCapacity(mode="provisioned", max_write_capacity=100_000)
    plan = plan_capacity(STANDARD, Settings(state_table=provisioned), prices=PRICES)
    component = next(c for c in plan.ours.components if c.name == "StateTable writes")
    assert "provisioned" in component.detail
    assert component.monthly_usd == pytest.approx(plan.modes[0].provisioned_usd)
    on_demand = [c for c in plan.ours.components if c.name.startswith("DeltaTable ")]
    assert [c.name for c in on_demand] == ["DeltaTable writes", "DeltaTable reads"]
    assert sum(c.monthly_usd for c in on_demand) == pytest.approx(plan.modes[1].on_demand_usd)


def test_a_provisioned_maximum_below_the_load_cannot_keep_up() -> None:
    small = TableCapacity(mode="provisioned", max_write_capacity=10_000)
    plan = plan_capacity(STANDARD, Settings(aggregate_table=small), prices=PRICES)
    (flag,) = [f for f in plan.ours.stalls if "provisioned maximum" in f.problem]
    assert flag.problem.startswith("AggregateTable needs")
    wanted = math.ceil(plan.ours.aggregate_write_units_per_second / 0.7)
    assert (
        flag.change
        == f"raise maxWriteCapacity of aggregateTableCapacity to {wanted:,} (the load at its target utilisation)"
    )


def test_a_lane_that_finishes_within_a_poll_takes_one_polls_arrivals() -> None:
    assert steady_batch(100, per_lane=20.0, poll_seconds=0.25, invocation_seconds=lambda b: 0.1) == 5.0
    assert steady_batch(4, per_lane=20.0, poll_seconds=0.25, invocation_seconds=lambda b: 0.1) == 4.0  # capped


def test_a_lane_whose_invocations_outlast_the_poll_takes_what_arrived_meanwhile() -> None:
    """An invocation of b records taking 0.5 s + 1 ms each at 100 records/s: b = 100 (0.5 + b/1000)."""
    batch = steady_batch(1000, per_lane=100.0, poll_seconds=0.25, invocation_seconds=lambda b: 0.5 + b / 1000)
    assert batch == pytest.approx(50 / 0.9, rel=1e-3)
    # A lane that cannot keep up even with full batches runs at the cap.
    assert steady_batch(80, per_lane=100.0, poll_seconds=0.25, invocation_seconds=lambda b: 0.5 + b / 50) == 80


def test_many_reducers_take_small_batches_which_cost_more_writes() -> None:
    """18 lanes at 50,000 msg/s each gather 425 / 18 delta batches a second: a quarter second's
    worth is about 6, not the 10 of reduceBatchSize, and a larger reduceBatchSize changes nothing.
    (A full vCPU each and 128 slices, which few lanes share: the invocations end within the poll
    interval, which is what makes a lane's batch one poll's arrivals.)"""
    settings = Settings(
        state_parallelization_factor=3, reduce_parallelization_factor=6, aggregate_slices=128, reduce_memory_mb=1769
    )
    plan = plan_capacity(STANDARD, settings, prices=PRICES).ours
    assert plan.reduce_lanes == 18
    assert plan.timings[2].invocation_seconds < 0.25, "the premise: invocations shorter than a poll"
    assert plan.effective_reduce_batch == pytest.approx(plan.delta_batches_per_second / 18 / 4)
    larger = plan_capacity(STANDARD, replace(settings, reduce_batch_size=100), prices=PRICES).ours
    assert larger.aggregate_write_units_per_second == pytest.approx(plan.aggregate_write_units_per_second)
    assert larger.reduce_busy_fraction < plan.reduce_busy_fraction, "full batches carry more: headroom"
    # Fewer lanes gather more between polls and pack them into fewer transactions.
    by_factor = [
        plan_capacity(STANDARD, replace(settings, reduce_parallelization_factor=factor, reduce_batch_size=100)).ours
        for factor in (6, 4, 2)
    ]
    batches = [fewer.effective_reduce_batch for fewer in by_factor]
    writes = [fewer.aggregate_write_units_per_second for fewer in by_factor]
    assert batches == sorted(batches) and batches[-1] == pytest.approx(3 * plan.effective_reduce_batch)
    assert writes == sorted(writes, reverse=True) and writes[-1] < 0.6 * plan.aggregate_write_units_per_second


def test_reducers_sharing_a_slice_resend_conflicting_transactions() -> None:
    """Every transaction of a slice writes its `#stats`: reducers of different lanes that share a
    slice conflict, the more the fewer slices; one reducer alone never does."""
    settings = Settings(state_parallelization_factor=3, reduce_parallelization_factor=6)
    by_slices = {n: plan_capacity(STANDARD, replace(settings, aggregate_slices=n)).ours for n in (1, 16, 1000)}
    conflicts = [by_slices[n].reduce_conflicts_per_second for n in (1, 16, 1000)]
    assert conflicts[0] > conflicts[1] > conflicts[2] > 0
    assert by_slices[16].timings[2].invocation_seconds > by_slices[1000].timings[2].invocation_seconds
    alone = plan_capacity(Workload(rate=400), prices=PRICES).ours
    assert alone.reduce_lanes == 1 and alone.reduce_conflicts_per_second == 0
    slicing = ReduceSlicing(delta_stream_shards=1, lanes=4, slices_per_lane=1.0, slices_in_use=1.0)
    # 4 lanes on one slice: 3 of 4 of its 20 transactions a second come from other lanes.
    assert transaction_attempts(slicing, 20.0, 0.025) == pytest.approx(math.exp(15 * 0.025))
    assert transaction_attempts(slicing, 1e6, 0.025) == MAX_TRANSACTION_ATTEMPTS
    # `crt+marker`: each transaction in the slice its token names, so the other lanes' share of all
    # the transactions, over every slice: 3 of 4 of 80 a second over 4 slices.
    by_token = ReduceSlicing(
        delta_stream_shards=1, lanes=4, slices_per_lane=4.0, slices_in_use=4.0, by_transaction=True
    )
    assert transaction_attempts(by_token, 80.0, 0.025) == pytest.approx(math.exp(15 * 0.025))
    alone_by_token = replace(by_token, lanes=1)
    assert transaction_attempts(alone_by_token, 80.0, 0.025) == 1
    assert MAX_TRANSACTION_ATTEMPTS == CONFLICT_ATTEMPTS + 1, "the reduce handler's tries"


def test_the_latency_model_adds_each_stages_wait_and_invocation() -> None:
    """(Reducers with a full vCPU, whose invocations end within the quarter-second poll: each
    stage's interval is then its own poll or batch fill.)"""
    settings = Settings(
        state_parallelization_factor=3, reduce_parallelization_factor=6, aggregate_slices=128, reduce_memory_mb=1769
    )
    plan = plan_capacity(STANDARD, settings, prices=PRICES).ours
    state, mapping, reduce, archive = plan.timings
    assert [t.stage for t in plan.timings] == ["state", "map", "reduce", "archive"]
    assert not archive.on_latency_path
    assert state.lanes == 50 * 3 and state.batch == 100  # 333 msg/s a lane fill 100 in 0.3 s
    assert state.interval_seconds == pytest.approx(0.3)
    assert mapping.lanes == plan.state_stream_shards and mapping.batch == plan.effective_map_batch
    assert reduce.interval_seconds == pytest.approx(0.25) and reduce.batch == plan.effective_reduce_batch
    expected = sum(t.interval_seconds / 2 + t.invocation_seconds for t in (state, mapping, reduce))
    assert plan.latency_p50_seconds == pytest.approx(expected)
    assert 0.5 < plan.latency_p50_seconds < 1.0
    # A map batching window adds half its length to every message's wait.
    windowed = plan_capacity(STANDARD, replace(settings, map_batch_size=10_000, map_batching_window_seconds=2))
    assert windowed.ours.timings[1].interval_seconds == pytest.approx(2)
    assert windowed.ours.latency_p50_seconds > plan.latency_p50_seconds + 0.9


def test_a_stage_that_cannot_keep_up_has_unbounded_latency() -> None:
    plan = plan_capacity(STANDARD, prices=PRICES)  # the defaults: one state lane a shard, 3 reducers
    assert plan.ours.busiest_stage.busy > 1
    assert math.isinf(plan.ours.latency_p50_seconds)
