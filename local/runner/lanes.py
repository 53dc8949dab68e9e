"""A shard's lanes: its batches formed, delivered and retried, one batch of a lane at a time.

Lambda runs up to `ParallelizationFactor` batches of one stream shard at once and keeps order
only per key: per partition key on Kinesis, per item (partition and sort key) on DynamoDB Streams
(Lambda Developer Guide, "Concurrent batches per shard"). The runner does what that takes:

- every record of a shard goes to the lane its key hashes to (`lane_of`), so all the records of a
  key are in one lane, in shard order;
- a `Lane` forms its batches from its own records only, with the mapping's BatchSize, batching
  window, FilterCriteria, retries, BisectBatchOnFunctionError, ReportBatchItemFailures,
  MaximumRetryAttempts and record expiry (`local.runner.expiry`), exactly as a shard with one
  lane is run (the same code), and delivers one batch at a time: a key is never in two batches
  at once, nor a later record before an earlier one;
- the shard's checkpoint is the last record below which every record is finished by its lane
  (`ShardProgress`): a lane whose batch fails holds the checkpoint before its first unfinished
  record while the other lanes go on, so a restart re-delivers from there, records that other
  lanes had finished included (at least once, as in Lambda).

With one lane (ParallelizationFactor 1, any mapping with a tumbling window, whose `state`
Lambda carries per shard, or a Kinesis shard once it carries KPL aggregates, with which the
factor does not work: `ShardPoller.one_lane_for_aggregates`) the shard poller runs its lane
inline and everything is as it was: one batch of the shard at a time, in sequence order, and a
batch interrupted by a stopped runner is re-delivered identically. With several lanes each runs
in a thread of its own, and an interrupted batch is re-formed from the checkpoint on restart
(Lambda promises no more).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from local.runner import events, expiry, filters
from local.runner.discovery import MappingConfig
from local.runner.execution_environment import InvocationResult
from local.runner.expiry import Discard, DiscardReporter
from local.runner.redelivery import REORDERED, RedeliveryPolicy, out_of_order, reshape
from local.runner.stats import FunctionStats, RunnerStats

log = logging.getLogger(__name__)

RETRY_BACKOFF_START_SECONDS = 0.2
RETRY_BACKOFF_CAP_SECONDS = 3.0
"""Lambda backs off up to minutes between retries; capped at a few seconds locally."""
IDLE_LANE_WAIT_SECONDS = 1.0
"""How long a lane thread with nothing to send waits before looking again (new records wake it at once)."""

Record = dict[str, Any]
Invoke = Callable[[Mapping[str, Any]], InvocationResult]


def lane_key(record: Mapping[str, Any]) -> str:
    """What Lambda keeps in order across lanes: the partition key (Kinesis), the item's key (DynamoDB)."""
    if "kinesis" in record:
        return str(record["kinesis"]["partitionKey"])
    return json.dumps(record["dynamodb"].get("Keys", {}), sort_keys=True, separators=(",", ":"))


def lane_of(record: Mapping[str, Any], lanes: int) -> int:
    """The lane of a record among `lanes`: a stable hash of its key, so a key always meets the same lane."""
    if lanes <= 1:
        return 0
    digest = hashlib.sha256(lane_key(record).encode()).digest()
    return int.from_bytes(digest[:8], "big") % lanes


class ShardProgress:
    """Which of a shard's records its lanes have finished, and so how far the checkpoint may go.

    Records are added in shard order with their lane; a lane reports that it finished all of its
    records up to a sequence number (delivered, filtered out or skipped after its retries). The
    checkpoint is the last record such that it and every record before it are finished: never
    past a record a lane still holds. Not thread-safe: the poller calls it under its own lock.
    """

    def __init__(self) -> None:
        self._outstanding: deque[tuple[int, int, str]] = deque()  # (sequence, lane, as text), shard order
        self._finished_through: dict[int, int] = {}

    def add(self, lane: int, sequence_number: str) -> None:
        self._outstanding.append((int(sequence_number), lane, sequence_number))

    def finish(self, lane: int, sequence_number: str) -> str | None:
        """`lane` finished its records through `sequence_number`; the new checkpoint, if it moved."""
        through = int(sequence_number)
        if through > self._finished_through.get(lane, -1):
            self._finished_through[lane] = through
        checkpoint = None
        while self._outstanding and self._outstanding[0][0] <= self._finished_through.get(self._outstanding[0][1], -1):
            checkpoint = self._outstanding.popleft()[2]
        return checkpoint

    def __len__(self) -> int:
        """Records added and not yet below the checkpoint."""
        return len(self._outstanding)


@dataclass
class Batch:
    records: list[Record]  # those that passed the filter, in order
    last_sequence_number: str  # of the last record consumed, filtered ones included
    consumed: int  # records taken from the buffer
    filtered: int


class Lane:
    """The records of one lane of a shard, batched and delivered one batch at a time, in order.

    `commit(sequence_number)` is called whenever the lane has finished every one of its records
    up to that one; `begin(sequence_number)`, if given, before a batch ending there is first
    delivered (the one-lane poller records it so that a restart re-delivers the same batch).
    """

    def __init__(
        self,
        *,
        name: str,
        mapping: MappingConfig,
        shard_id: str,
        invoke: Invoke,
        stats: RunnerStats,
        stop: threading.Event,
        commit: Callable[[str], None],
        committed: str | None,
        begin: Callable[[str], None] | None = None,
        on_buffer_change: Callable[[], None] = lambda: None,
        redelivery: RedeliveryPolicy | None = None,
        chooser: random.Random | None = None,
        retry_backoff_start_seconds: float = RETRY_BACKOFF_START_SECONDS,
        discards: DiscardReporter | None = None,
        oldest_kept: Callable[[], str | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`redelivery` (with `chooser`, its random source): retries reshaped, out of order on a
        mapping with a tumbling window, and successes delivered again (`local.runner.redelivery`).

        Expiry (`local.runner.expiry`): `discards` logs, counts and reports each discarded batch to
        the mapping's on-failure destination (by default it logs and counts); `oldest_kept` asks the
        shard for the sequence number of its oldest record kept (None: it keeps none), which a batch
        that keeps failing compares its records with; `clock` is the wall clock records' ages are
        measured on."""
        self.name = name
        self.mapping = mapping
        self.shard_id = shard_id
        self.invoke = invoke
        self.stats = stats
        self.counters: FunctionStats = stats.function(mapping.function_name)
        self.stop_event = stop
        self._commit_to = commit
        self._begin = begin
        self._on_buffer_change = on_buffer_change
        self._chooser = chooser or random.Random(0)
        self._reshapes = redelivery is not None and redelivery.reshapes
        self._reorders = self._reshapes and mapping.tumbling_window_seconds > 0
        self._again_after_success_pct = 0.0 if redelivery is None else redelivery.again_after_success_pct
        self._record_sizes: dict[str, int] = {}  # sequence number -> bytes in an event (`_fits`)
        self.retry_backoff_start_seconds = retry_backoff_start_seconds
        self.condition = threading.Condition()  # guards `buffer`: the poller appends, the lane takes
        self.buffer: list[Record] = []
        self.first_buffered_at: float | None = None
        self.last_added: str | None = None
        # The end of a batch that was in flight when an earlier runner stopped: the first batch
        # formed is exactly that one again (one lane only).
        self.redeliver_through: str | None = None
        # The last record of this lane known finished: where a reshaped retry may start from.
        self.committed = committed
        self.closing = False  # the shard is closed and read to its end: send without waiting
        # Records delivered and committed last, oldest first: what a shifted retry replays.
        self._delivered: deque[Record] = deque(maxlen=mapping.batch_size)
        self.window: events.TumblingWindow | None = None  # the open tumbling window, if any
        self._window_state: dict[str, Any] = {}
        self._discards = discards or DiscardReporter(name=name, mapping=mapping, shard_id=shard_id, stats=stats)
        self._oldest_kept = oldest_kept
        self._clock = clock
        # The stream trimmed records of this lane's last batch: its next ones are checked against it too.
        self._trim_suspected = False

    # ------------------------------------------------------------ records

    def add(self, records: Sequence[Record]) -> None:
        """Append records read from the shard (in shard order) and wake the lane's thread, if any."""
        if not records:
            return
        with self.condition:
            if not self.buffer:
                self.first_buffered_at = time.monotonic()
            self.buffer.extend(records)
            self.last_added = events.sequence_number_of(records[-1])
            self.condition.notify_all()

    def close(self) -> None:
        """No more records will come: send what is buffered without waiting for a window."""
        with self.condition:
            self.closing = True
            self.condition.notify_all()

    def wake(self) -> None:
        with self.condition:
            self.condition.notify_all()

    def _redelivery_size(self, force: bool) -> int | None:
        """How many buffered records form the interrupted batch; None until all of it is read."""
        assert self.redeliver_through is not None
        end = int(self.redeliver_through)
        if not force and (self.last_added is None or int(self.last_added) < end):
            return None
        return sum(1 for record in self.buffer if int(events.sequence_number_of(record)) <= end)

    def take_batch(self, force: bool) -> Batch | None:
        """The next batch from the buffer, or None if it should wait for more records."""
        with self.condition:
            return self._take_batch(force)

    def _take_batch(self, force: bool) -> Batch | None:
        if self.redeliver_through is not None:
            size = self._redelivery_size(force)
            if size is None:
                return None
            self.redeliver_through = None
            if size == 0:  # its records are gone (trimmed): nothing left to re-deliver
                return self._take_batch(force)
            interrupted = self.buffer[:size]
            passing = [r for r in interrupted if filters.record_matches(r, self.mapping.filter_patterns)]
            return Batch(passing, events.sequence_number_of(interrupted[-1]), size, size - len(passing))
        matched: list[Record] = []
        consumed = 0
        window_ends = payload_full = False
        first_window = self.window_of(self.buffer[0]) if self.buffer else None
        size = self._envelope_size(first_window)
        for record in self.buffer:
            if len(matched) == self.mapping.batch_size:
                break
            if self.window_of(record) != first_window:
                window_ends = True  # a batch never spans two tumbling windows
                break
            if filters.record_matches(record, self.mapping.filter_patterns):
                size += self._size_of(record) + (1 if matched else 0)
                if matched and size > events.INVOCATION_PAYLOAD_LIMIT_BYTES:
                    payload_full = True  # Lambda's 6 MB: this record starts the next batch
                    break
                matched.append(record)
            consumed += 1
        if consumed == 0:
            return None
        full = len(matched) == self.mapping.batch_size or window_ends or payload_full
        window = self.mapping.maximum_batching_window_seconds
        waited = time.monotonic() - (self.first_buffered_at or time.monotonic())
        if not (full or force or window <= 0 or waited >= window or not matched):
            return None
        return Batch(
            records=matched,
            last_sequence_number=events.sequence_number_of(self.buffer[consumed - 1]),
            consumed=consumed,
            filtered=consumed - len(matched),
        )

    def window_remaining_seconds(self) -> float | None:
        """Until the open batching window passes, when records wait in one; else None."""
        window = self.mapping.maximum_batching_window_seconds
        if not self.buffer or window <= 0 or self.first_buffered_at is None:
            return None
        return max(0.0, self.first_buffered_at + window - time.monotonic())

    # ------------------------------------------------------------ payload

    def _size_of(self, record: Record) -> int:
        """The record's bytes in an event's JSON, measured once while it is buffered."""
        sequence_number = events.sequence_number_of(record)
        size = self._record_sizes.get(sequence_number)
        if size is None:
            if len(self._record_sizes) > 4 * max(self.mapping.batch_size, len(self.buffer)):
                self._record_sizes.clear()  # forget records long delivered
            size = self._record_sizes[sequence_number] = events.json_size(record)
        return size

    def _envelope_size(self, window: events.TumblingWindow | None) -> int:
        """The bytes of an event in `window` without records (the window's state, if it is the open one)."""
        state = self._window_state if window is not None and window == self.window else {}
        return events.json_size(
            events.invocation_event(
                [], shard_id=self.shard_id, event_source_arn=self.mapping.event_source_arn, window=window, state=state
            )
        )

    def _fits(self, records: Sequence[Record]) -> bool:
        """Whether an event of these records, in the open window, is within Lambda's payload limit."""
        sizes = [self._size_of(record) for record in records]
        return events.event_size(self._envelope_size(self.window), sizes) <= events.INVOCATION_PAYLOAD_LIMIT_BYTES

    # ------------------------------------------------------------ delivery

    def _commit(self, sequence_number: str) -> None:
        if self.committed is None or int(sequence_number) > int(self.committed):
            self.committed = sequence_number
        self._commit_to(sequence_number)

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

    def window_of(self, record: Mapping[str, Any]) -> events.TumblingWindow | None:
        seconds = self.mapping.tumbling_window_seconds
        return events.TumblingWindow.containing(events.arrival_seconds(record), seconds) if seconds > 0 else None

    def _event(self, records: Sequence[Record], final: bool = False) -> dict[str, Any]:
        return events.invocation_event(
            records,
            shard_id=self.shard_id,
            event_source_arn=self.mapping.event_source_arn,
            window=self.window,
            state=self._window_state,
            final=final,
        )

    def _invoke(self, records: Sequence[Record], final: bool = False) -> InvocationResult:
        """One invocation; with a tumbling window, a response without `state` is a failure."""
        result = self.invoke(self._event(records, final))
        if self.window is None or result.failed:
            return result
        state = events.window_state_of(result.payload)
        if state is None:
            error = {"errorType": "InvalidWindowResponse", "errorMessage": "tumbling window response has no state"}
            return InvocationResult(payload=result.payload, error=error, duration_seconds=result.duration_seconds)
        self._window_state = state
        return result

    def _next_attempt(self, failed: list[Record]) -> list[Record]:
        """The records of the retry: the identical batch, or one reshaped by the redelivery policy.

        `failed` is in sequence order; the retry may not be (`reshape`, `reorder`)."""
        if not self._reshapes:
            return failed
        end = int(events.sequence_number_of(failed[-1]))
        with self.condition:
            following = [
                record
                for record in self.buffer
                if int(events.sequence_number_of(record)) > end
                and filters.record_matches(record, self.mapping.filter_patterns)
                and self.window_of(record) == self.window
            ]
        redelivery = reshape(
            failed,
            following=following,
            delivered_before=list(self._delivered),
            committed=self.committed,
            batch_size=self.mapping.batch_size,
            rng=self._chooser,
            reorder=self._reorders,
            fits=self._fits,
        )
        with self.stats.lock:
            reshaped = self.counters.reshaped_retries
            reshaped[redelivery.shape] = reshaped.get(redelivery.shape, 0) + 1
            if redelivery.reordered:
                reshaped[REORDERED] = reshaped.get(REORDERED, 0) + 1
        log.info(
            "%s: re-delivering %d record(s) %s%s",
            self.name,
            len(redelivery.records),
            redelivery.shape,
            ", out of order" if redelivery.reordered else "",
        )
        return redelivery.records

    def _again_after_success(self, succeeded: list[Record]) -> list[Record] | None:
        """The records to deliver again after `succeeded` succeeded (None: none, the usual case).

        At least once: a success is delivered once more with the policy's chance, before its
        checkpoint moves, out of order on a reordering mapping (`local.runner.redelivery`).
        """
        if not self._again_after_success_pct or self._chooser.random() * 100 >= self._again_after_success_pct:
            return None
        with self.stats.lock:
            self.counters.again_after_success += 1
        log.info("%s: delivering %d record(s) again after their success", self.name, len(succeeded))
        return out_of_order(succeeded, self._chooser) if self._reorders and len(succeeded) > 1 else list(succeeded)

    def _deliver(self, records: list[Record], invoked: int = 0) -> list[Record] | None:
        """Deliver `records` until done; the records of the attempt that ended it, in sequence
        order (None when stopping).

        That attempt's last record is committed. It is the batch's last record, or another one
        when a retry was reshaped (`process` then drops the buffered records up to it). An
        attempt may send its records out of order (a reordered retry); what it finished is
        counted in sequence order, as Lambda checkpoints at the lowest sequence number a
        response names as failed. Records that expire on the way are discarded (`_expire`): the
        checkpoint moves past them and the rest go on; when none are left, the discarded ones
        end it. `invoked`: invocations that held these records already (a bisected half's).
        """
        counters = self.counters
        pending = records  # the next attempt's records, in the order it sends them
        failures = 0
        invocations = invoked
        last_result: InvocationResult | None = None
        backoff = self.retry_backoff_start_seconds
        delivered_again = False
        again_now = False  # this attempt delivers a success once more: its records were sent and processed
        while pending:
            if self.stop_event.is_set():
                return None
            in_order = sorted(pending, key=lambda record: int(events.sequence_number_of(record)))
            expired = None if again_now else self._expire(in_order, failures, invocations, last_result)
            again_now = False
            if expired is not None:
                lost, in_order = expired
                if not in_order:
                    return lost
                pending = in_order  # the records left, from the first not discarded, in order
            state_before = self._window_state
            result = last_result = self._invoke(pending)
            invocations += 1
            if not result.failed:
                first_failed = self._failed_item_index(in_order, result)
                if first_failed is None:
                    again = None if delivered_again else self._again_after_success(in_order)
                    if again is not None:
                        delivered_again = again_now = True
                        self._window_state = state_before  # the checkpoint, with its state, did not move
                        pending = again
                        continue
                    with self.stats.lock:
                        counters.records_processed += len(in_order)
                    self._commit(events.sequence_number_of(in_order[-1]))
                    self._remember_delivered(in_order)
                    return in_order
                if first_failed > 0:
                    with self.stats.lock:
                        counters.records_processed += first_failed
                    self._commit(events.sequence_number_of(in_order[first_failed - 1]))
                in_order = in_order[first_failed:]
            elif self.mapping.bisect_batch_on_function_error and len(in_order) > 1:
                middle = len(in_order) // 2
                log.info("%s: bisecting a failed batch of %d records", self.name, len(in_order))
                first_half = self._deliver(in_order[:middle], invocations)
                second_half = None if first_half is None else self._deliver(in_order[middle:], invocations)
                return None if first_half is None or second_half is None else [*first_half, *second_half]
            failures += 1
            if 0 <= self.mapping.maximum_retry_attempts < failures:
                self._retries_spent(in_order, invocations, result)
                return in_order
            if not self._wait_to_retry(in_order, failures, result, backoff):
                return None
            backoff = min(backoff * 2, RETRY_BACKOFF_CAP_SECONDS)
            pending = self._next_attempt(in_order)
        return records

    def _retries_spent(self, in_order: list[Record], invocations: int, result: InvocationResult) -> None:
        """MaximumRetryAttempts retries of `in_order` have failed: discard them (`RetryAttemptsExhausted`)."""
        with self.stats.lock:
            self.counters.batches_skipped += 1
        limit = self.mapping.maximum_retry_attempts
        reason = f"MaximumRetryAttempts={limit} spent, the last attempt's error: {result.error}"
        self._discard(in_order, expiry.RETRY_ATTEMPTS_EXHAUSTED, invocations, result, reason)

    def _wait_to_retry(self, in_order: list[Record], failures: int, result: InvocationResult, backoff: float) -> bool:
        """Count and log the retry of `in_order`, then pause `backoff`; False when stopping meanwhile."""
        with self.stats.lock:
            self.counters.retries += 1
        log.info(
            "%s: retrying %d record(s) from %s (attempt %d) after %s",
            self.name,
            len(in_order),
            events.sequence_number_of(in_order[0]),
            failures + 1,
            (result.error or {}).get("errorType", "partial batch failure"),
        )
        return not self.stop_event.wait(backoff)

    def _expire(
        self,
        in_order: list[Record],
        failures: int,
        invocations: int,
        last_result: InvocationResult | None,
    ) -> tuple[list[Record], list[Record]] | None:
        """Discard the first records of an attempt that have expired (`local.runner.expiry`):
        (those discarded, those left), or None when none has.

        Expired: older than MaximumRecordAgeInSeconds, or below the oldest record the shard still
        keeps (trimmed by its retention), which is asked from the `STREAM_CHECK_AFTER_FAILURES`-th
        failure in a row on, and for every batch after one whose records were trimmed. Records of
        the attempt at or before the checkpoint (a shifted retry's, finished before) are left out
        of both. `invocations` and `last_result` describe the attempts so far, for the report.
        """
        ask_stream = failures >= expiry.STREAM_CHECK_AFTER_FAILURES or self._trim_suspected
        committed = -1 if self.committed is None else int(self.committed)
        new = [record for record in in_order if int(events.sequence_number_of(record)) > committed]
        now = self._clock()
        count = expiry.over_age(new, now=now, maximum_record_age_seconds=self.mapping.maximum_record_age_seconds)
        reason = ""
        if count:
            oldest = now - events.arrival_seconds(new[0])
            limit = self.mapping.maximum_record_age_seconds
            reason = f"older than MaximumRecordAgeInSeconds={limit}, the first {oldest:.1f} s"
        if ask_stream and self._oldest_kept is not None:
            try:
                oldest_kept = self._oldest_kept()
            except (ClientError, BotoCoreError) as error:
                log.warning("%s: could not ask the stream for its oldest record: %s", self.name, error)
            else:
                gone = expiry.trimmed(new, oldest_kept)
                self._trim_suspected = gone > 0
                if gone > count:
                    count = gone
                    reason = f"trimmed from the stream by its retention, the oldest record kept {oldest_kept or 'none'}"
        if not count:
            return None
        lost = new[:count]
        self._discard(lost, expiry.RECORD_AGE_EXCEEDED, invocations, last_result, reason)
        return lost, new[count:]

    def _discard(
        self,
        records: list[Record],
        condition: str,
        invocations: int,
        last_result: InvocationResult | None,
        reason: str,
    ) -> None:
        """Give up on `records` (in order) as Lambda does: report them, then checkpoint past the last."""
        discard = Discard(records, condition, invocations, last_result, reason)
        self._discards.report(discard)
        self._commit(events.sequence_number_of(records[-1]))

    def _remember_delivered(self, records: Sequence[Record]) -> None:
        """Keep the last delivered records in stream order, once each (a replay adds nothing)."""
        last = int(events.sequence_number_of(self._delivered[-1])) if self._delivered else -1
        self._delivered.extend(r for r in records if int(events.sequence_number_of(r)) > last)

    def close_window(self) -> bool:
        """The open tumbling window's final invocation (no records), retried until it succeeds."""
        backoff = self.retry_backoff_start_seconds
        while self._invoke([], final=True).failed:
            if self.stop_event.wait(backoff):
                return False
            backoff = min(backoff * 2, RETRY_BACKOFF_CAP_SECONDS)
        self.window, self._window_state = None, {}
        return True

    def process(self, batch: Batch) -> bool:
        """Deliver one batch (retries included) and drop it from the buffer; False when stopping."""
        if self.mapping.tumbling_window_seconds > 0 and batch.records:
            window = self.window_of(batch.records[0])
            if self.window is not None and window != self.window and not self.close_window():
                return False
            self.window = window
        if batch.records:
            if self._begin is not None:
                self._begin(batch.last_sequence_number)
            delivered = self._deliver(batch.records)
            if delivered is None:
                return False
            delivered_end = events.sequence_number_of(delivered[-1])
            if delivered_end != events.sequence_number_of(batch.records[-1]):  # a reshaped retry
                end = int(delivered_end)
                with self.condition:
                    self.buffer = [r for r in self.buffer if int(events.sequence_number_of(r)) > end]
                self._after_buffer_change()
                return True
        if batch.filtered:
            with self.stats.lock:
                self.counters.records_filtered += batch.filtered
        if not batch.records or batch.filtered:
            self._commit(batch.last_sequence_number)
        with self.condition:
            del self.buffer[: batch.consumed]
        self._after_buffer_change()
        return True

    def _after_buffer_change(self) -> None:
        with self.condition:
            self.first_buffered_at = time.monotonic() if self.buffer else None
        self._on_buffer_change()

    # -------------------------------------------------------- own thread

    def serve(self) -> None:
        """Send this lane's batches until stopped, or until the shard is closed and the lane empty.

        The loop of a lane that runs in a thread of its own (a shard with several lanes).
        """
        while not self.stop_event.is_set():
            with self.condition:
                batch = self._take_batch(force=self.closing)
                if batch is None:
                    if self.closing and not self.buffer:
                        return
                    remaining = self.window_remaining_seconds()
                    self.condition.wait(IDLE_LANE_WAIT_SECONDS if remaining is None else remaining)
                    continue
            if not self.process(batch):
                return
