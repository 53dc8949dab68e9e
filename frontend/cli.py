"""``python -m frontend``: the web dashboard (default) or ``--terminal``.

Misuse and unreachable targets end with one line on stderr and a non-zero
status, never a traceback: this is a tool people start by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from botocore.exceptions import BotoCoreError

from frontend.ledger import LedgerWatcher
from frontend.snapshot import SnapshotBuilder, TableReadError
from frontend.target import TableTarget, WatchedPipeline, resolve_target
from frontend.terminal import run_terminal
from frontend.web import DashboardServer, RemoteServingRefused, SnapshotPublisher, is_loopback_host
from toolkit.cli import EXIT_USAGE, OneLineArgumentParser, bounded
from toolkit.ledger import DEFAULT_LEDGER_PATH
from toolkit.pipeline import DEFAULT_OUTPUTS_PATH, TargetError

PROGRAM = "python -m frontend"

#: Exit status for wrong arguments (argparse's convention).
USAGE_ERROR = EXIT_USAGE
#: Exit status when the arguments are fine but the table cannot be reached or served.
RUNTIME_ERROR = 1
MIN_INTERVAL_SECONDS = 0.05
MAX_INTERVAL_SECONDS = 60.0


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = OneLineArgumentParser(
        prog=PROGRAM,
        description="Live, read-only dashboard of the AggregateTable: a web page (default) or a terminal view.",
    )
    parser.add_argument("--terminal", action="store_true", help="show the terminal view instead of serving the page")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind the web server to (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=bounded(int, 0, 65535), default=8000, help="port of the web server (default 8000; 0 picks one)"
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="serve other machines when --host is not loopback: the page has no authentication, so anyone who "
        "reaches the port reads every aggregate",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="with --allow-remote, also answer requests for this host name (the machine's own names and any IP "
        "address always are; other names are refused, against DNS rebinding)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--stack-name", metavar="NAME", help="read the table name from this CloudFormation stack's outputs"
    )
    where.add_argument("--table-name", metavar="NAME", help="watch this table (set AWS_ENDPOINT_URL for an emulator)")
    where.add_argument(
        "--outputs",
        type=Path,
        metavar="PATH",
        help=f"local runtime outputs file (default {DEFAULT_OUTPUTS_PATH}, written by `make up`)",
    )
    parser.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    ledger = parser.add_mutually_exclusive_group()
    ledger.add_argument(
        "--ledger",
        type=Path,
        metavar="PATH",
        default=DEFAULT_LEDGER_PATH,
        help=f"producer ledger to verify against (default {DEFAULT_LEDGER_PATH}; re-read when it changes)",
    )
    ledger.add_argument("--no-ledger", action="store_true", help="do not verify against a ledger")
    parser.add_argument(
        "--interval",
        type=bounded(float, MIN_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS),
        default=1.0,
        metavar="SECONDS",
        help="seconds between reads of the table (default 1, at most 60)",
    )
    return parser


def _fail(status: int, message: str) -> int:
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the dashboard; returns the process exit status."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if not arguments.terminal and not arguments.allow_remote and not is_loopback_host(arguments.host):
        parser.error(
            f"--host {arguments.host} serves the dashboard to other machines, without authentication: "
            "add --allow-remote to mean it"
        )
    if arguments.allowed_host and not arguments.allow_remote:
        parser.error("--allowed-host only matters with --allow-remote")

    def resolve() -> TableTarget:
        return resolve_target(
            table_name=arguments.table_name,
            stack_name=arguments.stack_name,
            outputs_path=arguments.outputs,
            region=arguments.region,
        )

    follows = arguments.outputs or (
        DEFAULT_OUTPUTS_PATH if not (arguments.table_name or arguments.stack_name) else None
    )
    try:
        pipeline = WatchedPipeline(resolve, follows)
        pipeline.read_table()  # fail now, with a clear message, rather than show an empty page
    except TargetError as error:
        return _fail(USAGE_ERROR, str(error))
    except BotoCoreError as error:  # e.g. no region configured
        return _fail(USAGE_ERROR, str(error))
    except TableReadError as error:
        return _fail(RUNTIME_ERROR, f"{error} ({pipeline.target.description})")

    ledger = None if arguments.no_ledger else LedgerWatcher(arguments.ledger)
    builder = SnapshotBuilder(
        pipeline.table_name,
        pipeline.read_table,
        ledger,
        read_quarantine=pipeline.read_quarantine,
        liveness=pipeline.liveness,
    )
    if arguments.terminal:
        return run_terminal(builder, arguments.interval)
    return _serve(builder, arguments, pipeline.target.description)


def _serve(builder: SnapshotBuilder, arguments: argparse.Namespace, description: str) -> int:
    host, port = arguments.host, arguments.port
    publisher = SnapshotPublisher(builder, arguments.interval)
    try:
        server = DashboardServer((host, port), publisher, arguments.allow_remote, arguments.allowed_host)
    except RemoteServingRefused as error:  # a name that resolved beyond loopback
        return _fail(USAGE_ERROR, str(error))
    except (OSError, ValueError) as error:
        return _fail(RUNTIME_ERROR, f"cannot serve on {host}:{port}: {getattr(error, 'strerror', None) or error}")
    publisher.start()
    print(f"Dashboard of {description} at {server.url} (Ctrl-C to stop)", flush=True)
    if server.remote:
        print(
            f"{PROGRAM}: warning: serving other machines on {server.url}: the page is read-only but has no "
            "authentication; anyone who can reach this port reads every aggregate",
            file=sys.stderr,
            flush=True,
        )
    try:
        server.serve_forever(poll_interval=0.25)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        publisher.stop()
    return 0
