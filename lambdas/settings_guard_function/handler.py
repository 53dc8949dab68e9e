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
stack in UPDATE_ROLLBACK_FAILED. After a successful update the old guard is deleted. Create and
Delete always succeed: a new guard has no deployed settings to compare with.

The local deployer, whose emulator cannot invoke a Lambda-backed custom resource, calls
`lambda_handler` itself with the request CloudFormation would send (`local.deploy.deployer`).
"""

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from aggregation.names import SETTINGS_GUARD_SERVICE
from aggregation.setting_changes import StateSettings, change_refusal

SERVICE = SETTINGS_GUARD_SERVICE
PHYSICAL_ID_PREFIX: Final = "state-settings-"

logger = Logger(service=SERVICE)


class SettingChangeRefused(RuntimeError):
    """The update would run the pipeline with settings its stored state does not survive."""


def physical_id(settings: StateSettings) -> str:
    """A name of the settings themselves: equal settings keep the guard, changed ones replace it."""
    canonical = json.dumps(settings.properties(), sort_keys=True)
    return PHYSICAL_ID_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def answer(event: Mapping[str, Any]) -> dict[str, str]:
    """The provider framework's answer to one CloudFormation request; raises on a refused update."""
    request = event["RequestType"]
    if request == "Delete":
        return {"PhysicalResourceId": str(event["PhysicalResourceId"])}
    new = StateSettings.from_properties(event["ResourceProperties"])
    if request == "Update":
        refusal = change_refusal(StateSettings.from_properties(event["OldResourceProperties"]), new)
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
        response = answer(event)
    except SettingChangeRefused as refused:
        logger.error("setting change refused", extra={"reason": str(refused)})
        raise
    logger.info("settings guard answered", extra=response)
    return response
