"""AWS-side faults the emulator injects on request: lost responses, throttling, kept tokens, latency.

Real DynamoDB and Kinesis fail in two ways an exactly-once pipeline must survive, and moto
never does either; a third kind makes the emulator stricter than AWS documents, and a fourth
gives requests DynamoDB's service time.
`CompatMiddleware` (`local.emulator.moto_compat`) asks the `FaultInjector` about every request
before forwarding it to moto, so these faults reach every client (the functions, the
runner, the producer, the tests) exactly as AWS's would, on the wire:

- ``lost_response`` (`LOST_RESPONSE`): the request IS applied by moto, then the caller
  gets no success: an HTTP 500 ``InternalServerError`` (variant ``error``), a connection
  closed without a response (``close``) or held past the client's read timeout and then
  closed (``timeout``). Variant ``statements`` (`STATEMENTS`) loses single statements' answers
  of a BatchExecuteStatement instead: a drawn statement is run, and if it succeeded its answer
  is a per-statement ``InternalServerError``.
- ``throttle`` (`THROTTLE`): the request is NOT applied; the caller gets the throttling
  error AWS returns (HTTP 400): ``ProvisionedThroughputExceededException``,
  ``ThrottlingException``, ``RequestLimitExceeded``, or for TransactWriteItems a
  ``TransactionCanceledException`` whose CancellationReasons hold a ``ThrottlingError``
  (BatchExecuteStatement, which documents no ProvisionedThroughputExceededException, answers
  ``ThrottlingException`` in its place). Variant ``statements`` (`STATEMENTS`) throttles single
  statements of a BatchExecuteStatement instead: each drawn statement is answered with a
  per-statement error (``ProvisionedThroughputExceeded``, ``ThrottlingError``,
  ``RequestLimitExceeded``, ``InternalServerError``, ``TransactionConflict``) and not run, while
  the others run in the same call: the partial batch AWS documents.
- ``cancelled_token_kept`` (`CANCELLED_TOKEN_KEPT`): a cancelled transaction's
  ClientRequestToken stays taken for 10 minutes; reusing it with other parameters is refused
  with ``IdempotentParameterMismatchException``.
- ``latency`` (`LATENCY`): the request is served ``hold_seconds`` later, a transaction's
  items claimed meanwhile (DynamoDB's service time, for benchmarks; no failure).

Configuration (JSON; ``PUT /_compat/faults``, or at server start the ``EMULATOR_FAULTS``
environment variable, which ``make up`` passes through)::

    {"seed": 7,
     "rules": [
       {"kind": "lost_response", "service": "dynamodb", "percent": 40,
        "operations": ["UpdateItem", "PutItem"], "table": "StateTable", "variant": "error"},
       {"kind": "throttle", "service": "dynamodbstreams", "percent": 20}
     ]}

A rule: ``kind``; ``service`` (``dynamodb``, ``dynamodbstreams``, ``kinesis``, or any other
SigV4 signing name); ``percent`` (0-100, the probability per matching request);
optionally ``operations`` (API names, ``"*"`` for all; default `DEFAULT_OPERATIONS` of the
kind, the data-plane calls of DynamoDB, DynamoDB Streams and Kinesis: other services are
never faulted unless a rule names their operations; DynamoDB's writes include PartiQL's
ExecuteStatement and BatchExecuteStatement), ``table`` (a substring of a table or stream
name or ARN the request names, or of the table a PartiQL statement names), ``variant`` and
``hold_seconds`` (lost responses; the delay of ``latency``; a throttle's ``variant`` is
``error``, the default, or ``statements``), ``error`` (throttles), ``max_injections`` and
``min_injections`` (the first matching requests are faulted without a draw until this many
faults have happened: a chaos run whose sites see few requests still exercises each one).
The first matching rule whose draw succeeds decides. Control endpoints (``/_compat/``,
``/moto-api/``) are never faulted.

S3 is a REST API (no ``X-Amz-Target``): `_s3_request` names PutObject, conditional or not,
and nothing else; a ``service: "s3"`` lost-response rule defaults to it, and its ``table``
is a substring of ``<bucket>/<key>``.

Draws come from one ``random.Random(seed)`` per configuration: a run whose requests arrive
in the same order makes the same decisions. ``GET /_compat/faults`` returns the
configuration with counters (`FaultInjector.report`); ``PUT`` replaces the configuration and
resets the counters; ``DELETE`` removes every rule and returns the final report.

`configure_faults`, `fault_report` and `clear_faults` are the client side (plain urllib),
for tests and the chaos command.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import json
import os
import random
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

ENVIRONMENT_VARIABLE = "EMULATOR_FAULTS"
"""JSON configuration applied when the emulator's middleware starts (same format as ``PUT``)."""

CONTROL_PATH = "/_compat/faults"

LOST_RESPONSE = "lost_response"
"""The write is applied, the response is lost.

Reproduces the ambiguous failure: DynamoDB's error-handling guide says an HTTP 500
(InternalServerError) may come back for a request that was nonetheless processed, and is
to be retried; a connection dropped or timed out after the request was sent is the same
ambiguity (the reason TransactWriteItems has a ClientRequestToken). The SDK's standard
retry mode retries all three (5xx, ConnectionClosedError, ReadTimeoutError), so the write
reaches DynamoDB twice: only a conditional or tokenised write stays exactly-once. A lost
Kinesis PutRecords response makes the producer's SDK send the records again: the stream
holds duplicates. Variants: ``error`` answers 500 with DynamoDB's (Kinesis':
``InternalFailure``) JSON error body; ``close`` closes the connection with no response;
``timeout`` holds it ``hold_seconds`` (past the caller's read timeout), then closes it.
Injected only when moto answered 2xx (the write was applied); a failed write's error goes
through untouched and is not counted.

A lost S3 PutObject response is the same ambiguity (S3 answers 500 ``InternalError``,
"please try again", and the SDK retries): the retry of a conditional PUT (``If-None-Match:
*``, ``If-Match``) meets what its own first attempt wrote and gets 412 PreconditionFailed.
The ``error`` variant answers S3's XML ``InternalError``.
"""

THROTTLE = "throttle"
"""The request is rejected before anything is applied.

Reproduces: DynamoDB's ProvisionedThroughputExceededException (a partition over its
throughput, also on on-demand tables) and ThrottlingException, both HTTP 400 and retried
with backoff by the SDK's standard mode; for TransactWriteItems, DynamoDB cancels the
transaction with TransactionCanceledException and a ``ThrottlingError`` cancellation
reason (not retried by the SDK: the caller must retry); Kinesis GetRecords/PutRecords
ProvisionedThroughputExceededException; DynamoDB Streams throttling (ThrottlingException).
"""

CANCELLED_TOKEN_KEPT = "cancelled_token_kept"
"""A cancelled transaction's ClientRequestToken stays taken.

AWS documents that a token is valid for 10 minutes "after the first request that uses it
completes", that a repeat with the same parameters after a *successful* first use changes
nothing, and that other parameters get IdempotentParameterMismatchException; it does not
say that a token whose first use was cancelled (throttled, TransactionConflict, a failed
condition) is free again. This kind assumes the worst: when a tokened TransactWriteItems is
cancelled (by moto, or by an injected throttle), the emulator remembers its token and
parameters, and a later use of the token with *other* parameters inside the window is
refused with IdempotentParameterMismatchException (nothing is applied). The same
parameters are executed normally. Only ``service: "dynamodb"``, operation
``TransactWriteItems``; the draw is made once per cancelled transaction.
"""

LATENCY = "latency"
"""The request is served ``hold_seconds`` later; a TransactWriteItems holds its items meanwhile.

Reproduces DynamoDB's own service time (a transaction takes tens of milliseconds), which moto,
answering in a few, lacks. While a delayed transaction waits its items stay claimed
(`moto_compat.TransactionsInFlight`), so another transaction on one of them is cancelled with
``TransactionConflict``, as DynamoDB cancels one that meets a transaction in progress; the wait is
spent outside the service lock, so delayed requests overlap, as DynamoDB's do. Nothing else about
the request changes. The reducer-scaling benchmark gives every reduce transaction 20 ms
(`benchmarks/reducer_scaling.py`).
"""

KINDS = (LOST_RESPONSE, THROTTLE, CANCELLED_TOKEN_KEPT, LATENCY)
STATEMENTS = "statements"
"""The variant of throttles and lost responses that reaches single statements of a BatchExecuteStatement.

DynamoDB answers a BatchExecuteStatement statement by statement (HTTP 200 "does not mean that
all statements ... succeeded"): a statement whose partition is throttled fails alone with a
`BatchStatementError` while the others are applied. A rule ``{"kind": "throttle", "variant":
"statements"}`` (service ``dynamodb``, operation BatchExecuteStatement, its default and only
one) draws each statement on its ``table`` with ``percent``; a drawn statement is not run and
is answered ``{"Error": {"Code": ...}}`` in its place, the others run as usual in the same
call. ``error`` names the code (one of `STATEMENT_ERRORS`); without it each refused statement's
code is drawn from them all.

``{"kind": "lost_response", "variant": "statements"}`` draws the same way, but a drawn
statement is run, and when it succeeded its answer is replaced by an ``InternalServerError``
(a statement that failed on its own keeps its error): the worst reading of a statement's
server error, on which AWS is silent, as a whole call's HTTP 500 may follow an applied write.

``max_injections`` and the counters count statements, the counters under
``dynamodb:BatchExecuteStatement/statement``; a call in which no statement is drawn is left
to the following rules.
"""
LOST_RESPONSE_VARIANTS = ("error", "close", "timeout", STATEMENTS)
THROTTLE_VARIANTS = ("error", STATEMENTS)
"""``error``: the whole request is refused with an HTTP 400; ``statements``: see `STATEMENTS`."""
STATEMENT_ERRORS = (
    "ProvisionedThroughputExceeded",
    "ThrottlingError",
    "RequestLimitExceeded",
    "InternalServerError",
    "TransactionConflict",
)
"""The `BatchStatementError` codes of a statement refused for now (not applied): DynamoDB's
throughput and request limits, a server error, an item held by a transaction in progress."""
STATEMENT_COUNTER_SUFFIX = "/statement"
THROTTLE_ERRORS = (
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TransactionCanceledException",
)
_THROUGHPUT_EXCEEDED = "ProvisionedThroughputExceededException"
_BATCH_STATEMENTS = "BatchExecuteStatement"
DEFAULT_HOLD_SECONDS = 11.0
"""``timeout`` holds the connection just past the functions' 10-second SDK read timeout."""

_DYNAMODB_WRITES = (
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "TransactWriteItems",
    "BatchWriteItem",
    "BatchExecuteStatement",  # PartiQL: the state function's writes
    "ExecuteStatement",
)
_DYNAMODB_READS = ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems")
DEFAULT_OPERATIONS: dict[str, dict[str, tuple[str, ...]]] = {
    LOST_RESPONSE: {"dynamodb": _DYNAMODB_WRITES, "kinesis": ("PutRecords", "PutRecord"), "s3": ("PutObject",)},
    THROTTLE: {
        "dynamodb": _DYNAMODB_READS + _DYNAMODB_WRITES,
        "dynamodbstreams": ("GetRecords", "GetShardIterator"),
        "kinesis": ("GetRecords", "GetShardIterator", "PutRecords", "PutRecord"),
    },
    CANCELLED_TOKEN_KEPT: {"dynamodb": ("TransactWriteItems",)},
    LATENCY: {"dynamodb": _DYNAMODB_READS + _DYNAMODB_WRITES},
}
"""Operations a rule targets when it names none: the data plane, never the deployer's calls."""

TARGET_PREFIXES = {"DynamoDB_": "dynamodb", "DynamoDBStreams_": "dynamodbstreams", "Kinesis_": "kinesis"}
PARTIQL_TABLE = re.compile(
    r'\b(?:INTO|UPDATE|FROM)\s+(?:"(?P<quoted>(?:[^"]|"")+)"|(?P<plain>[A-Za-z0-9_.-]+))', re.IGNORECASE
)
"""The table a PartiQL statement names (`INSERT INTO "T"`, `UPDATE "T"`, `DELETE FROM T`, `SELECT ... FROM T`)."""
_SIGNING_SERVICE = re.compile(r"Credential=[^/,]+/\d{8}/[^/]+/([^/]+)/aws4_request")
_DYNAMODB_ERROR_PREFIX = "com.amazonaws.dynamodb.v20120810#"


# --------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class FaultRule:
    """One fault: what to inject, where, and how often."""

    kind: str
    service: str
    percent: float
    operations: tuple[str, ...] = ()
    table: str | None = None
    variant: str = "error"
    hold_seconds: float = DEFAULT_HOLD_SECONDS
    error: str | None = None
    max_injections: int | None = None
    min_injections: int = 0

    def targets(self, request: RequestInfo) -> bool:
        """Whether `request` is one this rule may fault (before the draw)."""
        if request.service != self.service:
            return False
        operations = self.operations or DEFAULT_OPERATIONS[self.kind].get(self.service, ())
        if "*" not in operations and request.operation not in operations:
            return False
        return self.table is None or any(self.table in name for name in request.resources)

    def throttle_error(self, request: RequestInfo) -> str:
        """The error code a throttle of `request` answers with: the rule's, where the operation can answer it.

        BatchExecuteStatement documents no ProvisionedThroughputExceededException (its errors:
        ThrottlingException, RequestLimitExceeded, InternalServerError; a throttled partition is a
        per-statement error there), so it answers ThrottlingException instead.
        """
        code = self.error or ("ThrottlingException" if self.service == "dynamodbstreams" else _THROUGHPUT_EXCEEDED)
        if code == "TransactionCanceledException" and request.operation != "TransactWriteItems":
            code = _THROUGHPUT_EXCEEDED
        if code == _THROUGHPUT_EXCEEDED and request.operation == "BatchExecuteStatement":
            return "ThrottlingException"
        return code


@dataclass(frozen=True)
class FaultConfig:
    """A whole configuration: the seed and the rules, in priority order."""

    seed: int | None = None
    rules: tuple[FaultRule, ...] = ()

    def as_json(self) -> dict[str, Any]:
        rules = [asdict(rule) | {"operations": list(rule.operations)} for rule in self.rules]
        return {"seed": self.seed, "rules": rules}


def parse_config(raw: Mapping[str, Any]) -> FaultConfig:
    """Validate a configuration (the ``PUT`` body); ValueError names the first problem."""
    unknown = set(raw) - {"seed", "rules"}
    if unknown:
        raise ValueError(f"unknown configuration keys {sorted(unknown)}")
    seed = raw.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError("seed must be an integer")
    rules = raw.get("rules", [])
    if not isinstance(rules, list):
        raise ValueError("rules must be a list")
    return FaultConfig(seed=seed, rules=tuple(_parse_rule(rule, index) for index, rule in enumerate(rules)))


def _parse_rule(raw: Any, index: int) -> FaultRule:
    where = f"rules[{index}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be an object")
    unknown = set(raw) - set(FaultRule.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    kind, service, percent = raw.get("kind"), raw.get("service"), raw.get("percent")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {list(KINDS)}")
    if not isinstance(service, str) or not service:
        raise ValueError(f"{where}: service must be a service name such as 'dynamodb'")
    if not isinstance(percent, int | float) or isinstance(percent, bool) or not 0 <= percent <= 100:
        raise ValueError(f"{where}: percent must be a number from 0 to 100")
    operations = _parse_operations(raw.get("operations", []), where, kind, service)
    table = raw.get("table")
    if table is not None and (not isinstance(table, str) or not table):
        raise ValueError(f"{where}: table must be a non-empty string")
    variant = raw.get("variant", "error")
    variants = THROTTLE_VARIANTS if kind == THROTTLE else LOST_RESPONSE_VARIANTS
    if variant not in variants:
        raise ValueError(f"{where}: variant must be one of {list(variants)}")
    hold = raw.get("hold_seconds", DEFAULT_HOLD_SECONDS)
    if not isinstance(hold, int | float) or isinstance(hold, bool) or not 0 <= hold <= 300:
        raise ValueError(f"{where}: hold_seconds must be a number from 0 to 300")
    error = raw.get("error")
    errors = STATEMENT_ERRORS if variant == STATEMENTS else THROTTLE_ERRORS
    if error is not None and error not in errors:
        raise ValueError(f"{where}: error must be one of {list(errors)}")
    if variant == STATEMENTS:
        operations = _statement_operations(where, kind, service, operations)
    limit = raw.get("max_injections")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"{where}: max_injections must be a non-negative integer")
    least = raw.get("min_injections", 0)
    if not isinstance(least, int) or isinstance(least, bool) or least < 0 or (limit is not None and least > limit):
        raise ValueError(f"{where}: min_injections must be a non-negative integer no greater than max_injections")
    return FaultRule(kind, service, float(percent), operations, table, variant, float(hold), error, limit, least)


def _parse_operations(operations: Any, where: str, kind: str, service: str) -> tuple[str, ...]:
    """One name or a list; none only where the kind has a default for the service."""
    if isinstance(operations, str):
        operations = [operations]
    if not isinstance(operations, list) or not all(isinstance(op, str) and op for op in operations):
        raise ValueError(f"{where}: operations must be a list of API operation names")
    if not operations and service not in DEFAULT_OPERATIONS[kind]:
        raise ValueError(f"{where}: name the operations to fault on {service!r} (or '*')")
    return tuple(operations)


def _statement_operations(where: str, kind: str, service: str, operations: tuple[str, ...]) -> tuple[str, ...]:
    """A `STATEMENTS` rule's operations: BatchExecuteStatement of DynamoDB, named or not."""
    if kind not in (THROTTLE, LOST_RESPONSE):
        raise ValueError(f"{where}: variant {STATEMENTS!r} is a variant of throttles and lost responses")
    if service != "dynamodb" or operations not in ((), (_BATCH_STATEMENTS,)):
        raise ValueError(f"{where}: variant {STATEMENTS!r} reaches statements of dynamodb {_BATCH_STATEMENTS} only")
    return (_BATCH_STATEMENTS,)


def config_from_environment(environ: Mapping[str, str] | None = None) -> FaultConfig:
    """The configuration in ``EMULATOR_FAULTS`` (none when unset or blank); ValueError if invalid."""
    raw = (os.environ if environ is None else environ).get(ENVIRONMENT_VARIABLE, "").strip()
    if not raw:
        return FaultConfig()
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"{ENVIRONMENT_VARIABLE} is not JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{ENVIRONMENT_VARIABLE} must hold a JSON object")
    return parse_config(parsed)


# ------------------------------------------------------------------------ requests


@dataclass(frozen=True)
class RequestInfo:
    """What a rule matches on: the service, the API operation, the tables or streams named."""

    service: str
    operation: str
    resources: tuple[str, ...] = ()
    transact_items: int = 0
    statement_tables: tuple[str, ...] = ()
    """BatchExecuteStatement: the table each statement names, in order ("" when none is found)."""


def identify(environ: dict[str, Any]) -> RequestInfo | None:
    """The service and operation of a WSGI request; None when it is not an AWS API call.

    JSON-protocol services are named by ``X-Amz-Target``; others by the SigV4 signing name
    in ``Authorization`` and the query protocol's ``Action``. The JSON body is read (and put
    back for moto) to find the table and stream names.
    """
    target: str = environ.get("HTTP_X_AMZ_TARGET", "")
    prefix, _, operation = target.partition(".")
    service = next((name for key, name in TARGET_PREFIXES.items() if prefix.startswith(key)), None)
    if service is None:
        signed = _SIGNING_SERVICE.search(environ.get("HTTP_AUTHORIZATION", ""))
        if signed is None:
            return None
        service = signed.group(1)
    if service == "s3":  # REST: no Action, no JSON body
        return _s3_request(environ)
    if not target:
        return RequestInfo(service, _query_action(environ))
    body = _json_object(_read_body(environ))
    transact_items: list[Any] = body["TransactItems"] if isinstance(body.get("TransactItems"), list) else []
    statement_tables = tuple(_statement_tables(body))
    resources = [*_named_resources(body, transact_items), *filter(None, statement_tables)]
    return RequestInfo(service, operation, tuple(resources), len(transact_items), statement_tables)


def _named_resources(body: dict[str, Any], transact_items: list[Any]) -> list[str]:
    """The tables and streams a JSON request body names: its own fields, a batch's or transaction's
    tables, a shard iterator's stream (a PartiQL statement's table: `_statement_tables`)."""
    resources: list[str] = []
    for key in ("TableName", "TableArn", "StreamName", "StreamARN", "StreamArn", "ResourceArn"):
        if isinstance(body.get(key), str):
            resources.append(body[key])
    if isinstance(body.get("RequestItems"), dict):
        resources.extend(body["RequestItems"])
    for item in transact_items:
        for action in item.values() if isinstance(item, dict) else ():
            if isinstance(action, dict) and isinstance(action.get("TableName"), str):
                resources.append(action["TableName"])
    iterator = body.get("ShardIterator")
    if isinstance(iterator, str):
        resources.append(iterator)  # DynamoDB Streams: holds the table's stream ARN
        with contextlib.suppress(binascii.Error, ValueError):  # Kinesis: base64 "stream:shard:seq:issued"
            resources.append(base64.b64decode(iterator).decode("utf-8", "replace"))
    return resources


def _statement_tables(body: dict[str, Any]) -> list[str]:
    """The table each PartiQL statement of an ExecuteStatement or BatchExecuteStatement names ("" if none)."""
    if isinstance(body.get("Statements"), list):
        statements: list[Any] = body["Statements"]
    elif "Statement" in body:
        statements = [body]
    else:
        return []
    tables: list[str] = []
    for statement in statements:
        text = statement.get("Statement") if isinstance(statement, dict) else None
        table = PARTIQL_TABLE.search(text) if isinstance(text, str) else None
        tables.append("" if table is None else (table.group("quoted") or "").replace('""', '"') or table.group("plain"))
    return tables


_S3_PUT_OBJECT_QUERY = {"x-id": ["PutObject"]}
"""The only query a PutObject may carry; any other names a sub-resource (``?tagging``,
``?uploadId=`` of UploadPart, ``?acl``...): another operation on the same path."""


def _s3_request(environ: dict[str, Any]) -> RequestInfo:
    """An S3 REST request: PutObject is ``PUT /<bucket>/<key>`` without a sub-resource query.

    botocore addresses the emulator path-style (its endpoint is an IP address). CopyObject is
    the same PUT with ``x-amz-copy-source``, so it is told apart by that header. PutObject,
    conditional or not, is the only S3 operation named; every other request is named ``""``
    (a rule reaches it only with ``"*"``). Its resource is ``<bucket>/<key>``.
    """
    bucket, _, key = str(environ.get("PATH_INFO", "")).lstrip("/").partition("/")
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    is_put_object = (
        environ.get("REQUEST_METHOD") == "PUT"
        and bool(bucket and key)
        and all(_S3_PUT_OBJECT_QUERY.get(name) == values for name, values in query.items())
        and "HTTP_X_AMZ_COPY_SOURCE" not in environ
    )
    return RequestInfo("s3", "PutObject" if is_put_object else "", (f"{bucket}/{key}",) if bucket else ())


def _read_body(environ: dict[str, Any]) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw: bytes = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(raw)
    return raw


def request_json(environ: dict[str, Any]) -> dict[str, Any]:
    """A JSON-protocol request's body as an object (left readable for moto); {} if not JSON."""
    return _json_object(_read_body(environ))


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _query_action(environ: dict[str, Any]) -> str:
    actions = urllib.parse.parse_qs(environ.get("QUERY_STRING", "")).get("Action")
    if not actions and "x-www-form-urlencoded" in environ.get("CONTENT_TYPE", ""):
        actions = urllib.parse.parse_qs(_read_body(environ).decode("utf-8", "replace")).get("Action")
    return actions[0] if actions else ""


# ------------------------------------------------------------------------ injector


@dataclass
class _Counters:
    considered: dict[str, dict[str, int]] = field(default_factory=dict)
    injected: dict[str, dict[str, int]] = field(default_factory=dict)
    by_rule: list[int] = field(default_factory=list)

    @staticmethod
    def bump(
        table: dict[str, dict[str, int]], kind: str, request: RequestInfo, suffix: str = "", count: int = 1
    ) -> None:
        per_kind = table.setdefault(kind, {})
        key = f"{request.service}:{request.operation}{suffix}"
        per_kind[key] = per_kind.get(key, 0) + count


@dataclass(frozen=True)
class Fault:
    """A decision to fault one request (`rule` of `FaultInjector`'s rules at `index`)."""

    rule: FaultRule
    index: int
    request: RequestInfo
    statements: tuple[tuple[int, str], ...] = ()
    """`STATEMENTS`: (index of a drawn statement, the `BatchStatementError` code it is answered with), in order."""


class FaultInjector:
    """The configuration, the seeded draws and the counters; safe across server threads."""

    def __init__(self, config: FaultConfig | None = None) -> None:
        self._lock = threading.Lock()
        self.configure(config or FaultConfig())

    def configure(self, config: FaultConfig) -> None:
        """Replace the configuration, re-seed the draws, reset the counters."""
        with self._lock:
            self._config = config
            self._random = random.Random(config.seed)
            self._counters = _Counters(by_rule=[0] * len(config.rules))

    @property
    def active(self) -> bool:
        return bool(self._config.rules)

    def decide(self, request: RequestInfo) -> Fault | None:
        """The fault to inject into `request`, if a targeting rule's draw says so."""
        with self._lock:
            for index, rule in enumerate(self._config.rules):
                if rule.kind == CANCELLED_TOKEN_KEPT or not rule.targets(request):
                    continue  # a kept token is decided after the request (`keeps_cancelled_token`)
                _Counters.bump(self._counters.considered, rule.kind, request)
                if rule.variant == STATEMENTS:
                    if drawn := self._drawn_statements(rule, index, request):
                        return Fault(rule, index, request, drawn)
                    continue
                if self._drawn(index):
                    self._counters.by_rule[index] += 1  # reserved now, so max_injections holds under concurrency
                    if rule.kind in (THROTTLE, LATENCY):  # a lost response counts once its write is applied
                        _Counters.bump(self._counters.injected, rule.kind, request)
                    return Fault(rule, index, request)
        return None

    def _drawn(self, index: int) -> bool:
        """Whether rule `index` faults this request (or statement): below its minimum always, at its
        maximum never, otherwise by the seeded draw. Reservations count, so concurrent requests
        never overshoot either bound; a lost response whose write was not applied gives its back."""
        rule, reserved = self._config.rules[index], self._counters.by_rule[index]
        if self._exhausted(index):
            return False
        return reserved < rule.min_injections or self._random.uniform(0, 100) < rule.percent

    def _exhausted(self, index: int) -> bool:
        limit = self._config.rules[index].max_injections
        return limit is not None and self._counters.by_rule[index] >= limit

    def _drawn_statements(self, rule: FaultRule, index: int, request: RequestInfo) -> tuple[tuple[int, str], ...]:
        """`STATEMENTS`: one draw per statement on the rule's table, each reserved as it is drawn."""
        drawn: list[tuple[int, str]] = []
        for position, table in enumerate(request.statement_tables):
            if rule.table is not None and rule.table not in table:
                continue
            if self._drawn(index):
                self._counters.by_rule[index] += 1
                if rule.kind == LOST_RESPONSE:
                    drawn.append((position, "InternalServerError"))
                else:
                    drawn.append((position, rule.error or self._random.choice(STATEMENT_ERRORS)))
        return tuple(drawn)

    def keeps_cancelled_token(self, request: RequestInfo) -> bool:
        """Whether the token of this cancelled transaction stays taken (`CANCELLED_TOKEN_KEPT`)."""
        with self._lock:
            for index, rule in enumerate(self._config.rules):
                if rule.kind != CANCELLED_TOKEN_KEPT or not rule.targets(request):
                    continue
                _Counters.bump(self._counters.considered, rule.kind, request)
                if self._drawn(index):
                    self._counters.by_rule[index] += 1
                    _Counters.bump(self._counters.injected, rule.kind, request)
                    return True
        return False

    def lost_response_settled(self, fault: Fault, applied: bool) -> None:
        """Count a lost response whose write was applied; release the reservation of one that was not."""
        self._settled(fault, 1, int(applied), "")

    def statements_settled(self, fault: Fault, answered: int) -> None:
        """Count the drawn statements answered with their injected error; release the others' reservations
        (a batch refused whole, a ValidationException, answers none; a lost statement that failed on
        its own keeps its own error)."""
        self._settled(fault, len(fault.statements), answered, STATEMENT_COUNTER_SUFFIX)

    def _settled(self, fault: Fault, reserved: int, happened: int, suffix: str) -> None:
        with self._lock:
            rules = self._config.rules
            if fault.index >= len(rules) or rules[fault.index] is not fault.rule:
                return  # reconfigured meanwhile: the counters were reset
            if happened:
                _Counters.bump(self._counters.injected, fault.rule.kind, fault.request, suffix, happened)
            self._counters.by_rule[fault.index] -= reserved - happened

    def report(self) -> dict[str, Any]:
        """Configuration and counters: what ``GET /_compat/faults`` returns.

        ``injected`` and ``considered`` (requests a rule targeted, whatever the draw) are
        ``{kind: {"service:Operation": count}}``; each rule also reports its ``injected``.
        """
        with self._lock:
            config = self._config.as_json()
            for rule, count in zip(config["rules"], self._counters.by_rule, strict=True):
                rule["injected"] = count
            injected = {kind: dict(counts) for kind, counts in self._counters.injected.items()}
            return config | {
                "injected": injected,
                "considered": {kind: dict(counts) for kind, counts in self._counters.considered.items()},
                "total_injected": sum(sum(counts.values()) for counts in injected.values()),
            }


# ------------------------------------------------------------------------- the wire

StartResponse = Callable[..., Any]


def throttle_reply(fault: Fault, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
    """HTTP 400 with the throttling error botocore maps to its exception (nothing applied)."""
    request = fault.request
    code = fault.rule.throttle_error(request)
    if code == "TransactionCanceledException":
        reasons = [{"Code": "None"} for _ in range(request.transact_items)] or [{"Code": "None"}]
        reasons[0] = {"Code": "ThrottlingError", "Message": "Throughput exceeds the current capacity of your table."}
        return cancellation_reply(environ, start_response, reasons)
    payload: dict[str, Any] = {"message": _THROTTLE_MESSAGES.get(code, "Rate exceeded")}
    return _error_reply(environ, start_response, "400 Bad Request", code, payload)


def cancellation_reply(
    environ: dict[str, Any], start_response: StartResponse, reasons: list[dict[str, str]]
) -> list[bytes]:
    """TransactionCanceledException as DynamoDB sends it: one reason per action, in order."""
    codes = ", ".join(reason["Code"] for reason in reasons)
    payload: dict[str, Any] = {
        "message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
        "CancellationReasons": reasons,
    }
    return _error_reply(environ, start_response, "400 Bad Request", "TransactionCanceledException", payload)


_THROTTLE_MESSAGES = {
    "ProvisionedThroughputExceededException": (
        "The level of configured provisioned throughput for the table was exceeded. "
        "Consider increasing your provisioning level with the UpdateTable API."
    ),
    "ThrottlingException": "Rate of requests exceeds the allowed throughput.",
    "RequestLimitExceeded": (
        "Throughput exceeds the current throughput limit for your account. "
        "Please contact AWS Support at https://aws.amazon.com/support request a limit increase"
    ),
}


_STATEMENT_MESSAGES = {
    "ProvisionedThroughputExceeded": _THROTTLE_MESSAGES[_THROUGHPUT_EXCEEDED],
    "ThrottlingError": "Throughput exceeds the current capacity of your table or index.",
    "RequestLimitExceeded": _THROTTLE_MESSAGES["RequestLimitExceeded"],
    "InternalServerError": "Internal server error",
    "TransactionConflict": "Transaction is ongoing for the item",
}


def statement_error(code: str) -> dict[str, str]:
    """The `BatchStatementError` of a statement a `STATEMENTS` fault reached."""
    return {"Code": code, "Message": _STATEMENT_MESSAGES[code]}


@dataclass
class StatementFaults:
    """What the BatchExecuteStatement being served does with the statements a `STATEMENTS` fault drew."""

    codes: Mapping[int, str]
    """Statement index -> the `BatchStatementError` code it is answered with."""
    run_first: bool
    """Lost responses: the statement is run, and only a success is answered with the error."""
    answered: int = 0
    """How many statements were answered with their code (filled in by the batch)."""


def lose_response(fault: Fault, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
    """Instead of moto's successful response: a 500, or no response at all (`fault`'s variant)."""
    rule = fault.rule
    if rule.variant == "error" and fault.request.service == "s3":
        return _s3_internal_error(start_response)
    if rule.variant == "error":
        code = "InternalServerError" if fault.request.service.startswith("dynamodb") else "InternalFailure"
        payload = {"message": "Internal server error"}
        return _error_reply(environ, start_response, "500 Internal Server Error", code, payload)
    if rule.variant == "timeout":
        time.sleep(rule.hold_seconds)
    connection = environ.get("werkzeug.socket")
    if connection is not None:
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
    # werkzeug treats a ConnectionError from the app as a dropped connection: nothing is sent.
    raise ConnectionAbortedError(f"injected fault: response to {fault.request.operation} dropped")


def _error_reply(
    environ: dict[str, Any], start_response: StartResponse, status: str, code: str, payload: dict[str, Any]
) -> list[bytes]:
    request_id = str(uuid.uuid4())
    target: str = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:  # JSON protocol: botocore reads __type (the part after '#')
        error_type = _DYNAMODB_ERROR_PREFIX + code if target.startswith("DynamoDB") else code
        body = json.dumps({"__type": error_type, **payload}).encode("utf-8")
        content_type = "application/x-amz-json-1.0" if target.startswith("DynamoDB") else "application/x-amz-json-1.1"
    else:  # query / XML protocols
        message = payload.get("message", "")
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        ).encode()
        content_type = "text/xml"
    start_response(
        status,
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("x-amzn-RequestId", request_id),
            ("x-amzn-ErrorType", code),
        ],
    )
    return [body]


def _s3_internal_error(start_response: StartResponse) -> list[bytes]:
    """S3's HTTP 500 ``InternalError``, as S3 writes it (REST-XML: ``<Error>`` at the root)."""
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
        "<Message>We encountered an internal error. Please try again.</Message>"
        f"<RequestId>{request_id}</RequestId></Error>"
    ).encode()
    start_response(
        "500 Internal Server Error",
        [("Content-Type", "application/xml"), ("Content-Length", str(len(body))), ("x-amz-request-id", request_id)],
    )
    return [body]


# ---------------------------------------------------------------------- the client


def _call(endpoint_url: str, method: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        endpoint_url + CONTROL_PATH, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        reply: dict[str, Any] = json.loads(response.read())
    return reply


def configure_faults(endpoint_url: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """``PUT /_compat/faults``: replace the emulator's faults (counters reset); returns the report."""
    return _call(endpoint_url, "PUT", config)


def fault_report(endpoint_url: str) -> dict[str, Any]:
    """``GET /_compat/faults``: the configuration and the counters of injected faults."""
    return _call(endpoint_url, "GET")


def clear_faults(endpoint_url: str) -> dict[str, Any]:
    """``DELETE /_compat/faults``: no faults any more; returns the report as it was."""
    return _call(endpoint_url, "DELETE")


def injected(report: Mapping[str, Any], kind: str, service: str, operation: str) -> int:
    """How many faults of `kind` a report counts on ``service:operation``."""
    count: int = report.get("injected", {}).get(kind, {}).get(f"{service}:{operation}", 0)
    return count
