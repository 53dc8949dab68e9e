"""The worst event fits its timeout: for the largest event Lambda delivers, the state handler's
sequential round trips and its time at the planner's write latency, for each kind of input.

A batch that outlasts its timeout is retried whole, for ever, and holds its shard; the timeout was
once sized by valid messages only, while an attacker's aggregates of empty user records asked for
about 175,000 sequential quarantine puts. Each kind here is the worst of its input for one event:
as many Kinesis records as the 6 MB invocation payload holds (Lambda's event JSON, the data
base64-encoded) or the 10,000 a Kinesis mapping may batch, whichever is fewer.

The real handler runs, with DynamoDB answered at the botocore level (`SimulatedRoundTrip` with
no delay: every request built, signed and serialised as for AWS). What is counted: the requests
each write lane sent one after another (a lane's requests are sequential; the lanes run side by
side), and the invocation's CPU time. Its time on Lambda is then modelled as that CPU, slowed to
the state function's memory (`planner.inputs.cpu_slowdown`), plus the busiest lane's requests at
the planner's write round trip: it must be at most half the state timeout for every kind.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from aggregation.kpl import DIGEST_BYTES, MAGIC
from benchmarks.harness import DUMMY_CREDENTIALS, environment, quiet_handlers
from benchmarks.stubbed_dynamodb import SimulatedRoundTrip
from function_support import aws
from local.runner.inprocess import LambdaContextStub, Pipeline, trade_message
from planner.inputs import LAMBDA_INVOCATION_PAYLOAD_BYTES, ServiceTimes, cpu_slowdown
from producer.kpl import length_delimited, varint
from stacks.settings import STATE_MEMORY_MB
from stacks.stages import STATE_TIMEOUT_SECONDS
from state_function import handler as state_handler

KINESIS_RECORD_MAX_BYTES = 1024 * 1024
"""A Kinesis record's data is at most 1 MiB (Kinesis Data Streams quotas)."""
KINESIS_MAPPING_MAX_BATCH = 10_000
"""The largest `BatchSize` a Kinesis event source mapping accepts."""
SIMULATED_ENDPOINT = "https://dynamodb.worst-event.invalid"


@dataclass(frozen=True)
class WorstEvent:
    """One kind of input, as many as one event holds, through the real handler."""

    kind: str
    kinesis_records: int
    user_records: int
    written: int
    quarantined: int
    requests: int
    busiest_lane_requests: int
    cpu_seconds: float

    def modelled_seconds(self, times: ServiceTimes) -> float:
        """CPU slowed to the state function's memory, plus the busiest lane's round trips."""
        return (
            self.cpu_seconds * cpu_slowdown(STATE_MEMORY_MB)
            + self.busiest_lane_requests * times.write_round_trip_ms / 1000
        )

    def fits(self, times: ServiceTimes) -> bool:
        return self.modelled_seconds(times) <= STATE_TIMEOUT_SECONDS / 2


def _aggregate(user_data: Callable[[int], bytes], max_bytes: int) -> bytes:
    """A KPL aggregate of as many user records `user_data(n)` as fit `max_bytes`, under one key."""
    body = bytearray(length_delimited(1, b"pk"))
    overhead = len(MAGIC) + DIGEST_BYTES
    n = 0
    while True:
        record = length_delimited(3, varint(1 << 3) + varint(0) + length_delimited(3, user_data(n)))
        if overhead + len(body) + len(record) > max_bytes:
            break
        body += record
        n += 1
    return MAGIC + bytes(body) + hashlib.md5(body, usedforsecurity=False).digest()


def _event_json_bytes(payload: bytes) -> int:
    """A record's share of the invocation payload, as Lambda counts it: its JSON in the event."""
    return len(json.dumps(Pipeline({}).kinesis_event([payload])["Records"][0])) + len(", ")


def _as_many_as_fit(record: Callable[[int], bytes]) -> list[bytes]:
    """Records `record(0)`, `record(1)`, ... (all of about the first one's size) as one event holds."""
    first = record(0)
    count = min(KINESIS_MAPPING_MAX_BATCH, (LAMBDA_INVOCATION_PAYLOAD_BYTES - 100) // (_event_json_bytes(first) + 8))
    return [first, *(record(index) for index in range(1, count))]


def worst_inputs() -> dict[str, list[bytes]]:
    """Each kind's Kinesis records for one event (the aggregates 1 MiB less a margin for the frame)."""
    size = KINESIS_RECORD_MAX_BYTES - 64
    return {
        "empty user records in KPL aggregates (each quarantined)": _as_many_as_fit(
            lambda _: _aggregate(lambda _: b"", size)
        ),
        "conflicting duplicates in KPL aggregates (one TradeID and Version, other Values)": _as_many_as_fit(
            lambda a: _aggregate(lambda n: trade_message("conflicted", 1, f"{a}{n:06}.5"), size)
        ),
        "valid messages in KPL aggregates (distinct trades)": _as_many_as_fit(
            lambda a: _aggregate(lambda n: trade_message(f"t{a}-{n:06}", 1, f"{n}.5"), size)
        ),
        "invalid plain records of one byte": _as_many_as_fit(lambda _: b"x"),
        "valid plain messages (distinct trades)": _as_many_as_fit(lambda n: trade_message(f"p{n}", 1, f"{n}.25")),
    }


class LaneRequests:
    """Requests per sending thread: a write lane's requests go one after another."""

    def __init__(self) -> None:
        self.by_thread: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __call__(self, **_: Any) -> None:
        with self._lock:
            self.by_thread[threading.get_ident()] += 1


def run_worst_event(kind: str, payloads: list[bytes]) -> WorstEvent:
    """Run one event of `payloads` through the state handler, counting its requests per lane."""
    event = Pipeline({}).kinesis_event(payloads)
    assert len(json.dumps(event)) <= LAMBDA_INVOCATION_PAYLOAD_BYTES, f"{kind}: larger than Lambda delivers"
    simulator, lanes = SimulatedRoundTrip(0.0), LaneRequests()
    clients = (aws.dynamodb_client(), aws.state_update_client())
    for client in clients:
        client.meta.events.register("before-send.dynamodb", lanes)
        simulator.attach(client)
    state_handler.version_cache.cache_clear()
    try:
        started = time.process_time()
        summary = state_handler.lambda_handler(event, LambdaContextStub())
        cpu = time.process_time() - started
    finally:
        for client in clients:
            simulator.detach(client)
            client.meta.events.unregister("before-send.dynamodb", lanes)
    return WorstEvent(
        kind=kind,
        kinesis_records=len(payloads),
        user_records=summary["received"],
        written=summary["written"],
        quarantined=summary["quarantined"] + summary["conflicting_duplicates"],
        requests=sum(lanes.by_thread.values()),
        busiest_lane_requests=max(lanes.by_thread.values(), default=0),
        cpu_seconds=cpu,
    )


def run_worst_events(progress: Callable[[str, float], None]) -> list[WorstEvent]:
    """`measure_worst_events` in a child interpreter running the pure-Python protobuf the function
    asset carries (several times slower at reading aggregates than this environment's compiled one)."""
    progress("worst event per kind", 0.0)
    child = subprocess.run(
        [sys.executable, "-c", "from benchmarks.worst_event import print_measured; print_measured()"],
        env={**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"},
        capture_output=True,
        text=True,
        check=True,
    )
    progress("worst event per kind", 1.0)
    return [WorstEvent(**fields) for fields in json.loads(child.stdout.strip().splitlines()[-1])]


def print_measured() -> None:
    """The child's side of `run_worst_events`: its results as one JSON line."""
    from google.protobuf.internal import api_implementation  # noqa: PLC0415

    assert api_implementation.Type() == "python", "measure with the protobuf Lambda runs"
    results = measure_worst_events()
    print(json.dumps([asdict(result) for result in results]))


def measure_worst_events() -> list[WorstEvent]:
    """Every kind of `worst_inputs`, one event each, against a DynamoDB answered in-process."""
    names = {
        "STATE_TABLE": "worst-state",
        "QUARANTINE_TABLE": "worst-quarantine",
        "AWS_ENDPOINT_URL": SIMULATED_ENDPOINT,
        **DUMMY_CREDENTIALS,
    }
    results = []
    with environment(names), quiet_handlers():
        aws.dynamodb_client.cache_clear()
        aws.state_update_client.cache_clear()
        inputs = worst_inputs()
        for kind, payloads in inputs.items():
            results.append(run_worst_event(kind, payloads))
        aws.dynamodb_client.cache_clear()
        aws.state_update_client.cache_clear()
    return results


def worst_event_section(results: list[WorstEvent], times: ServiceTimes) -> list[str]:
    """The markdown section: one row per kind, and whether each fits half the timeout."""
    slowdown = cpu_slowdown(STATE_MEMORY_MB)
    lines = [
        "## The worst event fits its timeout",
        "",
        f"The largest event Lambda delivers (6 MB of event JSON, at most {KINESIS_MAPPING_MAX_BATCH:,} Kinesis "
        "records) of each kind of input, through the real state handler with DynamoDB answered in-process "
        "(`python -m benchmarks worst-event`, `benchmarks/worst_event.py`). Modelled time on Lambda: the "
        f"invocation's CPU times {slowdown:.2f} (a {STATE_MEMORY_MB} MB function) plus the busiest write lane's "
        f"requests times {times.write_round_trip_ms:g} ms; the bound is half the state timeout, "
        f"{STATE_TIMEOUT_SECONDS // 2} s.",
        "",
        "| input | Kinesis records | user records | written | quarantined | requests | busiest lane "
        "| CPU s | modelled s | within half the timeout |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r.kind} | {r.kinesis_records:,} | {r.user_records:,} | {r.written:,} | {r.quarantined:,} "
            f"| {r.requests:,} | {r.busiest_lane_requests:,} | {r.cpu_seconds:.1f} | {r.modelled_seconds(times):.1f} "
            f"| {'yes' if r.fits(times) else '**no**'} |"
        )
    return lines
