"""The state function's timeout is sized by the messages a batch can carry, not by its records.

With KPL aggregates a batch of `stateBatchSize` Kinesis records is bounded only by Lambda's
invocation payload. The fullest batch of the smallest valid messages, aggregated by
`aws-kinesis-agg`, is costed with the planner's per-message figures in the state function's
memory (`planner.model.lambda_state_rate`): it must finish in at most half the timeout the
synthesized template gives the function.
"""

from __future__ import annotations

import json

from aws_cdk.assertions import Template

from aggregation.messages import parse_trade_message
from local.runner.inprocess import LEVELS
from planner.inputs import LAMBDA_INVOCATION_PAYLOAD_BYTES, ServiceTimes, Settings
from planner.state import lambda_state_rate
from stacks.settings import STATE_MEMORY_MB
from tests.lambdas.kpl_helpers import kpl_aggregate
from tests.stacks.stack_helpers import function_properties

SMALLEST_MESSAGE = json.dumps(
    {"TradeID": "t", "Version": 0, "Value": 0, "Timestamp": 0, "Hierarchy": {level: "x" for level in LEVELS}},
    separators=(",", ":"),
).encode()


def test_the_smallest_message_is_valid() -> None:
    parse_trade_message(SMALLEST_MESSAGE, LEVELS)


def test_a_batch_of_full_aggregates_of_the_smallest_messages_finishes_well_inside_the_timeout(
    template: Template,
) -> None:
    ten, eleven = kpl_aggregate([SMALLEST_MESSAGE] * 10), kpl_aggregate([SMALLEST_MESSAGE] * 11)
    bytes_per_message = len(eleven) - len(ten)
    # The event carries the data base64-encoded: 4 bytes for every 3.
    messages = LAMBDA_INVOCATION_PAYLOAD_BYTES * 3 // 4 // bytes_per_message
    rate = lambda_state_rate(ServiceTimes(), Settings(state_batch_size=messages, state_memory_mb=STATE_MEMORY_MB))
    worst_seconds = messages / rate
    timeout = function_properties(template, "state_function.handler.lambda_handler")["Timeout"]
    assert messages > 40_000, "a full batch carries tens of thousands of messages"
    assert worst_seconds <= timeout / 2, f"{messages:,} messages take {worst_seconds:.0f} s of a {timeout} s timeout"
