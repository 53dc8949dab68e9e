"""State function: validate each message, then write each trade's newest version.

A Kinesis record is one message, or a KPL aggregate of many (`aggregation.kpl`): each of an
aggregate's user records is a message of its own from here on, validated, written or
quarantined alone (its identity is still its TradeID and Version, so a message sent twice,
in one aggregate or two, or once aggregated and once plain, is applied once).

Per batch: parse and validate every message (invalid ones are quarantined), keep
only the highest Version per TradeID, and issue one conditional `update_item` per
remaining message (`attribute_not_exists(TradeID) OR Version < :version`). A
failed condition means the table already holds this or a newer version: the
message is a duplicate or stale and changes nothing. Writes for distinct TradeIDs
are independent, so they run concurrently in a bounded pool.

Each item stores the trade's node path (`NodePath`: its hierarchy values in the level order
configured now), so the map function subtracts a later version's predecessor from exactly the
nodes it was added to, whatever `hierarchyLevels` has become by then.

Each item records the Kinesis event ID that wrote it, so a condition failure
caused by this very record (the SDK retrying an update whose response was lost,
or Lambda retrying the batch) is reported as written, not as a duplicate.

A message with the version already applied but different content (value or
hierarchy) is a *conflicting duplicate*: the first applied version stands, and
the conflict is counted and reported in the quarantine with its reason.

Every outcome the table answers (a write, or a failed condition with the stored
item) is remembered in a per-environment `VersionCache` (`aggregation.versions`):
a later message whose Version is not above the one seen would certainly fail its
condition, so it is settled from memory without a write, reported exactly as the
failed condition would have been, and counted in `WritesSkippedByVersionCache`.

Each record's write is built, and serialized, at the door, before anything is written:
whatever raises while a record is parsed, checked or turned into its request is that
record's fault, so it is quarantined with the exception as its reason (`quarantine_reason`)
and the batch goes on. Only the writes themselves can fail the batch: a DynamoDB or network
error is retryable, and quarantining it would lose a valid message.
"""

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import KinesisStreamEvent
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from aggregation.batches import is_conflicting_duplicate, select_latest_versions
from aggregation.exact import number_attribute
from aggregation.kpl import CorruptAggregate, is_aggregate, user_records
from aggregation.messages import InvalidMessage, TradeMessage, parse_trade_message
from aggregation.names import (
    CONFLICT_REASON_PREFIX,
    CONFLICTING_DUPLICATES,
    MESSAGES_RECEIVED,
    MESSAGES_WRITTEN,
    METRICS_NAMESPACE,
    QUARANTINED_RECORDS,
    STATE_SERVICE,
    TRADE_HIERARCHY,
    TRADE_ID,
    TRADE_NODE_PATH,
    TRADE_TIMESTAMP,
    TRADE_VALUE,
)
from aggregation.value_domain import ValueDomain
from aggregation.versions import StoredVersion, VersionCache
from function_support.aws import error_code, state_update_client
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.settings import (
    hierarchy_levels,
    int_setting,
    positive_int_setting,
    required_setting,
    value_domain,
)
from state_function.quarantine import QuarantinedRecord, RecordOrigin, quarantine_reason, quarantine_records

STAGE = "STATE"
DEFAULT_WRITE_CONCURRENCY = 16
DEFAULT_VERSION_CACHE_SIZE = 100_000

SERVICE = STATE_SERVICE

Item = TypeVar("Item")
Result = TypeVar("Result")

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)


@dataclass(frozen=True)
class StateWrite:
    """The outcome of one conditional update.

    `applied_digest` is the content digest now stored for the message's version:
    its own when written, the earlier message's when the version was already
    there, None when the table holds a newer version.
    """

    written: bool
    applied_digest: str | None


@dataclass(frozen=True)
class ReceivedMessage:
    """A valid record and its conditional update, ready to send (`update_arguments`)."""

    origin: RecordOrigin
    message: TradeMessage
    update: dict[str, Any]


def conflict_reason(message: TradeMessage) -> str:
    return (
        f"{CONFLICT_REASON_PREFIX}: TradeID {message.trade_id!r} Version {message.version} was already "
        "received with a different Value or Hierarchy; the first applied version stands"
    )


@dataclass(frozen=True)
class WriteLanes:
    """The bounded write pool: `lanes` writes at most in flight (`stateWriteConcurrency`), one
    thread per lane, created once per execution environment (`write_lanes`)."""

    executor: ThreadPoolExecutor
    lanes: int

    def run(self, items: Sequence[Item], work: Callable[[Item], Result]) -> list[Result]:
        """`work` of every item, results in item order, at most `lanes` items at a time.

        Each lane is one pool task that takes the next item left until none is, so a batch costs
        one submit and one thread wake-up per lane rather than per write (a future per write cost
        about 25 µs per record, against no pool at all, in `benchmarks/handler_overhead.py`), and
        the lanes still balance: a lane waiting on a slow round trip takes nothing more meanwhile.
        After an exception no lane takes another item; once every lane has stopped, the exception
        of the earliest failed item is raised (writes already sent stay sent: each is idempotent).
        """
        results: list[Result] = []
        if not items:
            return results
        results = [cast(Result, None)] * len(items)
        indices = iter(range(len(items)))
        taking = threading.Lock()
        failures: list[tuple[int, Exception]] = []

        def lane() -> None:
            while not failures:
                with taking:
                    index = next(indices, None)
                if index is None:
                    return
                try:
                    results[index] = work(items[index])
                except Exception as error:  # re-raised below, in the caller's thread
                    failures.append((index, error))

        for running in [self.executor.submit(lane) for _ in range(min(self.lanes, len(items)))]:
            running.result()
        if failures:
            raise min(failures, key=lambda failure: failure[0])[1]
        return results


@cache
def write_lanes() -> WriteLanes:
    """One bounded pool per execution environment."""
    lanes = positive_int_setting("STATE_WRITE_CONCURRENCY", DEFAULT_WRITE_CONCURRENCY)
    return WriteLanes(ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="state-write"), lanes)


@cache
def version_cache(table_name: str) -> VersionCache:
    """One cache per execution environment and table (a Lambda environment only ever sees one)."""
    return VersionCache(int_setting("STATE_VERSION_CACHE_SIZE", DEFAULT_VERSION_CACHE_SIZE, minimum=0))


def outcome(received: ReceivedMessage, stored: StoredVersion) -> StateWrite:
    """What a conditional write of `received` comes to when the table holds `stored` (this or a newer version).

    The record's own earlier write (an SDK retry after a lost response, or Lambda
    retrying the batch) counts as written; otherwise nothing is written, and the stored
    content digest tells a duplicate from a conflict when the version is the same.
    """
    if stored.written_by == received.origin.event_id:
        return StateWrite(written=True, applied_digest=received.message.content_digest)
    same_version = stored.version == received.message.version
    return StateWrite(written=False, applied_digest=stored.content_digest if same_version else None)


def stored_item_version(item: dict[str, Any]) -> StoredVersion:
    """The `StoredVersion` of a StateTable item as DynamoDB returns it (ALL_OLD)."""
    return StoredVersion(
        version=int(item["Version"]["N"]),
        content_digest=item.get("ContentDigest", {}).get("S"),
        written_by=item.get("WrittenByEventId", {}).get("S"),
    )


def update_arguments(table_name: str, message: TradeMessage, event_id: str, levels: tuple[str, ...]) -> dict[str, Any]:
    """The `update_item` arguments writing `message` unless the table holds this or a newer version.

    Pure, and every number converted here (`number_attribute`, which refuses what DynamoDB
    cannot store), so a message whose write cannot be built is found at the door, before any
    write, and quarantined rather than failing the batch. The attribute values are built
    directly, as boto3's `TypeSerializer` would build them (a property test holds them equal):
    its type dispatch took about 14 µs a message (three times the building itself).
    """
    names = {
        "#trade_id": TRADE_ID,
        "#version": "Version",
        "#value": TRADE_VALUE,
        "#hierarchy": TRADE_HIERARCHY,
        "#path": TRADE_NODE_PATH,
        "#timestamp": TRADE_TIMESTAMP,
        "#digest": "ContentDigest",
        "#writer": "WrittenByEventId",
    }
    values = {
        ":version": {"N": str(message.version)},  # an integer below 10^38: its digits (VERSION_LIMIT)
        ":value": number_attribute(message.value),
        ":hierarchy": {"M": {level: {"S": name} for level, name in zip(levels, message.hierarchy, strict=True)}},
        ":path": {"L": [{"S": name} for name in message.hierarchy]},
        ":digest": {"S": message.content_digest},
        ":writer": {"S": event_id},
    }
    assignments = (
        "#value = :value, #version = :version, #hierarchy = :hierarchy, #path = :path, "
        "#digest = :digest, #writer = :writer"
    )
    if message.timestamp is None:
        update = f"SET {assignments} REMOVE #timestamp"
    else:
        values[":timestamp"] = number_attribute(message.timestamp)
        update = f"SET {assignments}, #timestamp = :timestamp"
    return {
        "TableName": table_name,
        "Key": {TRADE_ID: {"S": message.trade_id}},
        "UpdateExpression": update,
        "ConditionExpression": "attribute_not_exists(#trade_id) OR #version < :version",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def receive(
    origin: RecordOrigin, table_name: str, levels: tuple[str, ...], domain: ValueDomain
) -> ReceivedMessage | QuarantinedRecord:
    """One record, parsed, checked and its write built; or, whatever went wrong, its quarantine entry.

    `InvalidMessage` is a rule the record breaks. Any other exception is a defect this record
    exposed (a number no check foresaw, say): it is still this record's alone, so it is
    quarantined with the exception named, logged with its traceback, and never fails the batch.
    """
    try:
        message = parse_trade_message(origin.payload, levels, domain)
        return ReceivedMessage(origin, message, update_arguments(table_name, message, origin.event_id, levels))
    except InvalidMessage as error:
        return QuarantinedRecord(origin, error.reason)
    except Exception as error:  # one record's defect must not stall its shard (docstring)
        logger.exception("record raised while it was read; quarantined", extra={"event_id": origin.event_id})
        return QuarantinedRecord(origin, quarantine_reason(error))


def record_origins(record: KinesisStreamRecord) -> Iterator[RecordOrigin | QuarantinedRecord]:
    """The messages one Kinesis record carries: itself, or each user record of its KPL aggregate.

    An aggregate that cannot be read (`CorruptAggregate`: digest, protobuf or tables) is one
    quarantine entry with its reason, never a partial read.
    """
    kinesis = record.kinesis  # a new Powertools view on every access
    origin = RecordOrigin(
        event_id=record.event_id,
        shard_id=record.event_id.split(":", 1)[0],
        sequence_number=kinesis.sequence_number,
        partition_key=kinesis.partition_key,
        payload=kinesis.data_as_bytes(),
    )
    if not is_aggregate(origin.payload):
        yield origin
        return
    try:
        carried = user_records(origin.payload)
    except CorruptAggregate as error:
        yield QuarantinedRecord(origin, error.reason)
        return
    for user in carried:
        yield replace(
            origin,
            event_id=f"{origin.event_id}:{user.sub_sequence_number}",
            partition_key=user.partition_key,
            payload=user.data,
            sub_sequence_number=user.sub_sequence_number,
        )


def apply_state_change(received: ReceivedMessage, known: VersionCache) -> StateWrite:
    """Send the record's conditional update; remember what the table answered.

    Only an answer is remembered (a write, or a failed condition with the stored item):
    any other error propagates, fails the batch (it is retried) and teaches `known` nothing.
    The request was validated when it was built (`state_update_client`).
    """
    message = received.message
    try:
        state_update_client().update_item(**received.update)
    except ClientError as error:
        if error_code(error) != "ConditionalCheckFailedException":
            raise
        # ALL_OLD: the item that won, holding this or a newer version.
        stored = stored_item_version(cast(dict[str, Any], error.response)["Item"])
    else:
        stored = StoredVersion(message.version, message.content_digest, received.origin.event_id)
    known.remember(message.trade_id, stored)
    return outcome(received, stored)


def settle_messages(table_name: str, latest: list[ReceivedMessage]) -> tuple[list[StateWrite], int]:
    """The outcome of each message (one per TradeID), and how many the version cache settled without a write.

    The others are written concurrently in the bounded pool, each outcome remembered.
    """
    known = version_cache(table_name)
    settled = [known.settling(item.message.trade_id, item.message.version) for item in latest]
    to_write = [item for item, stored in zip(latest, settled, strict=True) if stored is None]
    written = iter(write_lanes().run(to_write, lambda item: apply_state_change(item, known)))
    writes = [
        next(written) if stored is None else outcome(item, stored) for item, stored in zip(latest, settled, strict=True)
    ]
    return writes, len(latest) - len(to_write)


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    maybe_inject_failure(STAGE, FailurePoint.BEFORE_WRITE)
    state_table = required_setting("STATE_TABLE")
    quarantine_table = required_setting("QUARANTINE_TABLE")
    levels = hierarchy_levels()
    domain = value_domain()

    received: list[ReceivedMessage] = []
    rejected: list[QuarantinedRecord] = []
    for record in KinesisStreamEvent(event).records:
        for carried in record_origins(record):
            at_door = receive(carried, state_table, levels, domain) if isinstance(carried, RecordOrigin) else carried
            if isinstance(at_door, ReceivedMessage):
                received.append(at_door)
            else:
                rejected.append(at_door)

    selection = select_latest_versions(received, lambda item: item.message)
    writes, skipped = settle_messages(state_table, selection.latest)
    applied_digests = {
        item.message.trade_id: w.applied_digest for item, w in zip(selection.latest, writes, strict=True)
    }
    conflicts = [
        item
        for item in selection.latest + selection.same_version
        if is_conflicting_duplicate(item.message, applied_digests[item.message.trade_id])
    ]
    reported = rejected + [QuarantinedRecord(item.origin, conflict_reason(item.message)) for item in conflicts]
    if reported:
        quarantine_records(quarantine_table, reported)
        logger.warning("quarantined records", extra={"reasons": [r.reason for r in reported]})

    written = sum(w.written for w in writes)
    summary = {
        "received": len(received) + len(rejected),
        "written": written,
        "duplicate_or_stale": len(received) - written - len(conflicts),
        "conflicting_duplicates": len(conflicts),
        "quarantined": len(rejected),
    }
    metrics.add_metric(name=MESSAGES_RECEIVED, unit=MetricUnit.Count, value=summary["received"])
    metrics.add_metric(name=MESSAGES_WRITTEN, unit=MetricUnit.Count, value=written)
    metrics.add_metric(name="DuplicateOrStaleMessages", unit=MetricUnit.Count, value=summary["duplicate_or_stale"])
    metrics.add_metric(name=CONFLICTING_DUPLICATES, unit=MetricUnit.Count, value=len(conflicts))
    metrics.add_metric(name=QUARANTINED_RECORDS, unit=MetricUnit.Count, value=len(rejected))
    metrics.add_metric(name="WritesSkippedByVersionCache", unit=MetricUnit.Count, value=skipped)
    kinesis_count = len(event["Records"])
    metrics.add_metric(name="KinesisRecordsReceived", unit=MetricUnit.Count, value=kinesis_count)
    logger.info(
        "state batch done", extra={**summary, "skipped_by_version_cache": skipped, "kinesis_records": kinesis_count}
    )
    maybe_inject_failure(STAGE, FailurePoint.AFTER_WRITE)
    return summary
