"""``python -m frontend``: finding the table, one-line errors, and clean Ctrl-C in both views."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from moto.server import ThreadedMotoServer

from frontend.cli import main
from frontend.target import TableTarget, WatchedPipeline, resolve_target
from tests.frontend.dashboard_helpers import put_leaf_with_parents, put_stats
from toolkit.pipeline import TargetError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def write_outputs(directory: Path, endpoint_url: str, table_name: str) -> Path:
    """The local runtime's ``.local/outputs.json`` (docs/design.md, "Local runtime")."""
    path = directory / ".local" / "outputs.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"endpoint_url": endpoint_url, "region": "us-east-1", "aggregate_table": table_name}))
    return path


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def dashboard_process(directory: Path, *arguments: str) -> subprocess.Popen[str]:
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("AWS_") or name == "AWS_SHARED"
    }
    environment["PYTHONPATH"] = str(REPOSITORY_ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "frontend", *arguments],
        cwd=directory,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal: a suite run as a background job (`make test &`) inherits SIGINT ignored,
        # and Python then leaves Ctrl-C ignored in the dashboard too.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--table-name", "A", "--stack-name", "B"], "argument --stack-name: not allowed with argument --table-name"),
        (["--port", "70000"], "argument --port: must be between 0 and 65535, got 70000"),
        (["--interval", "0"], "argument --interval: must be between 0.05 and 60, got 0"),
        (["--interval", "nan"], "argument --interval: must be a finite number, got nan"),
        (["--port", "eighty"], "argument --port: an integer expected, got 'eighty'"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["--host", "0.0.0.0"], "--host 0.0.0.0 serves the dashboard to other machines, without authentication: add "),
        (["--host", "192.0.2.7", "--table-name", "A"], "add --allow-remote to mean it"),
        (["--host", "dashboard.example"], "add --allow-remote to mean it"),
        (["--allowed-host", "dash.internal"], "--allowed-host only matters with --allow-remote"),
    ],
)
def test_misuse_is_one_line_and_status_2(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(arguments)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith("python -m frontend: error: ")
    assert message in error


def test_without_a_target_it_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([]) == 2
    assert capsys.readouterr().err == (
        "python -m frontend: error: no pipeline to watch: .local/outputs.json does not exist (run `make up`), "
        "and neither --stack-name nor --table-name was given\n"
    )
    assert main(["--outputs", "elsewhere.json"]) == 2
    assert capsys.readouterr().err == "python -m frontend: error: elsewhere.json does not exist\n"
    (tmp_path / "broken.json").write_text("{")
    assert main(["--outputs", "broken.json"]) == 2
    assert "broken.json is not valid JSON" in capsys.readouterr().err
    (tmp_path / "early.json").write_text('{"endpoint_url": "http://127.0.0.1:1"}')
    assert main(["--outputs", "early.json"]) == 2
    assert "early.json has no aggregate_table" in capsys.readouterr().err


def test_unreachable_endpoint_or_missing_table_is_one_line_and_status_1(
    tmp_path: Path, moto_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    down = write_outputs(tmp_path / "down", f"http://127.0.0.1:{closed_port()}", "AggregateTable")
    assert main(["--outputs", str(down)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "cannot read table AggregateTable: Could not connect to the endpoint URL" in error

    missing = write_outputs(tmp_path / "missing", moto_endpoint, "NoSuchTable")
    assert main(["--outputs", str(missing)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "cannot read table NoSuchTable: it does not exist (ResourceNotFoundException)" in error
    assert error.count("NoSuchTable") == 1


def test_stack_name_reads_the_aggregate_table_output(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    template = {
        "Resources": {"Topic": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"AggregateTableName": {"Value": "ExactlyOnce-AggregateTable-ABC"}},
    }
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(StackName="DashboardTestStack", TemplateBody=json.dumps(template))
    try:
        target = resolve_target(table_name=None, stack_name="DashboardTestStack", outputs_path=None, region=None)
        assert target == TableTarget("ExactlyOnce-AggregateTable-ABC", "us-east-1", None, "stack DashboardTestStack")
        with pytest.raises(TargetError, match="stack NoSuchStack: Stack with id NoSuchStack does not exist"):
            resolve_target(table_name=None, stack_name="NoSuchStack", outputs_path=None, region=None)
    finally:
        cloudformation.delete_stack(StackName="DashboardTestStack")


def test_web_view_serves_the_table_from_outputs_json_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path, moto_endpoint: str, aggregate_table: Table
) -> None:
    put_leaf_with_parents(aggregate_table, "Delta:FXSpot:AMER", "1234567.891234", 2)
    write_outputs(tmp_path, moto_endpoint, aggregate_table.name)
    process = dashboard_process(tmp_path, "--port", "0", "--no-ledger")
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert banner.startswith("Dashboard of local runtime (.local/outputs.json) at http://127.0.0.1:")
        url = banner.split(" at ", 1)[1].split(" ", 1)[0]
        with urllib.request.urlopen(f"{url}api/snapshot", timeout=5) as response:
            document = json.loads(response.read())
        assert document["totals"]["value"] == "1,234,567.891234"
        assert document["verification"]["status"] == "no-ledger"
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0
    assert "Traceback" not in stderr


def test_allow_remote_serves_other_machines_with_a_warning_and_a_host_allowlist(
    tmp_path: Path, moto_endpoint: str, aggregate_table: Table
) -> None:
    put_leaf_with_parents(aggregate_table, "Delta:FXSpot:AMER", "1", 1)
    write_outputs(tmp_path, moto_endpoint, aggregate_table.name)
    process = dashboard_process(tmp_path, "--host", "0.0.0.0", "--port", "0", "--no-ledger", "--allow-remote")
    try:
        assert process.stdout is not None and process.stderr is not None
        banner = process.stdout.readline()
        assert " at http://0.0.0.0:" in banner
        warning = process.stderr.readline()
        assert warning.startswith("python -m frontend: warning: serving other machines on http://0.0.0.0:")
        assert "no authentication" in warning
        port = int(banner.split(" at ", 1)[1].split(" ", 1)[0].rstrip("/").rsplit(":", 1)[1])
        statuses = {}
        for host in (
            f"127.0.0.1:{port}",
            f"192.0.2.7:{port}",
            f"{socket.gethostname()}:{port}",
            f"rebind.example:{port}",
        ):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/api/snapshot", headers={"Host": host})
            statuses[host.split(":")[0]] = connection.getresponse().status
            connection.close()
        assert statuses == {"127.0.0.1": 200, "192.0.2.7": 200, socket.gethostname(): 200, "rebind.example": 421}
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0
    assert "Traceback" not in stderr


def test_terminal_view_off_a_terminal_prints_one_plain_snapshot_and_exits(
    tmp_path: Path, moto_endpoint: str, aggregate_table: Table
) -> None:
    long_name = "Desk-" + "x" * 150  # wider than any terminal: a pipe gets it whole
    put_leaf_with_parents(aggregate_table, f"Delta:{long_name}:AMER", "-1234567.000001", 2)
    put_stats(aggregate_table, messages_applied=7, last_updated=time.time(), mean="0.2", maximum="0.4")
    write_outputs(tmp_path, moto_endpoint, aggregate_table.name)
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({"aggregates": {"Delta": {"Value": "-1234567.000001", "TradeCount": 2}}}))
    process = dashboard_process(tmp_path, "--terminal", "--interval", "0.1", "--ledger", str(ledger))
    stdout, stderr = process.communicate(timeout=30)  # no Ctrl-C: it exits by itself
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    lines = stdout.splitlines()
    assert any(re.fullmatch(rf"  {long_name} +-1,234,567\.000001 +2", line) for line in lines)
    assert any(line.startswith("    AMER ") for line in lines)
    assert "applied 7" in stdout
    assert "verification draining: 1 of 3 nodes match" in stdout  # the last batch was just now
    assert "keys:" not in stdout  # nothing to press in a pipe


def test_the_dashboard_follows_a_restarted_local_runtime_to_its_new_port(
    tmp_path: Path, moto_endpoint: str, aggregate_table: Table
) -> None:
    """`make down`, `make up`: a new emulator on another port, new tables; the outputs file says so."""
    put_leaf_with_parents(aggregate_table, "Delta:FXSpot:AMER", "1", 1)
    outputs = write_outputs(tmp_path, moto_endpoint, aggregate_table.name)

    def resolve() -> TableTarget:
        return resolve_target(table_name=None, stack_name=None, outputs_path=outputs, region=None)

    pipeline = WatchedPipeline(resolve, outputs)
    assert set(pipeline.read_table().nodes) == {"Delta", "Delta:FXSpot", "Delta:FXSpot:AMER"}
    assert pipeline.read_quarantine() is None  # this outputs file names no QuarantineTable

    restarted = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    restarted.start()
    try:
        host, port = restarted.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        dynamodb = boto3.resource(
            "dynamodb",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        new_table = dynamodb.create_table(
            TableName="AggregateTable-restarted",
            KeySchema=[{"AttributeName": "AggregateKey", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "AggregateKey", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        put_leaf_with_parents(new_table, "Vega:Rates", "2", 1)
        dynamodb.create_table(
            TableName="Quarantine-restarted",
            KeySchema=[{"AttributeName": "RecordId", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "RecordId", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        ).put_item(Item={"RecordId": "e1", "Reason": "not JSON", "QuarantinedAt": 1})

        outputs.write_text(json.dumps({"endpoint_url": endpoint}))  # `make up` half way: not yet complete
        assert set(pipeline.read_table().nodes) == {"Delta", "Delta:FXSpot", "Delta:FXSpot:AMER"}
        outputs.write_text(
            json.dumps(
                {
                    "endpoint_url": endpoint,
                    "region": "us-east-1",
                    "aggregate_table": new_table.name,
                    "quarantine": "Quarantine-restarted",
                }
            )
        )
        assert set(pipeline.read_table().nodes) == {"Vega", "Vega:Rates"}
        assert pipeline.table_name() == "AggregateTable-restarted"
        quarantine = pipeline.read_quarantine()
        assert quarantine is not None
        assert quarantine.count == 1
    finally:
        restarted.stop()
