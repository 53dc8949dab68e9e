"""Valid-looking inputs that used to fail a batch for ever are refused at the door or pass every stage.

Each used to raise in map or reduce on every retry (on AWS: the shard stalls for a day, then
the records are discarded). Run through state -> map -> reduce against the emulator, with
totals compared to an independent sum of the messages that should count.
"""

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
