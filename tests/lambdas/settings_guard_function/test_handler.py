"""The settings guard's handler, fed the requests CloudFormation sends a custom resource."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from aggregation.names import AGGREGATE_KEY, STATE_SETTINGS_GUARD_TYPE, STATS_KEY, TOKEN_ONLY
from aggregation.setting_changes import (
    AGGREGATE_TABLE_PROPERTY,
    UPGRADE_DRAINED,
    StateSettings,
    UnreadableStateSettings,
    settings_id,
    unguarded_upgrade_refusal,
)
from aggregation.value_domain import ValueDomain
from local.runner.inprocess import Pipeline
from settings_guard_function.handler import SettingChangeRefused, lambda_handler
from tests.lambdas.settings_guard_function.refusals import CRT, DEPLOYED, REFUSAL_RULES

SERVICE_TOKEN = "arn:aws:lambda:eu-west-1:111122223333:function:ExactlyOnceAggregation-SettingsGuardProvider"


def request(
    request_type: str, new: StateSettings, old: StateSettings | None = None, *, table: str = "AggregateTable-0a1b"
) -> dict[str, Any]:
    """A request as CloudFormation sends it: every property a string, the service token among them."""
    event: dict[str, Any] = {
        "RequestType": request_type,
        "ServiceToken": SERVICE_TOKEN,
        "ResponseURL": "https://cloudformation-custom-resource-response-euwest1.s3.amazonaws.com/presigned",
        "StackId": "arn:aws:cloudformation:eu-west-1:111122223333:stack/ExactlyOnceAggregation/0a1b",
        "RequestId": "5d2c1a7e-0000-4000-8000-000000000001",
        "LogicalResourceId": "SettingsGuardA3A7EA49",
        "ResourceType": STATE_SETTINGS_GUARD_TYPE,
        "ResourceProperties": {"ServiceToken": SERVICE_TOKEN, **new.properties(), AGGREGATE_TABLE_PROPERTY: table},
    }
    if old is not None:
        event["PhysicalResourceId"] = physical_id(old)
        if request_type == "Update":
            event["OldResourceProperties"] = {"ServiceToken": SERVICE_TOKEN, **old.properties()}
    return event


def physical_id(settings: StateSettings) -> str:
    """The id the guard answers for these settings, and CloudFormation then sends it."""
    return settings_id(settings.properties())


def handle(event: dict[str, Any]) -> dict[str, str]:
    return lambda_handler(event, LambdaContext())


def test_create_on_a_new_stacks_empty_table_succeeds_in_either_mode_and_names_the_settings(
    pipeline: Pipeline,
) -> None:
    for settings in (DEPLOYED, replace(DEPLOYED, reduce_idempotency=TOKEN_ONLY)):
        event = request("Create", settings, table=pipeline.names["aggregate"])
        assert handle(event) == {"PhysicalResourceId": physical_id(settings)}


def test_create_over_a_table_a_release_before_the_guard_filled_is_refused_in_crt_unless_declared_drained(
    pipeline: Pipeline,
) -> None:
    """The first request on a stack of a release without the guard is a Create, as on a new stack;
    the `#stats` item every committed reduce transaction of that release updated tells them apart."""
    table = pipeline.names["aggregate"]
    pipeline.dynamodb.put_item(TableName=table, Item={AGGREGATE_KEY: {"S": STATS_KEY}, "MessagesApplied": {"N": "3"}})
    token_only = replace(DEPLOYED, reduce_idempotency=TOKEN_ONLY)
    with pytest.raises(SettingChangeRefused) as refused:
        handle(request("Create", token_only, table=table))
    assert str(refused.value) == f"refused: {unguarded_upgrade_refusal(token_only)}"
    drained = request("Create", token_only, table=table)
    drained["ResourceProperties"][UPGRADE_DRAINED] = "true"
    assert handle(drained) == {"PhysicalResourceId": physical_id(token_only)}
    assert handle(request("Create", DEPLOYED, table=table)) == {"PhysicalResourceId": physical_id(DEPLOYED)}


def test_a_create_that_cannot_read_its_table_fails_rather_than_passes(aws_environment: str) -> None:
    """No answer is no evidence of an empty table: the deploy stops (and the read is really made)."""
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        handle(request("Create", replace(DEPLOYED, reduce_idempotency=TOKEN_ONLY), table="no-such-table"))


def test_a_create_by_a_guard_from_before_the_table_check_does_not_read_a_table(aws_environment: str) -> None:
    """A release's guard from before the check carries no table name (`make upgrade` deploys such
    releases locally, where this code answers their guard): its own code read no table, so neither
    does this answer, and nothing there refuses it."""
    old_guard = request("Create", replace(DEPLOYED, reduce_idempotency=TOKEN_ONLY))
    del old_guard["ResourceProperties"][AGGREGATE_TABLE_PROPERTY]
    assert handle(old_guard) == {"PhysicalResourceId": physical_id(replace(DEPLOYED, reduce_idempotency=TOKEN_ONLY))}


@pytest.mark.parametrize(
    "change",
    [
        {"hierarchy_levels": ("Region", "RiskType", "TradeDesk", "Book")},
        {"value_domain": ValueDomain(19, 10)},
        {"marker_ttl_days": 2},
    ],
)
def test_a_safe_update_succeeds_and_replaces_the_guard(change: dict[str, Any]) -> None:
    """A new physical id makes CloudFormation treat the update as a replacement: a rollback then
    deletes the new guard instead of sending it the reverse change (a narrowing it would refuse)."""
    new = replace(DEPLOYED, **change)
    answer = handle(request("Update", new, old=DEPLOYED))
    assert answer == {"PhysicalResourceId": physical_id(new)}
    assert answer["PhysicalResourceId"] != physical_id(DEPLOYED)


def test_an_update_that_leaves_the_settings_as_they_are_keeps_the_guard() -> None:
    """Only the service token changed (a new provider): a plain update, whose reverse is as safe."""
    event = request("Update", DEPLOYED, old=DEPLOYED)
    event["OldResourceProperties"]["ServiceToken"] = SERVICE_TOKEN + "-old"
    assert handle(event) == {"PhysicalResourceId": physical_id(DEPLOYED)}


@pytest.mark.parametrize(("deployed", "new", "reason"), REFUSAL_RULES)
def test_an_unsafe_update_fails_with_the_one_line_reason(
    deployed: StateSettings, new: StateSettings, reason: str
) -> None:
    with pytest.raises(SettingChangeRefused) as refused:
        handle(request("Update", new, old=deployed))
    message = str(refused.value)
    assert message.startswith(f"refused: {reason}")
    assert "\n" not in message


@pytest.mark.parametrize(("deployed", "new", "reason"), REFUSAL_RULES)
def test_the_rollback_of_every_refused_update_succeeds_and_keeps_the_guard(
    deployed: StateSettings, new: StateSettings, reason: str
) -> None:
    """Issue 33, item 1: CloudFormation rolls the refused Update back by sending the guard the
    reverse Update, with the physical id it holds (the provider framework keeps it on a failure).
    It returns the guard to the settings in force: accepted, so the stack ends
    UPDATE_ROLLBACK_COMPLETE, whereas every symmetric rule refused it (UPDATE_ROLLBACK_FAILED)."""
    with pytest.raises(SettingChangeRefused, match=f"^refused: {re.escape(reason)}"):
        handle(request("Update", new, old=deployed))
    rollback = request("Update", deployed, old=new)
    rollback["PhysicalResourceId"] = physical_id(deployed)
    assert handle(rollback) == {"PhysicalResourceId": physical_id(deployed)}


def test_the_rollback_exemption_passes_no_change() -> None:
    """A change sent with the guard's own id is still a change: only new properties the held id
    names are a return to the settings in force."""
    event = request("Update", replace(CRT, reduce_parallelization_factor=3), old=CRT)
    event["OldResourceProperties"] = {"ServiceToken": SERVICE_TOKEN, **replace(CRT, aggregate_slices=4).properties()}
    with pytest.raises(SettingChangeRefused):
        handle(event)


def test_delete_always_succeeds_with_the_guards_own_id() -> None:
    """A rollback of a created or replaced guard, a removal, or the cleanup of a replaced one."""
    narrower = replace(DEPLOYED, value_domain=ValueDomain(10, 2))
    assert handle(request("Delete", narrower, old=DEPLOYED)) == {"PhysicalResourceId": physical_id(DEPLOYED)}


def test_properties_that_are_not_state_settings_fail_the_request() -> None:
    event = request("Create", DEPLOYED)
    del event["ResourceProperties"]["MarkerTtlDays"]
    with pytest.raises(UnreadableStateSettings):
        handle(event)
