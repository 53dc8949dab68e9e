"""The local IAM check's evaluator and request mapping, without an emulator (`local.emulator.iam_check`).

What a call needs (action, resource ARN, request keys) and whether a role's policies allow it, as
AWS decides it: wildcards over real ARNs, an explicit Deny winning, boundaries and session policies
intersecting, conditions on present and absent keys; and anything the check cannot evaluate or map
refused, saying so, instead of allowed.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local.emulator import iam_check
from local.emulator.iam_check import (
    BOUNDARY,
    IDENTITY,
    SESSION,
    Authorization,
    IamCheck,
    PolicySet,
    Request,
    Session,
    Unevaluable,
    Unmapped,
    authorizations,
    condition_holds,
    decide,
    wildcard_matches,
)

ACCOUNT = "123456789012"
TABLE = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/State"
CONTEXT = {"aws:principalarn": f"arn:aws:iam::{ACCOUNT}:role/R", "aws:securetransport": "true"}


def policy(*statements: Mapping[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(action: str | list[str], resource: str | list[str], **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def identity(*documents: str) -> list[PolicySet]:
    return [PolicySet(IDENTITY, documents)]


def allowed(policy_sets: list[PolicySet], action: str, resource: str, **context: str) -> bool:
    return decide(policy_sets, Authorization(action, resource, tuple(context.items())), CONTEXT).allowed


# ------------------------------------------------------------------ wildcards


@cache
def reference_match(pattern: str, value: str) -> bool:
    """IAM's glob, written as the textbook recursion (no regular expressions)."""
    if not pattern:
        return not value
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        return reference_match(rest, value) or (bool(value) and reference_match(pattern, value[1:]))
    return bool(value) and (head == "?" or head == value[0]) and reference_match(rest, value[1:])


ARN_TEXT = st.text(alphabet="ab:/.-_+()[]$^\\|{}", max_size=10)


@settings(max_examples=500, deadline=None, database=None)
@given(pattern=st.text(alphabet="ab*?:/.+()[]$^\\", max_size=8), value=ARN_TEXT)
def test_wildcards_match_as_the_textbook_glob_with_every_other_character_literal(pattern: str, value: str) -> None:
    assert wildcard_matches(pattern, value) == reference_match(pattern, value)


@settings(max_examples=300, deadline=None, database=None)
@given(value=ARN_TEXT, data=st.data())
def test_any_slice_of_an_arn_replaced_by_a_star_or_one_character_by_a_question_mark_still_matches(
    value: str, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(value)))
    end = data.draw(st.integers(start, len(value)))
    assert wildcard_matches(value[:start] + "*" + value[end:], value)
    if value:
        at = data.draw(st.integers(0, len(value) - 1))
        assert wildcard_matches(value[:at] + "?" + value[at + 1 :], value)
    assert wildcard_matches(value, value)
    assert not wildcard_matches(value, value + "x")


TABLE_NAMES = st.text(alphabet="abcAB019_.-", min_size=3, max_size=8)
"""DynamoDB's table name characters: `.` and `-` must be literal in a pattern, not regex syntax."""


@settings(max_examples=200, deadline=None, database=None)
@given(tables=st.lists(TABLE_NAMES, min_size=1, max_size=6, unique=True), data=st.data())
def test_a_grant_on_some_tables_allows_exactly_those_and_never_their_indexes_or_longer_names(
    tables: list[str], data: st.DataObject
) -> None:
    granted = data.draw(st.lists(st.sampled_from(tables), unique=True))
    arn = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/{{}}".format
    policies = identity(policy(allow(["dynamodb:PutItem", "dynamodb:Query"], [arn(t) for t in granted])))
    for table in tables:
        assert allowed(policies, "dynamodb:PutItem", arn(table)) == (table in granted)
        assert not allowed(policies, "dynamodb:Query", arn(table) + "/index/ByValue")
        assert not allowed(policies, "dynamodb:PutItem", arn(table) + "x")
        assert not allowed(policies, "dynamodb:UpdateItem", arn(table))


def test_actions_match_case_insensitively_and_resources_case_sensitively() -> None:
    policies = identity(policy(allow("DynamoDB:put*", TABLE)))
    assert allowed(policies, "dynamodb:PutItem", TABLE)
    assert not allowed(policies, "dynamodb:PutItem", TABLE.replace("State", "state"))
    assert not allowed(policies, "dynamodb:UpdateItem", TABLE)


def test_a_table_grant_with_a_trailing_star_also_covers_its_indexes_and_streams() -> None:
    policies = identity(policy(allow("dynamodb:*", TABLE + "/*")))
    assert allowed(policies, "dynamodb:Query", TABLE + "/index/I")
    assert allowed(policies, "dynamodb:GetRecords", TABLE + "/stream/2026-01-01T00:00:00.000")
    assert not allowed(policies, "dynamodb:GetItem", TABLE)


# ------------------------------------------------------------------ decisions


def test_an_explicit_deny_in_any_policy_wins_and_nothing_allowed_is_an_implicit_deny() -> None:
    granting = policy(allow("dynamodb:*", TABLE))
    denying = policy({"Effect": "Deny", "Action": "dynamodb:DeleteItem", "Resource": "*"})
    decision = decide(identity(granting, denying), Authorization("dynamodb:DeleteItem", TABLE), CONTEXT)
    assert not decision.allowed and decision.because == "with an explicit deny in an identity-based policy"
    assert allowed(identity(granting, denying), "dynamodb:PutItem", TABLE)
    nothing = decide(identity(), Authorization("dynamodb:PutItem", TABLE), CONTEXT)
    assert nothing.because == "because no identity-based policy allows the dynamodb:PutItem action"


def test_not_action_and_not_resource() -> None:
    everything_but_deletes = policy({"Effect": "Allow", "NotAction": "dynamodb:Delete*", "Resource": TABLE})
    assert allowed(identity(everything_but_deletes), "dynamodb:PutItem", TABLE)
    assert not allowed(identity(everything_but_deletes), "dynamodb:DeleteItem", TABLE)
    all_but_state = policy({"Effect": "Allow", "Action": "dynamodb:PutItem", "NotResource": TABLE})
    assert not allowed(identity(all_but_state), "dynamodb:PutItem", TABLE)
    assert allowed(identity(all_but_state), "dynamodb:PutItem", TABLE + "2")


def test_a_permissions_boundary_and_a_session_policy_must_allow_too() -> None:
    role = policy(allow("dynamodb:*", "*"))
    boundary = PolicySet(BOUNDARY, (policy(allow("dynamodb:PutItem", "*")),))
    session = PolicySet(SESSION, (policy(allow(["dynamodb:PutItem", "dynamodb:GetItem"], TABLE)),))
    sets = [*identity(role), boundary, session]
    assert allowed(sets, "dynamodb:PutItem", TABLE)
    refused = decide(sets, Authorization("dynamodb:GetItem", TABLE), CONTEXT)
    assert refused.because == "because no permissions boundary allows the dynamodb:GetItem action"
    assert not allowed(sets, "dynamodb:PutItem", TABLE + "2")  # outside the session policy
    assert not allowed([*identity(), boundary], "dynamodb:PutItem", TABLE)  # a boundary grants nothing


# ------------------------------------------------------------------ conditions

PREFIXES = {"StringLikeIfExists": {"s3:prefix": ["metastore/registry*", "deltas/*"]}}
BUCKET = "arn:aws:s3:::archive"


def test_the_archive_roles_listing_condition_holds_for_its_prefixes_and_for_a_request_without_one() -> None:
    policies = identity(policy(allow("s3:ListBucket", BUCKET, Condition=PREFIXES)))
    assert allowed(policies, "s3:ListBucket", BUCKET, **{"s3:prefix": "metastore/registry/"})
    assert allowed(policies, "s3:ListBucket", BUCKET, **{"s3:prefix": "deltas/ab"})
    assert not allowed(policies, "s3:ListBucket", BUCKET, **{"s3:prefix": "metastore/other"})
    assert allowed(policies, "s3:ListBucket", BUCKET)  # IfExists: no prefix asked


@pytest.mark.parametrize(
    ("operator", "expected", "present", "absent"),
    [
        ("StringEquals", "a", {"a": True, "b": False}, False),
        ("StringNotEquals", "a", {"a": False, "b": True}, True),
        ("StringEqualsIgnoreCase", "A", {"a": True, "b": False}, False),
        ("StringLike", "a*", {"ab": True, "ba": False}, False),
        ("StringNotLike", "a*", {"ab": False, "ba": True}, True),
        ("StringLikeIfExists", "a*", {"ab": True, "ba": False}, True),
        ("StringNotEqualsIfExists", "a", {"a": False, "b": True}, True),
        ("Bool", "true", {"true": True, "False": False}, False),
        ("NumericLessThan", "10", {"9": True, "10": False, "x": False}, False),
        ("NumericGreaterThanEquals", "10", {"10": True, "9.5": False}, False),
        ("Null", "true", {"a": False}, True),
        ("Null", "false", {"a": True}, False),
    ],
)
def test_condition_operators_on_a_present_and_an_absent_key(
    operator: str, expected: str, present: dict[str, bool], absent: bool
) -> None:
    for value, holds in present.items():
        assert condition_holds(operator, "s3:prefix", expected, {"s3:prefix": value}) is holds, value
    assert condition_holds(operator, "s3:prefix", expected, {}) is absent


def test_arn_conditions_match_each_part_on_its_own() -> None:
    role = {"aws:principalarn": f"arn:aws:iam::{ACCOUNT}:role/Reduce"}
    assert condition_holds("ArnLike", "aws:PrincipalArn", "arn:aws:iam::*:role/Red*", role)
    assert not condition_holds("ArnLike", "aws:PrincipalArn", "arn:aws:*", role)  # a star stays in its part
    assert condition_holds("ArnNotEquals", "aws:PrincipalArn", ["arn:aws:iam::1:role/X"], role)
    assert condition_holds("StringEquals", "AWS:PrincipalArn", role["aws:principalarn"], role)  # keys: any case


@pytest.mark.parametrize(
    ("condition", "named"),
    [
        ({"StringEquals": {"s3:x-amz-server-side-encryption": "aws:kms"}}, "the condition key"),
        ({"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}, "the condition key"),
        ({"ForAnyValue:StringEquals": {"dynamodb:Attributes": "a"}}, "the condition operator"),
        ({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, "the condition operator"),
        ({"DateLessThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}}, "the condition operator"),
        ({"StringLike": {"s3:prefix": "home/${aws:username}/*"}}, "the policy variable"),
    ],
)
def test_a_condition_the_check_cannot_evaluate_is_refused_by_name_when_its_statement_applies(
    condition: dict[str, Any], named: str
) -> None:
    policies = identity(policy(allow("s3:*", BUCKET, Condition=condition)))
    with pytest.raises(Unevaluable, match=named):
        allowed(policies, "s3:ListBucket", BUCKET)
    assert not allowed(policies, "s3:ListBucket", BUCKET + "-other")  # another bucket: the statement is not read


def test_elements_outside_an_identity_policy_are_refused_by_name() -> None:
    for statement in (
        {**allow("s3:*", "*"), "Principal": "*"},
        {"Effect": "Allow", "Action": "s3:*"},
        allow("s3:*", "arn:aws:s3:::${aws:username}"),
    ):
        with pytest.raises(Unevaluable):
            allowed(identity(policy(statement)), "s3:GetObject", BUCKET + "/k")


# ------------------------------------------------------------------ mapping requests


def dynamodb(operation: str, body: Mapping[str, Any], service: str = "dynamodb") -> Request:
    return Request(service, operation, "us-east-1", ACCOUNT, "aws", body=body)


def needed(request: Request) -> list[tuple[str, str, dict[str, str]]]:
    found = authorizations(request)
    return [(a.action, a.resource, dict(a.context)) for a in found.whole]


def test_items_queries_and_batches_name_their_table_or_index() -> None:
    assert needed(dynamodb("PutItem", {"TableName": "State"})) == [("dynamodb:PutItem", TABLE, {})]
    assert needed(dynamodb("Query", {"TableName": "State", "IndexName": "I"})) == [
        ("dynamodb:Query", TABLE + "/index/I", {})
    ]
    assert needed(dynamodb("GetItem", {"TableName": TABLE})) == [("dynamodb:GetItem", TABLE, {})]
    batch: dict[str, Any] = {"RequestItems": {"State": {}, "Aggregate": {}}}
    assert [r for _, r, _ in needed(dynamodb("BatchGetItem", batch))] == [TABLE, TABLE.replace("State", "Aggregate")]
    assert needed(dynamodb("ListTables", {})) == [("dynamodb:ListTables", "*", {})]
    with pytest.raises(Unmapped, match="RestoreTableFromBackup"):
        authorizations(dynamodb("RestoreTableFromBackup", {"TargetTableName": "T"}))


def test_a_transaction_is_authorised_by_each_contained_request_with_its_enclosing_operation() -> None:
    items = [
        {"Put": {"TableName": "State"}},
        {"Update": {"TableName": "State"}},
        {"ConditionCheck": {"TableName": "State"}},
        {"Delete": {"TableName": "State"}},
    ]
    enclosing = {"dynamodb:enclosingoperation": "TransactWriteItems"}
    assert needed(dynamodb("TransactWriteItems", {"TransactItems": items})) == [
        (f"dynamodb:{action}", TABLE, enclosing)
        for action in ("PutItem", "UpdateItem", "ConditionCheckItem", "DeleteItem")
    ]


def test_partiql_is_authorised_per_statement_by_its_verb_on_the_table_or_index_it_names() -> None:
    statements = [
        {"Statement": "INSERT INTO \"State\" VALUE {'k': ?}"},
        {"Statement": 'update "State" SET v = ? WHERE k = ? AND Version < ?'},
        {"Statement": "DELETE FROM State WHERE k = ?"},
        {"Statement": 'SELECT "from", v FROM "State"."ByValue" WHERE k = ?'},
        {"Statement": 'INSERT INTO "Odd""Name" VALUE {\'k\': ?}'},
    ]
    per_statement = authorizations(dynamodb("BatchExecuteStatement", {"Statements": statements})).per_statement
    assert {index: [(a.action, a.resource) for a in needs] for index, needs in per_statement.items()} == {
        0: [("dynamodb:PartiQLInsert", TABLE)],
        1: [("dynamodb:PartiQLUpdate", TABLE)],
        2: [("dynamodb:PartiQLDelete", TABLE)],
        3: [("dynamodb:PartiQLSelect", TABLE + "/index/ByValue")],
        4: [("dynamodb:PartiQLInsert", TABLE.replace("State", 'Odd"Name'))],
    }
    assert needed(dynamodb("ExecuteStatement", statements[0])) == [("dynamodb:PartiQLInsert", TABLE, {})]
    with pytest.raises(Unmapped, match="PartiQL statement"):
        authorizations(dynamodb("ExecuteStatement", {"Statement": "EXISTS(SELECT * FROM T)"}))


def test_stream_reads_name_the_stream_their_iterator_was_issued_for() -> None:
    stream = TABLE + "/stream/2026-11-27T00:00:00.000"
    streams = dynamodb("GetRecords", {"ShardIterator": f"{stream}|1|c2VjcmV0"}, service="dynamodbstreams")
    assert needed(streams) == [("dynamodb:GetRecords", stream, {})]
    iterator = base64.b64encode(b"Ingest:shardId-000000000000:42:1234.5").decode()
    kinesis = dynamodb("GetRecords", {"ShardIterator": iterator}, service="kinesis")
    assert needed(kinesis) == [("kinesis:GetRecords", f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/Ingest", {})]
    assert needed(dynamodb("ListShards", {"StreamName": "Ingest"}, service="kinesis"))[0][1].endswith("stream/Ingest")


def s3(method: str, path: str, query: str = "", **headers: str) -> Request:
    parsed = {name: [value] for name, _, value in (part.partition("=") for part in query.split("&") if part)}
    return Request("s3", "", "us-east-1", ACCOUNT, "aws", method=method, path=path, query=parsed, headers=headers)


def test_s3_requests_name_their_object_or_bucket_and_the_listing_prefix() -> None:
    assert needed(s3("PUT", "/archive/deltas/a.json", "x-id=PutObject")) == [
        ("s3:PutObject", BUCKET + "/deltas/a.json", {})
    ]
    locked = s3("PUT", "/archive/deltas/a", **{"x-amz-object-lock-mode": "GOVERNANCE"})
    assert [a for a, _, _ in needed(locked)] == ["s3:PutObject", "s3:PutObjectRetention"]
    assert needed(s3("GET", "/archive", "list-type=2&prefix=metastore/registry/")) == [
        ("s3:ListBucket", BUCKET, {"s3:prefix": "metastore/registry/"})
    ]
    head = authorizations(s3("HEAD", "/archive/deltas/a"))
    assert [(a.action, a.resource) for a in head.whole] == [("s3:GetObject", BUCKET + "/deltas/a")]
    assert head.missing_object_listing == Authorization("s3:ListBucket", BUCKET)
    copy = s3("PUT", "/archive/b", **{"x-amz-copy-source": "/archive/a%20b?versionId=1"})
    assert needed(copy)[1] == ("s3:GetObjectVersion", BUCKET + "/a b", {})
    with pytest.raises(Unmapped, match="lifecycle"):
        authorizations(s3("PUT", "/archive", "lifecycle="))


def test_an_on_failure_destination_is_sent_to_with_send_message_or_publish_on_the_queue_or_topic() -> None:
    queue = f"arn:aws:sqs:us-east-1:{ACCOUNT}:failed"
    for queue_url in (
        f"http://localhost:4566/{ACCOUNT}/failed",
        f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/failed",
    ):
        for operation in ("SendMessage", "SendMessageBatch"):
            assert needed(dynamodb(operation, {"QueueUrl": queue_url}, service="sqs")) == [
                ("sqs:SendMessage", queue, {})
            ]
    other_account = needed(dynamodb("SendMessage", {"QueueUrl": "http://localhost/210987654321/q"}, service="sqs"))
    assert other_account == [("sqs:SendMessage", "arn:aws:sqs:us-east-1:210987654321:q", {})]
    topic = f"arn:aws:sns:eu-west-1:{ACCOUNT}:failed"
    assert needed(dynamodb("Publish", {"Action": "Publish", "TopicArn": topic}, service="sns")) == [
        ("sns:Publish", topic, {})
    ]


def test_other_services_are_refused_rather_than_let_through() -> None:
    with pytest.raises(Unmapped, match="the SQS operation ReceiveMessage"):
        authorizations(Request("sqs", "ReceiveMessage", "us-east-1", ACCOUNT, "aws", body={"QueueUrl": "q"}))
    with pytest.raises(Unmapped, match="the SNS operation Subscribe"):
        authorizations(Request("sns", "Subscribe", "us-east-1", ACCOUNT, "aws", body={"TopicArn": "t"}))
    with pytest.raises(Unmapped, match="requests to lambda"):
        authorizations(Request("lambda", "", "us-east-1", ACCOUNT, "aws"))
    assert authorizations(Request("sts", "GetCallerIdentity", "us-east-1", ACCOUNT, "aws")).whole == ()


# ------------------------------------------------------------------ the check


SESSION_ARN = f"arn:aws:sts::{ACCOUNT}:assumed-role/R/reduce"


def a_session(document: str) -> Session:
    return Session(SESSION_ARN, CONTEXT["aws:principalarn"], ACCOUNT, "aws", "AROA:reduce", tuple(identity(document)))


def environ(access_key: str, target: str, body: Mapping[str, Any]) -> dict[str, Any]:
    raw = json.dumps(body).encode()
    return {
        "HTTP_AUTHORIZATION": f"AWS4-HMAC-SHA256 Credential={access_key}/20261127/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0",
        "HTTP_X_AMZ_TARGET": target,
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
    }


def test_only_sessions_of_assumed_roles_are_checked_and_denials_are_counted_with_aws_message() -> None:
    sessions = {"ASIAREDUCE": a_session(policy(allow("dynamodb:PutItem", TABLE)))}
    check = IamCheck(sessions=sessions.get)
    put = {"TableName": "State", "Item": {}}
    assert check.check(environ("testing", "DynamoDB_20120810.DeleteItem", put)) is None
    assert check.check(environ("ASIAREDUCE", "DynamoDB_20120810.PutItem", put)) == iam_check.Verdict("dynamodb")
    verdict = check.check(environ("ASIAREDUCE", "DynamoDB_20120810.DeleteItem", put))
    assert verdict is not None and verdict.refused is not None
    assert verdict.refused.message == (
        f"User: {SESSION_ARN} is not authorized to perform: dynamodb:DeleteItem on resource: {TABLE} "
        "because no identity-based policy allows the dynamodb:DeleteItem action"
    )
    report = check.report()
    assert (report["mode"], report["requests_checked"], report["denied"], report["unevaluable"]) == ("enforce", 2, 1, 0)
    assert report["denials"] == {verdict.refused.message: 1}
    assert IamCheck(mode="off", sessions=sessions.get).check(environ("ASIAREDUCE", "X.DeleteItem", put)) is None
    with pytest.raises(ValueError, match="EMULATOR_IAM"):
        IamCheck(mode="audit")


def test_a_body_cut_short_by_a_client_killed_while_sending_it_is_left_to_the_service_to_refuse() -> None:
    check = IamCheck(sessions={"ASIAREDUCE": a_session(policy())}.get)
    cut = environ("ASIAREDUCE", "DynamoDB_20120810.UpdateItem", {"TableName": "State", "Key": {}})
    for sent in (20, 0):  # killed within the body, or after the headers
        cut["wsgi.input"] = io.BytesIO(json.dumps({"TableName": "State", "Key": {}}).encode()[:sent])
        assert check.check(cut) == iam_check.Verdict("dynamodb")  # moto fails it, applying nothing
    assert check.report()["denied"] == 0


def test_an_unmapped_request_and_an_unevaluable_policy_are_refused_and_counted_apart() -> None:
    unevaluable = policy(allow("dynamodb:*", "*", Condition={"StringEquals": {"dynamodb:LeadingKeys": "a"}}))
    check = IamCheck(sessions={"ASIAREDUCE": a_session(unevaluable)}.get)
    verdict = check.check(environ("ASIAREDUCE", "DynamoDB_20120810.PutItem", {"TableName": "State"}))
    assert verdict is not None and verdict.refused is not None and verdict.refused.loud
    assert re.search(r"cannot evaluate the condition key dynamodb:LeadingKeys", verdict.refused.message)
    verdict = check.check(environ("ASIAREDUCE", "DynamoDB_20120810.CreateBackup", {"BackupName": "b"}))
    assert verdict is not None and verdict.refused is not None and "cannot map" in verdict.refused.message
    assert check.report()["unevaluable"] == 2
