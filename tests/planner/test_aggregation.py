"""The planner with a KPL-aggregating producer (`Workload.aggregated`): shards, stream prices, state stage.

The state stage gets no parallelization factor from an aggregating producer (the Lambda Developer
Guide's Kinesis page: "Note that parallelization factor will not work if you are using Kinesis
aggregation."): one lane a shard, and shards for concurrency.
"""

import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.ingest import (
    kinesis_shards,
    on_demand_stream_monthly_usd,
    provisioned_stream_monthly_usd,
    suggested_provisioned_shards,
)
from planner.inputs import (
    AGGREGATE_MAX_BYTES,
    MAX_PARALLELIZATION_FACTOR,
    ServiceTimes,
    Settings,
    StreamCapacity,
    Workload,
)
from planner.model import OURS, plan_capacity, plan_design
from planner.plan import STAGE_BUSY_TARGET, DesignPlan, StageTiming
from planner.prices import load_price_table
from planner.scale_out import STATE_LANES_AUTO, cheapest_settings, settings_for_rate, within_targets
from planner.state import KINESIS_AGGREGATION_RULE, lambda_state_rate, state_shards_needed

PRICES = load_price_table()
TIMES = ServiceTimes()
PLAIN = Workload(rate=50_000, record_bytes=300)
AGGREGATED = Workload(rate=50_000, record_bytes=300, aggregated=True)


def test_an_aggregate_holds_as_many_messages_as_fit_in_50_kib() -> None:
    # 300 B of data and 48 B of key and framing a message, 20 B of signature and digest an aggregate.
    assert AGGREGATED.messages_per_kinesis_record == 147
    assert AGGREGATED.kinesis_record_bytes == 20 + 147 * 348 <= AGGREGATE_MAX_BYTES
    assert AGGREGATED.kinesis_records_per_second == pytest.approx(50_000 / 147)
    assert (PLAIN.messages_per_kinesis_record, PLAIN.kinesis_record_bytes) == (1, 300)


def test_a_message_too_large_to_share_an_aggregate_is_sent_alone() -> None:
    large = Workload(rate=100, record_bytes=30_000, aggregated=True)
    assert large.messages_per_kinesis_record == 1
    assert large.kinesis_record_bytes == 30_000
    assert on_demand_stream_monthly_usd(large, PRICES) == on_demand_stream_monthly_usd(
        Workload(rate=100, record_bytes=30_000), PRICES
    )


def test_a_state_invocation_takes_what_fits_in_lambdas_event() -> None:
    # 6 MiB of event holds 4.5 MiB of data base64-encoded: 92 aggregates of 51,176 B.
    assert AGGREGATED.records_per_invocation(100) == 92
    assert AGGREGATED.records_per_invocation(10) == 10
    assert PLAIN.records_per_invocation(10_000) == 10_000  # 300-byte records: the batch size binds
    assert Workload(rate=1, record_bytes=1024 * 1024).records_per_invocation(100) == 4


def test_aggregated_shards_are_sized_by_bytes() -> None:
    # 50,000 x 300 B = 14.3 MiB/s: 15 shards, where one record per message needs 50 by records.
    assert kinesis_shards(PLAIN) == 50
    assert kinesis_shards(AGGREGATED) == 15
    assert suggested_provisioned_shards(AGGREGATED) == 21  # 14.3 / 0.7, rounded up


def test_on_demand_bills_each_aggregate_rounded_up_to_a_kilobyte() -> None:
    seconds = PRICES.seconds_per_month
    records = 50_000 / 147
    expected = (
        730 * 0.04
        + records * 50 * 1024 * seconds / 1024**3 * 0.08  # 51,176 B billed as 50 KB
        + records * 51_176 * seconds / 1024**3 * 0.04  # read back as it was written
    )
    assert on_demand_stream_monthly_usd(AGGREGATED, PRICES) == pytest.approx(expected)
    assert on_demand_stream_monthly_usd(AGGREGATED, PRICES) < on_demand_stream_monthly_usd(PLAIN, PRICES) / 2


def test_provisioned_bills_two_put_payload_units_an_aggregate() -> None:
    seconds = PRICES.seconds_per_month
    # 51,176 B is two 25 KB units (25,600 B each), for 147 messages (one unit each sent alone).
    assert provisioned_stream_monthly_usd(AGGREGATED, 21, PRICES) == pytest.approx(
        21 * 0.015 * 730 + 2 * 50_000 / 147 * seconds * 0.014e-6
    )


def test_the_plan_prices_the_aggregated_stream_in_both_modes() -> None:
    plain, aggregated = plan_capacity(PLAIN), plan_capacity(AGGREGATED)
    assert aggregated.ours.kinesis_shards == 15 and plain.ours.kinesis_shards == 50
    assert aggregated.stream.on_demand_usd == pytest.approx(on_demand_stream_monthly_usd(AGGREGATED, PRICES))
    assert aggregated.stream.provisioned_shards == 21
    assert aggregated.stream.provisioned_usd == pytest.approx(provisioned_stream_monthly_usd(AGGREGATED, 21, PRICES))
    (kinesis,) = [c for c in aggregated.ours.components if c.name.startswith("Kinesis")]
    assert kinesis.monthly_usd == aggregated.stream.on_demand_usd


def test_state_invocations_follow_kinesis_records_and_its_work_follows_messages() -> None:
    settings = Settings(state_parallelization_factor=1)
    plain, aggregated = plan_capacity(PLAIN, settings).ours, plan_capacity(AGGREGATED, settings).ours
    # The same messages to apply: the same executions (Little's law over messages).
    assert aggregated.state_executions == pytest.approx(plain.state_executions)
    (state,) = [c for c in aggregated.components if c.name == "state λ"]
    assert state.detail.endswith(f"{50_000 / 147 / 92:,.0f} invocations/s")
    (timing,) = [t for t in aggregated.timings if t.stage == "state"]
    # 15 shards of 3,333 msg/s: a lane falls behind at 490 msg/s, so its batches reach the cap
    # of 92 aggregates (Lambda's event), 13,524 messages an invocation; it would need a factor of 7,
    # which aggregates do not get: 146 shards instead, one lane each within 70 % busy.
    instance_rate = lambda_state_rate(plan_capacity(PLAIN).times, settings)
    assert timing.batch == pytest.approx(92)
    assert timing.invocation_seconds == pytest.approx(92 * 147 / instance_rate)
    assert timing.invocation_seconds < 300  # the state function's timeout
    assert timing.busy == pytest.approx(50_000 / 15 / instance_rate)
    assert aggregated.state_parallelization_needed == 7
    assert state_shards_needed(AGGREGATED, instance_rate) == 146 == 50_000 // (instance_rate * 0.7) + 1


@given(
    rate=st.floats(min_value=1.0, max_value=1_000_000.0, allow_nan=False),
    record_bytes=st.integers(min_value=1, max_value=1024 * 1024),
)
def test_aggregation_never_needs_more_shards_than_one_record_per_message(rate: float, record_bytes: int) -> None:
    plain = Workload(rate=rate, record_bytes=record_bytes)
    aggregated = Workload(rate=rate, record_bytes=record_bytes, aggregated=True)
    assert kinesis_shards(aggregated) <= kinesis_shards(plain)
    assert suggested_provisioned_shards(aggregated) <= suggested_provisioned_shards(plain)
    assert aggregated.kinesis_records_per_second <= plain.kinesis_records_per_second
    assert aggregated.kinesis_record_bytes <= max(AGGREGATE_MAX_BYTES, record_bytes)


def state_timing(plan: DesignPlan) -> StageTiming:
    (timing,) = [timing for timing in plan.timings if timing.stage == "state"]
    return timing


def state_flags(plan: DesignPlan) -> list[str]:
    return [flag.change for flag in plan.flags if flag.problem.startswith("one state instance")]


def test_the_rule_is_the_lambda_developer_guide_s_sentence() -> None:
    assert KINESIS_AGGREGATION_RULE == (
        "Note that parallelization factor will not work if you are using Kinesis aggregation."
    )


def test_aggregates_get_one_state_lane_a_shard_whatever_the_factor() -> None:
    for factor in (1, 3, MAX_PARALLELIZATION_FACTOR):
        plan = plan_capacity(AGGREGATED, Settings(state_parallelization_factor=factor)).ours
        assert state_timing(plan).lanes == plan.kinesis_shards == 15
    plain = plan_capacity(PLAIN, Settings(state_parallelization_factor=3)).ours
    assert state_timing(plain).lanes == 3 * plain.kinesis_shards, "the factor works for plain records"


def test_the_flag_asks_for_shards_not_for_a_factor() -> None:
    on_demand = plan_capacity(AGGREGATED, Settings(state_parallelization_factor=1)).ours
    (change,) = state_flags(on_demand)
    assert change.startswith('set streamMode to {"mode": "provisioned", "shardCount": 146}')
    provisioned = Settings(stream=StreamCapacity("provisioned", 21))
    (change,) = state_flags(plan_capacity(AGGREGATED, provisioned).ours)
    assert change.startswith("raise streamMode shardCount to 146")
    followed = plan_capacity(AGGREGATED, Settings(stream=StreamCapacity("provisioned", 146))).ours
    assert state_flags(followed) == [] and state_timing(followed).busy <= STAGE_BUSY_TARGET
    (change,) = state_flags(plan_capacity(PLAIN, Settings(state_parallelization_factor=1)).ours)
    assert change == "set stateParallelizationFactor to 3", "plain records still get a factor"


def test_the_cheapest_aggregated_plan_takes_shards_and_keeps_every_target() -> None:
    choice = cheapest_settings(AGGREGATED, Settings(), TIMES, PRICES)
    assert choice is not None
    assert choice.settings.state_parallelization_factor == 1
    assert choice.settings.stream == StreamCapacity("provisioned", 146)
    assert state_timing(choice.plan).lanes == 146
    assert within_targets(choice.plan, None)


def auto(workload: Workload, given_settings: Settings) -> Settings:
    """What synthesis plans for the state lanes (`stateParallelizationFactor` `auto`), the rest as given."""
    return settings_for_rate(
        workload,
        given_settings,
        TIMES,
        PRICES,
        auto=STATE_LANES_AUTO,
    )


SHARD_COUNT = re.compile(r"shardCount\D+(\d+)")


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=1.0, max_value=500_000.0, allow_nan=False),
    record_bytes=st.integers(min_value=1, max_value=64 * 1024),
    factor=st.integers(min_value=1, max_value=MAX_PARALLELIZATION_FACTOR),
    shards=st.none() | st.integers(min_value=1, max_value=2_000),
    reduce=st.sampled_from([(1, 1, 256, 10), (1, 1, 1024, 100), (128, 10, 1769, 20)]),
)
def test_an_aggregated_plan_has_factor_1_and_keeps_every_stage_within_its_target(
    rate: float,
    record_bytes: int,
    factor: int,
    shards: int | None,
    reduce: tuple[int, int, int, int],
) -> None:
    """For any aggregated workload, stream, asked-for factor and reducers: `auto` plans a state factor
    of 1, the state stage has one lane a shard, and once the stream has the shards the planner asks
    for (the flag's count when a shard's lane cannot keep up, `state_shards_needed` for the busy
    target), every stage is within its utilisation target that is within it for the same messages
    sent one record each with the factor `auto` plans for them: aggregation costs no target."""
    slices, reducers, memory, batch = reduce
    aggregated = Workload(rate=rate, record_bytes=record_bytes, aggregated=True)
    plain = replace(aggregated, aggregated=False)
    stream = StreamCapacity() if shards is None else StreamCapacity("provisioned", shards)
    given_settings = Settings(
        state_parallelization_factor=factor,
        aggregate_slices=slices,
        reduce_parallelization_factor=reducers,
        reduce_memory_mb=memory,
        reduce_batch_size=batch,
        stream=stream,
    )
    as_given = plan_design(aggregated, given_settings, TIMES, PRICES, OURS, suggest=False)
    assert state_timing(as_given).lanes == as_given.kinesis_shards, "the factor does not work with aggregates"

    chosen = auto(aggregated, given_settings)
    assert chosen.state_parallelization_factor == 1
    assert chosen.stream == stream, "the stream stays as set"
    planned = plan_design(aggregated, chosen, TIMES, PRICES, OURS, suggest=False)
    instance_rate = OURS.state_rate(TIMES, chosen)
    flagged = state_flags(planned)
    if flagged:
        (change,) = flagged
        (asked,) = SHARD_COUNT.findall(change)
        assert int(asked) >= state_shards_needed(aggregated, instance_rate)
    elif state_timing(planned).busy > STAGE_BUSY_TARGET:
        asked = str(max(state_shards_needed(aggregated, instance_rate), suggested_provisioned_shards(aggregated)))
    else:
        asked = ""
    if asked:
        chosen = auto(aggregated, replace(given_settings, stream=StreamCapacity("provisioned", int(asked))))
        assert chosen.state_parallelization_factor == 1
    ours = plan_design(aggregated, chosen, TIMES, PRICES, OURS, suggest=False)
    assert state_timing(ours).lanes == ours.kinesis_shards
    assert state_timing(ours).busy <= STAGE_BUSY_TARGET and state_flags(ours) == []

    reference = plan_design(plain, auto(plain, given_settings), TIMES, PRICES, OURS, suggest=False)
    for timing, same in zip(ours.timings[1:], reference.timings[1:], strict=True):
        assert timing.stage == same.stage
        assert same.busy > STAGE_BUSY_TARGET or timing.busy <= STAGE_BUSY_TARGET, timing.stage
