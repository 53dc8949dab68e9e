"""Issue 23 on a `make up` stack: at least four reducers at once, conflicting, and the totals exact.

The emulator gives every DynamoDB stream 8 shards (`EMULATOR_STREAM_SHARDS`), so the StateTable's
changes come from several shards, the map stage writes delta items under several `StreamShard`s,
and the DeltaTable's stream delivers them to several reducers side by side; with
`reduceParallelizationFactor` 2 the runner runs two lanes per DeltaTable shard, so one shard's
delta items are reduced by two reducers at once too. With one slice (`AGGREGATE_SLICES` 1, set
locally) every reducer writes the same hierarchy roots and `#stats`: the emulator cancels the
losers of each race for a conflict, as DynamoDB does, and reduce resends them. Expected totals are
computed here from the messages the test sends.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from local.emulator.control import transaction_conflicts
from local.paths import LocalPaths
from local.scenarios.chaos import peak_invocations
from tests.local.deploy.conftest import StartStack
from tests.local.deploy.test_setting_changes import synthesized
from tests.local.deploy.test_up_down import fresh_runner_stats, generate_messages, send_round_and_await_exact_totals

pytestmark = [pytest.mark.emulator, pytest.mark.slow]
ROUND_SEEDS = (21, 22, 23, 24, 25, 26)
"""Message rounds until a conflict, two lanes of a shard at once and four shards' reducers were seen
(timing and where the map's delta items land decide: a round of 300 trades makes few delta items, and
once in CI they all fell on three shards)."""


def reduce_shards(paths: LocalPaths) -> list[dict[str, Any]]:
    """The runner's figures of the DeltaTable stream shards that reduce has read from (its next statistics)."""
    shards = fresh_runner_stats(paths)["shards"]
    return [shard for shard in shards if "reduce" in shard["function"].lower() and shard["records_read"]]


def test_four_or_more_reducers_race_for_the_same_items_and_every_node_is_exact(
    local_stack: StartStack, tmp_path: Path
) -> None:
    two_lanes = synthesized(tmp_path, "two-lanes", reduceParallelizationFactor=2)
    deployment, paths = local_stack(cdk_out=two_lanes, EMULATOR_STREAM_SHARDS="8", AGGREGATE_SLICES="1")
    expected: dict[str, Decimal | int] = {}
    for seed in ROUND_SEEDS:
        send_round_and_await_exact_totals(deployment, generate_messages(seed=seed, trades=300), expected, timeout=180)
        shards = reduce_shards(paths)
        lanes_together = max(shard["peak_batches_in_flight"] for shard in shards)
        if transaction_conflicts(deployment.endpoint_url) > 0 and lanes_together >= 2 and len(shards) >= 4:
            break
    assert transaction_conflicts(deployment.endpoint_url) > 0, "reducers raced for an item and one was cancelled"

    shards = reduce_shards(paths)
    assert len(shards) >= 4, f"reducers of {len(shards)} DeltaTable shards"
    assert {shard["lanes"] for shard in shards} == {2}, "reduceParallelizationFactor 2: two lanes per shard"
    assert max(shard["peak_batches_in_flight"] for shard in shards) >= 2, "two reducers of one shard at once"
    functions = json.loads(paths.runner_stats.read_text())["functions"]
    assert peak_invocations(functions, "reduce") >= 2, "reducers ran side by side"
    assert not any(f["batches_skipped"] for f in functions.values())
