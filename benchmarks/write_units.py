"""What a DynamoDB write costs, counted from the calls a handler really makes.

Why compute write units instead of reading them back: the emulator (moto 5.2.x)
answers `ReturnConsumedCapacity` with a fixed 1.0 for every single-item write and
with nothing for `TransactWriteItems`, so its figure cannot tell a 5 KB delta item
from a 100-byte trade, nor a transaction from a put. DynamoDB bills on-demand writes
by item size (https://aws.amazon.com/dynamodb/pricing/on-demand/): one write request
unit per started KB of the item, two per KB inside a transaction, and a write whose
condition fails still consumes units. Item size follows the developer guide's rules
(`aggregation.item_size`, which the quarantine and the settings validation use too).
The emulator's own report is kept next to ours as a cross-check of the request count.

`WriteCallCounter` hooks a botocore client's event system, so the very requests the
handlers send are counted, per stage, with their outcome.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aggregation.item_size import attribute_value_size_bytes, item_size_bytes
from aggregation.names import TRADE_ID
from local.emulator import partiql_statements as partiql

KILOBYTE = 1024
TRANSACTIONAL_WRITE_MULTIPLIER = 2
MAX_TRANSACTION_ACTIONS_ORIGINAL = 100  # TransactWriteItems holds at most 100 actions
PENDING_CALL_KEY = "benchmarks.write_call"
"""Where the request's parameters wait, in botocore's per-call context, for its response."""
WRITE_OPERATIONS = (
    "UpdateItem",
    "PutItem",
    "DeleteItem",
    "TransactWriteItems",
    "BatchWriteItem",
    "BatchExecuteStatement",
)
PARTIQL_KEY_NAMES = (TRADE_ID,)
"""The key of the only table the benchmarks write with PartiQL: the state function's StateTable."""
FAILED_STATEMENT_CODES = ("ConditionalCheckFailed", "DuplicateItem")


def updated_item_size_bytes(
    key: Mapping[str, Mapping[str, Any]],
    names: Mapping[str, str] | None,
    values: Mapping[str, Mapping[str, Any]] | None,
) -> int:
    """Approximate size of the item an UpdateItem leaves behind: the key plus every value it sets.

    Each `:placeholder` is taken to set the attribute of the `#placeholder` with the same
    name, which is how every handler here writes its expressions; a value used only in a
    condition is counted too (it errs by a few bytes, never by a kilobyte for our items).
    """
    size = item_size_bytes(key)
    for placeholder, value in (values or {}).items():
        attribute = (names or {}).get("#" + placeholder.lstrip(":"), placeholder.lstrip(":"))
        size += len(attribute.encode("utf-8")) + attribute_value_size_bytes(value)
    return size


def write_units(size_bytes: int, *, transactional: bool = False) -> int:
    """Write request units of one item write: one per started KB (two in a transaction), at least one."""
    units = max(1, math.ceil(size_bytes / KILOBYTE))
    return units * TRANSACTIONAL_WRITE_MULTIPLIER if transactional else units


def transact_item_size_bytes(action: Mapping[str, Any]) -> int:
    """Size of the item one TransactWriteItems action writes."""
    ((kind, body),) = action.items()
    if kind == "Put":
        return item_size_bytes(body["Item"])
    if kind == "Update":
        return updated_item_size_bytes(
            body["Key"], body.get("ExpressionAttributeNames"), body.get("ExpressionAttributeValues")
        )
    return item_size_bytes(body["Key"])  # Delete and ConditionCheck: billed on the item, at least 1 KB


def statement_item_size_bytes(statement: Mapping[str, Any]) -> int:
    """Size of the item one PartiQL write statement leaves: an INSERT's item; an UPDATE's key and
    every value it sets (as `updated_item_size_bytes` counts an UpdateItem's)."""
    parsed = partiql.parse(statement["Statement"], statement.get("Parameters", ()))
    if isinstance(parsed, partiql.Insert):
        return item_size_bytes(parsed.item)
    size = item_size_bytes(partiql.item_key(parsed, PARTIQL_KEY_NAMES))
    if isinstance(parsed, partiql.Update):
        for path, value in parsed.assignments:
            size += len(path.attribute.encode("utf-8")) + attribute_value_size_bytes(value)
    return size


def request_write_units(operation: str, params: Mapping[str, Any]) -> tuple[int, int]:
    """(items written, write request units) of one write request, by DynamoDB's billing rules."""
    if operation == "PutItem":
        return 1, write_units(item_size_bytes(params["Item"]))
    if operation == "UpdateItem":
        size = updated_item_size_bytes(
            params["Key"], params.get("ExpressionAttributeNames"), params.get("ExpressionAttributeValues")
        )
        return 1, write_units(size)
    if operation == "DeleteItem":
        return 1, write_units(item_size_bytes(params["Key"]))
    if operation == "TransactWriteItems":
        actions = params["TransactItems"]
        return len(actions), sum(write_units(transact_item_size_bytes(a), transactional=True) for a in actions)
    if operation == "BatchWriteItem":
        requests = [r for table_requests in params["RequestItems"].values() for r in table_requests]
        units = sum(write_units(item_size_bytes(r["PutRequest"]["Item"]) if "PutRequest" in r else 1) for r in requests)
        return len(requests), units
    if operation == "BatchExecuteStatement":  # billed per statement, as the single-item write it is
        statements = params["Statements"]
        return len(statements), sum(write_units(statement_item_size_bytes(s)) for s in statements)
    raise ValueError(f"{operation} is not a write")


@dataclass
class WriteCall:
    """One write request as sent, with what it cost."""

    stage: str
    operation: str
    items: int
    write_units: int
    outcome: str  # "ok" or the error code (a failed condition still costs its units)
    reported_capacity: float | None  # the emulator's ConsumedCapacity, where it gave one
    seconds: float
    params: Mapping[str, Any]
    failed_statements: int = 0  # a BatchExecuteStatement's statements that failed their condition or met the item


@dataclass
class StageWriteCost:
    """The writes of one stage, summed."""

    requests: int = 0
    items: int = 0
    write_units: int = 0
    failed_conditions: int = 0
    reported_capacity: float = 0.0
    reported_requests: int = 0


@dataclass
class WriteCallCounter:
    """Counts every write request a botocore DynamoDB client sends, labelled with the current stage.

    Registered on the client's own event system, so nothing in the handlers changes
    except one request parameter: `ReturnConsumedCapacity=TOTAL` is added so the
    emulator's figure can be shown next to the computed one.
    """

    stage: str = "unlabelled"
    calls: list[WriteCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-parameter-build.dynamodb", self._before_call)
        client.meta.events.register("after-call.dynamodb", self._after_call)

    def detach(self, client: Any) -> None:
        client.meta.events.unregister("before-parameter-build.dynamodb", self._before_call)
        client.meta.events.unregister("after-call.dynamodb", self._after_call)

    @contextmanager
    def labelled(self, stage: str) -> Iterator[None]:
        previous, self.stage = self.stage, stage
        try:
            yield
        finally:
            self.stage = previous

    def _before_call(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if model.name not in WRITE_OPERATIONS:
            return
        params.setdefault("ReturnConsumedCapacity", "TOTAL")
        context[PENDING_CALL_KEY] = (model.name, dict(params), time.perf_counter())

    def _after_call(self, parsed: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        pending = context.pop(PENDING_CALL_KEY, None)
        if model.name not in WRITE_OPERATIONS or pending is None:
            return
        operation, params, started = pending
        items, units = request_write_units(operation, params)
        outcome = str(parsed.get("Error", {}).get("Code", "")) or "ok"
        failed = sum(
            str(response.get("Error", {}).get("Code", "")) in FAILED_STATEMENT_CODES
            for response in parsed.get("Responses", ())
        )
        with self._lock:
            self.calls.append(
                WriteCall(
                    stage=self.stage,
                    operation=operation,
                    items=items,
                    write_units=units,
                    outcome=outcome,
                    reported_capacity=reported_capacity(parsed.get("ConsumedCapacity")),
                    seconds=time.perf_counter() - started,
                    params=params,
                    failed_statements=failed,
                )
            )

    def by_stage(self) -> dict[str, StageWriteCost]:
        return summarise_calls(self.calls)


def reported_capacity(consumed: Any) -> float | None:
    """Sum of `ConsumedCapacity` (one object, or a list for transactions and batches)."""
    if consumed is None:
        return None
    entries: Sequence[Mapping[str, Any]] = consumed if isinstance(consumed, list) else [consumed]
    if not entries:
        return None
    return float(sum(float(entry.get("CapacityUnits", 0)) for entry in entries))


def summarise_calls(calls: Sequence[WriteCall]) -> dict[str, StageWriteCost]:
    """Per stage: requests, items, write units, failed conditions, emulator-reported capacity."""
    stages: dict[str, StageWriteCost] = {}
    for call in calls:
        cost = stages.setdefault(call.stage, StageWriteCost())
        cost.requests += 1
        cost.items += call.items
        cost.write_units += call.write_units
        cost.failed_conditions += call.outcome in ("ConditionalCheckFailedException", "TransactionCanceledException")
        cost.failed_conditions += call.failed_statements
        if call.reported_capacity is not None:
            cost.reported_capacity += call.reported_capacity
            cost.reported_requests += 1
    return stages
