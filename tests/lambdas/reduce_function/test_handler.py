"""Reduce function: exact transactional apply, idempotent replays, splitting, both modes."""

import json
import urllib.request
from decimal import Decimal
from typing import Any

import pytest

from tests.lambdas.conftest import Pipeline, expected_totals, trade_message

TOKEN_WINDOW_SECONDS = 600


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
    markers = [i["AggregateKey"] for i in pipeline.scan("aggregate") if i["AggregateKey"].startswith("#applied#")]
    assert len(markers) == 2
    assert pipeline.stats()["MessagesApplied"] == 60


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
