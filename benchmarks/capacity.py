"""The capacity planner's command line: the model's plan, costs and flags for a target rate.

    python -m benchmarks.capacity [--rate 50000] [--record-bytes 300] [-c mapBatchSize=2000] ...

The model lives in `planner.model` (the CDK app runs the same one at synthesis); this
module reads the settings exactly as the stack does, from cdk.json's context validated by
`stacks.settings.PipelineSettings`, with command-line overrides in cdk's own spelling
(`-c key=value`, or the named options below), and prints the plan for this pipeline and
the original design side by side, each DynamoDB table priced in both capacity modes, and
what cannot keep up.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from benchmarks import REPOSITORY_ROOT
from toolkit.node_runtime import silence_node_banners

silence_node_banners()  # before `stacks` imports the CDK, whose jsii runtime would print them as bytes
from planner.model import (  # noqa: E402
    PIPELINE_TABLES,
    CapacityPlan,
    ServiceTimes,
    Settings,
    TableModes,
    Workload,
    break_even_utilization,
    lambda_state_rate,
    plan_capacity,
)
from planner.prices import DEFAULT_PRICE_TABLE, load_price_table  # noqa: E402
from stacks.capacity import planned_settings  # noqa: E402
from stacks.settings import PipelineSettings, SettingsError  # noqa: E402
from toolkit.untrusted import untrusted_text  # noqa: E402

CDK_JSON = REPOSITORY_ROOT / "cdk.json"

NAMED_SETTINGS = {
    "state_batch_size": "stateBatchSize",
    "parallelization_factor": "stateParallelizationFactor",
    "map_batch_size": "mapBatchSize",
    "map_batching_window": "mapBatchingWindowSeconds",
    "reduce_batch_size": "reduceBatchSize",
    "reduce_memory_mb": "reduceMemoryMb",
    "idempotency": "reduceIdempotency",
    "aggregate_slices": "aggregateSlices",
    "reduce_parallelization_factor": "reduceParallelizationFactor",
}
"""Named options that are shorthands for `-c <cdk.json key>=value`."""


def cdk_json_context(path: Path = CDK_JSON) -> dict[str, Any]:
    """The settings `cdk synth` reads: the `context` of cdk.json."""
    context: dict[str, Any] = json.loads(path.read_text())["context"]
    return context


def pipeline_settings(overrides: Mapping[str, Any], cdk_json: Path = CDK_JSON) -> PipelineSettings:
    """cdk.json's settings with `overrides` applied, validated as `cdk synth -c key=value` does."""
    context = {**cdk_json_context(cdk_json), **overrides}
    return PipelineSettings.from_context(context.get)


def _rows(plan: CapacityPlan) -> list[tuple[str, str, str]]:
    ours, original = plan.ours, plan.original
    rows = [
        ("Kinesis shards (write limits)", f"{ours.kinesis_shards}", f"{original.kinesis_shards}"),
        (
            "state executions (parallelization needed)",
            f"{ours.state_executions:,.1f} (x{ours.state_parallelization_needed})",
            f"{original.state_executions:,.1f} (x{original.state_parallelization_needed})",
        ),
        ("map executions", f"{ours.map_executions:,.1f}", f"{original.map_executions:,.1f}"),
        ("effective map batch (records)", f"{ours.effective_map_batch:,.0f}", f"{original.effective_map_batch:,.0f}"),
        ("delta batches/s", f"{ours.delta_batches_per_second:,.1f}", f"{original.delta_batches_per_second:,.1f}"),
        (
            "reduce transactions/s (actions each)",
            f"{ours.reduce_transactions_per_second:,.1f} ({ours.actions_per_transaction:.0f})",
            f"{original.reduce_transactions_per_second:,.1f} ({original.actions_per_transaction:.0f})",
        ),
        (
            "reducers (busy each)",
            f"{ours.reduce_lanes} ({ours.reduce_busy_fraction:.0%})",
            f"{original.reduce_lanes} ({original.reduce_busy_fraction:.0%})",
        ),
        (
            "aggregate slices in use (per invocation)",
            f"{ours.slices_in_use:.1f} ({ours.slices_per_invocation:.1f})",
            f"{original.slices_in_use:.0f} ({original.slices_per_invocation:.0f})",
        ),
        (
            "StateTable WRU/s",
            f"{ours.state_write_units_per_second:,.0f}",
            f"{original.state_write_units_per_second:,.0f}",
        ),
        (
            "DeltaTable WRU/s",
            f"{ours.delta_write_units_per_second:,.0f}",
            f"{original.delta_write_units_per_second:,.0f}",
        ),
        (
            "DeltaTable RRU/s (map's coverage Query)",
            f"{ours.delta_read_units_per_second:,.0f}",
            f"{original.delta_read_units_per_second:,.0f}",
        ),
        (
            "AggregateTable WRU/s",
            f"{ours.aggregate_write_units_per_second:,.0f}",
            f"{original.aggregate_write_units_per_second:,.0f}",
        ),
        (
            "hottest aggregate item WCU/s (limit 1,000)",
            f"{ours.hottest_item_write_units_per_second:,.0f}",
            f"{original.hottest_item_write_units_per_second:,.0f}",
        ),
    ]
    for mine, theirs in zip(ours.components, original.components, strict=True):
        rows.append((f"{mine.name} $/month", f"{mine.monthly_usd:,.0f}", f"{theirs.monthly_usd:,.0f}"))
    rows.append(("total $/month", f"{ours.monthly_usd:,.0f}", f"{original.monthly_usd:,.0f}"))
    per_million = plan.prices.seconds_per_month * plan.workload.rate / 1e6
    rows.append(
        ("$ per million messages", f"{ours.monthly_usd / per_million:.3f}", f"{original.monthly_usd / per_million:.3f}")
    )
    return rows


def _table_modes(settings: Settings) -> str:
    return ", ".join(f"{table} {settings.table_capacity(table).mode}" for table in PIPELINE_TABLES)


def describe_inputs(plan: CapacityPlan) -> str:
    w, s, t = plan.workload, plan.settings, plan.times
    return (
        f"rate {w.rate:,.0f} msg/s, record {w.record_bytes} B, duplicates {w.duplicates_pct:g} %, "
        f"out-of-order {w.out_of_order_pct:g} %, modifications {w.modifications_pct:g} % "
        f"(moves {w.move_share:.0%}), state writes/msg {w.state_writes_per_message:.3f}, "
        f"fan-out {'x'.join(map(str, w.fan_out))}; "
        f"batches state {s.state_batch_size} / map {s.map_batch_size} (window {s.map_batching_window_seconds:g} s) / "
        f"reduce {s.reduce_batch_size}, parallelization {s.state_parallelization_factor}, memory state "
        f"{s.state_memory_mb} / map {s.map_memory_mb} / reduce {s.reduce_memory_mb} MB, "
        f"{'crt+marker' if s.markers else 'crt'}, tables {_table_modes(s)}; "
        f"state instance {t.state_messages_per_second:,.0f} msg/s "
        f"on a full core = {lambda_state_rate(t, s):,.0f} msg/s at {s.state_memory_mb} MB "
        f"(original {t.original_state_messages_per_second:,.0f}), write {t.write_round_trip_ms:g} ms, "
        f"transaction {t.transaction_round_trip_ms:g} ms; prices {plan.prices.region} as of {plan.prices.as_of}"
    )


def _mode_rows(modes: Sequence[TableModes]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [
        (
            m.table,
            f"{m.write_units_per_second:,.0f}",
            f"{m.read_units_per_second:,.0f}",
            f"{m.on_demand_usd:,.0f}",
            f"{m.provisioned_write_capacity:,.0f} / {m.provisioned_read_capacity:,.0f} "
            f"({m.target_utilization_percent} %)",
            f"{m.provisioned_usd:,.0f}",
            m.cheaper,
        )
        for m in modes
    ]
    on_demand = sum(m.on_demand_usd for m in modes)
    provisioned = sum(m.provisioned_usd for m in modes)
    cheapest = sum(min(m.on_demand_usd, m.provisioned_usd) for m in modes)
    rows.append(
        ("all three", "", "", f"{on_demand:,.0f}", "", f"{provisioned:,.0f}", f"each the cheaper: {cheapest:,.0f}")
    )
    return rows


MODE_COLUMNS = (
    "table",
    "WRU/s",
    "RRU/s",
    "on-demand $/month",
    "provisioned WCU / RCU (target)",
    "provisioned $/month",
    "cheaper",
)


def describe_modes(plan: CapacityPlan) -> str:
    """The break-even utilisation and what the comparison assumes."""
    prices = plan.prices
    return (
        f"Provisioned at {prices.dynamodb_write_capacity_unit_hour:g} $/WCU-hour against on-demand "
        f"{prices.dynamodb_write_unit * 1e6:g} $ per million WRU: provisioned writes cost less while the "
        f"average utilisation (consumed / provisioned) stays above **{break_even_utilization(prices):.1%}** "
        f"(break-even); reads are priced alike ({prices.dynamodb_read_capacity_unit_hour:g} $/RCU-hour against "
        f"{prices.dynamodb_read_unit * 1e6:g} $ per million RRU). The provisioned columns assume a steady load "
        "that auto scaling holds at each table's target utilisation (`targetUtilizationPercent`, within its "
        "min and max, for writes and reads); a load that swings faster than auto scaling follows (minutes) "
        "averages lower and is throttled on its peaks until capacity catches up, so choose provisioned for "
        "steady load well above break-even, on-demand for spiky or unknown load."
    )


def print_whole(console: Console, table: Table) -> None:
    """A table at its natural width, never squeezed into the terminal's or a pipe's 80 columns:
    a figure or a name is never cut (a terminal narrower than the table wraps its lines instead)."""
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    width = console.width
    console.width = max(width, natural)
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


def render_rich(plan: CapacityPlan, console: Console) -> None:
    """The plan as rich tables. Every cell and line is `untrusted_text`: settings (`-c key=value`,
    cdk.json) and the price table's fields are not ours, and a string would be parsed as markup."""
    table = Table(title=f"Capacity plan for {plan.workload.rate:,.0f} messages/s", title_justify="left")
    table.add_column("", no_wrap=True)
    table.add_column("this pipeline", justify="right", no_wrap=True)
    table.add_column("original design", justify="right", no_wrap=True)
    for row in _rows(plan):
        table.add_row(*map(untrusted_text, row))
    print_whole(console, table)
    modes = Table(title="DynamoDB capacity modes (this pipeline)", title_justify="left")
    for index, column in enumerate(MODE_COLUMNS):
        modes.add_column(column, justify="left" if index == 0 else "right", no_wrap=True)
    for mode_row in _mode_rows(plan.modes):
        modes.add_row(*map(untrusted_text, mode_row))
    print_whole(console, modes)
    console.print(untrusted_text(describe_modes(plan).replace("**", "")))
    console.print(untrusted_text(describe_inputs(plan), "dim"))
    for design in (plan.ours, plan.original):
        for flag in design.flags:
            console.print(
                Text.assemble(
                    untrusted_text(f"⚠ {design.design}", "bold yellow"),
                    untrusted_text(f": {flag.problem} → "),
                    untrusted_text(flag.change, "bold"),
                )
            )
    if not plan.ours.stalls:
        console.print(Text("this pipeline keeps up with these settings", style="green"))


def render_modes_markdown(plan: CapacityPlan) -> str:
    lines = [
        "| " + " | ".join(MODE_COLUMNS) + " |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
        *("| " + " | ".join(row) + " |" for row in _mode_rows(plan.modes)),
        "",
        describe_modes(plan),
    ]
    return "\n".join(lines) + "\n"


def render_markdown(plan: CapacityPlan) -> str:
    lines = [
        "| | this pipeline | original design |",
        "| --- | ---: | ---: |",
        *(f"| {name} | {ours} | {original} |" for name, ours, original in _rows(plan)),
        "",
        f"Inputs: {describe_inputs(plan)}.",
        "",
        "DynamoDB capacity modes (this pipeline):",
        "",
        render_modes_markdown(plan),
    ]
    flags = [(design.design, flag) for design in (plan.ours, plan.original) for flag in design.flags]
    if flags:
        lines.append("Flags (what cannot keep up, and the setting to change):")
        lines.append("")
        lines.extend(f"- **{design}**: {flag.problem} → **{flag.change}**" for design, flag in flags)
    else:
        lines.append("No flags: every stage keeps up with these settings.")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    defaults, times = Workload(rate=0), ServiceTimes()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, help="messages per second (default: cdk.json's targetMessagesPerSecond)")
    parser.add_argument("--record-bytes", type=int, default=defaults.record_bytes)
    parser.add_argument("--duplicates-pct", type=float, default=defaults.duplicates_pct)
    parser.add_argument("--out-of-order-pct", type=float, default=defaults.out_of_order_pct)
    parser.add_argument("--modifications-pct", type=float, default=defaults.modifications_pct)
    parser.add_argument("--move-share", type=float, default=defaults.move_share)
    parser.add_argument(
        "--state-writes-per-message",
        type=float,
        default=defaults.state_writes_per_message,
        help="ours: conditional writes per message after in-batch selection and the version cache (make bench)",
    )
    parser.add_argument("--fan-out", default=",".join(map(str, defaults.fan_out)), help="values per level, e.g. 5,5,3")
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a cdk.json setting, as `cdk synth -c` does (JSON values for objects)",
    )
    for option, key in NAMED_SETTINGS.items():
        parser.add_argument(f"--{option.replace('_', '-')}", dest=option, help=f"the same as -c {key}=...")
    parser.add_argument("--state-memory-mb", type=int, help="what if the state function had this much memory")
    parser.add_argument("--map-memory-mb", type=int, help="what if the map function had this much memory")
    parser.add_argument("--state-rate", type=float, default=times.state_messages_per_second, help="msg/s/instance")
    parser.add_argument("--original-state-rate", type=float, default=times.original_state_messages_per_second)
    parser.add_argument("--write-ms", type=float, default=times.write_round_trip_ms)
    parser.add_argument("--transaction-ms", type=float, default=times.transaction_round_trip_ms)
    parser.add_argument("--prices", type=Path, default=DEFAULT_PRICE_TABLE)
    parser.add_argument("--markdown", action="store_true", help="print markdown instead of a table")
    return parser


def context_overrides(arguments: argparse.Namespace) -> dict[str, str]:
    """`-c key=value` pairs and the named shorthands, as the CDK CLI would pass them (strings)."""
    overrides: dict[str, str] = {}
    for pair in arguments.context:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise SettingsError(f"-c {pair!r}: expected KEY=VALUE")
        overrides[key] = value
    for option, key in NAMED_SETTINGS.items():
        value = getattr(arguments, option)
        if value is not None:
            overrides[key] = value
    return overrides


def main(argv: Sequence[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    try:
        fan_out = tuple(int(part) for part in arguments.fan_out.split(",") if part.strip())
    except ValueError:
        print(f"--fan-out {arguments.fan_out!r}: expected integers like 5,5,3", file=sys.stderr)
        return 2
    try:
        settings = pipeline_settings(context_overrides(arguments))
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rate = settings.target_messages_per_second if arguments.rate is None else arguments.rate
    if rate <= 0 or not fan_out or min(fan_out) < 1:
        print("--rate must be positive and --fan-out at least one level of at least 1", file=sys.stderr)
        return 2
    planned = planned_settings(settings)
    what_if = {
        name: value
        for name, value in (("state_memory_mb", arguments.state_memory_mb), ("map_memory_mb", arguments.map_memory_mb))
        if value is not None
    }
    plan = plan_capacity(
        Workload(
            rate=rate,
            record_bytes=arguments.record_bytes,
            duplicates_pct=arguments.duplicates_pct,
            out_of_order_pct=arguments.out_of_order_pct,
            modifications_pct=arguments.modifications_pct,
            move_share=arguments.move_share,
            fan_out=fan_out,
            state_writes_per_message=arguments.state_writes_per_message,
        ),
        replace(planned, **what_if),
        ServiceTimes(
            state_messages_per_second=arguments.state_rate,
            original_state_messages_per_second=arguments.original_state_rate,
            write_round_trip_ms=arguments.write_ms,
            transaction_round_trip_ms=arguments.transaction_ms,
        ),
        load_price_table(arguments.prices),
    )
    if arguments.markdown:
        print(render_markdown(plan), end="")
    else:
        render_rich(plan, Console())
    return 0


if __name__ == "__main__":
    sys.exit(main())
