"""What a plan is given: the workload, the settings, the service times, and the Lambda arithmetic every stage shares.

Pure (the standard library), like every module of the planner (`planner.model` lists them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

from planner.prices import PriceTable

PER_ITEM_WRITE_UNITS_PER_SECOND = 1000  # DynamoDB's per-partition write throughput
MAX_PARALLELIZATION_FACTOR = 10
STREAM_POLLS_PER_SECOND = 4  # Lambda polls a DynamoDB stream shard about four times a second
KINESIS_POLL_SECONDS = 1.0  # Lambda reads a Kinesis shard at a base rate of once a second
KINESIS_READS_PER_SECOND = 5  # GetRecords calls a Kinesis shard serves a second
GIGABYTE = 1024**3
KILOBYTE = 1024
LAMBDA_MB_PER_VCPU = 1769  # Lambda gives one full vCPU at 1,769 MB, proportionally less below
LAMBDA_INVOCATION_PAYLOAD_BYTES = 6 * 1024 * 1024
"""Lambda's limit on an invocation's event: what bounds a Kinesis batch's messages, whatever its
record count, once records are KPL aggregates (the data base64-encoded in the event)."""
AGGREGATE_MAX_BYTES = 50 * 1024  # the KPL's default AggregationMaxSize, which `send --aggregate` keeps too
AGGREGATE_FRAMING_BYTES = 20  # an aggregate's 4-byte signature and 16-byte MD5 digest
AGGREGATED_MESSAGE_OVERHEAD_BYTES = 48
"""What one message adds to an aggregate beside its data: its partition key in the key table
(a TradeID, a 36-character UUID, 38 bytes as a protobuf field) and ~10 bytes of protobuf tags,
lengths and key index."""

CapacityMode = Literal["on-demand", "provisioned"]


@dataclass(frozen=True)
class Workload:
    """The messages: rate, size and mix (percentages of messages)."""

    rate: float
    record_bytes: int = 300
    duplicates_pct: float = 10.0
    out_of_order_pct: float = 5.0  # messages that arrive after a newer version: stale, ignored
    modifications_pct: float = 20.0
    move_share: float = 0.3  # of modifications, those that move the trade to another node
    fan_out: tuple[int, ...] = (5, 5, 3)  # values per hierarchy level, root first
    # Ours only: conditional writes per message after dropping in-batch duplicates and
    # superseded versions (the write-cost benchmark measures it; 1.0 assumes no saving).
    state_writes_per_message: float = 1.0
    # The producer packs messages into KPL aggregated records (`send --aggregate`), each as
    # full as `AGGREGATE_MAX_BYTES` allows: a producer that buffers long enough to fill them
    # (the KPL's 100 ms RecordMaxBufferedTime does at a few thousand messages/s per shard).
    aggregated: bool = False

    @property
    def messages_per_kinesis_record(self) -> int:
        """Messages one Kinesis record carries: 1, or as many as fit in one full aggregate.

        A message too large to share an aggregate with another is sent as a plain record, as
        the KPL sends it.
        """
        if not self.aggregated:
            return 1
        return max(1, (AGGREGATE_MAX_BYTES - AGGREGATE_FRAMING_BYTES) // self.aggregated_message_bytes)

    @property
    def aggregated_message_bytes(self) -> int:
        """What one message takes inside an aggregate."""
        return self.record_bytes + AGGREGATED_MESSAGE_OVERHEAD_BYTES

    @property
    def kinesis_records_per_second(self) -> float:
        """Kinesis records the producer puts a second: what the per-shard record limit and the state batches count."""
        return self.rate / self.messages_per_kinesis_record

    @property
    def kinesis_record_bytes(self) -> int:
        """One Kinesis record's bytes: what on-demand ingest (1 KB-rounded) and PUT payload units bill."""
        messages = self.messages_per_kinesis_record
        if messages == 1:
            return self.record_bytes
        return AGGREGATE_FRAMING_BYTES + messages * self.aggregated_message_bytes

    def records_per_invocation(self, batch_size: int) -> int:
        """The most Kinesis records one state invocation takes: `batch_size`, or fewer when their data,
        base64-encoded (4 bytes for every 3), would exceed Lambda's event (92 full aggregates)."""
        return max(1, min(batch_size, LAMBDA_INVOCATION_PAYLOAD_BYTES * 3 // 4 // self.kinesis_record_bytes))

    @property
    def applied_share(self) -> float:
        """State changes per message: everything but duplicates and stale versions."""
        return max(0.0, 1.0 - (self.duplicates_pct + self.out_of_order_pct) / 100.0)

    @property
    def paths_per_change(self) -> float:
        """Hierarchy paths one state change touches: a move touches the old and the new one."""
        if self.applied_share == 0:
            return 1.0
        return 1.0 + (self.modifications_pct / 100.0) / self.applied_share * self.move_share

    @cached_property
    def nodes_per_level(self) -> tuple[int, ...]:
        """Nodes a level holds (the product of the fan-outs down to it): asked for in every plan's inner loops."""
        return tuple(math.prod(self.fan_out[: depth + 1]) for depth in range(len(self.fan_out)))


@dataclass(frozen=True)
class TableCapacity:
    """One table's capacity mode (`stateTableCapacity`, `deltaTableCapacity`, `aggregateTableCapacity`).

    On-demand bills every write request. Provisioned bills capacity by the hour, which
    Application Auto Scaling keeps near `target_utilization_percent` of what is consumed,
    between the minimum and the maximum (the table starts at the minimum). The provisioned
    figures are kept for an on-demand table too: the planner prices the alternative with them.
    """

    mode: CapacityMode = "on-demand"
    min_write_capacity: int = 5
    max_write_capacity: int = 40_000
    min_read_capacity: int = 1
    max_read_capacity: int = 1000
    target_utilization_percent: int = 70

    @property
    def provisioned(self) -> bool:
        return self.mode == "provisioned"


@dataclass(frozen=True)
class StreamCapacity:
    """The Kinesis stream's capacity mode (`streamMode`).

    On-demand: Kinesis adds shards as the writes grow and bills the stream-hour and every
    gigabyte in and out. Provisioned: `shard_count` shards, each taking at most 1,000 records
    and 1 MiB a second, billed by the shard-hour and by 25 KB PUT payload unit; reading is
    included for the one shared-throughput consumer the pipeline has. The shard count is fixed
    until someone reshards: a rate above what the shards take is throttled at the producer.
    """

    mode: CapacityMode = "on-demand"
    shard_count: int = 0  # provisioned only

    @property
    def provisioned(self) -> bool:
        return self.mode == "provisioned"


ARCHIVE_STORAGE_CLASSES = ("STANDARD", "STANDARD_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE")
"""Where `archiveLifecycle` can move archived delta objects: STANDARD keeps them there."""


@dataclass(frozen=True)
class ArchiveLifecycle:
    """`archiveLifecycle`: the storage class archived delta objects move to after `after_days`."""

    storage_class: str = "STANDARD"
    after_days: int = 0

    @property
    def transitions(self) -> bool:
        return self.storage_class != "STANDARD"


@dataclass(frozen=True)
class Settings:
    """The deployment's settings (cdk.json context names in the comments).

    The defaults are cdk.json's as the stack synthesizes them (a test keeps them equal to what
    `stacks.settings` reads from it): its `auto` ones as the planner chooses them for the default
    400 msg/s (`planner.scale_out.settings_for_rate`); state and map memory are the stack's fixed
    function sizes.
    """

    state_batch_size: int = 100  # stateBatchSize
    state_parallelization_factor: int = 2  # stateParallelizationFactor
    map_batch_size: int = 100  # mapBatchSize
    map_batching_window_seconds: float = 0.0  # mapBatchingWindowSeconds
    reduce_batch_size: int = 10  # reduceBatchSize
    markers: bool = True  # reduceIdempotency crt+marker (True) or crt
    state_memory_mb: int = 512
    map_memory_mb: int = 512  # stacks.settings.MAP_MEMORY_MB
    reduce_memory_mb: int = 256  # reduceMemoryMb
    aggregate_slices: int = 1  # aggregateSlices
    reduce_parallelization_factor: int = 1  # reduceParallelizationFactor
    state_table: TableCapacity = TableCapacity()  # stateTableCapacity
    delta_table: TableCapacity = TableCapacity()  # deltaTableCapacity
    aggregate_table: TableCapacity = TableCapacity()  # aggregateTableCapacity
    stream: StreamCapacity = StreamCapacity()  # streamMode
    archive_batch_size: int = 100  # archiveBatchSize
    archive_lifecycle: ArchiveLifecycle = ArchiveLifecycle()  # archiveLifecycle
    archive_access_log_retention_days: int = 365  # archiveAccessLogRetentionDays
    archive_batching_window_seconds: float = 10.0  # archiveBatchingWindowSeconds
    archive_parallelization_factor: int = 1  # archiveParallelizationFactor

    def table_capacity(self, table: str) -> TableCapacity:
        """The capacity of one of `PIPELINE_TABLES`."""
        by_table = {
            "StateTable": self.state_table,
            "DeltaTable": self.delta_table,
            "AggregateTable": self.aggregate_table,
        }
        return by_table[table]


@dataclass(frozen=True)
class ServiceTimes:
    """Per-invocation speeds the plan rests on. `make bench` passes measured values.

    The defaults are what `auto` settings (`planner.scale_out.settings_for_rate`) and the stack's
    capacity check size a deployment with, so each covers the slowest `make bench` measurement of
    the handlers as they now are, with a margin (at least 10 %, rounded up to 5): a default faster
    than the code leaves `auto` sizing for less than it needs. Section 5 of docs/benchmarks.md sets
    each measured figure beside its default and says when one is slower. CPU figures are per full
    vCPU; the plan slows them down by each function's memory (`cpu_slowdown`).

    Where each comes from (`make bench` runs on one 2-CPU machine, from the history of
    docs/benchmarks.md since the handlers took their present shape on 2026-11-25: the state
    function's batched PartiQL writes, map's stored node paths, reduce's sliced totals and its
    per-message latency figures; earlier runs measured other code):

    | default | slowest measured | where |
    | --- | --- | --- |
    | state 700 msg/s per instance at a 20 ms round trip | 3,079 | `make bench` 2026-11-26 02:08, section 2 |
    | state 250 µs CPU per Kinesis record | 65.1 | the same run, section 3 |
    | map 140 µs CPU per state change | 126.1 | `make bench` 2026-11-28 04:52 (load 0.6 at start), section 3 |
    | reduce 130 µs CPU per transaction action | 116.4 | the same run, section 3 |
    | reduce 10 µs CPU per message applied | 6.48 | `make bench` 2026-11-28 04:43, section 3 |

    The state figures keep the wide margin they had when the handler wrote one message at a time
    (534 msg/s and 521 µs in `make bench` of 2026-11-23). Map and reduce figures are those of the
    handlers since 2026-11-28 04:00 (delta items decoded from their typed JSON, transactions and
    delta-item puts without botocore's per-call parameter validation, latency values published 100
    to an EMF document): side by side with the code before, reduce spends 0.25x the CPU a message
    and an action all in, map 0.83x a state change. The earlier handlers measured up to 212.5 µs an
    action, 31.4 µs a message and 124.6 µs a state change (`make bench` 2026-11-28 02:10): those
    figures are of code that no longer runs. CPU time measured on a machine running four to six
    times more work than it has CPUs grows with the load, so such runs bound nothing and the
    defaults follow `make bench`. The original's 100 messages/s per instance is what its authors measured;
    the round trips are assumptions for DynamoDB and S3 in-region (the emulator's transaction
    takes 21 ms, section 1). The original's reduce is given the same CPU figures.
    """

    state_messages_per_second: float = 700.0  # on one full core
    state_cpu_us_per_message: float = 250.0  # of which CPU, on one full core (slower in a 512 MB function)
    original_state_messages_per_second: float = 100.0
    write_round_trip_ms: float = 20.0
    transaction_round_trip_ms: float = 25.0
    map_cpu_us_per_record: float = 140.0
    reduce_cpu_us_per_action: float = 130.0  # building and serialising one transaction action
    reduce_cpu_us_per_message: float = 10.0  # a delta item's ProducerTimestamps, parsed and summed
    s3_round_trip_ms: float = 30.0  # one S3 request (PutObject, GetObject), an assumption for S3 in-region


def cpu_slowdown(memory_mb: int) -> float:
    """How much slower CPU work runs in a function of `memory_mb` than on one full vCPU.

    Lambda allocates CPU in proportion to memory, one vCPU at 1,769 MB; the handler CPU
    figures are measured on one full core.
    """
    return max(1.0, LAMBDA_MB_PER_VCPU / memory_mb)


PURE_FUNCTION_CACHE_SIZE = 1 << 16
"""Results a memoized pure function of the planner keeps: one rate's searches ask about 11,000
distinct questions (`python -m benchmarks.capacity --scale-out` at 250,000 msg/s)."""


@lru_cache(maxsize=PURE_FUNCTION_CACHE_SIZE, typed=True)
def distinct_nodes(workload: Workload, changes: float) -> float:
    """Expected aggregate nodes touched by `changes` state changes, hierarchy values uniform.

    Memoized (typed, so an int and a float argument are answered apart, as computed): the planner's
    searches ask the same question hundreds of times, and a frozen workload and a number are its
    whole input.
    """
    touches = changes * workload.paths_per_change
    return float(sum(nodes * (1.0 - (1.0 - 1.0 / nodes) ** touches) for nodes in workload.nodes_per_level))


def lambda_monthly_usd(executions: float, memory_mb: int, invocations_per_second: float, prices: PriceTable) -> float:
    gb_seconds = executions * memory_mb / 1024 * prices.seconds_per_month
    requests = invocations_per_second * prices.seconds_per_month
    return gb_seconds * prices.lambda_gb_second + requests * prices.lambda_request


def steady_batch(
    batch_size: int, per_lane: float, poll_seconds: float, invocation_seconds: Callable[[float], float]
) -> float:
    """The records an invocation takes in steady state: what its lane gathered meanwhile.

    With no batching window Lambda invokes a lane with what it finds at a poll, up to the
    batch size. A lane whose invocations are shorter than the poll interval takes one poll's
    arrivals; one whose invocations run longer takes what arrived while the previous one ran
    (larger batches, each cheaper per record), until the batch size caps it. The fixed point
    of that, iterated from one poll's batch: an invocation's duration grows more slowly than
    its batch while the lane keeps up, so it converges; otherwise it reaches the cap.
    """
    batch = max(1.0, min(float(batch_size), per_lane * poll_seconds))
    for _ in range(100):
        following = max(1.0, min(float(batch_size), per_lane * max(poll_seconds, invocation_seconds(batch))))
        if abs(following - batch) < 1e-3 * batch:
            break
        batch = following
    return batch
