"""The state function's statement rounds against real tables: an INSERT that meets the item becomes
an UPDATE, an UPDATE that finds no item an INSERT, throttled statements are sent again, and a write
that never settles fails the batch (which Lambda retries) instead of being reported."""

import itertools
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregation.state_statements import THROTTLING_CODES
from function_support import aws
from local.runner.inprocess import LambdaContextStub, Pipeline, trade_message
from state_function import handler as state_handler
from state_function import resends
from tests.lambdas.state_function.conftest import StatementLog


class ThrottledAnswers:
    """Rewrites the first `times` answers of the statements DynamoDB applied into a throttling error:
    what the function sees when a statement is throttled (here after it was applied, which its resend
    must settle as its own write)."""

    def __init__(self, times: int, code: str = "ThrottlingError") -> None:
        self.left = times
        self.code = code

    def __call__(self, parsed: dict[str, Any], **_: Any) -> None:
        for response in parsed.get("Responses", []):
            if self.left > 0:
                self.left -= 1
                response.clear()
                response["Error"] = {"Code": self.code, "Message": "throttled by the test"}


def state_items(pipeline: Pipeline) -> dict[str, tuple[int, Decimal]]:
    return {item["TradeID"]: (int(item["Version"]), item["Value"]) for item in pipeline.scan("state")}


def test_an_update_that_finds_no_item_is_sent_again_as_an_insert(pipeline: Pipeline, statements: StatementLog) -> None:
    """Items are never deleted in the pipeline; here one is, behind the cache's back."""
    pipeline.run_state([trade_message("a", 1, "10")])
    pipeline.dynamodb.delete_item(TableName=pipeline.names["state"], Key={"TradeID": {"S": "a"}})
    summary = pipeline.run_state([trade_message("a", 2, "20")])
    assert statements.verbs == ["INSERT", "UPDATE", "INSERT"], "the cache knew version 1: UPDATE first"
    assert summary["written"] == 1
    assert state_items(pipeline) == {"a": (2, Decimal(20))}


def test_an_insert_that_meets_the_item_is_sent_again_as_an_update_with_one_stream_record(
    pipeline: Pipeline, statements: StatementLog
) -> None:
    pipeline.run_state([trade_message("a", 1, "10")])
    state_handler.version_cache.cache_clear()  # a fresh execution environment: it knows nothing
    pipeline.new_stream_records("state")
    summary = pipeline.run_state([trade_message("a", 2, "20")])
    assert statements.verbs == ["INSERT", "INSERT", "UPDATE"]
    assert summary["written"] == 1
    (record,) = pipeline.new_stream_records("state")
    assert record["eventName"] == "MODIFY"
    assert record["dynamodb"]["OldImage"]["Value"] == {"N": "10"}
    assert record["dynamodb"]["NewImage"]["Value"] == {"N": "20"}


@pytest.mark.parametrize("code", sorted(THROTTLING_CODES))
def test_a_throttled_statement_is_sent_again_and_its_own_write_recognised(
    pipeline: Pipeline, statements: StatementLog, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    monkeypatch.setattr(resends, "FIRST_RESEND_PAUSE_SECONDS", 0.001)
    throttled = ThrottledAnswers(times=1, code=code)
    events = aws.state_update_client().meta.events
    events.register("after-call.dynamodb.BatchExecuteStatement", throttled)
    try:
        summary = pipeline.run_state([trade_message("a", 1, "10"), trade_message("b", 1, "5")])
    finally:
        events.unregister("after-call.dynamodb.BatchExecuteStatement", throttled)
    assert statements.verbs == ["INSERT", "INSERT", "INSERT", "UPDATE"], "a: sent again, met its own item"
    assert summary["written"] == 2, "the write the throttled answer hid is still this record's"
    assert state_items(pipeline) == {"a": (1, Decimal(10)), "b": (1, Decimal(5))}


def test_statements_throttled_beyond_the_resends_fail_the_batch(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resends, "FIRST_RESEND_PAUSE_SECONDS", 0.001)
    throttled = ThrottledAnswers(times=10_000)
    events = aws.state_update_client().meta.events
    events.register("after-call.dynamodb.BatchExecuteStatement", throttled)
    event = pipeline.kinesis_event([trade_message("a", 1, "10")])
    try:
        with pytest.raises(state_handler.WritesUnsettled, match="throttled after 5 resends"):
            state_handler.lambda_handler(event, LambdaContextStub())
    finally:
        events.unregister("after-call.dynamodb.BatchExecuteStatement", throttled)
    assert state_handler.version_cache(pipeline.names["state"]).get("a") is None, "nothing answered, nothing known"
    assert state_handler.lambda_handler(event, LambdaContextStub())["written"] == 1, "Lambda's retry settles it"


def test_statements_that_never_settle_fail_the_batch_after_the_rounds(
    pipeline: Pipeline, statements: StatementLog
) -> None:
    """Answers no real table gives together (the item both there and not): the rounds are bounded."""

    def contradict(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        for response, verb in zip(parsed["Responses"], context["verbs"], strict=True):
            code = "DuplicateItem" if verb == "INSERT" else "ConditionalCheckFailed"
            response.clear()
            response["Error"] = {"Code": code, "Message": "contradicted by the test"}

    events = aws.state_update_client().meta.events
    events.register("after-call.dynamodb.BatchExecuteStatement", contradict)
    try:
        with pytest.raises(state_handler.WritesUnsettled, match="after 4 rounds"):
            pipeline.run_state([trade_message("a", 1, "10")])
    finally:
        events.unregister("after-call.dynamodb.BatchExecuteStatement", contradict)
    assert statements.verbs == ["INSERT", "UPDATE", "INSERT", "UPDATE"], "three switches settle any real answer"


EXAMPLES = itertools.count()


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    throttles=st.lists(st.integers(0, resends.MAX_RESENDS), min_size=1, max_size=30),
    existing=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_throttled_statements_never_count_as_switches(
    pipeline: Pipeline,
    statements: StatementLog,
    monkeypatch: pytest.MonkeyPatch,
    throttles: list[int],
    existing: list[bool],
) -> None:
    """Any pattern of throttled answers within `MAX_RESENDS` per statement settles the batch: a cold
    version cache switches each INSERT that meets its item once, however the throttling falls."""
    monkeypatch.setattr(resends, "FIRST_RESEND_PAUSE_SECONDS", 0.0001)
    example = next(EXAMPLES)
    trades = [f"throttled-{example}-{n}" for n in range(len(throttles))]
    pipeline.run_state([trade_message(t, 1, "1") for t, there in zip(trades, existing, strict=False) if there])
    state_handler.version_cache.cache_clear()  # a new execution environment: every statement an INSERT first
    left = dict(zip(trades, throttles, strict=True))

    def throttle(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        for response, trade in zip(parsed["Responses"], context["trade_ids"], strict=True):
            if left.get(trade, 0) > 0:  # applied, then answered "throttled": the resend meets its own write
                left[trade] -= 1
                response.clear()
                response["Error"] = {"Code": "ThrottlingError", "Message": "throttled by the test"}

    events = aws.state_update_client().meta.events
    events.register("after-call.dynamodb.BatchExecuteStatement", throttle)
    try:
        summary = pipeline.run_state([trade_message(t, 2, "2") for t in trades])
    finally:
        events.unregister("after-call.dynamodb.BatchExecuteStatement", throttle)
    assert summary["written"] == len(trades)
    assert {t: v for t, v in state_items(pipeline).items() if t in left} == {t: (2, Decimal(2)) for t in trades}
