"""The state function's door: one record's defect is quarantined, never a failed batch, while an
error of the write itself still fails it (it is retryable)."""

import decimal
from typing import Any

import pytest
from botocore.exceptions import ClientError

from aggregation.messages import parse_trade_message
from aggregation.state_statements import statement_texts
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN
from aggregation.versions import VersionCache
from local.runner.inprocess import LEVELS, Pipeline, trade_message
from state_function import handler as state_handler
from state_function.quarantine import MAX_REASON_CHARACTERS, QuarantinedRecord, RecordOrigin, bounded

DEFECT = b'{"defect": true}'


def origin(payload: bytes, event_id: str = "shardId-000000000000:1") -> RecordOrigin:
    return RecordOrigin(event_id, "shardId-000000000000", "1", "pk", payload)


def parse_with_a_defect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the payload `DEFECT` raises what no rule foresaw, as decimal's traps used to."""

    def parse_or_raise(data: bytes, *args: Any) -> Any:
        if data == DEFECT:
            raise decimal.Clamped("[<class 'decimal.Clamped'>]" + "x" * 5000)
        return parse_trade_message(data, *args)

    monkeypatch.setattr(state_handler, "parse_trade_message", parse_or_raise)


def test_an_exception_reading_a_record_quarantines_it_with_the_exception_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parse_with_a_defect(monkeypatch)
    received = state_handler.receive(origin(DEFECT), LEVELS, DEFAULT_VALUE_DOMAIN)
    assert isinstance(received, QuarantinedRecord)
    assert received.reason.startswith("unexpected Clamped while reading the record: [<class 'decimal.Clamped'>]")
    assert len(bounded(received.reason, MAX_REASON_CHARACTERS)) < MAX_REASON_CHARACTERS + 40, "cut where it is stored"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (
            trade_message("t\\u001b[2J", 1, "1"),
            "TradeID contains a control or bidirectional-control character (U+001B)",
        ),
        (
            trade_message("t", 1, "1", path=("Delta", "FX\u202eEMAG", "AMER")),
            "Hierarchy.TradeDesk contains a control or bidirectional-control character (U+202E)",
        ),
    ],
)
def test_a_terminal_escape_or_bidirectional_override_is_quarantined_with_its_reason(
    payload: bytes, reason: str
) -> None:
    """Issue 26: what a producer sends must not repaint the operator's screen; the record keeps its evidence."""
    received = state_handler.receive(origin(payload), LEVELS, DEFAULT_VALUE_DOMAIN)
    assert isinstance(received, QuarantinedRecord)
    assert received.reason == reason
    assert received.origin.payload == payload


def test_the_write_is_built_and_serialized_at_the_door() -> None:
    payload = trade_message("t", 10**38 - 1, "0E+500", timestamp="-0E+300")
    received = state_handler.receive(origin(payload), LEVELS, DEFAULT_VALUE_DOMAIN)
    assert isinstance(received, state_handler.ReceivedMessage)
    write = received.write
    assert (write.version, write.assigned[0], write.assigned[-1]) == ({"N": "9" * 38}, {"N": "0"}, {"N": "0"})
    assert write.key == {"S": "t"}


class FailingClient:
    """A DynamoDB client whose writes fail as a throttled or unreachable table does."""

    def batch_execute_statement(self, **_: Any) -> None:
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}}, "BatchExecuteStatement")


def test_an_error_of_the_write_itself_propagates_and_fails_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    received = state_handler.receive(origin(trade_message("t", 1, "5")), LEVELS, DEFAULT_VALUE_DOMAIN)
    assert isinstance(received, state_handler.ReceivedMessage)
    monkeypatch.setattr(state_handler, "state_update_client", FailingClient)
    known = VersionCache(10)
    with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
        state_handler.write_statements(statement_texts("state"), [received], [True], known)
    assert known.get("t") is None, "an unknown outcome teaches the cache nothing"


def test_a_defective_record_between_good_ones_is_quarantined_and_the_batch_succeeds(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    parse_with_a_defect(monkeypatch)
    summary = pipeline.run_state([trade_message("a", 1, "1.5"), DEFECT, trade_message("b", 1, "2.5")])
    assert (summary["written"], summary["quarantined"]) == (2, 1)
    assert {item["TradeID"]: item["Value"] for item in pipeline.scan("state")} == {
        "a": decimal.Decimal("1.5"),
        "b": decimal.Decimal("2.5"),
    }
    (quarantined,) = pipeline.scan("quarantine")
    assert quarantined["Reason"].startswith("unexpected Clamped while reading the record")
    assert quarantined["Payload"] == DEFECT.decode()
