"""The worst-event benchmark measures what it says: events as large as Lambda delivers, and every
request of the real handler counted per write lane."""

from __future__ import annotations

import json

from benchmarks.harness import DUMMY_CREDENTIALS, environment, quiet_handlers
from benchmarks.worst_event import (
    KINESIS_MAPPING_MAX_BATCH,
    SIMULATED_ENDPOINT,
    WorstEvent,
    _aggregate,
    run_worst_event,
    worst_inputs,
)
from function_support import aws
from local.runner.inprocess import Pipeline
from planner.inputs import LAMBDA_INVOCATION_PAYLOAD_BYTES, ServiceTimes


def test_each_kind_is_an_event_as_large_as_lambda_delivers() -> None:
    with environment(DUMMY_CREDENTIALS):
        inputs = worst_inputs()
    for kind, payloads in inputs.items():
        with environment(DUMMY_CREDENTIALS):
            size = len(json.dumps(Pipeline({}).kinesis_event(payloads)))
            one_more = len(json.dumps(Pipeline({}).kinesis_event([*payloads, payloads[-1]])))
        assert size <= LAMBDA_INVOCATION_PAYLOAD_BYTES, kind
        assert one_more > LAMBDA_INVOCATION_PAYLOAD_BYTES or len(payloads) == KINESIS_MAPPING_MAX_BATCH, kind


def test_every_request_is_counted_and_the_lanes_share_them() -> None:
    names = {"STATE_TABLE": "s", "QUARANTINE_TABLE": "q", "AWS_ENDPOINT_URL": SIMULATED_ENDPOINT, **DUMMY_CREDENTIALS}
    with environment(names), quiet_handlers():
        aws.dynamodb_client.cache_clear()
        aws.state_update_client.cache_clear()
        try:
            result = run_worst_event("empty", [_aggregate(lambda _: b"", 4_000)])
        finally:
            aws.dynamodb_client.cache_clear()
            aws.state_update_client.cache_clear()
    assert result.quarantined == result.user_records > 500
    assert result.requests == -(-result.user_records // 25), "25 inserts to a call"
    assert result.requests / 16 <= result.busiest_lane_requests < result.requests, "spread over the write lanes"


def test_the_model_adds_cpu_at_the_functions_memory_and_the_busiest_lanes_round_trips() -> None:
    result = WorstEvent("k", 1, 10, 0, 10, 4, 3, cpu_seconds=1.0)
    times = ServiceTimes()
    assert result.modelled_seconds(times) > 1.0 + 3 * times.write_round_trip_ms / 1000
    assert WorstEvent("k", 1, 10, 0, 10, 4, 100_000, 0.0).fits(times) is False
