"""The planner's scale-out scenarios as `make bench` writes them into docs/benchmarks.md, and on the command line."""

from dataclasses import replace

import pytest

from benchmarks import capacity
from benchmarks.report import _auto_settings, keeps_up, scale_out_section, scale_out_summary
from planner.inputs import ServiceTimes, Settings, Workload
from planner.model import plan_capacity
from planner.prices import load_price_table
from planner.scale_out import within_targets
from planner.tables import PIPELINE_TABLES
from stacks.settings import AUTO, CAPACITY_SETTINGS, DEFAULT_CONTEXT

PRICES = load_price_table()
TIMES = ServiceTimes()
SIXTEEN_SLICES = Settings(aggregate_slices=16)


def from_the_flags_fix(rate: float) -> list[capacity.Scenario]:
    """The searches from 16 slices and what the flags ask for at `rate`, as `make bench` starts them."""
    workload = Workload(rate=rate)
    start = capacity.recommended(plan_capacity(workload, SIXTEEN_SLICES, TIMES, PRICES))
    return capacity.scale_out_scenarios(workload, start, TIMES, PRICES, start_label="flags")


@pytest.fixture(scope="module")
def at_50000() -> list[capacity.Scenario]:
    return from_the_flags_fix(50_000)


@pytest.fixture(scope="module")
def at_250000() -> list[capacity.Scenario]:
    return from_the_flags_fix(250_000)


def test_at_50000_the_packing_suggestion_is_priced_beside_the_flags_fix(at_50000: list[capacity.Scenario]) -> None:
    labels = [item.label for item in at_50000]
    assert labels == [
        "flags",
        "spiky: packing, 16 slices kept, p50 ≤ 1 s",
        "spiky: cheapest, p50 ≤ 1 s",
        "spiky: cheapest, p50 ≤ 4 s",
        "steady: cheapest, p50 ≤ 1 s",
        "steady: cheapest, p50 ≤ 4 s",
    ]
    flags, packing, fast, cheap, steady_fast, steady_cheap = at_50000
    assert not flags.plan.ours.stalls, "the flags' fix keeps up"
    assert packing.plan.settings.aggregate_slices == 16 and packing.plan.settings.stream == flags.before.stream
    assert within_targets(packing.plan.ours, 1.0) and not within_targets(flags.plan.ours, 1.0)
    assert packing.plan.ours.latency_p50_seconds <= 1.0 and fast.plan.ours.latency_p50_seconds <= 1.0
    assert cheap.plan.ours.monthly_usd <= fast.plan.ours.monthly_usd <= packing.plan.ours.monthly_usd
    assert all(item.one_slice.design == "this pipeline" for item in at_50000)
    spiky = (packing, fast, cheap)
    assert all(item.profile == "spiky" and item.plan.settings.stream == flags.before.stream for item in spiky)
    assert all(not item.plan.settings.table_capacity(table).provisioned for item in spiky for table in PIPELINE_TABLES)
    assert (steady_fast.profile, steady_cheap.profile) == ("steady", "steady")
    assert steady_fast.plan.ours.latency_p50_seconds <= 1.0
    assert steady_fast.plan.ours.monthly_usd < fast.plan.ours.monthly_usd / 2, "provisioned at a steady rate"
    assert steady_cheap.plan.ours.monthly_usd <= steady_fast.plan.ours.monthly_usd


def test_the_section_renders_both_rates_and_the_chosen_plan(
    at_50000: list[capacity.Scenario], at_250000: list[capacity.Scenario]
) -> None:
    text = "\n".join(scale_out_section(at_50000, at_250000))
    assert "### What the planner suggests at 50,000 msg/s" in text
    assert "### The 250,000 msg/s plan" in text
    assert "| settings | changes (cdk.json) | $/month |" in text
    chosen = next(item for item in at_250000 if "1 s" in item.label)
    ours, stream = chosen.plan.ours, chosen.plan.settings.stream
    shards = f"{stream.shard_count} provisioned" if stream.provisioned else f"{ours.kinesis_shards} (on-demand)"
    assert f"The plan ({chosen.label}): Kinesis shards {shards}" in text
    assert f"hottest aggregate item {ours.hottest_item_write_units_per_second:,.0f} write units" in text
    assert ours.hottest_item_write_units_per_second <= 500
    assert "Inputs: rate 250,000 msg/s" in text, "the chosen plan in full"
    assert "| archive | " in text


def test_the_command_line_prints_the_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main(["--rate", "50000", "--scale-out", "-c", "stateParallelizationFactor=3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| settings | changes (cdk.json) |")
    assert "| these settings | - |" in out and "| spiky: cheapest, p50 ≤ 1 s |" in out
    assert "| steady: cheapest, p50 ≤ 1 s | loadProfile steady (stream 72 shards, StateTable from 71,429 WCU " in out
    assert "Load profiles (`loadProfile`), each as `cdk synth` sizes it for 50,000 msg/s:" in out
    assert out.rstrip().splitlines()[-1].startswith("Choose `loadProfile` steady for a load that stays near")


def test_the_summary_names_each_choice_with_its_cost_and_latency(
    at_50000: list[capacity.Scenario], at_250000: list[capacity.Scenario]
) -> None:
    text = scale_out_summary(at_50000, at_250000)
    assert text.startswith("- **Scale-out (planner, section 5)**: at 50,000 msg/s the flags' fix costs $")
    at_50000_part, _, at_250000_part = text.partition("At 250,000 msg/s, ")
    assert "spiky: cheapest, p50 ≤ 1 s: $" in at_50000_part and "spiky: cheapest, p50 ≤ 1 s: $" in at_250000_part
    assert "steady: cheapest, p50 ≤ 1 s: $" in at_50000_part
    assert "\n" not in text


def test_a_plan_whose_only_stall_is_the_archive_keeps_the_totals_up() -> None:
    """What the flags ask for keeps the totals up; with one archive lane a shard the archive alone falls behind."""
    keeping_up = capacity.recommended(plan_capacity(Workload(rate=50_000), SIXTEEN_SLICES, TIMES, PRICES))
    plan = plan_capacity(Workload(rate=50_000), replace(keeping_up, archive_parallelization_factor=1), TIMES, PRICES)
    assert plan.ours.stalls and all(flag.side_stage for flag in plan.ours.stalls)
    assert keeps_up(plan) == "; the totals keep up, the archive does not, see section 5"
    assert keeps_up(plan_capacity(Workload(rate=50_000), Settings(), TIMES, PRICES)).startswith(
        "; **still cannot keep up**"
    )


def test_the_report_names_every_setting_cdk_json_leaves_to_the_planner() -> None:
    """Section 5's "as synthesis chooses them" sentence lists each `auto` default with its value."""
    sentence = _auto_settings(
        replace(Settings(), reduce_memory_mb=1024, reduce_batch_size=100, archive_parallelization_factor=2)
    )
    # `tableDeletionProtection`'s `auto` follows `removalPolicy`, not the planner; the capacity settings'
    # follows `loadProfile` (on-demand by default).
    followers = {"tableDeletionProtection", *CAPACITY_SETTINGS}
    auto = [key for key, value in DEFAULT_CONTEXT.items() if value == AUTO and key not in followers]
    assert auto and all(f"{key} " in sentence for key in auto), (auto, sentence)
    assert "reduceMemoryMb 1024" in sentence and "archiveParallelizationFactor 2" in sentence
    assert "reduceBatchSize 100" in sentence
