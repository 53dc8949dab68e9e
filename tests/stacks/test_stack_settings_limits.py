"""Settings that could make a batch fail for ever are refused at synth, with one line naming the setting.

The level names follow one rule at synthesis and in the functions, so a name the functions would
read differently (trimmed) or refuse never gets past synthesis.

The value domain (what the state function accepts, so that every sum fits DynamoDB's 38
digits) and the number of hierarchy levels (so that an aggregate key fits DynamoDB's key
limit, and the delta item of one record fits its item limit: the map function splits any
larger run until each item fits, so the map batch size is free).
"""

from __future__ import annotations

from typing import Any

import pytest

from aggregation.delta_item_size import max_records_per_delta_item, worst_case_delta_item_bytes
from aggregation.hierarchy import parse_hierarchy_levels
from aggregation.item_size import MAX_ITEM_BYTES
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN, ValueDomain
from function_support.settings import hierarchy_levels as function_hierarchy_levels
from stacks import SettingsError
from stacks.settings import PipelineSettings
from tests.stacks.stack_helpers import STATE_HANDLER, function_properties, synthesize

DEFAULT_LEVELS = ["RiskType", "TradeDesk", "Region"]


def settings_from(context: dict[str, Any]) -> PipelineSettings:
    return PipelineSettings.from_context(context.get)


def refusal(context: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as refused:
        settings_from(context)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_the_default_value_domain_is_18_integer_and_10_fraction_digits() -> None:
    assert settings_from({}).value_domain == DEFAULT_VALUE_DOMAIN == ValueDomain(18, 10)


def test_the_value_domain_reaches_the_state_function() -> None:
    _stack, template = synthesize({"valueIntegerDigits": "12", "valueFractionDigits": 4})
    variables = function_properties(template, STATE_HANDLER)["Environment"]["Variables"]
    assert (variables["VALUE_INTEGER_DIGITS"], variables["VALUE_FRACTION_DIGITS"]) == ("12", "4")


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"valueIntegerDigits": 0}, "'valueIntegerDigits' must be an integer from 1 to 38, got 0"),
        ({"valueIntegerDigits": "many"}, "'valueIntegerDigits' must be an integer from 1 to 38"),
        ({"valueFractionDigits": -1}, "'valueFractionDigits' must be an integer from 0 to 38, got -1"),
        (
            {"valueIntegerDigits": 20, "valueFractionDigits": 10},
            "'valueIntegerDigits' + 'valueFractionDigits': integer + fraction digits must be at most 29",
        ),
    ],
)
def test_a_value_domain_without_room_for_sums_is_refused(context: dict[str, Any], message: str) -> None:
    assert message in refusal(context)


def test_a_map_batch_size_is_not_bounded_by_the_delta_item_limit() -> None:
    """The worst case of 2,000 records (the planner's choice at 50,000 msg/s) needs ten items."""
    largest = max_records_per_delta_item(len(DEFAULT_LEVELS), DEFAULT_VALUE_DOMAIN)
    assert largest == 217
    assert settings_from({"mapBatchSize": 2000}).map_batch_size == 2000
    assert worst_case_delta_item_bytes(2000, len(DEFAULT_LEVELS), DEFAULT_VALUE_DOMAIN) > MAX_ITEM_BYTES


def test_a_wider_value_domain_is_counted_in_the_bound() -> None:
    wide = ValueDomain(19, 10)  # a delta of 2,000 such values needs 33 digits, 17 bytes (32: 16)
    assert worst_case_delta_item_bytes(1000, 1, wide) > worst_case_delta_item_bytes(1000, 1, DEFAULT_VALUE_DOMAIN)
    assert settings_from({"valueIntegerDigits": 19}).value_domain == wide


def test_more_levels_than_an_aggregate_key_can_hold_are_refused() -> None:
    levels = [f"Level{index}" for index in range(16)]
    assert "'hierarchyLevels' must be at most 15 levels" in refusal({"hierarchyLevels": levels})
    assert len(settings_from({"hierarchyLevels": levels[:15]}).hierarchy_levels) == 15


def test_the_item_of_one_record_fits_at_every_accepted_level_count() -> None:
    for levels in range(1, 16):
        assert max_records_per_delta_item(levels, DEFAULT_VALUE_DOMAIN) >= 1
        assert worst_case_delta_item_bytes(1, levels, ValueDomain(1, 28)) <= MAX_ITEM_BYTES


LEVEL_LISTS: list[list[Any]] = [
    ["RiskType", "TradeDesk", "Region"],
    ["RiskType "],  # the functions once trimmed it, then found no such level in any message
    [" "],  # once trimmed to nothing, which silently meant the default levels
    ["Region", " Region"],  # once trimmed to a duplicate, which failed every invocation
    ["\tDesk"],
    ["Desk", ""],
    ["Risk:Type"],
    ["Desk", "Desk"],
    [f"L{index}" for index in range(15)],
    [f"L{index}" for index in range(16)],
    ["x" * 128],
    ["x" * 129],
]


@pytest.mark.parametrize("levels", LEVEL_LISTS)
def test_synthesis_and_the_functions_accept_exactly_the_same_levels(levels: list[Any]) -> None:
    """One rule (`aggregation.hierarchy.hierarchy_levels_violation`) at synthesis and at run time:
    whatever synthesis accepts, the functions read back unchanged from the variable the stack
    writes; whatever the functions would refuse, synthesis refuses in one line naming the setting."""
    try:
        accepted = settings_from({"hierarchyLevels": levels}).hierarchy_levels
    except SettingsError as error:
        assert str(error).startswith("cdk.json context 'hierarchyLevels' must be ") and "\n" not in str(error)
        with pytest.raises(ValueError, match="HIERARCHY_LEVELS="):
            parse_hierarchy_levels(",".join(levels))
    else:
        assert parse_hierarchy_levels(",".join(accepted)) == accepted == tuple(levels)


@pytest.mark.parametrize("levels", [["RiskType "], [" "], ["Region", " Region"]])
def test_level_names_with_surrounding_whitespace_are_refused_at_synthesis(levels: list[str]) -> None:
    assert "'hierarchyLevels' must be level names without surrounding whitespace" in refusal(
        {"hierarchyLevels": levels}
    )


def test_the_functions_take_their_levels_exactly_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIERARCHY_LEVELS", " ")
    with pytest.raises(ValueError, match="surrounding whitespace"):
        function_hierarchy_levels()
    monkeypatch.delenv("HIERARCHY_LEVELS")
    assert function_hierarchy_levels() == tuple(DEFAULT_LEVELS)
