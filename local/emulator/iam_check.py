"""IAM enforced locally: a function's calls checked against its execution role's identity policies.

On AWS a function calls as its execution role, and a call that no statement of the role's
policies allows fails with AccessDenied. moto checks nothing by default, and its own enforcement
(``INITIAL_NO_AUTH_ACTION_COUNT``) does not fit: it checks every caller or none (the deployer, the
producer and the tests would need grants of their own), checks DynamoDB and Kinesis against ``*``
instead of the table's or stream's ARN, and denies every condition it cannot evaluate. So this
module, used by `moto_compat.CompatMiddleware` in front of moto, does it for one kind of caller:

- **Who is checked.** A request signed (SigV4, in the ``Authorization`` header or a presigned
  URL) with the access key of an assumed-role session the emulator's STS issued: the runner
  assumes each function's execution role and gives the worker its credentials, and reads the
  function's streams with them as Lambda's event source mapping does (`local.runner.invoker`),
  and sends a discarded batch's record to the mapping's on-failure destination with them, as
  Lambda does with the execution role (`local.runner.expiry`).
  Every other caller (dummy credentials: the deployer, the producer, the tests; a session of a
  role the emulator's IAM does not hold, which AWS would not issue) is not checked.
- **What a request needs.** `authorizations` maps the request to the IAM actions and resource
  ARNs AWS authorises it by, for the APIs the functions and their mappings call: DynamoDB items,
  queries, batches, transactions (one action per contained request, with
  ``dynamodb:EnclosingOperation``) and PartiQL (one action per statement, by its verb, on the
  table or index it names); DynamoDB Streams and Kinesis reads; S3 objects and listings
  (``s3:prefix``); an on-failure destination's ``sqs:SendMessage`` and ``sns:Publish``;
  ``sts:GetCallerIdentity``, which needs no permission. A request it cannot map
  is refused, saying so, never let through.
- **The decision** (IAM User Guide, "Policy evaluation logic", within one account): an explicit
  Deny in any of the role's policies wins; otherwise the role's identity policies (inline and
  attached managed policies, read live from the emulator's IAM, so a changed policy applies to the
  next call) must allow, and so must its permissions boundary and the session policy when there
  are any. `Action`/`NotAction` match case-insensitively, `Resource`/`NotResource` with ``*`` and
  ``?``; the condition operators of `OPERATORS`, with ``IfExists``, on the context keys of
  `CONTEXT_KEYS`. A policy element, operator, key or policy variable outside these makes the call
  **refused**, with a message naming what could not be evaluated, and logged as an error: never
  silently allowed, never silently denied for an unrelated reason.
- **The answer**, as the service gives it: DynamoDB, DynamoDB Streams, Kinesis and SQS
  ``AccessDeniedException`` (HTTP 400), SNS ``AuthorizationError`` (HTTP 403); in a
  BatchExecuteStatement each denied statement gets its own ``AccessDenied`` error
  (BatchStatementError) and the others run; S3 ``AccessDenied`` (HTTP 403), and a GET or HEAD
  of a missing key answers 403 instead of 404 when the role may not list the bucket (S3 API
  Reference, GetObject, "Permissions"). The message is AWS's ("User: <session
  ARN> is not authorized to perform: <action> on resource: <ARN> because no identity-based policy
  allows the <action> action").

Not enforced (docs/design.md, "IAM, locally"): resource policies (bucket, key and topic policies),
SCPs and RCPs, KMS (moto encrypts nothing with KMS: no key use through the services, and no
decryption of a function's environment under a customer-managed key, which Lambda does, not the
handler, so nothing reaches this check), signatures,
session tokens and their expiry, any caller other than an assumed-role session, and the settings
guard's role (the deployer runs its handler). ``EMULATOR_IAM=off`` turns the check off; ``GET
/_compat/iam`` reports what was checked and denied.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import re
import threading
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from local.emulator.control import IAM_CONTROL_PATH
from local.emulator.injected_faults import TARGET_PREFIXES, error_reply, query_parameters, read_body

log = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "EMULATOR_IAM"
ENFORCE = "enforce"
OFF = "off"
MODES = (ENFORCE, OFF)
CONTROL_PATH = IAM_CONTROL_PATH
REPORTED_DENIALS = 50
"""How many distinct denial messages the report keeps (each with its count)."""

StartResponse = Callable[..., Any]


class Unevaluable(Exception):
    """A policy uses something this check does not evaluate: the call is refused, saying what."""


class Unmapped(Exception):
    """A request this check cannot map to the actions and resources IAM authorises it by."""


# ------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class Authorization:
    """One thing IAM authorises in a request: an action on a resource, with the request's own keys."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()
    """Request-specific condition keys (``s3:prefix``, ``dynamodb:EnclosingOperation``), lower-cased."""


@dataclass(frozen=True)
class PolicySet:
    """Policies of one type: all must be taken together (AWS's "identity-based policy", ...)."""

    kind: str
    documents: tuple[str, ...]


IDENTITY = "identity-based policy"
BOUNDARY = "permissions boundary"
SESSION = "session policy"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    because: str = ""
    """Why not, as AWS ends its message: "because no identity-based policy allows the X action"."""


OPERATORS = frozenset(
    {
        *("StringEquals", "StringNotEquals", "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"),
        *("StringLike", "StringNotLike", "ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike", "Bool", "Null"),
        *("NumericEquals", "NumericNotEquals", "NumericLessThan", "NumericLessThanEquals"),
        *("NumericGreaterThan", "NumericGreaterThanEquals"),
    }
)
"""Condition operators evaluated (each also with ``IfExists``; ``Null`` without)."""
_NEGATED = frozenset(
    {"StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike", "ArnNotEquals", "ArnNotLike", "NumericNotEquals"}
)

CONTEXT_KEYS = frozenset(
    {
        *("aws:principalarn", "aws:principalaccount", "aws:principaltype", "aws:userid", "aws:requestedregion"),
        *("aws:securetransport", "aws:resourceaccount", "aws:viaawsservice"),
        *("aws:calledvia", "aws:calledviafirst", "aws:calledvialast", "aws:sourcearn", "aws:sourceaccount"),
        *("s3:prefix", "s3:delimiter", "s3:max-keys", "dynamodb:enclosingoperation"),
    }
)
"""Keys whose presence and value this check knows for every request it maps (lower-cased: IAM's
keys are case-insensitive). The principal's keys come from the session; ``aws:SecureTransport`` is
true (the SDK calls AWS over TLS; locally it is plain HTTP to the loopback); ``aws:ViaAWSService``
false, and the ``CalledVia`` and ``Source`` keys absent (a function calls the service itself). Any
other key in a statement that applies is `Unevaluable`."""


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@functools.lru_cache(maxsize=8192)
def _wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(regex, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


def wildcard_matches(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM's match: ``*`` any run of characters (``/`` and ``:`` included), ``?`` any one character."""
    return _wildcard(pattern, ignore_case).fullmatch(value) is not None


def arn_matches(pattern: str, value: str) -> bool:
    """``ArnLike`` / ``ArnEquals``: each of the six colon-separated parts matched on its own."""
    pattern_parts, value_parts = pattern.split(":", 5), value.split(":", 5)
    if len(pattern_parts) != 6 or len(value_parts) != 6:
        return False
    return all(wildcard_matches(p, v) for p, v in zip(pattern_parts, value_parts, strict=True))


def _no_variables(values: Iterable[str], where: str) -> None:
    for value in values:
        if "${" in value:
            raise Unevaluable(f"the policy variable in {where} {value!r}")


def _value_matches(base: str, expected: str, actual: str) -> bool:
    if base in ("StringEquals", "StringNotEquals"):
        return actual == expected
    if base in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        return actual.casefold() == expected.casefold()
    if base in ("StringLike", "StringNotLike"):
        return wildcard_matches(expected, actual)
    if base in ("ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike"):
        return arn_matches(expected, actual)
    if base == "Bool":
        return actual.lower() == expected.lower()
    try:
        left, right = float(actual), float(expected)
    except ValueError:
        return False
    comparisons: dict[str, Callable[[float, float], bool]] = {
        "NumericEquals": float.__eq__,
        "NumericNotEquals": float.__eq__,
        "NumericLessThan": float.__lt__,
        "NumericLessThanEquals": float.__le__,
        "NumericGreaterThan": float.__gt__,
        "NumericGreaterThanEquals": float.__ge__,
    }
    return comparisons[base](left, right)


def condition_holds(
    operator: str, key: str, expected: Any, context: Mapping[str, str], known_keys: Container[str] = CONTEXT_KEYS
) -> bool:
    """One operator on one key (IAM User Guide, "Condition operators").

    A key absent from the request: ``...IfExists`` holds; a negated operator (``StringNotLike``,
    ``ArnNotEquals`` ...) holds ("If the key ... is not present ... the condition is true" for
    operators that require the key not to match); any other does not. Several values: any of them
    matches (a negated operator: none does). `known_keys` (lower-cased): the keys whose absence
    from `context` means absence from the request; any other is `Unevaluable`.
    """
    if ":" in operator:  # ForAllValues: / ForAnyValue: (multivalued keys)
        raise Unevaluable(f"the condition operator {operator}")
    base = operator.removesuffix("IfExists")
    if base not in OPERATORS or (base == "Null" and base != operator):
        raise Unevaluable(f"the condition operator {operator}")
    if key.lower() not in known_keys:
        raise Unevaluable(f"the condition key {key}")
    values = [value if isinstance(value, str) else json.dumps(value) for value in _as_list(expected)]
    _no_variables(values, f"{operator} {key}")
    actual = context.get(key.lower())
    if base == "Null":
        return any((value.lower() == "true") == (actual is None) for value in values)
    if actual is None:
        return base != operator or base in _NEGATED
    matched = any(_value_matches(base, value, actual) for value in values)
    return not matched if base in _NEGATED else matched


_STATEMENT_ELEMENTS = frozenset({"Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Condition"})


def statement_applies(
    statement: Mapping[str, Any],
    authorization: Authorization,
    context: Mapping[str, str],
    known_keys: Container[str] = CONTEXT_KEYS,
) -> bool:
    """Whether an identity-policy statement covers this action on this resource in this context.

    Its conditions are evaluated only when its actions and resources cover the request, so a
    statement about something else never makes an unrelated call unevaluable. `context` and
    `known_keys` as `condition_holds` takes them (the policy tests' evaluator,
    `tests/stacks/policy_evaluator.py`, passes the keys of a request it states in full).
    """
    if not isinstance(statement, Mapping) or set(statement) - _STATEMENT_ELEMENTS:
        raise Unevaluable(
            f"the statement elements {sorted(statement) if isinstance(statement, Mapping) else statement}"
        )
    if ("Action" in statement) == ("NotAction" in statement) or ("Resource" in statement) == (
        "NotResource" in statement
    ):
        raise Unevaluable("a statement without exactly one of Action/NotAction and Resource/NotResource")
    actions = [str(a) for a in _as_list(statement.get("Action", statement.get("NotAction")))]
    if any(wildcard_matches(a, authorization.action, ignore_case=True) for a in actions) != ("Action" in statement):
        return False
    resources = [str(r) for r in _as_list(statement.get("Resource", statement.get("NotResource")))]
    _no_variables(resources, "Resource")
    if any(wildcard_matches(r, authorization.resource) for r in resources) != ("Resource" in statement):
        return False
    conditions = statement.get("Condition", {})
    if not isinstance(conditions, Mapping) or not all(isinstance(keys, Mapping) for keys in conditions.values()):
        raise Unevaluable(f"the Condition {conditions!r}")
    return all(
        condition_holds(operator, key, expected, context, known_keys)
        for operator, keys in conditions.items()
        for key, expected in keys.items()
    )


@functools.lru_cache(maxsize=1024)
def statements_of(document: str) -> tuple[Mapping[str, Any], ...]:
    """A policy document's statements (documents are stored as JSON text, sometimes URL-encoded)."""
    text = document if document.lstrip().startswith("{") else urllib.parse.unquote(document)
    try:
        parsed = json.loads(text)
    except ValueError as error:
        raise Unevaluable(f"a policy document that is not JSON ({error})") from None
    statements = parsed.get("Statement") if isinstance(parsed, dict) else None
    if statements is None:
        raise Unevaluable("a policy document without Statement")
    return tuple(_as_list(statements))


@functools.lru_cache(maxsize=65536)
def decided(
    policy_sets: tuple[PolicySet, ...], authorization: Authorization, context: tuple[tuple[str, str], ...]
) -> Decision:
    """`decide`, remembered: the same policies decide the same request the same way (a changed
    policy is another document, so another key)."""
    return decide(policy_sets, authorization, dict(context))


def decide(policy_sets: Sequence[PolicySet], authorization: Authorization, context: Mapping[str, str]) -> Decision:
    """AWS's evaluation within one account: an explicit Deny in any policy wins; otherwise every
    policy type present must allow (the identity-based policies always, a boundary and a session
    policy when the session has them). `Unevaluable` propagates."""
    full_context = {**context, **dict(authorization.context)}
    allowed_by: dict[str, bool] = {}
    for policy_set in policy_sets:
        allowed = False
        for document in policy_set.documents:
            for statement in statements_of(document):
                if not statement_applies(statement, authorization, full_context):
                    continue
                effect = statement.get("Effect")
                if effect == "Deny":
                    return Decision(False, f"with an explicit deny in an {policy_set.kind}")
                if effect != "Allow":
                    raise Unevaluable(f"the Effect {effect!r}")
                allowed = True
        allowed_by[policy_set.kind] = allowed
    for policy_set in policy_sets:
        if not allowed_by[policy_set.kind]:
            return Decision(False, f"because no {policy_set.kind} allows the {authorization.action} action")
    return Decision(True)


# ------------------------------------------------------------------------- the caller


@dataclass(frozen=True)
class Session:
    """An assumed-role session: who calls, and the policies that decide for it."""

    arn: str
    """``arn:aws:sts::<account>:assumed-role/<role>/<session>``: the User of AWS's message."""
    role_arn: str
    account: str
    partition: str
    user_id: str
    policy_sets: tuple[PolicySet, ...]

    def context(self, region: str) -> tuple[tuple[str, str], ...]:
        """The request context's keys of this principal (`CONTEXT_KEYS`), lower-cased."""
        return (
            ("aws:principalarn", self.role_arn),
            ("aws:principalaccount", self.account),
            ("aws:principaltype", "AssumedRole"),
            ("aws:userid", self.user_id),
            ("aws:requestedregion", region),
            ("aws:securetransport", "true"),
            ("aws:resourceaccount", self.account),
            ("aws:viaawsservice", "false"),
        )


_CREDENTIAL_SCOPE = re.compile(r"(?P<key>[^/,\s]+)/\d{8}/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request")


def signed_scope(environ: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(access key, region, signing service) of a SigV4 request, header or presigned URL; None if unsigned."""
    authorization = str(environ.get("HTTP_AUTHORIZATION", ""))
    credential = authorization.partition("Credential=")[2]
    if not credential:
        query = urllib.parse.parse_qs(str(environ.get("QUERY_STRING", "")))
        credential = (query.get("X-Amz-Credential") or [""])[0]
    scope = _CREDENTIAL_SCOPE.match(credential)
    return (scope["key"], scope["region"], scope["service"]) if scope else None


SessionLookup = Callable[[str], "Session | None"]


def moto_session(access_key: str) -> Session | None:
    """The assumed-role session of an access key the emulator's STS issued, with its role's
    policies as they are now in the emulator's IAM; None for any other key, and for a session of
    a role the emulator's IAM does not hold (AWS refuses that AssumeRole; moto's STS grants it,
    which is how a test calls as another account, and such a caller is not a function)."""
    from moto.iam.models import get_account_id_from, iam_backends  # noqa: PLC0415 (moto: server side only)
    from moto.sts.models import sts_backends  # noqa: PLC0415

    account = get_account_id_from(access_key)
    for partition, sts in list(sts_backends[account].items()):
        assumed = sts.get_assumed_role_from_access_key(access_key)
        if assumed is None:
            continue
        iam = iam_backends[account][partition]
        role = next((r for r in list(iam.roles.values()) if r.arn == assumed.role_arn), None)
        if role is None:
            return None
        identity = [str(document) for document in list(role.policies.values())]
        identity += [_default_document(policy) for policy in list(role.managed_policies.values())]
        sets = [PolicySet(IDENTITY, tuple(identity))]
        if role.permissions_boundary_arn:
            boundary = iam.managed_policies.get(role.permissions_boundary_arn)
            sets.append(PolicySet(BOUNDARY, (_default_document(boundary),) if boundary else ()))
        if assumed.policy:
            sets.append(PolicySet(SESSION, (str(assumed.policy),)))
        return Session(
            assumed.arn, assumed.role_arn, account, partition, f"{role.id}:{assumed.session_name}", tuple(sets)
        )
    return None


def _default_document(policy: Any) -> str:
    return next((str(v.document) for v in policy.versions if v.is_default), '{"Statement": []}')


# ------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Request:
    """What `authorizations` reads of a request."""

    service: str
    """The SigV4 signing name (``dynamodb`` for DynamoDB Streams too), or the target's service."""
    operation: str
    region: str
    account: str
    partition: str
    body: Mapping[str, Any] = field(default_factory=dict)
    method: str = ""
    path: str = ""
    query: Mapping[str, list[str]] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    unreadable: bool = False
    """A JSON body that is missing or not a JSON object (a client killed while sending it: `make
    chaos` kills runners and workers): the service refuses it as malformed (SerializationException)
    before any authorization; moto fails it too, applying nothing."""

    def arn(self, service: str, resource: str) -> str:
        return f"arn:{self.partition}:{service}:{self.region}:{self.account}:{resource}"


@dataclass(frozen=True)
class Needed:
    """What a request needs: authorizations of the whole request, and (BatchExecuteStatement) of
    each statement, which AWS answers one by one; `missing_object_listing`: a GET or HEAD of an S3
    object, answered 403 instead of 404 when this ListBucket is not allowed."""

    whole: tuple[Authorization, ...] = ()
    per_statement: Mapping[int, tuple[Authorization, ...]] = field(default_factory=dict)
    missing_object_listing: Authorization | None = None


def _table_arn(request: Request, table: str, index: str | None = None) -> str:
    arn = table if table.startswith("arn:") else request.arn("dynamodb", f"table/{table}")
    return f"{arn}/index/{index}" if index else arn


PARTIQL_ACTIONS = {
    "INSERT": "PartiQLInsert",
    "UPDATE": "PartiQLUpdate",
    "DELETE": "PartiQLDelete",
    "SELECT": "PartiQLSelect",
}
"""IAM authorises PartiQL per statement verb, on the table or index (Developer Guide, "IAM security
policies with PartiQL for DynamoDB")."""
_PARTIQL_TOKEN = re.compile(r""""(?:[^"]|"")*"|'(?:[^']|'')*'|[A-Za-z_][A-Za-z0-9_.-]*|\S""")


def _unquoted(name: str) -> str:
    return name[1:-1].replace('""', '"') if name.startswith('"') else name


@functools.lru_cache(maxsize=4096)
def _partiql_target(text: str) -> tuple[str, str, str | None] | None:
    """(verb, table, index) of a statement: the name after ``INSERT INTO``, ``UPDATE``, ``DELETE
    FROM``, or a SELECT's first ``FROM`` outside quotes (``"T"."I"``: an index); None if not found."""
    tokens = _PARTIQL_TOKEN.findall(text)
    verb = tokens[0].upper() if tokens else ""
    if verb not in PARTIQL_ACTIONS:
        return None
    words = [token.upper() for token in tokens]
    if verb == "UPDATE":
        at = 1
    elif verb == "INSERT":
        at = 2 if words[1:2] == ["INTO"] else 0
    else:
        at = words.index("FROM") + 1 if "FROM" in words else 0
    if not 0 < at < len(tokens) or not re.match(r'["A-Za-z_]', tokens[at]):
        return None
    index = None
    if verb == "SELECT" and tokens[at + 1 : at + 2] == ["."] and at + 2 < len(tokens):
        index = _unquoted(tokens[at + 2])
    return verb, _unquoted(tokens[at]), index


def partiql_authorization(request: Request, statement: Any, context: tuple[tuple[str, str], ...] = ()) -> Authorization:
    """The action and table (or index) of one PartiQL statement: ``INSERT INTO "T" ...`` -> PartiQLInsert on T."""
    text = statement.get("Statement") if isinstance(statement, Mapping) else None
    found = _partiql_target(text) if isinstance(text, str) else None
    if found is None:
        raise Unmapped(f"a PartiQL statement whose verb and table could not be read: {str(text)[:120]!r}")
    verb, table, index = found
    return Authorization("dynamodb:" + PARTIQL_ACTIONS[verb], _table_arn(request, table, index), context)


_TRANSACT_WRITE_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
"""IAM authorises a transaction by its contained requests (Developer Guide, "Using IAM with DynamoDB transactions")."""
_TABLELESS_DYNAMODB = frozenset(
    {"ListTables", "DescribeLimits", "DescribeEndpoints", "ListBackups", "ListGlobalTables"}
)


def _dynamodb(request: Request) -> Needed:
    operation, body = request.operation, request.body
    if operation in ("BatchGetItem", "BatchWriteItem"):
        tables = body.get("RequestItems") or {}
        return Needed(tuple(Authorization(f"dynamodb:{operation}", _table_arn(request, t)) for t in tables))
    if operation in ("TransactWriteItems", "TransactGetItems"):
        context = (("dynamodb:enclosingoperation", operation),)
        needed = []
        for item in body.get("TransactItems") or []:
            for kind, action in (item or {}).items():
                name = "GetItem" if kind == "Get" else _TRANSACT_WRITE_ACTIONS.get(kind)
                if name is None:
                    raise Unmapped(f"the {operation} item kind {kind}")
                needed.append(Authorization(f"dynamodb:{name}", _table_arn(request, str(action["TableName"])), context))
        return Needed(tuple(needed))
    if operation == "ExecuteStatement":
        return Needed((partiql_authorization(request, body),))
    if operation == "ExecuteTransaction":
        context = (("dynamodb:enclosingoperation", operation),)
        return Needed(tuple(partiql_authorization(request, s, context) for s in body.get("TransactStatements") or []))
    if operation == "BatchExecuteStatement":
        statements = body.get("Statements") or []
        return Needed(per_statement={i: (partiql_authorization(request, s),) for i, s in enumerate(statements)})
    action = f"dynamodb:{operation}"
    if isinstance(body.get("TableName"), str):
        index = body.get("IndexName") if operation in ("Query", "Scan") else None
        return Needed((Authorization(action, _table_arn(request, body["TableName"], index)),))
    if isinstance(body.get("ResourceArn"), str):
        return Needed((Authorization(action, body["ResourceArn"]),))
    if operation in _TABLELESS_DYNAMODB:
        return Needed((Authorization(action, "*"),))
    raise Unmapped(f"the DynamoDB operation {operation}")


def _dynamodb_streams(request: Request) -> Needed:
    operation, body = request.operation, request.body
    action = f"dynamodb:{operation}"
    if operation == "ListStreams":
        return Needed((Authorization(action, "*"),))
    if isinstance(body.get("StreamArn"), str):
        return Needed((Authorization(action, body["StreamArn"]),))
    if operation == "GetRecords" and isinstance(body.get("ShardIterator"), str):
        # The emulator's iterators are "<stream ARN>|1|<id>"; one it never issued is refused by
        # moto whatever IAM says, so only the stream it names is authorised here.
        return Needed((Authorization(action, body["ShardIterator"].split("|", 1)[0]),))
    raise Unmapped(f"the DynamoDB Streams operation {operation}")


def _kinesis(request: Request) -> Needed:
    operation, body = request.operation, request.body
    action = f"kinesis:{operation}"
    if isinstance(body.get("ConsumerARN"), str):
        return Needed((Authorization(action, body["ConsumerARN"]),))
    if isinstance(body.get("StreamARN"), str):
        return Needed((Authorization(action, body["StreamARN"]),))
    if isinstance(body.get("StreamName"), str):
        return Needed((Authorization(action, request.arn("kinesis", f"stream/{body['StreamName']}")),))
    if operation == "GetRecords" and isinstance(body.get("ShardIterator"), str):
        # The emulator's iterators are base64 of "<stream name>:<shard>:<sequence>:<issued>"; one it
        # never issued is refused by moto (InvalidArgumentException) whatever IAM says.
        try:
            stream = base64.b64decode(body["ShardIterator"], validate=True).decode().split(":", 1)[0]
        except (binascii.Error, ValueError):
            return Needed()
        return Needed((Authorization(action, request.arn("kinesis", f"stream/{stream}")),))
    if operation in ("ListStreams", "DescribeLimits"):
        return Needed((Authorization(action, "*"),))
    raise Unmapped(f"the Kinesis operation {operation}")


_S3_PARAMETERS = frozenset(
    {
        *("x-id", "versionId", "partNumber", "prefix", "delimiter", "max-keys", "list-type", "continuation-token"),
        *("start-after", "encoding-type", "fetch-owner", "marker", "key-marker", "version-id-marker"),
        *("upload-id-marker", "max-uploads", "max-parts", "part-number-marker"),
    }
)
"""Query names that are parameters of an operation; any other (``?tagging``, ``?uploads``) names a
sub-resource, which is another operation."""
_S3_OBJECT = {
    ("GET", ""): "GetObject",
    ("HEAD", ""): "GetObject",
    ("PUT", ""): "PutObject",
    ("DELETE", ""): "DeleteObject",
    ("GET", "tagging"): "GetObjectTagging",
    ("PUT", "tagging"): "PutObjectTagging",
    ("DELETE", "tagging"): "DeleteObjectTagging",
    ("GET", "acl"): "GetObjectAcl",
    ("PUT", "acl"): "PutObjectAcl",
    ("GET", "retention"): "GetObjectRetention",
    ("PUT", "retention"): "PutObjectRetention",
    ("GET", "legal-hold"): "GetObjectLegalHold",
    ("PUT", "legal-hold"): "PutObjectLegalHold",
    ("GET", "attributes"): "GetObjectAttributes",
    ("POST", "uploads"): "PutObject",
    ("PUT", "uploadId"): "PutObject",
    ("POST", "uploadId"): "PutObject",
    ("GET", "uploadId"): "ListMultipartUploadParts",
    ("DELETE", "uploadId"): "AbortMultipartUpload",
}
"""(method, sub-resource) of a request on an object -> its IAM action (the S3 User Guide's
"Required permissions for Amazon S3 API operations")."""
_S3_VERSIONED = {"GetObject": "GetObjectVersion", "DeleteObject": "DeleteObjectVersion"}
_S3_BUCKET = {
    ("GET", ""): "ListBucket",
    ("HEAD", ""): "ListBucket",
    ("PUT", ""): "CreateBucket",
    ("DELETE", ""): "DeleteBucket",
    ("GET", "versions"): "ListBucketVersions",
    ("GET", "uploads"): "ListBucketMultipartUploads",
    ("GET", "location"): "GetBucketLocation",
    ("GET", "versioning"): "GetBucketVersioning",
    ("GET", "object-lock"): "GetBucketObjectLockConfiguration",
}
_S3_LISTING_KEYS = {"prefix": "s3:prefix", "delimiter": "s3:delimiter", "max-keys": "s3:max-keys"}
_S3_HEADER_ACTIONS = (
    (("x-amz-object-lock-mode", "x-amz-object-lock-retain-until-date"), "PutObjectRetention"),
    (("x-amz-object-lock-legal-hold",), "PutObjectLegalHold"),
    (
        ("x-amz-acl", "x-amz-grant-full-control", "x-amz-grant-read", "x-amz-grant-read-acp", "x-amz-grant-write-acp"),
        "PutObjectAcl",
    ),
    (("x-amz-tagging",), "PutObjectTagging"),
)
"""Headers of an object write that need an action of their own besides PutObject (the User Guide's
pages on Object Lock, ACLs and tagging)."""


def _s3(request: Request) -> Needed:
    bucket, _, key = request.path.lstrip("/").partition("/")
    subresources = sorted(
        name for name in request.query if name not in _S3_PARAMETERS and not name.startswith("response-")
    )
    if len(subresources) > 1:
        raise Unmapped(f"an S3 {request.method} with the sub-resources {subresources}")
    subresource = subresources[0] if subresources else ""
    if not bucket:
        if (request.method, subresource) == ("GET", ""):
            return Needed((Authorization("s3:ListAllMyBuckets", "*"),))
        raise Unmapped(f"the S3 request {request.method} / ?{subresource}")
    bucket_arn = f"arn:{request.partition}:s3:::{bucket}"
    if not key:
        name = _S3_BUCKET.get((request.method, subresource))
        if name is None:
            raise Unmapped(f"the S3 bucket request {request.method} ?{subresource}")
        context = tuple(
            (condition_key, request.query[parameter][0])
            for parameter, condition_key in _S3_LISTING_KEYS.items()
            if name == "ListBucket" and parameter in request.query
        )
        return Needed((Authorization(f"s3:{name}", bucket_arn, context),))
    name = _S3_OBJECT.get((request.method, subresource))
    if name is None:
        raise Unmapped(f"the S3 object request {request.method} ?{subresource}")
    if "versionId" in request.query and not subresource:
        name = _S3_VERSIONED.get(name, name)
    needed = [Authorization(f"s3:{name}", f"{bucket_arn}/{key}")]
    if name == "PutObject" and subresource in ("", "uploads"):
        for headers, action in _S3_HEADER_ACTIONS:
            if any(header in request.headers for header in headers):
                needed.append(Authorization(f"s3:{action}", f"{bucket_arn}/{key}"))
    source = request.headers.get("x-amz-copy-source")
    if source is not None and request.method == "PUT":
        source_path, _, source_query = urllib.parse.unquote(source).lstrip("/").partition("?")
        read = "GetObjectVersion" if "versionId=" in source_query else "GetObject"
        needed.append(Authorization(f"s3:{read}", f"arn:{request.partition}:s3:::{source_path}"))
    listing = None
    if request.method in ("GET", "HEAD") and not subresource:
        listing = Authorization("s3:ListBucket", bucket_arn)  # no s3:prefix: the existence check names none
    return Needed(tuple(needed), missing_object_listing=listing)


def _sqs(request: Request) -> Needed:
    """A message sent to a queue: ``sqs:SendMessage`` on the queue, also for a batch (the SQS
    Developer Guide's "Amazon SQS API permissions"). The queue is named by its URL
    (``<endpoint>/<account>/<name>``) or, as SQS also accepts, its name."""
    operation, queue_url = request.operation, request.body.get("QueueUrl")
    if operation not in ("SendMessage", "SendMessageBatch") or not isinstance(queue_url, str):
        raise Unmapped(f"the SQS operation {operation}")
    parts = urllib.parse.urlsplit(queue_url).path.strip("/").split("/") if "/" in queue_url else [queue_url]
    account = parts[-2] if len(parts) >= 2 else request.account
    queue_arn = f"arn:{request.partition}:sqs:{request.region}:{account}:{parts[-1]}"
    return Needed((Authorization("sqs:SendMessage", queue_arn),))


def _sns(request: Request) -> Needed:
    """A message published to a topic: ``sns:Publish`` on the topic (``TopicArn``, or ``TargetArn``)."""
    topic = request.body.get("TopicArn") or request.body.get("TargetArn")
    if request.operation != "Publish" or not isinstance(topic, str):
        raise Unmapped(f"the SNS operation {request.operation}")
    return Needed((Authorization("sns:Publish", topic),))


def _sts(request: Request) -> Needed:
    if request.operation == "GetCallerIdentity":
        return Needed()  # "No permissions are required to perform this operation" (STS API Reference)
    raise Unmapped(f"the STS operation {request.operation}")


_MAPPERS: dict[str, Callable[[Request], Needed]] = {
    "dynamodb": _dynamodb,
    "dynamodbstreams": _dynamodb_streams,
    "kinesis": _kinesis,
    "s3": _s3,
    "sqs": _sqs,
    "sns": _sns,
    "sts": _sts,
}


def authorizations(request: Request) -> Needed:
    """The actions and resources AWS authorises `request` by; `Unmapped` for any other request."""
    if request.unreadable:
        return Needed()  # nothing it could do: refused as malformed by the service, and failed by moto
    mapper = _MAPPERS.get(request.service)
    if mapper is None:
        raise Unmapped(f"requests to {request.service or 'this service'} ({request.operation or 'unknown operation'})")
    try:
        return mapper(request)
    except (KeyError, TypeError, AttributeError) as error:
        raise Unmapped(f"a {request.service} {request.operation} request of an unexpected shape ({error!r})") from None


def read_request(environ: dict[str, Any], region: str, account: str, partition: str, signing_service: str) -> Request:
    """The `Request` of a WSGI request (its JSON or form body read, and put back for moto)."""
    target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
    prefix, _, operation = target.partition(".")
    service = next((name for key, name in TARGET_PREFIXES.items() if prefix.startswith(key)), signing_service)
    if target:
        try:
            body = json.loads(read_body(environ))  # the SDK sends "{}" at least: none is a body cut off
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return Request(service, operation, region, account, partition, unreadable=True)
        return Request(service, operation, region, account, partition, body=body)
    if service != "s3":
        parameters = query_parameters(environ)
        return Request(service, parameters.get("Action", ""), region, account, partition, body=parameters)
    return Request(
        "s3",
        "",
        region,
        account,
        partition,
        method=str(environ.get("REQUEST_METHOD", "")),
        path=str(environ.get("PATH_INFO", "")).encode("latin-1").decode("utf-8", "replace"),
        query=urllib.parse.parse_qs(str(environ.get("QUERY_STRING", "")), keep_blank_values=True),
        headers={name[5:].replace("_", "-").lower(): str(v) for name, v in environ.items() if name.startswith("HTTP_")},
    )


# ------------------------------------------------------------------------- the check


@dataclass(frozen=True)
class Denial:
    authorization: Authorization
    message: str
    loud: bool = False
    """Refused because the check could not map the request or evaluate a policy, not by the policies."""


@dataclass(frozen=True)
class Verdict:
    """What the check decided about one request of an assumed-role session."""

    service: str
    refused: Denial | None = None
    """The whole request is refused (the first denied authorization)."""
    statement_denials: Mapping[int, Denial] = field(default_factory=dict)
    """BatchExecuteStatement: the statements refused, by index; the others run."""
    missing_object_denied: Denial | None = None
    """An S3 GET or HEAD of an object whose role may not list the bucket: the 403 to send (and
    `IamCheck.record`) instead of a 404."""


class IamCheck:
    """The check `CompatMiddleware` makes of every request before it serves it, and its counters."""

    def __init__(self, mode: str = ENFORCE, sessions: SessionLookup = moto_session) -> None:
        if mode not in MODES:
            raise ValueError(f"{ENVIRONMENT_VARIABLE}={mode!r}: use {' or '.join(MODES)}")
        self.mode = mode
        self.sessions = sessions
        self._lock = threading.Lock()
        self.requests_checked = 0
        self.calls_denied = 0
        self.unevaluable = 0
        self._denials: Counter[str] = Counter()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> IamCheck:
        return cls(environ.get(ENVIRONMENT_VARIABLE, ENFORCE).strip().lower() or ENFORCE)

    def check(self, environ: dict[str, Any]) -> Verdict | None:
        """The verdict on a request, or None when it is not checked (IAM off, another caller)."""
        if self.mode == OFF:
            return None
        scope = signed_scope(environ)
        if scope is None:
            return None
        access_key, region, signing_service = scope
        session = self.sessions(access_key)
        if session is None:
            return None
        request = read_request(environ, region, session.account, session.partition, signing_service)
        context = session.context(region)
        try:
            needed = authorizations(request)
        except Unmapped as unmapped:
            operation = f"{request.service}:{request.operation or request.method}"
            because = f"because the local IAM check cannot map {unmapped}"
            unmapped_denial = self._deny(session, Authorization(operation, "*"), because, loud=True)
            return self._counted(Verdict(request.service, refused=unmapped_denial))
        refused = self._first_denial(session, needed.whole, context)
        statements: dict[int, Denial] = {}
        for index, needs in needed.per_statement.items():
            if (denial := self._first_denial(session, needs, context)) is not None:
                statements[index] = denial
        missing = None
        if needed.missing_object_listing is not None and refused is None:
            missing = self._decide(session, needed.missing_object_listing, context, record=False)
        return self._counted(Verdict(request.service, refused, statements, missing))

    def _counted(self, verdict: Verdict) -> Verdict:
        with self._lock:
            self.requests_checked += 1
        return verdict

    def _first_denial(
        self, session: Session, needed: Iterable[Authorization], context: tuple[tuple[str, str], ...]
    ) -> Denial | None:
        """The first of `needed` denied (AWS names one), or None when all are allowed."""
        return next(filter(None, (self._decide(session, a, context) for a in needed)), None)

    def _decide(
        self,
        session: Session,
        authorization: Authorization,
        context: tuple[tuple[str, str], ...],
        *,
        record: bool = True,
    ) -> Denial | None:
        """None when allowed, else the denial (counted and logged unless `record` is False: `record` later)."""
        try:
            decision = decided(session.policy_sets, authorization, context)
        except Unevaluable as what:
            reason = f"because the local IAM check cannot evaluate {what} (local/emulator/iam_check.py)"
            return self._deny(session, authorization, reason, loud=True)
        if decision.allowed:
            return None
        return self._deny(session, authorization, decision.because, record=record)

    def _deny(
        self, session: Session, authorization: Authorization, because: str, *, loud: bool = False, record: bool = True
    ) -> Denial:
        resource = authorization.resource
        shown = f'"{resource}"' if authorization.action.startswith("s3:") else resource
        message = (
            f"User: {session.arn} is not authorized to perform: {authorization.action} on resource: {shown} {because}"
        )
        denial = Denial(authorization, message, loud)
        if record:
            self.record(denial)
        return denial

    def record(self, denial: Denial) -> None:
        """Count a denial the caller was answered with; each distinct one is logged once."""
        with self._lock:
            self.calls_denied += 1
            self.unevaluable += int(denial.loud)
            first = denial.message not in self._denials
            if not first or len(self._denials) < REPORTED_DENIALS:
                self._denials[denial.message] += 1
        if first:  # however often it is retried
            log.log(logging.ERROR if denial.loud else logging.WARNING, "IAM denied: %s", denial.message)

    def report(self) -> dict[str, Any]:
        """``GET /_compat/iam``: the mode, how many requests of the functions' roles were checked,
        how many calls were denied (and how many for want of evaluating a policy), the denials."""
        with self._lock:
            return {
                "mode": self.mode,
                "requests_checked": self.requests_checked,
                "denied": self.calls_denied,
                "unevaluable": self.unevaluable,
                "denials": dict(self._denials.most_common(REPORTED_DENIALS)),
            }


# ------------------------------------------------------------------------- answers


def refusal(verdict: Verdict, denial: Denial, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
    """The service's AccessDenied answer to the whole request."""
    if verdict.service == "s3":
        return s3_access_denied(denial.message, environ, start_response)
    if verdict.service == "sns":  # SNS API Reference, Publish: AuthorizationError, HTTP 403
        return error_reply(environ, start_response, "403 Forbidden", "AuthorizationError", {"message": denial.message})
    if not environ.get("HTTP_X_AMZ_TARGET"):  # query protocol (STS): XML
        return error_reply(environ, start_response, "403 Forbidden", "AccessDenied", {"message": denial.message})
    return error_reply(environ, start_response, "400 Bad Request", "AccessDeniedException", {"message": denial.message})


def statement_error(denial: Denial) -> dict[str, str]:
    """The BatchStatementError of a refused statement (API Reference: BatchStatementError, Code ``AccessDenied``)."""
    return {"Code": "AccessDenied", "Message": denial.message}


def s3_access_denied(message: str, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
    """S3's HTTP 403 ``AccessDenied`` (REST-XML; a HEAD's answer has no body)."""
    request_id = uuid.uuid4().hex[:16].upper()
    escaped = message.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
        f"<Message>{escaped}</Message><RequestId>{request_id}</RequestId></Error>"
    ).encode()
    headers = [("Content-Type", "application/xml"), ("x-amz-request-id", request_id)]
    if environ.get("REQUEST_METHOD") == "HEAD":
        start_response("403 Forbidden", [*headers, ("Content-Length", "0")])
        return []
    start_response("403 Forbidden", [*headers, ("Content-Length", str(len(body)))])
    return [body]
