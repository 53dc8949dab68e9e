"""What the state function's client sends, seen through botocore's own events (no mock)."""

from collections.abc import Iterator
from typing import Any

import pytest

from function_support import aws
from local.runner.inprocess import Pipeline


class StatementLog:
    """Every StateTable statement the state function's client sends, in order: its verb and TradeID.

        An INSERT and an UPDATE each count, so an INSERT that meets the item and is sent again as an
        UPDATE counts twice. The call's TradeIDs and verbs are left in its context (`trade_ids`, `verbs`)
    for later hooks.
    """

    def __init__(self, state_table: str) -> None:
        self.verbs: list[str] = []
        self.trade_ids: list[str] = []
        self.quoted_table = f'"{state_table}"'

    def __call__(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        statements = [s for s in params["Statements"] if self.quoted_table in s["Statement"]]  # not quarantine inserts
        sent = [trade_id_of(statement) for statement in statements]
        verbs = [statement["Statement"].split(" ", 1)[0] for statement in statements]
        context["trade_ids"], context["verbs"] = sent, verbs
        self.trade_ids.extend(sent)
        self.verbs.extend(verbs)


def trade_id_of(statement: dict[str, Any]) -> str:
    """The TradeID a state statement writes: an INSERT's first parameter, an UPDATE's last but one."""
    parameters = statement["Parameters"]
    key = parameters[0] if statement["Statement"].startswith("INSERT") else parameters[-2]
    return str(key["S"])


@pytest.fixture
def statements(pipeline: Pipeline) -> Iterator[StatementLog]:
    log = StatementLog(pipeline.names["state"])
    events = aws.state_update_client().meta.events
    events.register("provide-client-params.dynamodb.BatchExecuteStatement", log)
    yield log
    events.unregister("provide-client-params.dynamodb.BatchExecuteStatement", log)
