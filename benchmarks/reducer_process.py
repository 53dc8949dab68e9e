"""One reducer of the reducer-scaling benchmark (`benchmarks.reducer_scaling`), in a module of its own.

Each reducer runs in a spawned process, which imports the module of its target function: this one
imports only what a reducer runs (the reduce handler, boto3, the stubbed round trip), not the report's
planner and CDK app, whose import starts a Node runtime (jsii) and costs each reducer seconds before it
is ready.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from aggregation.transactions import DeltaUnit
from benchmarks.stubbed_dynamodb import SimulatedRoundTrip
from function_support import aws
from reduce_function import handler as reduce_handler

TRANSACTION_LATENCY_SECONDS = 0.020
MODE = reduce_handler.IdempotencyMode.TOKEN_AND_MARKERS  # cdk.json's reduceIdempotency
STUBBED = "DynamoDB stubbed at 20 ms"
EMULATOR = "emulator + 20 ms latency"


@dataclass(frozen=True)
class ReducerOutcome:
    """What one reducer process reports: when it ran and what it wrote."""

    started: float  # time.time(), after every reducer of the run was ready
    finished: float
    transactions: int
    conflicts_retried: int
    invocations_retried: int
    cpu_seconds: float
    error: str = ""


def reducer_process(
    backend: str, table: str, invocations: list[list[DeltaUnit]], ready: Any, results: Any, *, slices: int
) -> None:
    """One reducer, in a process of its own as in Lambda: apply every invocation, retrying a failed one.

    A failed invocation (conflicts beyond the handler's own retries) is applied again, as Lambda
    retries a failed batch; its markers make the replay change nothing that was applied.
    """
    transactions = conflicts = retried = 0
    started = finished = cpu = 0.0
    try:
        aws.dynamodb_client.cache_clear()
        aws.prevalidated_write_client.cache_clear()
        clients = (aws.dynamodb_client(), aws.prevalidated_write_client())  # warm, as in a warm execution environment
        if backend == STUBBED:
            for client in clients:
                SimulatedRoundTrip(TRANSACTION_LATENCY_SECONDS).attach(client)
        ready.wait()
        started, cpu_started = time.time(), time.process_time()
        for units in invocations:
            while True:
                try:
                    outcome = reduce_handler.apply_delta_units(units, table, MODE, slices)
                    break
                except ClientError:
                    retried += 1
            transactions += outcome.transactions
            conflicts += outcome.conflicts_retried
        finished, cpu = time.time(), time.process_time() - cpu_started
    except Exception as error:  # reported to the parent, which fails the run
        results.put(ReducerOutcome(started, finished, transactions, conflicts, retried, 0.0, repr(error)))
        return
    results.put(ReducerOutcome(started, finished, transactions, conflicts, retried, cpu))
