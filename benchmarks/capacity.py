"""The capacity planner's command line: the model's plan, costs and flags for a target rate.

    python -m benchmarks.capacity [--rate 50000] [--record-bytes 300] [--aggregated] [-c mapBatchSize=2000] ...

The model lives in `planner.model` (the CDK app runs the same one at synthesis); this
module reads the settings exactly as the stack does, from cdk.json's context validated by
`stacks.settings.PipelineSettings`, with command-line overrides in cdk's own spelling
(`-c key=value`, or the named options below), and prints the plan for this pipeline and
the original design side by side, each DynamoDB table priced in both capacity modes, and
what cannot keep up; then the plan of each load profile (`loadProfile`: spiky or unknown load,
everything on-demand; steady load, each table and the stream in its cheaper mode) as `cdk synth`
sizes it for the rate, and when to choose which.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from benchmarks import REPOSITORY_ROOT
from toolkit.node_runtime import silence_node_banners

silence_node_banners()  # before `stacks` imports the CDK, whose jsii runtime would print them as bytes
from planner.archive import archive_factor_needed  # noqa: E402
from planner.ingest import PROVISIONED_SHARD_UTILIZATION  # noqa: E402
from planner.inputs import MAX_PARALLELIZATION_FACTOR, ServiceTimes, Settings, Workload  # noqa: E402
from planner.load_profile import (  # noqa: E402
    EVERY,
    KEEP,
    LOAD_PROFILES,
    CapacityChoice,
    LoadProfile,
    steady_break_even_share,
)
from planner.model import ORIGINAL, OURS, CapacityPlan, plan_capacity, plan_design, reducers_that_keep_up  # noqa: E402
from planner.plan import DesignPlan  # noqa: E402
from planner.prices import DEFAULT_PRICE_TABLE, PriceTable, load_price_table  # noqa: E402
from planner.reduce import BUSY_LIMIT  # noqa: E402
from planner.scale_out import (  # noqa: E402
    cheapest_settings,
    describe_choice,
    describe_stream_capacity,
)
from planner.state import lambda_state_rate, state_shards_needed  # noqa: E402
from planner.tables import PIPELINE_TABLES, TABLE_SETTINGS, TableModes, break_even_utilization  # noqa: E402
from stacks.settings import PipelineSettings, SettingsError, planned_settings  # noqa: E402
from toolkit.cli import OneLineArgumentParser, bounded, exit_with  # noqa: E402
from toolkit.untrusted import printable, untrusted_text  # noqa: E402

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


def _state_needs(plan: CapacityPlan, original: bool = False) -> str:
    """A design's state executions and the parallelization it needs; from a KPL-aggregating producer,
    which gets no parallelization factor (`planner.state.state_lanes_per_shard`), the shards instead."""
    design, ran = (ORIGINAL, plan.original) if original else (OURS, plan.ours)
    if not plan.workload.aggregated:
        return f"{ran.state_executions:,.1f} (x{ran.state_parallelization_needed})"
    shards = state_shards_needed(plan.workload, design.state_rate(plan.times, plan.settings))
    return f"{ran.state_executions:,.1f} (x1, {shards:,} shards)"


def _rows(plan: CapacityPlan) -> list[tuple[str, str, str]]:
    ours, original = plan.ours, plan.original
    rows = [
        ("Kinesis shards (write limits)", f"{ours.kinesis_shards}", f"{original.kinesis_shards}"),
        ("state executions (parallelization needed)", _state_needs(plan), _state_needs(plan, original=True)),
        ("map executions", f"{ours.map_executions:,.1f}", f"{original.map_executions:,.1f}"),
        ("effective map batch (records)", f"{ours.effective_map_batch:,.0f}", f"{original.effective_map_batch:,.0f}"),
        ("delta batches/s", f"{ours.delta_batches_per_second:,.1f}", f"{original.delta_batches_per_second:,.1f}"),
        (
            "reduce transactions/s (actions each)",
            f"{ours.reduce_transactions_per_second:,.1f} ({ours.actions_per_transaction:.0f})",
            f"{original.reduce_transactions_per_second:,.1f} ({original.actions_per_transaction:.0f})",
        ),
        (
            "reduce transaction conflicts/s (resent)",
            f"{ours.reduce_conflicts_per_second:,.1f}",
            f"{original.reduce_conflicts_per_second:,.1f}",
        ),
        (
            "reducers (busy each)",
            f"{ours.reduce_lanes} ({ours.reduce_busy_fraction:.0%})",
            f"{original.reduce_lanes} ({original.reduce_busy_fraction:.0%})",
        ),
        (
            "effective reduce batch (delta batches)",
            f"{ours.effective_reduce_batch:,.1f}",
            f"{original.effective_reduce_batch:,.1f}",
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
        (
            "archive objects/s (delta items each), S3 PUTs/msg",
            f"{ours.archive_objects_per_second:,.1f} ({_archive_batch(ours):,.0f}), "
            f"{ours.archive_puts_per_message:.5f}",
            "-",
        ),
    ]
    rows.append(("latency p50 (model, s)", _seconds(ours.latency_p50_seconds), _seconds(original.latency_p50_seconds)))
    theirs = {component.name: component for component in original.components}
    for mine in ours.components:
        other = theirs.get(mine.name)
        rows.append((f"{mine.name} $/month", f"{mine.monthly_usd:,.0f}", f"{other.monthly_usd:,.0f}" if other else "-"))
    rows.append(("total $/month", f"{ours.monthly_usd:,.0f}", f"{original.monthly_usd:,.0f}"))
    per_million = plan.prices.seconds_per_month * plan.workload.rate / 1e6
    rows.append(
        ("$ per million messages", f"{ours.monthly_usd / per_million:.3f}", f"{original.monthly_usd / per_million:.3f}")
    )
    return rows


def _archive_batch(plan: DesignPlan) -> float:
    """Delta items an archive invocation takes (one batch object each)."""
    return next((timing.batch for timing in plan.timings if timing.stage == "archive"), 0.0)


def _seconds(value: float) -> str:
    return "unbounded (falls behind)" if math.isinf(value) else f"{value:.2f}"


TIMING_COLUMNS = ("stage", "lanes", "batch", "between invocations s", "iterator age s", "invocation s", "busy")


def _timing_rows(plan: CapacityPlan) -> list[tuple[str, ...]]:
    """This pipeline's stages in steady state: what the latency model adds up."""
    rows: list[tuple[str, ...]] = [
        (
            timing.stage,
            f"{timing.lanes:,}",
            f"{timing.batch:,.1f}",
            f"{timing.interval_seconds:.3f}",
            f"{timing.iterator_age_seconds:.3f}",
            f"{timing.invocation_seconds:.3f}",
            f"{timing.busy:.0%}",
        )
        for timing in plan.ours.timings
    ]
    rows.append(("**p50, put to commit**", "", "", "", "", _seconds(plan.ours.latency_p50_seconds), ""))
    return rows


def render_timings_markdown(plan: CapacityPlan) -> str:
    lines = [
        "| " + " | ".join(TIMING_COLUMNS) + " |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *("| " + " | ".join(row) + " |" for row in _timing_rows(plan)),
        "",
        LATENCY_NOTE,
    ]
    return "\n".join(lines) + "\n"


LATENCY_NOTE = (
    "Latency model: a record waits half its lane's interval between invocations (its iterator age when read: "
    "Lambda polls a Kinesis shard once a second, or as fast as batches fill, a DynamoDB stream shard four "
    "times a second, or after the batching window) and then for the invocation that commits its batch; a lane "
    "whose invocations outlast the poll interval takes what arrived meanwhile, so its batches grow. The p50 is "
    "the sum of the stages' means (each wait spread evenly); the put and a record's time to become readable "
    "on a stream are left out. Busy: the share of what a stage's lanes carry at full batches."
)


def _table_modes(settings: Settings) -> str:
    return ", ".join(f"{table} {settings.table_capacity(table).mode}" for table in PIPELINE_TABLES)


def describe_inputs(plan: CapacityPlan) -> str:
    w, s, t = plan.workload, plan.settings, plan.times
    return (
        f"rate {w.rate:,.0f} msg/s, record {w.record_bytes} B, duplicates {w.duplicates_pct:g} %, "
        f"out-of-order {w.out_of_order_pct:g} %, modifications {w.modifications_pct:g} % "
        f"(moves {w.move_share:.0%}), state writes/msg {w.state_writes_per_message:.3f}, "
        f"fan-out {'x'.join(map(str, w.fan_out))}{_aggregation(w)}; "
        f"batches state {s.state_batch_size} / map {s.map_batch_size} (window {s.map_batching_window_seconds:g} s) / "
        f"reduce {s.reduce_batch_size}, parallelization {s.state_parallelization_factor}, memory state "
        f"{s.state_memory_mb} / map {s.map_memory_mb} / reduce {s.reduce_memory_mb} MB, "
        f"{'crt+marker' if s.markers else 'crt'}, tables {_table_modes(s)}; "
        f"state instance {t.state_messages_per_second:,.0f} msg/s "
        f"on a full core = {lambda_state_rate(t, s):,.0f} msg/s at {s.state_memory_mb} MB "
        f"(original {t.original_state_messages_per_second:,.0f}), write {t.write_round_trip_ms:g} ms, "
        f"transaction {t.transaction_round_trip_ms:g} ms; prices {plan.prices.region} as of {plan.prices.as_of}"
    )


def _aggregation(workload: Workload) -> str:
    """The inputs' words for KPL aggregation: nothing when each message is its own record."""
    if not workload.aggregated:
        return ""
    return (
        f", KPL-aggregated ({workload.messages_per_kinesis_record:,} messages in a "
        f"{workload.kinesis_record_bytes:,} B Kinesis record)"
    )


AGGREGATION_COLUMNS = (
    "producer",
    "msg per Kinesis record",
    "Kinesis records/s",
    "Kinesis shards",
    "on-demand stream $/month",
    "provisioned stream $/month (shards)",
    "state invocations/s",
    "state executions (parallelization needed)",
    "state invocation at a full batch s",
    "state λ $/month",
    "total $/month",
)


def _aggregation_row(label: str, plan: CapacityPlan) -> tuple[str, ...]:
    workload, ours = plan.workload, plan.ours
    state = next(timing for timing in ours.timings if timing.stage == "state")
    state_cost = next(component.monthly_usd for component in ours.components if component.name == "state λ")
    full_batch = workload.records_per_invocation(plan.settings.state_batch_size)
    full_batch_seconds = full_batch * state.invocation_seconds / state.batch
    return (
        label,
        f"{workload.messages_per_kinesis_record:,}",
        f"{workload.kinesis_records_per_second:,.0f}",
        f"{ours.kinesis_shards}",
        f"{plan.stream.on_demand_usd:,.0f}",
        f"{plan.stream.provisioned_usd:,.0f} ({plan.stream.provisioned_shards})",
        f"{workload.kinesis_records_per_second / full_batch:,.1f}",
        _state_needs(plan),
        f"{full_batch_seconds:,.1f}",
        f"{state_cost:,.0f}",
        f"{ours.monthly_usd:,.0f}",
    )


def _aggregation_rows(plain: CapacityPlan, aggregated: CapacityPlan) -> list[tuple[str, ...]]:
    return [_aggregation_row("one record per message", plain), _aggregation_row("KPL-aggregated", aggregated)]


def render_aggregation_markdown(plain: CapacityPlan, aggregated: CapacityPlan) -> str:
    """One record per message beside KPL-aggregated records, at the same rate and settings (this pipeline)."""
    lines = [
        "| " + " | ".join(AGGREGATION_COLUMNS) + " |",
        "| --- |" + " ---: |" * (len(AGGREGATION_COLUMNS) - 1),
        *("| " + " | ".join(row) + " |" for row in _aggregation_rows(plain, aggregated)),
        "",
        AGGREGATION_NOTE,
    ]
    return "\n".join(lines) + "\n"


def render_aggregation_rich(plain: CapacityPlan, aggregated: CapacityPlan, console: Console) -> None:
    """`render_aggregation_markdown` as a rich table."""
    table = Table(title="One record per message against KPL-aggregated (this pipeline)", title_justify="left")
    for index, column in enumerate(AGGREGATION_COLUMNS):
        table.add_column(column, justify="left" if index == 0 else "right", no_wrap=True)
    for row in _aggregation_rows(plain, aggregated):
        table.add_row(*map(untrusted_text, row))
    print_whole(console, table)
    console.print(untrusted_text(AGGREGATION_NOTE))


AGGREGATION_NOTE = (
    "Aggregated, a Kinesis record carries as many messages as fit in the KPL's 50 KiB aggregate, so the "
    "shards are sized by 1 MiB/s rather than 1,000 records/s; on-demand bills data in per record rounded "
    "up to 1 KB and provisioned one PUT payload unit per started 25 KB of a record, so both bill an "
    "aggregate by its bytes. The state function is invoked per batch of Kinesis records but works and is "
    "billed per message: its executions stay, its invocations drop, and a shard's messages arrive in fewer, "
    "larger batches, of at most `stateBatchSize` records or what Lambda's 6 MB event holds base64-encoded "
    "(the state function's timeout is 900 s). The parallelization factor does not work with Kinesis "
    "aggregation (Lambda Developer Guide), so aggregated a shard runs one state batch at a time: the state "
    "stage needs shards, as many as keep one lane each within 70 % busy (x1, N shards)."
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


def describe_stream(plan: CapacityPlan) -> str:
    """The Kinesis stream in both capacity modes (`streamMode`)."""
    stream, configured = plan.stream, plan.settings.stream
    shards = (
        f"its {stream.provisioned_shards} shards"
        if configured.provisioned
        else f"{stream.provisioned_shards} shards, each filled to {PROVISIONED_SHARD_UTILIZATION:.0%} of its limits"
    )
    return (
        f"Kinesis (`streamMode` {configured.mode}): on-demand ${stream.on_demand_usd:,.0f} a month (stream-hours, "
        f"data in and out by the GB) against provisioned ${stream.provisioned_usd:,.0f} with {shards} "
        f"(shard-hours and 25 KB PUT payload units); {stream.cheaper} is cheaper at this steady rate."
    )


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
    timings = Table(title="Stages in steady state (this pipeline)", title_justify="left")
    for index, column in enumerate(TIMING_COLUMNS):
        timings.add_column(column, justify="left" if index == 0 else "right", no_wrap=True)
    for timing_row in _timing_rows(plan):
        timings.add_row(*(untrusted_text(cell.replace("**", "")) for cell in timing_row))
    print_whole(console, timings)
    console.print(untrusted_text(describe_stream(plan).replace("`", "")))
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
        describe_stream(plan),
        "",
        "Stages in steady state (this pipeline):",
        "",
        render_timings_markdown(plan),
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
    parser = OneLineArgumentParser(
        prog="python -m benchmarks.capacity", description=__doc__.split("\n\n")[0], error_prefix="error: "
    )
    percentage, memory = bounded(float, 0, 100), bounded(int, LAMBDA_MIN_MEMORY_MB, LAMBDA_MAX_MEMORY_MB)
    service_rate, round_trip = bounded(float, 1e-3, MAX_PLANNED_RATE), bounded(float, 1e-3, 60_000)
    parser.add_argument(
        "--rate",
        type=bounded(float, MIN_RATE, MAX_PLANNED_RATE),
        help="messages per second (default: cdk.json's targetMessagesPerSecond)",
    )
    parser.add_argument("--record-bytes", type=bounded(int, 1, KINESIS_RECORD_MAX_BYTES), default=defaults.record_bytes)
    parser.add_argument("--duplicates-pct", type=percentage, default=defaults.duplicates_pct)
    parser.add_argument("--out-of-order-pct", type=percentage, default=defaults.out_of_order_pct)
    parser.add_argument("--modifications-pct", type=percentage, default=defaults.modifications_pct)
    parser.add_argument("--move-share", type=bounded(float, 0, 1), default=defaults.move_share)
    parser.add_argument(
        "--state-writes-per-message",
        type=bounded(float, 0, 100),
        default=defaults.state_writes_per_message,
        help="ours: conditional writes per message after in-batch selection and the version cache (make bench)",
    )
    parser.add_argument(
        "--aggregated",
        action="store_true",
        help="the producer sends KPL-aggregated records (send --aggregate): plan that, beside one record per message",
    )
    parser.add_argument(
        "--fan-out",
        type=fan_out_levels,
        default=",".join(map(str, defaults.fan_out)),
        help="values per level, e.g. 5,5,3",
    )
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
    parser.add_argument("--state-memory-mb", type=memory, help="what if the state function had this much memory")
    parser.add_argument("--map-memory-mb", type=memory, help="what if the map function had this much memory")
    parser.add_argument(
        "--state-rate", type=service_rate, default=times.state_messages_per_second, help="msg/s/instance"
    )
    parser.add_argument("--original-state-rate", type=service_rate, default=times.original_state_messages_per_second)
    parser.add_argument("--write-ms", type=round_trip, default=times.write_round_trip_ms)
    parser.add_argument("--transaction-ms", type=round_trip, default=times.transaction_round_trip_ms)
    parser.add_argument("--prices", type=Path, default=DEFAULT_PRICE_TABLE)
    parser.add_argument("--markdown", action="store_true", help="print markdown instead of a table")
    parser.add_argument(
        "--scale-out",
        action="store_true",
        help="print the searches' cheapest settings within the targets (planner/scale_out.py), as markdown",
    )
    return parser


MIN_RATE = 1e-3
MAX_PLANNED_RATE = 10_000_000.0
"""Messages a second the planner plans for at most: far beyond one stack (the model's sums overflow nowhere near)."""
KINESIS_RECORD_MAX_BYTES = 1024 * 1024
LAMBDA_MIN_MEMORY_MB, LAMBDA_MAX_MEMORY_MB = 128, 10_240
MAX_FAN_OUT_LEVELS, MAX_FAN_OUT = 16, 1_000_000


def fan_out_levels(text: str) -> tuple[int, ...]:
    """``--fan-out``: values per level, root first (``5,5,3``)."""
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 5,5,3, got {printable(text)!r}") from None
    if not levels or len(levels) > MAX_FAN_OUT_LEVELS or not all(1 <= level <= MAX_FAN_OUT for level in levels):
        raise argparse.ArgumentTypeError(
            f"expected 1 to {MAX_FAN_OUT_LEVELS} levels of 1 to {MAX_FAN_OUT:,} values each, got {printable(text)!r}"
        )
    return levels


def price_table_problem(path: Path, error: Exception) -> str:
    """One line naming the price table that could not be used."""
    if isinstance(error, OSError):
        return f"cannot read the price table {path}: {error.strerror or error}"
    if isinstance(error, UnicodeDecodeError):
        return f"the price table {path} is not UTF-8 text (byte {error.start})"
    if isinstance(error, ValueError) and not str(error):
        return f"the price table {path} is not valid JSON"
    return f"the price table {path} is not usable: {printable(' '.join(f'{type(error).__name__} {error}'.split()))}"


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
    parser = build_parser()
    arguments = parser.parse_args(argv)
    fan_out: tuple[int, ...] = arguments.fan_out  # argparse applies the type to the default too
    if arguments.duplicates_pct + arguments.out_of_order_pct >= 100:
        parser.error("--duplicates-pct and --out-of-order-pct must leave some messages that change a trade")
    try:
        overrides: dict[str, Any] = dict(context_overrides(arguments))
        if arguments.rate is not None:
            # The plan is of a stack declaring this rate: its `auto` settings are chosen for it.
            overrides["targetMessagesPerSecond"] = max(1, math.ceil(arguments.rate))
        settings = pipeline_settings(overrides)
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rate = settings.target_messages_per_second if arguments.rate is None else arguments.rate
    try:
        prices = load_price_table(arguments.prices)
    except (OSError, ValueError, LookupError, TypeError, AttributeError) as error:
        print(f"error: {price_table_problem(arguments.prices, error)}", file=sys.stderr)
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
            aggregated=arguments.aggregated,
        ),
        replace(planned, **what_if),
        ServiceTimes(
            state_messages_per_second=arguments.state_rate,
            original_state_messages_per_second=arguments.original_state_rate,
            write_round_trip_ms=arguments.write_ms,
            transaction_round_trip_ms=arguments.transaction_ms,
        ),
        prices,
    )
    profiles = load_profile_plans(overrides, plan.workload, plan.times, prices, what_if)
    if arguments.scale_out:
        scenarios = scale_out_scenarios(
            plan.workload, plan.settings, plan.times, plan.prices, start_label="these settings"
        )
        print(render_scenarios_markdown(scenarios), end="")
        print("\n" + render_profiles_markdown(profiles), end="")
        return 0
    plain = (
        plan_capacity(replace(plan.workload, aggregated=False), plan.settings, plan.times, plan.prices)
        if arguments.aggregated
        else None
    )
    if arguments.markdown:
        print(render_markdown(plan), end="")
        if plain is not None:
            print("\nOne record per message against KPL-aggregated (this pipeline):\n")
            print(render_aggregation_markdown(plain, plan), end="")
        print("\n" + render_profiles_markdown(profiles), end="")
    else:
        console = Console()
        render_rich(plan, console)
        if plain is not None:
            render_aggregation_rich(plain, plan, console)
        render_profiles_rich(profiles, console)
    return 0


@dataclass(frozen=True)
class ProfilePlan:
    """One load profile's plan: the settings `cdk synth` sizes for the rate with `loadProfile` set to it."""

    profile: LoadProfile
    settings: Settings
    plan: DesignPlan
    workload: Workload
    prices: PriceTable

    @property
    def per_million_usd(self) -> float:
        return self.plan.monthly_usd / (self.prices.seconds_per_month * self.workload.rate / 1e6)


@dataclass(frozen=True)
class ProfilePlans:
    """The spiky and the steady plan at one rate, and the share of that rate above which steady costs less."""

    spiky: ProfilePlan
    steady: ProfilePlan
    break_even_share: float


PROFILE_NAMES: dict[LoadProfile, str] = {"spiky": "spiky or unknown load", "steady": "steady load"}


def load_profile_plans(
    overrides: Mapping[str, Any],
    workload: Workload,
    times: ServiceTimes,
    prices: PriceTable,
    what_if: Mapping[str, Any] | None = None,
) -> ProfilePlans:
    """Each `loadProfile`'s plan: cdk.json's settings with `overrides`, read as `cdk synth` reads them
    with that profile (its `auto` settings and capacity modes chosen for `targetMessagesPerSecond`)."""
    plans = {}
    for profile in LOAD_PROFILES:
        settings = replace(
            planned_settings(pipeline_settings({**overrides, "loadProfile": profile})), **(what_if or {})
        )
        plan = plan_design(workload, settings, times, prices, OURS)
        plans[profile] = ProfilePlan(profile, settings, plan, workload, prices)

    def monthly_usd(settings: Settings, rate: float) -> float:
        return plan_design(replace(workload, rate=rate), settings, times, prices, OURS, suggest=False).monthly_usd

    share = steady_break_even_share(monthly_usd, plans["spiky"].settings, plans["steady"].settings, rate=workload.rate)
    return ProfilePlans(plans["spiky"], plans["steady"], share)


PROFILE_COLUMNS = ("loadProfile", "capacity modes", "$/month", "$ per million msg", "p50 s", "busiest stage", "auto")


def describe_capacity_modes(settings: Settings) -> str:
    """The stream's and each table's capacity mode, briefly: provisioned ones with their shards or minimums."""
    capacities = [settings.table_capacity(table) for table in PIPELINE_TABLES]
    if not settings.stream.provisioned and not any(capacity.provisioned for capacity in capacities):
        return "all on-demand"
    parts = [f"stream {describe_stream_capacity(settings.stream).replace('provisioned with ', '')}"]
    for table, capacity in zip(PIPELINE_TABLES, capacities, strict=True):
        if not capacity.provisioned:
            parts.append(f"{table} on-demand")
            continue
        reads = f" / {capacity.min_read_capacity:,} RCU" if capacity.min_read_capacity > 1 else ""
        parts.append(
            f"{table} from {capacity.min_write_capacity:,} WCU{reads} at {capacity.target_utilization_percent} %"
        )
    return ", ".join(parts)


def _profile_rows(profiles: ProfilePlans) -> list[tuple[str, ...]]:
    return [
        (
            f"{item.profile} ({PROFILE_NAMES[item.profile]})",
            describe_capacity_modes(item.settings),
            f"{item.plan.monthly_usd:,.0f}",
            f"{item.per_million_usd:.3f}",
            _seconds(item.plan.latency_p50_seconds),
            f"{item.plan.busiest_stage.stage} {item.plan.busiest_stage.busy:.0%}",
            _auto_choices(item.settings),
        )
        for item in (profiles.spiky, profiles.steady)
    ]


def _auto_choices(settings: Settings) -> str:
    return (
        f"state x{settings.state_parallelization_factor}, reduce x{settings.reduce_parallelization_factor}, "
        f"{settings.aggregate_slices} slice{'s' if settings.aggregate_slices > 1 else ''}, "
        f"{settings.reduce_memory_mb} MB, batches of {settings.reduce_batch_size}, "
        f"archive x{settings.archive_parallelization_factor}"
    )


def when_to_choose(profiles: ProfilePlans) -> str:
    """One line: when the steady plan is the one to deploy, and when the spiky one."""
    rate = profiles.spiky.workload.rate
    share = profiles.break_even_share
    if share >= 1.0:
        return (
            f"At {rate:,.0f} msg/s no capacity mode is cheaper provisioned than on-demand: deploy "
            "`loadProfile` spiky whatever the load."
        )
    below = "whatever the load's share of it" if share <= 0.0 else f"while the rate averages at least {share:.0%} of it"
    return (
        f"Choose `loadProfile` steady for a load that stays near the declared {rate:,.0f} msg/s around the clock "
        f"(its provisioned minimums and shards are billed whether used or not; it costs less {below}, and a "
        "burst above them is throttled until auto scaling adds table capacity, minutes, or someone reshards the "
        "stream); choose spiky, the default, for spiky or unknown load and for a trial (on-demand follows any "
        "burst at once and bills next to nothing at rest)."
    )


def render_profiles_markdown(profiles: ProfilePlans) -> str:
    """The spiky and the steady plan side by side, and when to choose which."""
    rate = profiles.spiky.workload.rate
    lines = [
        f"Load profiles (`loadProfile`), each as `cdk synth` sizes it for {rate:,.0f} msg/s:",
        "",
        "| " + " | ".join(PROFILE_COLUMNS) + " |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
        *("| " + " | ".join(row) + " |" for row in _profile_rows(profiles)),
        "",
        when_to_choose(profiles),
    ]
    return "\n".join(lines) + "\n"


def render_profiles_rich(profiles: ProfilePlans, console: Console) -> None:
    """`render_profiles_markdown` as a rich table."""
    rate = profiles.spiky.workload.rate
    table = Table(title=f"Load profiles (loadProfile), each as cdk synth sizes it for {rate:,.0f} msg/s")
    table.title_justify = "left"
    for index, column in enumerate(PROFILE_COLUMNS):
        table.add_column(column, justify="right" if 2 <= index <= 4 else "left", no_wrap=True)
    for row in _profile_rows(profiles):
        table.add_row(*map(untrusted_text, row))
    print_whole(console, table)
    console.print(untrusted_text(when_to_choose(profiles).replace("`", "")))


def recommended(plan: CapacityPlan) -> Settings:
    """The plan's settings with what its flags ask for applied: the state lanes a shard needs (not
    from a KPL-aggregating producer, whose flag asks for shards: no factor works there), the least
    change that lets the reducers keep up (`reducers_that_keep_up`), and the archive lanes that
    relieve the archive (`archive_factor_needed`)."""
    settings = plan.settings
    ours = plan.ours
    if not plan.workload.aggregated and ours.state_parallelization_needed > settings.state_parallelization_factor:
        factor = min(MAX_PARALLELIZATION_FACTOR, ours.state_parallelization_needed)
        settings = replace(settings, state_parallelization_factor=factor)
    if ours.reduce_busy_fraction > BUSY_LIMIT:
        keeping_up = reducers_that_keep_up(plan.workload, settings, plan.times, plan.prices, OURS)
        settings = keeping_up or settings
    if ours.archive_lane_busy > 1:
        settings = replace(
            settings, archive_parallelization_factor=archive_factor_needed(ours.archive_lane_busy, settings)
        )
    return settings


@dataclass(frozen=True)
class Scenario:
    """One set of settings at one rate, planned, with the same settings in one slice beside it."""

    label: str
    before: Settings
    plan: CapacityPlan
    one_slice: DesignPlan
    profile: LoadProfile = "spiky"


def scenario(label: str, before: Settings, plan: CapacityPlan, profile: LoadProfile = "spiky") -> Scenario:
    one_slice = plan_design(
        plan.workload, replace(plan.settings, aggregate_slices=1), plan.times, plan.prices, OURS, suggest=False
    )
    return Scenario(label, before, plan, one_slice, profile)


def scale_out_scenarios(
    workload: Workload, start: Settings, times: ServiceTimes, prices: PriceTable, *, start_label: str
) -> list[Scenario]:
    """`start` and the searches' choices from it (`planner.scale_out`).

    For spiky or unknown load (the stream and tables keep their modes, on-demand by default): the
    packing suggestion alone (slices kept, p50 within 1 s), then the cheapest within a 1 s and a
    4 s p50 (the reference design's 3-4 s) with the slices chosen too. For steady load, the same
    two searches with each table and the stream in its cheaper capacity mode. A search that finds
    nothing within its targets is left out.
    """
    scenarios = [scenario(start_label, start, plan_capacity(workload, start, times, prices))]
    searches: tuple[tuple[str, float, int | None, CapacityChoice], ...] = (
        (f"spiky: packing, {start.aggregate_slices} slices kept, p50 ≤ 1 s", 1.0, start.aggregate_slices, KEEP),
        ("spiky: cheapest, p50 ≤ 1 s", 1.0, None, KEEP),
        ("spiky: cheapest, p50 ≤ 4 s", 4.0, None, KEEP),
        ("steady: cheapest, p50 ≤ 1 s", 1.0, None, EVERY),
        ("steady: cheapest, p50 ≤ 4 s", 4.0, None, EVERY),
    )
    for label, latency, slices, capacity in searches:
        choice = cheapest_settings(
            workload,
            start,
            times,
            prices,
            latency_limit_seconds=latency,
            aggregate_slices=slices,
            capacity=capacity,
        )
        if choice is not None:
            profile: LoadProfile = "steady" if capacity == EVERY else "spiky"
            plan = plan_capacity(workload, choice.settings, times, prices)
            scenarios.append(scenario(label, start, plan, profile))
    return scenarios


SCENARIO_COLUMNS = (
    "settings",
    "changes (cdk.json)",
    "$/month",
    "$ per million msg",
    "p50 s",
    "busiest stage (to the totals)",
    "hottest item WU/s",
    "AggregateTable WU/msg",
    "same in 1 slice",
    "archive busy / PUTs per msg",
)


def _path_busiest(plan: DesignPlan) -> str:
    timing = max((t for t in plan.timings if t.on_latency_path), key=lambda t: t.busy)
    return f"{timing.stage} {timing.busy:.0%} ({timing.lanes} lanes)"


def render_scenarios_markdown(scenarios: Sequence[Scenario]) -> str:
    lines = ["| " + " | ".join(SCENARIO_COLUMNS) + " |", "| --- | --- |" + " ---: |" * (len(SCENARIO_COLUMNS) - 2)]
    for item in scenarios:
        ours, rate = item.plan.ours, item.plan.workload.rate
        per_million = item.plan.prices.seconds_per_month * rate / 1e6
        changes = describe_choice(item.before, item.plan.settings)
        if item.profile == "steady":  # the capacity modes are the profile's: named once, briefly
            capacity_settings = ("streamMode", *TABLE_SETTINGS.values())
            changes = [change for change in changes if not change.startswith(capacity_settings)]
            changes.insert(0, f"loadProfile steady ({describe_capacity_modes(item.plan.settings)})")
        lines.append(
            "| "
            + " | ".join(
                (
                    item.label,
                    ", ".join(changes) if changes else "-",
                    f"{ours.monthly_usd:,.0f}",
                    f"{ours.monthly_usd / per_million:.3f}",
                    _seconds(ours.latency_p50_seconds),
                    _path_busiest(ours),
                    f"{ours.hottest_item_write_units_per_second:,.0f}",
                    f"{ours.aggregate_write_units_per_second / rate:.3f}",
                    f"{item.one_slice.aggregate_write_units_per_second / rate:.3f}",
                    f"{ours.archive_lane_busy:.0%} / {ours.archive_puts_per_message:.5f}",
                )
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    exit_with(main)
