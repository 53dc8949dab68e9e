"""The operator tools' shared kit: one-line misuse, the pipeline lookup order, the comparison rule."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from tests.environment import repository_root
from toolkit.cli import EXIT_OUTPUT_CLOSED, OneLineArgumentParser, bounded
from toolkit.ledger import NodeTotals, differing_keys, node_keys
from toolkit.pipeline import PipelineTarget, TargetError, locate_pipeline, session


def misuse(parser: OneLineArgumentParser, arguments: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(arguments)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_subcommands_share_the_prefix_and_name_their_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = OneLineArgumentParser(prog="python -m tool", error_prefix="error: ")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run").add_argument("--count", type=bounded(int, 1, None))
    assert misuse(parser, ["run", "--count", "0"], capsys) == (
        "error: argument --count: must be at least 1, got 0 (see `python -m tool run --help`)\n"
    )
    assert misuse(parser, [], capsys) == (
        "error: the following arguments are required: command (see `python -m tool --help`)\n"
    )
    plain = OneLineArgumentParser(prog="python -m other")
    assert misuse(plain, ["--what"], capsys).startswith("python -m other: error: unrecognized arguments: --what")


def test_a_reader_that_stops_early_ends_a_tool_quietly() -> None:
    """`tool | head`: no BrokenPipeError traceback, the exit status of a command killed by SIGPIPE."""
    printing_tool = (
        "from toolkit.cli import exit_with\n"
        "def main() -> int:\n"
        "    for line in range(200_000):\n"
        "        print('plan row', line)\n"
        "    return 0\n"
        "exit_with(main)\n"
    )
    tool = subprocess.Popen(
        [sys.executable, "-c", printing_tool],
        cwd=repository_root(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert tool.stdout is not None and tool.stderr is not None
    assert tool.stdout.readline() == b"plan row 0\n"
    tool.stdout.close()
    error = tool.stderr.read().decode()
    assert tool.wait(timeout=60) == EXIT_OUTPUT_CLOSED
    assert error == ""


def test_every_tool_exits_through_exit_with() -> None:
    """A tool whose entry point exits with main's status itself would print a traceback under `| head`."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=repository_root(), capture_output=True, text=True, check=True
    ).stdout.split()
    entry_points = [path for path in tracked if "exit_with(main)" in (repository_root() / path).read_text()]
    bare = {path for path in tracked if "sys.exit(" + "main(" in (repository_root() / path).read_text()}
    assert len(entry_points) >= 16
    # The CDK app's output is the cloud assembly, read by the CDK CLI; the Lambda bootstrap runs
    # in a function's environment, which holds the function's packages and not the toolkit.
    assert bare == {"app.py", "local/runner/lambda_bootstrap.py"}


def test_bounded_numbers_say_what_was_expected() -> None:
    percentage = bounded(float, 0, 100)
    assert percentage("12.5") == 12.5
    with pytest.raises(argparse.ArgumentTypeError, match="must be between 0 and 100, got 101"):
        percentage("101")
    with pytest.raises(argparse.ArgumentTypeError, match=r"an integer expected, got '1\.5'"):
        bounded(int, 0, None)("1.5")


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999"])
def test_a_bounded_number_is_finite(text: str) -> None:
    """`value < low` is False for NaN: every bounded option let `nan` through (issue 38)."""
    with pytest.raises(argparse.ArgumentTypeError, match=f"must be a finite number, got {text}"):
        bounded(float, 0, None)(text)
    with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number"):
        bounded(float, -1e9, 1e9)(text)


def write(path: Path, **outputs: str) -> Path:
    path.write_text(json.dumps(outputs), encoding="utf-8")
    return path


def test_lookup_order_and_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    missing = tmp_path / "absent.json"
    assert locate_pipeline(outputs_path=missing) is None  # nothing names a pipeline
    with pytest.raises(TargetError, match=r"absent\.json does not exist"):
        locate_pipeline(outputs_path=missing, outputs_must_exist=True)

    outputs = write(tmp_path / "outputs.json", endpoint_url="http://127.0.0.1:1", aggregate_table="A")
    found = locate_pipeline(outputs_path=outputs, needs=("aggregate_table",))
    assert found == PipelineTarget(
        aggregate_table="A", region="us-east-1", endpoint_url="http://127.0.0.1:1", source=str(outputs)
    )
    assert locate_pipeline(region="eu-west-3", outputs_path=outputs) == PipelineTarget(
        aggregate_table="A", region="eu-west-3", endpoint_url="http://127.0.0.1:1", source=str(outputs)
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    assert locate_pipeline(outputs_path=outputs) == PipelineTarget(
        aggregate_table="A", region="us-east-1", endpoint_url="http://127.0.0.1:2", source=str(outputs)
    )
    with pytest.raises(TargetError, match=r"outputs.json has no stream_name, archive_bucket \(is `make up`"):
        locate_pipeline(outputs_path=outputs, needs=("stream_name", "aggregate_table", "archive_bucket"))


def test_a_stack_without_an_output_names_the_output() -> None:
    with pytest.raises(TargetError, match="stack S has no output ArchiveBucketName"):
        PipelineTarget(aggregate_table="A", source="stack S").require("aggregate_table", "archive_bucket")


def test_dummy_credentials_only_against_an_emulator_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    credentials = session("us-east-1", "http://127.0.0.1:1").get_credentials()
    assert credentials is not None and credentials.access_key == "testing"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    credentials = session("us-east-1", "http://127.0.0.1:1").get_credentials()
    assert credentials is not None and credentials.access_key == "AKIAEXAMPLE"


def test_absent_nodes_equal_zero_and_keys_starting_with_hash_are_nodes_like_any_other() -> None:
    expected = {
        "A": NodeTotals(Decimal("1.50"), 1),
        "B": NodeTotals(Decimal(0), 0),
        "#1 desk": NodeTotals(Decimal(9), 9),
    }
    actual = {"A": NodeTotals(Decimal("1.5"), 1), "C": NodeTotals(Decimal(0), 1), "D": NodeTotals(Decimal("0.1"), 0)}
    assert node_keys(expected, actual) == ["#1 desk", "A", "B", "C", "D"]
    assert differing_keys(expected, actual) == ["#1 desk", "C", "D"]


def test_clients_look_for_the_outputs_where_local_state_dir_puts_them(tmp_path: Path) -> None:
    """`make up` writes to ``$LOCAL_STATE_DIR/outputs.json``; the producer looked in ``.local/`` whatever it said."""
    result = subprocess.run(
        [sys.executable, "-m", "producer", "send", "--count", "1"],
        check=False,
        env={**os.environ, "LOCAL_STATE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert f"{tmp_path / 'outputs.json'}" in result.stderr + result.stdout
