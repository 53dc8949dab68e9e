"""Valid-looking inputs that used to fail a batch for ever are refused at the door or pass every stage.

Each used to raise in map or reduce on every retry (on AWS: the shard stalls for a day, then
the records are discarded). Run through state -> map -> reduce against the emulator, with
totals compared to an independent sum of the messages that should count.
"""

import hashlib
from decimal import Decimal

import boto3
import pytest

from audit.aggregate_table import read_aggregate_table as read_audit_table
from frontend.snapshot import build_tree
from frontend.table_reader import AggregateTableReader
from local.runner.inprocess import Pipeline, expected_totals, trade_message
from producer.verifier import read_aggregate_table as read_verifier_snapshot

NODE = ("Delta", "FXSpot", "AMER")


def quarantine_reasons(pipeline: Pipeline) -> list[str]:
    return sorted(item["Reason"] for item in pipeline.scan("quarantine"))


def test_values_whose_sum_needs_more_than_38_digits_no_longer_poison_map_or_reduce(pipeline: Pipeline) -> None:
    """1E+30 and 1E-10 at one node: map's net delta needed 41 digits (and across batches
    reduce's ADD was inexact). 1E+30 is outside the domain, so it is quarantined."""
    largest = "999999999999999999.9999999999"
    pipeline.run_all_stages([trade_message("small", 1, "1E-10"), trade_message("huge", 1, "1E+30")])
    pipeline.run_all_stages([trade_message("huge-later", 1, "1E+30"), trade_message("largest", 1, largest)])
    pipeline.run_all_stages([trade_message("negative", 1, "-" + largest)])

    assert pipeline.aggregates() == expected_totals(
        {
            "small": (Decimal("1E-10"), NODE),
            "largest": (Decimal(largest), NODE),
            "negative": (-Decimal(largest), NODE),
        }
    )
    assert (
        quarantine_reasons(pipeline)
        == ["Value 1E+30 is outside the aggregatable domain: more than 18 integer digits (valueIntegerDigits)"] * 2
    )


def test_the_state_function_reads_the_domain_from_its_environment(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VALUE_INTEGER_DIGITS", "3")
    monkeypatch.setenv("VALUE_FRACTION_DIGITS", "0")
    summary = pipeline.run_state(
        [trade_message("a", 1, "999"), trade_message("b", 1, "1000"), trade_message("c", 1, "0.5")]
    )
    assert (summary["written"], summary["quarantined"]) == (1, 2)
    assert quarantine_reasons(pipeline) == [
        "Value 0.5 is outside the aggregatable domain: more than 0 fraction digits (valueFractionDigits)",
        "Value 1000 is outside the aggregatable domain: more than 3 integer digits (valueIntegerDigits)",
    ]


def test_an_absurd_timestamp_no_longer_poisons_the_reduce_latency_figures(pipeline: Pipeline) -> None:
    """A Timestamp of 1E+30 is a valid DynamoDB number; its latency could not be rounded in reduce."""
    pipeline.run_all_stages([trade_message("a", 1, "5", timestamp="1E+30"), trade_message("b", 1, "7")])
    assert pipeline.aggregates() == expected_totals({"a": (Decimal(5), NODE), "b": (Decimal(7), NODE)})
    assert pipeline.stats()["MessagesApplied"] == 2
    assert "Timestamp" not in next(item for item in pipeline.scan("state") if item["TradeID"] == "a")


def test_level_values_that_look_like_bookkeeping_are_nodes_every_reader_shows(pipeline: Pipeline) -> None:
    """`#stats` as a top-level value made reduce put two actions on one item (a batch failing for
    ever); any other `#…` value was aggregated but hidden from the verifier, the dashboard and
    audit. Node keys now have a space of their own (`aggregation.aggregate_items`)."""
    trades = {
        "stats-like": (Decimal("1.25"), ("#stats", "FXSpot", "AMER")),
        "desk": (Decimal("2.50"), ("Delta", "#1 desk", "AMER")),
        "marker-like": (Decimal("-4"), ("#applied#abc/0of2/0", "FXSpot", "EMEA")),
        "slice-like": (Decimal("8"), ("node#0#Delta", "FXSpot", "AMER")),
        "plain": (Decimal("16"), NODE),
    }
    pipeline.run_all_stages([trade_message(trade, 1, str(value), path) for trade, (value, path) in trades.items()])
    expected = expected_totals(trades)
    assert pipeline.aggregates() == expected
    assert pipeline.stats()["MessagesApplied"] == len(trades)

    table = pipeline.names["aggregate"]
    verifier_nodes = read_verifier_snapshot(pipeline.dynamodb, table).nodes
    assert {key: (node.value, node.trade_count) for key, node in verifier_nodes.items()} == expected
    dashboard = AggregateTableReader(boto3.resource("dynamodb"), table)()
    assert {key: (node.value, node.trade_count) for key, node in dashboard.nodes.items()} == expected
    assert {node.key for node in build_tree(dashboard.nodes)} >= {"#stats", "Delta", "#applied#abc/0of2/0"}
    audit = read_audit_table(pipeline.dynamodb, table)
    assert {key: (node.value, node.trade_count) for key, node in audit.nodes.items()} == expected
    assert audit.stats is not None and audit.stats["MessagesApplied"] == len(trades)


def test_hostile_numbers_between_good_records_are_settled_at_the_door_and_no_batch_fails(pipeline: Pipeline) -> None:
    """Issue 21, findings 1-3, in one batch of one partition key: good records, the hostile ones,
    good records again. Each hostile record used to raise (decimal.Clamped, Overflow, Inexact,
    Rounded) on every retry of the batch, so the good records were never written.

    A zero of any exponent is zero: accepted as the value 0 (stored as `0`), like a Timestamp
    DynamoDB cannot store, which is dropped. Every other one is quarantined with its reason.
    """
    good_before = [trade_message("good-1", 1, "10.25"), trade_message("good-2", 7, "-3.5")]
    zeros = [
        trade_message("zero-up", 1, "0E+500"),
        trade_message("zero-negative", 1, "-0E+300"),
        trade_message("zero-timestamp", 1, "2", timestamp="0E+500"),
        trade_message("zero-500-digits", 1, "0." + "0" * 500),
    ]
    dropped_timestamps = [
        trade_message("timestamp-huge", 1, "3", timestamp="1e999999999"),
        trade_message("timestamp-401-digits", 1, "4", timestamp="1" * 401),
    ]
    refused = {
        trade_message("value-huge", 1, "1e999999999"): "Value is not representable as a DynamoDB number",
        trade_message("value-tiny", 1, "1e-999999999"): "Value is not representable as a DynamoDB number",
        trade_message("value-401-digits", 1, "1" * 401): "Value is not representable as a DynamoDB number",
        trade_message("version-1e38", 10**38, "5"): "Version has more than 38 digits",
        trade_message("version-401-digits", int("9" * 401), "5"): "Version has more than 38 digits",
    }
    good_after = [trade_message("good-1", 2, "11"), trade_message("good-3", 1, "0.0000000001")]

    pipeline.run_all_stages(good_before + zeros + dropped_timestamps + list(refused) + good_after)

    assert pipeline.aggregates() == expected_totals(
        {
            "good-1": (Decimal(11), NODE),
            "good-2": (Decimal("-3.5"), NODE),
            "good-3": (Decimal("1E-10"), NODE),
            "zero-up": (Decimal(0), NODE),
            "zero-negative": (Decimal(0), NODE),
            "zero-timestamp": (Decimal(2), NODE),
            "zero-500-digits": (Decimal(0), NODE),
            "timestamp-huge": (Decimal(3), NODE),
            "timestamp-401-digits": (Decimal(4), NODE),
        }
    )
    reasons = {item["PayloadSha256"]: item["Reason"] for item in pipeline.scan("quarantine")}
    assert len(reasons) == len(refused)
    for payload, reason in refused.items():
        assert reason in reasons[hashlib.sha256(payload).hexdigest()]
    state = {item["TradeID"]: item for item in pipeline.scan("state")}
    assert [str(state[trade]["Value"]) for trade in ("zero-up", "zero-negative", "zero-500-digits")] == ["0"] * 3
    assert state["zero-timestamp"]["Timestamp"] == 0
    assert "Timestamp" not in state["timestamp-huge"] and "Timestamp" not in state["timestamp-401-digits"]
    assert pipeline.stats()["MessagesApplied"] == len(state)  # good-1 version 1 is superseded inside the batch
