"""The state function's writes as PartiQL statements, and what DynamoDB answers to each.

Why PartiQL: `BatchExecuteStatement` carries up to 25 single-item writes in one request, each
statement succeeding or failing on its own, at the write units of the same `UpdateItem`s. The
state function's CPU per message was mostly botocore's per-call machinery (endpoint rules, event
hooks, signing), paid once per `UpdateItem`; one call per 25 messages pays it once per 25.

PartiQL has no upsert, so a message is written by one of two statements (Developer Guide,
ql-reference.insert and ql-reference.update):

- `INSERT INTO "T" VALUE {...}`: creates the item; fails with ``DuplicateItem`` when it exists;
- `UPDATE "T" SET ... WHERE "TradeID" = ? AND "Version" < ?`: changes an existing item whose
  stored version is lower; fails with ``ConditionalCheckFailed`` otherwise, returning the stored
  item (``ReturnValuesOnConditionCheckFailure: ALL_OLD``) when there is one.

Together they are the conditional `update_item` the function sent before
(`attribute_not_exists(TradeID) OR Version < :version`), with the same item and the same stream
records (INSERT with its new image, MODIFY with old and new, `Timestamp` removed when a message
has none): an INSERT that finds the item is sent again as an UPDATE, an UPDATE that finds no
item as an INSERT (`answer`). Items are never deleted, so this settles in at most three rounds.

Every value of a message travels as a ``?`` parameter, never inside the statement text: the texts
are fixed per table and hierarchy (`statement_texts`), and a TradeID or level value can hold
anything a message may hold.
The attribute values are built directly, as boto3's `TypeSerializer` would build them (a property
test holds them equal), and every number is converted here, so a message whose write cannot be
built is found at the state function's door and quarantined before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING, Any

from aggregation.exact import number_attribute
from aggregation.messages import TradeMessage
from aggregation.names import (
    TRADE_HIERARCHY,
    TRADE_ID,
    TRADE_NODE_PATH,
    TRADE_TIMESTAMP,
    TRADE_VALUE,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import (
        BatchStatementErrorTypeDef,
        BatchStatementRequestTypeDef,
        BatchStatementResponseTypeDef,
    )

MAX_STATEMENTS_PER_CALL = 25
"""`BatchExecuteStatement` takes at most 25 statements (ql-reference.multiplestatements.batching)."""

VERSION = "Version"
CONTENT_DIGEST = "ContentDigest"
WRITTEN_BY = "WrittenByEventId"
ASSIGNED = (TRADE_VALUE, VERSION, TRADE_HIERARCHY, TRADE_NODE_PATH, CONTENT_DIGEST, WRITTEN_BY)
"""The attributes every write sets, in the order of their parameters (`StateWriteValues.assigned`);
`Timestamp` follows when the message has one, and is removed when it has none."""

THROTTLING_CODES = frozenset(
    {
        "ProvisionedThroughputExceeded",
        "ThrottlingError",
        "RequestLimitExceeded",
        "InternalServerError",
        "TransactionConflict",
    }
)
"""Statement errors that say "not now" (BatchStatementError codes): the statement is sent again."""


def call_groups(count: int) -> list[range]:
    """`count` statements in as few calls as `MAX_STATEMENTS_PER_CALL` allows, of sizes differing by at most one."""
    calls = -(-count // MAX_STATEMENTS_PER_CALL)
    size, larger = divmod(count, calls) if calls else (0, 0)
    groups, start = [], 0
    for call in range(calls):
        end = start + size + (call < larger)
        groups.append(range(start, end))
        start = end
    return groups


@dataclass(frozen=True, slots=True)
class StateWriteValues:
    """A message's write, built at the door: its key, and the ``?`` parameters of what it sets."""

    key: dict[str, str]  # the TradeID, {"S": ...}
    version: dict[str, str]  # also the bound of the UPDATE's condition
    assigned: list[dict[str, Any]]  # ASSIGNED's parameters in order, then the Timestamp's if any
    has_timestamp: bool


def state_write_values(message: TradeMessage, event_id: str, levels: tuple[str, ...]) -> StateWriteValues:
    """The parameters writing `message` under hierarchy `levels`, recorded as written by `event_id`.

    `Hierarchy` is one map parameter and `NodePath` one list parameter: a ``?`` standing for a
    whole attribute value is the form AWS documents. Parameters inside the statement's own map
    and list literals (``{'desk': ?}``) serialised about 5 µs faster per message, but no AWS
    document says DynamoDB binds them, and a refused form would stall every shard.
    Pure, and every number converted here (`number_attribute`, which refuses what DynamoDB
    cannot store). Built directly rather than through boto3's `TypeSerializer`, whose type
    dispatch cost several times the building itself.
    """
    version = {"N": str(message.version)}  # an integer below 10^38: its digits (VERSION_LIMIT)
    names = [{"S": name} for name in message.hierarchy]
    assigned: list[dict[str, Any]] = [
        number_attribute(message.value),
        version,
        {"M": dict(zip(levels, names, strict=True))},
        {"L": names},
        {"S": message.content_digest},
        {"S": event_id},
    ]
    timestamp = message.timestamp
    if timestamp is not None:
        assigned.append(number_attribute(timestamp))
    return StateWriteValues({"S": message.trade_id}, version, assigned, timestamp is not None)


def _quoted(identifier: str) -> str:
    """A PartiQL quoted identifier (a table or attribute name): double quotes, doubled inside."""
    return '"' + identifier.replace('"', '""') + '"'


def _tuple_key(name: str) -> str:
    """An attribute name as a key of a PartiQL tuple: single quotes, doubled inside."""
    return "'" + name.replace("'", "''") + "'"


def insert_text(table_name: str, attribute_names: Sequence[str]) -> str:
    """``INSERT INTO "T" VALUE {'a': ?, 'b': ?}``: an item of these attributes, each a ``?`` parameter
    in this order; ``DuplicateItem`` when an item with its key exists (ql-reference.insert)."""
    return (
        f"INSERT INTO {_quoted(table_name)} VALUE {{" + ", ".join(f"{_tuple_key(n)}: ?" for n in attribute_names) + "}"
    )


@dataclass(frozen=True)
class StatementTexts:
    """The four statements of one table: INSERT and UPDATE, with and without a Timestamp."""

    insert_with_timestamp: str
    insert_without_timestamp: str
    update_with_timestamp: str
    update_without_timestamp: str


@cache
def statement_texts(table_name: str) -> StatementTexts:
    """The statement texts writing to `table_name`, built once.

    Every attribute value is one ``?`` parameter (`state_write_values`). The UPDATE repeats
    ``SET`` per attribute, the form of the Developer Guide's examples (ql-reference.update).
    """
    table = _quoted(table_name)
    insert = insert_text(table_name, (TRADE_ID, *ASSIGNED)).removesuffix("}")
    sets = " ".join(f"SET {_quoted(name)} = ?" for name in ASSIGNED)
    condition = f"WHERE {_quoted(TRADE_ID)} = ? AND {_quoted(VERSION)} < ?"
    timestamp = _quoted(TRADE_TIMESTAMP)
    return StatementTexts(
        insert_with_timestamp=f"{insert}, {_tuple_key(TRADE_TIMESTAMP)}: ?}}",
        insert_without_timestamp=f"{insert}}}",
        update_with_timestamp=f"UPDATE {table} {sets} SET {timestamp} = ? {condition}",
        update_without_timestamp=f"UPDATE {table} {sets} REMOVE {timestamp} {condition}",
    )


def insert_statement(texts: StatementTexts, write: StateWriteValues) -> BatchStatementRequestTypeDef:
    """The `BatchStatementRequest` creating the item; ``DuplicateItem`` when it exists."""
    text = texts.insert_with_timestamp if write.has_timestamp else texts.insert_without_timestamp
    return {"Statement": text, "Parameters": [write.key, *write.assigned]}


def update_statement(texts: StatementTexts, write: StateWriteValues) -> BatchStatementRequestTypeDef:
    """The `BatchStatementRequest` raising an existing item's version; ``ConditionalCheckFailed``
    (with the stored item, if any) when there is no item or its version is not lower."""
    text = texts.update_with_timestamp if write.has_timestamp else texts.update_without_timestamp
    return {
        "Statement": text,
        "Parameters": [*write.assigned, write.key, write.version],
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


class Answer(Enum):
    """What one statement's response asks of the writer."""

    WRITTEN = "written"
    STORED = "stored"  # a failed condition with the stored item: this or a newer version is there
    SEND_AS_UPDATE = "send as update"  # the INSERT found the item
    SEND_AS_INSERT = "send as insert"  # the UPDATE found no item
    SEND_AGAIN = "send again"  # throttled or transient


class StatementFailed(RuntimeError):
    """A statement error that sending again cannot cure (validation, access, a missing table)."""


def error_code(error: BatchStatementErrorTypeDef) -> str:
    """A `BatchStatementError`'s code. The single-statement API names the same errors with an
    ``Exception`` suffix (``DuplicateItemException``): accepted here too, so no spelling is lost."""
    return str(error.get("Code", "")).removesuffix("Exception")


def answer(response: BatchStatementResponseTypeDef, inserting: bool) -> Answer:
    """What to do after one `BatchStatementResponse` of a statement sent as INSERT or as UPDATE.

    Raises `StatementFailed` for any error that is neither an answer about the item nor a
    "not now".
    """
    error = response.get("Error")
    if error is None:
        return Answer.WRITTEN
    code = error_code(error)
    if code == "ConditionalCheckFailed" and not inserting:
        return Answer.STORED if error.get("Item") else Answer.SEND_AS_INSERT
    if code == "DuplicateItem" and inserting:
        return Answer.SEND_AS_UPDATE
    if code in THROTTLING_CODES:
        return Answer.SEND_AGAIN
    raise StatementFailed(
        f"{'INSERT' if inserting else 'UPDATE'} of a state item failed: {code}: {error.get('Message', '')}"
    )
