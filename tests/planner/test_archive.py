"""The archive as a planner stage: S3 requests, the registry shards, storage and its lifecycle, logs."""

import math
from dataclasses import replace

import pytest

from planner.archive import (
    ACCESS_LOG_RECORD_BYTES,
    monthly_storage_usd,
    registry_attempts,
    registry_shards_needed,
    storage_after_months_usd,
)
from planner.inputs import ArchiveLifecycle, ServiceTimes, Settings, StreamCapacity, Workload
from planner.model import plan_capacity
from planner.plan import STAGE_BUSY_TARGET, DesignPlan
from planner.prices import load_price_table
from planner.scale_out import SCALE_OUT_RATE, settings_for_rate
from stacks.settings import DEFAULT_ARCHIVE_REGISTRY_SHARDS

PRICES = load_price_table()
KB = 1024
GIB = 1024**3


def test_every_delta_item_is_one_object_put_and_the_archive_is_priced_in_the_plan() -> None:
    """The issue's figure: 425 delta items a second at 50,000 msg/s are 425 PUTs, about $5,500 a month."""
    plan = plan_capacity(Workload(rate=50_000), Settings(state_parallelization_factor=3), prices=PRICES).ours
    assert plan.archive_objects_per_second == pytest.approx(425)
    components = {c.name: c for c in plan.components}
    object_puts = 425 * PRICES.seconds_per_month * 0.005 / 1000
    assert 5_500 < object_puts < components["archive S3 requests"].monthly_usd < 1.1 * object_puts
    gb = 425 * plan.delta_item_bytes * PRICES.seconds_per_month / GIB
    assert plan.archive_gb_per_month == pytest.approx(gb)
    assert components["archive S3 storage"].monthly_usd == pytest.approx(gb * 0.023)
    assert components["archive access logs"].monthly_usd > 0
    assert components["archive λ"].monthly_usd > 0
    original = plan_capacity(Workload(rate=50_000)).original.components
    assert not [c for c in original if c.name.startswith("archive")], "the original design has no archive"


def test_the_archive_is_not_on_the_latency_path() -> None:
    """With the settings a stack declaring 50,000 msg/s gets (`auto`: every stage keeps up, so the
    p50 is finite), the p50 is the stages' on the way to the totals, the archive's left out."""
    workload = Workload(rate=50_000)
    settings = settings_for_rate(
        workload,
        Settings(),
        ServiceTimes(),
        PRICES,
        state_parallelization=True,
        reduce_parallelization=True,
        slices=True,
        archive_parallelization=True,
        reduce_memory=True,
        reduce_batch=True,
    )
    plan = plan_capacity(workload, settings, prices=PRICES).ours
    (archive,) = [t for t in plan.timings if t.stage == "archive"]
    assert not archive.on_latency_path
    path = [t for t in plan.timings if t.on_latency_path]
    assert math.isfinite(plan.latency_p50_seconds)
    assert plan.latency_p50_seconds == pytest.approx(sum(t.seconds for t in path))


def test_one_archive_lane_never_conflicts_on_the_registry_and_several_do() -> None:
    assert registry_attempts(10.0, 0.06, lanes=1) == 1.0
    assert registry_attempts(10.0, 0.06, lanes=4) == pytest.approx(math.exp(7.5 * 0.06))
    # Spread over shards, an update meets only the other lanes' updates of its own shard.
    assert registry_attempts(10.0, 0.06, lanes=4, shards=8) == pytest.approx(math.exp(7.5 / 8 * 0.06))
    quiet = plan_capacity(Workload(rate=400), prices=PRICES).ours
    assert quiet.archive_registry_conflicts_per_second == 0


AT_SCALE = Settings(state_parallelization_factor=3, reduce_parallelization_factor=6)


def _registry_busy(shards: int) -> float:
    plan = plan_capacity(
        Workload(rate=SCALE_OUT_RATE), replace(AT_SCALE, archive_registry_shards=shards), prices=PRICES
    )
    return plan.ours.archive_registry_busy


def test_at_250000_msg_s_one_registry_key_cannot_keep_up_and_the_flag_names_the_shards_that_can() -> None:
    one_key = plan_capacity(Workload(rate=SCALE_OUT_RATE), replace(AT_SCALE, archive_registry_shards=1)).ours
    assert one_key.archive_registry_busy > 20
    (flag,) = [f for f in one_key.flags if "registry shards" in f.problem]
    assert flag.blocking and flag.side_stage and flag.change == "raise archiveRegistryShards to 8"
    assert _registry_busy(4) > STAGE_BUSY_TARGET >= _registry_busy(8)


PLAN_250K = Settings(
    stream=StreamCapacity("provisioned", 358),
    state_parallelization_factor=3,
    reduce_parallelization_factor=8,
    reduce_batch_size=20,
    aggregate_slices=128,
    archive_parallelization_factor=2,
)
"""The scale-out search's cheapest settings within a 1 s p50 at 250,000 msg/s (docs/benchmarks.md)."""


def _plan_250k(*, archive_registry_shards: int | None = None, archive_parallelization_factor: int = 2) -> DesignPlan:
    settings = replace(
        PLAN_250K,
        archive_registry_shards=archive_registry_shards or PLAN_250K.archive_registry_shards,
        archive_parallelization_factor=archive_parallelization_factor,
    )
    return plan_capacity(Workload(rate=SCALE_OUT_RATE), settings, prices=PRICES).ours


def test_the_default_shards_are_the_fewest_that_keep_the_250000_plan_free_of_a_hot_registry_object() -> None:
    """`DEFAULT_ARCHIVE_REGISTRY_SHARDS`' figures."""
    plan = _plan_250k()
    (archive,) = [t for t in plan.timings if t.stage == "archive"]
    assert (archive.lanes, round(archive.batch)) == (22, 27)
    assert plan.archive_registry_updates_per_second == pytest.approx(158, abs=1)
    assert plan.archive_registry_busy == pytest.approx(0.49, abs=0.01) and archive.busy <= STAGE_BUSY_TARGET
    assert _plan_250k(archive_registry_shards=16).archive_registry_busy == pytest.approx(0.96, abs=0.01)
    assert registry_shards_needed(plan, ServiceTimes()) == DEFAULT_ARCHIVE_REGISTRY_SHARDS
    assert not [f for f in plan.flags if "archive" in f.problem]


def test_archive_lanes_busy_writing_objects_are_flagged_with_the_factor_that_relieves_them() -> None:
    one_lane_a_shard = _plan_250k(archive_parallelization_factor=1)
    assert one_lane_a_shard.archive_lane_busy > 1
    (flag,) = [f for f in one_lane_a_shard.flags if "archive lanes" in f.problem]
    assert flag.side_stage and flag.change == "set archiveParallelizationFactor to 2"
    assert _plan_250k().archive_lane_busy <= STAGE_BUSY_TARGET


def test_small_objects_stay_in_standard_whatever_the_lifecycle_says() -> None:
    """S3 does not transition objects below 128 KB by default; a 5 KB delta object stays in Standard."""
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
    assert requests_per_second > long.archive_objects_per_second, "a log record per object PUT, and more"
