"""State function against real tables: versioning, in-batch dedup, quarantine."""

import hashlib
from decimal import Decimal

import pytest

from local.runner.inprocess import Pipeline, trade_message


def state_versions(pipeline: Pipeline) -> dict[str, tuple[int, Decimal]]:
    return {item["TradeID"]: (int(item["Version"]), item["Value"]) for item in pipeline.scan("state")}


def test_duplicates_and_stale_versions_in_a_batch_cost_no_write(pipeline: Pipeline) -> None:
    summary = pipeline.run_state(
        [
            trade_message("a", 1, "10"),
            trade_message("a", 1, "10"),
            trade_message("a", 3, "30"),
            trade_message("a", 2, "20"),
        ]
    )
    assert summary == {
        "received": 4,
        "written": 1,
        "duplicate_or_stale": 3,
        "conflicting_duplicates": 0,
        "quarantined": 0,
    }
    assert state_versions(pipeline) == {"a": (3, Decimal(30))}
    records = pipeline.new_stream_records("state")
    assert [r["eventName"] for r in records] == ["INSERT"], "one write, one stream record"


def test_duplicates_and_stale_versions_across_batches_change_nothing(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 3, "30")])
    pipeline.new_stream_records("state")
    summary = pipeline.run_state([trade_message("a", 3, "30"), trade_message("b", 0, "5")])
    assert summary["written"] == 1
    summary = pipeline.run_state([trade_message("a", 2, "20")])
    assert summary == {
        "received": 1,
        "written": 0,
        "duplicate_or_stale": 1,
        "conflicting_duplicates": 0,
        "quarantined": 0,
    }
    assert state_versions(pipeline) == {"a": (3, Decimal(30)), "b": (0, Decimal(5))}
    assert [r["dynamodb"]["Keys"]["TradeID"]["S"] for r in pipeline.new_stream_records("state")] == ["b"]


def test_out_of_order_arrival_ends_at_the_highest_version(pipeline: Pipeline) -> None:
    for version in (4, 1, 6, 5, 2):
        pipeline.run_state([trade_message("t", version, f"{version}.5")])
    assert state_versions(pipeline) == {"t": (6, Decimal("6.5"))}


def test_invalid_records_are_quarantined_and_the_rest_processed(pipeline: Pipeline) -> None:
    not_utf8 = b"\xff\xfe\x00binary"
    bad_json = b'{"TradeID": "x", "Value": '
    summary = pipeline.run_state([trade_message("ok1", 1, "1"), not_utf8, bad_json, trade_message("ok2", 1, "2")])
    assert summary == {
        "received": 4,
        "written": 2,
        "duplicate_or_stale": 0,
        "conflicting_duplicates": 0,
        "quarantined": 2,
    }
    assert set(state_versions(pipeline)) == {"ok1", "ok2"}
    quarantined = {item["RecordId"]: item for item in pipeline.scan("quarantine")}
    assert len(quarantined) == 2
    binary = next(item for item in quarantined.values() if "PayloadBinary" in item)
    assert binary["PayloadBinary"].value == not_utf8
    assert binary["Reason"].startswith("record is not UTF-8")
    assert binary["PayloadSha256"] == hashlib.sha256(not_utf8).hexdigest()
    text = next(item for item in quarantined.values() if "Payload" in item)
    assert text["Payload"] == bad_json.decode()
    assert text["Reason"].startswith("record is not JSON")
    assert text["RecordId"].startswith("shardId-000000000000:")


def test_oversized_invalid_record_is_quarantined_truncated_with_its_hash(pipeline: Pipeline) -> None:
    huge = b'{"TradeID": "' + b"x" * (1024 * 1024) + b'"}'
    pipeline.run_state([huge])
    (item,) = pipeline.scan("quarantine")
    assert item["PayloadTruncated"] is True
    assert int(item["PayloadBytes"]) == len(huge)
    assert item["PayloadSha256"] == hashlib.sha256(huge).hexdigest()
    assert "longer than 256" in item["Reason"]


def test_injected_failure_before_write_commits_nothing(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILURE_STATE_LAMBDA_PCT", "100")
    with pytest.raises(RuntimeError, match="injected STATE failure"):
        pipeline.run_state([trade_message("a", 1, "1")])
    assert state_versions(pipeline) == {}


def test_retried_batch_after_post_commit_failure_changes_nothing(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = [trade_message("a", 1, "1"), trade_message("b", 2, "2")]
    monkeypatch.setenv("FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT", "100")
    with pytest.raises(RuntimeError, match="injected STATE failure"):
        pipeline.run_state(batch)
    monkeypatch.setenv("FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT", "0")
    assert pipeline.run_state(batch)["written"] == 0
    assert len(pipeline.new_stream_records("state")) == 2


def test_bad_fault_setting_is_an_error_not_a_silent_zero(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILURE_STATE_LAMBDA_PCT", "lots")
    with pytest.raises(ValueError, match="FAILURE_STATE_LAMBDA_PCT"):
        pipeline.run_state([trade_message("a", 1, "1")])


def test_conflicting_duplicate_is_reported_and_the_first_applied_version_stands(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 2, "10")])
    conflicting = trade_message("a", 2, "99")
    summary = pipeline.run_state([conflicting, trade_message("a", 2, "10.0"), trade_message("a", 1, "5")])
    assert summary["conflicting_duplicates"] == 1
    assert summary["duplicate_or_stale"] == 2
    assert state_versions(pipeline) == {"a": (2, Decimal(10))}
    (report,) = pipeline.scan("quarantine")
    assert report["Payload"] == conflicting.decode()
    assert report["Reason"].startswith("conflicting duplicate: TradeID 'a' Version 2")


def test_conflicting_duplicate_inside_one_batch_is_reported(pipeline: Pipeline) -> None:
    conflicting = trade_message("a", 2, "11", path=("Vega", "Rates", "EMEA"))
    summary = pipeline.run_state([trade_message("a", 2, "10"), conflicting])
    assert (summary["written"], summary["conflicting_duplicates"]) == (1, 1)
    assert state_versions(pipeline) == {"a": (2, Decimal(10))}
    assert [item["Payload"] for item in pipeline.scan("quarantine")] == [conflicting.decode()]
