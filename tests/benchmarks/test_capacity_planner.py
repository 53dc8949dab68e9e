"""The planner's command line: cdk.json's settings, overrides like `cdk synth -c`, both capacity modes."""

import json
import math
from pathlib import Path

import pytest

from benchmarks import capacity
from benchmarks.handler_overhead import fit_reduce_cpu
from benchmarks.harness import percentile
from benchmarks.report import profiles_section, profiles_summary
from planner.inputs import ServiceTimes, Settings, StreamCapacity, Workload
from planner.model import plan_capacity
from planner.prices import DEFAULT_PRICE_TABLE, load_price_table
from stacks.settings import planned_settings

PRICES = load_price_table()
STANDARD = Workload(rate=50_000)


def test_the_planner_reads_the_settings_cdk_synth_reads() -> None:
    settings = capacity.pipeline_settings({})
    assert planned_settings(settings) == Settings(), "the model's defaults are cdk.json's"
    assert settings.target_messages_per_second == capacity.cdk_json_context()["targetMessagesPerSecond"]


def test_markdown_has_both_designs_inputs_flags_and_both_capacity_modes() -> None:
    text = capacity.render_markdown(plan_capacity(STANDARD, prices=PRICES))
    assert "| | this pipeline | original design |" in text
    assert "total $/month" in text and "Inputs: rate 50,000 msg/s" in text
    assert "→ **" in text
    header = (
        "| table | WRU/s | RRU/s | on-demand $/month | provisioned WCU / RCU (target) | provisioned $/month | cheaper |"
    )
    assert header in text
    assert "| StateTable | 50,000 | 0 | 82,125 | 71,429 / 1 (70 %) | 33,893 | provisioned |" in text
    assert "| DeltaTable reads $/month |" in text and "| DeltaTable RRU/s (map's coverage Query) |" in text
    assert "break-even" in text and "28.9%" in text


def test_the_command_line_prints_a_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main(["--rate", "50000", "--markdown", "--map-batch-size", "1000"]) == 0
    assert "map 1000" in capsys.readouterr().out


def test_the_rate_defaults_to_the_declared_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main(["--markdown"]) == 0
    target = capacity.cdk_json_context()["targetMessagesPerSecond"]
    out = capsys.readouterr().out
    assert f"Inputs: rate {target:,} msg/s" in out
    assert "**this pipeline**" not in out, "cdk.json's settings carry its own target: no flag for this pipeline"


def test_context_overrides_reach_the_plan_as_cdk_synth_takes_them(capsys: pytest.CaptureFixture[str]) -> None:
    provisioned = '{"mode": "provisioned", "minWriteCapacity": 10, "maxWriteCapacity": 500}'
    arguments = ["--rate", "1000", "--markdown", "-c", f"stateTableCapacity={provisioned}", "-c", "reduceMemoryMb=1024"]
    assert capacity.main(arguments) == 0
    out = capsys.readouterr().out
    assert "tables StateTable provisioned, DeltaTable on-demand" in out
    assert "reduce 1024 MB" in out
    assert "StateTable needs 1,000 WCU/s, over its provisioned maximum of 500" in out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--rate", "0"], "argument --rate: must be between 0.001 and 1e+07, got 0"),
        (["--rate", "nan"], "argument --rate: must be a finite number, got nan"),
        (["--rate", "inf"], "argument --rate: must be a finite number, got inf"),
        (["--rate", "1e300"], "argument --rate: must be between"),
        (["--rate", "10", "--fan-out", "a,b"], "argument --fan-out: expected integers like 5,5,3"),
        (["--duplicates-pct", "60", "--out-of-order-pct", "40"], "must leave some messages that change a trade"),
        (["-c", "mapBatchingWindowSeconds=301"], "'mapBatchingWindowSeconds' must be an integer from 0 to 300"),
        (["--map-batch-size", "0"], "'mapBatchSize' must be an integer from 1 to 10000"),
        (["-c", "stateTableCapacity"], "expected KEY=VALUE"),
    ],
)
def test_the_command_line_rejects_nonsense_in_one_line(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = capacity.main(arguments)
    except SystemExit as exited:  # argparse's misuse
        status = exited.code  # type: ignore[assignment]
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_another_price_table_can_be_passed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = json.loads(DEFAULT_PRICE_TABLE.read_text())
    raw["dynamodb"]["write_request_unit_per_million"] = 0.0
    table = tmp_path / "prices.json"
    table.write_text(json.dumps(raw))
    assert capacity.main(["--rate", "1000", "--markdown", "--prices", str(table)]) == 0
    assert "| StateTable writes $/month | 0 | 0 |" in capsys.readouterr().out


def test_percentiles_are_measured_values_by_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert math.isnan(percentile([], 0.5))


def test_reduce_cpu_is_split_into_actions_and_messages() -> None:
    # 50 µs per action, 5 µs per message, exactly.
    samples = [(50.0 * a + 5.0 * m, a, m) for a, m in ((800, 1000), (500, 900), (200, 10000), (300, 10000))]
    model = fit_reduce_cpu(samples)
    assert model.per_action_us == pytest.approx(50)
    assert model.per_message_us == pytest.approx(5)
    assert fit_reduce_cpu([(100.0, 1, 1), (200.0, 2, 2)]).per_message_us >= 0  # collinear: one term only


def test_the_command_line_prints_both_load_profiles_and_when_to_choose_which(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 37: `python -m benchmarks.capacity --rate 50000` prints the steady-load plan beside the spiky one."""
    assert capacity.main(["--rate", "50000", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "Load profiles (`loadProfile`), each as `cdk synth` sizes it for 50,000 msg/s:" in out
    spiky_row = next(line for line in out.splitlines() if line.startswith("| spiky (spiky or unknown load) |"))
    steady_row = next(line for line in out.splitlines() if line.startswith("| steady (steady load) |"))
    assert "| all on-demand |" in spiky_row
    assert "| stream 72 shards, StateTable from 71,429 WCU at 70 %, DeltaTable from " in steady_row
    spiky_usd, steady_usd = (float(row.split(" | ")[2].replace(",", "")) for row in (spiky_row, steady_row))
    assert steady_usd < spiky_usd / 2
    (line,) = [line for line in out.splitlines() if line.startswith("Choose `loadProfile` steady")]
    assert "choose spiky, the default, for spiky or unknown load and for a trial" in line


def test_the_report_section_and_summary_name_both_profiles() -> None:
    profiles = capacity.load_profile_plans({"targetMessagesPerSecond": 50_000}, STANDARD, ServiceTimes(), PRICES)
    assert profiles.spiky.settings.stream == StreamCapacity() and profiles.steady.settings.stream.provisioned
    assert 0.0 < profiles.break_even_share < 1.0
    section = "\n".join(profiles_section(profiles))
    assert section.startswith("### Load profiles at 50,000 msg/s")
    assert "| steady (steady load) |" in section and "Choose `loadProfile` steady" in section
    (bullet,) = profiles_summary(profiles)
    assert bullet.startswith("- **Load profiles at 50,000 msg/s** (`loadProfile`") and "\n" not in bullet
    assert f"at least {profiles.break_even_share:.0%} of the declared one" in bullet
    assert profiles_section(None) == profiles_summary(None) == []
