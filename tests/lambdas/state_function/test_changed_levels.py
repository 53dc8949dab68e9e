"""A duplicate stays a duplicate across a change of `hierarchyLevels` (issue 32, item 5).

A version stored under one level list and sent again, unchanged, under another (a level dropped,
reordered or added: the settings guard accepts them all) changes nothing and is reported as a
duplicate: before, its content digest was taken in the new level order and the message was
quarantined as a conflicting duplicate, firing the `ConflictingDuplicates` alarm. A message that
really differs from the stored version, in its Value or the value of a level configured both then
and now, is still a conflict.

Each change of levels starts with an empty version cache, as Lambda does: a new configuration
runs in new execution environments. The first answer then comes from the table (the stored item
returned by the failed condition), the next from what the cache learnt from it.
"""

import json

import pytest

from aggregation.names import TRADE_HIERARCHY, TRADE_ID, TRADE_VALUE
from local.runner.inprocess import Pipeline, trade_message
from state_function import handler as state_handler
from tests.lambdas.state_function.conftest import StatementLog

DUPLICATE = {"received": 1, "written": 0, "duplicate_or_stale": 1, "conflicting_duplicates": 0, "quarantined": 0}
CONFLICT = {"received": 1, "written": 0, "duplicate_or_stale": 0, "conflicting_duplicates": 1, "quarantined": 0}


def message(value: str = "10", region: str = "AMER", book: str = "B1") -> bytes:
    """Trade "a" Version 1, with a `Book` the default levels ignore, so it can be configured later."""
    hierarchy = json.dumps({"RiskType": "Delta", "TradeDesk": "FXSpot", "Region": region, "Book": book})
    return f'{{"TradeID": "a", "Version": 1, "Value": {value}, "Timestamp": 1.5, "Hierarchy": {hierarchy}}}'.encode()


def reconfigure(monkeypatch: pytest.MonkeyPatch, levels: str) -> None:
    """Deploy `levels`: the function runs with them in new execution environments (no cached versions)."""
    monkeypatch.setenv("HIERARCHY_LEVELS", levels)
    state_handler.version_cache.cache_clear()


@pytest.mark.parametrize(
    "levels",
    ["RiskType,Region", "Region,TradeDesk,RiskType", "Region", "RiskType,TradeDesk,Region,Book", "Book,Region"],
    ids=["dropped", "reordered", "dropped-two", "added", "added-and-dropped"],
)
def test_an_identical_message_sent_again_after_a_level_change_is_a_duplicate(
    pipeline: Pipeline, statements: StatementLog, monkeypatch: pytest.MonkeyPatch, levels: str
) -> None:
    original = message()
    assert pipeline.run_state([original])["written"] == 1
    reconfigure(monkeypatch, levels)
    assert pipeline.run_state([original]) == DUPLICATE, "answered by the stored item"
    assert pipeline.run_state([original, original]) == {**DUPLICATE, "received": 2, "duplicate_or_stale": 2}
    assert statements.trade_ids == ["a", "a", "a"], "the second re-send was settled by what the first taught the cache"
    assert pipeline.scan("quarantine") == []
    (item,) = pipeline.scan("state")
    assert item[TRADE_HIERARCHY] == {"RiskType": "Delta", "TradeDesk": "FXSpot", "Region": "AMER"}


@pytest.mark.parametrize("levels", ["RiskType,Region", "Region,TradeDesk,RiskType", "Region,Book"])
def test_other_content_sent_after_a_level_change_is_still_a_conflict(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, levels: str
) -> None:
    pipeline.run_state([message()])
    reconfigure(monkeypatch, levels)
    for conflicting in (message(value="11"), message(region="EMEA")):
        state_handler.version_cache.cache_clear()
        assert pipeline.run_state([conflicting]) == CONFLICT, "answered by the stored item"
        assert pipeline.run_state([conflicting]) == CONFLICT, "answered by the version cache"
    reasons = [item["Reason"] for item in pipeline.scan("quarantine")]
    assert len(reasons) == 4 and all(reason.startswith("conflicting duplicate: TradeID 'a'") for reason in reasons)


def test_a_level_added_since_the_version_was_stored_cannot_make_a_conflict(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored version has no value for `Book`: it is judged on the Value and the levels it has."""
    pipeline.run_state([message(book="B1")])
    reconfigure(monkeypatch, "RiskType,TradeDesk,Region,Book")
    assert pipeline.run_state([message(book="B2")]) == DUPLICATE
    assert pipeline.run_state([message(book="B2", region="EMEA")]) == CONFLICT


def test_a_version_an_earlier_release_stored_is_recognised_after_a_level_change(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The item the first releases (stop-17, b5dc996) wrote: no NodePath, the digest of
    `["1E+1",["Delta","FXSpot","AMER"]]` (its content in the levels then)."""
    pipeline.dynamodb.put_item(
        TableName=pipeline.names["state"],
        Item={
            TRADE_ID: {"S": "a"},
            "Version": {"N": "1"},
            TRADE_VALUE: {"N": "10"},
            TRADE_HIERARCHY: {"M": {"RiskType": {"S": "Delta"}, "TradeDesk": {"S": "FXSpot"}, "Region": {"S": "AMER"}}},
            "ContentDigest": {"S": "06dab6b5ad28ae118bbb083487c27ad9676dee3a3c31b68b88fc53171c62743a"},
            "WrittenByEventId": {"S": "shardId-000000000000:1"},
        },
    )
    assert pipeline.run_state([trade_message("a", 1, "10")]) == DUPLICATE
    reconfigure(monkeypatch, "Region,RiskType")
    assert pipeline.run_state([trade_message("a", 1, "10")]) == DUPLICATE
    assert pipeline.run_state([trade_message("a", 1, "10", path=("Delta", "FXSpot", "EMEA"))]) == CONFLICT
