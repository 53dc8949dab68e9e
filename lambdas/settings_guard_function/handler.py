"""Settings guard: fail a stack update whose settings the stored state would not survive.

The stack declares one custom resource (`Custom::StateSettingsGuard`) whose properties are the
state settings (`aggregation.setting_changes.StateSettings.properties`), and makes every
pipeline function depend on it. CloudFormation calls this handler (through the CDK provider
framework, which reports an exception as FAILED with its message) with the old and the new
properties when a deploy changes them; a refused change fails the update before any function
is updated, and CloudFormation rolls the stack back. The decision is the domain's
(`change_refusal`); this handler only reads the request and answers it.

The physical id names the settings, so a changed setting *replaces* the guard: if a later
resource then fails, CloudFormation's rollback deletes the new guard instead of sending it the
reverse update, which the rule could refuse (a widened domain narrowing back) and so leave the
stack in UPDATE_ROLLBACK_FAILED. After a successful update the old guard is deleted. Delete
always succeeds. A Create has no deployed settings to compare with, but it comes to a new stack
and to one a release before the guard deployed alike: the handler reads the AggregateTable's
`#stats` item (`table_holds_state`, its role's one AWS call) and the domain decides
(`first_guard_refusal`: mode `crt` over stored state is refused unless declared drained).

The local deployer, whose emulator cannot invoke a Lambda-backed custom resource, calls
`lambda_handler` itself with the request CloudFormation would send (`local.deploy.deployer`).
"""

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from aggregation.names import AGGREGATE_KEY, SETTINGS_GUARD_SERVICE, STATS_KEY
from aggregation.setting_changes import (
    AGGREGATE_TABLE_PROPERTY,
    UPGRADE_DRAINED,
    StateSettings,
    change_refusal,
    first_guard_refusal,
)
from function_support.aws import dynamodb_client

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

SERVICE = SETTINGS_GUARD_SERVICE
PHYSICAL_ID_PREFIX: Final = "state-settings-"

logger = Logger(service=SERVICE)


class SettingChangeRefused(RuntimeError):
    """The update would run the pipeline with settings its stored state does not survive."""


def physical_id(settings: StateSettings) -> str:
    """A name of the settings themselves: equal settings keep the guard, changed ones replace it."""
    canonical = json.dumps(settings.properties(), sort_keys=True)
    return PHYSICAL_ID_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:16]


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
        refusal = change_refusal(StateSettings.from_properties(event["OldResourceProperties"]), new)
    else:
        refusal = first_guard_refusal(
            new,
            holds_state=AGGREGATE_TABLE_PROPERTY in properties
            and holds_state(str(properties[AGGREGATE_TABLE_PROPERTY])),
            drained=properties.get(UPGRADE_DRAINED) == "true",
        )
    if refusal is not None:
        raise SettingChangeRefused(f"refused: {refusal}")
    return {"PhysicalResourceId": physical_id(new)}


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
