"""`make up` / `make down` end to end: the real synthesized stack, the real functions, faults on.

The expected aggregates are computed here, independently of the pipeline and of the
producer's ledger, from the messages the test itself puts on the stream with boto3.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from aggregation.aggregate_items import sum_node_slices
from local.deploy import lifecycle
from local.deploy.deployer import Deployment, aws_client
from local.deploy.status import render_status
from local.paths import REPO_ROOT, LocalPaths
from local.runner.redelivery import COUNTED_SHAPES
from local.runner.stats import read_stats
from local.scenarios import demo
from tests.local.runner.runner_harness import read_invocations, stream_stack_template, wait_for, write_cloud_assembly

LEVELS = ("RiskType", "TradeDesk", "Region")
AGGREGATES_POLL_SECONDS = 0.25
"""Between two reads of the aggregate table while a round drains: a Scan of a few hundred items costs
the emulator little, and a round waits at most this long past its last write."""
RUNNER_STATS_TIMEOUT_SECONDS = 10.0
"""How long `fresh_runner_stats` waits for the runner's next statistics (written every second)."""
FAULTS = {
    "FAILURE_STATE_LAMBDA_PCT": "15",
    "FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT": "15",
    "FAILURE_MAP_LAMBDA_PCT": "15",
    "FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT": "15",
    "FAILURE_REDUCE_LAMBDA_PCT": "15",
    "FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT": "15",
}
"""High rates, so that even this small run fails (and retries) in every stage."""
RESHAPED_RETRIES = {"LOCAL_RUNNER_REDELIVERY": "map,reduce,archive", "LOCAL_RUNNER_REDELIVERY_SEED": "5"}
"""Map, reduce and archive retries come grown, shrunk or shifted (`local.runner.redelivery`)."""
RESHAPING_ROUND_SEEDS = (11, 12, 13, 14)
"""Message rounds until a retry came reshaped (the first round almost always suffices)."""


def _pipeline_has_landed() -> bool:
    handlers = [REPO_ROOT / "lambdas" / f / "handler.py" for f in ("state_function", "map_function", "reduce_function")]
    return (REPO_ROOT / "app.py").exists() and all(h.exists() for h in handlers)


pytestmark = pytest.mark.emulator
needs_the_pipeline = pytest.mark.skipif(
    not _pipeline_has_landed(), reason="the CDK app and the functions have not landed yet"
)


def generate_messages(seed: int, trades: int = 120) -> tuple[list[bytes], dict[str, Decimal | int]]:
    """Messages with new versions, moves, duplicates, out-of-order and malformed records,
    and the aggregates they must produce: {aggregate key: Value} and {key + '#count': count}.
    """
    rng = random.Random(seed)
    values = {"RiskType": ["Delta", "Vega"], "TradeDesk": ["FXSpot", "Rates", "Credit"], "Region": ["AMER", "EMEA"]}
    sent: list[dict[str, Any]] = []
    for number in range(trades):
        trade_id = f"trade-{seed}-{number}"
        for version in range(rng.choice([1, 1, 2, 3])):
            sent.append(
                {
                    "TradeID": trade_id,
                    "Version": version,
                    "Value": float(Decimal(rng.randint(-500_000, 500_000)) / 100),
                    "Timestamp": time.time(),
                    "Hierarchy": {level: rng.choice(values[level]) for level in LEVELS},
                }
            )
    rng.shuffle(sent)  # out of order: later versions often arrive first
    sent += rng.sample(sent, len(sent) // 10)  # duplicates
    latest: dict[str, dict[str, Any]] = {}
    for message in sent:
        if message["TradeID"] not in latest or message["Version"] > latest[message["TradeID"]]["Version"]:
            latest[message["TradeID"]] = message
    expected: dict[str, Decimal | int] = {}
    for message in latest.values():
        path = [message["Hierarchy"][level] for level in LEVELS]
        for depth in range(1, len(path) + 1):
            key = ":".join(path[:depth])
            expected[key] = Decimal(expected.get(key, 0)) + Decimal(repr(message["Value"]))
            expected[key + "#count"] = int(expected.get(key + "#count", 0)) + 1
    records = [json.dumps(m).encode() for m in sent]
    records += [b"not json", json.dumps({"TradeID": "x", "Version": "1"}).encode()]  # quarantined
    rng.shuffle(records)
    return records, expected


def send_round_and_await_exact_totals(
    deployment: Deployment,
    round_of_messages: tuple[list[bytes], dict[str, Decimal | int]],
    expected: dict[str, Decimal | int],
    timeout: float,
) -> None:
    """Put a round's records on the stream, add its totals to `expected`, wait until the table has them."""
    records, expected_of_round = round_of_messages
    for key, total in expected_of_round.items():
        expected[key] = expected.get(key, 0) + total
    put_records(deployment, records)
    await_totals(deployment, expected, timeout)


def put_records(deployment: Deployment, records: list[bytes]) -> None:
    """Put the records on the deployment's stream (with dummy credentials: the producer's)."""
    kinesis = aws_client("kinesis", deployment.endpoint_url)
    for start in range(0, len(records), 100):
        response = kinesis.put_records(
            StreamName=deployment.outputs["StreamName"],
            Records=[{"Data": data, "PartitionKey": str(hash(data))} for data in records[start : start + 100]],
        )
        assert response["FailedRecordCount"] == 0


def await_totals(deployment: Deployment, expected: dict[str, Decimal | int], timeout: float) -> None:
    """Wait until the aggregate table holds exactly `expected`."""
    deadline = time.monotonic() + timeout
    while actual_aggregates(deployment) != expected and time.monotonic() < deadline:
        time.sleep(AGGREGATES_POLL_SECONDS)
    assert actual_aggregates(deployment) == expected


def fresh_runner_stats(paths: LocalPaths) -> dict[str, Any]:
    """The runner's statistics written after this call (it rewrites them every second): they count what
    finished before it. Waits for that write, not a fixed time longer than it takes."""
    asked_at = time.time()
    deadline = time.monotonic() + RUNNER_STATS_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        stats = read_stats(paths.runner_stats)
        if stats is not None and stats["updated_at"] > asked_at:
            return stats
        time.sleep(0.05)
    raise AssertionError(f"the runner wrote no statistics for {RUNNER_STATS_TIMEOUT_SECONDS:.0f} s")


def actual_aggregates(deployment: Deployment) -> dict[str, Decimal | int]:
    """Each node's totals, the sum of its slices (`aggregation.aggregate_items`), emptied nodes left out."""
    dynamodb = aws_client("dynamodb", deployment.endpoint_url)
    pages = dynamodb.get_paginator("scan").paginate(TableName=deployment.outputs["AggregateTableName"])
    slices = [
        (
            item["AggregateKey"]["S"],
            Decimal(item.get("Value", {"N": "0"})["N"]),
            int(item.get("TradeCount", {"N": "0"})["N"]),
        )
        for page in pages
        for item in page["Items"]
    ]
    found: dict[str, Decimal | int] = {}
    for key, node in sum_node_slices(slices).items():
        if node.trade_count:
            found[key] = node.value
            found[key + "#count"] = node.trade_count
    return found


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[tuple[Deployment, LocalPaths]]:
    paths = LocalPaths(tmp_path / ".local")
    deployment = lifecycle.up(paths, environment={**os.environ, **FAULTS, **RESHAPED_RETRIES}, report=lambda _: None)
    try:
        yield deployment, paths
    finally:
        lifecycle.down(paths, report=lambda _: None)


@pytest.mark.slow
@needs_the_pipeline
def test_up_runs_the_deployed_stack_exactly_once_under_faults_and_reshaped_retries_and_down_stops_it(
    runtime: tuple[Deployment, LocalPaths],
) -> None:
    deployment, paths = runtime
    outputs = json.loads(paths.outputs.read_text())
    for key in ("endpoint_url", "region", "stream_name", "state_table", "delta_table", "aggregate_table", "quarantine"):
        assert outputs[key], key

    messages: list[str] = []
    again = lifecycle.up(paths, environment={**os.environ, **FAULTS}, report=messages.append)
    assert again.outputs == deployment.outputs and messages[0].startswith("already running")

    # Faults are random: a round whose failed batches had no other possible boundaries
    # (one record, nothing before or after) re-delivers them identically. More rounds, each
    # checked exactly, until some retry came reshaped.
    expected: dict[str, Decimal | int] = {}
    rounds = 0
    for seed in RESHAPING_ROUND_SEEDS:
        rounds += 1
        send_round_and_await_exact_totals(deployment, generate_messages(seed=seed), expected, timeout=100)

        functions = list(fresh_runner_stats(paths)["functions"].values())
        reshaped = sum(f["reshaped_retries"].get(shape, 0) for f in functions for shape in COUNTED_SHAPES)
        if reshaped:
            break
    assert sum(f["errors"] for f in functions) > 0, "faults were injected and survived"
    assert not any(f["batches_skipped"] for f in functions)
    assert reshaped > 0, "map, reduce or archive retries came in other boundaries"
    quarantined = aws_client("dynamodb", deployment.endpoint_url).scan(TableName=outputs["quarantine"])["Items"]
    assert len(quarantined) == 2 * rounds  # each round's two malformed records
    assert render_status(paths, Console(file=open(os.devnull, "w"))) == 0  # noqa: SIM115
    assert demo.demo_paths(paths) == (LocalPaths(paths.state_dir / "demo"), True)  # `make demo` leaves it alone

    runner_pid = lifecycle.running_runner_pid(paths)
    assert runner_pid is not None
    lifecycle.down(paths, report=lambda _: None)
    assert lifecycle.process_command_line(runner_pid) is None
    assert lifecycle.running_emulator(paths) is None
    assert not paths.outputs.exists()
    assert demo.demo_paths(paths) == (paths, False)
    said: list[str] = []
    lifecycle.down(paths, report=said.append)
    assert said == ["nothing was running"], "down is safe to repeat"


def test_up_is_idempotent_restarts_for_new_faults_and_redeploys_a_changed_template_keeping_checkpoints(
    tmp_path: Path,
) -> None:
    paths = LocalPaths(tmp_path / ".local")
    record_log = tmp_path / "invocations.jsonl"

    def assembly(name: str, marker: str) -> Path:
        template = stream_stack_template(
            record_log=record_log, function_environment={"MARKER": marker}, table_mapping={}
        )
        for output in ("DeltaTableName", "AggregateTableName"):
            template["Outputs"][output] = {"Value": {"Ref": "Table"}}
        return write_cloud_assembly(tmp_path / name, "LifecycleTest", template)

    first, second = assembly("first", "1"), assembly("second", "2")
    base = {name: value for name, value in os.environ.items() if not name.startswith("FAILURE_")}
    said: list[str] = []
    try:
        deployment = lifecycle.up(paths, environment=base, report=said.append, cdk_out=first)
        runner_pid = lifecycle.running_runner_pid(paths)
        put = aws_client("kinesis", deployment.endpoint_url).put_record
        put(StreamName=deployment.outputs["StreamName"], Data=b"{}", PartitionKey="a")
        wait_for(lambda: len(read_invocations(record_log)) == 1, what="the first record")

        said.clear()
        lifecycle.up(paths, environment=base, report=said.append, cdk_out=first)
        assert said[0].startswith("already running") and lifecycle.running_runner_pid(paths) == runner_pid

        said.clear()
        lifecycle.up(paths, environment={**base, "FAILURE_STATE_LAMBDA_PCT": "3"}, report=said.append, cdk_out=first)
        assert said[0].startswith("fault injection changed")
        assert lifecycle.running_runner_pid(paths) not in (None, runner_pid)
        stats = json.loads(paths.runner_stats.read_text())
        assert stats["fault_injection"] == {"FAILURE_STATE_LAMBDA_PCT": "3"}
        runner_pid = lifecycle.running_runner_pid(paths)

        said.clear()
        lifecycle.up(paths, environment=base, report=said.append, cdk_out=second)
        assert said[0].startswith("the template changed")
        assert lifecycle.running_runner_pid(paths) not in (None, runner_pid)
        function = aws_client("lambda", deployment.endpoint_url).get_function_configuration(
            FunctionName=deployment.physical_id("Recorder")
        )
        assert function["Environment"]["Variables"]["MARKER"] == "2"
        put(StreamName=deployment.outputs["StreamName"], Data=b"{}", PartitionKey="a")
        wait_for(lambda: len(read_invocations(record_log)) == 2, what="the second record")
        time.sleep(0.5)
        ids = [i["ids"] for i in read_invocations(record_log)]
        assert len(ids) == 2 and ids[0] != ids[1], "the restarted runner resumed after the first record"
    finally:
        lifecycle.down(paths, report=lambda _: None)


def test_down_tolerates_stale_pid_files_and_never_kills_a_process_it_did_not_start(tmp_path: Path) -> None:
    paths = LocalPaths(tmp_path)
    paths.ensure()
    paths.runner_pid.write_text(str(os.getpid()))  # a live process that is not a runner: this test
    (tmp_path / "emulator.json").write_text(json.dumps({"pid": os.getpid(), "port": 1}))
    said: list[str] = []
    lifecycle.down(paths, report=said.append)
    assert said == ["nothing was running"]
    assert not paths.runner_pid.exists() and not (tmp_path / "emulator.json").exists()
    paths.runner_pid.write_text("not a pid")
    lifecycle.down(paths, report=said.append)
    assert said[-1] == "nothing was running"


def test_down_does_not_wait_for_a_busy_runner_to_finish(tmp_path: Path) -> None:
    """`down` discards everything, so a runner still finishing its batches (here: one that ignores
    SIGTERM altogether) is killed after `DOWN_GRACE_SECONDS`, not waited for as a restart would."""
    paths = LocalPaths(tmp_path)
    paths.ensure()
    ignores_sigterm = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    busy = subprocess.Popen(
        [sys.executable, "-c", ignores_sigterm, "local.runner"],  # `down` knows a runner by `local.runner`
        start_new_session=True,  # the runner's own process group, as `start_runner` makes it
    )
    try:
        wait_for(lambda: "local.runner" in (lifecycle.process_command_line(busy.pid) or ""))
        paths.runner_pid.write_text(str(busy.pid))
        started = time.monotonic()
        said: list[str] = []
        lifecycle.down(paths, report=said.append)
        assert time.monotonic() - started < lifecycle.PROCESS_STOP_TIMEOUT_SECONDS  # a restart's patience
        assert lifecycle.process_command_line(busy.pid) is None  # killed (and reaped by `down`: we are its parent)
        assert said == ["stopped the runner"]
    finally:
        if busy.poll() is None:
            busy.kill()
            busy.wait()


def test_an_exited_process_its_parent_has_not_reaped_counts_as_gone() -> None:
    """`make down` is not the runner's parent, so it cannot reap it: waiting for whoever can took
    about 2 s. Here the test is the parent, and does not reap its child until the end."""
    exited = subprocess.Popen(["true"])
    try:
        wait_for(lambda: Path(f"/proc/{exited.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z")
        assert lifecycle.process_command_line(exited.pid) is None
        assert lifecycle.process_command_line(os.getpid()) is not None
    finally:
        exited.wait()


def test_cli_misuse_is_one_line_and_non_zero(tmp_path: Path) -> None:
    environment = {**os.environ, "LOCAL_STATE_DIR": str(tmp_path)}
    for arguments, code in ((["bogus"], 2), ([], 2), (["status"], 1), (["demo", "--count", "0"], 2)):
        completed = subprocess.run(
            [sys.executable, "-m", "local", *arguments],
            cwd=REPO_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        assert completed.returncode == code, (arguments, completed.stderr)
        assert "Traceback" not in completed.stderr + completed.stdout
        assert len((completed.stderr or completed.stdout).strip().splitlines()) == 1, completed.stderr
