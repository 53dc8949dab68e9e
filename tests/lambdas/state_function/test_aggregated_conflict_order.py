"""A conflicting duplicate sent in KPL aggregates stays behind its original where Lambda keeps order.

The ledger's ground truth for a conflicting duplicate is "the original stands": it was sent
first, so the state function stores it first. Lambda keeps a Kinesis shard's records in order
only per partition key once `ParallelizationFactor` is above 1 (the deployed
`stateParallelizationFactor` plans 2): records of other keys may be processed in any order. An
aggregate travels under one partition key for all the trades it carries, so the conflict must
travel under the key of the record that carried its original, or the conflict may be stored
first (`make chaos --aggregate` found 6 of 22 conflicts applied over their originals).

Here the sender writes to an in-memory stream (every record accepted, each shard's records in
the order written), the stream's records are split into lanes as Lambda splits them
(`local.runner.lanes.lane_of`), each lane runs to its end before the next starts (an order
Lambda allows), and the real state function must then hold exactly the ledger's trades.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest

from local.runner.inprocess import Pipeline
from local.runner.lanes import lane_of
from producer.kpl import ShardMap
from producer.ledger import Ledger
from producer.sender import SendOptions, send_share
from toolkit.pipeline import PipelineTarget

SHARD_STARTS = (0, 2**127)
STATE_LANES = 2
"""The deployed state mapping's ParallelizationFactor (`stateParallelizationFactor` auto plans 2)."""


class InMemoryStream:
    """Kinesis as the sender uses it: its shards listed, every record of `put_records` accepted and
    appended to the shard its partition key hashes to, in the order written."""

    def __init__(self) -> None:
        self.shards = ShardMap(list(SHARD_STARTS))
        self.records: dict[int, list[tuple[str, bytes]]] = {shard: [] for shard in range(len(SHARD_STARTS))}
        self._lock = threading.Lock()

    def list_shards(self, **_: Any) -> dict[str, Any]:
        ends = [start - 1 for start in SHARD_STARTS[1:]] + [2**128 - 1]
        return {
            "Shards": [
                {
                    "ShardId": f"shardId-{shard:012d}",
                    "HashKeyRange": {"StartingHashKey": str(start), "EndingHashKey": str(end)},
                    "SequenceNumberRange": {"StartingSequenceNumber": "0"},
                }
                for shard, (start, end) in enumerate(zip(SHARD_STARTS, ends, strict=True))
            ]
        }

    def put_records(self, StreamName: str, Records: Sequence[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        answers = []
        with self._lock:
            for entry in Records:
                shard = self.shards.shard_of(entry["PartitionKey"])
                self.records[shard].append((entry["PartitionKey"], bytes(entry["Data"])))
                answers.append({"ShardId": f"shardId-{shard:012d}", "SequenceNumber": str(len(self.records[shard]))})
        return {"FailedRecordCount": 0, "Records": answers}


def aggregated_send(count: int, seed: int) -> tuple[InMemoryStream, Ledger]:
    """A deterministic aggregated send: one delivery worker, chunks cut only by the conflicts."""
    stream = InMemoryStream()
    ledger = Ledger()
    target = PipelineTarget(
        stream_name="trades",
        state_table="-",
        aggregate_table="-",
        delta_table="-",
        quarantine="-",
        region="us-east-1",
        endpoint_url=None,
        source="test",
    )
    options = SendOptions(
        count=count,
        seed=seed,
        aggregate=True,
        conflicting_pct=5,
        out_of_order_pct=10,
        duplicates_pct=10,
        modifications_pct=30,
        concurrency=1,
        linger_seconds=3600,
        ledger_path=None,
        timestamp_epoch_ms=1_700_000_000_000,
    )
    outcome = send_share(target, options, seed, ledger, None, kinesis_client=stream)  # type: ignore[arg-type]
    assert outcome.failure is None
    assert outcome.counts.conflicting_duplicates > 10
    return stream, ledger


def _event_record(partition_key: str) -> dict[str, Any]:
    return {"kinesis": {"partitionKey": partition_key}}


@pytest.mark.parametrize("lane_order", ["first lane first", "last lane first"])
def test_the_original_stands_whatever_order_lambda_runs_the_lanes_in(pipeline: Pipeline, lane_order: str) -> None:
    stream, ledger = aggregated_send(count=1200, seed=11)
    lanes = range(STATE_LANES) if lane_order == "first lane first" else reversed(range(STATE_LANES))
    for lane in lanes:
        for records in stream.records.values():
            mine = [(key, data) for key, data in records if lane_of(_event_record(key), STATE_LANES) == lane]
            for start in range(0, len(mine), 100):  # the mapping's BatchSize
                batch = mine[start : start + 100]
                pipeline.run_state([data for _, data in batch], [key for key, _ in batch])
    stored = {
        item["TradeID"]: (int(item["Version"]), Decimal(item["Value"]), item["Hierarchy"])
        for item in pipeline.scan("state")
    }
    expected = {
        trade_id: (state.version, state.value, dict(zip(ledger.hierarchy_levels, state.hierarchy, strict=True)))
        for trade_id, state in ledger.trades.items()
    }
    wrong = sorted(trade_id for trade_id in expected if stored.get(trade_id) != expected[trade_id])
    assert wrong == [], f"{len(wrong)} trades differ from the ledger"
    conflicts = [item for item in pipeline.scan("quarantine") if "conflicting" in item["Reason"].lower()]
    assert len(conflicts) == ledger.counts.conflicting_duplicates
