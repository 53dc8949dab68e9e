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
    settings_id,
    unguarded_upgrade_refusal,
    update_refusal,
)
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN, MIN_SUM_HEADROOM_DIGITS, ValueDomain
from tests.lambdas.settings_guard_function.refusals import DEPLOYED


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
    assert "keep 1, or deploy the new value as a new stack" in refusal


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


def state_settings() -> st.SearchStrategy[StateSettings]:
    """Settings of a guard, this release's or (without the batch shape) an earlier one's."""
    return st.builds(
        StateSettings,
        hierarchy_levels=st.sampled_from([("RiskType", "TradeDesk", "Region"), ("Desk",), ("Region", "Desk")]),
        value_domain=st.sampled_from(
            [DEFAULT_VALUE_DOMAIN, ValueDomain(28, 1), ValueDomain(19, 10), ValueDomain(12, 2)]
        ),
        marker_ttl_days=st.sampled_from([2, 7, 30]),
        reduce_idempotency=st.sampled_from([TOKEN_AND_MARKERS, TOKEN_ONLY]),
        aggregate_slices=st.sampled_from([1, 2, 16]),
        node_groups=st.sampled_from([2, 3]),
        reduce_batch_size=st.sampled_from([None, 10, 100]),
        reduce_parallelization_factor=st.sampled_from([None, 1, 3]),
        nodes_per_unit=st.sampled_from([98, 50]),
        transaction_actions=st.sampled_from([100, 25]),
    )


@given(held=state_settings(), refused=state_settings(), drained=st.booleans())
def test_the_rollback_of_every_update_returns_the_guard_to_the_settings_it_holds(
    held: StateSettings, refused: StateSettings, drained: bool
) -> None:
    """Issue 33, item 1: CloudFormation rolls a refused Update back with the reverse Update, sent
    with the physical id the guard holds. It names the settings in force, so the reverse is
    accepted whatever the rule said of the forward change (a symmetric rule refused it too)."""
    held_properties = held.properties() | ({"UpgradeDrained": "true"} if drained else {})
    assert update_refusal(settings_id(held.properties()), refused.properties(), held_properties) is None


@given(held=state_settings(), new=state_settings(), drained=st.booleans())
def test_any_other_update_is_judged_as_the_change_it_is(held: StateSettings, new: StateSettings, drained: bool) -> None:
    """Not a way around the rules: new settings other than the ones the held id names are judged
    from the old properties, whatever the request claims; the id tells settings apart."""
    new_properties = new.properties() | ({"UpgradeDrained": "true"} if drained else {})
    refusal = update_refusal(settings_id(held.properties()), held.properties(), new_properties)
    if new == held:
        assert refusal is None
    else:
        assert settings_id(new.properties()) != settings_id(held.properties())
        assert refusal == change_refusal(held, new, drained=drained)


def test_a_guard_an_earlier_release_deployed_keeps_the_physical_id_it_gave_it() -> None:
    """Its rollback is recognised too: the id of d04c31e's handler for these properties (which
    carried no batch shape and no transaction constants), computed by that release."""
    earlier = {
        "HierarchyLevels": "RiskType,TradeDesk,Region",
        "ValueIntegerDigits": "18",
        "ValueFractionDigits": "10",
        "NodeGroups": "2",
        "MarkerTtlDays": "7",
        "ReduceIdempotency": "crt",
        "AggregateSlices": "2",
    }
    assert settings_id(earlier | {"AggregateTable": "t", "ServiceToken": "arn"}) == "state-settings-9ab20ca30ad33f1d"
    assert StateSettings.from_properties(earlier).properties() != earlier, "this release names more"
    assert update_refusal("state-settings-9ab20ca30ad33f1d", DEPLOYED.properties(), earlier) is None


@given(settings=state_settings())
def test_the_settings_round_trip_through_their_properties(settings: StateSettings) -> None:
    assert StateSettings.from_properties(settings.properties()) == settings
