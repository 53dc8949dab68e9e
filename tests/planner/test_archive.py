"""The archive as a planner stage: one batch object and its receipt an invocation, lanes bound by CPU,
storage and its lifecycle, logs."""

import math

import pytest

from benchmarks.capacity import pipeline_settings
from planner.archive import (
    ACCESS_LOG_RECORD_BYTES,
    ARCHIVE_MEMORY_MB,
    INVOCATION_PAYLOAD_BYTES,
    archive_invocation_seconds,
    largest_batch,
    monthly_storage_usd,
    storage_after_months_usd,
)
from planner.inputs import ArchiveLifecycle, ServiceTimes, Settings, Workload
from planner.model import plan_capacity
from planner.plan import STAGE_BUSY_TARGET
from planner.prices import load_price_table
from planner.scale_out import EVERY_SETTING_AUTO, settings_for_rate
from stacks.archive import ARCHIVE_MEMORY_MB as STACK_ARCHIVE_MEMORY_MB
from stacks.settings import planned_settings

PRICES = load_price_table()
KB = 1024
GIB = 1024**3


def test_an_invocation_is_two_puts_whatever_it_holds_and_the_archive_is_priced_in_the_plan() -> None:
    """425 delta items a second at 50,000 msg/s: batches of 100 (the window lets each lane fill one),
    4.25 invocations a second, 8.5 PUTs a second, about $110 a month (one PUT per item was $5,500)."""
    plan = plan_capacity(Workload(rate=50_000), Settings(state_parallelization_factor=3), prices=PRICES).ours
    (archive,) = [t for t in plan.timings if t.stage == "archive"]
    assert plan.archive_items_per_second == pytest.approx(425)
    assert archive.batch == pytest.approx(100) and plan.archive_objects_per_second == pytest.approx(4.25)
    assert plan.archive_puts_per_second == pytest.approx(8.5)
    assert plan.archive_puts_per_message == pytest.approx(8.5 / 50_000)
    components = {c.name: c for c in plan.components}
    assert components["archive S3 requests"].monthly_usd == pytest.approx(8.5 * PRICES.seconds_per_month * 0.005 / 1000)
    assert components["archive S3 storage"].monthly_usd == pytest.approx(plan.archive_gb_per_month * 0.023)
    assert components["archive access logs"].monthly_usd > 0
    assert components["archive λ"].monthly_usd > 0
    original = plan_capacity(Workload(rate=50_000)).original.components
    assert not [c for c in original if c.name.startswith("archive")], "the original design has no archive"


def test_the_archive_memory_is_the_stacks() -> None:
    assert ARCHIVE_MEMORY_MB == STACK_ARCHIVE_MEMORY_MB


@pytest.mark.parametrize("rate", [50_000, 250_000, 1_000_000])
def test_auto_keeps_the_archive_within_the_target_at_every_declared_rate_at_most_a_put_in_a_thousand_messages(
    rate: int,
) -> None:
    """Issue 37: `auto` keeps the archive at most 70 % busy and its PUTs at most 1 in 1,000 messages."""
    declared = pipeline_settings({"targetMessagesPerSecond": rate})  # cdk.json's `auto` settings, as synthesized
    plan = plan_capacity(Workload(rate=rate), planned_settings(declared), prices=PRICES).ours
    (archive,) = [t for t in plan.timings if t.stage == "archive"]
    assert archive.busy <= STAGE_BUSY_TARGET
    assert plan.archive_puts_per_message <= 0.001
    assert not [f for f in plan.flags if "archive" in f.problem]


def test_without_a_window_a_quiet_lane_invokes_at_every_poll_and_pays_for_it() -> None:
    """The window is what makes a quiet stream's invocations large: at 400 msg/s without one, about
    one delta item an invocation, two PUTs for each."""
    windowless = plan_capacity(Workload(rate=400), Settings(archive_batching_window_seconds=0), prices=PRICES).ours
    windowed = plan_capacity(Workload(rate=400), Settings(), prices=PRICES).ours
    assert windowless.archive_puts_per_message > 10 * windowed.archive_puts_per_message
    assert windowed.archive_puts_per_message <= 0.001


def test_a_batch_is_cut_at_the_invocation_payload() -> None:
    assert largest_batch(Settings(archive_batch_size=10_000), 5_000) == pytest.approx(
        INVOCATION_PAYLOAD_BYTES / (2.2 * 5_000)
    )
    assert largest_batch(Settings(archive_batch_size=100), 5_000) == 100


def test_an_invocation_takes_its_round_trips_and_cpu_in_proportion_to_its_items() -> None:
    times = ServiceTimes()
    one, hundred = archive_invocation_seconds(1, 5_000, times), archive_invocation_seconds(100, 5_000, times)
    fixed = 2 * times.s3_round_trip_ms / 1e3
    assert fixed < one < hundred and (hundred - fixed) == pytest.approx(100 * (one - fixed))


def test_the_archive_is_not_on_the_latency_path() -> None:
    """With the settings a stack declaring 50,000 msg/s gets (`auto`: every stage keeps up, so the
    p50 is finite), the p50 is the stages' on the way to the totals, the archive's left out."""
    workload = Workload(rate=50_000)
    settings = settings_for_rate(
        workload,
        Settings(),
        ServiceTimes(),
        PRICES,
        auto=EVERY_SETTING_AUTO,
    )
    plan = plan_capacity(workload, settings, prices=PRICES).ours
    (archive,) = [t for t in plan.timings if t.stage == "archive"]
    assert not archive.on_latency_path
    path = [t for t in plan.timings if t.on_latency_path]
    assert math.isfinite(plan.latency_p50_seconds)
    assert plan.latency_p50_seconds == pytest.approx(sum(t.seconds for t in path))


def test_archive_lanes_too_busy_are_flagged_with_the_factor_that_relieves_them() -> None:
    busy = plan_capacity(Workload(rate=250_000), Settings(state_parallelization_factor=3), prices=PRICES).ours
    assert busy.archive_lane_busy > 1
    (flag,) = [f for f in busy.flags if "archive lanes" in f.problem]
    assert flag.side_stage and flag.change.startswith("set archiveParallelizationFactor to ")
    factor = int(flag.change.rsplit(" ", 1)[1])
    relieved = plan_capacity(
        Workload(rate=250_000),
        Settings(state_parallelization_factor=3, archive_parallelization_factor=factor),
        prices=PRICES,
    ).ours
    assert relieved.archive_lane_busy <= STAGE_BUSY_TARGET


def test_small_objects_stay_in_standard_whatever_the_lifecycle_says() -> None:
    """S3 does not transition objects below 128 KB by default; a 5 KB object stays in Standard."""
    for storage_class in ("STANDARD_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"):
        lifecycle = ArchiveLifecycle(storage_class, 30)
        assert monthly_storage_usd(100.0, 5 * KB, lifecycle, PRICES) == pytest.approx(100 * 0.023)


def test_large_objects_are_billed_at_the_class_price_with_its_minimum_and_overhead() -> None:
    objects = 100 * GIB / (200 * KB)
    glacier_ir = monthly_storage_usd(100.0, 200 * KB, ArchiveLifecycle("GLACIER_IR", 90), PRICES)
    assert glacier_ir == pytest.approx(100 * 0.004)
    deep = monthly_storage_usd(100.0, 200 * KB, ArchiveLifecycle("DEEP_ARCHIVE", 180), PRICES)
    expected = objects * (200 + 32) * KB / GIB * 0.00099 + objects * 8 * KB / GIB * 0.023
    assert deep == pytest.approx(expected)
    assert deep < glacier_ir < 100 * 0.023


def test_after_a_year_only_what_is_older_than_the_transition_has_moved() -> None:
    lifecycle = ArchiveLifecycle("GLACIER_IR", 91)  # about three months
    after_year = storage_after_months_usd(10.0, 200 * KB, lifecycle, PRICES, 12)
    young = 91 / 30.4
    assert after_year == pytest.approx(10 * young * 0.023 + 10 * (12 - young) * 0.004)
    assert storage_after_months_usd(10.0, 200 * KB, ArchiveLifecycle(), PRICES, 12) == pytest.approx(120 * 0.023)


def test_access_logs_are_held_for_their_retention() -> None:
    short = plan_capacity(Workload(rate=50_000), Settings(archive_access_log_retention_days=30)).ours
    long = plan_capacity(Workload(rate=50_000), Settings(archive_access_log_retention_days=365)).ours
    short_logs = next(c.monthly_usd for c in short.components if c.name == "archive access logs")
    long_logs = next(c.monthly_usd for c in long.components if c.name == "archive access logs")
    assert long_logs == pytest.approx(short_logs * 365 / 30)
    requests_per_second = long_logs / 0.023 * 1024**3 / ACCESS_LOG_RECORD_BYTES / (365 * 86_400)
    assert requests_per_second == pytest.approx(long.archive_puts_per_second), "a log record per PUT"
