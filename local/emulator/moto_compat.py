"""Every correction of moto the local runtime needs, in one place.

moto is the embedded emulator. Where it deviates from documented AWS behaviour in a way
that matters to an exactly-once pipeline, this module restores the documented behaviour.
Each fix is one small function with a docstring naming the AWS behaviour it restores and
where AWS documents it. `apply()` installs them all (idempotently) in the emulator's
server process before it serves; `CompatMiddleware` wraps moto's WSGI app.

Fixes (see each function):

- `fix_transact_write_items_client_request_token`: TransactWriteItems honours
  ClientRequestToken (10-minute idempotency window, IdempotentParameterMismatchException).
- `fix_transaction_rollback_copies_only_what_it_touches`: a cancelled TransactWriteItems
  restores the items it touched and drops their stream records; moto deep-copies every
  table it touches before every transaction (time and memory grow with the table).
- `fix_update_item_single_stream_record`: an UpdateItem that creates an item emits one
  INSERT stream record holding the full new image (moto emits a key-only INSERT first).
- `fix_partiql_single_item_statements`: ExecuteStatement and BatchExecuteStatement run
  single-item PartiQL INSERT / UPDATE / DELETE / SELECT as the equivalent item requests
  (conditions, DuplicateItem, ALL_OLD, per-statement batch errors), in time independent of
  table size; moto converted every item of every table per statement and had no conditions.
- `fix_number_arithmetic`: ADD and `SET a = a + :b` work on any number DynamoDB accepts
  (`1E+3`, 38 significant digits) exactly; moto calls int() on exponent notation and
  rounds to Python's 28-digit default.
- `fix_item_size_follows_the_developer_guide`: the 400 KB item limit counts the 3 +
  1-per-element bytes of lists and maps (moto counts none) and a number's significant
  digits (moto counts its characters).
- `fix_dynamodb_streams_have_several_shards`: with `EMULATOR_STREAM_SHARDS` = N, a table's
  stream has N shards and each item's records go to one (moto: one shard per stream).
- `fix_event_source_mappings_do_not_push`: writes to a stream, table or queue never invoke
  Lambda synchronously, and never drop stream records. The local runner polls, as
  Lambda's event source mappings do.
- `fix_dynamodb_streams_iterators_expire`: a DynamoDB Streams shard iterator expires (and
  is freed) 15 minutes after it is returned; moto keeps every one forever.
- `fix_kinesis_iterators_expire`: a Kinesis shard iterator expires 5 minutes after it is
  returned (GetRecords: ExpiredIteratorException); moto's never expire.
- `fix_stream_records_expire_after_the_retention_period`: DynamoDB stream records are trimmed
  24 hours after they are written, Kinesis records after the stream's retention period (moto
  keeps every one forever); TRIM_HORIZON moves with the trim point, and a DynamoDB Streams
  iterator below it gets TrimmedDataAccessException. Lazy, on the compat clock.
- `fix_ssm_parameter_defaults_resolved_only_when_used`: a stack parameter of an SSM
  parameter type resolves the SSM parameter it is given; its default is not looked up
  when the caller passes a value (moto resolves every default first, and fails on one
  that does not exist, such as AWS's public `/aws/service/...` parameters).
- `fix_cloudformation_updates_tables_in_place`: a stack update changes a table's in-place
  properties (deletion protection, TTL, encryption, ...) on the existing table, items kept, and
  refuses a change AWS makes by replacement (moto had no table update: the stack update failed).
- `fix_capacity_mode_switches_are_limited`: a table switches from provisioned to on-demand at
  most four times in 24 hours (compat clock), by UpdateTable or a stack update; moto had no limit.
- `fix_cloudformation_function_update_sets_reserved_concurrency`: a stack update sets (or
  removes) a function's reserved concurrency as the template says (moto kept the old one).
- `fix_cloudformation_metadata_changes_update_no_resource`: a resource whose only change is its
  Metadata is not updated (moto replaced a log group by None, and the update failed on its GetAtt).
- `fix_s3_object_requests_are_atomic_per_key`: an S3 conditional PUT (``If-Match``,
  ``If-None-Match``) checks and writes as one step, and a GetObject is never failed by a
  concurrent overwrite (moto checks, then writes later with no lock: two compare-and-swaps
  of one object could both succeed).
- `CompatMiddleware` answers only this machine's own clients: a ``Host`` header naming
  loopback with the server's port (a web page whose DNS name was rebound to 127.0.0.1 sends
  its own name, and gets 421), and no cross-origin browser request (an ``Origin`` other than
  the emulator's own, or ``Sec-Fetch-Site`` other than ``same-origin`` or ``none``: 403). AWS
  checks a signature on every request; the emulator verifies none, so without this any page in
  the user's browser that found the port could create tables and write records.
  `disable_global_cors` turns off moto's answer to every CORS preflight.
- `CompatMiddleware` holds the functions' execution-role sessions to their roles' policies
  before anything else (`local.emulator.iam_check`): a call no statement allows gets the
  service's AccessDenied, a refused PartiQL statement of a batch its own ``AccessDenied``
  (`denied_statements`), and a GET or HEAD of a missing S3 key 403 without ``s3:ListBucket``.
- `CompatMiddleware` serialises DynamoDB and Kinesis requests: conditional writes and
  transactions are atomic and isolated (moto's rollback of a cancelled transaction
  otherwise discards writes made concurrently by other requests), and concurrent Kinesis
  puts never share a sequence number (moto otherwise overwrites records).

DynamoDB Streams needs no patch but has a requirement: run moto in server mode and reach
it through an endpoint URL (`AWS_ENDPOINT_URL`), as `local.emulator` does. In-process
`mock_aws` fails every streams call that carries a StreamArn (DescribeStream,
GetShardIterator: "404 Not yet implemented"), because current botocore sends them to an
account-based ``<account>.streams-ddb…`` host moto does not route; with an endpoint URL
every call reaches moto's streams backend. tests/local/emulator/test_moto_compat.py proves each fix.

Control endpoints (served by `CompatMiddleware`, never forwarded to moto):

- ``GET  /_compat/health``        -> ``{"status": "ok", "fixes": [...], "iam": "enforce"}``:
  readiness, proof that the fixes are installed, and whether IAM is enforced (``EMULATOR_IAM``).
- ``GET  /_compat/iam``           -> the IAM check's counters and denials (`iam_check.IamCheck.report`).
- ``GET  /_compat/clock``         -> ``{"now": <seconds>}``: the compatibility clock.
- ``POST /_compat/clock/advance`` with ``{"seconds": <number >= 0>}`` -> ``{"now": ...}``:
  moves the clock forward, so a test talking to the server process can expire
  ClientRequestTokens, shard iterators and stream records without waiting.
- moto's own ``POST /moto-api/reset`` also forgets every recorded ClientRequestToken.

- ``GET /_compat/transactions`` -> ``{"conflicts": N, "token_replays": R, "token_mismatches": M}``:
  transactions cancelled because another was writing one of their items (`TransactionsInFlight`),
  and requests met by a live ClientRequestToken, with the same parameters (answered, nothing
  applied) or with others (refused).
- ``GET|PUT|DELETE /_compat/faults``: injected AWS-side faults (lost responses after a
  write, throttling), configured at runtime or at start from ``EMULATOR_FAULTS``; see
  `local.emulator.injected_faults`. `CompatMiddleware.__call__` makes the one decision per request.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import copy
import decimal
import functools
import hashlib
import json
import math
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from moto.awslambda.models import LambdaBackend, LambdaFunction
from moto.cloudformation.exceptions import ValidationError as CloudFormationValidationError
from moto.cloudformation.parsing import ResourceMap
from moto.cloudwatch.exceptions import ValidationError as CloudWatchValidationError
from moto.cloudwatch.models import CloudWatchBackend, Statistics
from moto.core.exceptions import JsonRESTError
from moto.dynamodb import models as moto_models
from moto.dynamodb.exceptions import (
    ERROR_TYPE_PREFIX,
    ConditionalCheckFailed,
    DynamodbException,
    MockValidationException,
)
from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends
from moto.dynamodb.models.dynamo_type import DDBType, DynamoType
from moto.dynamodb.models.table import StreamShard, Table
from moto.dynamodb.responses import DynamoHandler, DynamoResult
from moto.dynamodbstreams.models import DynamoDBStreamsBackend, ShardIterator
from moto.iam.models import get_account_id_from
from moto.kinesis.exceptions import InvalidArgumentError as KinesisInvalidArgumentError
from moto.kinesis.models import KinesisBackend, kinesis_backends
from moto.kinesis.models import Record as KinesisRecord
from moto.kinesis.models import Shard as KinesisShard
from moto.kinesis.models import Stream as KinesisStream
from moto.kinesis.utils import decompose_shard_iterator
from moto.moto_server import werkzeug_app
from moto.s3.responses import S3Response
from moto.sqs.models import sqs_backends

from local.emulator import iam_check, injected_faults, partiql_statements
from local.emulator.control import TRANSACTIONS_CONTROL_PATH
from toolkit.hosts import HostAllowlist

# --------------------------------------------------------------------------- clock


class CompatClock:
    """Monotonic seconds that tests can advance.

    The idempotency window of ClientRequestToken is measured on this clock, so a test can
    expire a token by advancing it (in-process through `advance`, or across processes
    through ``POST /_compat/clock/advance``) instead of sleeping ten minutes.
    """

    def __init__(self) -> None:
        self._offset_seconds = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        """Seconds on this clock (a monotonic base plus every advance so far)."""
        with self._lock:
            return time.monotonic() + self._offset_seconds

    def advance(self, seconds: float) -> float:
        """Move the clock forward by `seconds` (never backwards) and return the new time."""
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        with self._lock:
            self._offset_seconds += seconds
        return self.now()


clock = CompatClock()
"""The clock every fix reads. Tests running moto in-process may replace or advance it."""


# ------------------------------------------------------- TransactWriteItems tokens

CLIENT_REQUEST_TOKEN_WINDOW_SECONDS = 600.0
"""DynamoDB keeps a ClientRequestToken for 10 minutes after the first request using it."""


@dataclass(frozen=True)
class _RecordedTransaction:
    """What a TransactWriteItems left behind under its token."""

    request_digest: str
    result: Any  # moto's ActionResult of the first request, replayed as is; None: it was cancelled
    completed_at: float

    @property
    def applied(self) -> bool:
        return self.result is not None


class ClientRequestTokenStore:
    """ClientRequestTokens per account and region, for 10 minutes.

    Those of successful transactions always; those of cancelled ones only when the
    `cancelled_token_kept` fault (`local.emulator.injected_faults`) says so.
    """

    def __init__(self) -> None:
        self._records: dict[tuple[str, str, str], _RecordedTransaction] = {}
        self.lock = threading.RLock()
        self.replays = 0
        """Requests answered from a live token with the same parameters (success, nothing applied again)."""
        self.mismatches = 0
        """Requests refused for a live token taken by other parameters (IdempotentParameterMismatchException)."""

    def lookup(self, key: tuple[str, str, str]) -> _RecordedTransaction | None:
        """The live record under `key`, forgetting it (and any other expired one) once expired."""
        now = clock.now()
        expired = [k for k, r in self._records.items() if now - r.completed_at >= CLIENT_REQUEST_TOKEN_WINDOW_SECONDS]
        for k in expired:
            del self._records[k]
        return self._records.get(key)

    def record(self, key: tuple[str, str, str], request_digest: str, result: Any) -> None:
        """Remember a successful transaction's request and result under its token."""
        self._records[key] = _RecordedTransaction(request_digest, result, clock.now())

    def record_cancelled(self, key: tuple[str, str, str], request_digest: str) -> None:
        """Keep a cancelled transaction's token taken (unless a live use already holds it)."""
        with self.lock:
            if self.lookup(key) is None:
                self._records[key] = _RecordedTransaction(request_digest, None, clock.now())

    def clear(self) -> None:
        """Forget every token (moto's reset)."""
        with self.lock:
            self._records.clear()


client_request_tokens = ClientRequestTokenStore()


def transact_write_request_digest(body: dict[str, Any]) -> str:
    """Canonical digest of a TransactWriteItems request, token excluded.

    AWS compares the whole request made with a token ("a change in other parameters"), so
    every parameter but the token counts: TransactItems (in order) and the Return* options.
    Canonical JSON (sorted keys, no whitespace) makes key order irrelevant, as it is on
    the wire.
    """
    parameters = {name: value for name, value in body.items() if name != "ClientRequestToken"}
    canonical = json.dumps(parameters, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _idempotent_parameter_mismatch() -> Exception:
    return DynamodbException(
        ERROR_TYPE_PREFIX + "IdempotentParameterMismatchException",
        "The request uses the same client token as a previous, but non-identical request.",
    )


def fix_transact_write_items_client_request_token() -> None:
    """TransactWriteItems honours ClientRequestToken.

    AWS (DynamoDB API Reference, TransactWriteItems, ClientRequestToken): a token is valid
    for 10 minutes after the first request that uses it completes; a repeat with the same
    token and the same parameters inside that window succeeds without applying anything
    again; the same token with different parameters fails with
    IdempotentParameterMismatchException; after the window the request is a new one.
    moto ignores the token and applies every repeat.

    Only a successful transaction records its token: a cancelled one (for example a failed
    ConditionExpression, TransactionCanceledException) applied nothing, so a retry with the
    same token is executed, unless the `cancelled_token_kept` fault kept the token taken
    (`CompatMiddleware`), when a retry with other parameters is refused. Patches
    `moto.dynamodb.responses.DynamoHandler.transact_write_items`.
    """
    original = DynamoHandler.transact_write_items
    if getattr(original, "_compat_fix", False):
        return

    @functools.wraps(original)
    def transact_write_items(self: Any) -> Any:
        token = self.body.get("ClientRequestToken")
        if not token:
            return original(self)
        key = (str(self.current_account), str(self.region), str(token))
        digest = transact_write_request_digest(self.body)
        with client_request_tokens.lock:
            previous = client_request_tokens.lookup(key)
            if previous is not None:
                if previous.request_digest != digest:
                    client_request_tokens.mismatches += 1
                    raise _idempotent_parameter_mismatch()
                if previous.applied:
                    client_request_tokens.replays += 1
                    return previous.result
            result = original(self)  # raises when cancelled: recorded only by the kept-token fault
            client_request_tokens.record(key, digest, result)
            return result

    transact_write_items._compat_fix = True  # type: ignore[attr-defined]
    DynamoHandler.transact_write_items = transact_write_items  # type: ignore[method-assign]


# ------------------------------------------- TransactWriteItems rollback journal

_transaction_rollback = threading.local()


@dataclass
class _TouchedItem:
    """One item a transaction is about to write, as it was before: the image to restore."""

    table: Table
    hash_value: DynamoType
    range_value: DynamoType | None
    before: Any  # a deep copy of moto's Item, or None when the item did not exist


class _TransactionJournal:
    """What a cancelled TransactWriteItems must undo: its items and its stream records, nothing else."""

    def __init__(self, backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
        self.touched: list[_TouchedItem] = []
        self.stream_ends: dict[int, tuple[StreamShard, int]] = {}
        for action in transact_items:
            operation = next(iter(action.values()), None)
            if not isinstance(operation, dict) or operation.get("TableName") not in backend.tables:
                continue  # moto itself refuses it before writing anything
            table = backend.tables[operation["TableName"]]
            key = operation.get("Item") if "Put" in action else operation.get("Key")
            if not isinstance(key, dict) or table.hash_key_attr not in key:
                continue
            hash_value = DynamoType(key[table.hash_key_attr])
            range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr in key else None
            before = table.get_item(hash_value, range_value) if range_value or not table.range_key_attr else None
            self.touched.append(_TouchedItem(table, hash_value, range_value, copy.deepcopy(before)))
            for shard in table_stream_shards(table):
                self.stream_ends.setdefault(id(shard), (shard, shard.starting_sequence_number + len(shard.items)))

    def roll_back(self) -> None:
        for touched in reversed(self.touched):
            items = touched.table.items
            if touched.range_value is None:
                if touched.before is None:
                    items.pop(touched.hash_value, None)
                else:
                    items[touched.hash_value] = touched.before
            elif touched.before is None:
                items.get(touched.hash_value, {}).pop(touched.range_value, None)
            else:
                items[touched.hash_value][touched.range_value] = touched.before
        for shard, end in self.stream_ends.values():
            truncate_stream_shard(shard, end)


class _TablesAreNotCopied:
    """Stands in for moto's `copy` module inside TransactWriteItems: a Table is not deep-copied
    (the journal restores what the transaction touched); anything else is copied as before."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        if isinstance(value, Table) and getattr(_transaction_rollback, "journaled", False):
            return value
        return copy.deepcopy(value, memo)


def fix_transaction_rollback_copies_only_what_it_touches() -> None:
    """A cancelled TransactWriteItems restores the items it touched, in time independent of table size.

    AWS (DynamoDB API Reference, TransactWriteItems): the actions succeed or fail together,
    and a transaction's cost depends on its items, not on the size of the tables (it writes
    at most 100 items). moto 5.2.5 deep-copies every table a transaction touches, items and
    stream records included, before every transaction, as its rollback copy: a transaction
    against a table of 8,000 items took 0.8 s (4.4 s with a stream) and the copies held
    gigabytes, so the local pipeline slowed down and swelled the longer it ran. This keeps
    moto's all-or-nothing semantics with a journal instead: before the transaction it copies
    only the items its actions name and notes each touched table's next stream sequence number
    (not a length: retention may trim the front meanwhile); if moto raises (a cancellation, a
    validation error) the journal puts those items back and drops the stream records written
    since. moto's own rollback then reassigns the very same table objects, a no-op. The upstream
    report: docs/moto-upstream.md. Patches `DynamoDBBackend.transact_write_items` and the `copy`
    name of `moto.dynamodb.models`.
    """
    original = DynamoDBBackend.transact_write_items
    if getattr(original, "_compat_fix", False):
        return
    moto_models.copy = _TablesAreNotCopied()  # type: ignore[assignment,attr-defined]

    @functools.wraps(original)
    def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
        journal = _TransactionJournal(self, transact_items)
        _transaction_rollback.journaled = True
        try:
            original(self, transact_items)
        except BaseException:
            journal.roll_back()
            raise
        finally:
            _transaction_rollback.journaled = False

    transact_write_items._compat_fix = True  # type: ignore[attr-defined]
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


# ------------------------------------------------------ UpdateItem stream records

_stream_suppression = threading.local()


def fix_update_item_single_stream_record() -> None:
    """An UpdateItem that creates an item emits exactly one INSERT with the full new image.

    AWS (DynamoDB Developer Guide, Change data capture for DynamoDB Streams, stream record
    views): every item-level modification writes one stream record; an UpdateItem that
    creates the item is an INSERT whose NewImage is the item as written. moto's
    `DynamoDBBackend.update_item` creates a missing item by calling `Table.put_item` with
    only the key (which appends a key-only INSERT to `table.stream_shard`) and then appends
    a second INSERT with the full image. This suppresses the stream record of that inner
    key-only `Table.put_item` (thread-locally), leaving the single full INSERT.
    TransactWriteItems `Update` goes through the same method and is fixed with it.
    Patches `DynamoDBBackend.update_item`, `Table.put_item` and `StreamShard.add`.
    """
    original_update_item = DynamoDBBackend.update_item
    if getattr(original_update_item, "_compat_fix", False):
        return
    original_put_item = Table.put_item
    original_add = StreamShard.add

    @functools.wraps(original_update_item)
    def update_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(_stream_suppression, "inside_update_item", False)
        _stream_suppression.inside_update_item = True
        try:
            return original_update_item(self, *args, **kwargs)
        finally:
            _stream_suppression.inside_update_item = outer

    @functools.wraps(original_put_item)
    def put_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(_stream_suppression, "inside_update_item", False):
            return original_put_item(self, *args, **kwargs)
        # The key-only placeholder update_item creates: its record is not a real change.
        _stream_suppression.mute_stream = True
        try:
            return original_put_item(self, *args, **kwargs)
        finally:
            _stream_suppression.mute_stream = False

    @functools.wraps(original_add)
    def add(self: Any, old: Any, new: Any) -> None:
        if getattr(_stream_suppression, "mute_stream", False):
            return
        original_add(self, old, new)

    update_item._compat_fix = True  # type: ignore[attr-defined]
    DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]
    Table.put_item = put_item  # type: ignore[method-assign]
    StreamShard.add = add  # type: ignore[method-assign]


# ------------------------------------------------- PartiQL single-item statements

BATCH_STATEMENT_LIMIT = 25
"""BatchExecuteStatement: at most 25 statements per request."""

_BATCH_ERROR_CODES = {
    "ConditionalCheckFailedException": "ConditionalCheckFailed",
    "DuplicateItemException": "DuplicateItem",
    "ValidationException": "ValidationError",
    "ResourceNotFoundException": "ResourceNotFound",
    "ItemCollectionSizeLimitExceededException": "ItemCollectionSizeLimitExceeded",
}
"""The exception of an item request -> the `BatchStatementError` code of the same failure in a batch."""


def _duplicate_item() -> DynamodbException:
    return DynamodbException(ERROR_TYPE_PREFIX + "DuplicateItemException", "Duplicate primary key exists in table")


def _key_names(table: Table) -> list[str]:
    return [table.hash_key_attr, *([table.range_key_attr] if table.range_key_attr else [])]


_HANDLER_METHODS = {
    "PutItem": "put_item",
    "UpdateItem": "update_item",
    "DeleteItem": "delete_item",
    "GetItem": "get_item",
    "Query": "query",
}
"""The DynamoHandler method serving each item operation a statement translates to."""


def _run_statement(
    handler: DynamoHandler, statement: partiql_statements.Statement, on_condition_failure: str | None
) -> list[dict[str, Any]]:
    """Run one parsed statement as the item request it is (moto's own handler method); the items it read.

    `partiql_statements.NotUnderstood` (a read of more than one item by its key) passes through.
    """
    table = handler.dynamodb_backend.get_table(statement.table)
    try:
        operation, request = partiql_statements.item_request(statement, _key_names(table))
    except partiql_statements.NotUnderstood:
        raise
    except partiql_statements.PartiQLValidationError as error:
        raise MockValidationException(str(error)) from error
    if on_condition_failure not in (None, "NONE", "ALL_OLD"):
        raise MockValidationException(
            f"1 validation error detected: Value '{on_condition_failure}' at 'returnValuesOnConditionCheckFailure' "
            "failed to satisfy constraint: Member must satisfy enum value set: [ALL_OLD, NONE]"
        )
    if on_condition_failure is not None and operation in ("UpdateItem", "DeleteItem"):
        request["ReturnValuesOnConditionCheckFailure"] = on_condition_failure
    outer_body, handler.body = handler.body, request
    try:
        result = getattr(DynamoHandler, _HANDLER_METHODS[operation])(handler)
    except ConditionalCheckFailed as failure:
        if operation == "PutItem":
            raise _duplicate_item() from failure
        raise
    finally:
        handler.body = outer_body
    if operation == "Query":
        items: list[dict[str, Any]] = result.result.get("Items") or []
        return items
    item = result.result.get("Item") if operation == "GetItem" else None
    return [item] if item else []


def _parsed(request: dict[str, Any]) -> partiql_statements.Statement | partiql_statements.NotUnderstood:
    """The statement of `request`, or what is not understood in it when it is outside the single-item subset."""
    try:
        return partiql_statements.parse(request.get("Statement", ""), request.get("Parameters") or [])
    except partiql_statements.NotUnderstood as outside:
        return outside
    except partiql_statements.PartiQLValidationError as error:
        raise MockValidationException(str(error)) from error


def _not_well_formed(error: Exception, outside: partiql_statements.NotUnderstood | None) -> MockValidationException:
    """What DynamoDB answers to a statement it cannot parse, for an exception of moto's PartiQL engine: the
    fast path's account of what it did not understand when it has one (it says where), else the engine's."""
    if outside is not None:
        return MockValidationException(str(outside))
    return MockValidationException(f"Statement wasn't well formed, can't be processed: {error or type(error).__name__}")


def _by_moto(
    original: Callable[[DynamoHandler], Any], handler: DynamoHandler, outside: partiql_statements.NotUnderstood | None
) -> DynamoResult:
    """moto's own ExecuteStatement; an exception of its PartiQL engine is DynamoDB's ValidationException."""
    outer_body = handler.body
    handler.body = {**outer_body, "Statement": partiql_statements.for_moto(str(outer_body.get("Statement", "")))}
    try:
        result: DynamoResult = original(handler)
    except JsonRESTError:
        raise
    except Exception as error:  # py-partiql-parser's errors: a statement it cannot parse
        raise _not_well_formed(error, outside) from error
    finally:
        handler.body = outer_body
    return result


def _one_by_moto(
    handler: DynamoHandler, request: dict[str, Any], outside: partiql_statements.NotUnderstood | None
) -> dict[str, Any]:
    """moto's own answer to one statement of a batch (its per-statement rules: ResourceNotFound, a SELECT
    without the key), a statement its engine cannot parse answered as DynamoDB does (ValidationError)."""
    try:
        statement = {**request, "Statement": partiql_statements.for_moto(str(request.get("Statement", "")))}
        (response,) = handler.dynamodb_backend.batch_execute_statement([statement])
    except JsonRESTError as error:
        return {"Error": _batch_error(error)}
    except Exception as error:  # py-partiql-parser's errors: a statement it cannot parse
        return {"Error": _batch_error(_not_well_formed(error, outside))}
    return dict(response)


def _batch_response(
    handler: DynamoHandler,
    request: dict[str, Any],
    statement: partiql_statements.Statement | partiql_statements.NotUnderstood | MockValidationException,
) -> dict[str, Any]:
    """The `BatchStatementResponse` of one statement of a batch, run on the fast path or by moto."""
    if isinstance(statement, partiql_statements.NotUnderstood):
        return _one_by_moto(handler, request, statement)
    if isinstance(statement, MockValidationException):
        return {"Error": _batch_error(statement)}
    table = handler.dynamodb_backend.tables.get(statement.table)
    if (
        isinstance(statement, partiql_statements.Select)
        and table is not None
        and not partiql_statements.names_one_item(statement, _key_names(table))
    ):
        return _one_by_moto(handler, request, None)  # its rule: "Select statements ... must specify the primary key"
    try:
        items = _run_statement(handler, statement, request.get("ReturnValuesOnConditionCheckFailure"))
    except partiql_statements.NotUnderstood as outside:
        return _one_by_moto(handler, request, outside)
    except JsonRESTError as error:
        return {"TableName": statement.table, "Error": _batch_error(error)}
    return {"TableName": statement.table, **({"Item": items[0]} if items else {})}


def _reads(
    request: dict[str, Any], statement: partiql_statements.Statement | partiql_statements.NotUnderstood
) -> bool | None:
    """Whether a batch statement reads (None: its text says nothing, it fails on its own)."""
    if not isinstance(statement, partiql_statements.NotUnderstood):
        return partiql_statements.is_read(statement)
    words = str(request.get("Statement", "")).split(maxsplit=1)
    verb = words[0].upper() if words else ""
    return True if verb == "SELECT" else False if verb in ("INSERT", "UPDATE", "DELETE") else None


def _refuse_duplicate_items(handler: DynamoHandler, statements: list[partiql_statements.Statement]) -> None:
    """ValidationException when two statements of one batch name the same item (as BatchWriteItem does)."""
    seen: set[tuple[str, str]] = set()
    for statement in statements:
        table = handler.dynamodb_backend.tables.get(statement.table)
        if table is None:
            continue  # that statement fails alone with ResourceNotFound
        try:
            key = partiql_statements.item_key(statement, _key_names(table))
        except partiql_statements.PartiQLValidationError:
            continue  # that statement fails alone with ValidationError
        identity = (
            statement.table,
            json.dumps({name: _comparable(value) for name, value in key.items()}, sort_keys=True),
        )
        if identity in seen:
            raise MockValidationException("Provided list of item keys contains duplicates")
        seen.add(identity)


def _comparable(key_value: dict[str, Any]) -> dict[str, Any]:
    """A key value as DynamoDB compares it: a number by its value (``1`` and ``1.0`` name one item)."""
    number = key_value.get("N")
    if not isinstance(number, str):
        return key_value
    try:
        return {"N": str(_WIDE_EXACT.normalize(decimal.Decimal(number)))}
    except (decimal.InvalidOperation, ArithmeticError):
        return key_value  # not a number: the statement fails alone with ValidationError


def _batch_error(error: JsonRESTError) -> dict[str, Any]:
    """A failed statement's `BatchStatementError` (Code, Message, and the item when ALL_OLD found one)."""
    name = error.error_type.rsplit("#", 1)[-1]
    code = _BATCH_ERROR_CODES.get(name)
    if code is None:
        raise error  # not a per-statement failure: the request fails, visibly
    answer: dict[str, Any] = {"Code": code, "Message": error.message}
    if name == "ConditionalCheckFailedException":
        item = json.loads(error.description).get("Item")
        if item:
            answer["Item"] = item
    return answer


_statement_faults: contextvars.ContextVar[injected_faults.StatementFaults | None] = contextvars.ContextVar(
    "statement_faults", default=None
)
"""The injected faults of the statements of the BatchExecuteStatement being served, set by
`CompatMiddleware` around the request (`injected_faults.STATEMENTS`)."""


_denied_statements: contextvars.ContextVar[dict[int, iam_check.Denial]] = contextvars.ContextVar(
    "denied_statements",
    default={},  # noqa: B039 (never mutated: each request sets its own)
)
"""The statements of the BatchExecuteStatement being served that IAM refused, by index
(`iam_check`), set by `CompatMiddleware` around the request."""


@contextlib.contextmanager
def denied_statements(denials: dict[int, iam_check.Denial]) -> Iterator[None]:
    """Within: the BatchExecuteStatement served in this thread answers these statements with
    AccessDenied instead of running them."""
    token = _denied_statements.set(denials)
    try:
        yield
    finally:
        _denied_statements.reset(token)


@contextlib.contextmanager
def faulting_statements(faults: injected_faults.StatementFaults) -> Iterator[None]:
    """Within: the BatchExecuteStatement served in this thread answers the statements `faults` drew
    with their error, instead of running them (throttles) or after running them (lost responses)."""
    token = _statement_faults.set(faults)
    try:
        yield
    finally:
        _statement_faults.reset(token)


def fix_partiql_single_item_statements() -> None:
    """ExecuteStatement and BatchExecuteStatement run DynamoDB's single-item PartiQL writes and reads.

    AWS (Developer Guide, PartiQL insert / update / delete / select statements; Running batch
    operations with PartiQL; API Reference, BatchExecuteStatement, BatchStatementError):
    INSERT fails with DuplicateItem(Exception) when the key exists; UPDATE needs an existing
    item satisfying the WHERE clause, else ConditionalCheckFailed(Exception), carrying the item
    with ``ReturnValuesOnConditionCheckFailure: ALL_OLD``; DELETE of a missing item succeeds; a
    batch holds 1 to 25 statements, all reads or all writes, each succeeding or failing on its
    own, one response per statement in order with its TableName. moto converts every item of
    every table to JSON for every statement (time grows with the data) and has no conditions,
    no DuplicateItem and no ALL_OLD. Here each statement of the single-item subset is parsed
    (`local.emulator.partiql_statements`) and run as the equivalent PutItem / UpdateItem /
    DeleteItem / GetItem through moto's own handler, so condition evaluation, validation, item
    size, stream records and the other fixes apply and the cost is one item's. Two statements
    on one item in a batch are refused as BatchWriteItem and BatchGetItem (which the batch
    documentation says it uses) refuse them: ValidationException, nothing run. Every other
    statement (a SELECT of several items, of an index, with functions or ``IN`` ...: "If you
    omit the WHERE clause, then all of the items in the table will be retrieved") goes to moto's
    own PartiQL implementation, with its per-statement batch rules; an exception of its engine
    is DynamoDB's ValidationException. Patches `DynamoHandler.execute_statement` and
    `DynamoHandler.batch_execute_statement`.
    """
    original = DynamoHandler.execute_statement
    if getattr(original, "_compat_fix", False):
        return

    @functools.wraps(original)
    def execute_statement(self: DynamoHandler) -> DynamoResult:
        statement = _parsed(self.body)
        if isinstance(statement, partiql_statements.NotUnderstood):
            return _by_moto(original, self, statement)
        try:
            items = _run_statement(self, statement, self.body.get("ReturnValuesOnConditionCheckFailure"))
        except partiql_statements.NotUnderstood as outside:
            return _by_moto(original, self, outside)
        return DynamoResult({"Items": items})

    @functools.wraps(DynamoHandler.batch_execute_statement)
    def batch_execute_statement(self: DynamoHandler) -> DynamoResult:
        requests: list[dict[str, Any]] = self.body.get("Statements") or []
        if not 1 <= len(requests) <= BATCH_STATEMENT_LIMIT:
            raise MockValidationException(
                f"1 validation error detected: Value at 'statements' failed to satisfy constraint: Member must have "
                f"length less than or equal to {BATCH_STATEMENT_LIMIT} and greater than or equal to 1 "
                f"(it has {len(requests)})"
            )
        parsed: list[partiql_statements.Statement | partiql_statements.NotUnderstood | MockValidationException] = []
        for request in requests:
            try:
                parsed.append(_parsed(request))
            except MockValidationException as error:
                parsed.append(error)
        statements = [statement for statement in parsed if isinstance(statement, partiql_statements.Statement)]
        kinds = {
            _reads(request, statement)
            for request, statement in zip(requests, parsed, strict=True)
            if not isinstance(statement, MockValidationException)
        }
        if len(kinds - {None}) > 1:
            raise MockValidationException("The entire batch must consist of either read statements or write statements")
        _refuse_duplicate_items(self, statements)
        faults = _statement_faults.get() or injected_faults.StatementFaults({}, run_first=False)
        denied = _denied_statements.get()
        responses: list[dict[str, Any]] = []
        for index, (request, statement) in enumerate(zip(requests, parsed, strict=True)):
            if index in denied:  # IAM refused it (`iam_check`): not run
                table = {"TableName": statement.table} if isinstance(statement, partiql_statements.Statement) else {}
                responses.append(table | {"Error": iam_check.statement_error(denied[index])})
                continue
            injected = faults.codes.get(index)
            if injected is not None and not faults.run_first:  # a throttle: not run (nor validated)
                table = {"TableName": statement.table} if isinstance(statement, partiql_statements.Statement) else {}
                responses.append(table | {"Error": injected_faults.statement_error(injected)})
                faults.answered += 1
                continue
            response = _batch_response(self, request, statement)
            if injected is not None and "Error" not in response:  # a lost response: applied, answered an error
                table = {"TableName": response["TableName"]} if "TableName" in response else {}
                response = table | {"Error": injected_faults.statement_error(injected)}
                faults.answered += 1
            responses.append(response)
        return DynamoResult({"Responses": responses})

    execute_statement._compat_fix = True  # type: ignore[attr-defined]
    DynamoHandler.execute_statement = execute_statement  # type: ignore[method-assign]
    DynamoHandler.batch_execute_statement = batch_execute_statement  # type: ignore[method-assign]


# ------------------------------------------------------ stream shards per table

STREAM_SHARDS_VARIABLE = "EMULATOR_STREAM_SHARDS"
"""How many shards each table's DynamoDB stream has (default 1, moto's own)."""
_SHARD_SEQUENCE_SPACING = 10**15
"""Sequence numbers of shard n start n x this above moto's: unique in the stream, increasing per shard."""


def stream_shard_count() -> int:
    raw = os.environ.get(STREAM_SHARDS_VARIABLE, "1").strip() or "1"
    if not raw.isdigit() or not 1 <= int(raw) <= 64:
        raise ValueError(f"{STREAM_SHARDS_VARIABLE}={raw!r} must be a whole number from 1 to 64")
    return int(raw)


def table_stream_shards(table: Table) -> list[StreamShard]:
    """Every shard of a table's stream, moto's own first (none without a stream)."""
    if table.stream_shard is None:
        return []
    return [table.stream_shard, *getattr(table.stream_shard, "compat_siblings", [])]


def fix_dynamodb_streams_have_several_shards() -> None:
    """A table's DynamoDB stream can have several shards, each item's changes always in one.

    AWS (DynamoDB Developer Guide, "Change data capture for DynamoDB Streams", reading and
    processing a stream): a stream is made of shards; each stream record appears exactly once,
    in the shard of its item, in the order of the item's modifications; a consumer reads every
    shard, and records of different items in different shards have no order between them. A
    table with more than one partition has several shards. moto gives every stream one shard,
    so one poller reads everything in one total order and nothing downstream ever runs
    concurrently: a design that needs that order, or one item per shard, could not be caught.
    With `EMULATOR_STREAM_SHARDS` = N, each table's stream has N shards and an item's records
    go to the shard its partition key hashes to. Patches `Table.set_stream_specification`,
    `StreamShard.add` and `DynamoDBStreamsBackend.describe_stream` / `get_shard_iterator`.
    """
    original_set_stream = Table.set_stream_specification
    if getattr(original_set_stream, "_compat_fix", False):
        return
    original_add = StreamShard.add
    original_describe = DynamoDBStreamsBackend.describe_stream
    original_iterator = DynamoDBStreamsBackend.get_shard_iterator

    @functools.wraps(original_set_stream)
    def set_stream_specification(self: Table, streams: dict[str, Any] | None) -> None:
        original_set_stream(self, streams)
        first = self.stream_shard
        if first is None:
            return
        siblings = []
        for index in range(1, stream_shard_count()):
            sibling = StreamShard(self.account_id, self)
            suffix = hashlib.sha256(f"{self.name}/{index}".encode()).hexdigest()[:8]
            sibling.id = f"{first.id.rsplit('-', 1)[0]}-{suffix}"
            sibling.starting_sequence_number = first.starting_sequence_number + index * _SHARD_SEQUENCE_SPACING
            siblings.append(sibling)
        first.compat_siblings = siblings  # type: ignore[attr-defined]

    @functools.wraps(original_add)
    def add(self: StreamShard, old: Any, new: Any) -> None:
        shards = table_stream_shards(self.table)
        if self is not shards[0] or len(shards) == 1:
            original_add(self, old, new)
            return
        item = new if new is not None else old
        digest = hashlib.sha256(json.dumps(item.hash_key.to_json(), sort_keys=True).encode()).digest()
        original_add(shards[int.from_bytes(digest[:8], "big") % len(shards)], old, new)

    @functools.wraps(original_describe)
    def describe_stream(self: DynamoDBStreamsBackend, arn: str) -> dict[str, Any]:
        stream = original_describe(self, arn)
        stream["Shards"] = [shard.to_json() for shard in table_stream_shards(self._get_table_from_arn(arn))]
        return stream

    @functools.wraps(original_iterator)
    def get_shard_iterator(
        self: DynamoDBStreamsBackend,
        arn: str,
        shard_id: str,
        shard_iterator_type: str,
        sequence_number: str | None = None,
    ) -> Any:
        shard = next((s for s in table_stream_shards(self._get_table_from_arn(arn)) if s.id == shard_id), None)
        if shard is None:
            raise DynamodbException(ERROR_TYPE_PREFIX + "ResourceNotFoundException", f"no shard {shard_id}")
        iterator = ShardIterator(self, shard, shard_iterator_type, sequence_number)  # type: ignore[arg-type]
        self.shard_iterators[iterator.arn] = iterator
        return iterator

    set_stream_specification._compat_fix = True  # type: ignore[attr-defined]
    Table.set_stream_specification = set_stream_specification  # type: ignore[method-assign]
    StreamShard.add = add  # type: ignore[method-assign]
    DynamoDBStreamsBackend.describe_stream = describe_stream  # type: ignore[method-assign]
    DynamoDBStreamsBackend.get_shard_iterator = get_shard_iterator  # type: ignore[method-assign]


# ------------------------------------------- DynamoDB Streams iterator expiry

STREAM_ITERATOR_LIFETIME_SECONDS = 15 * 60.0
"""DynamoDB Streams: a shard iterator expires 15 minutes after it is returned."""


class _ExpiringShardIterators(dict[str, Any]):
    """moto's `DynamoDBStreamsBackend.shard_iterators`, forgetting each iterator 15 minutes after it was made.

    Iterators are added in the order they are made, so the expired ones are always the
    oldest entries: each addition drops them from the front, in time proportional to what
    it frees. Looking up a forgotten (or never issued) iterator raises ExpiredIteratorException;
    one whose position has been trimmed since it was made, TrimmedDataAccessException
    (`fix_stream_records_expire_after_the_retention_period`).
    """

    def __init__(self) -> None:
        super().__init__()
        self.made_at: dict[str, float] = {}

    def __setitem__(self, arn: str, iterator: Any) -> None:
        now = clock.now()
        while self.made_at:
            oldest = next(iter(self.made_at))
            if now - self.made_at[oldest] < STREAM_ITERATOR_LIFETIME_SECONDS:
                break
            del self.made_at[oldest]
            self.pop(oldest, None)
        super().__setitem__(arn, iterator)
        self.made_at[arn] = now

    def __getitem__(self, arn: str) -> Any:
        made_at = self.made_at.get(arn)
        if made_at is None or clock.now() - made_at >= STREAM_ITERATOR_LIFETIME_SECONDS:
            raise JsonRESTError(
                "ExpiredIteratorException",
                "The shard iterator has expired and can no longer be used to retrieve stream records.",
            )
        iterator = super().__getitem__(arn)
        if isinstance(iterator, ShardIterator):
            refuse_trimmed_position(iterator)
        return iterator


def fix_dynamodb_streams_iterators_expire() -> None:
    """A DynamoDB Streams shard iterator expires 15 minutes after it is returned, and is freed.

    AWS (DynamoDB Streams API Reference, GetShardIterator and GetRecords,
    ExpiredIteratorException): "A shard iterator expires 15 minutes after it is retrieved";
    GetRecords with an expired one fails with ExpiredIteratorException (HTTP 400). moto keeps
    every iterator it ever made, one per GetShardIterator and one per GetRecords (each
    returns a new NextShardIterator), so an idle pipeline's pollers grew the emulator by
    about 115 MB an hour, and an old iterator never expired. Patches
    `DynamoDBStreamsBackend.__init__` to keep its iterators in `_ExpiringShardIterators`,
    timed on the compat clock (tests advance it).
    """
    original_init = DynamoDBStreamsBackend.__init__
    if getattr(original_init, "_compat_fix", False):
        return

    @functools.wraps(original_init)
    def init(self: DynamoDBStreamsBackend, region_name: str, account_id: str) -> None:
        original_init(self, region_name, account_id)
        self.shard_iterators = _ExpiringShardIterators()

    init._compat_fix = True  # type: ignore[attr-defined]
    DynamoDBStreamsBackend.__init__ = init  # type: ignore[method-assign]


# ------------------------------------------------------ Kinesis iterator expiry

KINESIS_ITERATOR_LIFETIME_SECONDS = 5 * 60.0
"""Kinesis Data Streams: a shard iterator expires 5 minutes after it is returned."""


def _stamped_kinesis_iterator(moto_iterator: str, issued_at: float) -> str:
    """moto's iterator (base64 of ``stream:shard:sequence``) with the compat-clock time it was issued."""
    stream_name, shard_id, last_sequence_id = decompose_shard_iterator(moto_iterator)
    return base64.b64encode(f"{stream_name}:{shard_id}:{last_sequence_id}:{issued_at!r}".encode()).decode()


def _unstamped_kinesis_iterator(iterator: str) -> tuple[str, float]:
    """moto's iterator and the time it was issued; InvalidArgumentException for one this emulator never issued."""
    try:
        stream_name, shard_id, last_sequence_id, issued_at = (
            base64.b64decode(iterator, validate=True).decode().split(":")
        )
        return base64.b64encode(f"{stream_name}:{shard_id}:{last_sequence_id}".encode()).decode(), float(issued_at)
    except ValueError as error:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise KinesisInvalidArgumentError("Invalid ShardIterator.") from error


def fix_kinesis_iterators_expire() -> None:
    """A Kinesis shard iterator expires 5 minutes after it is returned.

    AWS (Kinesis Data Streams API Reference, GetShardIterator: "A shard iterator expires 5
    minutes after it is returned to the requester"; GetRecords, ExpiredIteratorException, HTTP
    400: "The provided iterator exceeds the maximum age allowed"; Developer Guide, "Expired
    iterator exception errors": consumers must get a new iterator). Each iterator, from
    GetShardIterator or a GetRecords' NextShardIterator, lives 5 minutes; it may be used again
    until then. moto's iterators are its position in plain base64 and never expire, so a
    consumer's recovery from ExpiredIteratorException never runs locally. Here each iterator
    also carries the compat-clock time it was issued (nothing is kept per iterator, so nothing
    grows), and GetRecords refuses it 5 minutes later. Patches `KinesisBackend.get_shard_iterator`
    and `KinesisBackend.get_records`.
    """
    original_get_shard_iterator = KinesisBackend.get_shard_iterator
    if getattr(original_get_shard_iterator, "_compat_fix", False):
        return
    original_get_records = KinesisBackend.get_records

    @functools.wraps(original_get_shard_iterator)
    def get_shard_iterator(self: KinesisBackend, *args: Any, **kwargs: Any) -> str:
        return _stamped_kinesis_iterator(original_get_shard_iterator(self, *args, **kwargs), clock.now())

    @functools.wraps(original_get_records)
    def get_records(
        self: KinesisBackend, stream_arn: str | None, shard_iterator: str, limit: int | None
    ) -> tuple[str, list[KinesisRecord], int]:
        moto_iterator, issued_at = _unstamped_kinesis_iterator(shard_iterator)
        now = clock.now()
        if now - issued_at >= KINESIS_ITERATOR_LIFETIME_SECONDS:
            raise JsonRESTError(
                "ExpiredIteratorException",
                f"Iterator expired. The iterator was created {now - issued_at:.0f} s ago, further in the past "
                f"than the tolerated delay of {KINESIS_ITERATOR_LIFETIME_SECONDS * 1000:.0f} milliseconds.",
            )
        next_iterator, records, millis_behind_latest = original_get_records(self, stream_arn, moto_iterator, limit)
        return _stamped_kinesis_iterator(next_iterator, now), records, millis_behind_latest

    get_shard_iterator._compat_fix = True  # type: ignore[attr-defined]
    KinesisBackend.get_shard_iterator = get_shard_iterator  # type: ignore[method-assign]
    KinesisBackend.get_records = get_records  # type: ignore[method-assign]


# ------------------------------------------------------------ stream retention

DYNAMODB_STREAM_RETENTION_SECONDS = 24 * 3600.0
"""DynamoDB Streams keeps a stream record for 24 hours."""
TRIM_GRANULARITY_SECONDS = 60.0
"""Records are trimmed a minute of writes at a time: kept at most this much beyond their retention."""


class _WriteMarks:
    """When a shard's records were written, to the minute: ``[opened_at, end]`` pairs, oldest first.

    A mark says every record below position `end` (exclusive; a sequence number, or an absolute
    index) was written before ``opened_at + TRIM_GRANULARITY_SECONDS`` on the compat clock. One
    mark per minute of writes, not one timestamp per record: a few bytes per shard-minute, and
    the trim point is found by looking at the oldest mark only.
    """

    __slots__ = ("marks",)

    def __init__(self) -> None:
        self.marks: deque[list[float]] = deque()

    def note(self, end: int) -> None:
        """Records up to `end` (exclusive) exist now."""
        now = clock.now()
        if self.marks and now - self.marks[-1][0] < TRIM_GRANULARITY_SECONDS:
            self.marks[-1][1] = end
        else:
            self.marks.append([now, end])

    def expired_end(self, retention_seconds: float) -> int | None:
        """The end of the records older than `retention_seconds` now (None: none are), forgetting their marks."""
        horizon = clock.now() - retention_seconds - TRIM_GRANULARITY_SECONDS
        end = None
        while self.marks and self.marks[0][0] <= horizon:
            end = int(self.marks.popleft()[1])
        return end

    def truncated(self, end: int) -> None:
        """The records from `end` on were removed (a cancelled transaction's): no mark may claim them."""
        while self.marks and self.marks[-1][1] > end:
            if len(self.marks) > 1 and self.marks[-2][1] >= end:
                self.marks.pop()
            else:
                self.marks[-1][1] = end


class _RetainedStreamRecords(list[Any]):
    """A DynamoDB `StreamShard.items`: moto's list of records, which also notes when each was appended.

    Every record enters the list through `append` (moto's `StreamShard.add`, whichever shard of
    the stream and whichever wrapper calls it), so the write marks cannot miss one, and each
    append trims the shard (a stream nobody reads stays bounded too). `trimmed` counts the
    records removed from the front: ``items[i]`` is the ``trimmed + i``-th the shard ever kept.
    """

    def __init__(self, shard: StreamShard) -> None:
        super().__init__()
        self.shard = shard
        self.trimmed = 0
        self.written = _WriteMarks()

    def append(self, record: Any) -> None:
        super().append(record)
        self.written.note(self.trimmed + len(self))
        trim_stream_shard(self.shard)

    def __deepcopy__(self, memo: dict[int, Any]) -> _RetainedStreamRecords:
        """The same records and marks (moto's own rollback deep-copies a table): copied, not appended
        again, which would note each record twice and trim a shard still being copied."""
        clone = _RetainedStreamRecords.__new__(_RetainedStreamRecords)
        memo[id(self)] = clone
        list.extend(clone, copy.deepcopy(list(self), memo))
        clone.shard = copy.deepcopy(self.shard, memo)
        clone.trimmed = self.trimmed
        clone.written = copy.deepcopy(self.written, memo)
        return clone


def _trimmed_data_access() -> Exception:
    return JsonRESTError("TrimmedDataAccessException", "The data you are trying to access has been trimmed.")


def trim_stream_shard(shard: StreamShard) -> None:
    """Drop the shard's records older than 24 hours, keeping every sequence number and index consistent.

    moto numbers a record ``starting_sequence_number + len(items)`` and finds one at
    ``items[sequence_number - starting_sequence_number]`` (its iterators, `speedups`, the
    rollback journal): removing k records from the front and raising
    ``starting_sequence_number`` by k keeps both true, and makes TRIM_HORIZON (moto's
    ``starting_sequence_number``) the oldest record kept. One slice per trimmed minute of writes.
    """
    items = shard.items
    if not isinstance(items, _RetainedStreamRecords):
        return
    end = items.written.expired_end(DYNAMODB_STREAM_RETENTION_SECONDS)
    if end is None:
        return
    count = min(end - items.trimmed, len(items))
    if count > 0:
        del items[:count]
        items.trimmed += count
        shard.starting_sequence_number += count


def truncate_stream_shard(shard: StreamShard, end: int) -> None:
    """Remove the shard's records from sequence number `end` on (a cancelled transaction's)."""
    items = shard.items
    del items[max(0, end - shard.starting_sequence_number) :]
    if isinstance(items, _RetainedStreamRecords):
        items.written.truncated(items.trimmed + len(items))


def refuse_trimmed_position(iterator: ShardIterator) -> None:
    """TrimmedDataAccessException when a DynamoDB Streams iterator points below its shard's oldest record."""
    trim_stream_shard(iterator.stream_shard)
    if iterator.sequence_number < iterator.stream_shard.starting_sequence_number:
        raise _trimmed_data_access()


@dataclass
class _KinesisShardRetention:
    """A Kinesis shard's write marks, and the last sequence number trimmed (numbering continues after it)."""

    written: _WriteMarks
    trimmed_through: int = 0


def _kinesis_retention(shard: KinesisShard) -> _KinesisShardRetention:
    retention: _KinesisShardRetention | None = getattr(shard, "compat_retention", None)
    if retention is None:
        retention = _KinesisShardRetention(_WriteMarks())
        shard.compat_retention = retention  # type: ignore[attr-defined]
    return retention


def trim_kinesis_stream(stream: KinesisStream) -> None:
    """Drop the records of each shard older than the stream's retention period (one dict pop each)."""
    retention_seconds = stream.retention_period_hours * 3600.0
    for shard in stream.shards.values():
        retention = _kinesis_retention(shard)
        end = retention.written.expired_end(retention_seconds)
        if end is None:
            continue
        records = shard.records
        while records and next(iter(records)) < end:
            retention.trimmed_through = records.popitem(last=False)[0]  # type: ignore[call-arg]


def fix_stream_records_expire_after_the_retention_period() -> None:
    """DynamoDB stream records live 24 hours, Kinesis records the stream's retention period.

    AWS (DynamoDB Developer Guide, "Change data capture for DynamoDB Streams": "All data in
    DynamoDB Streams is subject to a 24-hour lifetime", and older data "is susceptible to
    trimming (removal) at any moment"; DynamoDB Streams API Reference, TrimmedDataAccessException:
    GetShardIterator with a sequence number older than the trim point, or GetRecords with an
    iterator whose records were trimmed since, fails with it; TRIM_HORIZON is the oldest record
    kept. Kinesis Data Streams API Reference, GetShardIterator: TRIM_HORIZON is "the last
    untrimmed record in the shard", records live for the stream's RetentionPeriodHours (24 by
    default), and a timestamp older than the trim horizon gives the iterator of the oldest
    untrimmed record; no error is documented for a sequence number below it, and reading from
    one here starts at the oldest untrimmed record likewise.) moto keeps every record for ever,
    so a local stack left running grows without bound.

    Trimming is lazy, on the compat clock (tests advance it), never on a timer: a DynamoDB shard
    is trimmed when a record is appended and whenever an iterator is made or used; a Kinesis stream whenever a
    request looks it up (moto's `KinesisBackend.describe_stream`, behind every put, iterator and
    read). Records go a minute of writes at a time (`TRIM_GRANULARITY_SECONDS`, which "at any
    moment" allows), so the cost per record is constant. DynamoDB sequence numbers continue
    across trimming (`trim_stream_shard`) and DescribeStream still reports each shard's first
    sequence number; Kinesis numbering continues after the last trimmed record even when
    every record was trimmed (moto would start again at 1). Patches `StreamShard.__init__`,
    `StreamShard.to_json`, `ShardIterator.__init__` (DynamoDB Streams),
    `moto.kinesis.models.Shard.put_record` and `KinesisBackend.describe_stream`; GetRecords'
    check is in `_ExpiringShardIterators.__getitem__`.
    """
    original_shard_init = StreamShard.__init__
    if getattr(original_shard_init, "_compat_fix", False):
        return
    original_to_json = StreamShard.to_json
    original_iterator_init = ShardIterator.__init__
    original_describe_stream = KinesisBackend.describe_stream

    @functools.wraps(original_shard_init)
    def shard_init(self: StreamShard, account_id: str, table: Table) -> None:
        original_shard_init(self, account_id, table)
        self.items = _RetainedStreamRecords(self)

    @functools.wraps(original_to_json)
    def to_json(self: StreamShard) -> dict[str, Any]:
        description: dict[str, Any] = original_to_json(self)
        trimmed = getattr(self.items, "trimmed", 0)
        description["SequenceNumberRange"]["StartingSequenceNumber"] = str(self.starting_sequence_number - trimmed)
        return description

    @functools.wraps(original_iterator_init)
    def iterator_init(
        self: ShardIterator,
        streams_backend: DynamoDBStreamsBackend,
        stream_shard: StreamShard,
        shard_iterator_type: str,
        sequence_number: int | None = None,
    ) -> None:
        trim_stream_shard(stream_shard)  # first: TRIM_HORIZON is the oldest record kept
        original_iterator_init(self, streams_backend, stream_shard, shard_iterator_type, sequence_number)
        if self.sequence_number < stream_shard.starting_sequence_number:
            raise _trimmed_data_access()

    def put_record(self: KinesisShard, partition_key: str, data: str, explicit_hash_key: str) -> str:
        """moto's `Shard.put_record`, numbering on from the last record trimmed when none is left."""
        retention = _kinesis_retention(self)
        last = self.get_max_sequence_number() if self.records else retention.trimmed_through
        sequence_number = last + 1
        self.records[sequence_number] = KinesisRecord(partition_key, data, sequence_number, explicit_hash_key)
        retention.written.note(sequence_number + 1)
        return str(sequence_number)

    @functools.wraps(original_describe_stream)
    def describe_stream(self: KinesisBackend, stream_arn: str | None, stream_name: str | None) -> KinesisStream:
        stream = original_describe_stream(self, stream_arn, stream_name)
        trim_kinesis_stream(stream)
        return stream

    shard_init._compat_fix = True  # type: ignore[attr-defined]
    StreamShard.__init__ = shard_init  # type: ignore[method-assign]
    StreamShard.to_json = to_json  # type: ignore[method-assign]
    ShardIterator.__init__ = iterator_init  # type: ignore[method-assign]
    KinesisShard.put_record = put_record  # type: ignore[method-assign]
    KinesisBackend.describe_stream = describe_stream  # type: ignore[method-assign]


# ------------------------------------------------------- event source mappings


def fix_event_source_mappings_do_not_push() -> None:
    """Event source mappings poll: a write never invokes Lambda nor consumes stream records.

    AWS (Lambda Developer Guide, How Lambda processes records from DynamoDB Streams / Amazon
    Kinesis, event source mappings): Lambda's pollers read the stream asynchronously; the
    writer's request never runs the function, and stream records stay readable for the
    stream's retention (24 hours for DynamoDB Streams) whatever Lambda did with them.
    moto registers each mapping on its source (`Table`, `Stream`, `Queue`
    `.lambda_event_source_mappings`) and then, inside every write, invokes the function
    (Docker, or a canned reply) and, for DynamoDB, empties the stream shard once the
    invocation returns, so pollers such as the local runner miss records. This detaches
    the mapping from its source right after `LambdaBackend.create_event_source_mapping`;
    the mapping itself stays listed, described and deletable.
    """
    original = LambdaBackend.create_event_source_mapping
    if getattr(original, "_compat_fix", False):
        return

    @functools.wraps(original)
    def create_event_source_mapping(self: Any, spec: dict[str, Any]) -> Any:
        mapping = original(self, spec)
        account, region = self.account_id, self.region_name
        sources: list[Any] = [
            *dynamodb_backends[account][region].tables.values(),
            *kinesis_backends[account][region].streams.values(),
            *sqs_backends[account][region].queues.values(),
        ]
        for source in sources:
            registered: dict[str, Any] = source.lambda_event_source_mappings
            for name in [name for name, esm in registered.items() if esm is mapping]:
                del registered[name]
        return mapping

    create_event_source_mapping._compat_fix = True  # type: ignore[attr-defined]
    LambdaBackend.create_event_source_mapping = create_event_source_mapping  # type: ignore[method-assign]


# ------------------------------------------------------------ cloudformation

SSM_PARAMETER_TYPE_PREFIX = "AWS::SSM::Parameter::"


def fix_ssm_parameter_defaults_resolved_only_when_used() -> None:
    """A stack parameter of an SSM parameter type resolves only the SSM parameter in use.

    AWS (CloudFormation User Guide, "Specify existing resources at runtime with
    CloudFormation-supplied parameter types", SSM parameter types): the parameter's value is
    the name of an SSM parameter, resolved when the stack is created or updated; the default
    is the name used when the caller supplies none. moto resolves every default before it
    applies the caller's values, and fails with an internal error when a default names a
    parameter it lacks, even one the caller overrides. This hides, during moto's parameter
    loading, the defaults of the SSM-typed parameters the caller supplied.
    """
    original = ResourceMap.load_parameters
    if getattr(original, "_compat_fix", False):
        return

    @functools.wraps(original)
    def load_parameters(self: Any) -> None:
        slots: dict[str, Any] = self._template.get("Parameters", {})
        hidden = {
            key: slots[key].pop("Default")
            for key in self.input_parameters
            if key in slots
            and "Default" in slots[key]
            and str(slots[key].get("Type", "")).startswith(SSM_PARAMETER_TYPE_PREFIX)
        }
        try:
            original(self)
        finally:
            for key, default in hidden.items():
                slots[key]["Default"] = default

    load_parameters._compat_fix = True  # type: ignore[attr-defined]
    ResourceMap.load_parameters = load_parameters  # type: ignore[method-assign]


TABLE_CHANGES_THAT_REPLACE = ("TableName", "KeySchema", "LocalSecondaryIndexes")
"""AWS::DynamoDB::Table properties whose change CloudFormation makes by replacing the table:
a new, empty table, the old one's items gone (CloudFormation User Guide, AWS::DynamoDB::Table,
"Update requires: Replacement")."""


def _is_true(value: Any) -> bool:
    return value in (True, "true", "True")


def _index_names(indexes: Iterable[Any]) -> list[str]:
    return sorted(str(index["IndexName"] if isinstance(index, dict) else index.name) for index in indexes)


def _stream_view_type(specification: dict[str, Any] | None) -> str | None:
    if not specification or specification.get("StreamEnabled") is False:
        return None
    return str(specification.get("StreamViewType"))


def update_table_in_place(table: Table, properties: dict[str, Any], account_id: str, region_name: str) -> Table:
    """Apply a stack update's table properties to the existing table, keeping its items and stream.

    Refuses the stack update (CloudFormation's `ValidationError`, naming the property) for a change
    AWS makes by replacement (`TABLE_CHANGES_THAT_REPLACE`), where the emulator does not replace
    tables, and for the in-place changes it does not make (another stream view type, other
    global secondary indexes): a stack update never leaves an emulated table other than the
    template says.
    """
    checks = {
        "TableName": (properties.get("TableName", table.name), table.name),
        "KeySchema": (properties.get("KeySchema"), table.schema),
        "LocalSecondaryIndexes": (
            _index_names(properties.get("LocalSecondaryIndexes", [])),
            _index_names(table.indexes),
        ),
        "GlobalSecondaryIndexes": (
            _index_names(properties.get("GlobalSecondaryIndexes", [])),
            _index_names(table.global_indexes),
        ),
        "StreamSpecification": (
            _stream_view_type(properties.get("StreamSpecification")),
            _stream_view_type(table.stream_specification),
        ),
    }
    for name, (wanted, current) in checks.items():
        if wanted != current:
            how = (
                "replaces the table (its items would be lost)"
                if name in TABLE_CHANGES_THAT_REPLACE
                else "is not emulated"
            )
            raise CloudFormationValidationError(message=f"table {table.name}: a change of {name} {how}")
    backend = dynamodb_backends[account_id][region_name]
    billing_mode = "PAY_PER_REQUEST" if properties.get("BillingMode") == "PAY_PER_REQUEST" else "PROVISIONED"
    if refusal := capacity_mode_switch_refusal(table, billing_mode):
        raise CloudFormationValidationError(message=refusal)
    table.deletion_protection_enabled = _is_true(properties.get("DeletionProtectionEnabled", False))
    previous_billing_mode, table.billing_mode = table.billing_mode, billing_mode
    record_capacity_mode_switch(table, previous_billing_mode)
    if throughput := properties.get("ProvisionedThroughput"):
        table.throughput = {**throughput, "NumberOfDecreasesToday": table.throughput.get("NumberOfDecreasesToday", 0)}
    time_to_live = properties.get("TimeToLiveSpecification")
    if time_to_live:
        backend.update_time_to_live(table.name, time_to_live)
    else:
        table.ttl = {"TimeToLiveStatus": "DISABLED"}
    encryption = properties.get("SSESpecification")
    table.sse_specification = dict(encryption) if encryption else None
    if table.sse_specification and "KMSMasterKeyId" not in table.sse_specification:
        table.sse_specification["KMSMasterKeyId"] = table._get_default_encryption_key(account_id, region_name)
    recovery = properties.get("PointInTimeRecoverySpecification") or {}
    table.continuous_backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] = (
        "ENABLED" if _is_true(recovery.get("PointInTimeRecoveryEnabled")) else "DISABLED"
    )
    table.tags = list(properties.get("Tags") or [])
    return table


ON_DEMAND_SWITCHES_PER_DAY = 4
"""AWS (DynamoDB Developer Guide, "Considerations when switching capacity modes"): "You can switch
tables from provisioned capacity mode to on-demand mode up to four times in a 24-hour rolling
window. You can switch tables from on-demand mode to provisioned capacity mode at any time.\""""

_SWITCH_WINDOW_SECONDS = 24 * 3600


class CapacityModeSwitchLimitExceeded(JsonRESTError):
    """UpdateTable's documented limit error, for a fifth switch to on-demand within 24 hours."""

    def __init__(self, message: str) -> None:
        super().__init__("LimitExceededException", message)


def _recent_on_demand_switches(table: Table) -> list[float]:
    now = clock.now()
    return [at for at in getattr(table, "_compat_on_demand_switches", []) if now - at < _SWITCH_WINDOW_SECONDS]


def _is_switch_to_on_demand(table: Table, billing_mode: str) -> bool:
    return billing_mode == "PAY_PER_REQUEST" and table.billing_mode != "PAY_PER_REQUEST"


def capacity_mode_switch_refusal(table: Table, billing_mode: str) -> str | None:
    """Why `table` may not switch to `billing_mode` now, or None.

    moto switches a table's capacity mode any number of times, so a release whose `loadProfile`
    or `auto` capacity flips a table back and forth would deploy locally and fail on AWS, where
    the fifth switch to on-demand in a day fails the update (CloudFormation rolls it back).
    Switches are timed on the compat clock, so a test can move past the window; only a switch
    that happened counts (`record_capacity_mode_switch`, after the update succeeded).
    """
    if (
        _is_switch_to_on_demand(table, billing_mode)
        and len(_recent_on_demand_switches(table)) >= ON_DEMAND_SWITCHES_PER_DAY
    ):
        return (
            f"table {table.name}: Subscriber limit exceeded: a table switches from provisioned to on-demand "
            f"at most {ON_DEMAND_SWITCHES_PER_DAY} times in 24 hours"
        )
    return None


def record_capacity_mode_switch(table: Table, previous_billing_mode: str | None) -> None:
    """Count a switch to on-demand that `table` has just made (from `previous_billing_mode`)."""
    if previous_billing_mode != "PAY_PER_REQUEST" and table.billing_mode == "PAY_PER_REQUEST":
        table._compat_on_demand_switches = [*_recent_on_demand_switches(table), clock.now()]  # type: ignore[attr-defined]


def fix_capacity_mode_switches_are_limited() -> None:
    """UpdateTable refuses a fifth switch to on-demand within 24 hours (`capacity_mode_switch_refusal`)."""
    original = DynamoDBBackend.update_table
    if getattr(original, "_compat_fix", False):
        return

    def update_table(self: DynamoDBBackend, name: str, *args: Any, **kwargs: Any) -> Table:
        billing_mode = kwargs.get("billing_mode")
        table = self.get_table(name)
        if billing_mode and (refusal := capacity_mode_switch_refusal(table, billing_mode)):
            raise CapacityModeSwitchLimitExceeded(refusal)
        previous_billing_mode = table.billing_mode
        updated = original(self, name, *args, **kwargs)
        record_capacity_mode_switch(updated, previous_billing_mode)
        return updated

    update_table._compat_fix = True  # type: ignore[attr-defined]
    DynamoDBBackend.update_table = update_table  # type: ignore[method-assign]


def fix_cloudformation_updates_tables_in_place() -> None:
    """A stack update that changes a DynamoDB table's properties updates that table in place.

    AWS (CloudFormation User Guide, AWS::DynamoDB::Table): DeletionProtectionEnabled,
    TimeToLiveSpecification, SSESpecification, PointInTimeRecoverySpecification, BillingMode,
    ProvisionedThroughput and Tags update with no interruption: the table, its items and its
    stream stay. moto's Table has no CloudFormation update, so its stack update puts None in
    the stack's resource map for a changed table and then fails on the first `Fn::GetAtt` of
    it ("references undefined resource"): no release that changes a table property (the
    deletion protection and the quarantine's TTL did) could be deployed over an older one, which
    is what an in-place upgrade is. `update_table_in_place` makes the change. A change AWS makes
    by replacing the table (a new, empty one) is refused instead of emulated: no release of
    this stack may make one, since its items would be lost.
    """
    if getattr(Table.update_from_cloudformation_json, "_compat_fix", False):
        return

    def update_from_cloudformation_json(
        cls: type[Table],
        *,
        original_resource: Table,
        new_resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
    ) -> Table:
        return update_table_in_place(original_resource, cloudformation_json["Properties"], account_id, region_name)

    update_from_cloudformation_json._compat_fix = True  # type: ignore[attr-defined]
    Table.update_from_cloudformation_json = classmethod(update_from_cloudformation_json)  # type: ignore[assignment,method-assign]


def fix_cloudformation_function_update_sets_reserved_concurrency() -> None:
    """A stack update sets a function's reserved concurrency to what the template now says.

    AWS (CloudFormation User Guide, AWS::Lambda::Function, ReservedConcurrentExecutions): the
    property is updated in place, and removing it removes the function's reserved concurrency.
    moto's function update applies the configuration and code but leaves the concurrency as it
    was, so a release that drops `ReservedConcurrentExecutions: 1` (the single reducer before
    reduce scaled out) would keep one reducer after the upgrade; the runner reads it from the
    Lambda API.
    """
    original = LambdaFunction.update_from_cloudformation_json
    if getattr(original, "_compat_fix", False):
        return

    def update_from_cloudformation_json(
        cls: type[LambdaFunction],
        *,
        original_resource: LambdaFunction,
        new_resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
    ) -> LambdaFunction:
        function = original(
            original_resource=original_resource,
            new_resource_name=new_resource_name,
            cloudformation_json=cloudformation_json,
            account_id=account_id,
            region_name=region_name,
        )
        function.reserved_concurrency = cloudformation_json["Properties"].get("ReservedConcurrentExecutions")
        return function

    update_from_cloudformation_json._compat_fix = True  # type: ignore[attr-defined]
    LambdaFunction.update_from_cloudformation_json = classmethod(update_from_cloudformation_json)  # type: ignore[assignment,method-assign]


def fix_cloudformation_metadata_changes_update_no_resource() -> None:
    """A stack update whose only change to a resource is its Metadata leaves that resource be.

    AWS (CloudFormation User Guide, "Metadata attribute"): Metadata is data about a resource
    for tools (cdk's construct path, checkov's skips), not a property; an update that changes it
    alongside other changes updates no physical resource. moto counts any difference in a
    resource's JSON as a modification, and a type with no CloudFormation update (a log group)
    then gets None in the stack's resource map, so the first `Fn::GetAtt` of it fails ("references
    undefined resource"): adding checkov's skips to the log groups made every older release
    impossible to upgrade. Only a change outside Metadata (the type, properties, condition,
    policies or dependencies) is a modification here.
    """
    original = ResourceMap.build_resource_diff
    if getattr(original, "_compat_fix", False):
        return

    def build_resource_diff(
        self: ResourceMap, other_template: dict[str, Any], parameters: dict[str, Any] | None = None
    ) -> dict[str, list[str]]:
        names_by_action: dict[str, list[str]] = original(self, other_template, parameters)
        old, new = self._resource_json_map, other_template["Resources"]
        names_by_action["Modify"] = [
            name
            for name in names_by_action["Modify"]
            if not _only_metadata_differs(old.get(name), new[name])  # a changed parameter keeps its resources
        ]
        return names_by_action

    build_resource_diff._compat_fix = True  # type: ignore[attr-defined]
    ResourceMap.build_resource_diff = build_resource_diff  # type: ignore[method-assign]


def _only_metadata_differs(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    if old is None or old == new:
        return False
    return {k: v for k, v in old.items() if k != "Metadata"} == {k: v for k, v in new.items() if k != "Metadata"}


# ------------------------------------------------------------------ middleware

SERIALISED_TARGET_PREFIXES: dict[str, str] = {
    "DynamoDB_": "dynamodb",
    "DynamoDBStreams_": "dynamodb",
    "Kinesis_": "kinesis",
}
"""``X-Amz-Target`` prefixes of the requests `CompatMiddleware` runs one at a time, per service."""

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


_TRANSACT_WRITE_TARGET = "DynamoDB_20120810.TransactWriteItems"


class TransactionsInFlight:
    """The items of the transactions being served: a second transaction on one of them conflicts.

    AWS (DynamoDB Developer Guide, "Transaction conflict handling"): a TransactWriteItems whose
    item is being written by another transaction at the same moment is cancelled with
    `TransactionCanceledException`, reason `TransactionConflict` on that item, and applies
    nothing. `CompatMiddleware` runs DynamoDB requests one at a time, so moto alone would make
    the second transaction wait and succeed: no writer would ever see the conflict it must
    survive. Items are claimed when a transaction arrives, before it waits for its turn, and
    released when it has been applied or cancelled.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.claimed: set[tuple[str, str]] = set()
        self.conflicts = 0
        """Transactions cancelled for a conflict since the emulator started (`GET /_compat/transactions`)."""

    @staticmethod
    def items_of(environ: dict[str, Any], body: dict[str, Any]) -> list[tuple[str, str]]:
        """(table, canonical key) of each action, in request order ("" where it names none)."""
        tables = dynamodb_backends[_account_of(environ)][_region_of(environ)].tables
        identities: list[tuple[str, str]] = []
        for action in body.get("TransactItems", []):
            operation: Any = next(iter(action.values()), None) if isinstance(action, dict) else None
            table = tables.get(operation.get("TableName", "")) if isinstance(operation, dict) else None
            if table is None:  # moto refuses the request itself
                identities.append(("", ""))
                continue
            key = operation.get("Key")
            if "Put" in action:
                item = operation.get("Item", {})
                key = {name: item.get(name) for name in (table.hash_key_attr, table.range_key_attr) if name}
            identities.append((table.name, json.dumps(key, sort_keys=True)))
        return identities

    def claim(self, identities: list[tuple[str, str]]) -> list[int]:
        """Claim every item; or claim none and return the positions of those already claimed."""
        wanted = [identity for identity in identities if identity[0]]
        with self.lock:
            conflicting = [index for index, identity in enumerate(identities) if identity in self.claimed]
            if conflicting:
                self.conflicts += 1
            else:
                self.claimed.update(wanted)
            return conflicting

    def release(self, identities: list[tuple[str, str]]) -> None:
        with self.lock:
            self.claimed.difference_update(identities)


def disable_global_cors() -> None:
    """moto's server wraps every service in flask-cors, which echoes any ``Origin`` in
    ``Access-Control-Allow-Origin`` and answers every preflight: a page on any site could
    read the emulator's answers. The module-level switch is read each time moto builds a
    service's app (lazily, on that service's first request), so this must run before
    serving; ``MOTO_DISABLE_GLOBAL_CORS`` sets the same switch, but only when it is in the
    environment before moto is imported."""
    werkzeug_app.DISABLE_GLOBAL_CORS = True  # type: ignore[attr-defined]  # imported there from moto.settings


def _refusal(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes] | None:
    """The answer to a request from anything but this machine's own clients, or None to serve it.

    A ``Host`` header that is not a loopback name with the server's port is a page whose DNS
    name was rebound to 127.0.0.1 (421, as the dashboard answers). An ``Origin`` other than
    the emulator's own, or a ``Sec-Fetch-Site`` of ``cross-site`` or ``same-site``, is a browser
    sending another origin's request (403): boto3 sends neither header, and a no-CORS ``GET``
    (an ``<img>``) carries only the second.
    """
    allowed = _loopback_hosts(int(environ.get("SERVER_PORT") or 0))
    if not allowed.allows(environ.get("HTTP_HOST")):
        return _plain_reply(start_response, "421 Misdirected Request", "unexpected Host header\n")
    origin = environ.get("HTTP_ORIGIN")
    fetch_site = environ.get("HTTP_SEC_FETCH_SITE", "none")
    if (origin is not None and not allowed.allows_origin(origin)) or fetch_site not in ("same-origin", "none"):
        return _plain_reply(start_response, "403 Forbidden", "cross-origin requests are refused\n")
    return None


@functools.cache
def _loopback_hosts(port: int) -> HostAllowlist:
    return HostAllowlist.loopback(port)


def _plain_reply(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]


class CompatMiddleware:
    """The WSGI app in front of moto's: control endpoints, and request isolation per service.

    DynamoDB and Kinesis requests (by ``X-Amz-Target``) run one at a time per service, which
    restores two documented guarantees moto's threaded server breaks:

    - DynamoDB (Developer Guide, Amazon DynamoDB Transactions, Isolation levels; API
      Reference, UpdateItem / PutItem, ConditionExpression): conditional writes are atomic
      and transactions serializable. moto has no locking, and rolls back a cancelled
      transaction by putting back a copy of each table taken before it started, which
      silently discards writes that other requests committed meanwhile.
    - Kinesis (Data Streams API Reference, PutRecords, SequenceNumber): every record gets a
      unique sequence number, increasing within its shard. moto's `Shard.put_record`
      computes "max + 1" without a lock, so concurrent puts can overwrite each other.

    One moto process is bound by the GIL anyway, so this costs little throughput. Other
    services pass through untouched (an SQS long poll must not hold a lock).
    """

    def __init__(
        self, app: WsgiApp, faults: injected_faults.FaultConfig | None = None, iam: iam_check.IamCheck | None = None
    ) -> None:
        """`faults` None reads ``EMULATOR_FAULTS`` (ValueError when it is invalid); `iam` None reads
        ``EMULATOR_IAM`` (enforced unless ``off``: `iam_check`)."""
        self.app = app
        self.iam = iam_check.IamCheck.from_environment(os.environ) if iam is None else iam
        self.service_locks = {service: threading.RLock() for service in SERIALISED_TARGET_PREFIXES.values()}
        self.transactions_in_flight = TransactionsInFlight()
        self.faults = injected_faults.FaultInjector(
            injected_faults.config_from_environment() if faults is None else faults
        )

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        refused = _refusal(environ, start_response)
        if refused is not None:
            return refused
        path: str = environ.get("PATH_INFO", "")
        if path.startswith("/_compat/"):
            return self._control(environ, start_response, path)
        if path.startswith("/moto-api/"):
            if path == "/moto-api/reset":
                client_request_tokens.clear()
            return self.app(environ, start_response)
        # IAM (`local.emulator.iam_check`): a function role's request is authorised before anything else.
        verdict = self.iam.check(environ)
        if verdict is None:
            return self._serve(environ, start_response)
        if verdict.refused is not None:
            return iam_check.refusal(verdict, verdict.refused, environ, start_response)
        with denied_statements(dict(verdict.statement_denials)):
            if verdict.missing_object_denied is None:
                return self._consumed(self._serve(environ, start_response))
            captured = _CapturedStart()
            body = self._consumed(self._serve(environ, captured))
        if captured.status.startswith("404"):  # S3 answers 403 to a role that may not list the bucket
            self.iam.record(verdict.missing_object_denied)
            return iam_check.s3_access_denied(verdict.missing_object_denied.message, environ, start_response)
        start_response(captured.status, captured.headers)
        return body

    def _serve(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """moto's answer, with the injected faults (`local.emulator.injected_faults`): one decision per request."""
        fault, request = None, None
        if self.faults.active and (request := injected_faults.identify(environ)) is not None:
            fault = self.faults.decide(request)
        if fault is None or fault.rule.kind == injected_faults.LATENCY:
            delay = 0.0 if fault is None else fault.rule.hold_seconds
            if request is None or request.operation != "TransactWriteItems":
                time.sleep(delay)
                return self._forward(environ, start_response)
            transaction = injected_faults.request_json(environ)
            captured_transaction = _CapturedStart()
            body = self._consumed(self._forward(environ, captured_transaction, delay))
            if _is_cancellation(captured_transaction.status, body):
                self._maybe_keep_cancelled_token(environ, request, transaction)
            start_response(captured_transaction.status, captured_transaction.headers)
            return body
        if fault.statements:  # some statements of a BatchExecuteStatement reached, the others run as usual
            statement_faults = injected_faults.StatementFaults(
                dict(fault.statements), run_first=fault.rule.kind == injected_faults.LOST_RESPONSE
            )
            captured_batch = _CapturedStart()
            with faulting_statements(statement_faults):
                body = self._consumed(self._forward(environ, captured_batch))
            answered = statement_faults.answered if captured_batch.status.startswith("2") else 0
            self.faults.statements_settled(fault, answered)
            start_response(captured_batch.status, captured_batch.headers)
            return body
        if fault.rule.kind == injected_faults.THROTTLE:
            if fault.request.operation == "TransactWriteItems":
                self._maybe_keep_cancelled_token(environ, fault.request, injected_faults.request_json(environ))
            return injected_faults.throttle_reply(fault, environ, start_response)
        captured = _CapturedStart()
        body = self._consumed(self._forward(environ, captured))
        applied = captured.status.startswith("2")
        self.faults.lost_response_settled(fault, applied)
        if not applied:  # the real error goes through
            start_response(captured.status, captured.headers)
            return body
        return injected_faults.lose_response(fault, environ, start_response)  # outside the service lock

    def _maybe_keep_cancelled_token(
        self, environ: dict[str, Any], request: injected_faults.RequestInfo, body: dict[str, Any]
    ) -> None:
        """The `cancelled_token_kept` fault: a cancelled transaction's token stays taken."""
        token = body.get("ClientRequestToken")
        if isinstance(token, str) and token and self.faults.keeps_cancelled_token(request):
            key = (_account_of(environ), _region_of(environ), token)
            client_request_tokens.record_cancelled(key, transact_write_request_digest(body))

    def _forward(
        self, environ: dict[str, Any], start_response: Callable[..., Any], delay: float = 0.0
    ) -> Iterable[bytes]:
        """moto's response; DynamoDB and Kinesis requests one at a time per service, and a
        transaction cancelled for a conflict when another one is writing one of its items.

        `delay`: the injected latency of a transaction, waited with its items claimed and
        outside the service lock (`injected_faults.LATENCY`)."""
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target == _TRANSACT_WRITE_TARGET:
            items = TransactionsInFlight.items_of(environ, injected_faults.request_json(environ))
            if conflicting := self.transactions_in_flight.claim(items):
                reasons = [{"Code": "None"} for _ in items]
                for index in conflicting:
                    reasons[index] = {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
                return injected_faults.cancellation_reply(environ, start_response, reasons)
            try:
                time.sleep(delay)
                with self.service_locks["dynamodb"]:
                    return self._consumed(self.app(environ, start_response))
            finally:
                self.transactions_in_flight.release(items)
        service = _serialised_service(target)
        if service is not None:
            with self.service_locks[service]:
                return self._consumed(self.app(environ, start_response))
        return self.app(environ, start_response)

    @staticmethod
    def _consumed(response: Iterable[bytes]) -> list[bytes]:
        """The whole response body, produced while the caller still holds the lock."""
        try:
            return list(response)
        finally:
            close = getattr(response, "close", None)
            if close is not None:
                close()

    def _control(self, environ: dict[str, Any], start_response: Callable[..., Any], path: str) -> list[bytes]:
        method: str = environ.get("REQUEST_METHOD", "GET")
        try:
            if path == "/_compat/health" and method == "GET":
                health = {"status": "ok", "fixes": applied_fixes(), "iam": self.iam.mode}
                return _json_reply(start_response, "200 OK", health)
            if path == iam_check.CONTROL_PATH and method == "GET":
                return _json_reply(start_response, "200 OK", self.iam.report())
            if path == "/_compat/clock" and method == "GET":
                return _json_reply(start_response, "200 OK", {"now": clock.now()})
            if path == "/_compat/clock/advance" and method == "POST":
                seconds = float(_json_body(environ).get("seconds", 0))
                return _json_reply(start_response, "200 OK", {"now": clock.advance(seconds)})
            if path == injected_faults.CONTROL_PATH:
                return self._faults_control(environ, start_response, method)
            if path == TRANSACTIONS_CONTROL_PATH and method == "GET":
                figures = {
                    "conflicts": self.transactions_in_flight.conflicts,
                    "token_replays": client_request_tokens.replays,
                    "token_mismatches": client_request_tokens.mismatches,
                }
                return _json_reply(start_response, "200 OK", figures)
        except (ValueError, TypeError, AttributeError) as error:
            return _json_reply(start_response, "400 Bad Request", {"error": str(error)})
        return _json_reply(start_response, "404 Not Found", {"error": f"no control endpoint {method} {path}"})

    def _faults_control(self, environ: dict[str, Any], start_response: Callable[..., Any], method: str) -> list[bytes]:
        """``GET`` report, ``PUT`` replace (counters reset), ``DELETE`` clear (returns the last report)."""
        if method == "GET":
            return _json_reply(start_response, "200 OK", self.faults.report())
        if method == "PUT":
            self.faults.configure(injected_faults.parse_config(_json_body(environ)))
            return _json_reply(start_response, "200 OK", self.faults.report())
        if method == "DELETE":
            report = self.faults.report()
            self.faults.configure(injected_faults.FaultConfig())
            return _json_reply(start_response, "200 OK", report)
        not_allowed = {"error": f"{method} {injected_faults.CONTROL_PATH}: use GET, PUT or DELETE"}
        return _json_reply(start_response, "405 Method Not Allowed", not_allowed)


class _CapturedStart:
    """A WSGI ``start_response`` that records moto's status instead of sending it."""

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []

    def __call__(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        self.status, self.headers = status, headers
        return lambda _data: None


def _is_cancellation(status: str, body: list[bytes]) -> bool:
    """Whether moto answered a TransactWriteItems with TransactionCanceledException."""
    return status.startswith("400") and b"TransactionCanceledException" in b"".join(body)


def _account_of(environ: dict[str, Any]) -> str:
    """The account moto files the request under (its `get_current_account`, in the same order)."""
    if "MOTO_ACCOUNT_ID" in os.environ:
        return os.environ["MOTO_ACCOUNT_ID"]
    if environ.get("HTTP_X_MOTO_ACCOUNT_ID"):
        return str(environ["HTTP_X_MOTO_ACCOUNT_ID"])
    scope = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    return get_account_id_from(scope.group("key") if scope else "")


def _region_of(environ: dict[str, Any]) -> str:
    scope = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    return scope.group("region") if scope else "us-east-1"


_CREDENTIAL_SCOPE = re.compile(r"Credential=(?P<key>[^/,]+)/\d{8}/(?P<region>[^/]+)/")


def _serialised_service(target: str) -> str | None:
    for prefix, service in SERIALISED_TARGET_PREFIXES.items():
        if target.startswith(prefix):
            return service
    return None


def _json_body(environ: dict[str, Any]) -> dict[str, Any]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length else b""
    parsed = json.loads(raw or b"{}")
    if not isinstance(parsed, dict):
        raise ValueError("expected a JSON object")
    return parsed


def _json_reply(start_response: Callable[..., Any], status: str, payload: dict[str, Any]) -> list[bytes]:
    body = json.dumps(payload).encode("utf-8")
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


# ------------------------------------------------------------------------ apply

# DynamoDB numbers carry up to 38 significant digits; arithmetic beyond that is refused.
_DYNAMODB_NUMBER_DIGITS = 38
_WIDE_EXACT = decimal.Context(prec=400, Emax=999_999, Emin=-999_999, traps=[decimal.Inexact, decimal.Rounded])


def _dynamodb_number_text(value: decimal.Decimal) -> str:
    """`value` as DynamoDB returns numbers: plain notation, no trailing fractional zeros."""
    if value.is_zero():
        return "0"
    normal = _WIDE_EXACT.normalize(value)
    if len(normal.as_tuple().digits) > _DYNAMODB_NUMBER_DIGITS:
        raise MockValidationException(
            "Number overflow. Attempting to store a number with magnitude larger than supported range"
        )
    text = format(normal, "f")
    return text


def fix_number_arithmetic() -> None:
    """ADD and `SET a = a + :b` / `a - :b` are exact on every number DynamoDB accepts.

    AWS (DynamoDB Developer Guide, "Data types", Number): numbers have up to 38 digits of
    precision and may be written in exponent notation (``1E+3``); ADD and arithmetic in
    update expressions are exact within that precision. moto converts operands with
    ``int()`` unless they contain a ``.`` (so ``1E+3`` raises ValueError: an HTTP 500, or
    a cancelled transaction) and adds Decimals in Python's default 28-digit context (so
    29..38-digit sums are silently rounded). Both would break exact totals locally.
    """
    if getattr(DynamoType.__add__, "_compat_fix", False):
        return
    original_add, original_sub = DynamoType.__add__, DynamoType.__sub__

    def exact(
        operation: Callable[[decimal.Decimal, decimal.Decimal], decimal.Decimal],
        original: Callable[[DynamoType, DynamoType], DynamoType],
    ) -> Callable[[DynamoType, DynamoType], DynamoType]:
        def arithmetic(self: DynamoType, other: DynamoType) -> DynamoType:
            if not (self.is_number() and other.is_number()):
                return original(self, other)  # moto's own type errors
            result = operation(decimal.Decimal(self.value), decimal.Decimal(other.value))
            return DynamoType({DDBType.NUMBER: _dynamodb_number_text(result)})

        arithmetic._compat_fix = True  # type: ignore[attr-defined]
        return arithmetic

    DynamoType.__add__ = exact(_WIDE_EXACT.add, original_add)  # type: ignore[method-assign]
    DynamoType.__sub__ = exact(_WIDE_EXACT.subtract, original_sub)  # type: ignore[method-assign]


# -------------------------------------------------------------------- item size

_LIST_OR_MAP_OVERHEAD_BYTES = 3


def _documented_size(value: DynamoType) -> int:
    """Bytes of one attribute value by the Developer Guide's rules (names counted by the caller)."""
    content = value.value
    if value.is_number():
        normal = _WIDE_EXACT.normalize(decimal.Decimal(content))
        return math.ceil((len(normal.as_tuple().digits) if not normal.is_zero() else 1) / 2) + 1
    if value.is_binary():  # moto keeps some binary values as their base64 text
        return len(base64.b64decode(content) if isinstance(content, str) else content)
    if value.is_list():
        return _LIST_OR_MAP_OVERHEAD_BYTES + sum(1 + _documented_size(element) for element in content)
    if value.is_map():
        elements = content.items()
        return _LIST_OR_MAP_OVERHEAD_BYTES + sum(1 + len(k.encode()) + _documented_size(v) for k, v in elements)
    if value.is_set():
        return sum(_documented_size(DynamoType({value.type[0]: member})) for member in content)
    if value.is_null() or isinstance(content, bool):
        return 1
    return len(str(content).encode("utf-8"))


def fix_item_size_follows_the_developer_guide() -> None:
    """The 400 KB item limit measures items as DynamoDB documents it.

    AWS (DynamoDB Developer Guide, "DynamoDB item sizes and formats"): a list or map costs
    3 bytes plus 1 per element; a number about 1 byte per two significant digits plus 1;
    a binary value its raw bytes. moto (`DynamoType.size`, used by its item-size check
    and result-page limits) counts no list or map overhead, so it stores items AWS
    refuses (a DeltaTable item is mostly a map), and a number's characters, so it refuses
    items AWS stores. moto's limit itself (405,000 bytes) stays below AWS's 409,600.
    """
    if getattr(DynamoType.size, "_compat_fix", False):
        return

    def size(self: DynamoType) -> int:
        return _documented_size(self)

    size._compat_fix = True  # type: ignore[attr-defined]
    DynamoType.size = size  # type: ignore[method-assign]


PERCENTILE_STATISTIC = re.compile(r"p(\d{1,2}(?:\.\d+)?|100)")


def fix_cloudwatch_percentile_statistics() -> None:
    """GetMetricData answers percentile statistics (`p50`, `p99`, `p99.9`) of published values.

    AWS (CloudWatch User Guide, "Statistics definitions"): `pNN` is the value below which NN %
    of the period's data points lie, for any metric published with values (`Values`/`Counts`,
    or EMF arrays). moto (`Statistics.get_statistics_for_type`) knows only Sum, Average,
    Minimum, Maximum and SampleCount and answers None for a percentile, which its response then
    cannot serialise. Here: the nearest-rank percentile of the period's values (CloudWatch's is
    an estimate within a small relative error of it).
    """
    original = Statistics.get_statistics_for_type
    if getattr(original, "_compat_fix", False):
        return

    def get_statistics_for_type(self: Statistics, stat: str) -> Any:
        match = PERCENTILE_STATISTIC.fullmatch(stat)
        if match is None:
            return original(self, stat)
        values = sorted(self.metric_single_values_list)
        if not values:
            return None
        rank = max(1, math.ceil(float(match[1]) / 100 * len(values)))
        return values[rank - 1]

    get_statistics_for_type._compat_fix = True  # type: ignore[attr-defined]
    Statistics.get_statistics_for_type = get_statistics_for_type  # type: ignore[method-assign]


_metric_namespace = threading.local()
"""The namespace the current thread's GetMetricData reads (`fix_cloudwatch_metric_data_reads_its_namespace`)."""


def fix_cloudwatch_metric_data_reads_its_namespace() -> None:
    """GetMetricData reads a metric with dimensions only from the namespace its query names.

    AWS (CloudWatch User Guide, "Metrics concepts"): a metric is its namespace, name and
    dimensions, so the same name and dimensions in two namespaces are two metrics. moto
    (`CloudWatchBackend.get_metric_data`) drops the namespace as soon as a query has dimensions:
    two stacks whose functions emit the same name and `service` dimension, each in its own
    namespace, read each other's data points. Here each namespace's queries run on that
    namespace's data only (the data moto reads, `get_all_metrics`, filtered for the calling
    thread), and the answers come back in the queries' order. A request mixing namespaces with a
    math or Metrics Insights expression is refused with a ValidationError: which data such an
    expression reads is not emulated.
    """
    original_data, original_query = CloudWatchBackend.get_all_metrics, CloudWatchBackend.get_metric_data
    if getattr(original_query, "_compat_fix", False):
        return

    def get_all_metrics(self: CloudWatchBackend) -> Any:
        namespace = getattr(_metric_namespace, "value", None)
        data = original_data(self)
        return data if namespace is None else [datum for datum in data if datum.namespace == namespace]

    def get_metric_data(
        self: CloudWatchBackend, queries: list[dict[str, Any]], *arguments: Any, **keywords: Any
    ) -> list[dict[str, Any]]:
        def namespace_of(query: dict[str, Any]) -> str | None:
            return str(query["MetricStat"]["Metric"]["Namespace"]) if "MetricStat" in query else None

        namespaces = list(dict.fromkeys(namespace_of(query) for query in queries if "MetricStat" in query))
        if len(namespaces) > 1 and any("MetricStat" not in query for query in queries):
            raise CloudWatchValidationError(
                "emulator (moto_compat): an expression beside metrics of several namespaces is not emulated"
            )
        results: list[dict[str, Any]] = []
        for namespace in namespaces or [None]:
            _metric_namespace.value = namespace
            try:
                group = [query for query in queries if namespace_of(query) in (namespace, None)]
                results.extend(original_query(self, group, *arguments, **keywords))
            finally:
                _metric_namespace.value = None
        order = {query["Id"]: index for index, query in enumerate(queries)}
        return sorted(results, key=lambda result: order[result["id"]])

    get_metric_data._compat_fix = True  # type: ignore[attr-defined]
    CloudWatchBackend.get_all_metrics = get_all_metrics  # type: ignore[method-assign]
    CloudWatchBackend.get_metric_data = get_metric_data  # type: ignore[method-assign]


S3_KEY_LOCK_STRIPES = 64
"""Locks the S3 object keys are spread over (`fix_s3_object_requests_are_atomic_per_key`): bounded,
whatever the number of keys; two keys on one stripe merely wait for each other."""
_s3_key_locks = tuple(threading.Lock() for _ in range(S3_KEY_LOCK_STRIPES))


def _s3_key_lock(bucket: str, key: str) -> threading.Lock:
    digest = hashlib.sha256(f"{bucket}/{key}".encode()).digest()
    return _s3_key_locks[int.from_bytes(digest[:4], "big") % S3_KEY_LOCK_STRIPES]


def fix_s3_object_requests_are_atomic_per_key() -> None:
    """A conditional PutObject is atomic: of two writers that PUT ``If-Match`` one ETag, one gets 412.

    AWS (S3 User Guide, "How to prevent object overwrites with conditional writes" and "Add
    preconditions to S3 operations with conditional requests"): the condition is evaluated and
    the object written as one step, so a compare-and-swap never loses an update (concurrent
    conditional writes get 412, or 409 ConditionalRequestConflict to retry); and S3 reads are
    strongly consistent, never failed by a concurrent overwrite. moto's threaded server checks
    ``If-Match`` / ``If-None-Match`` against the stored object and stores the new one later in the
    same request, with no lock: two writers can both pass the check and the first one's update
    is silently lost (the archive registry lost a settle that way under CPU load). moto also
    closes the replaced object's buffer while a concurrent GetObject still reads it (500). Here
    every request on one object key (S3Response._key_response: GET, HEAD, PUT, POST, DELETE)
    runs under that key's lock; requests on other keys still run concurrently.
    """
    original = S3Response._key_response
    if getattr(original, "_compat_fix", False):
        return

    @functools.wraps(original)
    def _key_response(self: S3Response, request: Any, full_url: str) -> Any:
        bucket = self.parse_bucket_name_from_url(request, full_url)
        with _s3_key_lock(bucket, self.parse_key_name()):
            return original(self, request, full_url)

    _key_response._compat_fix = True  # type: ignore[attr-defined]
    S3Response._key_response = _key_response  # type: ignore[method-assign]


FIXES: tuple[Callable[[], None], ...] = (
    fix_transact_write_items_client_request_token,
    fix_transaction_rollback_copies_only_what_it_touches,
    fix_update_item_single_stream_record,
    fix_partiql_single_item_statements,
    fix_number_arithmetic,
    fix_item_size_follows_the_developer_guide,
    fix_event_source_mappings_do_not_push,
    fix_ssm_parameter_defaults_resolved_only_when_used,
    fix_dynamodb_streams_have_several_shards,
    fix_dynamodb_streams_iterators_expire,
    fix_kinesis_iterators_expire,
    fix_cloudwatch_percentile_statistics,
    fix_cloudwatch_metric_data_reads_its_namespace,
    fix_stream_records_expire_after_the_retention_period,
    fix_cloudformation_updates_tables_in_place,
    fix_capacity_mode_switches_are_limited,
    fix_cloudformation_function_update_sets_reserved_concurrency,
    fix_cloudformation_metadata_changes_update_no_resource,
    fix_s3_object_requests_are_atomic_per_key,
)
_applied: list[str] = []


def apply() -> None:
    """Install every fix into the imported moto, and turn its global CORS off (idempotent; call before serving)."""
    disable_global_cors()
    for fix in FIXES:
        fix()
        if fix.__name__ not in _applied:
            _applied.append(fix.__name__)


def applied_fixes() -> list[str]:
    """Names of the fixes installed in this process (reported by ``/_compat/health``)."""
    return copy.copy(_applied)
