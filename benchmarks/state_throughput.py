"""Benchmark 2: state-function messages/s per invocation at a simulated 5 ms and 20 ms round trip.

The real handler (`state_function.handler.lambda_handler`) runs on batches of 100
standard-workload messages; botocore builds and signs every `BatchExecuteStatement` (up to 25
writes) as for AWS and `SimulatedRoundTrip` answers it after the chosen delay. Our bounded pool
(`STATE_WRITE_CONCURRENCY=16`, the default) and one call at a time
(`STATE_WRITE_CONCURRENCY=1`) alternate invocation by
invocation in the same run, so both see the same machine state; the figure is the
median over repetitions of messages received ÷ invocation wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.harness import DUMMY_CREDENTIALS, chunks, environment, median, quiet_handlers
from benchmarks.stubbed_dynamodb import SimulatedRoundTrip
from benchmarks.write_cost import STATE_BATCH_SIZE, standard_workload
from function_support import aws
from local.runner.inprocess import LambdaContextStub, Pipeline
from producer.generator import MessageGenerator
from state_function import handler as state_handler

BOUNDED_CONCURRENCY = 16
ROUND_TRIPS_MS = (5.0, 20.0)
SIMULATED_ENDPOINT = "https://dynamodb.simulated.invalid"

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class ThroughputAtRoundTrip:
    round_trip_ms: float
    bounded_messages_per_second: float  # median, STATE_WRITE_CONCURRENCY=16
    sequential_messages_per_second: float  # median, STATE_WRITE_CONCURRENCY=1
    repetitions: int

    @property
    def ratio(self) -> float:
        return self.bounded_messages_per_second / self.sequential_messages_per_second


def _reset_write_pool() -> None:
    """The pool is created once per execution environment; a new concurrency needs a new one."""
    if state_handler.write_lanes.cache_info().currsize:
        state_handler.write_lanes().executor.shutdown(wait=True)
    state_handler.write_lanes.cache_clear()


def _invocation_rate(event: dict[str, object], messages: int, concurrency: int) -> float:
    with environment({"STATE_WRITE_CONCURRENCY": str(concurrency)}):
        _reset_write_pool()
        state_handler.write_lanes()  # created before timing, as in a warm environment
        started = time.perf_counter()
        state_handler.lambda_handler(event, LambdaContextStub())
        return messages / (time.perf_counter() - started)


def run_state_throughput(repetitions: int, progress: Progress) -> list[ThroughputAtRoundTrip]:
    payloads = [m.data for m in MessageGenerator(standard_workload(STATE_BATCH_SIZE * repetitions, seed=11))]
    batches = chunks(payloads, STATE_BATCH_SIZE)
    names = {
        "STATE_TABLE": "simulated-state",
        "QUARANTINE_TABLE": "simulated-quarantine",
        # The same batches are replayed on purpose: the write path is what is measured, which the
        # version cache would otherwise settle from memory after the first pass.
        "STATE_VERSION_CACHE_SIZE": "0",
        "AWS_ENDPOINT_URL": SIMULATED_ENDPOINT,
        **DUMMY_CREDENTIALS,
    }
    results: list[ThroughputAtRoundTrip] = []
    with environment(names), quiet_handlers():
        aws.dynamodb_client.cache_clear()
        aws.state_update_client.cache_clear()
        event_builder = Pipeline({})
        events = [event_builder.kinesis_event(batch) for batch in batches]
        for round_trip_ms in ROUND_TRIPS_MS:
            simulator = SimulatedRoundTrip(round_trip_ms / 1000)
            simulator.attach(aws.dynamodb_client())
            simulator.attach(aws.state_update_client())
            bounded: list[float] = []
            sequential: list[float] = []
            for index, (event, batch) in enumerate(zip(events, batches, strict=True), start=1):
                bounded.append(_invocation_rate(event, len(batch), BOUNDED_CONCURRENCY))
                sequential.append(_invocation_rate(event, len(batch), 1))
                progress(f"state throughput at {round_trip_ms:g} ms", index / len(events))
            simulator.detach(aws.dynamodb_client())
            simulator.detach(aws.state_update_client())
            results.append(ThroughputAtRoundTrip(round_trip_ms, median(bounded), median(sequential), len(events)))
        _reset_write_pool()
        aws.dynamodb_client.cache_clear()
        aws.state_update_client.cache_clear()
    return results
