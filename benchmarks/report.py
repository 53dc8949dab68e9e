"""docs/benchmarks.md, written from one run's results (never edited by hand)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aggregation.names import TOKEN_AND_MARKERS, TOKEN_ONLY
from benchmarks import capacity
from benchmarks.archive_cost import DECLARED_RATES
from benchmarks.capacity import (
    ProfilePlan,
    ProfilePlans,
    Scenario,
    render_aggregation_markdown,
    render_markdown,
    render_profiles_markdown,
    render_scenarios_markdown,
)
from benchmarks.emulator_transactions import OURS, EmulatorTransactionsResult
from benchmarks.end_to_end import MARKER_POLL_SECONDS, EndToEndResult, EndToEndSkipped
from benchmarks.handler_overhead import OverheadResult
from benchmarks.harness import Machine
from benchmarks.producer_throughput import ProducerRun, producer_section
from benchmarks.reducer_scaling import ReducerScalingResult, render_section
from benchmarks.state_throughput import ThroughputAtRoundTrip
from benchmarks.worst_event import WorstEvent, worst_event_section
from benchmarks.write_cost import LARGE_MAP_BATCH_SIZE, LARGE_MAP_LABEL, MODES, REDUCE_BATCH_SIZE, WriteCostResult
from benchmarks.write_units import StageWriteCost
from planner.inputs import ServiceTimes, Settings, Workload
from planner.model import CapacityPlan, plan_capacity
from planner.plan import STAGE_BUSY_TARGET
from planner.prices import PriceTable
from planner.reduce import BUSY_LIMIT, transactions_per_delta_batch
from planner.tables import break_even_utilization
from stacks.settings import planned_settings

ORIGINAL_STATE_MESSAGES_PER_SECOND = 100.0
COMMAND = ".venv/bin/python -m benchmarks run --output docs/benchmarks.md"


@dataclass(frozen=True)
class BenchmarkRun:
    machine: Machine
    finished_load_average: tuple[float, float, float]
    elapsed_seconds: float
    write_cost: WriteCostResult
    throughput: list[ThroughputAtRoundTrip]
    overhead: OverheadResult
    end_to_end: EndToEndResult | EndToEndSkipped
    emulator_transactions: EmulatorTransactionsResult
    reducer_scaling: ReducerScalingResult
    plan_defaults: CapacityPlan
    plan_recommended: CapacityPlan
    plan_aggregated: CapacityPlan  # `plan_recommended`'s workload and settings, from a KPL-aggregating producer
    recommended_change: str
    scenarios: list[Scenario]  # at the planned rate (50,000 msg/s): the flags' fix and the searches' choices
    scale_out_scenarios: list[Scenario]  # the same at SCALE_OUT_RATE
    producer: list[ProducerRun]
    worst_events: list[WorstEvent]
    profiles: ProfilePlans | None = None  # each `loadProfile`'s `auto` plan at the planned rate
    auto_by_rate: Sequence[ProfilePlans] = ()  # `auto_plans_by_rate`: every declared rate's, at the defaults


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "-"


def _cost_differences(plan: CapacityPlan) -> str:
    """The components that make the monthly difference, largest first."""
    theirs = {component.name: component.monthly_usd for component in plan.original.components}
    differences = sorted(
        ((mine.monthly_usd - theirs.get(mine.name, 0.0), mine.name) for mine in plan.ours.components),
        key=lambda d: d[0],
    )
    total = abs(plan.ours.monthly_usd - plan.original.monthly_usd) or 1.0
    return ", ".join(
        f"{name} {'-' if delta < 0 else '+'}${abs(delta):,.0f}"
        for delta, name in differences
        if abs(delta) > 0.01 * total
    )


def _fewer_or_more(ours: float, original: float) -> str:
    return "fewer" if ours < original else "more" if ours > original else "the same"


def keeps_up(plan: CapacityPlan) -> str:
    """How the summary says whether this pipeline keeps up with the settings the planner asked for."""
    stalls = plan.ours.stalls
    if not stalls:
        return "; every stage keeps up"
    if all(flag.side_stage for flag in stalls):
        return "; the totals keep up, the archive does not, see section 5"
    return "; **still cannot keep up**, see section 5"


def _auto_settings(settings: Settings) -> str:
    """The settings cdk.json leaves to the planner (`auto`), as chosen."""
    return (
        f"stateParallelizationFactor {settings.state_parallelization_factor}, "
        f"reduceParallelizationFactor {settings.reduce_parallelization_factor}, "
        f"aggregateSlices {settings.aggregate_slices}, "
        f"reduceMemoryMb {settings.reduce_memory_mb}, "
        f"reduceBatchSize {settings.reduce_batch_size}, "
        f"archiveParallelizationFactor {settings.archive_parallelization_factor}"
    )


def _defaults_at_50000(defaults: CapacityPlan, recommended: CapacityPlan, change: str) -> str:
    """The summary's cost sentence: the defaults as a stack declaring 50,000 msg/s synthesizes them,
    and, if the planner still flags a stage there, with the flags' fix beside them."""
    line = (
        f"at the cdk.json defaults, sized by the planner for the declared rate ({_auto_settings(defaults.settings)}"
        f"{keeps_up(defaults)}), ${defaults.ours.monthly_usd:,.0f} against ${defaults.original.monthly_usd:,.0f} "
        f"for the original with the same settings "
        f"({_percent_cheaper(defaults.ours.monthly_usd, defaults.original.monthly_usd)}: "
        f"{_cost_differences(defaults)})."
    )
    if recommended.settings != defaults.settings:
        line += f" With {change} (what the flags ask for{keeps_up(recommended)}): ${recommended.ours.monthly_usd:,.0f}."
    return line


def _capacity_modes(plan: CapacityPlan) -> str:
    """The summary line of the two capacity modes' DynamoDB cost: the tables' writes and reads."""
    on_demand = sum(m.on_demand_usd for m in plan.modes)
    provisioned = sum(m.provisioned_usd for m in plan.modes)
    targets = sorted({m.target_utilization_percent for m in plan.modes})
    cheaper = [m.table for m in plan.modes if m.cheaper == "provisioned"]
    return (
        f"DynamoDB writes and reads ${on_demand:,.0f} a month on-demand against ${provisioned:,.0f} "
        f"provisioned with auto scaling at {'/'.join(map(str, targets))} % target utilisation (break-even at "
        f"{break_even_utilization(plan.prices):.1%} average utilisation); provisioned is cheaper for "
        f"{', '.join(cheaper) if cheaper else 'no table'} at this steady rate"
    )


def _percent_cheaper(ours: float, theirs: float) -> str:
    if ours <= theirs:
        return f"{1 - ours / theirs:.1%} cheaper"
    return f"{ours / theirs - 1:.1%} dearer"


SERVICE_FIGURES = (
    ("state_messages_per_second", "state messages/s per instance at a 20 ms round trip (section 2)", True),
    ("state_cpu_us_per_message", "state CPU µs per Kinesis record (section 3)", False),
    ("map_cpu_us_per_record", "map CPU µs per state change (section 3)", False),
    ("reduce_cpu_us_per_action", "reduce CPU µs per transaction action (section 3)", False),
    ("reduce_cpu_us_per_message", "reduce CPU µs per message applied (section 3)", False),
)
"""(`ServiceTimes` field, what it is, whether a higher figure is faster): what `make bench` measures."""


def slower_than_planned(measured: ServiceTimes, planned: ServiceTimes) -> list[str]:
    """The `SERVICE_FIGURES` fields this run measured slower than `planned` (the planner's defaults).

    `auto` settings and the stack's capacity check plan with the defaults: a measurement slower
    than its default means deployments are sized for less than the code needs.
    """
    slower = []
    for field, _label, higher_is_faster in SERVICE_FIGURES:
        ours, default = getattr(measured, field), getattr(planned, field)
        if (ours < default) if higher_is_faster else (ours > default):
            slower.append(field)
    return slower


def service_times_check(measured: ServiceTimes, planned: ServiceTimes) -> list[str]:
    """Section 5's table of the planner's default service times beside this run's, and what follows."""
    slower = slower_than_planned(measured, planned)
    lines = [
        "Service times: the planner's defaults (`planner.inputs.ServiceTimes`), which `auto` settings and the "
        "stack's capacity check size a deployment with, beside this run's measurements, which the plans below use:",
        "",
        "| figure | default (`auto`, capacity check) | this run | default at least as slow |",
        "| --- | ---: | ---: | --- |",
    ]
    for field, label, _higher_is_faster in SERVICE_FIGURES:
        covered = "**no**" if field in slower else "yes"
        lines.append(f"| {label} | {getattr(planned, field):,.2f} | {getattr(measured, field):,.2f} | {covered} |")
    lines.append("")
    if slower:
        lines.append(
            f"**{len(slower)} measured slower than the planner's default**: `auto` and the capacity check size "
            "deployments for less than this run measured. Raise the default in `planner/inputs.py` to at least "
            "the measurement."
        )
    else:
        lines.append("Every default is at least as slow as this run's measurement: what `auto` sizes has room for it.")
    return [*lines, ""]


def service_times_summary(measured: ServiceTimes, planned: ServiceTimes) -> list[str]:
    """A summary bullet when a default is faster than this run measured, else nothing."""
    slower = slower_than_planned(measured, planned)
    if not slower:
        return []
    names = ", ".join(label.split(" (")[0] for field, label, _ in SERVICE_FIGURES if field in slower)
    return [
        f"- **The planner's defaults are below this run's measurements** ({names}): `auto` settings and the "
        "capacity check size deployments with the defaults, section 5 plans with the measurements; raise the "
        "defaults in `planner/inputs.py`."
    ]


def _model_check(run: BenchmarkRun) -> list[str]:
    """The planner's per-message write units at the benchmark's settings against the counted ones."""
    result, plan = run.write_cost, run.plan_defaults
    rate = plan.workload.rate
    measured = {
        "ours": (
            result.stages["state"].write_units,
            result.stages["map"].write_units,
            result.stages["reduce (crt+marker)"].write_units,
        ),
        "original": (
            result.original["state"].write_units,
            result.original["map"].write_units,
            result.original["reduce"].write_units,
        ),
    }
    lines = [
        "Model check: the planner's write units per message at the default batch sizes (full batches of "
        "100) against the ones counted in section 1 on the same workload (the model assumes full batches; "
        "the benchmark's last map and reduce batches are partly filled).",
        "",
        "| | state model / counted | map model / counted | reduce model / counted |",
        "| --- | ---: | ---: | ---: |",
    ]
    counted = {name: [units / result.messages for units in measured[name]] for name in measured}
    for name, design in (("ours, at 50,000 msg/s", plan.ours), ("original", plan.original)):
        model = (
            design.state_write_units_per_second / rate,
            design.delta_write_units_per_second / rate,
            design.aggregate_write_units_per_second / rate,
        )
        cells = [f"{m:.3f} / {c:.3f}" for m, c in zip(model, counted[name.split(",")[0]], strict=True)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    shape = _benchmark_shape_reduce(plan)
    lines += [
        f"| ours, in the benchmark's shape | | | {shape:.3f} / {counted['ours'][2]:.3f} |",
        *_auto_shape_model_row(result, plan),
        "",
        f"Why ours differs at 50,000 msg/s ({plan.ours.aggregate_write_units_per_second / rate:.3f} against "
        f"{counted['ours'][2]:.3f} counted): that row is the 50,000 msg/s plan, where an invocation takes "
        f"{plan.ours.effective_reduce_batch:.0f} delta batches (planned together whatever the slices: each of its "
        f"transactions writes the slice its token names, {plan.ours.slices_per_invocation:.1f} of the "
        f"{plan.settings.aggregate_slices} an invocation) and {plan.ours.reduce_lanes} reducers"
        f"{' that cannot keep up' if plan.ours.reduce_busy_fraction > BUSY_LIMIT else ''} resend "
        f"{plan.ours.reduce_conflicts_per_second:,.1f} conflicting transactions a second (billed, conservatively). "
        f"The benchmark's one reducer takes invocations of {REDUCE_BATCH_SIZE} delta batches and nothing "
        f"conflicts. Planned in that shape ({REDUCE_BATCH_SIZE} full delta batches of 100 changes an invocation, "
        f"one reducer) the model gives {shape:.3f}; the rest of the gap is the benchmark's last invocation, which "
        "holds fewer delta batches and writes nearly as many nodes. The model counts transactions and actions as "
        "the reduce stage plans them (`tests/planner/test_model.py`, the packing model against "
        "`plan_transactions`).",
    ]
    return [*lines, ""]


def _auto_shape_model_row(result: WriteCostResult, plan: CapacityPlan) -> list[str]:
    """The model's reduce write units per message for the run's invocations in `auto`'s shape at
    `AUTO_RATE` (the planner's `transactions_per_delta_batch`, full delta batches of 100 changes),
    against those counted."""
    shape = result.auto_shape
    if shape is None or not result.auto_invocations:
        return []
    workload, changes = plan.workload, 100.0
    units = 0.0
    for batches in result.auto_invocations:
        per_batch, actions = transactions_per_delta_batch(workload, changes, batches, markers=True)
        units += per_batch * batches * actions * 2
    model = units / (changes * sum(result.auto_invocations) / workload.applied_share)
    counted = result.stages[f"reduce ({shape.label})"].write_units / result.messages
    return [
        f"| ours, `auto` at {shape.rate:,} msg/s in the benchmark's invocations ({shape.slices} slices) "
        f"| | | {model:.3f} / {counted:.3f} |"
    ]


def _benchmark_shape_reduce(plan: CapacityPlan) -> float:
    """The model's reduce write units per message for the write-cost run's own shape: one slice, one
    reducer, invocations of `REDUCE_BATCH_SIZE` delta batches of 100 state changes, no conflicts."""
    workload = plan.workload
    changes = 100.0
    per_batch, actions = transactions_per_delta_batch(
        workload, changes, REDUCE_BATCH_SIZE, markers=plan.settings.markers
    )
    return per_batch * actions * 2 / (changes / workload.applied_share)


def _scenario_brief(item: Scenario) -> str:
    ours = item.plan.ours
    per_million = item.plan.prices.seconds_per_month * item.plan.workload.rate / 1e6
    return (
        f"${ours.monthly_usd:,.0f} a month (${ours.monthly_usd / per_million:.3f} per million messages, "
        f"p50 {ours.latency_p50_seconds:.2f} s, aggregateSlices {item.plan.settings.aggregate_slices})"
    )


def scale_out_summary(at_planned: Sequence[Scenario], at_scale: Sequence[Scenario]) -> str:
    """The summary's bullet: the flags' fix against the searches' choices, at both rates."""
    start = at_planned[0]
    rate = start.plan.workload.rate
    choices = "; ".join(f"{item.label}: {_scenario_brief(item)}" for item in at_planned[1:])
    scale = "; ".join(f"{item.label}: {_scenario_brief(item)}" for item in at_scale[1:]) or "none within the targets"
    return (
        f"- **Scale-out (planner, section 5)**: at {rate:,.0f} msg/s the flags' fix costs "
        f"{_scenario_brief(start)}; with every stage on the way to the totals ≤ 70 % busy on two lanes or more "
        f"and the hottest item ≤ 500 write units a second, {choices}. At {at_scale[0].plan.workload.rate:,.0f} "
        f"msg/s, {scale}."
    )


def profiles_summary(profiles: ProfilePlans | None) -> list[str]:
    """The summary's bullet: the spiky and the steady `auto` plan at the planned rate."""
    if profiles is None:
        return []
    spiky, steady = profiles.spiky, profiles.steady
    return [
        f"- **Load profiles at {spiky.workload.rate:,.0f} msg/s** (`loadProfile`, each as `auto` sizes it, section "
        f"5): spiky or unknown load, everything on-demand, ${spiky.plan.monthly_usd:,.0f} a month "
        f"(${spiky.per_million_usd:.3f} per million messages, p50 {spiky.plan.latency_p50_seconds:.2f} s); steady "
        f"load, each table and the stream in its cheaper mode, ${steady.plan.monthly_usd:,.0f} "
        f"(${steady.per_million_usd:.3f} per million, p50 {steady.plan.latency_p50_seconds:.2f} s), the cheaper "
        f"while the rate averages at least {profiles.break_even_share:.0%} of the declared one."
    ]


def profiles_section(profiles: ProfilePlans | None) -> list[str]:
    """Section 5's load profiles: each `loadProfile`'s `auto` plan at the planned rate, and when to choose which."""
    if profiles is None:
        return []
    return [
        f"### Load profiles at {profiles.spiky.workload.rate:,.0f} msg/s",
        "",
        "The same cdk.json with `loadProfile` spiky (the default: spiky or unknown load, every table and the "
        "stream on-demand) and steady (each table and the stream in the cheaper mode at the declared rate, "
        "provisioned tables with auto scaling from minimums that carry it at 70 %), each with its `auto` settings "
        "as synthesis chooses them, planned with this run's measurements.",
        "",
        render_profiles_markdown(profiles),
    ]


def auto_plans_by_rate(prices: PriceTable) -> list[ProfilePlans]:
    """Each declared rate's `loadProfile` plans as `cdk synth` sizes them: the planner's default workload
    and service times, which `auto` and the capacity check size every deployment with (issue 37), at the
    run's `prices` (`--prices`), as every other plan of the page."""
    return [
        capacity.load_profile_plans({"targetMessagesPerSecond": rate}, Workload(rate=rate), ServiceTimes(), prices)
        for rate in DECLARED_RATES
    ]


def _stage_busy(plan: ProfilePlan, stage: str) -> float:
    return next(timing.busy for timing in plan.plan.timings if timing.stage == stage)


def _cost_flat(plans: Sequence[ProfilePlans]) -> bool:
    """$ per million messages at the highest declared rate no higher than at the lowest, in both profiles."""
    lowest, highest = plans[0], plans[-1]
    return all(
        getattr(highest, profile).per_million_usd <= getattr(lowest, profile).per_million_usd
        for profile in ("spiky", "steady")
    )


def _within_busy_target(plans: Sequence[ProfilePlans]) -> bool:
    return all(p.spiky.plan.busiest_stage.busy <= STAGE_BUSY_TARGET for p in plans)


def auto_by_rate_section(plans: Sequence[ProfilePlans]) -> list[str]:
    """Section 5's `auto` plans at 50,000, 250,000 and 1,000,000 msg/s, and whether the cost per message is flat."""
    if not plans:
        return []
    lines = [
        "### `auto` at each declared rate",
        "",
        "What `cdk synth` deploys for each declared `targetMessagesPerSecond` with every other setting at its "
        "default, planned as `auto` sizes it: the planner's default workload and service times (each above the "
        "slowest measurement of the handlers, see the service times above), spiky (everything on-demand) and "
        "steady (`loadProfile` steady).",
        "",
        "| declared rate | spiky $/month | spiky $ per million msg | steady $ per million msg | p50 s "
        "| busiest stage | archive busy | S3 PUTs per msg | AggregateTable WRU per msg |",
        "| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for profiles in plans:
        spiky = profiles.spiky
        rate = spiky.workload.rate
        busiest = spiky.plan.busiest_stage
        lines.append(
            f"| {rate:,.0f} | {spiky.plan.monthly_usd:,.0f} | {spiky.per_million_usd:.3f} | "
            f"{profiles.steady.per_million_usd:.3f} | {spiky.plan.latency_p50_seconds:.2f} | "
            f"{busiest.stage} {busiest.busy:.0%} | {_stage_busy(spiky, 'archive'):.0%} | "
            f"{spiky.plan.archive_puts_per_message:.5f} | {spiky.plan.aggregate_write_units_per_second / rate:.3f} |"
        )
    lowest, highest = plans[0].spiky, plans[-1].spiky
    lines += [
        "",
        f"Every stage, the archive's included, {'within' if _within_busy_target(plans) else '**not** within'} "
        f"{STAGE_BUSY_TARGET:.0%} busy at every rate; $ per million messages at {highest.workload.rate:,.0f} msg/s "
        f"{highest.per_million_usd / lowest.per_million_usd:.3f}x its figure at {lowest.workload.rate:,.0f} "
        f"(spiky), {plans[-1].steady.per_million_usd / plans[0].steady.per_million_usd:.3f}x (steady): "
        + ("**flat in the rate**." if _cost_flat(plans) else "**higher at the higher rate**."),
        "",
    ]
    return lines


def auto_by_rate_summary(plans: Sequence[ProfilePlans]) -> list[str]:
    """The summary's line of `auto_by_rate_section`."""
    if not plans:
        return []
    rates = ", ".join(f"{p.spiky.workload.rate:,.0f}" for p in plans)
    spiky = ", ".join(f"${p.spiky.per_million_usd:.3f}" for p in plans)
    steady = ", ".join(f"${p.steady.per_million_usd:.3f}" for p in plans)
    return [
        f"- **`auto` at {rates} msg/s** (the planner's defaults, section 5): {spiky} per million messages "
        f"spiky, {steady} steady; every stage {'within' if _within_busy_target(plans) else '**not** within'} "
        f"{STAGE_BUSY_TARGET:.0%} busy; the cost per message "
        + ("does not grow with the rate." if _cost_flat(plans) else "**grows** with the rate.")
    ]


def aggregation_section(plain: CapacityPlan, aggregated: CapacityPlan) -> list[str]:
    """The same plan from a producer that sends KPL aggregates (`send --aggregate`), beside one record per message."""
    return [
        "### With the same settings, from a KPL-aggregating producer",
        "",
        f"`python -m benchmarks.capacity --rate {plain.workload.rate:,.0f} --aggregated ...`: "
        f"{aggregated.workload.messages_per_kinesis_record:,} messages of {aggregated.workload.record_bytes} B "
        f"in each {aggregated.workload.kinesis_record_bytes:,} B Kinesis record.",
        "",
        render_aggregation_markdown(plain, aggregated),
    ]


def scale_out_section(at_planned: Sequence[Scenario], at_scale: Sequence[Scenario]) -> list[str]:
    """What the planner suggests at the planned rate, and the scale-out plan, rendered from its searches."""
    rate = at_planned[0].plan.workload.rate
    scale_rate = at_scale[0].plan.workload.rate
    chosen = next((item for item in at_scale if "1 s" in item.label), at_scale[-1])
    ours = chosen.plan.ours
    lanes = ", ".join(f"{t.stage} {t.lanes}" for t in ours.timings)
    stream = chosen.plan.settings.stream
    kinesis = f"{stream.shard_count} provisioned" if stream.provisioned else f"{ours.kinesis_shards} (on-demand)"
    per_million = chosen.plan.prices.seconds_per_month * scale_rate / 1e6
    lines = [
        f"### What the planner suggests at {rate:,.0f} msg/s",
        "",
        "`planner/scale_out.py` searches the settings a deployment changes in cdk.json (state lanes, map "
        "batching, reducers, `reduceBatchSize`, `reduceMemoryMb`, `aggregateSlices`, and the archive's "
        "`archiveParallelizationFactor`; for steady load also each table's and the "
        "stream's capacity mode, the cheaper at the plan's load, which `loadProfile` steady deploys; for spiky or "
        "unknown load they stay on-demand) for the cheapest plan in which every stage "
        "on the way to the totals is at most 70 % busy on at least two lanes, the archive's lanes are at most "
        "70 % busy too (they share no key, so no object is hot), the hottest aggregate item takes at "
        "most 500 write units a second, and the modelled p50 stays within a bound. Starting from what the flags "
        "above ask for (first row); each row's changes are against it. "
        '"Same in 1 slice": the AggregateTable write units of the same settings with `aggregateSlices` 1: in '
        "`crt+marker` the slices add no writes (an invocation's delta batches are planned together, each "
        "transaction in the slice its token names), so what one slice adds is the reducers' conflicts. "
        '"Archive busy / PUTs per msg": how busy its lanes are, and its S3 PUTs per message '
        "(a batch object and its receipt per invocation).",
        "",
        render_scenarios_markdown(at_planned),
        f"### The {scale_rate:,.0f} msg/s plan",
        "",
        f"The cheapest settings the search finds within the targets at {scale_rate:,.0f} msg/s, then the same "
        "search with a looser latency bound:",
        "",
        render_scenarios_markdown(at_scale),
        f"The plan ({chosen.label}): Kinesis shards {kinesis}; StateTable stream shards "
        f"{ours.state_stream_shards}, DeltaTable stream shards {ours.delta_stream_shards}; concurrent lanes "
        f"{lanes}; {chosen.plan.settings.aggregate_slices} slices ({ours.slices_in_use:.1f} in use); hottest "
        f"aggregate item {ours.hottest_item_write_units_per_second:,.0f} write units a second (target 500); "
        f"p50 {ours.latency_p50_seconds:.2f} s; ${ours.monthly_usd / per_million:.3f} per million messages.",
        "",
        render_markdown(chosen.plan),
    ]
    return lines


def _cost_cells(result: WriteCostResult, cost: StageWriteCost) -> tuple[str, str]:
    requests, units = result.per_message(cost)
    return f"{requests:.4f}", f"{units:.4f}"


def archive_cost_lines(result: WriteCostResult) -> list[str]:
    """Section 1's archive part: S3 PUTs per message, counted (`benchmarks.archive_cost`)."""
    if not result.archive:
        return []
    planned = {rate: _planned_puts_per_message(rate) for rate in DECLARED_RATES}
    lines = [
        "",
        "The archive, counted the same way: the same delta items through the real archive handler against the "
        "emulator's S3, every `PutObject` it sent (a 412 is billed too), per ingested message. One batch object "
        "and its receipt an invocation, so its PUTs fall with the items an invocation holds; the earlier layout "
        "(one object per delta item, a registry claim and settle per invocation) is computed for the same "
        "invocations. The plan's batch is what the capacity plan's archive takes at that rate (`auto` settings, "
        "`archiveBatchSize` and `archiveBatchingWindowSeconds` as cdk.json has them); this workload's "
        f"{result.delta_batches} delta items fill less than one such invocation.",
        "",
        "| archive invocations of | invocations | PUTs | PUTs per message | earlier layout's PUTs per message "
        "| exact |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for run in result.archive:
        lines.append(
            f"| {run.label} ({run.batch} delta items) | {run.invocations} | {run.puts} | "
            f"{run.puts / result.messages:.5f} | {run.earlier_layout_puts / result.messages:.5f} | "
            f"{'yes' if run.exact else '**NO**'} |"
        )
    lines += [
        "",
        "The capacity plans' own figure, with full batches of items as large as the declared rate's: "
        + ", ".join(f"{rate:,} msg/s {puts:.5f}" for rate, puts in planned.items())
        + " PUTs per message (at most 0.001 is the target: issue 37).",
    ]
    return lines


def _archive_summary(result: WriteCostResult) -> list[str]:
    """The summary's archive line: PUTs per message counted in section 1, and the plans'."""
    if not result.archive:
        return []
    counted = min(run.puts for run in result.archive) / result.messages
    planned = max(_planned_puts_per_message(rate) for rate in DECLARED_RATES)
    return [
        f"- **Archive S3 PUTs per message**: {counted:.5f} counted (section 1: one batch object and its receipt "
        f"an invocation), at most {planned:.5f} in the plans at "
        + ", ".join(f"{rate:,}" for rate in DECLARED_RATES)
        + " msg/s, against one PUT per delta item and two registry updates an invocation before."
    ]


def _planned_puts_per_message(rate: int) -> float:
    settings = planned_settings(capacity.pipeline_settings({"targetMessagesPerSecond": rate}))
    return plan_capacity(Workload(rate=rate), settings).ours.archive_puts_per_message


def _auto_shape_lines(result: WriteCostResult) -> list[str]:
    """Section 1's reduce in the shape `auto` chooses at `AUTO_RATE` (issue 37), beside batches of 10."""
    shape = result.auto_shape
    if shape is None:
        return []
    label = f"reduce ({shape.label})"
    exact = "exact" if result.exact.get(shape.label) else "**NOT exact**"
    return [
        "",
        f"The same delta items reduced once more (`crt+marker`, {exact}) as `auto` reduces them at "
        f"{shape.rate:,} msg/s: {shape.slices} slices, invocations of up to {shape.batch_size} delta items "
        f"({', '.join(str(n) for n in result.auto_invocations)} here). An invocation plans its items together "
        "whatever their slices and StateTable shards, each transaction writing the slice its token names, so "
        "the slices add no writes:",
        "",
        "| stage | req | WRU |",
        "| --- | ---: | ---: |",
        f"| reduce, {shape.slices} slices, batches of {shape.batch_size} | "
        + " | ".join(_cost_cells(result, result.stages[label]))
        + " |",
        "| reduce, 1 slice, batches of 10 (above) | "
        + " | ".join(_cost_cells(result, result.stages[f"reduce ({TOKEN_AND_MARKERS})"]))
        + " |",
    ]


def _write_cost_section(result: WriteCostResult) -> list[str]:
    ours = {mode: result.totals(mode) for mode in MODES}
    original = result.totals(None)
    lines = [
        "## 1. Write cost per ingested message",
        "",
        f"{result.messages:,} standard-workload messages (10 % duplicates, 5 % out-of-order, 20 % modifications; "
        f"mean record {result.mean_record_bytes:.0f} B) through the real handlers against the emulator's tables "
        f"and streams: state batches of 100 → {result.state_changes:,} state changes → map batches of 100 → "
        f"{result.delta_batches} delta items (median {result.delta_item_bytes_median:,.0f} B) → "
        f"{result.reduce_invocations} reduce invocations of 10, once per idempotency mode. "
        f"Aggregates exact against the generator's ground truth: "
        + ", ".join(f"`{mode}` {'yes' if ok else '**NO**'}" for mode, ok in result.exact.items())
        + ".",
        "",
        "Requests and write request units (WRU) per ingested message, counted from every write the handlers "
        "sent (a botocore hook on their client); WRU by DynamoDB's billing rules from each item's size "
        "(transactional writes 2 per KB; a failed condition still costs its units).",
        "",
        "| stage | ours `crt+marker` req | WRU | ours `crt` req | WRU | original req | WRU |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    rows = [
        ("state", result.stages["state"], result.stages["state"], result.original["state"]),
        ("map", result.stages["map"], result.stages["map"], result.original["map"]),
        (
            "reduce",
            result.stages["reduce (crt+marker)"],
            result.stages["reduce (crt)"],
            result.original["reduce"],
        ),
        ("**total**", ours[TOKEN_AND_MARKERS], ours[TOKEN_ONLY], original),
    ]
    for name, marker_cost, token_cost, original_cost in rows:
        cells = (
            *_cost_cells(result, marker_cost),
            *_cost_cells(result, token_cost),
            *_cost_cells(result, original_cost),
        )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    large = result.totals(LARGE_MAP_LABEL)
    large_original = result.totals(None, large_map_batches=True)
    lines += [
        "",
        f"The same state changes mapped in batches of {LARGE_MAP_BATCH_SIZE:,} (then reduce batches of 10, "
        "`crt+marker`), exact as well:",
        "",
        "| stage | ours req | WRU | original req | WRU |",
        "| --- | ---: | ---: | ---: | ---: |",
        "| map | "
        + " | ".join(
            (
                *_cost_cells(result, result.stages[f"map ({LARGE_MAP_LABEL})"]),
                *_cost_cells(result, result.original_large["map"]),
            )
        )
        + " |",
        "| reduce | "
        + " | ".join(
            (
                *_cost_cells(result, result.stages[f"reduce ({LARGE_MAP_LABEL})"]),
                *_cost_cells(result, result.original_large["reduce"]),
            )
        )
        + " |",
        "| **total** | " + " | ".join((*_cost_cells(result, large), *_cost_cells(result, large_original))) + " |",
        *_auto_shape_lines(result),
    ]
    state = result.stages["state"]
    stage_units = {name: cost.write_units for name, cost in result.stages.items()}
    original_units = {name: cost.write_units for name, cost in result.original.items()}
    lines += [
        "",
        f"- **State**: {state.items:,} conditional writes (PartiQL statements, in {state.requests:,} "
        f"`BatchExecuteStatement` requests) for {result.messages:,} messages ({state.failed_conditions:,} of them "
        f"failed their condition or met an existing item, billed all the same); the original sends one "
        f"`UpdateItem` per message. Selecting the highest version per TradeID inside a batch, and settling from the "
        f"version cache what an earlier batch already settled (every state batch runs in one execution "
        f"environment here, as one shard's batches mostly do), saves {1 - state.items / result.messages:.1%} "
        f"of the state writes: {state.items / result.state_changes:.3f} writes per state change.",
        f"- **Map**: same number of puts as the original; our delta item also carries ProducerTimestamps, "
        f"RecordCount, CreatedAt, ExpiresAt: {_ratio(stage_units['map'], original_units['map'])} "
        "the original's map WRU.",
        f"- **Reduce**: ours {_ratio(stage_units['reduce (crt+marker)'], original_units['reduce'])} "
        f"(`crt+marker`) and {_ratio(stage_units['reduce (crt)'], original_units['reduce'])} "
        "(`crt`) the original's WRU. Both sum a reduce invocation's delta batches and write each node once: ours "
        "in one transaction per node group (105 nodes in 2 groups), with one marker per (delta batch, group) unit "
        "in `crt+marker`; the original in a single transaction, which exceeds 100 actions in "
        f"{result.original_oversized_transactions} of {result.reduce_invocations} batches (counted here as split, "
        "which costs its one-token idempotency). Larger map batches cut both reduce costs proportionally "
        "(section 5).",
        f"- Median emulator latency of one reduce transaction: {result.transaction_ms_median:.0f} ms (moto, not AWS).",
        f"- Cross-check: the emulator's `ReturnConsumedCapacity` reported {state.reported_capacity:g} units for "
        f"{state.reported_requests:,} successful state updates, a constant per call whatever the size, and nothing "
        "for transactions — which is why units are computed from item sizes.",
        *archive_cost_lines(result),
        "",
    ]
    return lines


def _throughput_section(results: list[ThroughputAtRoundTrip]) -> list[str]:
    lines = [
        "## 2. State function throughput per invocation",
        "",
        "The real state handler on batches of 100 standard-workload messages; every `BatchExecuteStatement` (up to "
        "25 writes) is built and signed by botocore, then answered after a simulated DynamoDB round trip "
        "(`before-send` hook, no network). Our bounded pool (16 concurrent calls) and one call at a time alternate "
        "invocation by invocation in the "
        "same run; medians of messages ÷ invocation wall time.",
        "",
        "| round trip | bounded (16) msg/s | one at a time msg/s | ratio | vs the original's ~100 msg/s |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for result in results:
        lines.append(
            f"| {result.round_trip_ms:g} ms | {result.bounded_messages_per_second:,.0f} | "
            f"{result.sequential_messages_per_second:,.0f} | {result.ratio:.1f}x | "
            f"{result.bounded_messages_per_second / ORIGINAL_STATE_MESSAGES_PER_SECOND:.1f}x |"
        )
    lines += [
        "",
        f"({results[0].repetitions} invocations per cell.) One at a time reproduces the original's figure: "
        "about one message per round trip plus CPU, ~100 msg/s at ~10 ms. The bounded pool is limited by the "
        "round trip at 20 ms; at 5 ms CPU takes a large share (request building and signing by botocore for 16 "
        "threads sharing one GIL; section 3). On Lambda, 512 MB gives about 0.3 vCPU (CPU is allocated in "
        "proportion to memory), so expect the CPU-bound part to weigh more there. The functions' SDK "
        "connection pool is sized for the widest writer pool (`max_pool_connections` 256), so no writer waits "
        "for a connection on AWS; the simulation opens none.",
        "",
    ]
    return lines


def overhead_section(overhead: OverheadResult, write_cost: WriteCostResult) -> list[str]:
    """Section 3's markdown lines (also printed alone by `python -m benchmarks overhead`)."""
    results = overhead.handlers
    lines = [
        "## 3. Handler overhead (CPU, AWS calls stubbed)",
        "",
        "The events of the write-cost run replayed through each handler with DynamoDB answered by canned responses "
        "at botocore's `before-call` (after parameter validation and serialisation, before any HTTP). "
        "`time.process_time` (all threads), medians over every invocation of several passes.",
        "",
        "| handler | per | CPU µs | wall µs | CPU µs per invocation | invocations |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r.handler} | {r.unit} | {r.cpu_us_per_unit:,.1f} | {r.wall_us_per_unit:,.1f} | "
            f"{r.cpu_us_per_invocation:,.0f} | {r.invocations} |"
        )
    by_name = {r.handler: r for r in results}
    floor = overhead.state_floor
    state_us = by_name["state"].cpu_us_per_unit
    lines += [
        "",
        "The state handler against its irreducible work, measured in the same run over the same events: per "
        "record, decode and parse its JSON, and serialise one `update_item` request per write with botocore's "
        "own serializer (unvalidated). With botocore's parameter validation added, the SDK's default request "
        "building; the client path, each write sent as an `update_item` with the state function's own boto3 "
        "client instead (canned answer), botocore's per-call machinery included (endpoint rules, event hooks, "
        "request preparation); and the batch client path, the writes sent as the handler sends them, its "
        "PartiQL statements in `batch_execute_statement` calls of up to 25 (one canned success per statement):",
        "",
        "| per Kinesis record | CPU µs | state handler ÷ this |",
        "| --- | ---: | ---: |",
        f"| irreducible: parse + serialise | {floor.irreducible_us:,.1f} | "
        f"**{state_us / floor.irreducible_us:.2f}x** |",
        f"| parse + validate + serialise | {floor.validated_us:,.1f} | {state_us / floor.validated_us:.2f}x |",
        f"| client path: parse + `update_item` | {floor.client_path_us:,.1f} | "
        f"{state_us / floor.client_path_us:.2f}x |",
        f"| batch client path: parse + `batch_execute_statement` per 25 | {floor.batch_client_path_us:,.1f} | "
        f"{state_us / floor.batch_client_path_us:.2f}x |",
    ]
    changes_per_message = write_cost.state_changes / write_cost.messages
    total = (
        by_name["state"].cpu_us_per_unit
        + by_name["map"].cpu_us_per_unit * changes_per_message
        + by_name["reduce"].cpu_us_per_unit * changes_per_message
    )
    lines += [
        "",
        f"Per ingested message, all three handlers: about **{total:,.0f} µs of CPU** "
        f"({changes_per_message:.2f} state changes per message). The state handler's share is mostly parsing and "
        "validating each message and botocore serialising its statement; the per-call machinery is paid once per "
        "25 messages.",
        "",
        f"Reduce CPU, fitted over {overhead.reduce_model.invocations} distinct invocations (each the median of its "
        "passes) of small and large delta batches: "
        f"**{overhead.reduce_model.per_action_us:,.1f} µs per transaction action** (built and serialised) + "
        f"**{overhead.reduce_model.per_message_us:,.2f} µs per message applied** (its producer "
        "timestamp read and summed for `#stats`). The planner uses both, slowed down by the function's memory "
        "(Lambda gives one vCPU at 1,769 MB: the 256 MB reduce runs CPU work about 6.9x slower than one core).",
        "",
    ]
    return lines


def _end_to_end_section(result: EndToEndResult | EndToEndSkipped) -> list[str]:
    lines = ["## 4. Local end to end", ""]
    if isinstance(result, EndToEndSkipped):
        return [*lines, f"Not measured in this run: {result.reason}.", ""]
    return [
        *lines,
        "Our own `make up` runtime (temporary state directory): emulator, deployed stack, event-source runner, "
        "no injected faults. Raw rate = conditional `UpdateItem`s per second the same emulator sustains with 16 "
        "writers, measured just before; pipeline rate = a burst of messages ÷ (last aggregate applied - first "
        "send). Latency = producer `Timestamp` → the moment the last reduce marker of the message's delta batch "
        f"appears, i.e. all of it applied (polled every {MARKER_POLL_SECONDS:g} s: overstated by at most that plus "
        "one scan), "
        "measured with the producer paced at half the burst rate (steady state); the burst's own latencies, "
        "which are mostly queueing, are shown for comparison.",
        "",
        "| burst | raw conditional updates/s | pipeline msg/s | ratio | burst latency p50 / p99 | exact |",
        "| ---: | ---: | ---: | ---: | ---: | --- |",
        f"| {result.messages:,} | {result.raw_updates_per_second:,.0f} | {result.pipeline_messages_per_second:,.1f} | "
        f"**{result.ratio:.2f}** | "
        f"{result.burst_latency_p50_seconds:.2f} s / {result.burst_latency_p99_seconds:.2f} s | "
        f"{'yes' if result.exact else '**NO**'} |",
        "",
        "| paced | rate | latency p50 | latency p99 | samples |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {result.paced_messages:,} | {result.paced_rate:g} msg/s | **{result.latency_p50_seconds:.2f} s** | "
        f"**{result.latency_p99_seconds:.2f} s** | {result.latency_samples:,} |",
        "",
        f"({result.elapsed_seconds:.0f} s including up and down.) "
        "Each message costs about one conditional write (a PartiQL statement, 25 to a `BatchExecuteStatement` "
        "request) plus its share of a map put and a reduce transaction, all served by one emulator process that "
        "also answers the runner's stream polling, so the ratio says how much of the emulator's raw write rate "
        "reaches the aggregates; the raw yardstick pays a whole request per update, which is why the ratio can "
        "exceed 1 now that the state function's writes share theirs. Absolute local figures describe moto "
        "and the local runner on this machine, not AWS (the original measured 3-4 s mean end-to-end latency "
        "on AWS at 50,000 msg/s).",
        "",
    ]


def _emulator_transactions_section(result: EmulatorTransactionsResult) -> list[str]:
    rows = [
        f"| {r.implementation} | {r.table_items:,} | {r.median_ms:,.1f} ms | "
        f"{result.ratio_to_empty(r.implementation, r.table_items):.2f}x |"
        for r in result.latencies
    ]
    largest = max(r.table_items for r in result.latencies if r.implementation == OURS)
    moto_largest = max((r.table_items for r in result.latencies if r.implementation != OURS), default=0)
    return [
        "## 6. The emulator's transactions against table size",
        "",
        "`benchmarks/emulator_transactions.py`: one TransactWriteItems of 10 ADD updates (a reduce transaction's "
        f"shape) on a table with a stream holding N items, median of the runs, in process (no HTTP). moto's own "
        f"rollback deep-copies every touched table before every transaction (measured up to {moto_largest:,} "
        "items: it is the slow one); the local runtime's journal (`local/emulator/moto_compat.py`, "
        "`fix_transaction_rollback_copies_only_what_it_touches`) copies only the items the transaction names.",
        "",
        "| implementation | table items | median latency | ÷ empty table |",
        "| --- | ---: | ---: | ---: |",
        *rows,
        "",
        f"With the journal a transaction against {largest:,} items takes "
        f"**{result.ratio_to_empty(OURS, largest):.2f}x** its time on an empty table "
        "(issue 22's bound: 1.5x). The note for moto's maintainers is `docs/moto-upstream.md`.",
        "",
    ]


HAND_WRITTEN = "by hand"
"""A `## ` heading with these words marks a section measured by hand: `make bench` cannot
reproduce it (a profiler it does not install, a former version of the code), so a regenerated
page keeps it, after the generated sections."""


def hand_written_sections(page: str) -> str:
    """The sections of `page` whose `## ` heading says they were written by hand, in their order."""
    kept: list[str] = []
    keeping = False
    for line in page.splitlines():
        if line.startswith("## "):
            keeping = HAND_WRITTEN in line
        if keeping:
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else ""


def render(run: BenchmarkRun, hand_written: str = "") -> str:
    """The page; `hand_written`: sections to keep from the previous page (`hand_written_sections`)."""
    machine = run.machine
    write_cost = run.write_cost
    ours_total = write_cost.totals(TOKEN_AND_MARKERS)
    original_total = write_cost.totals(None)
    at_20 = next((t for t in run.throughput if t.round_trip_ms == 20.0), run.throughput[-1])
    defaults, recommended = run.plan_defaults, run.plan_recommended
    large_total = write_cost.totals(LARGE_MAP_LABEL)
    large_original_total = write_cost.totals(None, large_map_batches=True)
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `make bench` (`{COMMAND}`) — do not edit by hand.",
        "",
        f"- Measured: {machine.measured_at}, in {run.elapsed_seconds:.0f} s",
        f"- Machine: {machine.cpu_model}, {machine.cpus} CPUs (nproc), Python {machine.python}, {machine.platform}",
        f"- Load average at start {machine.load_average[0]:.2f}, at end {run.finished_load_average[0]:.2f} "
        "(other work on the machine slows every timed figure alike; ratios measured side by side are the robust ones)",
        "",
        "## Summary: this pipeline against the original design",
        "",
        f"- **State throughput per instance**: {at_20.bounded_messages_per_second:,.0f} msg/s at a 20 ms round trip, "
        f"{at_20.ratio:.1f}x one-at-a-time writes in the same run and "
        f"{at_20.bounded_messages_per_second / ORIGINAL_STATE_MESSAGES_PER_SECOND:.1f}x the original's ~100 msg/s: "
        f"at 50,000 msg/s, {defaults.ours.state_executions:,.0f} concurrent state executions instead of "
        f"{defaults.original.state_executions:,.0f}.",
        f"- **State writes**: {write_cost.stages['state'].items / write_cost.messages:.3f} conditional writes per "
        f"message against 1.000, for {write_cost.state_changes / write_cost.messages:.3f} unique state changes per "
        f"message ({write_cost.stages['state'].items / write_cost.state_changes:.3f}x: in-batch duplicates and "
        "superseded versions are never sent, and the version cache skips the ones an earlier batch settled), in "
        f"{write_cost.stages['state'].requests / write_cost.messages:.3f} `BatchExecuteStatement` requests "
        "per message.",
        f"- **Write units per message, total**: {ours_total.write_units / write_cost.messages:.2f} (`crt+marker`) "
        f"against {original_total.write_units / write_cost.messages:.2f} for the original at the default batch "
        f"sizes — **{_fewer_or_more(ours_total.write_units, original_total.write_units)}**: fewer state writes "
        "(in-batch selection), and a reduce that, like the original, writes each node once per invocation (one "
        "transaction per node group) but also writes a marker per unit, where the original's single transaction "
        "exceeds DynamoDB's 100-action limit with this hierarchy. With map batches of "
        f"{LARGE_MAP_BATCH_SIZE:,}, measured on the same state changes: "
        f"{large_total.write_units / write_cost.messages:.2f} against "
        f"{large_original_total.write_units / write_cost.messages:.2f}.",
        f"- **Monthly cost at 50,000 msg/s** (list prices, {defaults.prices.region}, {defaults.prices.as_of}): "
        f"{_defaults_at_50000(defaults, recommended, run.recommended_change)} "
        f"{_capacity_modes(recommended)}.",
        scale_out_summary(run.scenarios, run.scale_out_scenarios),
        *profiles_summary(run.profiles),
        *auto_by_rate_summary(run.auto_by_rate),
        *service_times_summary(defaults.times, ServiceTimes()),
        *_archive_summary(write_cost),
        "- **Guarantee**: the original's reduce is exactly-once only for replays within 10 minutes; ours "
        "(`crt+marker`) for ever, at the price of the `#applied#` marker writes counted below "
        "(`crt+marker` against `crt`).",
        "",
        *_write_cost_section(write_cost),
        *_throughput_section(run.throughput),
        *overhead_section(run.overhead, write_cost),
        *worst_event_section(run.worst_events, ServiceTimes()),
        "",
        *_end_to_end_section(run.end_to_end),
        "## 5. Capacity plans for 50,000 and 250,000 messages/s",
        "",
        "`python -m benchmarks.capacity --rate 50000 ...` with this run's measured per-invocation figures "
        "(state rate at 20 ms, map and reduce CPU) and record size. Write and transaction round trips are "
        "assumptions for DynamoDB in-region (20 ms, 25 ms), not measured here: the emulator's transaction "
        f"takes {write_cost.transaction_ms_median:.0f} ms, which would make the reduce "
        f"{write_cost.transaction_ms_median / defaults.times.transaction_round_trip_ms:.1f}x busier. "
        "The settings are cdk.json's, read as `cdk synth` reads them; every change the planner asks for is a "
        "cdk.json setting (`-c key=value`; a `mapBatchingWindowSeconds` window adds at most that many seconds "
        "of latency). Each table is priced in both capacity modes (`loadProfile`, `stateTableCapacity`, ...).",
        "",
        *service_times_check(defaults.times, ServiceTimes()),
        *_model_check(run),
        "### With the default settings (cdk.json, declaring 50,000 msg/s)",
        "",
        f"The `auto` settings as synthesis chooses them for `targetMessagesPerSecond` 50,000: "
        f"{_auto_settings(defaults.settings)}.",
        "",
        render_markdown(defaults),
        *(
            []
            if recommended.settings == defaults.settings
            else [f"### With {run.recommended_change}", "", render_markdown(recommended)]
        ),
        *profiles_section(run.profiles),
        *auto_by_rate_section(run.auto_by_rate),
        *aggregation_section(recommended, run.plan_aggregated),
        *scale_out_section(run.scenarios, run.scale_out_scenarios),
        *_emulator_transactions_section(run.emulator_transactions),
        *render_section(run.reducer_scaling),
        *producer_section(run.producer),
        "## Prices",
        "",
        f"{defaults.prices.notice}",
        "",
        *(f"- {source}" for source in defaults.prices.sources),
        "",
        "The table is `planner/prices-us-east-1-2026-11.json`; pass another with `--prices`.",
        "",
        "## Reproduce",
        "",
        "```bash",
        "make bench                                  # this page",
        "python -m benchmarks.capacity --rate 50000  # the planner alone (add --markdown, or -c key=value)",
        "python -m benchmarks.capacity --rate 50000 --aggregated  # from a KPL-aggregating producer, beside not",
        "python -m benchmarks.reducer_scaling        # section 7 alone (prints its markdown)",
        "python -m benchmarks.batch_selection        # in-batch version selection alone (CPU; not part of this page)",
        "python -m benchmarks.producer_throughput    # section 8 alone (prints its markdown)",
        "python -m benchmarks overhead              # section 3 alone (prints its markdown)",
        "python -m benchmarks.state_profile         # the state handler's top frames (cProfile; not part of this page)",
        "```",
        "",
    ]
    return "\n".join(lines) + ("\n" + hand_written if hand_written else "")
