"""Changing `hierarchyLevels` on a stack that holds state (issue 21, finding 6).

A trade is subtracted from exactly the nodes it was added to, whatever the levels are by
then: the state function stores each version's node path, and the map function reads the
path of both images instead of recomputing it with the levels configured now.
"""

from decimal import Decimal

import pytest

from aggregation.names import TRADE_HIERARCHY, TRADE_ID, TRADE_VALUE
from local.runner.inprocess import Pipeline, trade_message

REORDERED = "Region,RiskType,TradeDesk"


def nodes(pipeline: Pipeline) -> dict[str, tuple[Decimal, int]]:
    """The aggregate nodes some trade is under (nodes every trade has left are dropped)."""
    return {key: total for key, total in pipeline.aggregates().items() if total != (Decimal(0), 0)}


def test_the_state_item_stores_the_path_in_the_level_order_configured_then(pipeline: Pipeline) -> None:
    pipeline.run_state([trade_message("a", 1, "5", path=("Vega", "Rates", "EMEA"))])
    (item,) = pipeline.scan("state")
    assert item["NodePath"] == ["Vega", "Rates", "EMEA"]


def test_reordered_levels_move_a_trade_from_its_old_nodes_to_its_new_ones(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline.run_all_stages([trade_message("a", 1, "5"), trade_message("b", 1, "7")])
    monkeypatch.setenv("HIERARCHY_LEVELS", REORDERED)
    pipeline.run_all_stages([trade_message("a", 2, "6")])
    assert nodes(pipeline) == {
        "Delta": (Decimal(7), 1),
        "Delta:FXSpot": (Decimal(7), 1),
        "Delta:FXSpot:AMER": (Decimal(7), 1),  # b, never rewritten, stays where it was added
        "AMER": (Decimal(6), 1),
        "AMER:Delta": (Decimal(6), 1),
        "AMER:Delta:FXSpot": (Decimal(6), 1),
    }
    pipeline.dynamodb.delete_item(TableName=pipeline.names["state"], Key={TRADE_ID: {"S": "a"}})
    pipeline.run_all_stages([])
    assert set(nodes(pipeline)) == {"Delta", "Delta:FXSpot", "Delta:FXSpot:AMER"}, "removed from its stored path"


def test_an_added_level_neither_stalls_the_map_nor_leaves_the_trade_in_its_old_nodes(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIERARCHY_LEVELS", "RiskType,TradeDesk")
    pipeline.run_all_stages([trade_message("a", 1, "5")])
    assert nodes(pipeline) == {"Delta": (Decimal(5), 1), "Delta:FXSpot": (Decimal(5), 1)}
    monkeypatch.setenv("HIERARCHY_LEVELS", "RiskType,TradeDesk,Region")
    pipeline.run_all_stages([trade_message("a", 2, "6")])  # raised ValueError before: no Region in the old image
    assert nodes(pipeline) == {
        "Delta": (Decimal(6), 1),
        "Delta:FXSpot": (Decimal(6), 1),
        "Delta:FXSpot:AMER": (Decimal(6), 1),
    }


def test_an_image_without_a_path_that_the_levels_cannot_place_is_counted_in_no_node(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An item of the previous release (no NodePath) under levels that gained one since."""
    pipeline.dynamodb.put_item(
        TableName=pipeline.names["state"],
        Item={
            TRADE_ID: {"S": "old"},
            "Version": {"N": "1"},
            TRADE_VALUE: {"N": "5"},
            TRADE_HIERARCHY: {"M": {"RiskType": {"S": "Delta"}, "TradeDesk": {"S": "FXSpot"}}},
        },
    )
    pipeline.new_stream_records("state")
    pipeline.run_all_stages([trade_message("old", 2, "6")])
    (item,) = pipeline.scan("delta")
    assert item["Deltas"] == {
        key: {"Value": Decimal(6), "TradeCount": 1} for key in ("Delta", "Delta:FXSpot", "Delta:FXSpot:AMER")
    }
    assert item["RecordCount"] == 1
