"""The state function's version cache against real tables: fewer writes, the same outcomes, exact totals."""

import json
import threading
from decimal import Decimal
from typing import Any

import pytest
from botocore.exceptions import ClientError

from aggregation.state_statements import MAX_STATEMENTS_PER_CALL
from function_support import aws
from local.runner.inprocess import LambdaContextStub, Pipeline, expected_totals, trade_message
from producer.generator import GeneratorConfig, MessageGenerator, MessageKind
from state_function import handler as state_handler
from tests.lambdas.state_function.conftest import StatementLog


def cached(pipeline: Pipeline, trade_id: str) -> int | None:
    stored = state_handler.version_cache(pipeline.names["state"]).get(trade_id)
    return None if stored is None else stored.version


def test_duplicates_and_stale_versions_of_earlier_batches_cost_no_write(
    pipeline: Pipeline, statements: StatementLog
) -> None:
    pipeline.run_state([trade_message("a", 3, "30"), trade_message("b", 1, "1")])
    assert sorted(statements.trade_ids) == ["a", "b"]
    pipeline.new_stream_records("state")

    summary = pipeline.run_state([trade_message("a", 3, "30"), trade_message("a", 2, "20"), trade_message("b", 0, "9")])
    assert sorted(statements.trade_ids) == ["a", "b"], "the duplicate and both stale versions were settled from memory"
    assert summary == {
        "received": 3,
        "written": 0,
        "duplicate_or_stale": 3,
        "conflicting_duplicates": 0,
        "quarantined": 0,
    }
    assert pipeline.new_stream_records("state") == []

    pipeline.run_state([trade_message("a", 4, "40")])
    assert statements.trade_ids.count("a") == 2, "a newer version is always written: the table decides"


def test_a_failed_condition_teaches_the_cache_what_the_table_holds(
    pipeline: Pipeline, statements: StatementLog
) -> None:
    pipeline.run_state([trade_message("a", 5, "50")])
    state_handler.version_cache.cache_clear()  # a fresh execution environment: it knows nothing
    pipeline.run_state([trade_message("a", 2, "20")])  # INSERT: the item exists; UPDATE: fails, the table holds 5
    assert cached(pipeline, "a") == 5
    pipeline.run_state([trade_message("a", 4, "40"), trade_message("a", 5, "50")])
    assert statements.trade_ids == ["a"] * 3, "the second environment learnt version 5 from the failed condition"


def test_a_conflicting_duplicate_settled_from_memory_is_still_reported(
    pipeline: Pipeline, statements: StatementLog
) -> None:
    pipeline.run_state([trade_message("a", 2, "10")])
    conflicting = trade_message("a", 2, "99", path=("Vega", "Rates", "EMEA"))
    summary = pipeline.run_state([conflicting])
    assert statements.trade_ids == ["a"], "no write for the conflict: the cached content digest tells it apart"
    assert (summary["conflicting_duplicates"], summary["written"]) == (1, 0)
    (report,) = pipeline.scan("quarantine")
    assert report["Payload"] == conflicting.decode()
    assert report["Reason"].startswith("conflicting duplicate: TradeID 'a' Version 2")


def test_a_retried_batch_reports_its_own_writes_as_written(pipeline: Pipeline, statements: StatementLog) -> None:
    event = pipeline.kinesis_event([trade_message("a", 1, "1"), trade_message("b", 2, "2")])
    first = state_handler.lambda_handler(event, LambdaContextStub())
    retried = state_handler.lambda_handler(event, LambdaContextStub())  # Lambda retries the identical records
    assert first["written"] == retried["written"] == 2
    assert len(statements.trade_ids) == 2, "the retry was settled from memory"
    assert len(pipeline.new_stream_records("state")) == 2


def test_a_write_whose_outcome_is_unknown_is_never_remembered(pipeline: Pipeline, statements: StatementLog) -> None:
    """The call writing `lost` is applied but its caller sees an error (a response lost beyond the SDK's
    retries): every statement of that call is unknown, `kept`'s in another call is not."""
    events = aws.state_update_client().meta.events
    kept_sent = threading.Event()

    def note_the_kept_call(context: dict[str, Any], **_: Any) -> None:
        if "kept" in context["trade_ids"]:
            kept_sent.set()

    def lose_the_response(context: dict[str, Any], **_: Any) -> None:
        if "lost" in context["trade_ids"]:
            # The calls run in two lanes, and no lane takes another call once one has failed: the
            # failure waits until the other lane has sent its call, as it would on a busy machine.
            assert kept_sent.wait(30), "the call writing `kept` was never sent"
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "lost"}}, "BatchExecuteStatement")

    lost = [trade_message(f"lost-{n}" if n else "lost", 1, "1") for n in range(MAX_STATEMENTS_PER_CALL)]
    event = pipeline.kinesis_event([*lost, trade_message("kept", 1, "2")])  # 26 writes: two calls of 13
    events.register("before-call.dynamodb.BatchExecuteStatement", note_the_kept_call)
    events.register("after-call.dynamodb.BatchExecuteStatement", lose_the_response)
    try:
        with pytest.raises(ClientError, match="lost"):
            state_handler.lambda_handler(event, LambdaContextStub())
    finally:
        events.unregister("after-call.dynamodb.BatchExecuteStatement", lose_the_response)
        events.unregister("before-call.dynamodb.BatchExecuteStatement", note_the_kept_call)
    assert len(pipeline.scan("state")) == MAX_STATEMENTS_PER_CALL + 1, "every statement was applied"
    assert cached(pipeline, "lost") is None, "an unknown outcome teaches nothing"
    assert cached(pipeline, "kept") == 1

    retried = state_handler.lambda_handler(event, LambdaContextStub())
    assert retried["written"] == MAX_STATEMENTS_PER_CALL + 1, "the retry recognises its own writes"
    assert statements.trade_ids.count("lost") == 3, (
        "asked again: INSERT, then UPDATE, whose failed condition says who wrote"
    )
    assert statements.trade_ids.count("kept") == 1
    assert cached(pipeline, "lost") == 1


def test_a_cache_of_size_zero_writes_every_selected_message(
    pipeline: Pipeline, statements: StatementLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATE_VERSION_CACHE_SIZE", "0")
    state_handler.version_cache.cache_clear()
    pipeline.run_state([trade_message("a", 3, "30")])
    pipeline.run_state([trade_message("a", 3, "30")])  # INSERT, then UPDATE: its failed condition says duplicate
    assert statements.trade_ids == ["a"] * 3
    state_handler.version_cache.cache_clear()


def test_the_skips_are_counted_in_a_metric(pipeline: Pipeline, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline.run_state([trade_message("a", 3, "30"), trade_message("b", 1, "1")])
    capsys.readouterr()
    pipeline.run_state([trade_message("a", 3, "30"), trade_message("b", 0, "1"), trade_message("c", 0, "1")])
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    (metrics,) = [blob for blob in blobs if "WritesSkippedByVersionCache" in blob]
    assert metrics["WritesSkippedByVersionCache"] == [2.0]


def test_a_generated_workload_writes_only_state_changes_and_stays_exact(
    pipeline: Pipeline, statements: StatementLog
) -> None:
    """Duplicates, out-of-order versions and conflicts over many batches: one write per state change."""
    generator = MessageGenerator(
        GeneratorConfig(seed=11, count=800, malformed_pct=0.0, conflicting_pct=2.0, duplicates_pct=15.0)
    )
    messages = list(generator)
    for start in range(0, len(messages), 50):
        pipeline.run_all_stages([message.data for message in messages[start : start + 50]])

    state_changes = pipeline.scan("state")
    expected = expected_totals({tid: (s.value, s.hierarchy) for tid, s in generator.trades.items()})
    actual = {key: value for key, value in pipeline.aggregates().items() if value != (Decimal(0), 0)}
    assert actual == expected
    applied = pipeline.stats()["MessagesApplied"]
    assert len(statements.trade_ids) == applied, "every statement sent was a state change: no failed condition paid"
    assert len(statements.trade_ids) < len(messages) - sum(m.kind is MessageKind.DUPLICATE for m in messages)
    conflicts = sum(m.kind is MessageKind.CONFLICTING_DUPLICATE for m in messages)
    assert conflicts > 0
    reported = [item for item in pipeline.scan("quarantine") if item["Reason"].startswith("conflicting duplicate")]
    assert len(reported) == conflicts
    assert len(state_changes) == len(generator.trades)
