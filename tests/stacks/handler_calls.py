"""The AWS calls a function's code makes, found by reading it (not declared by hand).

From a handler module, every module of `lambdas/` it imports (transitively) is parsed, and every
call of a method whose name is an operation of the DynamoDB or S3 client (`put_item`,
`head_object`, ...) is taken as that operation. botocore's own models name the operations, so
a new call in the code shows up here without anyone listing it. A transaction's contained
actions (what IAM authorises a `TransactWriteItems` by) are the `Put`/`Update`/`Delete`/
`ConditionCheck` keys of the dict literals in the modules that send one; a PartiQL call's (what IAM
authorises `BatchExecuteStatement` by) are the verbs of the statement texts the handler's modules write.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Final

import boto3

LAMBDAS: Final[Path] = Path(__file__).resolve().parents[2] / "lambdas"
SERVICES: Final[tuple[str, ...]] = ("dynamodb", "s3")

TRANSACTION_ITEM_ACTIONS: Final[dict[str, str]] = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}
"""IAM authorises `TransactWriteItems` per contained request (DynamoDB Developer Guide)."""

PARTIQL_ACTIONS: Final[dict[str, str]] = {
    "INSERT": "dynamodb:PartiQLInsert",
    "UPDATE": "dynamodb:PartiQLUpdate",
    "DELETE": "dynamodb:PartiQLDelete",
    "SELECT": "dynamodb:PartiQLSelect",
}
"""IAM authorises PartiQL per statement verb, not per API call (Developer Guide, "IAM security
policies with PartiQL for DynamoDB"): `BatchExecuteStatement` has no action of its own."""
PARTIQL_CALLS: Final[frozenset[str]] = frozenset({"dynamodb:BatchExecuteStatement", "dynamodb:ExecuteStatement"})
STATEMENT_START = re.compile(r"(INSERT INTO|UPDATE|DELETE FROM|SELECT) ")

S3_ACTION_OF_OPERATION: Final[dict[str, str]] = {"HeadObject": "s3:GetObject"}
"""S3 operations authorised by another action's name; every other is `s3:<Operation>`."""


@cache
def operations() -> dict[str, str]:
    """Client method name -> `service:Operation`, for the services the functions call."""
    found: dict[str, str] = {}
    session = boto3.session.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    for service in SERVICES:
        client: Any = session.client(service)  # type: ignore[call-overload]  # any service, by name
        for method, operation in client.meta.method_to_api_mapping.items():
            assert method not in found, f"{method} is an operation of two services; tell them apart"
            found[method] = f"{service}:{operation}"
    return found


def _module_path(name: str) -> Path | None:
    parts = name.split(".")
    for candidate in (LAMBDAS.joinpath(*parts).with_suffix(".py"), LAMBDAS.joinpath(*parts, "__init__.py")):
        if candidate.exists():
            return candidate
    return None


def modules_of(handler_module: str) -> list[Path]:
    """The handler's module and every module of `lambdas/` it imports, transitively."""
    pending, seen = [handler_module], set()
    paths: list[Path] = []
    while pending:
        name = pending.pop()
        path = _module_path(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        paths.append(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                pending.append(node.module)
                pending.extend(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                pending.extend(alias.name for alias in node.names)
    return paths


def _calls(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in operations():
            yield operations()[node.func.attr]


def _transaction_item_actions(tree: ast.AST) -> set[str]:
    return {
        TRANSACTION_ITEM_ACTIONS[key.value]
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key in node.keys
        if isinstance(key, ast.Constant) and key.value in TRANSACTION_ITEM_ACTIONS
    }


def _partiql_statement_actions(tree: ast.AST) -> set[str]:
    """The PartiQL actions of the statement texts written in `tree`: string constants, or f-strings
    whose text begins with a statement's verb (`INSERT INTO "T" ...`)."""
    actions = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = node.values[0].value
        elif isinstance(node, ast.Constant):
            text = node.value
        else:
            continue
        if isinstance(text, str) and (verb := STATEMENT_START.match(text)):
            actions.add(PARTIQL_ACTIONS[verb.group(1).split()[0]])
    return actions


def calls_made(handler_module: str) -> set[str]:
    """The operations the handler's code calls, as `service:Operation`."""
    return {call for path in modules_of(handler_module) for call in _calls(ast.parse(path.read_text()))}


def iam_actions_needed(handler_module: str) -> set[str]:
    """The IAM actions authorising the calls the handler's code makes."""
    actions: set[str] = set()
    trees = [ast.parse(path.read_text()) for path in modules_of(handler_module)]
    for path, tree in zip(modules_of(handler_module), trees, strict=True):
        for call in _calls(tree):
            service, operation = call.split(":")
            if call in PARTIQL_CALLS:  # the statements may be written in another module the handler imports
                statements = set().union(*(_partiql_statement_actions(t) for t in trees))
                assert statements, f"{path}: PartiQL calls whose statements could not be found"
                actions |= statements
            elif call == "dynamodb:TransactWriteItems":
                contained = _transaction_item_actions(tree)
                assert contained, f"{path}: a transaction whose items could not be found"
                actions |= contained
            elif service == "s3":
                actions.add(S3_ACTION_OF_OPERATION.get(operation, call))
            else:
                actions.add(call)
    return actions
