"""State function: validate each message, then write each trade's newest version.

A Kinesis record is one message, or a KPL aggregate of many (`aggregation.kpl`): each of an
aggregate's user records is a message of its own from here on, validated, written or
quarantined alone (its identity is still its TradeID and Version, so a message sent twice,
in one aggregate or two, or once aggregated and once plain, is applied once).

Per batch: parse and validate every message (invalid ones are quarantined), keep
only the highest Version per TradeID, and write each remaining message unless the table
holds this or a newer version: a PartiQL INSERT where there is no item, an UPDATE
`WHERE "Version" < ?` where there is one (`aggregation.state_statements`), up to 25 per
`BatchExecuteStatement` call, each statement answered on its own. A failed condition means
the table already holds this or a newer version: the message is a duplicate or stale and
changes nothing. Writes for distinct TradeIDs are independent, so the calls run
concurrently in a bounded pool.

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

Each record's write is built at the door, before anything is written:
whatever raises while a record is parsed, checked or turned into its request is that
record's fault, so it is quarantined with the exception as its reason (`quarantine_reason`)
and the batch goes on. Only the writes themselves can fail the batch: a DynamoDB or network
error is retryable, and quarantining it would lose a valid message.
"""

import threading
import time
from binascii import a2b_base64
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from aggregation.batches import is_conflicting_duplicate, select_latest_versions, stored_content_digest
from aggregation.kpl import CorruptAggregate, is_aggregate, user_records
from aggregation.messages import InvalidMessage, TradeMessage, parse_trade_message
from aggregation.names import (
    CONFLICT_REASON_PREFIX,
    CONFLICTING_DUPLICATES,
    MESSAGES_RECEIVED,
    MESSAGES_WRITTEN,
    QUARANTINED_RECORDS,
    STATE_SERVICE,
)
from aggregation.state_statements import (
    Answer,
    StatementTexts,
    StateWriteValues,
    answer,
    call_groups,
    insert_statement,
    state_write_values,
    statement_texts,
    update_statement,
)
from aggregation.value_domain import ValueDomain
from aggregation.versions import StoredVersion, VersionCache, settles
from function_support.aws import state_update_client
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.settings import (
    hierarchy_levels,
    int_setting,
    positive_int_setting,
    required_setting,
    value_domain,
)
from state_function.quarantine import (
    QuarantinedRecord,
    RecordOrigin,
    insert_quarantine_items,
    quarantine_now,
    quarantine_reason,
)
from state_function.resends import MAX_RESENDS, resend_pause

STAGE = "STATE"
DEFAULT_WRITE_CONCURRENCY = 16
DEFAULT_VERSION_CACHE_SIZE = 100_000
MAX_ROUNDS = 4
"""Switches between INSERT and UPDATE allowed to one statement, plus one: after the first INSERT,
an UPDATE (the item existed), an INSERT (the UPDATE found none: impossible while items are never
deleted), an UPDATE. A statement's fourth switch is a defect: raise. Throttled resends are not
switches (`state_function.resends`)."""
QUARANTINE_LOG_SAMPLE = 10
"""Quarantined records named in the batch's log line; the rest are counted (one event can
quarantine hundreds of thousands of records, and the log line must stay readable)."""

SERVICE = STATE_SERVICE

Item = TypeVar("Item")
Result = TypeVar("Result")

logger = Logger(service=SERVICE)
# The namespace is the stack's own, from POWERTOOLS_METRICS_NAMESPACE (`aggregation.names.stack_metrics_namespace`).
metrics = Metrics(service=SERVICE)


@dataclass(frozen=True)
class StateWrite:
    """The outcome of one conditional update.

    `applied_digest` is the content digest now stored for the message's version:
    its own when written, the earlier message's when the version was already
    there, None when the table holds a newer version.
    """

    written: bool
    applied_digest: str | None


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A valid record and its write's values, ready to send (`state_write_values`)."""

    origin: RecordOrigin
    message: TradeMessage
    write: StateWriteValues


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
    """The `StoredVersion` of a StateTable item as DynamoDB returns it (ALL_OLD), its content
    digested under the levels configured now, whatever they were when it was written."""
    return StoredVersion(
        version=int(item["Version"]["N"]),
        content_digest=stored_content_digest(item, hierarchy_levels()),
        written_by=item.get("WrittenByEventId", {}).get("S"),
    )


def receive(origin: RecordOrigin, levels: tuple[str, ...], domain: ValueDomain) -> ReceivedMessage | QuarantinedRecord:
    """One record, parsed, checked and its write built; or, whatever went wrong, its quarantine entry.

    `InvalidMessage` is a rule the record breaks. Any other exception is a defect this record
    exposed (a number no check foresaw, say): it is still this record's alone, so it is
    quarantined with the exception named, logged with its traceback, and never fails the batch.
    """
    try:
        message = parse_trade_message(origin.payload, levels, domain)
        return ReceivedMessage(origin, message, state_write_values(message, origin.event_id, levels))
    except InvalidMessage as error:
        return QuarantinedRecord(origin, error.reason)
    except Exception as error:  # one record's defect must not stall its shard (docstring)
        logger.exception("record raised while it was read; quarantined", extra={"event_id": origin.event_id})
        return QuarantinedRecord(origin, quarantine_reason(error))


def record_origins(record: dict[str, Any]) -> list[RecordOrigin | QuarantinedRecord]:
    """The messages one Kinesis event record carries: itself, or each user record of its KPL aggregate.

    Read from the event's dicts directly: Powertools' `KinesisStreamRecord` builds a new view
    object on every attribute access, a few µs per record for nothing the function needs.
    An aggregate that cannot be read (`CorruptAggregate`: digest, protobuf or tables) is one
    quarantine entry with its reason, never a partial read; so is one whose reading raised anything
    else (a defect it exposed), which must not fail the batch on every retry and stall the shard.
    """
    kinesis = record["kinesis"]
    event_id: str = record["eventID"]
    origin = RecordOrigin(
        event_id=event_id,
        shard_id=event_id.partition(":")[0],
        sequence_number=kinesis["sequenceNumber"],
        partition_key=kinesis["partitionKey"],
        payload=a2b_base64(kinesis["data"]),  # what `base64.b64decode` calls, without its Python layer
    )
    if not is_aggregate(origin.payload):
        return [origin]
    try:
        carried = user_records(origin.payload)
    except CorruptAggregate as error:
        return [QuarantinedRecord(origin, error.reason)]
    except Exception as error:  # one record's defect must not stall its shard (docstring)
        logger.exception("aggregate raised while it was read; quarantined", extra={"event_id": event_id})
        return [QuarantinedRecord(origin, quarantine_reason(error))]
    sequence_number, shard_id = origin.sequence_number, origin.shard_id
    return [
        RecordOrigin(
            f"{event_id}:{user.sub_sequence_number}",
            shard_id,
            sequence_number,
            user.partition_key,
            user.data,
            user.sub_sequence_number,
        )
        for user in carried
    ]


class WritesUnsettled(RuntimeError):
    """Statements still unanswered after every round and resend allowed: the batch fails and is retried."""


def write_statements(
    texts: StatementTexts, items: Sequence[ReceivedMessage], inserting: list[bool], known: VersionCache
) -> list[StateWrite]:
    """Write `items` (distinct TradeIDs, at most 25) with one `BatchExecuteStatement` per round.

    Each message starts as the statement `inserting` says (INSERT unless the version cache knows
    an older version of the trade) and is sent again as the other one when its item says so
    (`aggregation.state_statements.answer`); throttled statements are sent again after a jittered
    pause. Each answer about the item (a write, or a failed condition with the stored item) is
    remembered in `known`. Anything else, a statement switched `MAX_ROUNDS` times, or one throttled
    more than `MAX_RESENDS` times in a row, raises (each counted per statement: a statement's
    throttling is not another's switch): the batch is retried, and every statement is idempotent
    (a message's own earlier write is recognised by `WrittenByEventId`, `outcome`).
    """
    writes: list[StateWrite | None] = [None] * len(items)
    pending = list(range(len(items)))
    switches = [0] * len(items)
    throttles = [0] * len(items)
    client = state_update_client()
    while pending:
        statements = [(insert_statement if inserting[i] else update_statement)(texts, items[i].write) for i in pending]
        responses = client.batch_execute_statement(Statements=statements)["Responses"]
        unanswered = []
        for index, response in zip(pending, responses, strict=True):
            received = items[index]
            kind = answer(response, inserting[index])
            if kind is Answer.WRITTEN:
                message = received.message
                stored = StoredVersion(message.version, message.content_digest, received.origin.event_id)
            elif kind is Answer.STORED:
                stored = stored_item_version(response["Error"]["Item"])
            else:
                if kind is Answer.SEND_AGAIN:
                    throttles[index] += 1
                else:
                    inserting[index] = kind is Answer.SEND_AS_INSERT
                    switches[index] += 1
                    throttles[index] = 0
                unanswered.append(index)
                continue
            known.remember(received.message.trade_id, stored)
            writes[index] = outcome(received, stored)
        pending = unanswered
        if any(switches[index] >= MAX_ROUNDS for index in pending):
            raise WritesUnsettled(
                f"{len(pending)} state writes unsettled after {MAX_ROUNDS} rounds of INSERT and UPDATE"
            )
        resends = max((throttles[index] for index in pending), default=0)
        if resends > MAX_RESENDS:
            raise WritesUnsettled(f"{len(pending)} state writes still throttled after {MAX_RESENDS} resends")
        if resends:
            time.sleep(resend_pause(resends))
    return cast(list[StateWrite], writes)


def settle_messages(
    table_name: str, levels: tuple[str, ...], latest: list[ReceivedMessage]
) -> tuple[list[StateWrite], int]:
    """The outcome of each message (one per TradeID), and how many the version cache settled without a write.

    The others are written in calls of up to 25 statements, run concurrently in the bounded pool,
    each outcome remembered.
    """
    known = version_cache(table_name)
    seen = [known.get(item.message.trade_id) for item in latest]
    writes: list[StateWrite | None] = [
        outcome(item, stored) if stored is not None and settles(stored, item.message.version) else None
        for item, stored in zip(latest, seen, strict=True)
    ]
    to_write = [index for index, write in enumerate(writes) if write is None]
    texts = statement_texts(table_name)

    def write_group(group: range) -> list[StateWrite]:
        chosen = [to_write[position] for position in group]
        return write_statements(
            texts, [latest[index] for index in chosen], [seen[index] is None for index in chosen], known
        )

    groups = call_groups(len(to_write))
    for group, written in zip(groups, write_lanes().run(groups, write_group), strict=True):
        for position, write in zip(group, written, strict=True):
            writes[to_write[position]] = write
    return cast(list[StateWrite], writes), len(latest) - len(to_write)


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
    for record in event["Records"]:
        for carried in record_origins(record):
            at_door = receive(carried, levels, domain) if isinstance(carried, RecordOrigin) else carried
            if isinstance(at_door, ReceivedMessage):
                received.append(at_door)
            else:
                rejected.append(at_door)

    selection = select_latest_versions(received, lambda item: item.message)
    writes, skipped = settle_messages(state_table, levels, selection.latest)
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
        write_lanes().run(quarantine_now(quarantine_table, reported), insert_quarantine_items)
        logger.warning(
            "quarantined records",
            extra={
                "quarantined": len(reported),
                "sample": [
                    {"record": r.origin.event_id, "reason": r.reason[:200]} for r in reported[:QUARANTINE_LOG_SAMPLE]
                ],
            },
        )

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
