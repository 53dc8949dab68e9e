"""Reduce function: exact transactional apply, idempotent replays, splitting, both modes."""

import copy
import itertools
import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from botocore.exceptions import ClientError

from aggregation.aggregate_items import node_path_of, slice_of
from aggregation.delta_items import DeltaItem, decode_stream_run, encode_delta_item
from aggregation.deltas import TradeState, sum_state_changes
from aggregation.latency import histogram_of
from aggregation.names import END_TO_END_LATENCY, MESSAGES_APPLIED, NON_INSERT_RECORDS_SKIPPED
from aggregation.stream_positions import StreamRun
from aggregation.transactions import MAX_TRANSACTION_ACTIONS, NODE_GROUPS, DeltaBatch, transaction_slice
from function_support import aws
from local.runner.inprocess import LambdaContextStub, Pipeline, expected_totals, trade_message
from reduce_function import handler as reduce_handler
from tests.lambdas.metrics_helpers import emitted_metric

TOKEN_WINDOW_SECONDS = 600
Trades = dict[str, tuple[Decimal, tuple[str, str, str]]]


def advance_emulator_clock(endpoint_url: str, seconds: int) -> None:
    request = urllib.request.Request(
        f"{endpoint_url}/_compat/clock/advance",
        data=json.dumps({"seconds": seconds}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def delta_records_for(pipeline: Pipeline, payloads: list[bytes]) -> list[dict[str, Any]]:
    pipeline.run_state(payloads)
    pipeline.run_map(pipeline.new_stream_records("state"))
    return pipeline.new_stream_records("delta")


def messages_for(trades: Trades) -> list[bytes]:
    return [trade_message(trade_id, 1, str(value), path) for trade_id, (value, path) in trades.items()]


def wide_trades(prefix: str, count: int, start: int = 0) -> Trades:
    """Trades spread over a wide hierarchy: 7 risk types x 11 desks x 5 regions (462 nodes)."""
    return {
        f"{prefix}{i}": (Decimal(f"{i}.{i % 97:02d}"), (f"Risk{i % 7}", f"Desk{i % 11}", f"Region{i % 5}"))
        for i in range(start, start + count)
    }


class TransactionRecorder:
    """Wraps the reduce function's transaction client: records each transaction, fails the chosen ones."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, fail_calls: set[int] | None = None, error: str = "ThrottlingException"
    ) -> None:
        self.calls: list[list[dict[str, Any]]] = []
        self.requests: list[dict[str, Any]] = []
        self.fail_calls = fail_calls or set()
        self.error = error
        client = aws.prevalidated_write_client()
        self._send: Callable[..., Any] = client.transact_write_items
        monkeypatch.setattr(client, "transact_write_items", self._transact_write_items)

    def _transact_write_items(self, **arguments: Any) -> Any:
        self.calls.append(arguments["TransactItems"])
        self.requests.append(copy.deepcopy(arguments))
        if len(self.calls) in self.fail_calls:
            raise ClientError({"Error": {"Code": self.error, "Message": "injected"}}, "TransactWriteItems")
        return self._send(**arguments)

    def node_updates(self) -> list[str]:
        """The node paths the transactions sent updated, in order."""
        keys = [item["Update"]["Key"]["AggregateKey"]["S"] for call in self.calls for item in call if "Update" in item]
        return [path for key in keys if (path := node_path_of(key)) is not None]


def markers(pipeline: Pipeline) -> list[str]:
    return sorted(i["AggregateKey"] for i in pipeline.scan("aggregate") if i["AggregateKey"].startswith("#applied#"))


def test_applies_exact_totals_and_bookkeeping(pipeline: Pipeline) -> None:
    records = delta_records_for(pipeline, [trade_message("a", 1, "0.1"), trade_message("b", 1, "0.2", timestamp="5")])
    pipeline.run_reduce(records)
    assert pipeline.aggregates() == {
        "Delta": (Decimal("0.3"), 2),
        "Delta:FXSpot": (Decimal("0.3"), 2),
        "Delta:FXSpot:AMER": (Decimal("0.3"), 2),
    }
    stats = pipeline.stats()
    assert stats["MessagesApplied"] == 2
    assert stats["LastLatencyMaxSeconds"] > stats["LastLatencyMeanSeconds"] > 0


@pytest.mark.parametrize("mode", ["crt", "crt+marker"])
def test_replay_after_post_commit_failure_leaves_aggregates_unchanged(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", mode)
    records = delta_records_for(pipeline, [trade_message("a", 1, "12.34"), trade_message("b", 1, "1")])
    monkeypatch.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT", "100")
    with pytest.raises(RuntimeError, match="injected REDUCE failure"):
        pipeline.run_reduce(records)
    after_first = pipeline.aggregates()
    monkeypatch.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT", "0")
    pipeline.run_reduce(records)
    pipeline.run_reduce(records)
    assert (
        pipeline.aggregates()
        == after_first
        == {key: (Decimal("13.34"), 2) for key in ("Delta", "Delta:FXSpot", "Delta:FXSpot:AMER")}
    )
    assert pipeline.stats()["MessagesApplied"] == 2


def test_markers_catch_a_replay_after_the_token_window(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, aws_environment: str
) -> None:
    records = delta_records_for(pipeline, [trade_message("a", 1, "10")])
    pipeline.run_reduce(records)
    advance_emulator_clock(aws_environment, TOKEN_WINDOW_SECONDS + 1)
    summary = pipeline.run_reduce(records)
    assert summary["units_already_applied"] == 1
    assert pipeline.aggregates()["Delta"] == (Decimal(10), 1)


def test_token_only_mode_double_counts_a_replay_after_the_window(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, aws_environment: str
) -> None:
    """The original design's hole, shown on purpose: the exactness check must catch it."""
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", "crt")
    records = delta_records_for(pipeline, [trade_message("a", 1, "10")])
    pipeline.run_reduce(records)
    advance_emulator_clock(aws_environment, TOKEN_WINDOW_SECONDS + 1)
    pipeline.run_reduce(records)
    expected = expected_totals({"a": (Decimal(10), ("Delta", "FXSpot", "AMER"))})
    assert pipeline.aggregates() != expected
    assert pipeline.aggregates()["Delta"] == (Decimal(20), 2)


def test_replay_with_a_different_batch_boundary_applies_only_the_new_delta(pipeline: Pipeline) -> None:
    first = delta_records_for(pipeline, [trade_message("a", 1, "1")])
    second = delta_records_for(pipeline, [trade_message("b", 1, "2")])
    pipeline.run_reduce(first)
    summary = pipeline.run_reduce(first + second)
    assert summary["units_already_applied"] == 1
    assert pipeline.aggregates()["Delta"] == (Decimal(3), 2)
    assert pipeline.stats()["MessagesApplied"] == 2


def test_more_nodes_than_one_transaction_holds_split_into_idempotent_parts(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    trades = {f"t{i}": (Decimal(f"{i}.01"), (f"Risk{i}", f"Desk{i}", "AMER")) for i in range(60)}
    records = delta_records_for(pipeline, [trade_message(t, 1, str(v), p) for t, (v, p) in trades.items()])
    (delta_item,) = pipeline.scan("delta")
    assert len(delta_item["Deltas"]) == 180
    monkeypatch.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT", "100")
    with pytest.raises(RuntimeError):
        pipeline.run_reduce(records)
    monkeypatch.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT", "0")
    pipeline.run_reduce(records)
    assert pipeline.aggregates() == expected_totals(trades)
    assert len(markers(pipeline)) == 2  # one per node group: each group's ~90 nodes fit in one unit
    assert pipeline.stats()["MessagesApplied"] == 60


def test_replay_with_different_boundaries_applies_only_the_batches_not_yet_applied(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A applied alone, then A+B+C in one invocation: A's units are found applied, B and C applied."""
    trades_a, trades_b, trades_c = wide_trades("a", 20), wide_trades("b", 25, 20), wide_trades("c", 30, 45)
    records_a = delta_records_for(pipeline, messages_for(trades_a))
    records_b = delta_records_for(pipeline, messages_for(trades_b))
    records_c = delta_records_for(pipeline, messages_for(trades_c))
    pipeline.run_reduce(records_a)
    units_of_a = len(markers(pipeline))
    summary = pipeline.run_reduce(records_a + records_b + records_c)
    assert summary["units_already_applied"] == units_of_a
    assert pipeline.aggregates() == expected_totals(trades_a | trades_b | trades_c)
    assert pipeline.stats()["MessagesApplied"] == 75


@pytest.mark.parametrize("mode", ["crt", "crt+marker"])
def test_replay_after_a_failure_between_group_transactions_applies_the_rest_once(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Only the first group's transaction commits; the whole invocation is then replayed."""
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", mode)
    first, second = wide_trades("p", 50), wide_trades("q", 50, 50)
    records = delta_records_for(pipeline, messages_for(first)) + delta_records_for(pipeline, messages_for(second))
    expected = expected_totals(first | second)
    recorder = TransactionRecorder(monkeypatch, fail_calls={2})
    with pytest.raises(ClientError, match="ThrottlingException"):
        pipeline.run_reduce(records)
    assert len(recorder.calls) == 2
    partial = pipeline.aggregates()
    assert set(partial) == set(recorder.node_updates()[: len(partial)]) and partial != expected
    assert all(partial[key] == expected[key] for key in partial)  # the first group: whole and exact
    pipeline.run_reduce(records)
    pipeline.run_reduce(records)
    assert pipeline.aggregates() == expected
    assert pipeline.stats()["MessagesApplied"] == 100


def test_markers_catch_a_partly_applied_invocation_replayed_after_the_token_window(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, aws_environment: str
) -> None:
    first, second = wide_trades("p", 50), wide_trades("q", 50, 50)
    records = delta_records_for(pipeline, messages_for(first)) + delta_records_for(pipeline, messages_for(second))
    recorder = TransactionRecorder(monkeypatch, fail_calls={2})
    with pytest.raises(ClientError):
        pipeline.run_reduce(records)
    applied_first = len([item for item in recorder.calls[0] if "Put" in item])
    advance_emulator_clock(aws_environment, TOKEN_WINDOW_SECONDS + 1)
    summary = pipeline.run_reduce(records)
    assert summary["units_already_applied"] == applied_first
    advance_emulator_clock(aws_environment, TOKEN_WINDOW_SECONDS + 1)
    summary = pipeline.run_reduce(records)
    assert summary["units_already_applied"] == len(markers(pipeline))
    assert pipeline.aggregates() == expected_totals(first | second)
    assert pipeline.stats()["MessagesApplied"] == 100


def test_a_large_hierarchy_over_many_batches_is_exact_within_the_action_limit(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, aws_environment: str
) -> None:
    """Hundreds of nodes, six delta batches in one invocation, replayed whole inside and after the window."""
    trades: Trades = {}
    records: list[dict[str, Any]] = []
    for index in range(6):
        batch_trades = wide_trades(f"w{index}-", 70, index * 70)
        trades |= batch_trades
        records += delta_records_for(pipeline, messages_for(batch_trades))
    expected = expected_totals(trades)
    assert len(expected) > 400
    recorder = TransactionRecorder(monkeypatch)
    pipeline.run_reduce(records)
    assert all(len(call) <= MAX_TRANSACTION_ACTIONS for call in recorder.calls)
    assert pipeline.aggregates() == expected
    assert pipeline.stats()["MessagesApplied"] == 420
    pipeline.run_reduce(records)  # the tokens recognise every transaction
    advance_emulator_clock(aws_environment, TOKEN_WINDOW_SECONDS + 1)
    summary = pipeline.run_reduce(records)  # the markers recognise every unit
    assert summary["units_already_applied"] == len(markers(pipeline))
    assert pipeline.aggregates() == expected
    assert pipeline.stats()["MessagesApplied"] == 420


def test_an_invocation_over_the_standard_hierarchy_writes_each_node_once(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five delta batches touching mostly the same nodes: the root is updated once, not five times."""
    trades: Trades = {}
    records: list[dict[str, Any]] = []
    for index in range(5):
        batch_trades = {
            f"s{index}-{i}": (Decimal(i + 1), (f"Risk{i % 5}", f"Desk{i // 5 % 5}", f"Region{i % 3}"))
            for i in range(40)
        }
        trades |= batch_trades
        records += delta_records_for(pipeline, messages_for(batch_trades))
    recorder = TransactionRecorder(monkeypatch)
    pipeline.run_reduce(records)
    updates = recorder.node_updates()
    assert sorted(updates) == sorted(set(updates))
    assert pipeline.aggregates() == expected_totals(trades)
    assert pipeline.stats()["MessagesApplied"] == 200


def test_unsafe_add_negative_control_double_counts_a_replay(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos suite's control: without token or marker, the exactness check must fail."""
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", "unsafe-add")
    records = delta_records_for(pipeline, [trade_message("a", 1, "10")])
    pipeline.run_reduce(records)
    assert pipeline.aggregates() == expected_totals({"a": (Decimal(10), ("Delta", "FXSpot", "AMER"))})
    pipeline.run_reduce(records)
    assert pipeline.aggregates()["Delta:FXSpot:AMER"] == (Decimal(20), 2)
    assert pipeline.stats()["MessagesApplied"] == 2


def test_unknown_idempotency_mode_is_refused(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", "hope")
    records = delta_records_for(pipeline, [trade_message("a", 1, "10")])
    with pytest.raises(RuntimeError, match="REDUCE_IDEMPOTENCY='hope' is not one of"):
        pipeline.run_reduce(records)


def test_a_retried_transaction_is_the_identical_request_whatever_the_clock(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every parameter under a ClientRequestToken is a function of the units, never of the time."""
    clock = itertools.count(1_800_000_000, 37)
    monkeypatch.setattr(time, "time", lambda: float(next(clock)))
    records = delta_records_for(pipeline, [trade_message("a", 1, "10"), trade_message("b", 1, "0.5", timestamp="9")])
    recorder = TransactionRecorder(monkeypatch, fail_calls={1}, error="TransactionCanceledException")
    with pytest.raises(ClientError):
        pipeline.run_reduce(records)
    pipeline.run_reduce(records)
    assert len(recorder.requests) == 2 and recorder.requests[0] == recorder.requests[1]
    created_at = int(pipeline.scan("delta")[0]["CreatedAt"])
    expiries = [item["Put"]["Item"]["ExpiresAt"]["N"] for item in recorder.calls[0] if "Put" in item]
    assert expiries == [str(created_at + 7 * 86_400)], "marker expiry counts from the delta item, not the clock"
    stats = pipeline.stats()
    assert stats["MessagesApplied"] == 2 and stats["LastUpdated"] >= 1_800_000_000, "written after, outside"


def test_a_transaction_in_progress_is_sent_again_identically(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reduce_handler, "RETRY_PAUSE_SECONDS", 0.001)
    records = delta_records_for(pipeline, [trade_message("a", 1, "10")])
    recorder = TransactionRecorder(monkeypatch, fail_calls={1, 2}, error="TransactionInProgressException")
    pipeline.run_reduce(records)
    assert len(recorder.requests) == 3 and recorder.requests[0] == recorder.requests[2]
    assert pipeline.aggregates()["Delta"] == (Decimal(10), 1)


def test_a_token_mismatch_is_taken_as_applied_only_where_markers_prove_it(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same units with other parameters (a changed marker TTL) inside the token window."""
    first = delta_records_for(pipeline, [trade_message("a", 1, "10")])
    pipeline.run_reduce(first)
    second = delta_records_for(pipeline, [trade_message("b", 1, "5")])
    monkeypatch.setenv("MARKER_TTL_DAYS", "9")
    recorder = TransactionRecorder(monkeypatch)
    summary = pipeline.run_reduce(first + second)  # first's token now comes with other parameters
    assert summary["units_already_applied"] == 1
    assert pipeline.aggregates()["Delta"] == (Decimal(15), 2)
    assert pipeline.stats()["MessagesApplied"] == 2
    assert len(recorder.calls) >= 2, "refused with a mismatch, then the rest re-planned"


def test_a_token_mismatch_without_evidence_fails_the_invocation(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applied without markers (mode crt), then the same units with markers: no evidence, no guess."""
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", "crt")
    records = delta_records_for(pipeline, [trade_message("a", 1, "10")])
    pipeline.run_reduce(records)
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", "crt+marker")
    with pytest.raises(reduce_handler.TokenMismatchWithoutEvidence):
        pipeline.run_reduce(records)
    assert pipeline.aggregates()["Delta"] == (Decimal(10), 1)


def test_in_token_only_mode_a_mismatch_fails_the_invocation(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = delta_records_for(pipeline, [trade_message("a", 1, "10")])
    pipeline.run_reduce(records)
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", "crt")  # the same token, now without the marker Put
    with pytest.raises(reduce_handler.TokenMismatchWithoutEvidence):
        pipeline.run_reduce(records)
    assert pipeline.aggregates()["Delta"] == (Decimal(10), 1)


def test_records_other_than_inserts_are_skipped_and_counted(
    pipeline: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mapping's filter passes any record with a new image; the handler acts on INSERTs only."""
    trades: Trades = {"a": (Decimal("0.1"), ("Delta", "FXSpot", "AMER")), "b": (Decimal("0.2"), ("Vega", "FX", "EMEA"))}
    inserts = delta_records_for(pipeline, messages_for(trades))
    modify = {**inserts[0], "eventID": "modify-of-the-first", "eventName": "MODIFY"}
    remove = {**inserts[0], "eventID": "remove-of-the-first", "eventName": "REMOVE"}
    remove["dynamodb"] = {key: value for key, value in inserts[0]["dynamodb"].items() if key != "NewImage"}
    capsys.readouterr()

    summary = reduce_handler.lambda_handler({"Records": [modify, *inserts, remove]}, LambdaContextStub())

    assert pipeline.aggregates() == expected_totals(trades), "each INSERT applied once, nothing else"
    assert summary["transactions"] >= 1
    assert emitted_metric(capsys.readouterr().out, NON_INSERT_RECORDS_SKIPPED) == [2.0]


def test_a_batch_of_only_non_inserts_applies_nothing(pipeline: Pipeline, capsys: pytest.CaptureFixture[str]) -> None:
    (insert,) = delta_records_for(pipeline, [trade_message("a", 1, "5")])
    capsys.readouterr()
    modify = {**insert, "eventName": "MODIFY"}

    assert reduce_handler.lambda_handler({"Records": [modify]}, LambdaContextStub()) == {"transactions": 0}
    assert pipeline.aggregates() == {}
    assert emitted_metric(capsys.readouterr().out, NON_INSERT_RECORDS_SKIPPED) == [1.0]


def test_each_applied_message_is_measured_once_in_the_metrics_and_the_stats_histogram(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], aws_environment: str
) -> None:
    """One `EndToEndLatency` value per applied message, `MessagesApplied` its count, and the same
    messages in the `#stats` histogram; a retry that markers find applied measures nothing again.
    (A retry within the token's 10 minutes gets DynamoDB's success for its identical request and
    is measured again: `aggregation.latency`.)"""
    sent_at = time.time() - 2.0
    trades = wide_trades("t", 150)  # more than the 100 values of one EMF document
    payloads = [
        trade_message(trade_id, 1, str(value), path, timestamp=f"{sent_at:.3f}")
        for trade_id, (value, path) in trades.items()
    ]
    records = delta_records_for(pipeline, payloads)
    capsys.readouterr()
    monkeypatch.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT", "100")
    with pytest.raises(RuntimeError, match="injected REDUCE failure"):
        pipeline.run_reduce(records)
    monkeypatch.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT", "0")
    advance_emulator_clock(aws_environment, TOKEN_WINDOW_SECONDS + 1)
    assert pipeline.run_reduce(records)["units_already_applied"] > 0  # the retry: every unit applied before

    out = capsys.readouterr().out
    assert emitted_metric(out, MESSAGES_APPLIED) == [150.0, 0.0]
    latencies = emitted_metric(out, END_TO_END_LATENCY)
    assert len(latencies) == 150 and all(2000 <= value < 60_000 for value in latencies)
    stats = pipeline.stats()
    assert stats[MESSAGES_APPLIED] == 150 and sum(histogram_of(stats).values()) == 150


def items_of_many_state_shards(pipeline: Pipeline, shards: int) -> tuple[list[dict[str, Any]], Trades]:
    """One delta item per StateTable shard (as many map invocations of different shards write them),
    each adding 40 new trades over the standard hierarchy: the items of a reduce invocation at a
    high rate, which `slice_of` their `StreamShard` spreads over the slices."""
    label = uuid.uuid4().hex  # tokens are the emulator's, per account: a fresh stream label per test
    trades: Trades = {}
    for index in range(shards):
        batch_trades = {
            f"m{index}-{i}": (Decimal(f"{i + 1}.{index:02d}"), (f"Risk{i % 5}", f"Desk{i // 5 % 5}", f"Region{i % 3}"))
            for i in range(40)
        }
        trades |= batch_trades
        deltas = sum_state_changes((None, TradeState(value, path)) for value, path in batch_trades.values())
        run = StreamRun(f"{label}/shardId-{index:03d}", 1000, 1039)
        batch = DeltaBatch(run.batch_hash, deltas, 40, (Decimal("1.5"),) * 40, created_at=int(time.time()))
        item = DeltaItem(run, batch, expires_at=int(time.time()) + 86_400)
        pipeline.dynamodb.put_item(TableName=pipeline.names["delta"], Item=encode_delta_item(item))
    return pipeline.new_stream_records("delta"), trades


def test_with_markers_items_of_many_state_shards_share_one_transaction_per_group_in_any_slice_count(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, aws_environment: str
) -> None:
    """Issue 37: twenty items whose `StreamShard`s hash to many of 128 slices are planned together,
    one transaction per node group each writing the slice its token names, every node once, exact;
    in mode `crt` the same items are planned per item slice, a transaction or more for each. A replay
    in other boundaries after the token window, under another slice count, changes nothing."""
    monkeypatch.setenv("AGGREGATE_SLICES", "128")
    records, trades = items_of_many_state_shards(pipeline, 20)
    item_slices = {slice_of(decode_stream_run(r["dynamodb"]["NewImage"]).stream_shard, 128) for r in records}
    assert len(item_slices) > 10, "the premise: the items spread over many slices"
    recorder = TransactionRecorder(monkeypatch)
    pipeline.run_reduce(records)
    assert len(recorder.calls) == NODE_GROUPS
    updates = recorder.node_updates()
    assert sorted(updates) == sorted(set(updates)), "each node written once"
    for request in recorder.requests:
        (aggregate_slice,) = {
            int(item["Update"]["Key"]["AggregateKey"]["S"].split("#")[1])
            for item in request["TransactItems"]
            if "Update" in item and item["Update"]["Key"]["AggregateKey"]["S"].startswith("node#")
        }
        assert aggregate_slice == transaction_slice(request["ClientRequestToken"], 128)
    assert pipeline.aggregates() == expected_totals(trades)
    assert pipeline.stats()["MessagesApplied"] == 800
    advance_emulator_clock(aws_environment, TOKEN_WINDOW_SECONDS + 1)
    monkeypatch.setenv("AGGREGATE_SLICES", "3")
    for part in (records[5:12], records[::3], records):
        pipeline.run_reduce(part)
    assert pipeline.aggregates() == expected_totals(trades)
    assert pipeline.stats()["MessagesApplied"] == 800


def test_in_crt_items_of_many_state_shards_are_planned_per_item_slice(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mode `crt` keeps the slices of earlier releases (`slice_of` each item's `StreamShard`, each
    slice planned apart): a retry straddling an upgrade is the identical transaction."""
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", "crt")
    monkeypatch.setenv("AGGREGATE_SLICES", "128")
    records, trades = items_of_many_state_shards(pipeline, 20)
    item_slices = {slice_of(decode_stream_run(r["dynamodb"]["NewImage"]).stream_shard, 128) for r in records}
    recorder = TransactionRecorder(monkeypatch)
    pipeline.run_reduce(records)
    written = {
        int(item["Update"]["Key"]["AggregateKey"]["S"].split("#")[1])
        for call in recorder.calls
        for item in call
        if "Update" in item and item["Update"]["Key"]["AggregateKey"]["S"].startswith("node#")
    }
    assert written == item_slices and len(recorder.calls) >= len(item_slices)
    assert pipeline.aggregates() == expected_totals(trades)
