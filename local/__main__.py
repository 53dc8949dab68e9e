"""`python -m local up | down | status | demo`: the local runtime's command line (Makefile targets).

Misuse and failures end with one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import NoReturn

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console

from local import demo, lifecycle, status
from local.deployer import DeploymentError
from local.emulator import EmulatorError
from local.paths import LocalPaths

PROGRAM = "python -m local"
EXIT_FAILURE = 1
EXIT_MISUSE = 2
EXIT_INTERRUPTED = 130


class OneLineArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_MISUSE, f"{PROGRAM}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog=PROGRAM, description="Run the pipeline locally.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineArgumentParser)
    commands.add_parser("up", help="start the emulator and runner, deploy the stack (idempotent)")
    commands.add_parser("down", help="stop everything `up` started")
    commands.add_parser("status", help="per-function invocations, errors, retries and iterator lag")
    demo_parser = commands.add_parser("demo", help="up with faults, send, drain, verify exactly, down")
    demo_parser.add_argument("--count", type=int, default=demo.DEFAULT_MESSAGE_COUNT, help="messages to send")
    demo_parser.add_argument("--seed", type=int, default=7)
    demo_parser.add_argument("--keep-running", action="store_true", help="leave the runtime up afterwards")
    demo_parser.add_argument("--drain-timeout", type=float, default=demo.DEFAULT_DRAIN_TIMEOUT_SECONDS, help="seconds")
    return parser


def main(argv: list[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console()
    paths = LocalPaths.default()
    try:
        if arguments.command == "up":
            lifecycle.up(paths, report=console.print)
            return 0
        if arguments.command == "down":
            lifecycle.down(paths, report=console.print)
            return 0
        if arguments.command == "status":
            return status.render_status(paths, console)
        if arguments.command == "demo":
            if arguments.count < 1:
                raise demo.DemoError("--count must be at least 1")
            return demo.run_demo(
                paths,
                console,
                count=arguments.count,
                seed=arguments.seed,
                keep_running=arguments.keep_running,
                drain_timeout_seconds=arguments.drain_timeout,
            )
    except KeyboardInterrupt:
        print(f"{PROGRAM}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (
        DeploymentError,
        EmulatorError,
        lifecycle.LifecycleError,
        demo.DemoError,
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
    sys.exit(main())
