"""ShardPoller against a scripted in-memory shard: batching window, iterator expiry, closed shards.

These behaviours are awkward to provoke in the emulator (its iterators never expire, its
shards never close), so a fake `ShardReader` drives the real poller here.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local.runner import events, pollers
from local.runner.checkpoints import CheckpointStore
from local.runner.discovery import MappingConfig
from local.runner.execution_environment import InvocationResult
from local.runner.pollers import ReadResult, ShardPoller, ShardReader
from local.runner.redelivery import REORDERED, SHAPES, RedeliveryPolicy, reshape
from local.runner.stats import RunnerStats
from tests.local.runner.runner_harness import wait_for


def record(sequence_number: int, created_at: float = 0.0) -> dict[str, Any]:
    return {
        "eventID": f"shard-0:{sequence_number}",
        "eventName": "INSERT",
        "dynamodb": {"SequenceNumber": str(sequence_number), "ApproximateCreationDateTime": created_at},
    }


class ScriptedShard(ShardReader):
    """A shard whose records appear when the test appends them; iterators can be made to expire.

    `page_size` caps what one read returns below its limit, as GetRecords may.
    """

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.closed = False
        self.expire_next_read = False
        self.iterators_requested: list[tuple[str, str | None]] = []
        self.page_size: int | None = None
        self.reads = 0

    def list_shards(self) -> list[tuple[str, str | None]]:
        return [("shard-0", None)]

    def iterator(self, shard_id: str, position: str, sequence_number: str | None = None) -> str:
        self.iterators_requested.append((position, sequence_number))
        if position == "TRIM_HORIZON":
            return "0"
        if position == "LATEST":
            return str(len(self.records))
        return str(int(sequence_number or 0) + 1)  # AFTER_SEQUENCE_NUMBER; sequence n is at index n

    def read(self, shard_id: str, iterator: str, limit: int) -> ReadResult:
        if self.expire_next_read:
            self.expire_next_read = False
            raise ClientError({"Error": {"Code": "ExpiredIteratorException", "Message": "expired"}}, "GetRecords")
        self.reads += 1
        start = int(iterator)
        batch = self.records[start : start + min(limit, self.page_size or limit)]
        end = start + len(batch)
        next_iterator = None if self.closed and end == len(self.records) else str(end)
        return ReadResult(batch, next_iterator, 0)


def mapping(**overrides: Any) -> MappingConfig:
    settings: dict[str, Any] = {
        "uuid": "m",
        "function_name": "f",
        "event_source_arn": "arn:aws:dynamodb:us-east-1:1:table/t/stream/x",
        "batch_size": 10,
        "maximum_batching_window_seconds": 0.0,
        "starting_position": "TRIM_HORIZON",
        "maximum_retry_attempts": -1,
        "bisect_batch_on_function_error": False,
        "report_batch_item_failures": False,
        "filter_patterns": (),
        "parallelization_factor": 1,
        "tumbling_window_seconds": 0,
        "enabled": True,
    }
    return MappingConfig(**{**settings, **overrides})


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        config: MappingConfig,
        redelivery: RedeliveryPolicy | None = None,
        *,
        poll_interval_seconds: float = 0.01,
        active_poll_interval_seconds: float = pollers.ACTIVE_POLL_INTERVAL_SECONDS,
        min_read_interval_seconds: float | None = 0.0,
    ) -> None:
        """`min_read_interval_seconds`: none by default (Lambda's poll rate only slows these tests); None:
        Lambda's."""
        self.shard = ScriptedShard()
        self.batches: list[list[str]] = []
        self.stop = threading.Event()
        self.checkpoints = CheckpointStore(tmp_path / "checkpoints.json")
        self.poller = ShardPoller(
            mapping=config,
            shard_id="shard-0",
            reader=self.shard,
            invoke=self.invoke,
            checkpoints=self.checkpoints,
            stats=RunnerStats(None),
            stop=self.stop,
            poll_interval_seconds=poll_interval_seconds,
            active_poll_interval_seconds=active_poll_interval_seconds,
            redelivery=redelivery,
            min_read_interval_seconds=min_read_interval_seconds,
        )

    def invoke(self, event: Mapping[str, Any]) -> InvocationResult:
        self.batches.append([r["eventID"].split(":")[1] for r in event["Records"]])
        return InvocationResult(payload=None)

    def add(self, *sequence_numbers: int, created_at: float = 0.0) -> None:
        self.shard.records.extend(record(n, created_at) for n in sequence_numbers)


def test_the_batching_window_gathers_records_until_it_passes_or_the_batch_is_full(tmp_path: Path) -> None:
    harness = Harness(tmp_path, mapping(maximum_batching_window_seconds=0.5, batch_size=3))
    harness.poller.start()
    try:
        harness.add(0)
        time.sleep(0.2)
        harness.add(1)
        assert harness.batches == [], "still inside the window"
        wait_for(lambda: harness.batches == [["0", "1"]], timeout_seconds=2, what="the window to pass")
        harness.add(2, 3, 4)
        wait_for(lambda: len(harness.batches) == 2, timeout_seconds=0.3, what="a full batch, sent at once")
        assert harness.batches[1] == ["2", "3", "4"]
    finally:
        harness.stop.set()


def test_an_expired_iterator_is_replaced_from_the_last_record_read(tmp_path: Path) -> None:
    harness = Harness(tmp_path, mapping())
    harness.poller.start()
    try:
        harness.add(0, 1)
        wait_for(lambda: len(harness.batches) == 1)
        harness.shard.expire_next_read = True
        harness.add(2)
        wait_for(lambda: len(harness.batches) == 2)
    finally:
        harness.stop.set()
    assert harness.batches == [["0", "1"], ["2"]], "nothing skipped, nothing repeated"
    assert ("AFTER_SEQUENCE_NUMBER", "1") in harness.shard.iterators_requested


def test_a_latest_iterator_that_expired_before_any_record_was_read_is_taken_again_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No AWS API names where a LATEST iterator stood: what was written meanwhile is skipped, and said so."""
    harness = Harness(tmp_path, mapping(starting_position="LATEST"))
    harness.poller.prepare()
    harness.add(0)
    harness.shard.expire_next_read = True
    with caplog.at_level(logging.ERROR, logger="local.runner.pollers"):
        assert harness.poller._read_more()
    assert harness.poller._iterator is None
    assert harness.poller._fresh_iterator() == "1", "a new LATEST iterator, after record 0"
    assert any("LATEST iterator expired before any record was read" in message for message in caplog.messages)


def test_a_closed_shard_is_drained_then_its_poller_finishes(tmp_path: Path) -> None:
    harness = Harness(tmp_path, mapping(batch_size=2))
    harness.add(0, 1, 2)
    harness.shard.closed = True
    harness.poller.start()
    harness.poller.join(5)
    assert harness.poller.finished
    assert harness.batches == [["0", "1"], ["2"]]
    assert harness.checkpoints.get("m", "shard-0") == "2"


def test_a_restarted_poller_starts_after_its_checkpoint(tmp_path: Path) -> None:
    harness = Harness(tmp_path, mapping(starting_position="LATEST"))
    harness.add(0, 1, 2)
    harness.checkpoints.commit("m", "shard-0", "1")
    harness.poller.start()
    try:
        wait_for(lambda: len(harness.batches) == 1)
    finally:
        harness.stop.set()
    assert harness.batches == [["2"]]
    assert harness.shard.iterators_requested[0] == ("AFTER_SEQUENCE_NUMBER", "1")


def test_a_batch_in_flight_when_the_runner_died_is_redelivered_identically(tmp_path: Path) -> None:
    """Records that arrived after the kill must not join the interrupted batch: the map
    stage keys its delta item by the batch's hash, as Lambda retries identical batches."""
    harness = Harness(tmp_path, mapping(batch_size=10))
    harness.add(0, 1, 2, 3)
    harness.checkpoints.commit("m", "shard-0", "0")
    harness.checkpoints.begin("m", "shard-0", "2")  # the batch [1, 2] was in flight at the kill
    harness.poller.start()
    try:
        wait_for(lambda: len(harness.batches) == 2)
    finally:
        harness.stop.set()
    assert harness.batches == [["1", "2"], ["3"]]
    assert harness.checkpoints.get("m", "shard-0") == "3"
    assert harness.checkpoints.in_flight_end("m", "shard-0") is None


def test_a_batch_is_recorded_in_flight_before_its_first_delivery(tmp_path: Path) -> None:
    seen_in_flight: list[str | None] = []
    harness = Harness(tmp_path, mapping())

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        seen_in_flight.append(CheckpointStore(tmp_path / "checkpoints.json").in_flight_end("m", "shard-0"))
        return InvocationResult(payload=None)

    harness.poller.invoke = invoke
    harness.add(0, 1, 2)
    harness.poller.start()
    try:
        wait_for(lambda: harness.checkpoints.get("m", "shard-0") == "2")
    finally:
        harness.stop.set()
    assert seen_in_flight == ["2"], "persisted (on disk) before the function ran"
    assert CheckpointStore(tmp_path / "checkpoints.json").in_flight_end("m", "shard-0") is None


def sequence_numbers_of(event: Mapping[str, Any]) -> list[int]:
    return [int(r["dynamodb"]["SequenceNumber"]) for r in event["Records"]]


def test_a_tumbling_window_names_the_shard_carries_state_and_closes_with_a_final_invocation(tmp_path: Path) -> None:
    events: list[Mapping[str, Any]] = []
    harness = Harness(tmp_path, mapping(tumbling_window_seconds=60, batch_size=10))

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        events.append(event)
        if len(events) == 1:
            return InvocationResult(payload={"no": "state"})  # Lambda counts this a failure
        return InvocationResult(payload={"state": {"seen": len(events)}})

    harness.poller.invoke = invoke
    harness.add(0, 1, created_at=120.5)  # window [120, 180)
    harness.add(2, created_at=185.0)  # window [180, 240): never in the same batch
    harness.shard.closed = True
    harness.poller.start()
    harness.poller.join(10)
    assert harness.poller.finished
    summary = [(sequence_numbers_of(e), e["window"]["start"][-9:], e["isFinalInvokeForWindow"]) for e in events]
    assert summary == [
        ([0, 1], "00:02:00Z", False),
        ([0, 1], "00:02:00Z", False),  # retried: the response had no state
        ([], "00:02:00Z", True),  # the first window closes before the next one opens
        ([2], "00:03:00Z", False),
        ([], "00:03:00Z", True),  # the shard is closed: its last window closes too
    ]
    assert all(e["shardId"] == "shard-0" and e["eventSourceARN"].endswith("/stream/x") for e in events)
    states = [e["state"] for e in events]
    assert states == [{}, {}, {"seen": 2}, {}, {"seen": 4}], "state carried within a window, fresh in the next"
    assert harness.checkpoints.get("m", "shard-0") == "2"


def test_without_a_tumbling_window_events_hold_only_records(tmp_path: Path) -> None:
    events: list[Mapping[str, Any]] = []
    harness = Harness(tmp_path, mapping())

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        events.append(event)
        return InvocationResult(payload=None)

    harness.poller.invoke = invoke
    harness.add(0, created_at=120.0)
    harness.add(1, created_at=500.0)
    harness.shard.closed = True
    harness.poller.start()
    harness.poller.join(5)
    assert [list(event) for event in events] == [["Records"]]
    assert sequence_numbers_of(events[0]) == [0, 1]


@dataclass(frozen=True)
class Redeliveries:
    """A closed shard of `records` records, a mapping, a redelivery policy and the function's planned failures."""

    records: int
    batch_size: int
    tumbling_window: bool
    seed: int
    again_after_success_pct: float
    failing: tuple[bool, ...]  # attempt k fails when failing[k % len(failing)]; one in each cycle succeeds


redeliveries = st.builds(
    Redeliveries,
    records=st.integers(1, 30),
    batch_size=st.integers(1, 6),
    tumbling_window=st.booleans(),
    seed=st.integers(0, 2**16),
    again_after_success_pct=st.sampled_from([0.0, 25.0, 100.0]),
    failing=st.lists(st.booleans(), min_size=1, max_size=4).map(lambda plan: (*plan, False)),
)


@dataclass
class Attempt:
    records: list[int]
    committed: int  # the checkpoint when it was sent (-1: none)
    succeeded: bool


def deliver_with_redeliveries(case: Redeliveries, directory: Path) -> tuple[list[Attempt], ShardPoller]:
    """Poll the closed shard to its end, reshaped retries and duplicates on; every non-empty attempt."""
    attempts: list[Attempt] = []
    checkpoints = CheckpointStore(directory / "checkpoints.json")
    shard = ScriptedShard()
    shard.records.extend(record(n, created_at=120.0) for n in range(case.records))
    shard.closed = True
    calls = 0

    def invoke(event: Mapping[str, Any]) -> InvocationResult:
        nonlocal calls
        response: dict[str, Any] | None = {"state": {}} if case.tumbling_window else None
        if not event["Records"]:
            return InvocationResult(payload=response)  # a window's final invocation
        failed = case.failing[calls % len(case.failing)]
        calls += 1
        committed = int(checkpoints.get("m", "shard-0") or -1)
        attempts.append(Attempt(sequence_numbers_of(event), committed, not failed))
        if failed:
            return InvocationResult(error={"errorType": "InjectedFailure", "errorMessage": "on purpose"})
        return InvocationResult(payload=response)

    poller = ShardPoller(
        mapping=mapping(batch_size=case.batch_size, tumbling_window_seconds=60 if case.tumbling_window else 0),
        shard_id="shard-0",
        reader=shard,
        invoke=invoke,
        checkpoints=checkpoints,
        stats=RunnerStats(None),
        stop=threading.Event(),
        poll_interval_seconds=0.005,
        redelivery=RedeliveryPolicy(frozenset({"f"}), case.seed, case.again_after_success_pct),
        retry_backoff_start_seconds=0.0001,
        min_read_interval_seconds=0.0,
    )
    poller.start()
    poller.join(30)
    assert poller.finished, "a closed shard is processed to its end"
    return attempts, poller


def assert_what_the_coverage_ranges_assume(case: Redeliveries, attempts: list[Attempt]) -> None:
    """Of every attempt: its records, sorted, are consecutive in the shard and include the first one
    not yet committed; records delivered for the first time come in order; only a tumbling-window
    mapping's attempts are ever out of order (docs/design.md, "What a retry holds")."""
    delivered: set[int] = set()
    for attempt in attempts:
        records = attempt.records
        assert sorted(records) == list(range(min(records), max(records) + 1)), f"{records}: a consecutive run"
        assert min(records) <= attempt.committed + 1 <= max(records), "includes the first record not committed"
        assert len(records) <= case.batch_size
        for position, n in enumerate(records):
            if n not in delivered:
                earlier, later = records[:position], records[position + 1 :]
                assert all(m < n for m in earlier) and all(m > n for m in later), f"{records}: {n} new, out of order"
        if not case.tumbling_window:
            assert records == sorted(records), "in order: Lambda reorders only retries with a tumbling window"
        delivered.update(records)


@settings(max_examples=40, database=None, suppress_health_check=list(HealthCheck), deadline=None)
@given(case=redeliveries)
def test_retries_in_any_shape_and_order_and_duplicates_after_success_keep_what_the_map_relies_on(
    tmp_path_factory: pytest.TempPathFactory, case: Redeliveries
) -> None:
    attempts, poller = deliver_with_redeliveries(case, tmp_path_factory.mktemp("redeliveries"))
    assert_what_the_coverage_ranges_assume(case, attempts)
    assert poller.checkpoints.get("m", "shard-0") == str(case.records - 1)
    succeeded = set().union(*(set(a.records) for a in attempts if a.succeeded))
    assert succeeded == set(range(case.records)), "every record delivered to a success"


@pytest.mark.parametrize("tumbling_window", [False, True])
def test_every_redelivery_shape_happens(tmp_path: Path, tumbling_window: bool) -> None:
    """Two attempts in three fail, a success comes again one time in four: every shape is made, and
    out of order only with a tumbling window."""
    case = Redeliveries(40, 4, tumbling_window, 1, 25.0, (True, True, False))
    attempts, poller = deliver_with_redeliveries(case, tmp_path)
    assert_what_the_coverage_ranges_assume(case, attempts)
    counters = poller.stats.function("f")
    expected = {*SHAPES, REORDERED} if tumbling_window else set(SHAPES)
    assert set(counters.reshaped_retries) - {"identical"} == expected, counters.reshaped_retries
    assert counters.again_after_success > 0
    assert any(
        earlier.succeeded and sorted(earlier.records) == sorted(later.records)
        for earlier, later in itertools.pairwise(attempts)
    ), "a success delivered again"
    if tumbling_window:
        assert any(a.records != sorted(a.records) for a in attempts), "a retry out of order"


def blob_record(sequence_number: int, size: int) -> dict[str, Any]:
    """A record whose image holds a string of `size` characters."""
    plain = record(sequence_number)
    return {**plain, "dynamodb": {**plain["dynamodb"], "NewImage": {"b": {"S": "x" * size}}}}


@pytest.mark.parametrize(("over", "batches"), [(0, [[0, 1, 2], [3]]), (1, [[0, 1], [2, 3]])])
def test_a_batch_is_cut_where_its_event_would_pass_lambdas_6_mb(
    tmp_path: Path, over: int, batches: list[list[int]]
) -> None:
    """The event's JSON as sent counts, to the byte: three records make exactly 6 MB, or one byte more."""

    def size(records: list[dict[str, Any]]) -> int:
        return events.json_size(events.invocation_event(records, shard_id="s", event_source_arn="a"))

    limit = events.INVOCATION_PAYLOAD_LIMIT_BYTES
    first_two = [blob_record(0, 2_000_000), blob_record(1, 2_000_000)]
    third = blob_record(2, limit - size([*first_two, blob_record(2, 0)]) + over)
    assert size([*first_two, third]) == limit + over
    harness = Harness(tmp_path, mapping(batch_size=10))
    harness.shard.records.extend([*first_two, third, blob_record(3, 10)])
    harness.shard.closed = True
    harness.poller.start()
    harness.poller.join(10)
    assert harness.poller.finished
    assert [[int(n) for n in batch] for batch in harness.batches] == batches


@dataclass(frozen=True)
class FailedRun:
    """A failed attempt `start..` of `failed` records, the checkpoint inside it, what was read after it."""

    start: int
    failed: int
    committed_inside: int  # the checkpoint is this many records into the run (0: just before it)
    following: int  # records read after it, never delivered
    batch_size: int
    fitting: int  # the most records an event holds (standing for the 6 MB)
    reorder: bool
    seed: int


failed_runs = st.builds(
    FailedRun,
    start=st.integers(0, 20),
    failed=st.integers(1, 6),
    committed_inside=st.integers(0, 5),
    following=st.integers(0, 6),
    batch_size=st.integers(1, 8),
    fitting=st.integers(1, 8),
    reorder=st.booleans(),
    seed=st.integers(0, 2**16),
)


@settings(max_examples=300, database=None, deadline=None)
@given(case=failed_runs)
def test_a_reshaped_retry_is_a_run_from_the_first_record_not_committed_with_new_records_in_order(
    case: FailedRun,
) -> None:
    """`reshape` alone: the retry of a failed run (itself perhaps a shifted retry, starting before the
    checkpoint) is a run that includes the first record not committed, fits, and has only records
    delivered before out of order: those read after the run, new, come last and in order."""
    failed_count = min(case.failed, case.batch_size)
    end = case.start + failed_count  # the first record after the failed run
    committed = case.start - 1 + min(case.committed_inside, failed_count - 1)
    most = max(case.fitting, failed_count)  # a batch that was sent fitted
    redelivery = reshape(
        [record(n) for n in range(case.start, end)],
        following=[record(n) for n in range(end, end + case.following)],
        delivered_before=[record(n) for n in range(max(0, case.start - case.batch_size), case.start)],
        committed=None if committed < 0 else str(committed),
        batch_size=case.batch_size,
        rng=random.Random(case.seed),
        reorder=case.reorder,
        fits=lambda attempt: len(attempt) <= most,
    )
    numbers = [int(events.sequence_number_of(r)) for r in redelivery.records]
    assert sorted(numbers) == list(range(min(numbers), max(numbers) + 1)), numbers
    assert min(numbers) <= committed + 1 <= max(numbers)
    assert len(numbers) <= min(case.batch_size, most)
    new = [n for n in numbers if n >= end]
    assert numbers[len(numbers) - len(new) :] == sorted(new), f"{numbers}: new records last, in order"
    assert case.reorder or numbers == sorted(numbers)
    assert redelivery.reordered == (numbers != sorted(numbers))


# ------------------------------------------------------------------ when to read
# A pause of a minute is longer than any wait below: each of these tests passes only
# through the behaviour it names, never because a short pause happened to end in time.

LONG_PAUSE = 60.0


def test_a_read_that_returned_records_is_followed_by_another_at_once(tmp_path: Path) -> None:
    """GetRecords may return fewer records than there are: the poller reads on without pausing."""
    harness = Harness(
        tmp_path,
        mapping(batch_size=3, maximum_batching_window_seconds=LONG_PAUSE),
        poll_interval_seconds=LONG_PAUSE,
        active_poll_interval_seconds=LONG_PAUSE,
    )
    harness.shard.page_size = 1
    harness.add(0, 1, 2)
    harness.poller.start()
    try:
        wait_for(lambda: len(harness.batches) == 1, timeout_seconds=10, what="three reads in a row")
    finally:
        harness.stop.set()
        harness.poller.wake()
    assert harness.batches == [["0", "1", "2"]], "a full batch, the window notwithstanding"


def test_a_pause_ends_when_the_open_batching_window_does(tmp_path: Path) -> None:
    harness = Harness(
        tmp_path,
        mapping(batch_size=10, maximum_batching_window_seconds=0.3),
        poll_interval_seconds=LONG_PAUSE,
        active_poll_interval_seconds=LONG_PAUSE,
    )
    harness.add(0)
    harness.poller.start()
    try:
        wait_for(lambda: len(harness.batches) == 1, timeout_seconds=10, what="the window to pass")
    finally:
        harness.stop.set()
        harness.poller.wake()
    assert harness.batches == [["0"]]


def test_wake_ends_a_pause_and_the_new_records_are_read_at_once(tmp_path: Path) -> None:
    harness = Harness(tmp_path, mapping(), poll_interval_seconds=LONG_PAUSE, active_poll_interval_seconds=LONG_PAUSE)
    harness.add(0)
    harness.poller.start()
    try:
        wait_for(lambda: harness.shard.reads == 2, what="the empty read after the batch; then a long pause")
        harness.add(1, 2)
        harness.poller.wake()
        wait_for(lambda: len(harness.batches) == 2, timeout_seconds=10, what="the woken poller")
    finally:
        harness.stop.set()
        harness.poller.wake()
    assert harness.batches == [["0"], ["1", "2"]]


def test_a_shard_that_just_had_records_is_read_again_sooner_than_an_idle_one(tmp_path: Path) -> None:
    harness = Harness(tmp_path, mapping(), poll_interval_seconds=LONG_PAUSE, active_poll_interval_seconds=0.01)
    harness.add(0)
    harness.poller.start()
    try:
        wait_for(lambda: harness.shard.reads >= 2, what="the empty read after the batch")
        harness.add(1)  # no wake: the adaptive pause alone finds it, long before the idle one would
        wait_for(lambda: len(harness.batches) == 2, timeout_seconds=10, what="the short pause after records")
    finally:
        harness.stop.set()
        harness.poller.wake()


@pytest.mark.parametrize(("source", "most_reads"), [("dynamodb", 5), ("kinesis", 2)])
def test_a_busy_shard_is_read_no_more_often_than_lambda_polls(tmp_path: Path, source: str, most_reads: int) -> None:
    """A shard that always has more records (one a read), woken after every batch: 4 reads a second
    on DynamoDB Streams, 1 on Kinesis, as Lambda polls; each read asks for all GetRecords returns."""
    arn = {
        "dynamodb": "arn:aws:dynamodb:us-east-1:1:table/t/stream/x",
        "kinesis": "arn:aws:kinesis:us-east-1:1:stream/s",
    }
    harness = Harness(
        tmp_path,
        mapping(event_source_arn=arn[source]),
        poll_interval_seconds=0.001,
        active_poll_interval_seconds=0.001,
        min_read_interval_seconds=None,
    )
    limits: list[int] = []
    read = harness.shard.read

    def read_and_wake(shard_id: str, iterator: str, limit: int) -> ReadResult:
        limits.append(limit)
        harness.poller.wake()  # as an upstream function finishing would
        return read(shard_id, iterator, limit)

    harness.shard.read = read_and_wake  # type: ignore[method-assign]
    harness.shard.page_size = 1
    harness.add(*range(100))
    harness.poller.start()
    try:
        time.sleep(1.0)
    finally:
        harness.stop.set()
        harness.poller.wake()
    assert most_reads - 1 <= harness.shard.reads <= most_reads, harness.shard.reads
    assert set(limits) == {pollers.READ_LIMITS[source]}


def test_the_pause_after_records_doubles_up_to_the_idle_one_which_an_idle_shard_keeps() -> None:
    def pause(empty_reads: int | None) -> float:
        return pollers.pause_after_empty_reads(empty_reads, active_seconds=0.05, idle_seconds=0.2)

    assert pause(None) == 0.2, "a shard that never had records is polled at the idle pace"
    assert [pause(n) for n in (1, 2, 3, 4, 100)] == [0.05, 0.1, 0.2, 0.2, 0.2]


def test_caught_up_says_when_every_record_written_before_it_was_finished(tmp_path: Path) -> None:
    harness = Harness(tmp_path, mapping())
    stats = harness.poller.shard_stats
    assert stats.caught_up_at == 0.0
    harness.add(0, 1)
    before = time.time()
    harness.poller.start()
    try:
        wait_for(lambda: harness.checkpoints.get("m", "shard-0") == "1")
        wait_for(lambda: stats.caught_up_at >= before, what="an empty read after the batch")
        assert stats.records_pending == 0
    finally:
        harness.stop.set()
