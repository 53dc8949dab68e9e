"""`python -m local up | down | status | synth | demo | chaos | soak | upgrade`: the local runtime's command line.

Misuse and failures end with one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console

from aggregation.aggregate_items import MAX_SLICES
from aggregation.names import TOKEN_AND_MARKERS, TOKEN_ONLY
from local.deploy import lifecycle, status
from local.deploy.deployer import DeploymentError, synthesize
from local.emulator.control import EmulatorError
from local.paths import LocalPaths
from local.scenarios import chaos, demo, soak
from local.upgrade import scenario as upgrade
from local.upgrade.release_tree import ReleaseTreeError
from local.upgrade.releases import RELEASES, UnknownRelease, find_release
from producer.sender import MAX_PROCESSES, MAX_RATE
from toolkit.cli import EXIT_USAGE, MAX_COUNT, MAX_SECONDS, OneLineArgumentParser, bounded, exit_with

PROGRAM = "python -m local"
EXIT_FAILURE = 1
EXIT_MISUSE = EXIT_USAGE
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog=PROGRAM, description="Run the pipeline locally.", error_prefix=f"{PROGRAM}: ")
    commands = parser.add_subparsers(dest="command", required=True)
    up_parser = commands.add_parser("up", help="start the emulator and runner, deploy the stack (idempotent)")
    up_parser.add_argument(
        "--drained",
        action="store_true",
        help="declare no batch in flight: the upgrade of a stack without the settings guard in mode crt (README)",
    )
    commands.add_parser("down", help="stop everything `up` started")
    commands.add_parser("synth", help="synthesize cdk.out for `up` unless it is newer than every source (make install)")
    commands.add_parser("status", help="per-function invocations, errors, retries and iterator lag")
    demo_parser = commands.add_parser("demo", help="up with faults, send, drain, verify exactly, down")
    demo_parser.add_argument(
        "--count", type=bounded(int, 1, MAX_COUNT), default=demo.DEFAULT_MESSAGE_COUNT, help="messages to send"
    )
    demo_parser.add_argument("--seed", type=bounded(int, 0, None), default=7)
    demo_parser.add_argument("--keep-running", action="store_true", help="leave the runtime up afterwards")
    demo_parser.add_argument(
        "--drain-timeout",
        type=bounded(float, 1, MAX_SECONDS),
        default=demo.DEFAULT_DRAIN_TIMEOUT_SECONDS,
        help="seconds",
    )
    add_chaos_parser(commands)
    soak_parser = commands.add_parser(
        "soak", help="a steady load for a while, exact at the end, memory sampled and held to a budget"
    )
    soak_parser.add_argument(
        "--duration", type=bounded(float, 1, MAX_SECONDS), default=600.0, help="seconds of sending"
    )
    soak_parser.add_argument("--rate", type=bounded(float, 0.1, MAX_RATE), default=50.0, help="messages per second")
    soak_parser.add_argument(
        "--memory-budget-mb",
        type=bounded(float, 1, 1024**2),
        default=soak.DEFAULT_MEMORY_BUDGET_MB,
        help=f"peak resident MB of emulator + runner + workers (default {soak.DEFAULT_MEMORY_BUDGET_MB:g})",
    )
    soak_parser.add_argument(
        "--sample-seconds", type=bounded(float, 0.1, MAX_SECONDS), default=soak.DEFAULT_SAMPLE_SECONDS
    )
    soak_parser.add_argument("--seed", type=bounded(int, 0, None), default=7)
    add_upgrade_parser(commands)
    return parser


def add_upgrade_parser(commands: Any) -> None:
    defaults = upgrade.UpgradeSettings(release=RELEASES[0])
    parser = commands.add_parser(
        "upgrade", help="deploy an earlier release, send, upgrade to this checkout mid-stream, send, verify exactly"
    )
    names = ", ".join(f"{release.name} ({release.commit})" for release in RELEASES)
    parser.add_argument(
        "--from",
        dest="releases",
        action="append",
        metavar="RELEASE",
        help=f"a release or its commit, repeatable (default: every one: {names})",
    )
    parser.add_argument(
        "--count",
        type=bounded(int, 10, MAX_COUNT),
        default=defaults.count,
        help=f"messages per run (default {defaults.count})",
    )
    parser.add_argument("--seed", type=bounded(int, 0, None), default=defaults.seed)
    parser.add_argument(
        "--negative-control",
        action="store_true",
        help="then upgrade from the first release to reduce in mode unsafe-add: it must be caught NOT EXACT",
    )
    parser.add_argument(
        "--reduce-mode",
        choices=(TOKEN_AND_MARKERS, TOKEN_ONLY),
        help="both releases' reduceIdempotency (default: as deployed, crt+marker)",
    )
    parser.add_argument(
        "--drained",
        action="store_true",
        help="the migration for mode crt: stop sending and let the old release drain before the upgrade",
    )
    parser.add_argument("--keep-running", action="store_true", help="leave the last run's runtime up")
    parser.add_argument(
        "--drain-timeout", type=bounded(float, 1, MAX_SECONDS), default=defaults.drain_timeout_seconds, help="seconds"
    )


def upgrade_runs(arguments: argparse.Namespace) -> list[upgrade.UpgradeSettings]:
    releases = [find_release(name) for name in arguments.releases] if arguments.releases else list(RELEASES)
    common = {
        "count": int(arguments.count),
        "seed": int(arguments.seed),
        "drain_timeout_seconds": arguments.drain_timeout,
        "reduce_mode": arguments.reduce_mode,
        "drained": bool(arguments.drained),
    }
    runs = [upgrade.UpgradeSettings(release=release, **common) for release in releases]
    if arguments.negative_control:
        runs.append(upgrade.UpgradeSettings(release=releases[0], negative_control=True, **common))
    runs[-1] = dataclasses.replace(runs[-1], keep_running=bool(arguments.keep_running))
    return runs


def _stages(text: str) -> tuple[str, ...]:
    stages = tuple(stage.strip() for stage in text.split(",") if stage.strip())
    if unknown := [stage for stage in stages if stage not in chaos.STAGES]:
        raise argparse.ArgumentTypeError(f"not a stage: {', '.join(unknown)} (stages: {', '.join(chaos.STAGES)})")
    return stages


def add_chaos_parser(commands: Any) -> None:
    defaults = chaos.ChaosSettings()
    parser = commands.add_parser(
        "chaos", help="every failure at once, figures, and an unsafe negative control that must be caught"
    )
    count, percent, number = bounded(int, 1, MAX_COUNT), bounded(float, 0, 50), bounded(float, 0, 1000)
    parser.add_argument("--count", type=count, default=defaults.count, help=f"messages (default {defaults.count})")
    parser.add_argument("--seed", type=bounded(int, 0, None), default=defaults.seed)
    parser.add_argument(
        "--fault-multiplier",
        type=number,
        default=defaults.fault_multiplier,
        help="function faults before and after the write = the original rates (state 1, map/reduce/archive 2 %%) "
        f"times this (default {defaults.fault_multiplier:g})",
    )
    parser.add_argument(
        "--lost-response-pct",
        type=percent,
        default=defaults.lost_response_pct,
        help=f"lost responses per write at each write site (default {defaults.lost_response_pct:g})",
    )
    parser.add_argument(
        "--throttle-pct",
        type=percent,
        default=defaults.throttle_pct,
        help=f"throttled DynamoDB, Streams and Kinesis reads and writes (default {defaults.throttle_pct:g})",
    )
    parser.add_argument(
        "--runner-kills",
        type=bounded(int, 0, 1000),
        default=defaults.runner_kills,
        help="SIGKILLs of the runner (and its workers) mid-batch, each followed by a restart from the checkpoints "
        f"(default {defaults.runner_kills})",
    )
    parser.add_argument(
        "--worker-kills",
        type=bounded(int, 0, 1000),
        default=defaults.worker_kills,
        help="SIGKILLs of one function's worker inside an invocation, stages in turn "
        f"(default {defaults.worker_kills})",
    )
    for name, default in (
        ("duplicates", defaults.duplicates_pct),
        ("out-of-order", defaults.out_of_order_pct),
        ("modifications", defaults.modifications_pct),
        ("malformed", defaults.malformed_pct),
        ("conflicting", defaults.conflicting_pct),
    ):
        parser.add_argument(
            f"--{name}-pct", type=bounded(float, 0, 100), default=default, help=f"(default {default:g})"
        )
    parser.add_argument(
        "--oversized-records",
        type=bounded(int, 0, MAX_COUNT),
        default=defaults.oversized_records,
        help=f"~1 MB invalid records (default {defaults.oversized_records})",
    )
    parser.add_argument(
        "--reshaped-retries",
        type=_stages,
        default=defaults.reshaped_retries,
        help="stages whose failed batches the runner re-delivers grown, shrunk or shifted (the map's also "
        "out of order), comma-separated, "
        f"'' for none (default {','.join(defaults.reshaped_retries)})",
    )
    parser.add_argument(
        "--again-after-success-pct",
        type=bounded(float, 0, 50),
        default=defaults.again_after_success_pct,
        help="successful batches of every stage the runner delivers once more, at least once "
        f"(default {defaults.again_after_success_pct:g})",
    )
    parser.add_argument(
        "--no-kept-tokens",
        action="store_true",
        help="do not keep the tokens of cancelled reduce transactions taken in the emulator",
    )
    parser.add_argument("--no-control", action="store_true", help="skip the unsafe-add negative control")
    parser.add_argument(
        "--control-count", type=count, help="messages of the control run (default: --count, at most 5,000)"
    )
    parser.add_argument(
        "--drain-timeout",
        type=bounded(float, 1, MAX_SECONDS),
        default=defaults.drain_timeout_seconds,
        help=f"seconds without a completed record before a run fails (default {defaults.drain_timeout_seconds:g})",
    )
    parser.add_argument(
        "--stream-shards",
        type=bounded(int, 1, 64),
        default=defaults.stream_shards,
        help=f"shards per DynamoDB stream: concurrent map and reduce invocations (default {defaults.stream_shards})",
    )
    parser.add_argument(
        "--reduce-slices",
        type=bounded(int, 1, MAX_SLICES),
        default=defaults.reduce_slices,
        help=f"slices of the totals; fewer than shards makes reducers conflict (default {defaults.reduce_slices})",
    )
    parser.add_argument("--aggregate", action="store_true", help="the producer sends KPL aggregated records")
    parser.add_argument(
        "--hostile-aggregates",
        type=bounded(float, 0, 100),
        default=0.0,
        metavar="PCT",
        help="with --aggregate: PCT%% of the aggregates built as an attacker would (default 0)",
    )
    parser.add_argument(
        "--processes",
        type=bounded(int, 1, MAX_PROCESSES),
        default=defaults.processes,
        help="the producer's sending processes",
    )


def chaos_settings(arguments: argparse.Namespace) -> chaos.ChaosSettings:
    return chaos.ChaosSettings(
        count=int(arguments.count),
        seed=int(arguments.seed),
        fault_multiplier=arguments.fault_multiplier,
        lost_response_pct=arguments.lost_response_pct,
        throttle_pct=arguments.throttle_pct,
        runner_kills=int(arguments.runner_kills),
        worker_kills=int(arguments.worker_kills),
        duplicates_pct=arguments.duplicates_pct,
        out_of_order_pct=arguments.out_of_order_pct,
        modifications_pct=arguments.modifications_pct,
        malformed_pct=arguments.malformed_pct,
        conflicting_pct=arguments.conflicting_pct,
        oversized_records=int(arguments.oversized_records),
        reshaped_retries=tuple(arguments.reshaped_retries),
        again_after_success_pct=arguments.again_after_success_pct,
        kept_tokens=not arguments.no_kept_tokens,
        control=not arguments.no_control,
        control_count=None if arguments.control_count is None else int(arguments.control_count),
        drain_timeout_seconds=arguments.drain_timeout,
        stream_shards=int(arguments.stream_shards),
        reduce_slices=int(arguments.reduce_slices),
        aggregate=bool(arguments.aggregate),
        hostile_aggregates_pct=arguments.hostile_aggregates,
        processes=int(arguments.processes),
    )


def run_upgrade_command(arguments: argparse.Namespace, paths: LocalPaths, console: Console) -> int:
    """The upgrade runs, beside a runtime the user already runs (its own directory and port), if any."""
    runs = upgrade_runs(arguments)
    paths, beside = demo.demo_paths(paths, "upgrade")
    if beside:
        console.print(f"a runtime is already running: the upgrade runs beside it in {paths.state_dir}")
    return upgrade.run_upgrades(paths, console, runs)


def main(argv: list[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console()
    paths = LocalPaths.default()
    try:
        if arguments.command == "up":
            lifecycle.up(paths, report=console.print, drained=bool(arguments.drained))
            return 0
        if arguments.command == "down":
            lifecycle.down(paths, report=console.print)
            return 0
        if arguments.command == "status":
            return status.render_status(paths, console)
        if arguments.command == "synth":
            console.print(f"cloud assembly for `up`: {synthesize()}")
            return 0
        if arguments.command == "demo":
            return demo.run_demo(
                paths,
                console,
                count=arguments.count,
                seed=arguments.seed,
                keep_running=arguments.keep_running,
                drain_timeout_seconds=arguments.drain_timeout,
            )
        if arguments.command == "chaos":
            return chaos.run_chaos(paths, console, chaos_settings(arguments))
        if arguments.command == "upgrade":
            return run_upgrade_command(arguments, paths, console)
        if arguments.command == "soak":
            return soak.run_soak(
                paths,
                console,
                duration_seconds=arguments.duration,
                rate=arguments.rate,
                memory_budget_mb=arguments.memory_budget_mb,
                sample_seconds=arguments.sample_seconds,
                seed=arguments.seed,
            )
    except KeyboardInterrupt:
        print(f"{PROGRAM}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (
        DeploymentError,
        EmulatorError,
        lifecycle.LifecycleError,
        demo.DemoError,
        chaos.ChaosError,
        upgrade.UpgradeError,
        UnknownRelease,
        ReleaseTreeError,
        ClientError,
        BotoCoreError,
        OSError,
    ) as error:
        first_line, _, rest = str(error).partition("\n")
        print(f"{PROGRAM} {arguments.command}: {first_line}", file=sys.stderr)
        if rest:
            print(rest, file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_MISUSE


if __name__ == "__main__":
    exit_with(main)
