"""The planner with a KPL-aggregating producer (`Workload.aggregated`): shards, stream prices, state stage."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.ingest import (
    kinesis_shards,
    on_demand_stream_monthly_usd,
    provisioned_stream_monthly_usd,
    suggested_provisioned_shards,
)
from planner.inputs import AGGREGATE_MAX_BYTES, Settings, Workload
from planner.model import plan_capacity
from planner.prices import load_price_table
from planner.state import lambda_state_rate

PRICES = load_price_table()
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
    # of 92 aggregates (Lambda's event), 13,524 messages an invocation; it needs a factor of 7.
    instance_rate = lambda_state_rate(plan_capacity(PLAIN).times, settings)
    assert timing.batch == pytest.approx(92)
    assert timing.invocation_seconds == pytest.approx(92 * 147 / instance_rate)
    assert timing.invocation_seconds < 300  # the state function's timeout
    assert timing.busy == pytest.approx(50_000 / 15 / instance_rate)
    assert aggregated.state_parallelization_needed == 7


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
