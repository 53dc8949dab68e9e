"""One poller per (event source mapping, shard): Lambda's stream event source semantics.

What the exactly-once design relies on, and this module implements:

- records of a shard are delivered in sequence order, one batch at a time (a batch of the
  same shard never overtakes another); with ParallelizationFactor N > 1, in N lanes
  (`local.runner.lanes`): a key's records are all in one lane, delivered in order, up to N
  batches of the shard at once, and the checkpoint never passes a record its lane has not
  finished; but not once a Kinesis shard carries KPL aggregates ("Note that parallelization
  factor will not work if you are using Kinesis aggregation", Lambda Developer Guide, the
  Kinesis page): from the first one read, the shard runs one lane, one batch at a time, from
  its checkpoint on (`ShardPoller.one_lane_for_aggregates`);
- a batch is up to BatchSize records *that pass FilterCriteria* (filtered-out records are
  checkpointed and never delivered; a batch that is entirely filtered is not invoked),
  sent as soon as records are there or, with MaximumBatchingWindowInSeconds, when the
  window since the first buffered record has passed;
- on a function error the batch is retried with capped exponential backoff until it
  succeeds, MaximumRetryAttempts retries have failed (-1: no limit), or its records expire:
  older than MaximumRecordAgeInSeconds (checked before every attempt, the first included), or
  trimmed by the stream's retention (asked of the stream once the batch keeps failing). Then
  the records are discarded as Lambda discards them (`local.runner.expiry`): one `LOST` log
  line, the invocation record to the mapping's on-failure destination, the counters `make
  status` raises its alarm on, and the checkpoint past them. A retry re-delivers the identical
  batch, or, for the services a `RedeliveryPolicy` names, the batch in other boundaries
  (`local.runner.redelivery`: grown, shrunk, shifted), which Lambda does not rule out, and
  on a mapping with a tumbling window out of order, which Lambda documents for retries there;
  a batch that succeeded may come once more (at least once: the policy's again-after-success);
- a batch is also cut where its event would pass Lambda's 6 MB invocation payload limit
  (`events.INVOCATION_PAYLOAD_LIMIT_BYTES`, the event's JSON as sent);
- TumblingWindowInSeconds: events carry `shardId`, `window`, `state` and the final-invoke
  flags; a batch never spans two windows; the `state` a function returns is passed to its
  next invocation in the window; when the window ends an invocation with no records and
  `isFinalInvokeForWindow` closes it; a response without `state` counts as a failure (the
  state is the shard's, so a mapping with a tumbling window runs one lane);
- BisectBatchOnFunctionError splits a failing batch in two and delivers each half in turn;
- ReportBatchItemFailures: a response naming failed items checkpoints up to the first of
  them and retries from it;
- after an unexpected error (the runner's, not the function's) the shard restarts from its
  checkpoint only once every lane's invocation in flight has ended: Lambda never runs two
  invocations of one key at once;
- the checkpoint (last finished sequence number) is committed after every finished batch,
  and, with one lane, a batch's end is recorded before its first delivery, so a runner killed
  mid-batch re-delivers exactly that batch on restart (the same records, even if more have
  arrived); with several lanes a restart re-forms the batches after the checkpoint.

Batches are formed and delivered by `local.runner.lanes.Lane` (one per lane); this module reads
the shard, hands the records to the lanes and keeps the checkpoint.

When to read (latency only: none of the above depends on it, as no batch boundary of Lambda's
is promised). Never more often than Lambda polls (`LAMBDA_POLLS_PER_SECOND`): a DynamoDB stream
shard 4 times a second, a Kinesis shard once a second (standard iterators), each GetRecords
asking for as many records as the service returns in one call (`READ_LIMITS`), as Lambda's
batches are formed from what it read. Within that rate, for latency: a read that returned
records is followed by another as soon as the rate allows (more may be there); after an empty
read the poller pauses, adaptively: briefly after recent records (`ACTIVE_POLL_INTERVAL_SECONDS`,
doubling with each further empty read) and the full `poll_interval_seconds` when idle, so an
idle shard costs no more reads than a fixed pause would. `ShardPoller.wake` ends a pause early
(down to the rate): the runner rings it when a function that writes to the shard's table has
just finished an invocation. A pause never outlasts an open batching window; a batch already
read is sent without waiting for the next read.

The two stream services differ only in how shards are listed and read: see
`KinesisShardReader` and `DynamoDBShardReader`.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from local.runner import events
from local.runner.checkpoints import CheckpointStore
from local.runner.discovery import MappingConfig
from local.runner.execution_environment import InvocationResult
from local.runner.expiry import DiscardReporter, OnFailureDestination
from local.runner.lanes import (
    RETRY_BACKOFF_CAP_SECONDS,
    RETRY_BACKOFF_START_SECONDS,
    Invoke,
    Lane,
    ShardProgress,
    lane_of,
)
from local.runner.redelivery import RedeliveryPolicy
from local.runner.stats import RunnerStats, ShardStats

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_SECONDS = 0.2
"""Pause after an empty read of an idle shard. Lambda polls a Kinesis shard about once a second
and a DynamoDB stream shard four times a second; 0.2 s keeps local demos snappy
(`--poll-interval` / `LOCAL_RUNNER_POLL_INTERVAL` changes it)."""
ACTIVE_POLL_INTERVAL_SECONDS = 0.05
"""Pause after the first empty read that follows records; it doubles with each further empty
read up to the idle interval (0.05, 0.1, 0.2 s): records tend to come in runs, so a shard
that just had some is read again soon, at the cost of one extra empty read per run."""
LANE_JOIN_LOG_SECONDS = 10.0
"""While the lanes of a failed run are waited for (`ShardPoller._join_lanes`), a log line this often."""
LAMBDA_POLLS_PER_SECOND: Mapping[str, float] = {"dynamodb": 4.0, "kinesis": 1.0}
"""How often Lambda polls a shard (Lambda Developer Guide): "Lambda polls shards in your DynamoDB
stream for records at a base rate of 4 times per second" ("How Lambda processes records from
DynamoDB Streams"); for a Kinesis stream with standard iterators, each shard at a base rate of
once per second (the Kinesis page, "Polling and batching streams"). A poller starts a GetRecords
no sooner than 1/rate after the previous one started."""
READ_LIMITS: Mapping[str, int] = {"dynamodb": 1000, "kinesis": 10000}
"""The most records one GetRecords returns (DynamoDB Streams API Reference, Kinesis Data Streams
API Reference: `Limit`), what each read asks for."""
EXPIRED_ITERATOR = "ExpiredIteratorException"
"""Both stream services' answer to GetRecords with an iterator older than its lifetime."""
TRIMMED_DATA_ACCESS = "TrimmedDataAccessException"
"""DynamoDB Streams' answer to a position older than its 24-hour trim point."""


@dataclass(frozen=True)
class ReadResult:
    records: list[dict[str, Any]]  # Lambda-formatted
    next_iterator: str | None  # None: the shard is closed and fully read
    ms_behind: int


class ShardReader:
    """How to list and read the shards of one stream (Kinesis or DynamoDB Streams)."""

    def list_shards(self) -> list[tuple[str, str | None]]:
        """(shard id, parent shard id) of every shard."""
        raise NotImplementedError

    def iterator(self, shard_id: str, position: str, sequence_number: str | None = None) -> str:
        raise NotImplementedError

    def read(self, shard_id: str, iterator: str, limit: int) -> ReadResult:
        raise NotImplementedError

    def oldest_kept(self, shard_id: str) -> str | None:
        """The sequence number of the oldest record the shard still holds (its TRIM_HORIZON); None
        when it holds none. What a batch that keeps failing compares its records with
        (`local.runner.expiry`): one record read from a TRIM_HORIZON iterator. The emulator returns
        the oldest record kept to such a read; Kinesis on AWS may return none from a shard with
        records, which the runner never reads."""
        result = self.read(shard_id, self.iterator(shard_id, "TRIM_HORIZON"), 1)
        return events.sequence_number_of(result.records[0]) if result.records else None


class KinesisShardReader(ShardReader):
    def __init__(self, client: Any, stream_arn: str, region: str) -> None:
        self.client = client
        self.stream_arn = stream_arn
        self.stream_name = stream_arn.split("/", 1)[1]
        self.region = region

    def list_shards(self) -> list[tuple[str, str | None]]:
        shards = self.client.list_shards(StreamName=self.stream_name)["Shards"]
        return [(shard["ShardId"], shard.get("ParentShardId")) for shard in shards]

    def iterator(self, shard_id: str, position: str, sequence_number: str | None = None) -> str:
        arguments: dict[str, Any] = {
            "StreamName": self.stream_name,
            "ShardId": shard_id,
            "ShardIteratorType": position,
        }
        if sequence_number is not None:
            arguments["StartingSequenceNumber"] = sequence_number
        return str(self.client.get_shard_iterator(**arguments)["ShardIterator"])

    def read(self, shard_id: str, iterator: str, limit: int) -> ReadResult:
        response = self.client.get_records(ShardIterator=iterator, Limit=limit)
        records = [
            events.kinesis_record(r, shard_id=shard_id, stream_arn=self.stream_arn, region=self.region)
            for r in response["Records"]
        ]
        return ReadResult(records, response.get("NextShardIterator"), int(response.get("MillisBehindLatest", 0)))


class DynamoDBShardReader(ShardReader):
    def __init__(self, client: Any, stream_arn: str, region: str) -> None:
        self.client = client
        self.stream_arn = stream_arn
        self.region = region

    def list_shards(self) -> list[tuple[str, str | None]]:
        shards: list[tuple[str, str | None]] = []
        arguments: dict[str, Any] = {"StreamArn": self.stream_arn}
        while True:
            description = self.client.describe_stream(**arguments)["StreamDescription"]
            shards.extend((s["ShardId"], s.get("ParentShardId")) for s in description["Shards"])
            last = description.get("LastEvaluatedShardId")
            if not last:
                return shards
            arguments["ExclusiveStartShardId"] = last

    def iterator(self, shard_id: str, position: str, sequence_number: str | None = None) -> str:
        arguments: dict[str, Any] = {
            "StreamArn": self.stream_arn,
            "ShardId": shard_id,
            "ShardIteratorType": position,
        }
        if sequence_number is not None:
            arguments["SequenceNumber"] = sequence_number
        return str(self.client.get_shard_iterator(**arguments)["ShardIterator"])

    def read(self, shard_id: str, iterator: str, limit: int) -> ReadResult:
        response = self.client.get_records(ShardIterator=iterator, Limit=limit)
        records = [
            events.dynamodb_record(r, stream_arn=self.stream_arn, region=self.region) for r in response["Records"]
        ]
        ms_behind = 0
        if records and "ApproximateCreationDateTime" in records[0]["dynamodb"]:
            ms_behind = max(0, int((time.time() - records[0]["dynamodb"]["ApproximateCreationDateTime"]) * 1000))
        return ReadResult(records, response.get("NextShardIterator"), ms_behind)


def pause_after_empty_reads(empty_reads: int | None, *, active_seconds: float, idle_seconds: float) -> float:
    """The pause after the `empty_reads`-th empty read in a row since a read returned records.

    None: no read has returned records yet (an idle shard), which pauses `idle_seconds`, as
    does a long run of empty reads: the adaptive pause never polls an idle shard more often.
    """
    if empty_reads is None or empty_reads < 1:
        return idle_seconds
    return min(idle_seconds, active_seconds * 2.0 ** min(empty_reads - 1, 32))


class AggregatesInShard(Exception):
    """A read of a shard run in several lanes returned a KPL aggregate: its lanes give way to one."""


class ShardPoller(threading.Thread):
    """Reads one shard for one mapping and delivers its batches to the function, lane by lane, forever."""

    def __init__(
        self,
        *,
        mapping: MappingConfig,
        shard_id: str,
        reader: ShardReader,
        invoke: Invoke,
        checkpoints: CheckpointStore,
        stats: RunnerStats,
        stop: threading.Event,
        poll_interval_seconds: float = DEFAULT_POLL_INTERVAL_SECONDS,
        active_poll_interval_seconds: float = ACTIVE_POLL_INTERVAL_SECONDS,
        redelivery: RedeliveryPolicy | None = None,
        retry_backoff_start_seconds: float = RETRY_BACKOFF_START_SECONDS,
        min_read_interval_seconds: float | None = None,
        on_failure_destination: OnFailureDestination | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`min_read_interval_seconds`: between the starts of two reads; by default Lambda's
        (`LAMBDA_POLLS_PER_SECOND`: 0.25 s for DynamoDB Streams, 1 s for Kinesis).

        `redelivery`: what of the redelivery policy applies to this mapping's function
        (`RedeliveryPolicy.for_service`: reshaped retries, out of order with a tumbling window, and
        successes delivered again). `poll_interval_seconds` is the pause after an empty read
        of an idle shard, `active_poll_interval_seconds` the first one after records (module
        docstring); `retry_backoff_start_seconds` the first pause before a retry (it doubles).
        `on_failure_destination`: where discarded batches are reported (the mapping's
        `DestinationConfig.OnFailure`, `local.runner.expiry`); `clock`: the wall clock records'
        ages are measured on (MaximumRecordAgeInSeconds)."""
        super().__init__(name=f"poller-{mapping.function_name}-{shard_id}", daemon=True)
        self.mapping = mapping
        self.shard_id = shard_id
        self.reader = reader
        self.invoke = invoke
        self.checkpoints = checkpoints
        self.stats = stats
        self.stop_event = stop
        self.poll_interval_seconds = poll_interval_seconds
        self.active_poll_interval_seconds = min(active_poll_interval_seconds, poll_interval_seconds)
        self.min_read_interval_seconds = (
            1.0 / LAMBDA_POLLS_PER_SECOND[mapping.source_kind]
            if min_read_interval_seconds is None
            else min_read_interval_seconds
        )
        self._read_limit = READ_LIMITS[mapping.source_kind]
        self._last_read_started: float | None = None  # time.monotonic() of the last GetRecords
        self.retry_backoff_start_seconds = retry_backoff_start_seconds
        self.finished = False
        self.source_name = mapping.event_source_arn.split("/")[1]  # the stream's name, or its table's
        # A tumbling window's `state` is the shard's, passed from one invocation to the next: one lane.
        self.lane_count = 1 if mapping.tumbling_window_seconds > 0 else max(1, mapping.parallelization_factor)
        self._wake = threading.Event()
        # Empty reads in a row since the last read that returned records (None: none has yet).
        self._empty_reads: int | None = None
        self.shard_stats: ShardStats = stats.shard(
            f"{mapping.uuid}/{shard_id}",
            function=mapping.function_name,
            source=mapping.source_kind,
            source_name=self.source_name,
            shard_id=shard_id,
            checkpoint=checkpoints.get(mapping.uuid, shard_id),
            lanes=self.lane_count,
        )
        self._last_read: str | None = None
        self._iterator: str | None = None
        self._resume_at_trim_horizon = False  # the position was trimmed (`_resume_after_trim`)
        self._redelivery = redelivery
        self._on_failure_destination = on_failure_destination
        self._clock = clock
        self._commit_lock = threading.Lock()  # a lane's progress and the checkpoint it moves, together
        self._lane_failed = threading.Event()
        self._progress = ShardProgress()
        self._lanes_stop = threading.Event()  # ends the lane threads of one `_run`
        self._lanes: list[Lane] = self._new_lanes()

    def _new_lanes(self) -> list[Lane]:
        """Empty lanes that start from the committed checkpoint, with a progress and a stop of their own.

        A lane thread of an earlier `_run` that has not returned yet keeps its own (set) stop and
        its own progress, so it can neither go on sending nor move the new lanes' checkpoint.
        """
        self._progress, self._lanes_stop = ShardProgress(), threading.Event()
        committed = self.checkpoints.get(self.mapping.uuid, self.shard_id)
        inline = self.lane_count == 1  # run by the poller's own thread, its batches recorded in flight
        return [
            Lane(
                name=self.name if inline else f"{self.name}-lane{index}",
                mapping=self.mapping,
                shard_id=self.shard_id,
                invoke=self._invoke_counted,
                stats=self.stats,
                stop=self.stop_event if inline else self._lanes_stop,
                commit=self._commit if inline else functools.partial(self._finish, self._progress, index),
                committed=committed,
                begin=functools.partial(self.checkpoints.begin, self.mapping.uuid, self.shard_id) if inline else None,
                on_buffer_change=self._after_buffer_change,
                redelivery=self._redelivery,
                chooser=self._chooser(index),
                retry_backoff_start_seconds=self.retry_backoff_start_seconds,
                discards=DiscardReporter(
                    name=self.name if inline else f"{self.name}-lane{index}",
                    mapping=self.mapping,
                    shard_id=self.shard_id,
                    stats=self.stats,
                    destination=self._on_failure_destination,
                ),
                oldest_kept=functools.partial(self.reader.oldest_kept, self.shard_id),
                clock=self._clock,
            )
            for index in range(self.lane_count)
        ]

    def _chooser(self, lane: int = 0) -> random.Random | None:
        """The random source of a lane's redeliveries (lane 0's is the one-lane poller's)."""
        if self._redelivery is None:
            return None
        function = self.mapping.function_name
        return self._redelivery.chooser(function if lane == 0 else f"{function}#{lane}")

    # ------------------------------------------------------------- reading

    def _fresh_iterator(self) -> str:
        """From the last record read, else the checkpoint, else the mapping's StartingPosition;
        TRIM_HORIZON once the position was trimmed."""
        position = self._last_read or self.checkpoints.get(self.mapping.uuid, self.shard_id)
        if position is not None and not self._resume_at_trim_horizon:
            try:
                return self.reader.iterator(self.shard_id, "AFTER_SEQUENCE_NUMBER", position)
            except ClientError as error:
                if error.response["Error"]["Code"] != TRIMMED_DATA_ACCESS:
                    raise
                self._resume_after_trim()
        if self._resume_at_trim_horizon:
            iterator = self.reader.iterator(self.shard_id, "TRIM_HORIZON")
            self._resume_at_trim_horizon = False
            return iterator
        return self.reader.iterator(self.shard_id, self.mapping.starting_position)

    def _resume_after_trim(self) -> None:
        """The records after this poller's position expired unread: go on from the oldest one kept.

        Lambda retries records "until the record expires" and then "discards the records and
        continues processing batches from the stream" (Lambda Developer Guide, "Retain discarded
        records for a DynamoDB event source"); DynamoDB Streams refuses a position older than its
        24-hour trim point with TrimmedDataAccessException. The next iterator is TRIM_HORIZON.
        """
        position = self._last_read or self.checkpoints.get(self.mapping.uuid, self.shard_id)
        log.error(
            "%s: LOST records after %s: trimmed by the stream's retention before this mapping read them; "
            "continuing from TRIM_HORIZON, as Lambda does",
            self.name,
            position or "the mapping's start",
        )
        with self.stats.lock:
            self.stats.function(self.mapping.function_name).unread_records_trimmed += 1
        self._resume_at_trim_horizon = True

    def _replace_expired_iterator(self) -> None:
        """The iterator outlived its lifetime (Kinesis 5 minutes, DynamoDB Streams 15): read on from
        the same position with a new one, without pausing.

        Nothing is wrong with the stream: the poller simply did not read for that long (its
        lanes were full while a slow or failing batch held them, or the process was suspended).
        The next iterator starts after the last record read (`_fresh_iterator`): the records
        read before are in the lanes still, so none is delivered twice or out of order, and none
        is skipped. Before any record was read it starts from the checkpoint, else from the
        mapping's StartingPosition: for TRIM_HORIZON that is exact; LATEST is taken again, and
        records written meanwhile are skipped (no AWS API names the position a LATEST iterator
        stood at), which is logged as an error.
        """
        position = self._last_read or self.checkpoints.get(self.mapping.uuid, self.shard_id)
        if position is None and self.mapping.starting_position == "LATEST":
            log.error(
                "%s: the LATEST iterator expired before any record was read; records written meanwhile "
                "may be skipped (a new LATEST iterator)",
                self.name,
            )
        else:
            log.info("%s: shard iterator expired; a new one after %s", self.name, position or "the mapping's start")

    def _pending(self) -> int:
        """Records read and not yet finished by their lane (the batches in flight included)."""
        return sum(len(lane.buffer) for lane in self._lanes)

    def _dispatch(self, records: list[dict[str, Any]]) -> None:
        """Hand the records read to their lanes, in shard order; `AggregatesInShard` (none handed
        over) when there are several lanes and the records hold a KPL aggregate."""
        if self.lane_count == 1:
            self._lanes[0].add(records)
            return
        if self.mapping.source_kind == "kinesis" and any(events.is_kpl_aggregate(record) for record in records):
            raise AggregatesInShard(self.name)
        routed: list[list[dict[str, Any]]] = [[] for _ in self._lanes]
        with self._commit_lock:
            for record in records:
                index = lane_of(record, self.lane_count)
                routed[index].append(record)
                self._progress.add(index, events.sequence_number_of(record))
        for lane, its_records in zip(self._lanes, routed, strict=True):
            lane.add(its_records)

    def _read_more(self) -> bool:
        """One GetRecords; False when the shard is closed and everything in it has been read."""
        started_at = time.time()
        try:
            if self._iterator is None:
                self._iterator = self._fresh_iterator()
            self._last_read_started = time.monotonic()
            result = self.reader.read(self.shard_id, self._iterator, self._read_limit)
        except (ClientError, BotoCoreError) as error:
            # Throttling, a lost response: start again from the last record read, as Lambda's
            # poller does, after a pause. Expired iterator: `_replace_expired_iterator`, at once.
            # Trimmed data: `_resume_after_trim`.
            code = error.response["Error"]["Code"] if isinstance(error, ClientError) else type(error).__name__
            self._iterator = None
            if code == EXPIRED_ITERATOR:
                self._replace_expired_iterator()
                return True
            if code == TRIMMED_DATA_ACCESS:
                self._resume_after_trim()
            else:
                log.warning("%s: %s; getting a new iterator", self.name, code)
            self.stop_event.wait(self.poll_interval_seconds)
            return True
        if result.records:
            self._dispatch(result.records)
            self._last_read = events.sequence_number_of(result.records[-1])
            self._empty_reads = 0
        elif self._empty_reads is not None:
            self._empty_reads += 1
        pending = self._pending()
        with self.stats.lock:
            self.shard_stats.records_read += len(result.records)
            self.shard_stats.records_pending = pending
            self.shard_stats.ms_behind = result.ms_behind if (result.records or pending) else 0
            # Every record written before this read started has been read and, with nothing
            # buffered, finished: `local.scenarios.demo` decides the drain with it.
            self.shard_stats.caught_up_at = started_at if not (result.records or pending) else 0.0
        self._iterator = result.next_iterator
        return result.next_iterator is not None

    # ------------------------------------------------------------ delivery

    def _invoke_counted(self, event: Mapping[str, Any]) -> InvocationResult:
        """Invoke, counting the shard's batches in flight (several with several lanes)."""
        with self.stats.lock:
            self.shard_stats.batches_in_flight += 1
            self.shard_stats.peak_batches_in_flight = max(
                self.shard_stats.peak_batches_in_flight, self.shard_stats.batches_in_flight
            )
        try:
            return self.invoke(event)
        finally:
            with self.stats.lock:
                self.shard_stats.batches_in_flight -= 1

    def _commit(self, sequence_number: str) -> None:
        self.checkpoints.commit(self.mapping.uuid, self.shard_id, sequence_number)
        with self.stats.lock:
            self.shard_stats.checkpoint = sequence_number
            self.shard_stats.last_activity = time.time()

    def _finish(self, progress: ShardProgress, lane: int, sequence_number: str) -> None:
        """A lane finished its records through `sequence_number`: move the checkpoint if it can."""
        with self._commit_lock:
            if progress is not self._progress:
                return  # a lane of an earlier run: the checkpoint is the new lanes' now
            checkpoint = progress.finish(lane, sequence_number)
            if checkpoint is not None:
                self._commit(checkpoint)

    def _after_buffer_change(self) -> None:
        pending = self._pending()
        with self.stats.lock:
            self.shard_stats.records_pending = pending
            if not pending:
                self.shard_stats.ms_behind = 0
        if self.lane_count > 1:
            self.wake()  # a lane made room: read on

    # ----------------------------------------------------------------- loop

    def wake(self) -> None:
        """End the current (or next) pause between reads: records are likely there now."""
        self._wake.set()

    def _until_next_read(self) -> float:
        """Seconds until Lambda's poll rate allows the next read (0: now)."""
        if self._last_read_started is None:
            return 0.0
        return max(0.0, self._last_read_started + self.min_read_interval_seconds - time.monotonic())

    def _pause(self, seconds: float | None = None) -> None:
        """Wait before the next read: `seconds`, else adaptively (module docstring) and never
        less than the poll rate leaves; woken early by `wake`.

        A pause never runs past the end of an open batching window of a lane the poller runs
        itself, so a waiting batch is sent when its window has passed rather than up to a whole
        pause later (lanes in threads of their own keep their windows themselves).
        """
        pause = seconds
        if pause is None:
            adaptive = pause_after_empty_reads(
                self._empty_reads,
                active_seconds=self.active_poll_interval_seconds,
                idle_seconds=self.poll_interval_seconds,
            )
            pause = max(adaptive, self._until_next_read())
        if self.lane_count == 1:
            remaining = self._lanes[0].window_remaining_seconds()
            if remaining is not None:
                pause = min(pause, remaining)
        self._wake.wait(pause)
        self._wake.clear()

    def _pause_unless_records_came(self, wanted: bool) -> None:
        """Pause before the next read. When one is `wanted` (there is room for records) and the
        last one returned records (more may be there): only until the poll rate allows it."""
        if wanted and self._empty_reads == 0:
            until = self._until_next_read()
            if until > 0:
                self._pause(until)
            return
        self._pause()

    def _shard_done(self) -> None:
        log.info("%s: shard closed and fully processed", self.name)
        self.finished = True

    def prepare(self) -> None:
        """Get the first iterator (so LATEST is fixed before `make up` returns)."""
        if self.lane_count == 1:
            self._lanes[0].redeliver_through = self.checkpoints.in_flight_end(self.mapping.uuid, self.shard_id)
        self._iterator = self._fresh_iterator()
        with self.stats.lock:
            self.shard_stats.ready = True

    def run(self) -> None:
        """Poll until stopped; an unexpected error restarts polling from the checkpoint."""
        while not self.stop_event.is_set() and not self.finished:
            try:
                self._run()
            except AggregatesInShard:
                self.one_lane_for_aggregates()
            except Exception:
                log.exception("%s failed; resuming from the last checkpoint", self.name)
                self._last_read, self._iterator = None, None
                self._lanes = self._new_lanes()
                self.stop_event.wait(RETRY_BACKOFF_CAP_SECONDS)

    def one_lane_for_aggregates(self) -> None:
        """Run the shard in one lane from its checkpoint on: it carries KPL aggregates.

        The Lambda Developer Guide's Kinesis page: "Note that parallelization factor will not work
        if you are using Kinesis aggregation." An aggregate travels under one partition key, the
        producer's choice, while its user records are other keys' (TradeIDs), so the lanes that
        keep order per partition key would not keep it per user record. The stack refuses a state
        factor above 1 with `producerAggregation`; a producer that aggregates without the stack
        being told (`make chaos --aggregate` on the defaults) meets this. Called once every lane
        thread has returned, its invocation in flight ended (`_run_lanes`): the one lane re-sends
        from the checkpoint, so what other lanes had finished past it comes again (at least once).
        """
        log.warning(
            "%s: KPL aggregates in the shard: ParallelizationFactor %d does not work with Kinesis aggregation "
            "(Lambda Developer Guide); one batch of the shard at a time from its checkpoint on",
            self.name,
            self.mapping.parallelization_factor,
        )
        self.lane_count = 1
        with self.stats.lock:
            self.shard_stats.lanes = 1
        self._last_read, self._iterator = None, None
        self._lanes = self._new_lanes()

    def _run(self) -> None:
        if self._iterator is None:
            self.prepare()
        if self.lane_count == 1:
            self._run_one_lane(self._lanes[0])
        else:
            self._run_lanes()

    def _run_one_lane(self, lane: Lane) -> None:
        """Read, and deliver each batch in this thread: one batch of the shard at a time."""
        open_shard = True
        while not self.stop_event.is_set():
            wanted = open_shard and (len(lane.buffer) < self.mapping.batch_size or lane.redeliver_through is not None)
            read = wanted and self._until_next_read() == 0
            if read:
                open_shard = self._read_more()
            batch = lane.take_batch(force=not open_shard)
            if batch is not None:
                if not lane.process(batch):
                    return
                continue
            if lane.window is not None and not lane.buffer and (time.time() >= lane.window.end or not open_shard):
                if not lane.close_window():
                    return
                continue
            if not open_shard and not lane.buffer and lane.window is None:
                self._shard_done()
                return
            self._pause_unless_records_came(wanted and open_shard)

    def _run_lanes(self) -> None:
        """Read and hand records to the lanes, each sending its batches in a thread of its own.

        Reads stop while the lanes hold `BatchSize` records each (they wake the poller as they
        make room); the shard is done when it is closed, read, and every lane is empty.
        """
        self._lane_failed.clear()
        threads = [
            threading.Thread(target=self._serve, args=(lane,), name=lane.name, daemon=True) for lane in self._lanes
        ]
        for thread in threads:
            thread.start()
        try:
            open_shard = True
            while not self.stop_event.is_set():
                if self._lane_failed.is_set():
                    raise RuntimeError(f"{self.name}: a lane failed")
                wanted = open_shard and self._pending() < self.mapping.batch_size * self.lane_count
                read = wanted and self._until_next_read() == 0
                if read:
                    open_shard = self._read_more()
                    if not open_shard:
                        for lane in self._lanes:
                            lane.close()
                if not open_shard and not self._pending():
                    self._shard_done()
                    return
                self._pause_unless_records_came(wanted and open_shard)
        finally:
            self._lanes_stop.set()
            for lane in self._lanes:
                lane.wake()
            self._join_lanes(threads)

    def _join_lanes(self, threads: list[threading.Thread]) -> None:
        """Wait until every lane thread has returned, its invocation in flight included.

        New lanes re-send from the checkpoint, so a batch still in flight in an old lane would
        overlap the same key's next invocation; Lambda never runs two invocations of one key of
        a shard at once. A stopped lane sends nothing more, and an invocation ends within the
        function's timeout (the execution environment kills it then), so this wait is bounded.
        """
        waited = 0.0
        for thread in threads:
            while thread.is_alive():
                thread.join(LANE_JOIN_LOG_SECONDS)
                if thread.is_alive():
                    waited += LANE_JOIN_LOG_SECONDS
                    log.warning("%s: waited %.0f s for %s's invocation to end", self.name, waited, thread.name)

    def _serve(self, lane: Lane) -> None:
        try:
            lane.serve()
        except Exception:
            log.exception("%s failed", lane.name)
            self._lane_failed.set()
            self.wake()
