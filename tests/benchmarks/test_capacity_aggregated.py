"""`python -m benchmarks.capacity --aggregated`, and the benchmark page's aggregated plan beside the plain one."""

from dataclasses import replace

import pytest

from benchmarks import capacity
from benchmarks.report import aggregation_section
from planner.inputs import Workload
from planner.model import plan_capacity

PLAIN = plan_capacity(Workload(rate=50_000))
AGGREGATED = plan_capacity(replace(PLAIN.workload, aggregated=True), PLAIN.settings)


def _row(markdown: str, label: str) -> list[str]:
    (line,) = [line for line in markdown.splitlines() if line.startswith(f"| {label} |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_aggregated_plan_is_printed_beside_one_record_per_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main(["--rate", "50000", "--aggregated", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "KPL-aggregated (147 messages in a 51,176 B Kinesis record)" in out
    assert "| Kinesis shards (write limits) | 15 | 15 |" in out  # the aggregated plan itself
    plain, aggregated = _row(out, "one record per message"), _row(out, "KPL-aggregated")
    columns = capacity.AGGREGATION_COLUMNS
    assert plain[columns.index("Kinesis shards")] == "50"
    assert aggregated[columns.index("Kinesis shards")] == "15"
    assert aggregated[columns.index("msg per Kinesis record")] == "147"
    assert aggregated[columns.index("state invocations/s")] == "3.7"  # 340 records/s in batches of 92
    assert plain[columns.index("state invocations/s")] == "500.0"


def test_without_the_flag_nothing_about_aggregation_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main(["--rate", "50000", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "KPL" not in out and "| Kinesis shards (write limits) | 50 | 50 |" in out


def test_the_rich_output_has_the_comparison_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main(["--rate", "50000", "--aggregated"]) == 0
    out = capsys.readouterr().out
    assert "One record per message against KPL-aggregated" in out
    assert "state invocation at a full batch s" in out


def test_the_report_section_shows_stream_and_state_cost_and_shards_of_both() -> None:
    section = "\n".join(aggregation_section(PLAIN, AGGREGATED))
    assert section.startswith("### With the same settings, from a KPL-aggregating producer")
    assert "--aggregated" in section and "147 messages of 300 B in each 51,176 B Kinesis record" in section
    plain, aggregated = _row(section, "one record per message"), _row(section, "KPL-aggregated")
    columns = capacity.AGGREGATION_COLUMNS
    on_demand = columns.index("on-demand stream $/month")
    assert plain[on_demand] == f"{PLAIN.stream.on_demand_usd:,.0f}"
    assert aggregated[on_demand] == f"{AGGREGATED.stream.on_demand_usd:,.0f}"
    provisioned = columns.index("provisioned stream $/month (shards)")
    assert aggregated[provisioned] == f"{AGGREGATED.stream.provisioned_usd:,.0f} (21)"
    (state_cost,) = [c.monthly_usd for c in AGGREGATED.ours.components if c.name == "state λ"]
    assert aggregated[columns.index("state λ $/month")] == f"{state_cost:,.0f}"
    assert aggregated[columns.index("state invocation at a full batch s")] == "27.6"  # 92 x 147 messages at 490 msg/s
