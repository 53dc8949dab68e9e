"""Delta arithmetic, checked against totals worked out by hand."""

from decimal import Decimal

import pytest

from aggregation.deltas import NodeDelta, TradeState, image_node_path, state_change_deltas, sum_state_changes
from aggregation.exact import exact_sum
from aggregation.hierarchy import aggregate_keys, parse_hierarchy_levels

DELTA_FX_AMER = ("Delta", "FXSpot", "AMER")
DELTA_FX_EMEA = ("Delta", "FXSpot", "EMEA")
VEGA_RATES_APAC = ("Vega", "Rates", "APAC")


def test_aggregate_keys_cover_leaf_and_ancestors() -> None:
    assert aggregate_keys(DELTA_FX_AMER) == ["Delta", "Delta:FXSpot", "Delta:FXSpot:AMER"]


def test_hierarchy_levels_setting() -> None:
    assert parse_hierarchy_levels("RiskType,TradeDesk,Region") == ("RiskType", "TradeDesk", "Region")
    with pytest.raises(ValueError, match="HIERARCHY_LEVELS='A,A': the levels must be distinct"):
        parse_hierarchy_levels("A,A")
    with pytest.raises(ValueError, match="1 to 128 characters"):
        parse_hierarchy_levels("")


def test_new_trade_adds_value_and_one_trade_to_every_level() -> None:
    deltas = state_change_deltas(None, TradeState(Decimal("10.5"), DELTA_FX_AMER))
    assert deltas == {
        "Delta": NodeDelta(Decimal("10.5"), 1),
        "Delta:FXSpot": NodeDelta(Decimal("10.5"), 1),
        "Delta:FXSpot:AMER": NodeDelta(Decimal("10.5"), 1),
    }


def test_removed_trade_subtracts() -> None:
    deltas = state_change_deltas(TradeState(Decimal("7"), DELTA_FX_AMER), None)
    assert deltas["Delta:FXSpot:AMER"] == NodeDelta(Decimal("-7"), -1)
    assert len(deltas) == 3


def test_value_change_in_place_changes_value_not_count() -> None:
    deltas = state_change_deltas(TradeState(Decimal("7"), DELTA_FX_AMER), TradeState(Decimal("9.25"), DELTA_FX_AMER))
    assert deltas == {key: NodeDelta(Decimal("2.25"), 0) for key in aggregate_keys(DELTA_FX_AMER)}


def test_move_between_regions_touches_only_the_leaves() -> None:
    deltas = state_change_deltas(TradeState(Decimal("5"), DELTA_FX_AMER), TradeState(Decimal("5"), DELTA_FX_EMEA))
    assert deltas == {
        "Delta:FXSpot:AMER": NodeDelta(Decimal("-5"), -1),
        "Delta:FXSpot:EMEA": NodeDelta(Decimal("5"), 1),
    }


def test_move_across_risk_types_with_new_value() -> None:
    deltas = state_change_deltas(TradeState(Decimal("5"), DELTA_FX_AMER), TradeState(Decimal("8"), VEGA_RATES_APAC))
    assert deltas["Delta"] == NodeDelta(Decimal("-5"), -1)
    assert deltas["Vega:Rates:APAC"] == NodeDelta(Decimal("8"), 1)
    assert len(deltas) == 6


def test_unchanged_state_has_no_delta() -> None:
    state = TradeState(Decimal("5"), DELTA_FX_AMER)
    assert state_change_deltas(state, state) == {}


def test_point_one_plus_point_two_is_exactly_point_three() -> None:
    total = sum_state_changes(
        [(None, TradeState(Decimal("0.1"), DELTA_FX_AMER)), (None, TradeState(Decimal("0.2"), DELTA_FX_AMER))]
    )
    assert total["Delta"] == NodeDelta(Decimal("0.3"), 2)
    assert str(total["Delta"].value) == "0.3"


def test_sums_beyond_the_default_28_digit_context_stay_exact() -> None:
    big = Decimal("12345678901234567890123456789012345678")  # 38 digits
    tiny = Decimal("0.00000000000000000000000000000000000001")
    assert exact_sum(big, tiny) - big == tiny
    total = sum_state_changes([(None, TradeState(big, DELTA_FX_AMER)), (None, TradeState(tiny, DELTA_FX_AMER))])
    assert str(total["Delta"].value) == "12345678901234567890123456789012345678." + "0" * 37 + "1"


def test_an_image_is_counted_at_its_stored_path_whatever_the_levels_now() -> None:
    hierarchy = {"RiskType": "Delta", "TradeDesk": "FXSpot", "Region": "AMER"}
    stored = {"Hierarchy": hierarchy, "NodePath": ["Delta", "FXSpot", "AMER"]}
    for levels in (("Region", "RiskType", "TradeDesk"), ("RiskType", "TradeDesk", "Region", "Book"), ("Book",)):
        assert image_node_path(stored, levels) == DELTA_FX_AMER
    previous_release = {"Hierarchy": {"RiskType": "Delta", "TradeDesk": "FXSpot"}}
    assert image_node_path(previous_release, ("TradeDesk", "RiskType")) == ("FXSpot", "Delta")
    assert image_node_path(previous_release, ("RiskType", "TradeDesk", "Region")) is None
