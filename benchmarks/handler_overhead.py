"""Benchmark 3: CPU microseconds per message of each handler's own work, AWS calls stubbed.

The inputs are the very events of the write-cost run (Kinesis batches, StateTable stream
batches, DeltaTable stream batches as the emulator produced them). `CannedResponses`
answers every DynamoDB call at botocore's `before-call`, so what is timed is the
handler's parsing, validation, exact delta arithmetic, hashing, transaction planning,
Powertools logging and metrics, and botocore's serialisation and, on the clients that keep it,
its parameter validation (real CPU in Lambda too), but no network and no response parsing. CPU time is
`time.process_time` (all threads: the state function's write pool counts), medians over
every invocation of several passes; wall time is reported alongside.

The state handler is also set against its **irreducible work**, measured in the same run over
the same events (`measure_state_floor`): per record, decode and parse its JSON, and for each
write the handler sends, turn its `update_item` arguments into the HTTP request with botocore's
own serializer, unvalidated. No implementation that talks to DynamoDB's API can do less. The
same with botocore's parameter validation added is shown beside it: that is what the SDK's
default request building costs (and what the figure "90 µs" of the issue-22 profile measured).
And the **client path**: the same parse, and each write sent with the state function's own client
(`state_update_client().update_item`, answered by `CannedResponses`): the least any handler that
sends its writes through boto3's client can spend, botocore's per-call machinery included
(endpoint rules, event hooks, request preparation, the canned response), so the state handler's
figure splits into what the SDK costs per write and what the handler adds. And the **batch
client path**: the same parse, and the writes sent as the state function sends them, its own
INSERT statements in `batch_execute_statement` calls of up to 25 (one success per statement).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.serialize import create_serializer

from aggregation.batches import select_latest_versions
from aggregation.delta_items import decode_delta_batch
from aggregation.names import TOKEN_AND_MARKERS, TRADE_ID, TRADE_TIMESTAMP
from aggregation.state_statements import ASSIGNED, call_groups, insert_statement, statement_texts
from benchmarks.harness import DUMMY_CREDENTIALS, environment, median, quiet_handlers
from benchmarks.stubbed_dynamodb import CannedResponses
from benchmarks.write_cost import WorkloadEvents
from function_support import aws
from function_support.settings import hierarchy_levels, value_domain
from local.runner.inprocess import LambdaContextStub, Pipeline
from map_function import handler as map_handler
from reduce_function import handler as reduce_handler
from state_function import handler as state_handler
from state_function.quarantine import RecordOrigin

CANNED_ENDPOINT = "https://dynamodb.canned.invalid"
Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class ReduceCpuModel:
    """Reduce CPU per invocation = per_action x transaction actions + per_message x messages (least squares)."""

    per_action_us: float
    per_message_us: float
    invocations: int


@dataclass(frozen=True)
class HandlerOverhead:
    handler: str
    unit: str  # what "per message" counts for this handler
    cpu_us_per_unit: float  # median over invocations
    wall_us_per_unit: float
    cpu_us_per_invocation: float
    invocations: int


def _measure(
    name: str,
    *,
    unit: str,
    invoke: Callable[[dict[str, Any]], object],
    events: Sequence[tuple[dict[str, Any], int]],
    passes: int,
    progress: Progress,
    samples: list[tuple[float, object, int]] | None = None,
    actions: TransactionActionCounter | None = None,
) -> HandlerOverhead:
    """Time every invocation; `samples` (if given) receives (CPU µs, outcome, units) of each.

    The outcome is the handler's result, or with `actions` the transaction actions it sent.
    """
    cpu_per_unit: list[float] = []
    wall_per_unit: list[float] = []
    cpu_per_invocation: list[float] = []
    invoke(events[0][0])  # warm-up: imports, first client use, pool creation
    if actions is not None:
        actions.actions = 0
    total = passes * len(events)
    for done, (event, units) in enumerate((e for _ in range(passes) for e in events), start=1):
        cpu_started, wall_started = time.process_time(), time.perf_counter()
        outcome = invoke(event)
        cpu = time.process_time() - cpu_started
        if actions is not None:
            outcome, actions.actions = actions.actions, 0
        wall = time.perf_counter() - wall_started
        cpu_per_invocation.append(cpu * 1e6)
        if samples is not None:
            samples.append((cpu * 1e6, outcome, units))
        cpu_per_unit.append(cpu * 1e6 / units)
        wall_per_unit.append(wall * 1e6 / units)
        if done % 10 == 0 or done == total:
            progress(f"handler overhead: {name}", done / total)
    return HandlerOverhead(
        handler=name,
        unit=unit,
        cpu_us_per_unit=median(cpu_per_unit),
        wall_us_per_unit=median(wall_per_unit),
        cpu_us_per_invocation=median(cpu_per_invocation),
        invocations=len(cpu_per_invocation),
    )


class TransactionActionCounter:
    """Counts the actions of every TransactWriteItems a client sends (before the canned answer)."""

    def __init__(self) -> None:
        self.actions = 0

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "TransactWriteItems":
            self.actions += len(params.get("TransactItems", []))

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-parameter-build.dynamodb", self)


@dataclass(frozen=True)
class StateFloor:
    """CPU µs per Kinesis record of the state handler's irreducible work (module docstring)."""

    irreducible_us: float  # JSON parse + botocore serialisation of each write's UpdateItem
    validated_us: float  # the same + botocore's parameter validation of each write
    client_path_us: float  # JSON parse + an `update_item` per write through the state function's client (canned)
    batch_client_path_us: float  # JSON parse + the handler's `batch_execute_statement` per 25 writes (canned)


def update_item_arguments(
    table_name: str, received: state_handler.ReceivedMessage, levels: tuple[str, ...]
) -> dict[str, Any]:
    """The conditional `update_item` writing what `received`'s statement writes (the floor's one
    request per write), its map and list as the statement's literals make them."""
    message, write = received.message, received.write
    names = {f"#{name}": name for name in (*ASSIGNED, TRADE_TIMESTAMP, TRADE_ID)}
    values = {
        ":Value": write.assigned[0],
        ":Version": write.version,
        ":Hierarchy": {"M": {level: {"S": name} for level, name in zip(levels, message.hierarchy, strict=True)}},
        ":NodePath": {"L": [{"S": name} for name in message.hierarchy]},
        ":ContentDigest": {"S": message.content_digest},
        ":WrittenByEventId": {"S": received.origin.event_id},
    }
    update = "SET " + ", ".join(f"#{name} = :{name}" for name in ASSIGNED)
    if write.has_timestamp:
        values[f":{TRADE_TIMESTAMP}"] = write.assigned[-1]
        update += f", #{TRADE_TIMESTAMP} = :{TRADE_TIMESTAMP}"
    else:
        update += f" REMOVE #{TRADE_TIMESTAMP}"
    return {
        "TableName": table_name,
        "Key": {TRADE_ID: write.key},
        "UpdateExpression": update,
        "ConditionExpression": f"attribute_not_exists(#{TRADE_ID}) OR #Version < :Version",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def measure_state_floor(events: Sequence[tuple[dict[str, Any], int]], passes: int) -> StateFloor:
    """The irreducible work of the state handler over `events`, medians per event as `_measure` takes them.

    Each event's writes are those of the latest version per TradeID (what the handler sends with
    the version cache off), built before timing starts: as one `update_item` request each for the
    floor and the client path, as the handler's own INSERT statements in its calls of up to 25
    for the batch client path.
    """
    operation = aws.dynamodb_client().meta.service_model.operation_model("UpdateItem")
    levels = hierarchy_levels()
    domain = value_domain()
    texts = statement_texts("canned-state")
    prepared: list[tuple[list[bytes], list[dict[str, Any]], list[list[Any]], int]] = []
    for event, records in events:
        payloads = [base64.b64decode(record["kinesis"]["data"]) for record in event["Records"]]
        encoded = [record["kinesis"]["data"] for record in event["Records"]]
        received = [
            r
            for record, payload in zip(event["Records"], payloads, strict=True)
            if isinstance(
                r := state_handler.receive(
                    RecordOrigin(record["eventID"], "shard", "0", "pk", payload), levels, domain
                ),
                state_handler.ReceivedMessage,
            )
        ]
        latest = select_latest_versions(received, lambda item: item.message).latest
        updates = [update_item_arguments("canned-state", item, levels) for item in latest]
        groups = call_groups(len(latest))
        calls = [[insert_statement(texts, latest[i].write) for i in group] for group in groups]
        prepared.append(([e.encode() for e in encoded], updates, calls, records))

    def per_record(send: Callable[[Any], object], batched: bool = False) -> float:
        costs = []
        for _ in range(passes):
            for encoded_data, updates, calls, records in prepared:
                started = time.process_time()
                for data in encoded_data:
                    json.loads(base64.b64decode(data))
                for request in calls if batched else updates:
                    send(request)
                costs.append((time.process_time() - started) * 1e6 / records)
        return median(costs)

    unvalidated = create_serializer("json", include_validation=False)
    validated = create_serializer("json", include_validation=True)
    client: Any = aws.state_update_client()  # answered by CannedResponses (run_handler_overhead)
    return StateFloor(
        irreducible_us=per_record(lambda write: unvalidated.serialize_to_request(write, operation)),
        validated_us=per_record(lambda write: validated.serialize_to_request(write, operation)),
        client_path_us=per_record(lambda write: client.update_item(**write)),
        batch_client_path_us=per_record(
            lambda statements: client.batch_execute_statement(Statements=statements), batched=True
        ),
    )


@dataclass(frozen=True)
class OverheadResult:
    handlers: list[HandlerOverhead]  # state, map, reduce (map batches of 100), reduce (map batches of 1,000)
    reduce_model: ReduceCpuModel
    state_floor: StateFloor


def fit_reduce_cpu(samples: Sequence[tuple[float, int, int]]) -> ReduceCpuModel:
    """Least squares through the origin of CPU µs = a x actions + b x messages, both kept >= 0.

    Why two terms: a reduce invocation's CPU grows with the transaction actions it builds
    (one per node, marker and `#stats`) and with the messages its delta items carry (their
    producer timestamps are parsed and summed); small and large delta batches tell them apart.
    """
    stt = sum(t * t for _, t, _ in samples)
    smm = sum(m * m for _, _, m in samples)
    stm = sum(t * m for _, t, m in samples)
    sct = sum(c * t for c, t, _ in samples)
    scm = sum(c * m for c, _, m in samples)
    determinant = stt * smm - stm * stm
    if determinant <= 0:
        per_action = sct / stt if stt else 0.0
        return ReduceCpuModel(per_action, 0.0, len(samples))
    per_action = (sct * smm - scm * stm) / determinant
    per_message = (scm * stt - sct * stm) / determinant
    if per_message < 0:
        return ReduceCpuModel(sct / stt, 0.0, len(samples))
    if per_action < 0:
        return ReduceCpuModel(0.0, scm / smm, len(samples))
    return ReduceCpuModel(per_action, per_message, len(samples))


def run_handler_overhead(events: WorkloadEvents, passes: int, progress: Progress) -> OverheadResult:
    settings = {
        "STATE_TABLE": "canned-state",
        "QUARANTINE_TABLE": "canned-quarantine",
        # The same batches are replayed on purpose: the write path is what is measured, which the
        # version cache would otherwise settle from memory after the first pass.
        "STATE_VERSION_CACHE_SIZE": "0",
        "DELTA_TABLE": "canned-delta",
        "AGGREGATE_TABLE": "canned-aggregate",
        "REDUCE_IDEMPOTENCY": TOKEN_AND_MARKERS,
        "AWS_ENDPOINT_URL": CANNED_ENDPOINT,
        **DUMMY_CREDENTIALS,
    }
    canned = CannedResponses()
    with environment(settings), quiet_handlers():
        aws.dynamodb_client.cache_clear()
        aws.state_update_client.cache_clear()
        aws.prevalidated_write_client.cache_clear()
        canned.attach(aws.dynamodb_client())
        canned.attach(aws.state_update_client())
        canned.attach(aws.prevalidated_write_client())
        action_counter = TransactionActionCounter()
        action_counter.attach(aws.prevalidated_write_client())
        event_builder = Pipeline({})
        state_events = [(event_builder.kinesis_event(batch), len(batch)) for batch in events.state_batches]
        event_builder.shard_of_event.update(events.shard_of_event)  # map events carry their shardId
        map_events = [(event_builder.map_event(batch), len(batch)) for batch in events.map_batches]
        reduce_events = [
            ({"Records": [r for r in batch if r["eventName"] == "INSERT"]}, _messages_in(batch))
            for batch in events.reduce_batches
        ]
        large_reduce_events = [
            ({"Records": [r for r in batch if r["eventName"] == "INSERT"]}, _messages_in(batch))
            for batch in events.large_reduce_batches
        ]
        reduce_samples: list[tuple[float, object, int]] = []
        state_floor = measure_state_floor(state_events, passes)
        results = [
            _measure(
                "state",
                unit="Kinesis record",
                invoke=lambda e: state_handler.lambda_handler(e, LambdaContextStub()),
                events=state_events,
                passes=passes,
                progress=progress,
            ),
            _measure(
                "map",
                unit="state change",
                invoke=lambda e: map_handler.lambda_handler(e, LambdaContextStub()),
                events=map_events,
                passes=passes,
                progress=progress,
            ),
            _measure(
                "reduce",
                unit="message applied",
                invoke=lambda e: reduce_handler.lambda_handler(e, LambdaContextStub()),
                events=reduce_events,
                passes=passes,
                progress=progress,
                samples=reduce_samples,
                actions=action_counter,
            ),
        ]
        if large_reduce_events:
            results.append(
                _measure(
                    "reduce (map batches of 1,000)",
                    unit="message applied",
                    invoke=lambda e: reduce_handler.lambda_handler(e, LambdaContextStub()),
                    events=large_reduce_events,
                    passes=passes * max(1, len(reduce_events) // len(large_reduce_events)),
                    progress=progress,
                    samples=reduce_samples,
                    actions=action_counter,
                )
            )
        canned.detach(aws.dynamodb_client())
        canned.detach(aws.state_update_client())
        canned.detach(aws.prevalidated_write_client())
        aws.dynamodb_client.cache_clear()
        aws.state_update_client.cache_clear()
        aws.prevalidated_write_client.cache_clear()
    return OverheadResult(results, fit_reduce_cpu(_median_per_event(reduce_samples)), state_floor)


def _median_per_event(samples: Sequence[tuple[float, object, int]]) -> list[tuple[float, int, int]]:
    """One (median CPU µs, actions, messages) per distinct invocation: passes repeat the same events,
    so the median of each damps what other work on the machine did to a single pass."""
    by_event: dict[tuple[int, int], list[float]] = {}
    for cpu, outcome, messages in samples:
        actions = outcome if isinstance(outcome, int) else 0
        by_event.setdefault((actions, messages), []).append(cpu)
    return [(median(cpus), actions, messages) for (actions, messages), cpus in by_event.items()]


def _messages_in(delta_records: Sequence[dict[str, Any]]) -> int:
    """Messages a reduce batch applies: the delta items' RecordCount (at least 1, to divide by)."""
    return max(1, sum(decode_delta_batch(record["dynamodb"]["NewImage"]).record_count for record in delta_records))
