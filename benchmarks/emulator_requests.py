"""CPU per request of the emulator, in process, for the requests of the local pipeline besides the state writes.

`python -m benchmarks.emulator_requests` (issue 22; not part of `make bench`). moto's server app
with `moto_compat` and `speedups` applied, called through werkzeug's test client (no sockets, so
the figure is the application's work: moto's dispatch, parsing, the backend, the reply), one
thread, `time.process_time` per request, the median of three passes. The requests are the
shapes the pipeline and benchmark 4 send: the raw yardstick's two-clause conditional update, a
reduce transaction (60 node ADDs, 2 markers, `#stats`), a map function's delta item (105 nodes,
100 producer timestamps), the marker poller's Scan and the drain check's Scan of an
AggregateTable of 105 nodes and its markers. Run it in two worktrees alternately to compare.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client

from local.emulator import moto_compat, speedups

AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=x, Signature=y"
)
NODES = tuple(f"node#0#region{r}|desk{d}|book{b}" for r in range(3) for d in range(5) for b in range(7))
"""105 nodes, as many as the standard workload's hierarchy (section 1)."""
NODES_PER_TRANSACTION = 60
MARKER_PREFIX = "#applied#"
PASSES = 3


@dataclass(frozen=True)
class RequestCost:
    request: str
    cpu_ms: float


class Emulator:
    """moto's server app in this process, with the emulator's fixes and speedups applied."""

    def __init__(self) -> None:
        moto_compat.apply()
        speedups.apply()
        self._client = Client(DomainDispatcherApplication(create_backend_app))
        self._counter = 0
        self._suffix = uuid.uuid4().hex[:8]  # moto's backends live as long as the process

    def table(self, name: str) -> str:
        """This emulator's table `name` (another instance in the process has its own)."""
        return f"{name}-{self._suffix}"

    def call(self, action: str, body: dict[str, Any]) -> Any:
        response = self._client.post(
            "/",
            data=json.dumps(body),
            headers={
                "X-Amz-Target": f"DynamoDB_20120810.{action}",
                "Content-Type": "application/x-amz-json-1.0",
                "Host": "127.0.0.1:5000",
                "Authorization": AUTHORIZATION,
            },
        )
        if response.status_code != 200:
            raise RuntimeError(f"{action} answered {response.status_code}: {response.get_data(as_text=True)}")
        return json.loads(response.get_data())

    def next_number(self) -> int:
        self._counter += 1
        return self._counter

    def create_table(self, name: str, keys: list[tuple[str, str]], stream: str | None = None) -> None:
        body: dict[str, Any] = {
            "TableName": self.table(name),
            "KeySchema": [{"AttributeName": key, "KeyType": kind} for key, kind in keys],
            "AttributeDefinitions": [{"AttributeName": key, "AttributeType": "S"} for key, _ in keys],
            "BillingMode": "PAY_PER_REQUEST",
        }
        if stream:
            body["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream}
        self.call("CreateTable", body)


def raw_update(emulator: Emulator) -> None:
    """Benchmark 4's yardstick (`measure_raw_conditional_updates`): a new item, no stream."""
    emulator.call(
        "UpdateItem",
        {
            "TableName": emulator.table("raw"),
            "Key": {"TradeID": {"S": f"w-{emulator.next_number()}"}},
            "UpdateExpression": "SET #value = :value, #version = :version",
            "ConditionExpression": "attribute_not_exists(#trade_id) OR #version < :version",
            "ExpressionAttributeNames": {"#trade_id": "TradeID", "#version": "Version", "#value": "Value"},
            "ExpressionAttributeValues": {":value": {"N": "1.5"}, ":version": {"N": "1"}},
        },
    )


def reduce_transaction(emulator: Emulator) -> None:
    """One reduce transaction's shape (`reduce_function.handler.transaction_items`), new markers each time."""
    number = emulator.next_number()
    items: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": emulator.table("aggregates"),
                "Key": {"AggregateKey": {"S": key}},
                "UpdateExpression": "ADD #value :value, #count :count",
                "ExpressionAttributeNames": {"#value": "Value", "#count": "TradeCount"},
                "ExpressionAttributeValues": {":value": {"N": f"{number}.125"}, ":count": {"N": "3"}},
            }
        }
        for key in NODES[:NODES_PER_TRANSACTION]
    ]
    items += [
        {
            "Put": {
                "TableName": emulator.table("aggregates"),
                "Item": {"AggregateKey": {"S": f"{MARKER_PREFIX}{number:032x}/{group}of2/0"}},
                "ConditionExpression": "attribute_not_exists(AggregateKey)",
            }
        }
        for group in range(2)
    ]
    items.append(
        {
            "Update": {
                "TableName": emulator.table("aggregates"),
                "Key": {"AggregateKey": {"S": "#stats"}},
                "UpdateExpression": "ADD #applied :applied",
                "ExpressionAttributeNames": {"#applied": "MessagesApplied"},
                "ExpressionAttributeValues": {":applied": {"N": "100"}},
            }
        }
    )
    token = emulator.table(f"{number:024x}")  # tokens, like tables, are the process's
    emulator.call("TransactWriteItems", {"TransactItems": items, "ClientRequestToken": token})


def delta_put(emulator: Emulator) -> None:
    """One map function delta item (`aggregation.delta_items.encode_delta_item`'s shape) into a table with a stream."""
    number = emulator.next_number()
    sequence = {"S": f"{number:040d}"}
    deltas = {key: {"M": {"Value": {"N": f"-{number}.0625"}, "TradeCount": {"N": "1"}}} for key in NODES}
    item = {
        "StreamShard": {"S": "shardId-000000000000"},
        "FirstSequenceNumber": sequence,
        "LastSequenceNumber": sequence,
        "BatchHash": {"S": f"{number:064x}"},
        "Deltas": {"M": deltas},
        "RecordCount": {"N": "100"},
        "ProducerTimestamps": {"L": [{"N": f"1764100000.{index:03d}"} for index in range(100)]},
        "CreatedAt": {"N": "1764100000.5"},
        "ExpiresAt": {"N": "1764200000"},
    }
    emulator.call("PutItem", {"TableName": emulator.table("deltas"), "Item": item})


def marker_scan(emulator: Emulator) -> Any:
    """Benchmark 4's `MarkerPoller` Scan."""
    return emulator.call(
        "Scan",
        {
            "TableName": emulator.table("aggregates"),
            "FilterExpression": "begins_with(AggregateKey, :prefix)",
            "ExpressionAttributeValues": {":prefix": {"S": MARKER_PREFIX}},
            "ProjectionExpression": "AggregateKey",
        },
    )


def drain_scan(emulator: Emulator) -> Any:
    """`producer.verifier.read_aggregate_table`'s Scan (markers filtered out)."""
    return emulator.call(
        "Scan",
        {
            "TableName": emulator.table("aggregates"),
            "ConsistentRead": True,
            "FilterExpression": "NOT begins_with(#key, :marker)",
            "ExpressionAttributeNames": {"#key": "AggregateKey"},
            "ExpressionAttributeValues": {":marker": {"S": MARKER_PREFIX}},
        },
    )


REQUESTS: tuple[tuple[str, Callable[[Emulator], Any], int], ...] = (
    ("raw conditional update (2 clauses, no stream)", raw_update, 200),
    (f"reduce transaction ({NODES_PER_TRANSACTION} node ADDs, 2 markers, #stats)", reduce_transaction, 10),
    (f"delta item put ({len(NODES)} nodes, 100 timestamps, stream)", delta_put, 30),
    ("marker poller Scan", marker_scan, 50),
    ("drain check Scan", drain_scan, 30),
)


def prepared_emulator(transactions: int = 20) -> Emulator:
    """The tables, and an AggregateTable holding every node, `#stats` and 2 markers per transaction."""
    emulator = Emulator()
    emulator.create_table("aggregates", [("AggregateKey", "HASH")])
    emulator.create_table("deltas", [("StreamShard", "HASH"), ("FirstSequenceNumber", "RANGE")], "NEW_IMAGE")
    emulator.create_table("raw", [("TradeID", "HASH")])
    for _ in range(transactions):
        reduce_transaction(emulator)
    for key in NODES[NODES_PER_TRANSACTION:]:
        item = {"AggregateKey": {"S": key}, "Value": {"N": "1"}, "TradeCount": {"N": "1"}}
        emulator.call("PutItem", {"TableName": emulator.table("aggregates"), "Item": item})
    return emulator


def run_emulator_requests(scale: float = 1.0) -> list[RequestCost]:
    """Each request's median CPU per request over `PASSES` passes (`scale` shortens the passes)."""
    emulator = prepared_emulator()
    costs = []
    for name, request, count in REQUESTS:
        repetitions = max(1, round(count * scale))
        request(emulator)  # warm: expressions parsed, caches filled
        passes = []
        for _ in range(PASSES):
            started = time.process_time()
            for _ in range(repetitions):
                request(emulator)
            passes.append((time.process_time() - started) / repetitions * 1000)
        costs.append(RequestCost(name, statistics.median(passes)))
    return costs


def markdown(costs: list[RequestCost]) -> str:
    lines = ["| request | CPU ms per request |", "| --- | ---: |"]
    lines += [f"| {cost.request} | {cost.cpu_ms:.2f} |" for cost in costs]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(run_emulator_requests()))
