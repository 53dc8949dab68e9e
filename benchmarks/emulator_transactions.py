"""The emulator's TransactWriteItems against table size: moto's rollback copy against our journal.

moto 5.2.5 deep-copies every table a transaction touches before every transaction (its
rollback copy), so a transaction's latency and the emulator's memory grow with the table;
`local.emulator.moto_compat.fix_transaction_rollback_copies_only_what_it_touches` copies only
the items the transaction names. Both run here side by side, in process (no HTTP: the
figure is the backend's own work), on a table with a NEW_AND_OLD_IMAGES stream, with one
transaction of 10 ADD updates, the shape of a reduce transaction. moto's own path is
measured at smaller sizes only: it is the slow one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moto.core.model_instances import reset_model_data
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType

from benchmarks.harness import median
from local.emulator import moto_compat

ACTIONS = 10
OURS_SIZES = (0, 10_000, 100_000)
MOTO_SIZES = (0, 2_000, 8_000)
REPETITIONS = 7
OURS = "journal (ours)"
MOTOS_OWN = "moto 5.2.5"


@dataclass(frozen=True)
class TransactionLatency:
    implementation: str  # OURS or MOTOS_OWN
    table_items: int
    median_ms: float


@dataclass(frozen=True)
class EmulatorTransactionsResult:
    latencies: list[TransactionLatency]

    def ratio_to_empty(self, implementation: str, table_items: int) -> float:
        by_size = {r.table_items: r.median_ms for r in self.latencies if r.implementation == implementation}
        return by_size[table_items] / by_size[0]


def scratch_table(backend: DynamoDBBackend, name: str, stream_view_type: str | None = None) -> Any:
    """A table keyed by `pk` (S) in an in-process moto backend (no HTTP): moto's `Table`."""
    streams = {"StreamEnabled": True, "StreamViewType": stream_view_type} if stream_view_type else None
    return backend.create_table(
        name,
        schema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        throughput=None,
        attr=[{"AttributeName": "pk", "AttributeType": "S"}],
        global_indexes=None,
        indexes=None,
        streams=streams,
        billing_mode="PAY_PER_REQUEST",
        sse_specification=None,
        tags=[],
        deletion_protection_enabled=False,
        warm_throughput=None,
    )


def _table_of(backend: DynamoDBBackend, items: int) -> None:
    table = scratch_table(backend, "t", "NEW_AND_OLD_IMAGES")
    for index in range(items):
        table.put_item({"pk": {"S": f"item-{index:06d}"}, "Value": {"N": str(index)}})


def _transaction(round_number: int) -> list[dict[str, Any]]:
    return [
        {
            "Update": {
                "TableName": "t",
                "Key": {"pk": {"S": f"node-{action}"}},
                "UpdateExpression": "ADD #v :v",
                "ExpressionAttributeNames": {"#v": "Value"},
                "ExpressionAttributeValues": {":v": {"N": str(round_number)}},
            }
        }
        for action in range(ACTIONS)
    ]


def _median_ms(transact: Callable[[DynamoDBBackend, list[dict[str, Any]]], None], items: int) -> float:
    backend = DynamoDBBackend("us-east-1", "123456789012")
    _table_of(backend, items)
    durations = []
    for round_number in range(REPETITIONS):
        started = time.perf_counter()
        transact(backend, _transaction(round_number))
        durations.append((time.perf_counter() - started) * 1000)
    assert backend.tables["t"].get_item(DynamoType({"S": "node-0"})) is not None
    # moto registers every model instance it makes (`BaseModel.instances_tracked`) and never lets go:
    # without this, the 100,000-item tables stayed in the benchmark's process (2.2 GB, 9 million objects),
    # and the garbage collector's full passes over them stalled the sections timed after this one.
    reset_model_data()
    return median(durations)


def run_emulator_transactions(
    report: Callable[[str, float], None],
    ours_sizes: tuple[int, ...] = OURS_SIZES,
    moto_sizes: tuple[int, ...] = MOTO_SIZES,
) -> EmulatorTransactionsResult:
    """Every size, each on a fresh backend; each list of sizes starts with the empty table."""
    moto_compat.apply()
    journaled = DynamoDBBackend.transact_write_items
    motos_own = journaled.__wrapped__  # type: ignore[attr-defined]
    cells = [(OURS, journaled, size) for size in ours_sizes]
    cells += [(MOTOS_OWN, motos_own, size) for size in moto_sizes]
    latencies = []
    for done, (implementation, transact, size) in enumerate(cells):
        latencies.append(TransactionLatency(implementation, size, _median_ms(transact, size)))
        report("emulator transactions vs table size", (done + 1) / len(cells))
    return EmulatorTransactionsResult(latencies)
