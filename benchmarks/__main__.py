"""`python -m benchmarks run --output docs/benchmarks.md`: every benchmark in one run (`make bench`).

Sized for a 2-core machine to finish in well under ten minutes: the emulator serves a
few hundred writes a second, so the workloads are thousands of messages, not millions.
Progress goes to the terminal with rich; the page is written only when every benchmark
has finished.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from benchmarks import capacity
from benchmarks.emulator_transactions import run_emulator_transactions
from benchmarks.end_to_end import EndToEndResult, run_end_to_end
from benchmarks.handler_overhead import run_handler_overhead
from benchmarks.harness import describe_machine, running_emulator
from benchmarks.producer_throughput import DEFAULT_MESSAGES, run_producer_throughput
from benchmarks.reducer_scaling import run_reducer_scaling
from benchmarks.report import (
    BenchmarkRun,
    auto_plans_by_rate,
    hand_written_sections,
    overhead_section,
    render,
    slower_than_planned,
)
from benchmarks.state_throughput import run_state_throughput
from benchmarks.worst_event import run_worst_events, worst_event_section
from benchmarks.write_cost import run_write_cost
from planner import model
from planner.inputs import ServiceTimes, Settings, Workload
from planner.prices import DEFAULT_PRICE_TABLE, load_price_table
from planner.scale_out import SCALE_OUT_RATE
from stacks.settings import planned_settings
from toolkit.cli import exit_with

PLANNED_RATE = 50_000
"""The rate section 5 plans first, the reference design's (then `SCALE_OUT_RATE`)."""
FLAGS_FIX = "cdk.json with what the flags ask for"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run every benchmark and write the markdown page")
    run.add_argument("--output", type=Path, default=Path("docs/benchmarks.md"))
    run.add_argument("--messages", type=int, default=4000, help="write-cost workload (messages)")
    run.add_argument("--repetitions", type=int, default=9, help="state invocations per throughput cell")
    run.add_argument("--passes", type=int, default=5, help="passes over the events for handler overhead")
    run.add_argument("--e2e-messages", type=int, default=2000, help="end-to-end burst (messages)")
    run.add_argument("--e2e-paced-seconds", type=float, default=30.0, help="end-to-end paced phase (seconds)")
    run.add_argument("--raw-seconds", type=float, default=8.0, help="emulator raw-rate measurement (seconds)")
    run.add_argument(
        "--producer-messages", type=int, default=DEFAULT_MESSAGES, help="producer throughput run (messages)"
    )
    run.add_argument("--skip-end-to-end", action="store_true")
    run.add_argument("--prices", type=Path, default=DEFAULT_PRICE_TABLE)
    overhead = commands.add_parser(
        "overhead", help="section 3 alone (handler CPU against the state floor): print its markdown, write nothing"
    )
    overhead.add_argument("--messages", type=int, default=4000, help="write-cost workload whose events are replayed")
    overhead.add_argument("--passes", type=int, default=5, help="passes over the events")
    commands.add_parser(
        "worst-event", help="the worst event of each kind against the state timeout: print its markdown, write nothing"
    )
    return parser


class Reporter:
    """One rich progress bar per benchmark step."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, step: str, fraction: float) -> None:
        if step not in self.tasks:
            self.tasks[step] = self.progress.add_task(step, total=1.0)
        self.progress.update(self.tasks[step], completed=min(1.0, fraction))


def run(arguments: argparse.Namespace, console: Console) -> int:
    started = time.perf_counter()
    machine = describe_machine()
    console.print(f"[bold]benchmarks[/] on {machine.cpu_model}, {machine.cpus} CPUs, Python {machine.python}")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        report = Reporter(progress)
        with tempfile.TemporaryDirectory(prefix="bench-") as scratch, running_emulator(Path(scratch) / "emulator.log"):
            write_cost = run_write_cost(arguments.messages, report)
        throughput = run_state_throughput(arguments.repetitions, report)
        emulator_transactions = run_emulator_transactions(report)
        reducer_scaling = run_reducer_scaling(report)
        overhead = run_handler_overhead(write_cost.events, arguments.passes, report)
        worst_events = run_worst_events(report)
        producer = run_producer_throughput(arguments.producer_messages, report)
        if arguments.skip_end_to_end:
            from benchmarks.end_to_end import EndToEndSkipped  # noqa: PLC0415

            end_to_end: EndToEndResult | EndToEndSkipped = EndToEndSkipped("skipped with --skip-end-to-end")
        else:
            end_to_end = run_end_to_end(
                arguments.e2e_messages, arguments.raw_seconds, arguments.e2e_paced_seconds, report
            )
    by_handler = {o.handler: o for o in overhead.handlers}
    at_20_ms = next(t for t in throughput if t.round_trip_ms == 20.0)
    times = ServiceTimes(
        state_messages_per_second=at_20_ms.bounded_messages_per_second,
        state_cpu_us_per_message=by_handler["state"].cpu_us_per_unit,
        map_cpu_us_per_record=by_handler["map"].cpu_us_per_unit,
        reduce_cpu_us_per_action=overhead.reduce_model.per_action_us,
        reduce_cpu_us_per_message=overhead.reduce_model.per_message_us,
    )
    workload = Workload(
        rate=PLANNED_RATE,
        record_bytes=round(write_cost.mean_record_bytes),
        state_writes_per_message=write_cost.stages["state"].items / write_cost.messages,
    )
    prices = load_price_table(arguments.prices)
    cdk_json_settings = planned_settings(capacity.pipeline_settings({"targetMessagesPerSecond": PLANNED_RATE}))
    defaults = model.plan_capacity(workload, cdk_json_settings, times, prices)
    recommended_settings = capacity.recommended(defaults)
    plan_recommended = model.plan_capacity(workload, recommended_settings, times, prices)
    plan_aggregated = model.plan_capacity(replace(workload, aggregated=True), recommended_settings, times, prices)
    change = describe_change(cdk_json_settings, recommended_settings)
    scale_workload = replace(workload, rate=SCALE_OUT_RATE)
    scale_settings = planned_settings(capacity.pipeline_settings({"targetMessagesPerSecond": SCALE_OUT_RATE}))
    scale_start = capacity.recommended(model.plan_capacity(scale_workload, scale_settings, times, prices))
    previous = arguments.output.read_text() if arguments.output.exists() else ""
    page = render(
        BenchmarkRun(
            machine=machine,
            finished_load_average=os.getloadavg(),
            elapsed_seconds=time.perf_counter() - started,
            write_cost=write_cost,
            throughput=throughput,
            overhead=overhead,
            end_to_end=end_to_end,
            emulator_transactions=emulator_transactions,
            reducer_scaling=reducer_scaling,
            plan_defaults=defaults,
            plan_recommended=plan_recommended,
            plan_aggregated=plan_aggregated,
            recommended_change=change,
            scenarios=capacity.scale_out_scenarios(
                workload, recommended_settings, times, prices, start_label=FLAGS_FIX
            ),
            scale_out_scenarios=capacity.scale_out_scenarios(
                scale_workload, scale_start, times, prices, start_label=FLAGS_FIX
            ),
            producer=producer,
            worst_events=worst_events,
            profiles=capacity.load_profile_plans({"targetMessagesPerSecond": PLANNED_RATE}, workload, times, prices),
            auto_by_rate=auto_plans_by_rate(prices),
        ),
        hand_written_sections(previous),
    )
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(page)
    capacity.render_rich(plan_recommended, console)
    console.print(f"[green]wrote {arguments.output}[/] in {time.perf_counter() - started:.0f} s")
    slower = slower_than_planned(times, ServiceTimes())
    if slower:
        console.print(
            f"[bold yellow]measured slower than the planner's defaults: {', '.join(slower)}[/] (`auto` and the "
            "capacity check plan with the defaults: raise them in planner/inputs.py; section 5 sets both side by side)"
        )
    exact = (
        all(write_cost.exact.values())
        and reducer_scaling.exact
        and (not isinstance(end_to_end, EndToEndResult) or end_to_end.exact)
    )
    if not exact:
        console.print("[bold red]a run computed wrong aggregates: the figures above are not trustworthy[/]")
    return 0 if exact else 1


def describe_change(before: Settings, after: Settings) -> str:
    """The cdk.json settings that differ, as `-c key=value` would set them."""
    changes = [
        f"{name} {getattr(after, field):g}"
        for field, name in (
            ("state_parallelization_factor", "stateParallelizationFactor"),
            ("map_batch_size", "mapBatchSize"),
            ("map_batching_window_seconds", "mapBatchingWindowSeconds"),
            ("reduce_memory_mb", "reduceMemoryMb"),
            ("reduce_parallelization_factor", "reduceParallelizationFactor"),
        )
        if getattr(after, field) != getattr(before, field)
    ]
    return ", ".join(changes) if changes else "the cdk.json settings"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    console = Console()
    if arguments.command == "run":
        return run(arguments, console)
    if arguments.command == "overhead":
        return overhead_only(arguments, console)
    if arguments.command == "worst-event":
        results = run_worst_events(lambda _step, _fraction: None)
        print("\n".join(worst_event_section(results, ServiceTimes())))
        return 0 if all(result.fits(ServiceTimes()) for result in results) else 1
    return 2


def overhead_only(arguments: argparse.Namespace, console: Console) -> int:
    """Section 3 on its own: the write-cost run only to produce its events (as `run` does), then the handlers."""
    if arguments.messages < 1 or arguments.passes < 1:
        console.print("--messages and --passes must be at least 1")
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch, running_emulator(Path(scratch) / "emulator.log"):
        write_cost = run_write_cost(arguments.messages, lambda _step, _fraction: None)
    overhead = run_handler_overhead(write_cost.events, arguments.passes, lambda _step, _fraction: None)
    print("\n".join(overhead_section(overhead, write_cost)))
    return 0


if __name__ == "__main__":
    exit_with(main)
