"""One poller per (event source mapping, shard): Lambda's stream event source semantics.

What the exactly-once design relies on, and this module implements:

- records of a shard are delivered in sequence order, one batch at a time (a batch of the
  same shard never overtakes another; ParallelizationFactor > 1 is run as 1, which keeps
  the order guarantee and only lowers throughput);
- a batch is up to BatchSize records *that pass FilterCriteria* (filtered-out records are
  checkpointed and never delivered; a batch that is entirely filtered is not invoked),
  sent as soon as records are there or, with MaximumBatchingWindowInSeconds, when the
  window since the first buffered record has passed;
- on a function error the batch is retried with capped exponential backoff until it
  succeeds or MaximumRetryAttempts retries have failed (-1: forever); then the batch is
  skipped with a loud log line, as Lambda discards it. A retry re-delivers the identical
  batch, or, for the services a `RedeliveryPolicy` names, the batch in other boundaries
  (`local.runner.redelivery`: grown, shrunk, shifted), which Lambda does not rule out;
- TumblingWindowInSeconds: events carry `shardId`, `window`, `state` and the final-invoke
  flags; a batch never spans two windows; the `state` a function returns is passed to its
  next invocation in the window; when the window ends an invocation with no records and
  `isFinalInvokeForWindow` closes it; a response without `state` counts as a failure;
- BisectBatchOnFunctionError splits a failing batch in two and delivers each half in turn;
- ReportBatchItemFailures: a response naming failed items checkpoints up to the first of
  them and retries from it;
- the checkpoint (last finished sequence number) is committed after every finished batch,
  and a batch's end is recorded before its first delivery, so a runner killed mid-batch
  re-delivers exactly that batch on restart (the same records, even if more have arrived).

When to read (latency only: none of the above depends on it, as no batch boundary of Lambda's
is promised): a read that returned records is followed by another at once (more may be
there); after an empty read the poller pauses, adaptively: briefly after recent records
(`ACTIVE_POLL_INTERVAL_SECONDS`, doubling with each further empty read) and the full
`poll_interval_seconds` when idle, so an idle shard costs no more reads than a fixed pause
would. `ShardPoller.wake` ends a pause early: the runner rings it when a function that writes
to the shard's table has just finished an invocation. A pause never outlasts an open
batching window.

The two stream services differ only in how shards are listed and read: see
`KinesisShardReader` and `DynamoDBShardReader`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from local.runner import events, filters
from local.runner.checkpoints import CheckpointStore
from local.runner.discovery import MappingConfig
from local.runner.execution_environment import InvocationResult
from local.runner.redelivery import RedeliveryPolicy, reshape
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
RETRY_BACKOFF_START_SECONDS = 0.2
RETRY_BACKOFF_CAP_SECONDS = 3.0
"""Lambda backs off up to minutes between retries; capped at a few seconds locally."""


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


Invoke = Callable[[Mapping[str, Any]], InvocationResult]


@dataclass
class Batch:
    records: list[dict[str, Any]]  # those that passed the filter, in order
    last_sequence_number: str  # of the last record consumed, filtered ones included
    consumed: int  # records taken from the buffer
    filtered: int


def pause_after_empty_reads(empty_reads: int | None, *, active_seconds: float, idle_seconds: float) -> float:
    """The pause after the `empty_reads`-th empty read in a row since a read returned records.

    None: no read has returned records yet (an idle shard), which pauses `idle_seconds`, as
    does a long run of empty reads: the adaptive pause never polls an idle shard more often.
    """
    if empty_reads is None or empty_reads < 1:
        return idle_seconds
    return min(idle_seconds, active_seconds * 2.0 ** min(empty_reads - 1, 32))


class ShardPoller(threading.Thread):
    """Reads one shard for one mapping and delivers its batches to the function, forever."""

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
    ) -> None:
        """`redelivery`: reshape this mapping's retries (the runner passes it when the policy
        names the function's service). `poll_interval_seconds` is the pause after an empty read
        of an idle shard, `active_poll_interval_seconds` the first one after records (module
        docstring)."""
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
        self.finished = False
        self.source_name = mapping.event_source_arn.split("/")[1]  # the stream's name, or its table's
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
        )
        self._buffer: list[dict[str, Any]] = []
        # The end of a batch that was in flight when an earlier runner stopped: the first
        # batch formed is exactly that one again (read in `prepare`).
        self._redeliver_through: str | None = None
        self._last_read: str | None = None
        self._iterator: str | None = None
        self._first_buffered_at: float | None = None
        self._reshaper = redelivery.chooser(mapping.function_name) if redelivery else None
        # Records delivered and committed last, oldest first: what a shifted retry replays.
        self._delivered: deque[dict[str, Any]] = deque(maxlen=mapping.batch_size)
        self._window: events.TumblingWindow | None = None  # the open tumbling window, if any
        self._window_state: dict[str, Any] = {}

    # ------------------------------------------------------------- reading

    def _fresh_iterator(self) -> str:
        """From the last record read, else the checkpoint, else the mapping's StartingPosition."""
        position = self._last_read or self.checkpoints.get(self.mapping.uuid, self.shard_id)
        if position is not None:
            return self.reader.iterator(self.shard_id, "AFTER_SEQUENCE_NUMBER", position)
        return self.reader.iterator(self.shard_id, self.mapping.starting_position)

    def _read_more(self) -> bool:
        """One GetRecords; False when the shard is closed and everything in it has been read."""
        started_at = time.time()
        try:
            if self._iterator is None:
                self._iterator = self._fresh_iterator()
            result = self.reader.read(self.shard_id, self._iterator, self.mapping.batch_size)
        except (ClientError, BotoCoreError) as error:
            # Expired iterator (5 minutes in AWS), trimmed data, throttling, a lost response:
            # start again from the last record read, as Lambda's poller does.
            code = error.response["Error"]["Code"] if isinstance(error, ClientError) else type(error).__name__
            log.warning("%s: %s; getting a new iterator", self.name, code)
            self._iterator = None
            self.stop_event.wait(self.poll_interval_seconds)
            return True
        if result.records:
            if not self._buffer:
                self._first_buffered_at = time.monotonic()
            self._buffer.extend(result.records)
            self._last_read = events.sequence_number_of(result.records[-1])
            self._empty_reads = 0
        elif self._empty_reads is not None:
            self._empty_reads += 1
        with self.stats.lock:
            self.shard_stats.records_read += len(result.records)
            self.shard_stats.records_pending = len(self._buffer)
            self.shard_stats.ms_behind = result.ms_behind if (result.records or self._buffer) else 0
            # Every record written before this read started has been read and, with nothing
            # buffered, finished: `local.scenarios.demo` decides the drain with it.
            self.shard_stats.caught_up_at = started_at if not (result.records or self._buffer) else 0.0
        self._iterator = result.next_iterator
        return result.next_iterator is not None

    def _redelivery_size(self, force: bool) -> int | None:
        """How many buffered records form the interrupted batch; None until all of it is read."""
        assert self._redeliver_through is not None
        end = int(self._redeliver_through)
        if not force and (self._last_read is None or int(self._last_read) < end):
            return None
        return sum(1 for record in self._buffer if int(events.sequence_number_of(record)) <= end)

    def _take_batch(self, force: bool) -> Batch | None:
        """The next batch from the buffer, or None if it should wait for more records."""
        if self._redeliver_through is not None:
            size = self._redelivery_size(force)
            if size is None:
                return None
            self._redeliver_through = None
            if size == 0:  # its records are gone (trimmed): nothing left to re-deliver
                return self._take_batch(force)
            interrupted = self._buffer[:size]
            passing = [r for r in interrupted if filters.record_matches(r, self.mapping.filter_patterns)]
            return Batch(passing, events.sequence_number_of(interrupted[-1]), size, size - len(passing))
        matched: list[dict[str, Any]] = []
        consumed = 0
        window_ends = False
        first_window = self._window_of(self._buffer[0]) if self._buffer else None
        for record in self._buffer:
            if len(matched) == self.mapping.batch_size:
                break
            if self._window_of(record) != first_window:
                window_ends = True  # a batch never spans two tumbling windows
                break
            consumed += 1
            if filters.record_matches(record, self.mapping.filter_patterns):
                matched.append(record)
        if consumed == 0:
            return None
        full = len(matched) == self.mapping.batch_size or window_ends
        window = self.mapping.maximum_batching_window_seconds
        waited = time.monotonic() - (self._first_buffered_at or time.monotonic())
        if not (full or force or window <= 0 or waited >= window or not matched):
            return None
        return Batch(
            records=matched,
            last_sequence_number=events.sequence_number_of(self._buffer[consumed - 1]),
            consumed=consumed,
            filtered=consumed - len(matched),
        )

    # ------------------------------------------------------------ delivery

    def _commit(self, sequence_number: str) -> None:
        self.checkpoints.commit(self.mapping.uuid, self.shard_id, sequence_number)
        with self.stats.lock:
            self.shard_stats.checkpoint = sequence_number
            self.shard_stats.last_activity = time.time()

    def _failed_item_index(self, records: Sequence[Mapping[str, Any]], result: InvocationResult) -> int | None:
        """Index of the first failed item of a successful invocation (ReportBatchItemFailures).

        None: all succeeded. 0 as well when the response is malformed, which Lambda treats
        as the whole batch failing.
        """
        if not self.mapping.report_batch_item_failures or not isinstance(result.payload, Mapping):
            return None
        failures = result.payload.get("batchItemFailures")
        if not failures:
            return None
        positions = {events.item_identifier_of(r): i for i, r in enumerate(records)}
        indexes = []
        for failure in failures:
            identifier = failure.get("itemIdentifier") if isinstance(failure, Mapping) else None
            if not identifier or identifier not in positions:
                return 0
            indexes.append(positions[identifier])
        return min(indexes)

    def _window_of(self, record: Mapping[str, Any]) -> events.TumblingWindow | None:
        seconds = self.mapping.tumbling_window_seconds
        return events.TumblingWindow.containing(events.arrival_seconds(record), seconds) if seconds > 0 else None

    def _event(self, records: Sequence[dict[str, Any]], final: bool = False) -> dict[str, Any]:
        return events.invocation_event(
            records,
            shard_id=self.shard_id,
            event_source_arn=self.mapping.event_source_arn,
            window=self._window,
            state=self._window_state,
            final=final,
        )

    def _invoke(self, records: Sequence[dict[str, Any]], final: bool = False) -> InvocationResult:
        """One invocation; with a tumbling window, a response without `state` is a failure."""
        result = self.invoke(self._event(records, final))
        if self._window is None or result.failed:
            return result
        state = events.window_state_of(result.payload)
        if state is None:
            error = {"errorType": "InvalidWindowResponse", "errorMessage": "tumbling window response has no state"}
            return InvocationResult(payload=result.payload, error=error, duration_seconds=result.duration_seconds)
        self._window_state = state
        return result

    def _next_attempt(self, failed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records of the retry: the identical batch, or one reshaped by the redelivery policy."""
        if self._reshaper is None:
            return failed
        end = int(events.sequence_number_of(failed[-1]))
        following = [
            record
            for record in self._buffer
            if int(events.sequence_number_of(record)) > end
            and filters.record_matches(record, self.mapping.filter_patterns)
            and self._window_of(record) == self._window
        ]
        redelivery = reshape(
            failed,
            following=following,
            delivered_before=list(self._delivered),
            committed=self.checkpoints.get(self.mapping.uuid, self.shard_id),
            batch_size=self.mapping.batch_size,
            rng=self._reshaper,
        )
        with self.stats.lock:
            reshaped = self.stats.function(self.mapping.function_name).reshaped_retries
            reshaped[redelivery.shape] = reshaped.get(redelivery.shape, 0) + 1
        log.info("%s: re-delivering %d record(s) %s", self.name, len(redelivery.records), redelivery.shape)
        return redelivery.records

    def _deliver(self, records: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Deliver `records` until done; the records of the attempt that ended it (None when stopping).

        That attempt's last record is committed. It is the batch's last record, or another one
        when a retry was reshaped (`_process` then drops the buffered records up to it).
        """
        counters = self.stats.function(self.mapping.function_name)
        pending = records
        failures = 0
        backoff = RETRY_BACKOFF_START_SECONDS
        while pending:
            if self.stop_event.is_set():
                return None
            result = self._invoke(pending)
            if not result.failed:
                first_failed = self._failed_item_index(pending, result)
                if first_failed is None:
                    with self.stats.lock:
                        counters.records_processed += len(pending)
                    self._commit(events.sequence_number_of(pending[-1]))
                    self._remember_delivered(pending)
                    return pending
                if first_failed > 0:
                    with self.stats.lock:
                        counters.records_processed += first_failed
                    self._commit(events.sequence_number_of(pending[first_failed - 1]))
                    pending = pending[first_failed:]
            elif self.mapping.bisect_batch_on_function_error and len(pending) > 1:
                middle = len(pending) // 2
                log.info("%s: bisecting a failed batch of %d records", self.name, len(pending))
                first_half = self._deliver(pending[:middle])
                second_half = None if first_half is None else self._deliver(pending[middle:])
                return None if first_half is None or second_half is None else [*first_half, *second_half]
            failures += 1
            limit = self.mapping.maximum_retry_attempts
            if 0 <= limit < failures:
                log.error(
                    "%s: SKIPPING %d record(s) %s..%s after %d failed attempt(s) (MaximumRetryAttempts=%d): %s",
                    self.name,
                    len(pending),
                    events.sequence_number_of(pending[0]),
                    events.sequence_number_of(pending[-1]),
                    failures,
                    limit,
                    result.error,
                )
                with self.stats.lock:
                    counters.batches_skipped += 1
                self._commit(events.sequence_number_of(pending[-1]))
                return pending
            with self.stats.lock:
                counters.retries += 1
            log.info(
                "%s: retrying %d record(s) from %s (attempt %d) after %s",
                self.name,
                len(pending),
                events.sequence_number_of(pending[0]),
                failures + 1,
                (result.error or {}).get("errorType", "partial batch failure"),
            )
            if self.stop_event.wait(backoff):
                return None
            backoff = min(backoff * 2, RETRY_BACKOFF_CAP_SECONDS)
            pending = self._next_attempt(pending)
        return records

    def _remember_delivered(self, records: Sequence[dict[str, Any]]) -> None:
        """Keep the last delivered records in stream order, once each (a replay adds nothing)."""
        last = int(events.sequence_number_of(self._delivered[-1])) if self._delivered else -1
        self._delivered.extend(r for r in records if int(events.sequence_number_of(r)) > last)

    def _close_window(self) -> bool:
        """The open tumbling window's final invocation (no records), retried until it succeeds."""
        backoff = RETRY_BACKOFF_START_SECONDS
        while self._invoke([], final=True).failed:
            if self.stop_event.wait(backoff):
                return False
            backoff = min(backoff * 2, RETRY_BACKOFF_CAP_SECONDS)
        self._window, self._window_state = None, {}
        return True

    def _drop_buffered_through(self, sequence_number: str) -> None:
        end = int(sequence_number)
        self._buffer = [r for r in self._buffer if int(events.sequence_number_of(r)) > end]

    def _process(self, batch: Batch) -> bool:
        if self.mapping.tumbling_window_seconds > 0 and batch.records:
            window = self._window_of(batch.records[0])
            if self._window is not None and window != self._window and not self._close_window():
                return False
            self._window = window
        if batch.records:
            self.checkpoints.begin(self.mapping.uuid, self.shard_id, batch.last_sequence_number)
            delivered = self._deliver(batch.records)
            if delivered is None:
                return False
            delivered_end = events.sequence_number_of(delivered[-1])
            if delivered_end != events.sequence_number_of(batch.records[-1]):  # a reshaped retry
                self._drop_buffered_through(delivered_end)
                self._after_buffer_change()
                return True
        if batch.filtered:
            with self.stats.lock:
                self.stats.function(self.mapping.function_name).records_filtered += batch.filtered
        if not batch.records or batch.filtered:
            self._commit(batch.last_sequence_number)
        del self._buffer[: batch.consumed]
        self._after_buffer_change()
        return True

    def _after_buffer_change(self) -> None:
        self._first_buffered_at = time.monotonic() if self._buffer else None
        with self.stats.lock:
            self.shard_stats.records_pending = len(self._buffer)
            if not self._buffer:
                self.shard_stats.ms_behind = 0

    # ----------------------------------------------------------------- loop

    def wake(self) -> None:
        """End the current (or next) pause between reads: records are likely there now."""
        self._wake.set()

    def _pause(self) -> None:
        """Wait before the next read: adaptively (module docstring), woken early by `wake`.

        A pause never runs past the end of an open batching window, so a waiting batch is
        sent when its window has passed rather than up to a whole pause later.
        """
        pause = pause_after_empty_reads(
            self._empty_reads, active_seconds=self.active_poll_interval_seconds, idle_seconds=self.poll_interval_seconds
        )
        window = self.mapping.maximum_batching_window_seconds
        if self._buffer and window > 0 and self._first_buffered_at is not None:
            pause = min(pause, max(0.0, self._first_buffered_at + window - time.monotonic()))
        self._wake.wait(pause)
        self._wake.clear()

    def prepare(self) -> None:
        """Get the first iterator (so LATEST is fixed before `make up` returns)."""
        self._redeliver_through = self.checkpoints.in_flight_end(self.mapping.uuid, self.shard_id)
        self._iterator = self._fresh_iterator()
        with self.stats.lock:
            self.shard_stats.ready = True

    def run(self) -> None:
        """Poll until stopped; an unexpected error restarts polling from the checkpoint."""
        while not self.stop_event.is_set() and not self.finished:
            try:
                self._run()
            except Exception:
                log.exception("%s failed; resuming from the last checkpoint", self.name)
                self._buffer, self._last_read, self._iterator = [], None, None
                self.stop_event.wait(RETRY_BACKOFF_CAP_SECONDS)

    def _run(self) -> None:
        if self._iterator is None:
            self.prepare()
        open_shard = True
        while not self.stop_event.is_set():
            read = open_shard and (len(self._buffer) < self.mapping.batch_size or self._redeliver_through is not None)
            if read:
                open_shard = self._read_more()
            batch = self._take_batch(force=not open_shard)
            if batch is not None:
                if not self._process(batch):
                    return
                continue
            if self._window is not None and not self._buffer and (time.time() >= self._window.end or not open_shard):
                if not self._close_window():
                    return
                continue
            if not open_shard and not self._buffer and self._window is None:
                log.info("%s: shard closed and fully processed", self.name)
                self.finished = True
                return
            if read and self._empty_reads == 0:
                continue  # that read returned records: more may be there, read again at once
            self._pause()
