"""Settings guard: fail a stack update whose settings the stored state would not survive.

The stack declares one custom resource (`Custom::StateSettingsGuard`) whose properties are the
state settings (`aggregation.setting_changes.StateSettings.properties`), and makes every
pipeline function depend on it. CloudFormation calls this handler (through the CDK provider
framework, which reports an exception as FAILED with its message) with the old and the new
properties when a deploy changes them; a refused change fails the update before any function
is updated, and CloudFormation rolls the stack back. The decision is the domain's
(`change_refusal`); this handler only reads the request and answers it.

The physical id names the settings in force (`settings_id`), so a changed setting *replaces*
the guard: if a later resource then fails, CloudFormation's rollback deletes the new guard
instead of sending it the reverse update, which the rule could refuse (a widened domain
narrowing back). After a successful update the old guard is deleted. When the guard itself
refuses an Update, the provider framework keeps the physical id and CloudFormation's rollback
sends the guard the reverse Update (aws-cdk issue 17040; AWS CloudFormation User Guide, "Update
request for CloudFormation custom resources": `PhysicalResourceId`, `ResourceProperties`,
`OldResourceProperties`): new properties that the held id names are the settings in force, and
are accepted (`update_refusal`), so the stack ends UPDATE_ROLLBACK_COMPLETE, never
UPDATE_ROLLBACK_FAILED. Delete always succeeds. A Create has no deployed settings to compare
with, but it comes to a new stack and to one a release before the guard deployed alike: the
handler reads the AggregateTable's `#stats` item (`table_holds_state`, its role's one AWS call) and the domain decides
(`first_guard_refusal`: mode `crt` over stored state is refused unless declared drained).

The local deployer, whose emulator cannot invoke a Lambda-backed custom resource, calls
`lambda_handler` itself with the request CloudFormation would send (`local.deploy.deployer`).
"""

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from aggregation.names import AGGREGATE_KEY, SETTINGS_GUARD_SERVICE, STATS_KEY
from aggregation.setting_changes import (
    AGGREGATE_TABLE_PROPERTY,
    UPGRADE_DRAINED,
    StateSettings,
    first_guard_refusal,
    settings_id,
    update_refusal,
)
from function_support.aws import dynamodb_client

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

SERVICE = SETTINGS_GUARD_SERVICE

logger = Logger(service=SERVICE)


class SettingChangeRefused(RuntimeError):
    """The update would run the pipeline with settings its stored state does not survive."""


def table_holds_state(dynamodb: "DynamoDBClient", table_name: str) -> bool:
    """Whether the AggregateTable holds the `#stats` item, which every committed reduce
    transaction of every release updates: a strongly consistent read of that one key."""
    item = dynamodb.get_item(
        TableName=table_name,
        Key={AGGREGATE_KEY: {"S": STATS_KEY}},
        ConsistentRead=True,
        ProjectionExpression="#key",
        ExpressionAttributeNames={"#key": AGGREGATE_KEY},
    )
    return "Item" in item


def answer(event: Mapping[str, Any], holds_state: Callable[[str], bool]) -> dict[str, str]:
    """The provider framework's answer to one CloudFormation request; raises on a refused change.

    `holds_state` tells, by the AggregateTable's name, whether it holds state (`table_holds_state`).
    A guard without the table's name is a release's from before that check (the local deployer
    answers every release's guard with this code): its own code never read the table, so neither
    does this answer."""
    request = event["RequestType"]
    if request == "Delete":
        return {"PhysicalResourceId": str(event["PhysicalResourceId"])}
    properties = event["ResourceProperties"]
    new = StateSettings.from_properties(properties)
    if request == "Update":
        refusal = update_refusal(str(event["PhysicalResourceId"]), event["OldResourceProperties"], properties)
    else:
        refusal = first_guard_refusal(
            new,
            holds_state=AGGREGATE_TABLE_PROPERTY in properties
            and holds_state(str(properties[AGGREGATE_TABLE_PROPERTY])),
            drained=properties.get(UPGRADE_DRAINED) == "true",
        )
    if refusal is not None:
        raise SettingChangeRefused(f"refused: {refusal}")
    return {"PhysicalResourceId": settings_id(properties)}


def lambda_handler(event: dict[str, Any], _context: LambdaContext) -> dict[str, str]:
    """The provider framework's `onEvent`: CloudFormation's request in, the physical id out."""
    logger.info(
        "settings guard request",
        extra={"request": event.get("RequestType"), "logical_id": event.get("LogicalResourceId")},
    )
    try:
        response = answer(event, lambda table_name: table_holds_state(dynamodb_client(), table_name))
    except SettingChangeRefused as refused:
        logger.error("setting change refused", extra={"reason": str(refused)})
        raise
    logger.info("settings guard answered", extra=response)
    return response
