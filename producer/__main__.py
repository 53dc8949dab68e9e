"""``python -m producer send | verify | clear``: a thin shell over the Python API.

Exit codes: 0 success (``verify``: exact; ``clear``: every node back at zero), 1 ``verify``
found a mismatch, ``clear`` timed out with nodes or state items left, or ``send --watch`` found
the pipeline not running (nothing applied: locally its runner gone, on AWS no function invoked), 2 misuse or an
operational error (AWS, ledger, target), 130 interrupted.
Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console

from producer.cleanup import DEFAULT_CLEAR_TIMEOUT_SECONDS, ClearTimeout, clear_pipeline
from producer.display import (
    ClearProgressDisplay,
    DrainProgressDisplay,
    PipelineDrainDisplay,
    SendProgressDisplay,
    WatchLines,
    render_clear_summary,
    render_pipeline_summary,
    render_send_summary,
    render_verification_report,
)
from producer.model import DEFAULT_HIERARCHY_LEVELS, parse_hierarchy_levels
from producer.sender import (
    MAX_CONCURRENCY,
    MAX_PROCESSES,
    MAX_RATE,
    SendError,
    SendOptions,
    send_messages,
    stop_on_sigterm,
)
from producer.targets import resolve_target
from producer.trial_cost import describe, estimate, refusal
from producer.verifier import verify_pipeline
from producer.watch import BacklogCheck, PipelineWatch, pipeline_reader
from toolkit.cli import MAX_COUNT, MAX_SECONDS, OneLineArgumentParser, bounded, exit_with
from toolkit.ledger import DEFAULT_LEDGER_PATH, LedgerError
from toolkit.liveness import pipeline_liveness
from toolkit.pipeline import DEFAULT_OUTPUTS_PATH, PipelineTarget, TargetError, environment_endpoint
from toolkit.untrusted import printable

PROGRAM = "producer"
EXIT_MISMATCH = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
MAX_EPOCH_MS = 10**14
"""Year 5138, the latest Timestamp the pipeline keeps for latency (`aggregation.messages.LATEST_TIMESTAMP`)."""


_count = bounded(int, 1, MAX_COUNT)
_seed = bounded(int, 0, None)
_percentage = bounded(float, 0, 100)
_seconds = bounded(float, 1e-9, MAX_SECONDS)
_wait = bounded(float, 0, MAX_SECONDS)
_rate = bounded(float, 0, MAX_RATE)
_concurrency = bounded(int, 1, MAX_CONCURRENCY)
_processes = bounded(int, 1, MAX_PROCESSES)


def _levels(text: str) -> tuple[str, ...]:
    try:
        return parse_hierarchy_levels(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    common = OneLineArgumentParser(add_help=False, error_prefix=f"{PROGRAM}: error: ")
    where = common.add_argument_group("pipeline")
    where.add_argument("--stack-name", help="deployed stack whose CloudFormation outputs name the resources")
    where.add_argument("--region", help="AWS region of --stack-name (default: the usual AWS lookup)")
    where.add_argument(
        "--outputs",
        type=Path,
        default=DEFAULT_OUTPUTS_PATH,
        help=f"local runtime outputs file (default {DEFAULT_OUTPUTS_PATH})",
    )
    where.add_argument(
        "--ledger", type=Path, default=DEFAULT_LEDGER_PATH, help=f"ground-truth ledger (default {DEFAULT_LEDGER_PATH})"
    )
    where.add_argument("--no-progress", action="store_true", help="no live display even on a terminal")

    parser = OneLineArgumentParser(
        prog=f"python -m {PROGRAM}",
        description="Load generator and exactly-once verifier for the pipeline.",
        error_prefix=f"{PROGRAM}: error: ",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{send,verify,clear}")

    send = commands.add_parser(
        "send", parents=[common], help="send messages and merge the ground truth into the ledger"
    )
    amount = send.add_mutually_exclusive_group()
    amount.add_argument("--count", type=_count, help="messages to send (default 3000)")
    amount.add_argument("--duration", type=_seconds, help="send for this many seconds instead")
    send.add_argument("--rate", type=_rate, default=0.0, help="messages per second, held steady (0: flat out)")
    send.add_argument(
        "--concurrency", type=_concurrency, default=16, help="parallel put_records calls per process (default 16)"
    )
    send.add_argument(
        "--processes",
        type=_processes,
        default=min(os.cpu_count() or 1, MAX_PROCESSES),
        help=f"sending processes, one merged ledger (default one per core: {os.cpu_count() or 1}; "
        f"at most {MAX_PROCESSES})",
    )
    send.add_argument(
        "--aggregate",
        action="store_true",
        help="pack messages into KPL aggregated records (50 KiB, one shard each), as the KPL does",
    )
    send.add_argument(
        "--hostile-aggregates",
        type=_percentage,
        default=0.0,
        metavar="PCT",
        help="with --aggregate: PCT%% of the aggregates built as an attacker would (a 300,000-byte partition key, "
        "invalid UTF-8 in keys and tags) around the same messages (default 0)",
    )
    send.add_argument("--trades", type=_count, help="distinct TradeIDs (default: derived from the count)")
    send.add_argument("--duplicates-pct", type=_percentage, default=10.0, help="identical resends (default 10)")
    send.add_argument(
        "--out-of-order-pct", type=_percentage, default=5.0, help="earlier versions sent after later ones (default 5)"
    )
    send.add_argument(
        "--modifications-pct", type=_percentage, default=20.0, help="new versions of existing trades (default 20)"
    )
    send.add_argument("--malformed-pct", type=_percentage, default=1.0, help="invalid records (default 1)")
    send.add_argument(
        "--conflicting-pct",
        type=_percentage,
        default=0.0,
        help="same TradeID and Version as a trade's current version, other content (default 0)",
    )
    send.add_argument(
        "--oversized-records",
        type=bounded(int, 0, MAX_COUNT),
        default=0,
        help="~1 MB invalid records spread over the run (default 0)",
    )
    send.add_argument("--seed", type=_seed, help="random seed; the same seed sends the same messages")
    send.add_argument(
        "--hierarchy-levels",
        type=_levels,
        default=DEFAULT_HIERARCHY_LEVELS,
        help=f"comma-separated levels, as the pipeline is configured (default {','.join(DEFAULT_HIERARCHY_LEVELS)})",
    )
    send.add_argument(
        "--watch",
        type=_wait,
        default=120.0,
        help="read back the applied rate and latency as it runs (locally from the stack, on AWS from CloudWatch), "
        "then wait up to this many seconds for the pipeline to apply what was sent and print p50/p99 "
        "(default 120; 0: no read-back)",
    )
    send.add_argument(
        "--yes",
        action="store_true",
        help="send to a deployed stack even when the estimated cost is above $1 (the estimate is printed first)",
    )
    send.add_argument(
        "--timestamp-epoch-ms",
        type=bounded(int, 0, MAX_EPOCH_MS),
        help="stamp messages from this epoch (ms) + 1 ms each instead of the clock: fully reproducible bytes",
    )

    verify = commands.add_parser("verify", parents=[common], help="wait for the drain and compare with the ledger")
    verify.add_argument("--timeout", type=_seconds, default=300.0, help="seconds to wait for the drain (default 300)")
    verify.add_argument(
        "--settle", type=_seconds, default=20.0, help="seconds without change that count as drained (default 20)"
    )
    verify.add_argument("--poll", type=_seconds, default=1.0, help="seconds between polls (default 1)")

    clear = commands.add_parser(
        "clear",
        parents=[common],
        help="delete every trade through the pipeline (wait until every node is zero) and delete the ledger",
    )
    clear.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_CLEAR_TIMEOUT_SECONDS,
        help=f"seconds to wait for every node to reach zero (default {DEFAULT_CLEAR_TIMEOUT_SECONDS:g})",
    )
    clear.add_argument("--poll", type=_seconds, default=1.0, help="seconds between rounds (default 1)")
    return parser


def _target(arguments: argparse.Namespace) -> PipelineTarget:
    return resolve_target(arguments.stack_name, arguments.region, arguments.outputs)


def _show_progress(arguments: argparse.Namespace) -> bool | None:
    return False if arguments.no_progress else None


def run_send(arguments: argparse.Namespace, console: Console, status: Console) -> int:
    options = SendOptions(
        count=arguments.count,
        duration=arguments.duration,
        rate=arguments.rate,
        concurrency=arguments.concurrency,
        trades=arguments.trades,
        duplicates_pct=arguments.duplicates_pct,
        out_of_order_pct=arguments.out_of_order_pct,
        modifications_pct=arguments.modifications_pct,
        malformed_pct=arguments.malformed_pct,
        conflicting_pct=arguments.conflicting_pct,
        oversized_records=arguments.oversized_records,
        seed=arguments.seed,
        ledger_path=arguments.ledger,
        hierarchy_levels=arguments.hierarchy_levels,
        timestamp_epoch_ms=arguments.timestamp_epoch_ms,
        aggregate=arguments.aggregate,
        hostile_aggregates_pct=arguments.hostile_aggregates,
        processes=arguments.processes,
    )
    options.generator_config(0)  # validate the percentages and counts before touching AWS
    target = _target(arguments)  # a stack that cannot be found is one line, before any estimate
    if arguments.stack_name and environment_endpoint() is None:  # AWS, not an emulator: it bills
        cost = estimate(arguments.rate, arguments.count, arguments.duration)
        for line in describe(cost):
            status.print(line, highlight=False, soft_wrap=True)
        if (refused := refusal(cost, arguments.yes)) is not None:
            raise ValueError(refused)
    stop_on_sigterm()
    if not arguments.watch:
        summary = send_messages(target, options, progress=SendProgressDisplay(status, _show_progress(arguments)))
        render_send_summary(summary, console)
        return 0
    watch = PipelineWatch(pipeline_reader(target), BacklogCheck(options.applying_share))
    watch.start()
    enabled = _show_progress(arguments)
    plain = enabled is None and not status.is_terminal
    with WatchLines(status, watch) if plain else contextlib.nullcontext():
        summary = send_messages(target, options, progress=SendProgressDisplay(status, enabled, watch))
        render_send_summary(summary, console)
        started = time.monotonic()
        with PipelineDrainDisplay(status, enabled, watch) as display:

            def refresh_and_sleep(seconds: float) -> None:
                display.refresh()
                time.sleep(seconds)

            settled = watch.wait_until_settled(arguments.watch, sleep=refresh_and_sleep)
    dashboard = "" if target.is_local else target.dashboard_url  # the console has no emulator
    figures = watch.stop()
    render_pipeline_summary(figures, settled, dashboard, time.monotonic() - started, console)
    # Nothing applied (or, locally, still applying at the deadline): a stopped pipeline, or a slow one?
    waiting = f"the {summary.messages_sent:,} messages sent wait in the stream until it runs"
    if (
        summary.messages_sent
        and (figures.applied == 0 or (target.is_local and not settled))
        and said_the_pipeline_is_stopped(target, waiting)
    ):
        return EXIT_MISMATCH
    return 0


def said_the_pipeline_is_stopped(target: PipelineTarget, consequence: str) -> bool:
    """Say in one line, when the pipeline is known not to run, why the totals are not there yet.

    A stopped pipeline and a wrong one look the same in the tables (nodes that differ); only the
    liveness check tells them apart, and an operator who is told MISMATCH alone goes looking for
    a defect instead of starting the pipeline.
    """
    answer = pipeline_liveness(target)()
    if answer.running is not False:
        return False
    print(
        f"{PROGRAM}: the pipeline is not running: {printable(answer.reason)}; {consequence}",
        file=sys.stderr,
    )
    return True


def run_verify(arguments: argparse.Namespace, console: Console, status: Console) -> int:
    target = _target(arguments)
    with DrainProgressDisplay(status, _show_progress(arguments)) as display:
        report = verify_pipeline(
            target,
            arguments.ledger,
            arguments.timeout,
            settle_seconds=arguments.settle,
            poll_interval=arguments.poll,
            progress=display,
        )
    render_verification_report(report, console)
    if report.exact:
        return 0
    said_the_pipeline_is_stopped(
        target, "messages still in the stream are applied only then: verify again once it runs"
    )
    return EXIT_MISMATCH


def run_clear(arguments: argparse.Namespace, console: Console, status: Console) -> int:
    target = _target(arguments)
    try:
        with ClearProgressDisplay(status, _show_progress(arguments)) as display:
            summary = clear_pipeline(
                target, arguments.ledger, timeout=arguments.timeout, poll_interval=arguments.poll, progress=display
            )
    except ClearTimeout:
        said_the_pipeline_is_stopped(target, "the deleted trades leave the totals only then: clear again once it runs")
        raise
    render_clear_summary(summary, console)
    return 0


def _one_line(text: str) -> str:
    """An error on one line, its control characters escaped (an AWS message may quote a name)."""
    return printable(" ".join(text.split()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    # Off a terminal (CI logs) rich would assume 80 columns and truncate trade IDs.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    status = Console(stderr=True)
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    commands = {"send": run_send, "verify": run_verify, "clear": run_clear}
    try:
        return commands[arguments.command](arguments, console, status)
    except (ClientError, BotoCoreError) as error:
        errors.print(f"{PROGRAM}: AWS error: {_one_line(str(error))}", markup=False)
    except SendError as error:
        errors.print(f"{PROGRAM}: send failed: {_one_line(str(error))}", markup=False)
    except ClearTimeout as error:
        errors.print(f"{PROGRAM}: clear not finished: {_one_line(str(error))}", markup=False)
        return EXIT_MISMATCH
    except (TargetError, LedgerError) as error:
        errors.print(f"{PROGRAM}: {_one_line(str(error))}", markup=False)
    except ValueError as error:
        errors.print(f"{PROGRAM}: error: {_one_line(str(error))}", markup=False)
    except KeyboardInterrupt:
        errors.print(
            f"{PROGRAM}: interrupted (accepted messages are in the ledger, those in doubt counted)", markup=False
        )
        return EXIT_INTERRUPTED
    return EXIT_ERROR


if __name__ == "__main__":
    exit_with(main)
