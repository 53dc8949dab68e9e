"""Changing settings on a deployed local stack that holds state (issue 21, findings 6 and 7).

The stack is synthesized with one set of settings, deployed with `make up`'s lifecycle, fed,
re-synthesized with other settings and redeployed over the same tables. The expected totals
come from the producer's ledger (`producer.ledger`, which shares no code with the pipeline):
one ledger per level order, each holding the trades whose latest version was written under it.
"""

from __future__ import annotations

import json
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from aggregation.names import STATE_SETTINGS_GUARD_TYPE
from local.deploy import lifecycle
from local.deploy.deployer import DeploymentError, aws_client
from local.paths import LocalPaths
from producer.ledger import Ledger
from producer.model import AggregateNode, TradeState
from producer.verifier import (
    compare_aggregates,
    compare_trades,
    read_aggregate_table,
    read_trade_states,
    wait_for_drain,
)
from stacks import build_app
from tests.stacks.stack_helpers import load_cdk_json_context

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

BEFORE = ("RiskType", "TradeDesk")
AFTER = ("Region", "RiskType", "TradeDesk")  # a level added, and the order changed
VALUES = {"RiskType": ("Delta", "Vega"), "TradeDesk": ("FXSpot", "Rates"), "Region": ("AMER", "EMEA")}


def synthesized(tmp_path: Path, name: str, **settings: Any) -> Path:
    app, _stack = build_app({**load_cdk_json_context(), **settings}, outdir=str(tmp_path / name))
    app.synth()
    return tmp_path / name


def message(trade_id: str, version: int, value: str, hierarchy: dict[str, str]) -> bytes:
    """The Value as a JSON number written exactly as given (never through a float)."""
    fields = {"TradeID": trade_id, "Version": version, "Timestamp": time.time(), "Hierarchy": hierarchy}
    return (json.dumps(fields)[:-1] + f', "Value": {value}}}').encode()


def send(endpoint: str, stream: str, records: list[bytes]) -> None:
    response = aws_client("kinesis", endpoint).put_records(
        StreamName=stream, Records=[{"Data": data, "PartitionKey": json.loads(data)["TradeID"]} for data in records]
    )
    assert response["FailedRecordCount"] == 0


def trade(ledger: Ledger, trade_id: str, version: int, value: str, hierarchy: dict[str, str]) -> bytes:
    ledger.observe(
        trade_id, TradeState(version, Decimal(value), tuple(hierarchy[level] for level in ledger.hierarchy_levels))
    )
    return message(trade_id, version, value, hierarchy)


def test_levels_added_and_reordered_on_a_running_stack_stay_exact_and_a_narrower_domain_is_refused(
    tmp_path: Path,
) -> None:
    paths = LocalPaths(tmp_path / ".local")
    quiet = {name: value for name, value in os.environ.items() if not name.startswith("FAILURE_")}
    first = synthesized(tmp_path, "first", hierarchyLevels=list(BEFORE))
    try:
        deployment = lifecycle.up(paths, environment=quiet, report=lambda _: None, cdk_out=first)
        endpoint, outputs = deployment.endpoint_url, deployment.outputs
        old_levels, new_levels = Ledger(BEFORE), Ledger(AFTER)

        def hierarchy(number: int, shift: int = 0) -> dict[str, str]:
            return {level: VALUES[level][(number + shift + index) % 2] for index, level in enumerate(VALUES)}

        send(
            endpoint, outputs["StreamName"], [trade(old_levels, f"t{n}", 1, f"{n}.25", hierarchy(n)) for n in range(20)]
        )
        # A message takes the levels configured when the state function reads it, not when it
        # was sent: the first round is applied under the old levels before they change.
        client = aws_client("dynamodb", endpoint)
        first_round, _settled, _waited = wait_for_drain(
            lambda: read_aggregate_table(client, outputs["AggregateTableName"]),
            old_levels.aggregates(),
            timeout=120,
            settle_seconds=30,
            poll_interval=1,
        )
        assert compare_aggregates(old_levels.aggregates(), first_round.nodes).exact

        second = synthesized(tmp_path, "second", hierarchyLevels=list(AFTER))
        said: list[str] = []
        lifecycle.up(paths, environment=quiet, report=said.append, cdk_out=second)
        assert said[0].startswith("the template changed")

        # New versions of half the old trades (some moved), written under the new levels, and new trades.
        modified = [f"t{n}" for n in range(10)]
        for trade_id in modified:
            del old_levels.trades[trade_id]
        round_two = [trade(new_levels, f"t{n}", 2, f"-{n}.5", hierarchy(n, shift=n % 3)) for n in range(10)]
        round_two += [trade(new_levels, f"n{n}", 1, f"{n}", hierarchy(n)) for n in range(10)]
        send(endpoint, outputs["StreamName"], round_two)

        expected: dict[str, AggregateNode] = {}
        for ledger in (old_levels, new_levels):
            for key, node in ledger.aggregates().items():
                before = expected.get(key, AggregateNode(Decimal(0), 0))
                expected[key] = AggregateNode(before.value + node.value, before.trade_count + node.trade_count)
        snapshot, _settled, _waited = wait_for_drain(
            lambda: read_aggregate_table(client, outputs["AggregateTableName"]),
            expected,
            timeout=120,
            settle_seconds=30,
            poll_interval=1,
        )
        comparison = compare_aggregates(expected, snapshot.nodes)
        assert comparison.exact, comparison.mismatches
        for ledger in (old_levels, new_levels):
            stored = read_trade_states(client, outputs["StateTableName"], ledger.trades, ledger.hierarchy_levels)
            assert compare_trades(ledger.trades, stored) == ()

        # 18+10 -> 28+1 over these totals: the settings guard's handler refuses it before
        # CloudFormation changes anything.
        third = synthesized(
            tmp_path, "third", hierarchyLevels=list(AFTER), valueIntegerDigits=28, valueFractionDigits=1
        )
        with pytest.raises(DeploymentError, match=r"^refused: valueFractionDigits 10 -> 1 narrows the value domain"):
            lifecycle.up(paths, environment=quiet, report=lambda _: None, cdk_out=third)
        deployed = aws_client("cloudformation", endpoint).get_template(StackName=deployment.stack_name)["TemplateBody"]
        resources = (deployed if isinstance(deployed, dict) else json.loads(deployed))["Resources"]
        (guard,) = [resource for resource in resources.values() if resource["Type"] == STATE_SETTINGS_GUARD_TYPE]
        assert guard["Properties"]["ValueFractionDigits"] == "10"
    finally:
        lifecycle.down(paths, report=lambda _: None)
