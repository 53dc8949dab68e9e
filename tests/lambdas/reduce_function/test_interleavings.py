"""Model-checked interleavings of the reduce stage (issue 23), against the emulator.

A Hypothesis state machine drives the real reduce code over a fixed set of DeltaTable items
from several StateTable shards: a reducer takes a batch in any boundaries, a batch is retried in
other boundaries, a response is lost after the commit (the invocation fails after its writes),
two reducers race (concurrently, so the emulator cancels one transaction for a conflict and it
is resent), a replay arrives after the 10-minute token window, and the slice count changes
between any two of those (a deploy of another `aggregateSlices`, which moves every transaction
of `crt+marker` to the slice its token names among the new count: a retry then meets its own
token with other keys, or its markers). After every step the committed totals equal the
independent sum of the items applied so far; at the end, with everything applied, the ground
truth.

`make test` runs 8 examples; `make chaos` runs it long (`INTERLEAVING_EXAMPLES`, 300).
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aggregation.aggregate_items import slice_of
from aggregation.delta_items import DeltaItem, decode_delta_batch, decode_stream_run, encode_delta_item
from aggregation.deltas import NodeDelta
from aggregation.stream_positions import StreamRun
from aggregation.transactions import DeltaBatch, split_into_units
from function_support.faults import InjectedFailure
from local.emulator.control import advance_clock
from local.runner.inprocess import Pipeline, create_pipeline_tables, handler_environment
from reduce_function import handler as reduce_handler

SLICES = 3
SLICE_COUNTS = (1, 2, 3, 7, 128)
SHARDS = ("shardId-a", "shardId-b", "shardId-c", "shardId-d")
NODES = ("Delta", "Delta:FX", "Delta:FX:AMER", "Delta:Rates", "Vega", "Vega:FX")
ITEMS_PER_SHARD = 3
ITEM_COUNT = len(SHARDS) * ITEMS_PER_SHARD
TOKEN_WINDOW_SECONDS = 600


def delta_items(stream_label: str) -> list[DeltaItem]:
    """Each shard a run of consecutive items, each item's deltas distinct numbers.

    The stream label is new for every example: ClientRequestTokens are the emulator's, per
    account, and the same items in fresh tables would reuse the last example's tokens.
    """
    items = []
    for shard_number, shard_id in enumerate(SHARDS):
        shard = f"{stream_label}/{shard_id}"
        for position in range(ITEMS_PER_SHARD):
            seed = shard_number * 10 + position
            deltas = {
                node: NodeDelta(Decimal(f"{seed + 1}.{index}{seed % 7}"), (seed + index) % 3 - 1)
                for index, node in enumerate(NODES)
                if (seed + index) % 4
            }
            run = StreamRun(shard, 100 * position + 1, 100 * position + 50)
            batch = DeltaBatch(run.batch_hash, deltas, 7 + seed, (Decimal("1.5"),), created_at=1_800_000_000)
            items.append(DeltaItem(run, batch, expires_at=1_800_600_000))
    return items


def expected_totals(items: Sequence[DeltaItem]) -> dict[str, tuple[Decimal, int]]:
    """Plain Decimal sums of the items' deltas: the independent truth."""
    totals: dict[str, tuple[Decimal, int]] = {}
    for item in items:
        for node, delta in item.batch.deltas.items():
            value, count = totals.get(node, (Decimal(0), 0))
            totals[node] = (value + delta.value, count + delta.trade_count)
    return {node: total for node, total in totals.items() if total != (Decimal(0), 0)}


class ReduceInterleavings(RuleBasedStateMachine):
    endpoint_url: str
    records: list[dict[str, Any]]

    def __init__(self) -> None:
        """Fresh tables for every example; the handlers are pointed at them."""
        super().__init__()
        self.pipeline = Pipeline(create_pipeline_tables(prefix="interleavings-"))
        os.environ.update(handler_environment(self.pipeline.names, "test"))
        os.environ["AGGREGATE_SLICES"] = str(SLICES)
        self.items = delta_items(uuid.uuid4().hex)
        for item in self.items:
            self.pipeline.dynamodb.put_item(TableName=self.pipeline.names["delta"], Item=encode_delta_item(item))
        self.records = self.pipeline.new_stream_records("delta")
        assert len(self.records) == len(self.items)
        self.applied: set[int] = set()

    def invoke(self, indexes: Sequence[int]) -> None:
        """One reduce invocation over these records; an invocation that failed after its writes
        counts as applied (a later retry must change nothing)."""
        with contextlib.suppress(InjectedFailure):
            self.pipeline.run_reduce([self.records[i] for i in indexes])
        self.applied.update(indexes)

    @rule(data=st.data())
    def a_reducer_takes_a_batch(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(0, ITEM_COUNT - 1))
        length = data.draw(st.integers(1, ITEM_COUNT - start))
        self.invoke(range(start, start + length))

    @precondition(lambda self: bool(self.applied))
    @rule(data=st.data())
    def a_batch_is_retried_in_other_boundaries(self, data: st.DataObject) -> None:
        anchor = data.draw(st.sampled_from(sorted(self.applied)))
        start = data.draw(st.integers(0, anchor))
        end = data.draw(st.integers(anchor, ITEM_COUNT - 1))
        self.invoke(range(start, end + 1))

    @rule(data=st.data())
    def a_response_is_lost_after_the_commit(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(0, ITEM_COUNT - 1))
        with pytest.MonkeyPatch.context() as environment:
            environment.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT", "100")
            self.invoke(range(start, min(ITEM_COUNT, start + 3)))

    @rule(data=st.data())
    def two_reducers_race_on_one_slice(self, data: st.DataObject) -> None:
        """Concurrent transactions on shared nodes: the emulator cancels one for a conflict."""
        first = data.draw(st.lists(st.integers(0, ITEM_COUNT - 1), min_size=1, max_size=4, unique=True))
        second = data.draw(st.lists(st.integers(0, ITEM_COUNT - 1), min_size=1, max_size=4, unique=True))
        failures: list[BaseException] = []

        def reducer(indexes: list[int]) -> None:
            units = [unit for i in sorted(indexes) for unit in units_of(self.records[i])]
            try:
                reduce_handler.apply_delta_units(units, self.pipeline.names["aggregate"], MODE, current_slices())
            except BaseException as failure:  # re-raised in the test's thread
                failures.append(failure)

        threads = [threading.Thread(target=reducer, args=(batch,)) for batch in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        self.applied.update(first + second)

    @rule(slices=st.sampled_from(SLICE_COUNTS))
    def the_slice_count_changes(self, slices: int) -> None:
        """`aggregateSlices` redeployed: safe in `crt+marker` (`aggregation.setting_changes`)."""
        os.environ["AGGREGATE_SLICES"] = str(slices)

    @precondition(lambda self: bool(self.applied))
    @rule(data=st.data())
    def a_replay_arrives_after_the_token_window(self, data: st.DataObject) -> None:
        advance_clock(self.endpoint_url, TOKEN_WINDOW_SECONDS + 1)
        index = data.draw(st.sampled_from(sorted(self.applied)))
        self.invoke([index])

    def totals(self) -> dict[str, tuple[Decimal, int]]:
        return {node: total for node, total in self.pipeline.aggregates().items() if total != (Decimal(0), 0)}

    @invariant()
    def the_totals_are_those_of_the_items_applied(self) -> None:
        assert self.totals() == expected_totals([self.items[i] for i in self.applied]), "not the applied items' sum"

    def teardown(self) -> None:
        self.invoke(range(ITEM_COUNT))
        assert self.totals() == expected_totals(self.items), "not the ground truth"
        assert self.pipeline.stats()["MessagesApplied"] == sum(item.batch.record_count for item in self.items)


MODE = reduce_handler.IdempotencyMode.TOKEN_AND_MARKERS


def current_slices() -> int:
    return int(os.environ["AGGREGATE_SLICES"])


def units_of(record: dict[str, Any]) -> list[Any]:
    image = record["dynamodb"]["NewImage"]
    return split_into_units(
        decode_delta_batch(image), aggregate_slice=slice_of(decode_stream_run(image).stream_shard, current_slices())
    )


def run_machine(endpoint_url: str, examples: int, **more: Any) -> None:
    ReduceInterleavings.endpoint_url = endpoint_url
    machine = ReduceInterleavings.TestCase
    machine.settings = settings(
        max_examples=examples,
        stateful_step_count=6,
        database=None,
        suppress_health_check=list(HealthCheck),
        **more,
    )
    machine().runTest()


def test_every_interleaving_of_reducers_retries_races_and_late_replays_is_exact(
    pipeline: Pipeline, aws_environment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pipeline` sets the handlers' environment up (restored afterwards); each example has its own tables."""
    monkeypatch.setenv("AGGREGATE_SLICES", str(SLICES))
    run_machine(aws_environment, examples=int(os.environ.get("INTERLEAVING_EXAMPLES", "8")))


def test_the_model_catches_the_token_only_mode_applying_a_late_replay_twice(
    pipeline: Pipeline, aws_environment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check can fail: in mode `crt` (tokens, no markers) a replay in other boundaries, or after the
    token window, counts again."""
    monkeypatch.setenv("AGGREGATE_SLICES", str(SLICES))
    monkeypatch.setenv("REDUCE_IDEMPOTENCY", "crt")
    with pytest.raises(AssertionError, match=r"not the applied items' sum|not the ground truth"):
        run_machine(aws_environment, examples=40, phases=[Phase.generate])
