"""Issue 36 item 6 on a `make up` stack: a function whose role lost a grant fails as it would on AWS.

The functions call as their execution roles and the emulator checks those roles' policies as
deployed from the template (`local.emulator.iam_check`). With the reduce role's writes on the
AggregateTable taken away, every reduce invocation fails with AccessDeniedException, its batch is
retried and the totals do not move; with the state role's PartiQLInsert on the StateTable taken
away, every new trade's INSERT is refused (AccessDenied per statement) and the state function
fails. Given back, the same retried batches land and the totals are exact: nothing was lost or
applied twice while the calls were refused.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from local.deploy.deployer import Deployment, aws_client
from local.emulator.control import iam_report
from local.paths import LocalPaths
from tests.local.deploy.conftest import StartStack
from tests.local.deploy.test_up_down import actual_aggregates, await_totals, generate_messages, put_records
from tests.local.runner.runner_harness import wait_for

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


def role_of(deployment: Deployment, handler_module: str) -> str:
    """The execution role name of the function whose handler is in `handler_module`."""
    (logical_id,) = (
        logical_id
        for logical_id, resource in deployment.template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
        and str(resource["Properties"].get("Handler", "")).startswith(handler_module + ".")
    )
    function = aws_client("lambda", deployment.endpoint_url).get_function(
        FunctionName=deployment.physical_id(logical_id)
    )
    return str(function["Configuration"]["Role"]).rsplit("/", 1)[-1]


def table_arn(deployment: Deployment, output: str) -> str:
    dynamodb = aws_client("dynamodb", deployment.endpoint_url)
    return str(dynamodb.describe_table(TableName=deployment.outputs[output])["Table"]["TableArn"])


@contextlib.contextmanager
def grant_removed(deployment: Deployment, role: str, actions: set[str], resource: str) -> Iterator[None]:
    """The role's deployed policy without `actions` on `resource` (as a template without that grant
    would deploy it); the policy as deployed again afterwards."""
    iam = aws_client("iam", deployment.endpoint_url)
    (name,) = iam.list_role_policies(RoleName=role)["PolicyNames"]
    deployed: dict[str, Any] = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
    reduced = copy.deepcopy(deployed)
    for statement in reduced["Statement"]:
        if statement["Resource"] == resource:
            listed = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            statement["Action"] = [action for action in listed if action not in actions]
    reduced["Statement"] = [statement for statement in reduced["Statement"] if statement["Action"]]
    assert reduced != deployed, f"{role} has no {actions} on {resource}"
    iam.put_role_policy(RoleName=role, PolicyName=name, PolicyDocument=json.dumps(reduced))
    try:
        yield
    finally:
        iam.put_role_policy(RoleName=role, PolicyName=name, PolicyDocument=json.dumps(deployed))


def function_figures(paths: LocalPaths, stage: str) -> dict[str, Any]:
    """The runner's figures of the stage's function (`reduce`, `state`)."""
    functions = json.loads(paths.runner_stats.read_text())["functions"]
    (figures,) = (figures for name, figures in functions.items() if stage in name.lower())
    return dict(figures)


def refused_and_retried(paths: LocalPaths, stage: str, errors_before: int) -> bool:
    figures = function_figures(paths, stage)
    return figures["errors"] >= errors_before + 3 and "AccessDenied" in figures["last_error"]


def add(expected: dict[str, Decimal | int], totals: dict[str, Decimal | int]) -> None:
    for key, total in totals.items():
        expected[key] = expected.get(key, 0) + total


def test_a_role_without_a_grant_its_function_needs_fails_retries_and_lands_exactly_once_given_it_back(
    local_stack: StartStack,
) -> None:
    deployment, paths = local_stack()
    expected: dict[str, Decimal | int] = {}

    # The reduce function may no longer write the AggregateTable: its transactions are refused.
    reduce_role = role_of(deployment, "reduce_function.handler")
    aggregate_table = table_arn(deployment, "AggregateTableName")
    with grant_removed(deployment, reduce_role, {"dynamodb:PutItem", "dynamodb:UpdateItem"}, aggregate_table):
        records, totals = generate_messages(seed=61)
        put_records(deployment, records)
        wait_for(lambda: refused_and_retried(paths, "reduce", 0), 120, "reduce refused (AccessDenied) and retried")
        assert "AccessDeniedException" in function_figures(paths, "reduce")["last_error"]
        assert function_figures(paths, "reduce")["retries"] >= 2
        time.sleep(2)
        assert actual_aggregates(deployment) == {}, "no refused transaction changed a total"
    add(expected, totals)
    await_totals(deployment, expected, timeout=120)

    # The state function may no longer INSERT into the StateTable: new trades are refused one by one.
    state_role = role_of(deployment, "state_function.handler")
    state_table = table_arn(deployment, "StateTableName")
    errors_before = function_figures(paths, "state")["errors"]
    with grant_removed(deployment, state_role, {"dynamodb:PartiQLInsert"}, state_table):
        records, totals = generate_messages(seed=62)
        put_records(deployment, records)
        wait_for(lambda: refused_and_retried(paths, "state", errors_before), 120, "state refused and retried")
        time.sleep(2)
        assert actual_aggregates(deployment) == expected, "no trade of the refused batches reached a total"
    add(expected, totals)
    await_totals(deployment, expected, timeout=120)

    report = iam_report(deployment.endpoint_url)
    assert report["mode"] == "enforce" and report["unevaluable"] == 0
    refused_roles = {message.split("assumed-role/")[1].split("/")[0] for message in report["denials"]}
    assert refused_roles == {reduce_role, state_role}, report["denials"]
    assert any(aggregate_table in message for message in report["denials"])
    assert any(f"dynamodb:PartiQLInsert on resource: {state_table} " in message for message in report["denials"])
    functions = json.loads(paths.runner_stats.read_text())["functions"]
    assert not any(figures["batches_skipped"] for figures in functions.values())
