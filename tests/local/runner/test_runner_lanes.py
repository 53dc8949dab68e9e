"""ParallelizationFactor on the real ShardPoller: lanes that keep each key in order, and a safe checkpoint.

A scripted in-memory DynamoDB stream shard (`ScriptedShard`) feeds the poller; the function is
the test's own `invoke`, which fails records on purpose and logs every delivery and every
checkpoint under one lock, so the promises Lambda makes for concurrent batches per shard
(Lambda Developer Guide, "Concurrent batches per shard") are checked on the log afterwards.
A scripted Kinesis shard checks what the Kinesis page says of KPL aggregates: "Note that
parallelization factor will not work if you are using Kinesis aggregation."
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregation.kpl import MAGIC
from local.runner import events, pollers
from local.runner.checkpoints import CheckpointStore
from local.runner.execution_environment import InvocationResult
from local.runner.lanes import lane_of
from local.runner.pollers import ShardPoller
from local.runner.stats import RunnerStats
from tests.local.runner.runner_harness import wait_for
from tests.local.runner.test_runner_pollers import ScriptedShard, mapping

KEYS = "abcdefg"
KINESIS_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/s"


def started(
    tmp_path: Path,
    shard: ScriptedShard,
    invoke: Callable[[Mapping[str, Any]], InvocationResult],
    *,
    lanes: int,
    batch_size: int,
    stats: RunnerStats | None = None,
    event_source_arn: str | None = None,
) -> ShardPoller:
    """A started poller of `shard` with `lanes` lanes (of a DynamoDB stream unless `event_source_arn` says)."""
    source = {} if event_source_arn is None else {"event_source_arn": event_source_arn}
    poller = ShardPoller(
        mapping=mapping(parallelization_factor=lanes, batch_size=batch_size, **source),
        shard_id="shard-0",
        reader=shard,
        invoke=invoke,
        checkpoints=CheckpointStore(tmp_path / "checkpoints.json"),
        stats=stats or RunnerStats(None),
        stop=threading.Event(),
        poll_interval_seconds=0.005,
        min_read_interval_seconds=0.0,
    )
    poller.start()
    return poller


def run_to_the_end(
    tmp_path: Path,
    shard: ScriptedShard,
    invoke: Callable[[Mapping[str, Any]], InvocationResult],
    *,
    lanes: int,
    batch_size: int,
    stats: RunnerStats | None = None,
    event_source_arn: str | None = None,
) -> ShardPoller:
    """A poller of `shard` with `lanes` lanes, run until it stops (a closed shard: at its end)."""
    poller = started(
        tmp_path, shard, invoke, lanes=lanes, batch_size=batch_size, stats=stats, event_source_arn=event_source_arn
    )
    poller.join(30)
    return poller


def kinesis_record(sequence_number: int, key: str, *, aggregate: bool = False) -> dict[str, Any]:
    """A Kinesis record as Lambda delivers it: a message of its own, or (`aggregate`) a KPL aggregate
    sent under `key` (the runner looks no further than the magic)."""
    data = MAGIC + b"user records" if aggregate else b'{"TradeID": "%s"}' % key.encode()
    return events.kinesis_record(
        {"SequenceNumber": str(sequence_number), "PartitionKey": key, "Data": data, "ApproximateArrivalTimestamp": 0.0},
        shard_id="shard-0",
        stream_arn=KINESIS_ARN,
        region="us-east-1",
    )


def kinesis_number(record: Mapping[str, Any]) -> int:
    return int(record["kinesis"]["sequenceNumber"])


def keyed_record(sequence_number: int, key: str) -> dict[str, Any]:
    return {
        "eventID": f"shard-0:{sequence_number}",
        "eventName": "INSERT",
        "dynamodb": {
            "SequenceNumber": str(sequence_number),
            "Keys": {"pk": {"S": key}, "sk": {"N": "1"}},
            "ApproximateCreationDateTime": 0.0,
        },
    }


@dataclass
class Delivery:
    started: int  # log clock
    records: list[int]
    finished: int = -1
    succeeded: list[int] = field(default_factory=list)


class LoggedCheckpoints(CheckpointStore):
    """The real store, logging each commit on the test's clock."""

    def __init__(self, path: Path, log: FunctionLog) -> None:
        super().__init__(path)
        self.log = log

    def commit(self, mapping_uuid: str, shard_id: str, sequence_number: str) -> None:
        with self.log.lock:
            self.log.commits.append((self.log.tick(), int(sequence_number)))
        super().commit(mapping_uuid, shard_id, sequence_number)


class FunctionLog:
    """The function under test: fails record n on its first `failures[n]` deliveries."""

    def __init__(self, failures: Mapping[int, int], item_failures: bool) -> None:
        self.lock = threading.Lock()
        self.clock = 0
        self.remaining = dict(failures)
        self.item_failures = item_failures
        self.deliveries: list[Delivery] = []
        self.commits: list[tuple[int, int]] = []

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def invoke(self, event: Mapping[str, Any]) -> InvocationResult:
        records = [int(r["dynamodb"]["SequenceNumber"]) for r in event["Records"]]
        with self.lock:
            delivery = Delivery(self.tick(), records)
            self.deliveries.append(delivery)
        time.sleep(0.002)  # long enough for the lanes to overlap
        with self.lock:
            failing = [n for n in records if self.remaining.get(n, 0) > 0]
            for n in failing:
                self.remaining[n] -= 1
            delivery.finished = self.tick()
            if not failing:
                delivery.succeeded = records
                return InvocationResult(payload=None)
            if self.item_failures:
                delivery.succeeded = records[: records.index(failing[0])]
                return InvocationResult(payload={"batchItemFailures": [{"itemIdentifier": str(n)} for n in failing]})
            return InvocationResult(payload=None, error={"errorType": "Planned", "errorMessage": str(failing)})


@dataclass(frozen=True)
class Scenario:
    """A shard's records (record n has key `keys[n]`), the mapping's settings, and the planned failures."""

    keys: list[str]
    lanes: int
    batch_size: int
    failures: dict[int, int]  # record -> how many of its deliveries fail
    retries: int  # MaximumRetryAttempts
    bisect: bool
    item_failures: bool  # ReportBatchItemFailures, and the function names the failing records


scenarios = st.builds(
    Scenario,
    keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=30),
    lanes=st.integers(2, 4),
    batch_size=st.integers(1, 4),
    failures=st.dictionaries(st.integers(0, 29), st.integers(1, 3), max_size=6),
    retries=st.sampled_from([-1, 0, 1, 2]),
    bisect=st.booleans(),
    item_failures=st.booleans(),
)


def run_shard(scenario: Scenario, directory: Path) -> FunctionLog:
    """Poll the closed shard to its end with the scenario's mapping; the function's log."""
    function = FunctionLog(scenario.failures, scenario.item_failures)
    shard = ScriptedShard()
    shard.records.extend(keyed_record(n, key) for n, key in enumerate(scenario.keys))
    shard.closed = True
    poller = ShardPoller(
        mapping=mapping(
            parallelization_factor=scenario.lanes,
            batch_size=scenario.batch_size,
            maximum_retry_attempts=scenario.retries,
            bisect_batch_on_function_error=scenario.bisect,
            report_batch_item_failures=scenario.item_failures,
        ),
        shard_id="shard-0",
        reader=shard,
        invoke=function.invoke,
        checkpoints=LoggedCheckpoints(directory / "checkpoints.json", function),
        stats=RunnerStats(None),
        stop=threading.Event(),
        poll_interval_seconds=0.005,
        min_read_interval_seconds=0.0,
        retry_backoff_start_seconds=0.001,
    )
    poller.start()
    poller.join(30)
    assert poller.finished, "a closed shard is processed to its end"
    return function


def assert_each_key_in_one_lane_and_in_order(scenario: Scenario, deliveries: list[Delivery]) -> None:
    key_of = dict(enumerate(scenario.keys))
    for d in deliveries:
        assert len(d.records) <= scenario.batch_size
        assert len({lane_of(keyed_record(n, key_of[n]), scenario.lanes) for n in d.records}) == 1, "one lane's"
        assert d.records == sorted(d.records), "a batch holds its records in shard order"
    for i, d in enumerate(deliveries):
        for later in deliveries[i + 1 :]:
            overlapping = later.started < d.finished
            shared = {key_of[n] for n in d.records} & {key_of[n] for n in later.records}
            assert not (overlapping and shared), f"key(s) {shared} in two batches at once"
            for n in later.records:
                overtaken = [m for m in d.records if m > n and key_of[m] == key_of[n]]
                assert not overtaken or n in d.records, f"record {n} re-delivered after {overtaken} of its key"


def assert_no_checkpoint_passed_an_unfinished_record(function: FunctionLog) -> None:
    """Finished: succeeded, or attempted and never again (skipped once its retries were spent)."""
    deliveries = function.deliveries
    for at, checkpoint in function.commits:
        for n in range(checkpoint + 1):
            succeeded = any(n in d.succeeded and d.finished < at for d in deliveries)
            attempted_before = any(n in d.records and d.finished < at for d in deliveries)
            attempted_again = any(n in d.records and d.finished > at for d in deliveries)
            assert succeeded or (attempted_before and not attempted_again), (
                f"checkpoint {checkpoint} passed record {n} before it was finished"
            )


@settings(max_examples=100, database=None, suppress_health_check=list(HealthCheck))
@given(scenario=scenarios)
def test_lanes_keep_each_key_in_order_and_the_checkpoint_never_passes_an_unfinished_record(
    tmp_path_factory: pytest.TempPathFactory, scenario: Scenario
) -> None:
    function = run_shard(scenario, tmp_path_factory.mktemp("lanes"))
    assert_each_key_in_one_lane_and_in_order(scenario, function.deliveries)
    assert_no_checkpoint_passed_an_unfinished_record(function)
    records = range(len(scenario.keys))
    assert function.commits[-1][1] == len(scenario.keys) - 1
    assert all(any(n in d.records for d in function.deliveries) for n in records), "every record delivered"
    if scenario.retries == -1:
        assert all(any(n in d.succeeded for d in function.deliveries) for n in records), "retried until success"


def test_the_lanes_of_one_shard_run_their_batches_at_once(tmp_path: Path) -> None:
    """Three lanes, records of three keys in three different lanes: three batches in flight together."""
    lanes = 3
    keys: dict[int, str] = {}
    for candidate in (f"key-{i}" for i in range(100)):
        lane = lane_of(keyed_record(0, candidate), lanes)
        keys.setdefault(lane, candidate)
    together = threading.Barrier(lanes, timeout=10)
    shard = ScriptedShard()
    shard.records.extend(keyed_record(n, keys[n % lanes]) for n in range(6))
    shard.closed = True
    stats = RunnerStats(None)

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        together.wait()  # breaks (and the test fails) unless all three lanes are in flight
        return InvocationResult(payload=None)

    poller = run_to_the_end(tmp_path, shard, invoke, lanes=lanes, batch_size=1, stats=stats)
    assert poller.finished and not together.broken
    assert poller.shard_stats.peak_batches_in_flight == lanes
    assert poller.checkpoints.get("m", "shard-0") == "5"


def test_a_lane_that_crashes_restarts_the_shard_from_its_checkpoint_and_nothing_is_lost(tmp_path: Path) -> None:
    """An unexpected error in a lane (not a function error) stops every lane; polling resumes from
    the checkpoint, so the records after it are delivered again and the shard still ends finished."""
    shard = ScriptedShard()
    shard.records.extend(keyed_record(n, KEYS[n % len(KEYS)]) for n in range(12))
    shard.closed = True
    delivered: list[int] = []
    crashed = threading.Event()

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        records = [int(r["dynamodb"]["SequenceNumber"]) for r in event["Records"]]
        if 6 in records and not crashed.is_set():
            crashed.set()
            raise RuntimeError("the runner's own bug")
        delivered.extend(records)
        return InvocationResult(payload=None)

    poller = run_to_the_end(tmp_path, shard, invoke, lanes=3, batch_size=2)
    assert crashed.is_set() and poller.finished
    assert set(delivered) == set(range(12)), "every record delivered after the restart"
    assert poller.checkpoints.get("m", "shard-0") == "11"


def test_after_a_lane_crashes_no_key_is_sent_again_while_its_invocation_is_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lane A's runner error restarts the shard from its checkpoint while lane B's batch is still
    in flight: the new lanes may send B's key only after that invocation ended (Lambda never runs
    two invocations of one key at once), however long it takes past the restart pause."""
    monkeypatch.setattr(pollers, "RETRY_BACKOFF_CAP_SECONDS", 0.05)  # the pause before the restart
    keys: dict[int, str] = {}
    for candidate in (f"key-{i}" for i in range(100)):
        keys.setdefault(lane_of(keyed_record(0, candidate), 2), candidate)
    shard = ScriptedShard()
    shard.records.extend(keyed_record(n, keys[n % 2]) for n in range(4))  # lanes 0, 1, 0, 1
    shard.closed = True
    lock = threading.Lock()
    in_flight: set[str] = set()
    overlaps: list[str] = []
    lane_one_in_flight = threading.Event()
    crashed = threading.Event()

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        batch_keys = {r["dynamodb"]["Keys"]["pk"]["S"] for r in event["Records"]}
        with lock:
            overlaps.extend(batch_keys & in_flight)
            in_flight.update(batch_keys)
        try:
            if keys[0] in batch_keys and not crashed.is_set():
                lane_one_in_flight.wait(5)
                crashed.set()
                raise RuntimeError("the runner's own bug")
            if keys[1] in batch_keys and not lane_one_in_flight.is_set():
                lane_one_in_flight.set()
                time.sleep(0.5)  # still running when the shard restarts
            return InvocationResult(payload=None)
        finally:
            with lock:
                in_flight.difference_update(batch_keys)

    poller = run_to_the_end(tmp_path, shard, invoke, lanes=2, batch_size=1)
    assert crashed.is_set() and poller.finished
    assert overlaps == [], f"key(s) {overlaps} sent while their invocation was in flight"


def test_a_kinesis_shard_of_kpl_aggregates_runs_one_batch_at_a_time_whatever_the_factor(tmp_path: Path) -> None:
    """ParallelizationFactor 3 and aggregates under nine partition keys (three a lane, had they been
    plain): one batch of the shard in flight at a time, in shard order, each record once."""
    shard = ScriptedShard()
    shard.records.extend(kinesis_record(n, f"carrier-{n}", aggregate=True) for n in range(9))
    shard.closed = True
    lock = threading.Lock()
    in_flight: list[int] = []
    peak = 0
    delivered: list[int] = []

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        nonlocal peak
        numbers = [kinesis_number(record) for record in event["Records"]]
        with lock:
            in_flight.append(1)
            peak = max(peak, len(in_flight))
        time.sleep(0.005)  # long enough for lanes, were there any, to overlap
        with lock:
            in_flight.pop()
            delivered.extend(numbers)
        return InvocationResult(payload=None)

    poller = run_to_the_end(tmp_path, shard, invoke, lanes=3, batch_size=2, event_source_arn=KINESIS_ARN)
    assert poller.finished
    assert peak == 1, "one batch of the shard at a time"
    assert delivered == list(range(9)), "in shard order, each once"
    assert (poller.lane_count, poller.shard_stats.lanes) == (1, 1)
    assert poller.checkpoints.get("m", "shard-0") == "8"


def test_a_kinesis_shard_gives_up_its_lanes_for_one_once_it_carries_kpl_aggregates(tmp_path: Path) -> None:
    """Plain records of three keys in three lanes run at once (the factor works), then aggregates
    arrive: from then on one batch at a time, every record delivered (those after the checkpoint
    perhaps again), and the shard ends finished at its last record."""
    lanes = 3
    keys: dict[int, str] = {}
    for candidate in (f"trade-{i}" for i in range(100)):
        keys.setdefault(lane_of(kinesis_record(0, candidate), lanes), candidate)
    shard = ScriptedShard()
    shard.records.extend(kinesis_record(n, keys[n]) for n in range(lanes))
    together = threading.Barrier(lanes, timeout=10)
    aggregates_sent = threading.Event()
    lock = threading.Lock()
    in_flight: list[int] = []
    peak_with_aggregates = 0
    delivered: list[int] = []

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        nonlocal peak_with_aggregates
        numbers = [kinesis_number(record) for record in event["Records"]]
        if not aggregates_sent.is_set():
            together.wait()  # breaks (and the test fails) unless the three plain lanes are in flight at once
        with lock:
            in_flight.append(1)
            if aggregates_sent.is_set():
                peak_with_aggregates = max(peak_with_aggregates, len(in_flight))
        time.sleep(0.005)
        with lock:
            in_flight.pop()
            delivered.extend(numbers)
        return InvocationResult(payload=None)

    poller = started(tmp_path, shard, invoke, lanes=lanes, batch_size=1, event_source_arn=KINESIS_ARN)
    wait_for(lambda: set(delivered) == set(range(lanes)), 10, "the plain records, in three lanes")
    assert poller.lane_count == lanes
    aggregates_sent.set()
    shard.records.extend(kinesis_record(n, f"carrier-{n}", aggregate=True) for n in range(lanes, 12))
    shard.closed = True
    poller.join(30)
    assert poller.finished and not together.broken
    assert peak_with_aggregates == 1, "one batch of the shard at a time once it carries aggregates"
    assert set(delivered) == set(range(12))
    first_deliveries = [n for index, n in enumerate(delivered) if n >= lanes and n not in delivered[:index]]
    assert first_deliveries == list(range(lanes, 12)), "the aggregates in shard order"
    assert (poller.lane_count, poller.shard_stats.lanes) == (1, 1)
    assert poller.checkpoints.get("m", "shard-0") == "11"
