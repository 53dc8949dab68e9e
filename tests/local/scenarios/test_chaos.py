"""`python -m local chaos`: the figures come from real counters, the real run is exact, the control is caught."""

from __future__ import annotations

import dataclasses
import os
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console

from aggregation.names import UNSAFE_ADD
from local.__main__ import main
from local.emulator.injected_faults import LOST_RESPONSE, STATEMENTS, THROTTLE, RequestInfo, parse_config
from local.paths import LocalPaths
from local.runner.redelivery import RedeliveryPolicy
from local.scenarios import chaos
from producer.model import AggregateNode, TradeState
from producer.verifier import NodeMismatch, TradeMismatch

LEVELS_STATE = TradeState(version=3, value=Decimal("10.00"), hierarchy=("Delta", "FXSpot", "AMER"))


def node(value: str, count: int) -> AggregateNode:
    return AggregateNode(Decimal(value), count)


def test_missing_and_double_counted_are_split_per_node_in_value_and_count() -> None:
    mismatches = [
        NodeMismatch("Delta", node("100", 3), node("130.5", 4)),  # over by 30.5 and 1 trade
        NodeMismatch("Vega", node("50", 2), node("20", 1)),  # short by 30 and 1 trade
        NodeMismatch("Gamma", None, node("-7", 1)),  # only in the table: over by a count, short in value
        NodeMismatch("Rho", node("4", 1), None),  # only in the ledger: lost
    ]
    found = chaos.discrepancies(mismatches, [], nodes_compared=10)
    assert found.nodes_wrong == 4 and found.nodes_compared == 10
    assert found.value_double_counted == Decimal("30.5")
    assert found.value_missing == Decimal("30") + Decimal("7") + Decimal("4")
    assert found.trades_double_counted_in_nodes == 2
    assert found.trades_missing_from_nodes == 2
    assert found.lost and found.double_counted and not found.exact


def test_trade_mismatches_count_as_missing_wrong_version_or_other_content() -> None:
    stale = TradeState(2, Decimal("10.00"), LEVELS_STATE.hierarchy)
    conflict = TradeState(LEVELS_STATE.version, LEVELS_STATE.value + 1, LEVELS_STATE.hierarchy)
    trades = [
        TradeMismatch("a", LEVELS_STATE, None),
        TradeMismatch("b", LEVELS_STATE, stale),
        TradeMismatch("c", LEVELS_STATE, conflict),
    ]
    found = chaos.discrepancies([], trades)
    assert (found.trades_missing, found.trades_at_wrong_version, found.trades_with_other_content) == (1, 1, 1)
    assert found.lost and not found.double_counted and not found.exact
    assert not chaos.discrepancies([], trades[2:]).exact, "another content alone is not exact"


def test_no_mismatch_is_exact() -> None:
    found = chaos.discrepancies([], [])
    assert found.exact and not found.lost and not found.double_counted


def test_emulator_counters_become_rows_per_write_site_and_read_or_write_throttles() -> None:
    report = {
        "injected": {
            "lost_response": {"dynamodb:BatchExecuteStatement": 5, "dynamodb:TransactWriteItems": 2, "s3:PutObject": 4},
            "throttle": {"dynamodbstreams:GetRecords": 3, "kinesis:PutRecords": 4, "dynamodb:UpdateItem": 1},
        }
    }
    report["injected"]["cancelled_token_kept"] = {"dynamodb:TransactWriteItems": 7}
    rows = chaos.emulator_fault_figures(report)
    assert rows[chaos.KEPT_TOKENS_FIGURE] == 7
    assert rows["lost response, state BatchExecuteStatement (error)"] == 5
    assert rows["lost response, map PutItem (close)"] == 0
    assert rows["lost response, reduce TransactWriteItems (timeout)"] == 2
    assert rows["lost response, archive PutObject (close)"] == 4
    assert rows["throttled reads (DynamoDB, Streams, Kinesis)"] == 3
    assert rows["throttled writes (DynamoDB, Kinesis)"] == 5


def test_the_archive_bucket_loses_put_object_responses_ten_times_as_often_at_most_a_quarter() -> None:
    outputs = {
        "state_table": "S",
        "delta_table": "D",
        "aggregate_table": "A",
        "archive_bucket": "archive-b",
        "quarantine": "Q",
    }
    config = chaos.emulator_fault_config(chaos.ChaosSettings(lost_response_pct=3), outputs, seed=1)
    (rule,) = [rule for rule in parse_config(config).rules if rule.service == "s3"]
    assert (rule.kind, rule.operations, rule.percent, rule.variant) == (LOST_RESPONSE, ("PutObject",), 25.0, "close")
    assert chaos.archive_lost_response_pct(2.0) == 20.0
    assert rule.targets(RequestInfo("s3", "PutObject", ("archive-b/deltas/ab/x.batch.json",)))
    assert rule.targets(RequestInfo("s3", "PutObject", ("archive-b/metastore/receipts/ab/x.json",)))
    assert not rule.targets(RequestInfo("s3", "PutObject", ("archive-b-logs/x",)))


def test_function_counters_add_up_over_runner_lives() -> None:
    total: dict[str, dict[str, object]] = {}
    life = {
        "functions": {
            "Stack-MapFunction1": {
                "invocations": 4,
                "errors": 2,
                "retries": 2,
                "timeouts": 0,
                "records_processed": 40,
                "injected_failures": {"after_write": 1},
                "reshaped_retries": {"grown": 1, "shifted": 2, "reordered": 1},
                "again_after_success": 3,
            }
        }
    }
    chaos.add_function_counters(total, life)
    chaos.add_function_counters(total, life)
    assert total["Stack-MapFunction1"]["errors"] == 4
    assert total["Stack-MapFunction1"]["injected"] == {"after_write": 2}
    assert total["Stack-MapFunction1"]["reshaped"] == {"grown": 2, "shifted": 4, "reordered": 2}
    assert total["Stack-MapFunction1"]["again_after_success"] == 6
    assert chaos.stage_of("Stack-MapFunction1") == "map"


def test_progress_counts_records_of_every_stage_and_the_state_figure_only_its_own() -> None:
    functions = {
        "Stack-StateStateFunction1": {"records_processed": 100},
        "Stack-MapMapFunction2": {"records_processed": 85},
        "Stack-ReduceReduceFunction3": {"records_processed": 2},
        "Stack-ArchiveFunction4": {"records_processed": 2},
    }
    assert chaos.records_processed(functions) == 189
    assert chaos.records_processed(functions, "state") == 100
    assert chaos.records_processed({}, "state") == 0


def test_the_state_functions_batch_statements_are_lost_and_throttled_one_by_one_and_whole() -> None:
    outputs = {"state_table": "S", "delta_table": "D", "aggregate_table": "A", "archive_bucket": "B", "quarantine": "Q"}
    settings = chaos.ChaosSettings(lost_response_pct=4, throttle_pct=3)
    rules = parse_config(chaos.emulator_fault_config(settings, outputs, seed=1)).rules
    batch = RequestInfo("dynamodb", "BatchExecuteStatement", ("S",), 0, ("S", "S"))
    quarantine_batch = RequestInfo("dynamodb", "BatchExecuteStatement", ("Q",), 0, ("Q", "Q"))
    on_state = {rule.kind: rule for rule in rules if rule.variant == STATEMENTS and rule.table == "S"}
    assert {kind: rule.percent for kind, rule in on_state.items()} == {LOST_RESPONSE: 4.0, THROTTLE: 3.0}
    (on_quarantine,) = [rule for rule in rules if rule.variant == STATEMENTS and rule.table == "Q"]
    assert on_quarantine.kind == THROTTLE and on_quarantine.targets(quarantine_batch), "quarantine inserts refused too"
    one_by_one = on_state
    for rule in one_by_one.values():
        assert rule.operations == ("BatchExecuteStatement",) and rule.targets(batch)
        assert not rule.targets(RequestInfo("dynamodb", "BatchExecuteStatement", ("D",), 0, ("D",)))
    whole = [index for index, rule in enumerate(rules) if rule.kind == THROTTLE and rule.variant != STATEMENTS]
    whole_batch = [index for index in whole if rules[index].targets(batch)]  # default operations reach it
    assert whole_batch and min(whole_batch) > rules.index(one_by_one[THROTTLE]), "a batch refusing none: then whole"
    quiet = chaos.emulator_fault_config(chaos.ChaosSettings(lost_response_pct=0, throttle_pct=0), outputs, seed=1)
    assert not [rule for rule in quiet["rules"] if rule.get("variant") == STATEMENTS]


def test_statements_lost_or_refused_are_figure_rows_of_their_own() -> None:
    statements = "dynamodb:BatchExecuteStatement/statement"
    report = {
        "injected": {
            "throttle": {statements: 9, "dynamodb:PutItem": 2},
            "lost_response": {statements: 5, "dynamodb:PutItem": 1},
        }
    }
    rows = chaos.emulator_fault_figures(report)
    assert rows[chaos.THROTTLED_STATEMENTS_FIGURE] == 9
    assert rows["throttled writes (DynamoDB, Kinesis)"] == 2
    assert rows[chaos.LOST_STATEMENTS_FIGURE] == 5
    assert rows["lost response, map PutItem (close)"] == 1


def test_the_default_settings_meet_issue_6() -> None:
    settings = chaos.ChaosSettings()
    assert settings.count >= 20_000
    assert settings.function_fault_pct("state") >= 3 * chaos.ORIGINAL_FUNCTION_FAULT_PCT["state"]
    assert settings.worker_kills >= 3 and settings.runner_kills >= 1 and settings.control


def test_reduce_transactions_are_cancelled_by_throttles_and_their_tokens_kept() -> None:
    outputs = {"state_table": "S", "delta_table": "D", "aggregate_table": "A", "archive_bucket": "B", "quarantine": "Q"}
    rules = chaos.emulator_fault_config(chaos.ChaosSettings(), outputs, seed=1)["rules"]
    kinds = [(rule["kind"], rule.get("error"), rule.get("table")) for rule in rules]
    assert ("throttle", "TransactionCanceledException", "A") in kinds
    assert kinds[-1] == ("cancelled_token_kept", None, "A")
    assert chaos.ChaosSettings().runner_environment() == {
        "LOCAL_RUNNER_REDELIVERY": "archive,map,reduce",
        "LOCAL_RUNNER_REDELIVERY_SEED": "7",
        "LOCAL_RUNNER_AGAIN_AFTER_SUCCESS_PCT": "2",
    }
    assert chaos.ChaosSettings(reshaped_retries=(), again_after_success_pct=0).runner_environment() == {}


def test_every_chaos_run_reorders_map_retries_and_delivers_successes_again_everywhere() -> None:
    """The runner's policy from a default run: map retries reshaped (and so, its mapping having a
    tumbling window, out of order), and duplicates after success for every function."""
    policy = RedeliveryPolicy.from_environment(chaos.ChaosSettings().runner_environment())
    assert policy is not None
    for service in chaos.STAGES:
        assert (applied := policy.for_service(service)) is not None and applied.again_after_success_pct > 0
    assert (mapped := policy.for_service("map")) is not None and mapped.reshapes


def test_the_control_fails_its_first_reduce_invocation_after_the_commit_and_the_real_run_does_not() -> None:
    settings = chaos.ChaosSettings()
    assert settings.control_environment() == {"FAILURE_REDUCE_LAMBDA_AFTER_WRITE_FIRST": "1"}
    assert not set(settings.control_environment()) & set(settings.function_fault_environment())


def test_cli_misuse_is_one_line_and_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["chaos", "--count", "0"],
        ["chaos", "--throttle-pct", "90"],
        ["chaos", "--conflicting-pct", "x"],
        ["chaos", "--reshaped-retries", "map,frobnicate"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main(["chaos", "--count", "10", "--malformed-pct", "60", "--modifications-pct", "60"]) == 1
    assert "exceed 100" in capsys.readouterr().err


@pytest.mark.emulator
@pytest.mark.slow
def test_a_small_chaos_run_is_exact_under_real_faults_and_the_unsafe_control_is_caught(tmp_path: Path) -> None:
    settings = chaos.ChaosSettings(
        count=600,
        seed=11,
        fault_multiplier=8,
        lost_response_pct=6,
        throttle_pct=5,
        worker_kills=2,
        runner_kills=1,
        oversized_records=1,
        conflicting_pct=2,
        again_after_success_pct=20,  # 600 messages make a few dozen batches: 2 % would often deliver none again
        drain_timeout_seconds=240,
    )
    paths = LocalPaths(tmp_path / ".local")
    console = Console(file=open(os.devnull, "w"), width=200)  # noqa: SIM115
    real = chaos.run_pipeline(paths, console, settings, label="chaos run", reduce_mode=None, count=settings.count)
    assert real.counts.messages_sent == 600
    assert real.counts.conflicting_duplicates > 0 and real.counts.malformed > 0
    injected = {stage: c["injected"] for name, c in real.functions.items() if (stage := chaos.stage_of(name))}
    assert sum(sum(points.values()) for points in injected.values()) > 0
    assert sum(real.workers_killed.values()) >= 1
    assert real.runner_restarts == 1, "a runner SIGKILLed mid-run re-delivers its in-flight batch"
    assert real.emulator_faults["lost response, state BatchExecuteStatement (error)"] > 0
    assert real.emulator_faults["lost response, archive PutObject (close)"] > 0
    assert real.emulator_faults["throttled reads (DynamoDB, Streams, Kinesis)"] > 0
    assert real.emulator_faults["throttled writes (DynamoDB, Kinesis)"] > 0
    assert real.emulator_faults[chaos.THROTTLED_STATEMENTS_FIGURE] > 0
    assert real.emulator_faults[chaos.LOST_STATEMENTS_FIGURE] > 0
    reshaped = [sum(c["reshaped"].values()) for name, c in real.functions.items() if chaos.stage_of(name) == "map"]
    assert sum(reshaped) > 0, "failed map batches came back in other boundaries"
    assert sum(c.get("again_after_success", 0) for c in real.functions.values()) > 0, "successes came again"
    assert chaos.quarantine_matches(real) and real.quarantine.truncated == 1
    assert real.discrepancies.exact and real.verified_exact and real.reconcile_exit_code == 0
    assert real.iam["mode"] == "enforce" and real.iam["requests_checked"] > 0, "the functions ran as their roles"
    assert real.iam["denied"] == 0, f"the roles' grants suffice: {real.iam['denials']}"
    assert chaos.run_passed(real)

    # The control's double count is deterministic (its reduce fails after its first commit in every
    # execution environment), not a matter of how many reducers run at once: half the shards per
    # DynamoDB stream, so 13 shard pollers instead of 25 each read 4 times a second while it runs.
    lighter = dataclasses.replace(settings, stream_shards=4)
    control = chaos.run_pipeline(paths, console, lighter, label="control", reduce_mode=UNSAFE_ADD, count=settings.count)
    control_reduce = [c["injected"] for name, c in control.functions.items() if chaos.stage_of(name) == "reduce"]
    assert sum(injected.get("after_write", 0) for injected in control_reduce) >= 1, "deterministic, not by chance"
    assert chaos.control_caught(control)
    assert control.discrepancies.double_counted


def test_concurrent_reducers_contend_for_fewer_slices_than_shards() -> None:
    settings = chaos.ChaosSettings()
    assert settings.stream_shards >= 4 and settings.reduce_slices < settings.stream_shards
    assert settings.concurrency_environment() == {"EMULATOR_STREAM_SHARDS": "8", "AGGREGATE_SLICES": "2"}
    lives = (
        {"functions": {"S-ReduceFunction1": {"peak_in_flight": 3}}},
        {"functions": {"S-ReduceFunction1": {"peak_in_flight": 5}}},
    )
    total: dict[str, dict[str, object]] = {}
    for life in lives:
        chaos.add_function_counters(total, life)
    assert chaos.peak_invocations(total, "reduce") == 5 and chaos.peak_invocations(total, "map") == 0
