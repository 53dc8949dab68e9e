"""Sending the generated stream to Kinesis at a steady rate, at least once per message.

Why it retries forever (almost): the verifier's ground truth assumes every
message reached Kinesis. ``put_records`` can reject single records
(``FailedRecordCount`` with ``ProvisionedThroughputExceededException`` or
``InternalFailure``) or the whole call (throttling, 5xx, a dropped connection);
both are retried with exponential backoff and full jitter until Kinesis accepts
every record. A chunk that makes no progress at all for
``RetryPolicy.max_stall_seconds`` ends the run with an error instead of hanging.

The ledger records a message only once Kinesis has accepted it, and each process
journals it then (`producer.journal`), so an aborted run, even a SIGKILLed one,
still leaves a ledger that matches what the pipeline received; messages in
flight at the abort are counted as ``uncertain`` (in doubt).

With ``aggregate`` a chunk's messages go as KPL aggregates (`pack`, `producer.kpl`);
with ``processes`` > 1 each process sends its share (`send_in_processes`).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import queue
import secrets
import signal
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from random import Random
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError

from producer.generator import (
    DEFAULT_COUNT,
    DEFAULT_TIMESTAMP_EPOCH_MS,
    GeneratedMessage,
    GeneratorConfig,
    MessageGenerator,
    MessageKind,
)
from producer.journal import JournalWriter, journal_path, journals_of
from producer.kpl import AGGREGATE_MAX_BYTES, AggregateBuilder, ShardMap
from producer.ledger import Ledger, LedgerCounts, tally
from producer.model import DEFAULT_HIERARCHY_LEVELS, TradeState
from toolkit.cli import MAX_SECONDS
from toolkit.ledger import DEFAULT_LEDGER_PATH
from toolkit.pipeline import PipelineTarget

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

MAX_RECORDS_PER_CALL = 500
MAX_BYTES_PER_CALL = 5 * 1024 * 1024
MAX_BYTES_PER_RECORD = 1024 * 1024
"""Kinesis PutRecords limits; a record's size is its data plus its partition key."""

THROTTLING_ERROR_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "LimitExceededException",
        "KMSThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
    }
)
TRANSIENT_ERROR_CODES = frozenset(
    {
        "InternalFailure",
        "InternalFailureException",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


class SendError(Exception):
    """The run could not deliver every message (a non-retryable error, or no progress at all)."""


class DeliveryError(SendError):
    """A chunk gave up. ``undelivered`` records were never confirmed; ``uncertain`` says
    whether they may have landed anyway (the last attempt's outcome was unknown)."""

    def __init__(self, message: str, undelivered: int, uncertain: bool) -> None:
        super().__init__(message)
        self.undelivered = undelivered
        self.uncertain = uncertain


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: sleep ``uniform(0, min(cap, base * 2**attempt))``."""

    base_delay: float = 0.05
    max_delay: float = 5.0
    max_stall_seconds: float = 300.0

    def delay(self, attempt: int, rng: Random) -> float:
        return rng.uniform(0.0, min(self.max_delay, self.base_delay * (2**attempt)))


MAX_PROCESSES = 64
"""The most sending processes `send` starts: each is a Python interpreter with its own clients."""
MAX_CONCURRENCY = 256
"""The most put_records calls in flight per process."""
MAX_RATE = 10_000_000.0
"""The highest steady rate (messages per second) `send` accepts: far beyond any one producer."""


@dataclass(frozen=True)
class SendOptions:
    """What ``send_messages`` does; the CLI's ``send`` options, one for one.

    Neither ``count`` nor ``duration``: ``DEFAULT_COUNT`` messages. ``rate`` 0 is
    as fast as the stream and ``concurrency`` allow. ``timestamp_epoch_ms`` set
    makes the ``Timestamp`` field deterministic too (otherwise the wall clock,
    which is what end-to-end latency needs). ``ledger_path`` None: no ledger.
    """

    count: int | None = None
    duration: float | None = None
    rate: float = 0.0
    concurrency: int = 16
    trades: int | None = None
    duplicates_pct: float = 10.0
    out_of_order_pct: float = 5.0
    modifications_pct: float = 20.0
    malformed_pct: float = 1.0
    conflicting_pct: float = 0.0
    oversized_records: int = 0
    seed: int | None = None
    ledger_path: Path | None = DEFAULT_LEDGER_PATH
    hierarchy_levels: tuple[str, ...] = DEFAULT_HIERARCHY_LEVELS
    timestamp_epoch_ms: int | None = None
    aggregate: bool = False
    """Pack messages into KPL aggregated records (`producer.kpl`), as the KPL, Flink and Fluent Bit do."""
    hostile_aggregates_pct: float = 0.0
    """With `aggregate`: the share of aggregates built as an attacker would (`AggregateBuilder.build`)."""
    processes: int = 1
    """Sending processes, each with its own share of the messages and trades (`send_messages`)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    linger_seconds: float = 0.1
    """How long a partly filled chunk may wait for more messages at a low rate."""
    serialize_puts: bool | None = None
    """One put_records call at a time. None: only against an emulator, because moto
    (5.2.x) numbers a shard's records without a lock, so concurrent calls can
    overwrite each other's records while reporting success."""

    @property
    def applying_share(self) -> float:
        """About the share of the messages that change a trade (new or modified): duplicates, earlier
        versions sent late, malformed records and conflicting duplicates are never applied."""
        never_applied = self.duplicates_pct + self.out_of_order_pct + self.malformed_pct + self.conflicting_pct
        return max(0.0, 1 - never_applied / 100)

    def __post_init__(self) -> None:
        if self.count is not None and self.duration is not None:
            raise ValueError("give either a count or a duration, not both")
        if self.duration is not None and not 0 < self.duration <= MAX_SECONDS:  # False for NaN too
            raise ValueError(f"duration must be positive and at most {MAX_SECONDS} s")
        if not 0 <= self.rate <= MAX_RATE:
            raise ValueError(f"rate must be zero (unlimited) or positive, at most {MAX_RATE:g}")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be between 1 and {MAX_CONCURRENCY}")
        if not 1 <= self.processes <= MAX_PROCESSES:
            raise ValueError(f"processes must be between 1 and {MAX_PROCESSES}")
        if self.hostile_aggregates_pct and not self.aggregate:
            raise ValueError("--hostile-aggregates needs --aggregate")

    def generator_config(self, seed: int) -> GeneratorConfig:
        """The generator settings; raises ValueError on inconsistent percentages or counts."""
        count = None if self.duration is not None else (self.count or DEFAULT_COUNT)
        return GeneratorConfig(
            seed=seed,
            count=count,
            trades=self.trades,
            duplicates_pct=self.duplicates_pct,
            out_of_order_pct=self.out_of_order_pct,
            modifications_pct=self.modifications_pct,
            malformed_pct=self.malformed_pct,
            conflicting_pct=self.conflicting_pct,
            oversized_records=self.oversized_records,
            hierarchy_levels=self.hierarchy_levels,
            timestamp_epoch_ms=self.timestamp_epoch_ms or DEFAULT_TIMESTAMP_EPOCH_MS,
        )


@dataclass(frozen=True)
class SendProgressSnapshot:
    """Counters at one instant, for a live display."""

    sent: int
    retried: int
    throttled: int
    call_errors: int
    elapsed_seconds: float


class SendStatistics:
    """Thread-safe counters shared by the pacing loop and the delivery workers.

    With several processes, each also adds its progress counters to its slot of a shared
    array (`counters`, `share`), which the parent's display reads (`read_shared`).
    """

    SHARED_FIELDS = 4  # sent, retried, throttled, call errors

    def __init__(self, counters: Any = None, share: int = 0) -> None:
        self._counters = counters
        self._slot = share * self.SHARED_FIELDS
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.sent = 0
        self.bytes_sent = 0
        self.records = 0
        self.retried = 0
        self.throttled = 0
        self.call_errors = 0
        self.calls = 0

    def add(
        self,
        *,
        sent: int = 0,
        bytes_sent: int = 0,
        records: int = 0,
        retried: int = 0,
        throttled: int = 0,
        call_errors: int = 0,
        calls: int = 0,
    ) -> None:
        with self._lock:
            self.sent += sent
            self.bytes_sent += bytes_sent
            self.records += records
            self.retried += retried
            self.throttled += throttled
            self.call_errors += call_errors
            self.calls += calls
        if self._counters is not None:
            with self._counters.get_lock():
                for offset, number in enumerate((sent, retried, throttled, call_errors)):
                    self._counters[self._slot + offset] += number

    @classmethod
    def read_shared(cls, counters: Any, started: float) -> SendProgressSnapshot:
        """Every process's counters summed, for the parent's display."""
        with counters.get_lock():
            values = list(counters)
        sums = [sum(values[field :: cls.SHARED_FIELDS]) for field in range(cls.SHARED_FIELDS)]
        return SendProgressSnapshot(sums[0], sums[1], sums[2], sums[3], time.monotonic() - started)

    def snapshot(self) -> SendProgressSnapshot:
        with self._lock:
            return SendProgressSnapshot(
                self.sent, self.retried, self.throttled, self.call_errors, time.monotonic() - self.started
            )


@dataclass(frozen=True)
class SendSummary:
    """What a run did. ``counts`` are this run's; the ledger holds the merged totals."""

    seed: int
    counts: LedgerCounts
    messages_sent: int
    bytes_sent: int
    put_records_calls: int
    retried_records: int
    throttled_records: int
    call_errors: int
    elapsed_seconds: float
    uncertain: int
    ledger_path: Path | None
    ledger_trades: int
    ledger_nodes: int
    records_sent: int = 0
    """Kinesis records accepted: fewer than messages with `aggregate`."""

    @property
    def messages_per_second(self) -> float:
        return self.messages_sent / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0


class RatePacer:
    """A token bucket holding the send rate steady without bursts after a stall.

    The bucket holds at most ``burst`` tokens (50 ms worth by default), so a
    loop that fell behind does not catch up with a spike.
    """

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic):
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.capacity = burst if burst is not None else max(1.0, rate / 20.0)
        self._clock = clock
        self._tokens = 1.0
        self._updated = clock()

    def delay(self) -> float:
        """Seconds until a token is available (0 when one is)."""
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        # The epsilon absorbs float rounding, so a caller sleeping exactly the delay never spins.
        return 0.0 if self._tokens >= 1.0 - 1e-9 else (1.0 - self._tokens) / self.rate

    def take(self) -> None:
        self._tokens -= 1.0


class InFlightTrades:
    """TradeIDs of messages handed to a delivery worker and not yet accepted by Kinesis.

    Why: chunks are delivered concurrently and retried, so Kinesis may accept a later chunk
    before an earlier one. The ledger is indifferent to that (the highest version wins in any
    order) except for a conflicting duplicate, whose ground truth is "the first version in the
    shard stands": it is only sent once its trade's earlier messages have been accepted, so it
    lands after them in the trade's shard (one partition key, one shard, ordered). Behind them in
    the shard is not yet behind them for Lambda when they travelled in KPL aggregates under other
    partition keys: `Carriers` says which key keeps it behind them.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._counts: dict[str, int] = {}

    def add(self, messages: Sequence[GeneratedMessage]) -> None:
        with self._condition:
            for message in messages:
                self._counts[message.partition_key] = self._counts.get(message.partition_key, 0) + 1

    def accepted(self, messages: Sequence[GeneratedMessage]) -> None:
        with self._condition:
            for message in messages:
                left = self._counts.get(message.partition_key, 0) - 1
                if left > 0:
                    self._counts[message.partition_key] = left
                else:
                    self._counts.pop(message.partition_key, None)
            self._condition.notify_all()

    def wait_until_accepted(self, partition_key: str, stop: threading.Event) -> None:
        """Block until no message of `partition_key` is in flight (or the run stops)."""
        with self._condition:
            while self._counts.get(partition_key) and not stop.is_set():
                self._condition.wait(0.2)


class Carriers:
    """For each trade, the partition key of the Kinesis record that carried its newest version accepted so far.

    Why: Lambda keeps a shard's records in order only per Kinesis partition key once the
    mapping's ParallelizationFactor is above 1 (`stateParallelizationFactor` `auto` plans 2 at the
    default rate); records of other keys are processed side by side, in either order. A plain
    record's key is its TradeID, so a trade's messages keep their order. With aggregates the factor
    "will not work" (Lambda Developer Guide, Kinesis page): a stack told so (`producerAggregation`)
    runs 1, and the local runner one lane a shard once it reads an aggregate; but what Lambda does
    with aggregates under a factor above 1 is not documented further. Were it to run them in lanes
    by their keys: a KPL aggregate is sent under its first message's key, so the other messages it
    carries travel under another trade's key, and a conflicting duplicate in a later aggregate,
    under yet another key, could be stored before the version it conflicts with: the pipeline's
    "the version stored first stands" would then keep the conflict, while the ledger keeps the
    original. So a conflicting duplicate is sent under the key of the record that carried the
    version it repeats (`route`, used by `pack`): one key, one lane, behind that record, whichever
    Lambda does. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._carriers: dict[str, tuple[int, str]] = {}

    def accepted(self, records: Sequence[OutgoingRecord]) -> None:
        """Kinesis took `records`: each valid message's version is now carried under its record's key."""
        with self._lock:
            for record in records:
                for message in record.messages:
                    if message.kind is MessageKind.CONFLICTING_DUPLICATE or message.state is None:
                        continue
                    if message.trade_id is None:
                        continue
                    known = self._carriers.get(message.trade_id)
                    if known is None or message.state.version > known[0]:
                        self._carriers[message.trade_id] = (message.state.version, record.partition_key)

    def route(self, message: GeneratedMessage) -> str | None:
        """The partition key `message` must be sent under: for a conflicting duplicate, that of the
        record that carried its version; None for any other message, or when no record of this
        run carried the version (a trade of an earlier run)."""
        if message.kind is not MessageKind.CONFLICTING_DUPLICATE or message.trade_id is None or message.state is None:
            return None
        with self._lock:
            known = self._carriers.get(message.trade_id)
        return known[1] if known is not None and known[0] == message.state.version else None


def record_size(message: GeneratedMessage | OutgoingRecord) -> int:
    """A record's size as Kinesis counts it: data plus partition key bytes."""
    return len(message.data) + len(message.partition_key.encode("utf-8"))


@dataclass(frozen=True)
class OutgoingRecord:
    """One Kinesis record and the messages it carries: one, or a KPL aggregate's."""

    data: bytes
    partition_key: str
    messages: tuple[GeneratedMessage, ...]


MAX_MESSAGES_PER_AGGREGATED_CHUNK = 20_000
"""With `--aggregate` a chunk is bounded by bytes: one call's 5 MiB of messages, packed."""


class Chunk:
    """Messages for one ``put_records`` call, within every Kinesis limit (packed: `pack`)."""

    def __init__(self, aggregate: bool = False) -> None:
        self.messages: list[GeneratedMessage] = []
        self.size = 0
        self.started = 0.0
        self.aggregate = aggregate

    @property
    def limit(self) -> int:
        return MAX_MESSAGES_PER_AGGREGATED_CHUNK if self.aggregate else MAX_RECORDS_PER_CALL

    def fits(self, message: GeneratedMessage) -> bool:
        return len(self.messages) < self.limit and self.size + record_size(message) <= MAX_BYTES_PER_CALL

    def add(self, message: GeneratedMessage) -> None:
        size = record_size(message)
        if size > MAX_BYTES_PER_RECORD:
            raise SendError(f"message {message.sequence} is {size} bytes, over the Kinesis record limit")
        if not self.messages:
            self.started = time.monotonic()
        self.messages.append(message)
        self.size += size

    @property
    def full(self) -> bool:
        return len(self.messages) >= self.limit

    def __len__(self) -> int:
        return len(self.messages)


def chunk_messages(messages: Sequence[GeneratedMessage]) -> list[list[GeneratedMessage]]:
    """Split messages into put_records-sized chunks, preserving order."""
    chunks: list[list[GeneratedMessage]] = []
    chunk = Chunk()
    for message in messages:
        if chunk.messages and not chunk.fits(message):
            chunks.append(chunk.messages)
            chunk = Chunk()
        chunk.add(message)
    if chunk.messages:
        chunks.append(chunk.messages)
    return chunks


def pack(
    messages: Sequence[GeneratedMessage],
    shards: ShardMap | None,
    hostile_pct: float = 0.0,
    route: Callable[[GeneratedMessage], str | None] | None = None,
) -> list[OutgoingRecord]:
    """The records that carry `messages`: one each, or (`shards` given) KPL aggregates of one shard each.

    A message too large for an aggregate goes alone, as a plain record. Within an aggregate the
    messages keep their order; aggregates are sent under their first message's partition key.
    A message `route` names a partition key for (`Carriers.route`: a conflicting duplicate) goes
    alone, in an aggregate of its own sent under that key. `hostile_pct` of the aggregates are
    built hostile (`AggregateBuilder.build`): the same messages in a frame no KPL writes, which
    the state function must read all the same.
    """
    if shards is None:
        return [OutgoingRecord(m.data, m.partition_key, (m,)) for m in messages]
    records: list[OutgoingRecord] = []
    open_aggregates: dict[int, tuple[AggregateBuilder, list[GeneratedMessage]]] = {}

    built = 0

    def finish(builder: AggregateBuilder, partition_key: str, carried: Sequence[GeneratedMessage]) -> None:
        nonlocal built
        hostile = built * hostile_pct % 100 + hostile_pct >= 100  # every (100 / pct)-th, spread evenly
        built += 1
        records.append(OutgoingRecord(builder.build(hostile), partition_key, tuple(carried)))

    def close(shard: int) -> None:
        builder, carried = open_aggregates.pop(shard)
        finish(builder, carried[0].partition_key, carried)

    for message in messages:
        routed = route(message) if route is not None else None
        if routed is not None:
            alone = AggregateBuilder()
            if alone.size + alone.added_bytes(message.partition_key, message.data) > AGGREGATE_MAX_BYTES:
                records.append(OutgoingRecord(message.data, routed, (message,)))
            else:
                alone.add(message.partition_key, message.data)
                finish(alone, routed, (message,))
            continue
        shard = shards.shard_of(message.partition_key)
        if shard in open_aggregates:
            builder, _ = open_aggregates[shard]
            if builder.size + builder.added_bytes(message.partition_key, message.data) > AGGREGATE_MAX_BYTES:
                close(shard)
        if shard not in open_aggregates:
            alone = AggregateBuilder()
            if alone.size + alone.added_bytes(message.partition_key, message.data) > AGGREGATE_MAX_BYTES:
                records.append(OutgoingRecord(message.data, message.partition_key, (message,)))
                continue
            open_aggregates[shard] = (alone, [])
        builder, carried = open_aggregates[shard]
        builder.add(message.partition_key, message.data)
        carried.append(message)
    for shard in list(open_aggregates):
        close(shard)
    return records


def call_groups(records: Sequence[OutgoingRecord]) -> list[list[OutgoingRecord]]:
    """`records` in put_records-sized groups (500 records, 5 MiB), in order."""
    groups: list[list[OutgoingRecord]] = [[]]
    size = 0
    for record in records:
        if groups[-1] and (len(groups[-1]) >= MAX_RECORDS_PER_CALL or size + record_size(record) > MAX_BYTES_PER_CALL):
            groups.append([])
            size = 0
        groups[-1].append(record)
        size += record_size(record)
    return [group for group in groups if group]


class KinesisDelivery:
    """Delivers chunks to one stream, retrying failed records until accepted."""

    def __init__(
        self,
        client: KinesisClient,
        stream_name: str,
        *,
        statistics: SendStatistics,
        on_accepted: Callable[[Sequence[OutgoingRecord]], None],
        policy: RetryPolicy,
        abandon: threading.Event | None = None,
        serialize: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._stream_name = stream_name
        self._statistics = statistics
        self._on_accepted = on_accepted
        self._policy = policy
        self._abandon = abandon or threading.Event()
        self._sleep = sleep
        self._jitter = Random()  # not the seeded one: sleeps never change the messages
        self._call_lock: threading.Lock | None = threading.Lock() if serialize else None

    def deliver(
        self,
        records: Sequence[OutgoingRecord],
        on_accepted: Callable[[Sequence[OutgoingRecord]], None] | None = None,
    ) -> None:
        """Return once Kinesis has accepted every record (at least once), one call's worth at a time.

        ``on_accepted`` (default: the delivery's) is told the records each call got accepted.
        Raises DeliveryError when a call fails for a reason retrying cannot fix,
        when the run is abandoned, or after ``max_stall_seconds`` without progress;
        its ``undelivered`` counts messages.
        """
        for group in call_groups(records):
            self._deliver_group(group, on_accepted or self._on_accepted)

    def _deliver_group(
        self, records: Sequence[OutgoingRecord], on_accepted: Callable[[Sequence[OutgoingRecord]], None]
    ) -> None:
        pending = list(records)
        attempt = 0
        last_progress = time.monotonic()
        ambiguous = False
        while pending:
            if self._abandon.is_set():
                raise DeliveryError(f"abandoned {len(pending)} records in flight", _messages(pending), ambiguous)
            try:
                pending, progressed, ambiguous = self._attempt(pending, on_accepted)
            except ClientError as error:
                raise DeliveryError(_describe(error), _messages(pending), False) from error
            if not pending:
                return
            now = time.monotonic()
            if progressed:
                last_progress = now
            elif now - last_progress > self._policy.max_stall_seconds:
                raise DeliveryError(
                    f"Kinesis accepted none of {len(pending)} records for {self._policy.max_stall_seconds:.0f} s",
                    _messages(pending),
                    ambiguous,
                )
            self._statistics.add(retried=len(pending))
            self._sleep(self._policy.delay(attempt, self._jitter))
            attempt += 1

    def _attempt(
        self, pending: list[OutgoingRecord], on_accepted: Callable[[Sequence[OutgoingRecord]], None]
    ) -> tuple[list[OutgoingRecord], bool, bool]:
        """One put_records call.

        Returns the records still to send, whether any went through, and whether
        the outcome of the call was unknown (a 5xx or a broken connection).
        """
        entries: list[PutRecordsRequestEntryTypeDef] = [
            {"Data": message.data, "PartitionKey": message.partition_key} for message in pending
        ]
        self._statistics.add(calls=1)
        try:
            if self._call_lock is None:
                response = self._client.put_records(StreamName=self._stream_name, Records=entries)
            else:
                with self._call_lock:
                    response = self._client.put_records(StreamName=self._stream_name, Records=entries)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in THROTTLING_ERROR_CODES:
                self._statistics.add(throttled=len(pending), call_errors=1)
                return pending, False, False
            if code in TRANSIENT_ERROR_CODES or status >= 500:
                self._statistics.add(call_errors=1)
                return pending, False, True
            raise
        except (BotocoreConnectionError, HTTPClientError):
            # The call may or may not have landed; resending is at-least-once, as promised.
            self._statistics.add(call_errors=1)
            return pending, False, True
        results = response["Records"]
        if len(results) != len(pending):
            raise SendError(f"put_records answered {len(results)} results for {len(pending)} records")
        accepted: list[OutgoingRecord] = []
        failed: list[OutgoingRecord] = []
        throttled = 0
        for record, result in zip(pending, results, strict=True):
            error_code = result.get("ErrorCode")
            if error_code:
                failed.append(record)
                throttled += error_code in THROTTLING_ERROR_CODES
            else:
                accepted.append(record)
        if accepted:
            self._statistics.add(
                sent=sum(len(record.messages) for record in accepted),
                bytes_sent=sum(record_size(r) for r in accepted),
                records=len(accepted),
            )
            on_accepted(accepted)
        if throttled:
            self._statistics.add(throttled=throttled)
        return failed, bool(accepted), False


class SendProgress(Protocol):
    """Someone showing a run's progress (the CLI's live display); the sender only reports to it."""

    def start(
        self, total_messages: int | None, duration: float | None, read: Callable[[], SendProgressSnapshot]
    ) -> None:
        """The run begins: ``read`` returns the counters now, from any thread."""

    def stop(self) -> None:
        """Every chunk is delivered or abandoned."""


class _SendRun:
    """One sending process's shared state: its ledger and journal, the chunks in flight, the failures.

    The pacing loop (:func:`_pace_and_submit`) hands full chunks to :meth:`flush`, which
    journals them as sending and submits them to delivery workers (at most ``2 * concurrency``
    waiting); a worker packs a chunk into records (`pack`), records and journals what Kinesis
    accepted (:meth:`accepted`), then journals the chunk settled; on failure it stops the loop.
    """

    def __init__(
        self,
        ledger: Ledger,
        client: KinesisClient,
        target: PipelineTarget,
        options: SendOptions,
        *,
        journal: JournalWriter | None = None,
        statistics: SendStatistics | None = None,
    ) -> None:
        self.ledger = ledger
        self.journal = journal
        self.statistics = statistics or SendStatistics()
        self.run_counts = LedgerCounts()
        self.in_flight = InFlightTrades()
        self.carriers = Carriers()
        self.stop = threading.Event()
        self.abandon = threading.Event()
        self.failures: list[BaseException] = []
        self.uncertain = 0
        self.shards = ShardMap.of_stream(client, target.stream_name) if options.aggregate else None
        self.hostile_aggregates_pct = options.hostile_aggregates_pct
        self._chunk_ids = itertools.count()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(options.concurrency * 2)
        self._executor = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="put-records")
        self._delivery = KinesisDelivery(
            client,
            target.stream_name,
            statistics=self.statistics,
            on_accepted=lambda records: self.accepted(None, records),
            policy=options.retry,
            abandon=self.abandon,
            serialize=target.is_local if options.serialize_puts is None else options.serialize_puts,
        )

    def accepted(self, chunk: int | None, records: Sequence[OutgoingRecord]) -> None:
        """Kinesis took these: their messages are in the ground truth (and the journal) from now on.

        Their carriers are noted before a conflicting duplicate waiting for them is released."""
        messages = [message for record in records for message in record.messages]
        if self.shards is not None:
            self.carriers.accepted(records)
        self.in_flight.accepted(messages)
        with self._lock:
            for message in messages:
                self.ledger.record(message)
                tally(self.run_counts, message)
            if self.journal is not None and chunk is not None:
                self.journal.accepted(chunk, messages)

    def flush(self, chunk: Chunk) -> Chunk:
        """Submit a chunk for delivery (waiting for a free slot); returns the next, empty chunk."""
        if not chunk.messages:
            return chunk
        while not self._slots.acquire(timeout=0.2):
            if self.stop.is_set():
                return Chunk(chunk.aggregate)
        number = next(self._chunk_ids)
        if self.journal is not None:
            with self._lock:
                self.journal.sending(number, len(chunk.messages))
        self.in_flight.add(chunk.messages)
        self._executor.submit(self._deliver, number, chunk.messages)
        return Chunk(chunk.aggregate)

    def _deliver(self, number: int, messages: list[GeneratedMessage]) -> None:
        settled = True
        try:
            self._delivery.deliver(
                pack(messages, self.shards, self.hostile_aggregates_pct, self.carriers.route),
                lambda accepted: self.accepted(number, accepted),
            )
        except BaseException as error:
            if isinstance(error, DeliveryError) and error.uncertain:
                settled = False  # in the journal, the rest stays in doubt
                with self._lock:
                    self.uncertain += error.undelivered
            self.failures.append(error)
            self.stop.set()
        finally:
            if settled and self.journal is not None:
                with self._lock:
                    self.journal.settled(number)
            self._slots.release()

    def run(self, generator: MessageGenerator, options: SendOptions) -> bool:
        """Pace, chunk and deliver every message; True when Ctrl-C (or SIGTERM) interrupted the run.

        A first interrupt stops generating and lets the chunks in flight finish; a second
        abandons them (their records count as uncertain when the outcome is unknown).
        """
        interrupted = False
        try:
            _pace_and_submit(generator, options, self.stop, self.flush, self.in_flight)
        except KeyboardInterrupt:
            interrupted = True
            self.stop.set()
        try:
            self._executor.shutdown(wait=True)
        except KeyboardInterrupt:
            interrupted = True
            self.abandon.set()
            self._executor.shutdown(wait=True)
        return interrupted


@dataclass(frozen=True)
class ShareOutcome:
    """What one sending process did with its share (picklable: it crosses from a child process)."""

    counts: LedgerCounts
    sent: int
    records: int
    bytes_sent: int
    calls: int
    retried: int
    throttled: int
    call_errors: int
    uncertain: int
    interrupted: bool
    failure: str | None


def share_options(options: SendOptions, seed: int, share: int) -> tuple[SendOptions, int]:
    """Process `share`'s options and seed: its part of the count, rate, trades and oversized records.

    One process keeps the run's own seed, so its messages are the same as before processes existed.
    """
    parts = options.processes

    def part(total: int) -> int:
        return total // parts + (share < total % parts)

    if parts == 1:
        return options, seed
    return (
        replace(
            options,
            count=None if options.count is None else max(1, part(options.count)),
            rate=options.rate / parts,
            trades=None if options.trades is None else max(1, part(options.trades)),
            oversized_records=part(options.oversized_records),
            processes=1,
        ),
        (seed * 1_000_003 + share + 1) % 2**63,
    )


def trades_of_share(trades: Mapping[str, TradeState], share: int, parts: int) -> dict[str, TradeState]:
    """The existing trades process `share` may send new versions of: each trade to exactly one process,
    so no two processes ever send versions of one trade (the ground truth stays per process)."""
    return {trade: state for trade, state in trades.items() if zlib.crc32(trade.encode()) % parts == share}


def send_share(
    target: PipelineTarget,
    options: SendOptions,
    seed: int,
    ledger: Ledger,
    journal: Path | None,
    *,
    kinesis_client: KinesisClient | None = None,
    statistics: SendStatistics | None = None,
    progress: SendProgress | None = None,
) -> ShareOutcome:
    """Generate and send one process's share, journalling what Kinesis accepts into `journal`."""
    config = options.generator_config(seed)
    clock = None if options.timestamp_epoch_ms is not None else time.time
    generator = MessageGenerator(config, ledger.trades, clock=clock)
    client = kinesis_client or target.kinesis(max_pool_connections=options.concurrency + 2)
    writer = JournalWriter(journal) if journal is not None else None
    run = _SendRun(ledger, client, target, options, journal=writer, statistics=statistics)
    if progress is not None:
        progress.start(config.count if options.duration is None else None, options.duration, run.statistics.snapshot)
    try:
        interrupted = run.run(generator, options)
    finally:
        if progress is not None:
            progress.stop()
        if writer is not None:
            writer.close()
    statistics_now = run.statistics
    return ShareOutcome(
        counts=run.run_counts,
        sent=statistics_now.sent,
        records=statistics_now.records,
        bytes_sent=statistics_now.bytes_sent,
        calls=statistics_now.calls,
        retried=statistics_now.retried,
        throttled=statistics_now.throttled,
        call_errors=statistics_now.call_errors,
        uncertain=run.uncertain,
        interrupted=interrupted,
        failure=_describe(run.failures[0]) if run.failures else None,
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """SIGTERM (``timeout``, CI, a closed terminal) stops a run as Ctrl-C does: chunks in flight
    finish and are journalled. Only the main thread can install it."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def _watch_parent(parent: int) -> None:
    """A child whose parent died (SIGKILL) stops as if interrupted, rather than sending on unseen."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


@dataclass(frozen=True)
class ShareTask:
    """What a child process sends (picklable)."""

    target: PipelineTarget
    options: SendOptions
    seed: int
    ledger: Ledger
    journal: Path | None
    share: int
    parent: int


def _share_process(task: ShareTask, counters: Any, results: Any) -> None:
    """A child process's main: send the share, put its outcome on `results`.

    It starts with SIGINT blocked (`send_in_processes`), so the Ctrl-C a terminal sends the whole
    process group cannot interrupt its start-up; ignored from here, the one pending is dropped.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent turns Ctrl-C into SIGTERM, once
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        stop_on_sigterm()
        threading.Thread(target=_watch_parent, args=(task.parent,), daemon=True).start()
        statistics = SendStatistics(counters, task.share)
        outcome = send_share(task.target, task.options, task.seed, task.ledger, task.journal, statistics=statistics)
    except KeyboardInterrupt:  # SIGTERM before the share's own handling began: nothing was sent
        outcome = ShareOutcome(LedgerCounts(), 0, 0, 0, 0, 0, 0, 0, 0, True, None)
    except Exception as error:  # reported by the parent, as one line
        outcome = ShareOutcome(LedgerCounts(), 0, 0, 0, 0, 0, 0, 0, 0, False, _describe(error))
    results.put((task.share, outcome))


def _start_children(children: list[Any]) -> None:
    """Start each child so that neither Ctrl-C nor SIGTERM can break its start-up (issue 38: one
    KeyboardInterrupt traceback per child), and raise KeyboardInterrupt here once all have started
    if either came meanwhile.

    SIGINT is blocked while they start, and a child inherits the mask through spawn's exec: the
    Ctrl-C a terminal sends the whole process group waits in it until `_share_process` ignores it.
    Here, both signals only take note meanwhile: an interrupt inside `Process.start` could leave a
    child started without its task (it would die on the missing data with a traceback).
    """
    if threading.current_thread() is not threading.main_thread():  # only the main thread handles signals
        for child in children:
            child.start()
        return
    received: list[int] = []

    def take_note(signum: int, _frame: object) -> None:
        received.append(signum)

    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    installed = [number for number, handler in handlers.items() if handler is not None]
    for number in installed:
        signal.signal(number, take_note)
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        for child in children:
            child.start()
    finally:
        for number in installed:
            signal.signal(number, handlers[number])
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)  # a Ctrl-C held back interrupts here
    if received:
        raise KeyboardInterrupt


def _terminate(children: Sequence[Any]) -> None:
    for child in children:
        if child.is_alive() and child.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)


def send_in_processes(
    target: PipelineTarget,
    options: SendOptions,
    seed: int,
    ledger: Ledger,
    *,
    journals: Sequence[Path | None],
    progress: SendProgress | None,
) -> list[ShareOutcome]:
    """Each share in its own process (spawned: no thread or client crosses a fork)."""
    context = multiprocessing.get_context("spawn")
    parts = options.processes
    counters = context.Array("q", parts * SendStatistics.SHARED_FIELDS)
    results = context.Queue()
    children = []
    for share in range(parts):
        share_opts, share_seed = share_options(options, seed, share)
        share_ledger = Ledger(ledger.hierarchy_levels, trades_of_share(ledger.trades, share, parts))
        task = ShareTask(target, share_opts, share_seed, share_ledger, journals[share], share, os.getpid())
        child = context.Process(target=_share_process, args=(task, counters, results), name=f"producer-share-{share}")
        children.append(child)
    started = time.monotonic()
    outcomes: dict[int, ShareOutcome] = {}
    interrupted = False
    try:
        try:
            _start_children(children)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while they start: stop those started
            interrupted = True
            children = [child for child in children if child.pid is not None]
            _terminate(children)
        if progress is not None and not interrupted:
            progress.start(options.count, options.duration, lambda: SendStatistics.read_shared(counters, started))
        while len(outcomes) < len(children):
            try:
                share, outcome = results.get(timeout=0.5)
                outcomes[share] = outcome
            except queue.Empty:
                if not any(child.is_alive() for child in children) and results.empty():
                    break
            except KeyboardInterrupt:
                if interrupted:
                    raise
                interrupted = True
                _terminate(children)
    finally:
        if progress is not None:
            progress.stop()
        for child in children:
            child.join()
    missing = [share for share in range(parts) if share not in outcomes]
    # Interrupted, a share that never reported was stopped before it sent (or mid-start-up): not a failure.
    died = None if interrupted else "a sending process died"
    lost = [ShareOutcome(LedgerCounts(), 0, 0, 0, 0, 0, 0, 0, 0, interrupted, died) for _ in missing]
    return (
        [*outcomes.values(), *lost]
        if not interrupted
        else [*(replace(o, interrupted=True) for o in outcomes.values()), *lost]
    )


def send_messages(
    target: PipelineTarget,
    options: SendOptions,
    *,
    progress: SendProgress | None = None,
    kinesis_client: KinesisClient | None = None,
) -> SendSummary:
    """Generate and send one run, journalling the ground truth as Kinesis accepts it, then merge it into the ledger.

    ``progress`` is told when the run starts and stops (the CLI shows a live display).
    ``kinesis_client`` lets callers (and tests) supply a configured client (one process only).
    With ``options.processes`` > 1 each process sends its share (`share_options`) of the
    messages, over trades no other process touches (`trades_of_share`), to its own journal;
    the ledger absorbs every journal at the end (and `Ledger.load` does whenever a run was
    killed before that). Raises SendError (after saving the ledger of what was accepted) when
    delivery fails, and re-raises KeyboardInterrupt after draining in-flight chunks and saving
    the ledger.
    """
    levels = options.hierarchy_levels
    ledger_path = options.ledger_path
    ledger = Ledger.load(ledger_path, levels) if ledger_path else Ledger(levels)
    seed = options.seed if options.seed is not None else secrets.randbelow(2**31)
    config = options.generator_config(seed)
    run_id = uuid.uuid4().hex[:12]
    journals = [
        None if ledger_path is None else journal_path(ledger_path, run_id, share) for share in range(options.processes)
    ]
    started_at = time.time()
    started = time.monotonic()
    if options.processes == 1:
        outcomes = [
            send_share(target, options, seed, ledger, journals[0], kinesis_client=kinesis_client, progress=progress)
        ]
    else:
        outcomes = send_in_processes(target, options, seed, ledger, journals=journals, progress=progress)
    elapsed = time.monotonic() - started
    counts = LedgerCounts()
    for outcome in outcomes:
        _add_counts(counts, outcome.counts)
    counts.uncertain = sum(outcome.uncertain for outcome in outcomes)

    if ledger_path is not None:
        ledger = Ledger.load(ledger_path, levels)
        ledger.runs.append(
            _run_record(counts, seed=seed, started_at=started_at, target=target, config=config, options=options)
        )
        ledger.save(ledger_path)
        for journal in journals_of(ledger_path):
            if journal.name in ledger.merged_journals:
                journal.unlink(missing_ok=True)
    summary = SendSummary(
        seed=seed,
        counts=counts,
        messages_sent=sum(outcome.sent for outcome in outcomes),
        bytes_sent=sum(outcome.bytes_sent for outcome in outcomes),
        put_records_calls=sum(outcome.calls for outcome in outcomes),
        retried_records=sum(outcome.retried for outcome in outcomes),
        throttled_records=sum(outcome.throttled for outcome in outcomes),
        call_errors=sum(outcome.call_errors for outcome in outcomes),
        elapsed_seconds=elapsed,
        uncertain=counts.uncertain,
        ledger_path=ledger_path,
        ledger_trades=len(ledger.trades),
        ledger_nodes=len(ledger.aggregates()) if ledger_path is not None else 0,
        records_sent=sum(outcome.records for outcome in outcomes),
    )
    if any(outcome.interrupted for outcome in outcomes):
        raise KeyboardInterrupt
    failures = [outcome.failure for outcome in outcomes if outcome.failure is not None]
    if failures:
        raise SendError(f"{failures[0]} ({summary.messages_sent} messages were accepted and are in the ledger)")
    return summary


def _add_counts(total: LedgerCounts, part: LedgerCounts) -> None:
    for name in LedgerCounts.__dataclass_fields__:
        if name == "malformed_by_kind":
            for kind, number in part.malformed_by_kind.items():
                total.malformed_by_kind[kind] = total.malformed_by_kind.get(kind, 0) + number
        else:
            setattr(total, name, getattr(total, name) + getattr(part, name))


def _run_record(
    counts: LedgerCounts,
    *,
    seed: int,
    started_at: float,
    target: PipelineTarget,
    config: GeneratorConfig,
    options: SendOptions,
) -> dict[str, Any]:
    """What the ledger keeps about one run (floats as text: the ledger holds no binary floats, not even here)."""
    return {
        "seed": seed,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_at)),
        "stream": target.stream_name,
        "messages_sent": counts.messages_sent,
        "uncertain": counts.uncertain,
        "options": {
            "count": config.count,
            "duration": None if options.duration is None else repr(options.duration),
            "rate": repr(options.rate),
            "trades": config.trade_budget(),
            "duplicates_pct": repr(options.duplicates_pct),
            "out_of_order_pct": repr(options.out_of_order_pct),
            "modifications_pct": repr(options.modifications_pct),
            "malformed_pct": repr(options.malformed_pct),
            "conflicting_pct": repr(options.conflicting_pct),
            "oversized_records": options.oversized_records,
            "hierarchy_levels": ",".join(options.hierarchy_levels),
            "aggregate": options.aggregate,
            "processes": options.processes,
        },
    }


def _messages(records: Sequence[OutgoingRecord]) -> int:
    return sum(len(record.messages) for record in records)


def _describe(error: BaseException) -> str:
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "Error")
        message = error.response.get("Error", {}).get("Message", "")
        return f"{code}: {message}".rstrip(": ")
    return str(error) or type(error).__name__


def _pace_and_submit(
    generator: MessageGenerator,
    options: SendOptions,
    stop: threading.Event,
    flush: Callable[[Chunk], Chunk],
    in_flight: InFlightTrades | None = None,
) -> None:
    """The pacing loop: take a token, make a message, add it to the chunk, flush when due.

    A conflicting duplicate first waits for its trade's earlier messages (`InFlightTrades`).
    """
    pacer = RatePacer(options.rate) if options.rate > 0 else None
    deadline = time.monotonic() + options.duration if options.duration is not None else None
    linger = options.linger_seconds
    chunk = Chunk(options.aggregate)
    while not stop.is_set():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            break
        if pacer is not None:
            delay = pacer.delay()
            if delay > 0:
                if chunk.messages and now + delay - chunk.started >= linger:
                    chunk = flush(chunk)
                if deadline is not None:
                    delay = min(delay, max(0.0, deadline - now))
                time.sleep(delay)
                continue
            pacer.take()
        message = next(generator, None)
        if message is None:
            break
        if in_flight is not None and message.kind is MessageKind.CONFLICTING_DUPLICATE:
            if any(queued.partition_key == message.partition_key for queued in chunk.messages):
                chunk = flush(chunk)
            in_flight.wait_until_accepted(message.partition_key, stop)
        if chunk.messages and not chunk.fits(message):
            chunk = flush(chunk)
        chunk.add(message)
        if chunk.full or time.monotonic() - chunk.started >= linger:
            chunk = flush(chunk)
    flush(chunk)
