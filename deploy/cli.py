"""Command line: `python -m deploy preflight [--stack-name NAME] [--region R] [-c key=value ...]`.

Exit 0 when nothing stands in the way of `cdk deploy` (warnings and unknowns are shown), 1 when a
check failed, 2 on misuse or an unusable setting. Every error is one line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import boto3
from botocore.exceptions import BotoCoreError
from rich.console import Console
from rich.table import Table

from deploy.preflight import Account, Check, DeploymentPlan, Status, run_preflight
from stacks.settings import PipelineSettings, SettingsError
from toolkit.cli import EXIT_USAGE, OneLineArgumentParser
from toolkit.untrusted import printable

EXIT_READY: Final = 0
EXIT_NOT_READY: Final = 1
EXIT_ERROR: Final = EXIT_USAGE
CDK_JSON: Final = Path(__file__).resolve().parents[1] / "cdk.json"
STATUS_STYLES: Final = {
    Status.PASS: "[green]pass[/green]",
    Status.WARN: "[yellow]warn[/yellow]",
    Status.FAIL: "[bold red]FAIL[/bold red]",
    Status.UNKNOWN: "[cyan]unknown[/cyan]",
}


def _context_pair(text: str) -> tuple[str, str]:
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="python -m deploy", description=__doc__, error_prefix="error: ")
    commands = parser.add_subparsers(dest="command", required=True)
    preflight = commands.add_parser("preflight", help="check the account and region before the first `cdk deploy`")
    preflight.add_argument("--stack-name", help="the stack to deploy (default: cdk.json's stackName)")
    preflight.add_argument("--region", help="AWS region (default: the SDK's, e.g. AWS_REGION or the profile's)")
    preflight.add_argument(
        "-c",
        "--context",
        type=_context_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting as you pass it to `cdk deploy -c` (repeatable)",
    )
    return parser


def read_settings(overrides: Sequence[tuple[str, str]]) -> PipelineSettings:
    """cdk.json's context plus `-c` overrides, validated exactly as synthesis validates them."""
    context: dict[str, Any] = json.loads(CDK_JSON.read_text())["context"]
    context.update(overrides)
    return PipelineSettings.from_context(context.get)


def print_checks(checks: Sequence[Check], account: Account, console: Console) -> None:
    table = Table(title=f"preflight: {account.region}")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for check in checks:
        table.add_row(check.name, STATUS_STYLES[check.status], check.detail)
    console.print(table)
    failed = [check.name for check in checks if check.status is Status.FAIL]
    if failed:
        console.print(f"verdict: [bold red]NOT READY[/bold red], fix: {', '.join(failed)}")
    else:
        console.print("verdict: [bold green]READY[/bold green] for `npx cdk deploy`")


def main(argv: Sequence[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    try:
        settings = read_settings(arguments.context)
    except SettingsError as error:
        print(f"error: {printable(str(error))}", file=sys.stderr)
        return EXIT_ERROR
    session = boto3.session.Session(region_name=arguments.region)
    if not session.region_name:
        print("error: no AWS region: pass --region or set AWS_REGION (or the profile's region)", file=sys.stderr)
        return EXIT_ERROR
    try:
        credentials = session.get_credentials()
    except BotoCoreError as error:  # e.g. a profile that names a missing source profile
        print(f"error: cannot read the AWS credentials: {printable(' '.join(str(error).split()))}", file=sys.stderr)
        return EXIT_ERROR
    if credentials is None:
        print(
            "error: no AWS credentials: configure a profile (aws configure, AWS_PROFILE) or set AWS_ACCESS_KEY_ID",
            file=sys.stderr,
        )
        return EXIT_ERROR
    account = Account(session, session.region_name)
    checks = run_preflight(account, DeploymentPlan.from_settings(settings, arguments.stack_name))
    print_checks(checks, account, Console())
    return EXIT_NOT_READY if any(check.status is Status.FAIL for check in checks) else EXIT_READY
