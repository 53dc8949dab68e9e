"""Which setting changes a stack holding state survives (`aggregation.setting_changes`)."""

from dataclasses import replace
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregation.exact import DYNAMODB_MAX_DIGITS, EXACT, is_dynamodb_number
from aggregation.names import TOKEN_AND_MARKERS, TOKEN_ONLY
from aggregation.setting_changes import (
    StateSettings,
    UnreadableStateSettings,
    change_refusal,
    first_guard_refusal,
    unguarded_upgrade_refusal,
)
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN, MIN_SUM_HEADROOM_DIGITS, ValueDomain

DEPLOYED = StateSettings(
    hierarchy_levels=("RiskType", "TradeDesk", "Region"),
    value_domain=DEFAULT_VALUE_DOMAIN,
    marker_ttl_days=7,
    reduce_idempotency=TOKEN_AND_MARKERS,
)


def one_line(refusal: str | None) -> str:
    assert refusal is not None and "\n" not in refusal
    return refusal


def test_moving_digits_from_fraction_to_integer_is_refused_naming_the_setting() -> None:
    """Issue 21, finding 7: 18+10 -> 28+1 would let reduce meet a 39-digit total on every retry."""
    stored_total = Decimal("1E-10")  # admitted under 18+10
    largest = Decimal(10) ** 28 - 1  # admitted under 28+1
    total = EXACT.add(EXACT.add(stored_total, largest), largest)
    assert not is_dynamodb_number(total), "39 significant digits: DynamoDB refuses the ADD"
    refusal = one_line(change_refusal(DEPLOYED, replace(DEPLOYED, value_domain=ValueDomain(28, 1))))
    assert refusal.startswith("valueFractionDigits 10 -> 1 narrows the value domain")
    assert "deploy the narrower domain as a new stack" in refusal
    assert one_line(change_refusal(DEPLOYED, replace(DEPLOYED, value_domain=ValueDomain(12, 10)))).startswith(
        "valueIntegerDigits 18 -> 12"
    )


def test_every_accepted_domain_change_keeps_every_sum_storable() -> None:
    """An accepted change contains the old domain and is itself valid, so every stored and future
    value lies in the new domain and sums of 10^9 of them fit 38 digits (the module's proof)."""
    domains = [
        ValueDomain(integer, fraction)
        for integer in range(1, 30)
        for fraction in range(30)
        if integer + fraction <= DYNAMODB_MAX_DIGITS - MIN_SUM_HEADROOM_DIGITS
    ]
    for old in domains[::7]:
        for new in domains:
            accepted = change_refusal(replace(DEPLOYED, value_domain=old), replace(DEPLOYED, value_domain=new)) is None
            assert accepted == (new.integer_digits >= old.integer_digits and new.fraction_digits >= old.fraction_digits)
            if accepted:
                assert new.sum_digits(10**MIN_SUM_HEADROOM_DIGITS) <= DYNAMODB_MAX_DIGITS


def test_levels_and_marker_ttls_change_freely_idempotency_and_node_groups_do_not() -> None:
    for levels in (("Region", "RiskType", "TradeDesk"), ("RiskType", "TradeDesk", "Region", "Book"), ("Desk",)):
        assert change_refusal(DEPLOYED, replace(DEPLOYED, hierarchy_levels=levels)) is None
    assert change_refusal(DEPLOYED, replace(DEPLOYED, marker_ttl_days=2)) is None
    assert change_refusal(DEPLOYED, replace(DEPLOYED, marker_ttl_days=30)) is None
    assert one_line(change_refusal(DEPLOYED, replace(DEPLOYED, marker_ttl_days=1))).startswith("markerTtlDays 1")
    switched = replace(DEPLOYED, reduce_idempotency=TOKEN_ONLY)
    assert one_line(change_refusal(DEPLOYED, switched)).startswith("reduceIdempotency crt+marker -> crt")
    assert one_line(change_refusal(switched, DEPLOYED)).startswith("reduceIdempotency crt -> crt+marker")
    assert one_line(change_refusal(DEPLOYED, replace(DEPLOYED, node_groups=3))).startswith("NODE_GROUPS 2 -> 3")


def test_the_settings_travel_as_the_strings_cloudformation_hands_over() -> None:
    properties = DEPLOYED.properties()
    assert all(isinstance(value, str) for value in properties.values())
    assert StateSettings.from_properties(properties) == DEPLOYED
    with pytest.raises(UnreadableStateSettings):
        StateSettings.from_properties({"HierarchyLevels": "A"})


def test_the_slice_count_changes_freely_with_markers_and_never_without() -> None:
    for count in (1, 2, 16, 10_000):
        assert change_refusal(DEPLOYED, replace(DEPLOYED, aggregate_slices=count)) is None
    sliced = replace(DEPLOYED, aggregate_slices=16)
    assert change_refusal(sliced, replace(sliced, aggregate_slices=4)) is None, "fewer slices: the rest stay summed"
    token_only = replace(DEPLOYED, reduce_idempotency=TOKEN_ONLY)
    assert change_refusal(token_only, replace(token_only, hierarchy_levels=("Desk",))) is None
    refusal = one_line(change_refusal(token_only, replace(token_only, aggregate_slices=16)))
    assert refusal.startswith("aggregateSlices 1 -> 16 in reduceIdempotency crt")
    assert "keep 1, or deploy the new count as a new stack" in refusal


def test_a_guard_deployed_before_the_slice_setting_reads_as_one_slice() -> None:
    """Its release wrote slice 0 only: an upgrade to 16 slices is a change from 1 (refused in `crt`)."""
    before = {key: value for key, value in DEPLOYED.properties().items() if key != "AggregateSlices"}
    assert StateSettings.from_properties(before).aggregate_slices == 1
    assert DEPLOYED.properties()["AggregateSlices"] == "1"
    assert StateSettings.from_properties(replace(DEPLOYED, aggregate_slices=16).properties()).aggregate_slices == 16


@given(
    mode=st.sampled_from([TOKEN_AND_MARKERS, TOKEN_ONLY]),
    slices=st.integers(min_value=1, max_value=16),
    holds_state=st.booleans(),
    drained=st.booleans(),
)
def test_the_guards_create_refuses_exactly_crt_over_stored_state_not_declared_drained(
    mode: str, slices: int, holds_state: bool, drained: bool
) -> None:
    """A new stack (empty table) and a drained pipeline are exact in either mode, crt+marker always;
    what is left, `crt` over a table a release before the guard filled, is refused in one line
    naming the migration: drain, then deploy declaring it."""
    new = replace(DEPLOYED, reduce_idempotency=mode, aggregate_slices=slices)
    refusal = first_guard_refusal(new, holds_state=holds_state, drained=drained)
    assert (refusal is not None) == (mode == TOKEN_ONLY and holds_state and not drained)
    if refusal is not None:
        assert refusal == unguarded_upgrade_refusal(new)
        assert "drain" in one_line(refusal) and "-c upgradeDrained=true" in refusal and "up --drained" in refusal
