"""What the local deployer does for the settings guard, which the emulator cannot invoke."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest

from aggregation.names import AGGREGATE_KEY, STATE_SETTINGS_GUARD_TYPE, STATS_KEY
from aggregation.setting_changes import AGGREGATE_TABLE_PROPERTY, StateSettings, settings_id
from local.deploy.deployer import (
    EMULATOR_SKIPS_CONDITION,
    CloudAssembly,
    DeploymentError,
    StackResource,
    StackRolledBack,
    aggregate_state_reader,
    aws_client,
    created_empty,
    deploy_stack,
    deploy_what_cloudformation_skipped,
    run_settings_guard,
    template_for_the_emulator,
)
from settings_guard_function import handler as settings_guard
from stacks.settings import PipelineSettings
from tests.lambdas.settings_guard_function.refusals import REFUSAL_RULES

GUARD = "SettingsGuardA3A7EA49"
TABLE = "TablesAggregateTable5C0D3B1A"


def template(**context: object) -> dict[str, Any]:
    """The guard and a function depending on it, as the stack writes them."""
    return template_of(PipelineSettings.from_context(context.get).state_settings)


def template_of(settings: StateSettings) -> dict[str, Any]:
    """`template` for these settings (code constants and earlier releases' guards included)."""
    return {
        "Resources": {
            GUARD: {
                "Type": STATE_SETTINGS_GUARD_TYPE,
                "Properties": {
                    "ServiceToken": {"Fn::GetAtt": ["Provider", "Arn"]},
                    **settings.properties(),
                    AGGREGATE_TABLE_PROPERTY: {"Ref": TABLE},
                },
            },
            "Function": {"Type": "AWS::Lambda::Function", "DependsOn": [GUARD, "Role"]},
            "Mapping": {"Type": "AWS::Lambda::EventSourceMapping", "DependsOn": GUARD},
        }
    }


def test_the_deployer_refuses_what_the_guards_handler_refuses() -> None:
    guard = partial(run_settings_guard, holds_state=created_empty)
    guard(template(), template(hierarchyLevels=["Region", "RiskType", "TradeDesk"]))
    guard(None, template(valueIntegerDigits=28, valueFractionDigits=1))  # a new stack: Create
    guard({"Resources": {}}, template(valueIntegerDigits=28, valueFractionDigits=1))  # no guard yet
    with pytest.raises(DeploymentError, match=r"^refused: valueFractionDigits 10 -> 1 narrows"):
        guard(template(), template(valueIntegerDigits=28, valueFractionDigits=1))
    with pytest.raises(DeploymentError, match=r"^refused: reduceIdempotency crt\+marker -> crt"):
        guard(template(), template(reduceIdempotency="crt"))
    guard(template(aggregateSlices=1), template(aggregateSlices=16))  # 1 -> 16 slices, with markers
    with pytest.raises(DeploymentError, match=r"^refused: aggregateSlices 1 -> 16 in reduceIdempotency crt "):
        guard(
            template(reduceIdempotency="crt", aggregateSlices=1), template(reduceIdempotency="crt", aggregateSlices=16)
        )


def test_a_stack_without_the_guard_holding_state_in_mode_crt_is_refused_unless_declared_drained() -> None:
    """A release before the guard keyed nodes before slices: in `crt` a batch it committed and the
    new code retries would apply twice once its token expires (`python -m local upgrade` shows it).
    The guard's Create reads the deployed AggregateTable (named by its logical id here)."""
    before_the_guard = {"Resources": {"Function": {"Type": "AWS::Lambda::Function"}}}
    read: list[str] = []

    def holds_state(logical_id: str) -> bool:
        read.append(logical_id)
        return True

    crt = template(reduceIdempotency="crt")
    with pytest.raises(DeploymentError, match=r"^refused: the deployed stack has no settings guard .* crt "):
        run_settings_guard(before_the_guard, crt, holds_state=holds_state)
    assert read == [TABLE]
    run_settings_guard(before_the_guard, crt, holds_state=holds_state, drained=True)
    run_settings_guard(before_the_guard, template(), holds_state=holds_state)  # crt+marker: exact in place
    run_settings_guard(before_the_guard, crt, holds_state=created_empty)  # deployed, never used: nothing in flight
    run_settings_guard(None, crt, holds_state=created_empty)  # a new stack
    run_settings_guard(crt, template(reduceIdempotency="crt", markerTtlDays=9), holds_state=holds_state)  # Update


def test_the_deployers_state_reader_reads_the_deployed_table_in_the_emulator(aws_environment: str) -> None:
    """The local path end to end against the emulator: a stack of a release before the guard
    (one table, under the logical id the new template's `Ref` names), empty, then holding the
    `#stats` item its reducer wrote: the crt Create passes, then is refused, unless drained."""
    cloudformation = aws_client("cloudformation", aws_environment)
    dynamodb = aws_client("dynamodb", aws_environment)
    stack_name = "GuardStateReader"
    table = {
        "Type": "AWS::DynamoDB::Table",
        "Properties": {
            "AttributeDefinitions": [{"AttributeName": AGGREGATE_KEY, "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": AGGREGATE_KEY, "KeyType": "HASH"}],
            "BillingMode": "PAY_PER_REQUEST",
        },
    }
    before_the_guard = {"Resources": {TABLE: table}}
    cloudformation.create_stack(StackName=stack_name, TemplateBody=json.dumps(before_the_guard))
    holds_state = aggregate_state_reader(cloudformation, dynamodb, stack_name)
    crt = template(reduceIdempotency="crt")
    run_settings_guard(before_the_guard, crt, holds_state=holds_state)  # deployed, never used
    physical = cloudformation.describe_stack_resource(StackName=stack_name, LogicalResourceId=TABLE)
    dynamodb.put_item(
        TableName=physical["StackResourceDetail"]["PhysicalResourceId"],
        Item={AGGREGATE_KEY: {"S": STATS_KEY}, "MessagesApplied": {"N": "1"}},
    )
    assert holds_state(TABLE) and not holds_state("AnotherTable")
    with pytest.raises(DeploymentError, match=r"^refused: the deployed stack has no settings guard"):
        run_settings_guard(before_the_guard, crt, holds_state=holds_state)
    run_settings_guard(before_the_guard, crt, holds_state=holds_state, drained=True)
    run_settings_guard(before_the_guard, template(), holds_state=holds_state)


def test_the_emulator_gets_the_guard_conditioned_out_with_its_properties_kept() -> None:
    synthesized = template()
    emulated = template_for_the_emulator(synthesized)
    assert emulated["Resources"][GUARD]["Condition"] == EMULATOR_SKIPS_CONDITION
    assert emulated["Resources"][GUARD]["Properties"] == synthesized["Resources"][GUARD]["Properties"]
    assert emulated["Conditions"][EMULATOR_SKIPS_CONDITION] == {"Fn::Equals": ["emulator", "CloudFormation"]}
    assert emulated["Resources"]["Function"]["DependsOn"] == ["Role"]
    assert "DependsOn" not in emulated["Resources"]["Mapping"]
    assert synthesized == template(), "the synthesized template is left as it is"
    deployed = {
        name: StackResource(name, emulated["Resources"][name]["Type"], name) for name in ("Function", "Mapping")
    }
    assert deploy_what_cloudformation_skipped(synthesized, deployed) == [GUARD], "a gap the deployer fills itself"


AGGREGATE_TABLE = {
    "Type": "AWS::DynamoDB::Table",
    "Properties": {
        "AttributeDefinitions": [{"AttributeName": AGGREGATE_KEY, "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": AGGREGATE_KEY, "KeyType": "HASH"}],
        "BillingMode": "PAY_PER_REQUEST",
    },
}


@pytest.mark.parametrize(("deployed", "new", "reason"), REFUSAL_RULES)
def test_every_refused_update_is_rolled_back_with_the_reverse_update_and_completes(
    deployed: StateSettings, new: StateSettings, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33, item 1: as CloudFormation, the deployer answers a refusal with the reverse Update
    (same physical id, old and new properties swapped), which the guard accepts."""
    sent: list[dict[str, Any]] = []
    answer = settings_guard.answer

    def recorded(event: dict[str, Any], holds_state: Any) -> dict[str, str]:
        sent.append(event)
        return answer(event, holds_state)

    monkeypatch.setattr(settings_guard, "answer", recorded)
    with pytest.raises(StackRolledBack) as rolled_back:
        run_settings_guard(template_of(deployed), template_of(new), holds_state=created_empty)
    assert rolled_back.value.status == "UPDATE_ROLLBACK_COMPLETE"
    assert rolled_back.value.refusal.startswith(f"refused: {reason}")
    update, rollback = sent
    assert update["PhysicalResourceId"] == rollback["PhysicalResourceId"] == settings_id(deployed.properties())
    assert (rollback["ResourceProperties"], rollback["OldResourceProperties"]) == (
        update["OldResourceProperties"],
        update["ResourceProperties"],
    )


@pytest.mark.parametrize(("deployed", "new", "reason"), REFUSAL_RULES)
def test_a_refused_deploy_ends_update_rollback_complete_with_the_old_settings_running(
    deployed: StateSettings, new: StateSettings, reason: str, aws_environment: str
) -> None:
    """Through `deploy_stack` against the emulator: the stack (a guard and its AggregateTable)
    keeps the template, so the settings, it had."""
    cloudformation = aws_client("cloudformation", aws_environment)
    dynamodb = aws_client("dynamodb", aws_environment)
    stack_name = f"RolledBack{REFUSAL_RULES.index((deployed, new, reason))}"

    def assembly(settings: StateSettings) -> CloudAssembly:
        body = template_of(settings)
        body["Resources"] = {GUARD: body["Resources"][GUARD], TABLE: AGGREGATE_TABLE}
        return CloudAssembly(stack_name, body, json.dumps(body), (), 1)

    assert deploy_stack(cloudformation, assembly(deployed), dynamodb=dynamodb) == "created"
    with pytest.raises(StackRolledBack, match=r"^refused: .* \(the stack ended UPDATE_ROLLBACK_COMPLETE\)$") as error:
        deploy_stack(cloudformation, assembly(new), dynamodb=dynamodb)
    assert error.value.refusal.startswith(f"refused: {reason}")
    running = cloudformation.get_template(StackName=stack_name)["TemplateBody"]
    running = running if isinstance(running, dict) else json.loads(running)
    assert running == template_for_the_emulator(assembly(deployed).template)
    assert deploy_stack(cloudformation, assembly(deployed), dynamodb=dynamodb) == "unchanged"
